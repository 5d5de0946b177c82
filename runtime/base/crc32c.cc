// crc32c: CRC-32C with the CPU's instruction when it has one (docs/adr/0286-body-checksums.md).
#include "runtime/base/crc32c.h"

#include <boost/crc.hpp>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace weir {

namespace {

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(std::string_view bytes) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  uint64_t c = 0xFFFFFFFFu;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word = 0;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = _mm_crc32_u8(c32, static_cast<unsigned char>(*p));
  return c32 ^ 0xFFFFFFFFu;
}

bool has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2") != 0;
  return has;
}
#endif

}  // namespace

uint32_t crc32c_portable(std::string_view bytes) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

uint32_t crc32c(std::string_view bytes) {
#if defined(__x86_64__)
  if (has_sse42()) return crc32c_sse42(bytes);
#endif
  return crc32c_portable(bytes);
}

std::string crc32c_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  uint32_t c = crc32c(bytes);
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, c >>= 4) out[static_cast<size_t>(i)] = kDigits[c & 0xF];
  return out;
}

bool parse_crc32c_hex(std::string_view text, uint32_t* out) {
  if (text.size() != 8) return false;
  uint32_t v = 0;
  for (char ch : text) {
    uint32_t d = 0;
    if (ch >= '0' && ch <= '9') d = static_cast<uint32_t>(ch - '0');
    else if (ch >= 'a' && ch <= 'f') d = static_cast<uint32_t>(ch - 'a' + 10);
    else if (ch >= 'A' && ch <= 'F') d = static_cast<uint32_t>(ch - 'A' + 10);
    else return false;
    v = (v << 4) | d;
  }
  *out = v;
  return true;
}

}  // namespace weir
