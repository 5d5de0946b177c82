// Event bodies a receiver can check on their own: a pad that differs from event to event
// and its FNV-1a, so a swapped, cut or mixed-up body fails its own checksum at the
// receiver (big_backlog_test.cc, fault_proxy_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace weir::itest {

inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// `size` letters, different for every n.
inline std::string pad_for(int n, size_t size) {
  std::string pad(size, 'a');
  uint64_t x = 88172645463325252ull + static_cast<uint64_t>(n);
  for (auto& c : pad) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>('a' + x % 26);
  }
  return pad;
}

}  // namespace weir::itest
