// wall_ms() / wall_ns(): milliseconds / nanoseconds since the Unix epoch, from the system
// clock — for stamps that leave the process (event ids, audit records, event bodies) or are
// compared with ones that come in (JetStream's stored times). Never for measuring a
// duration: the system clock may step; std::chrono::steady_clock measures. Header-only,
// any thread. The one copy for runtime/, connectors/ and cluster/ (flows/, the leaf, keeps
// its own in flows/tables.cc).
#pragma once

#include <chrono>
#include <cstdint>

namespace weir {

inline int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline uint64_t wall_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

}  // namespace weir
