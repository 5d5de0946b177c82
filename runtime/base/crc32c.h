// crc32c: the CRC-32C (Castagnoli) of a byte string — the checksum a stored message's
// Weir-Sum header carries (docs/adr/0286-body-checksums.md).
//
// With SSE4.2 (checked once, at the first call) the CPU's crc32 instruction does it, eight
// bytes a step; elsewhere Boost.CRC's table. Both give the same value (the runtime tests
// compare them on random data and check the standard test vector).
//
// Threading: any thread; no state after the first call.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace weir {

uint32_t crc32c(std::string_view bytes);
uint32_t crc32c_portable(std::string_view bytes);  // Boost.CRC only: the reference

// The CRC-32C of `bytes` as 8 lowercase hex digits (the Weir-Sum header's value).
std::string crc32c_hex(std::string_view bytes);
// Reads 8 hex digits (either case); false for anything else.
bool parse_crc32c_hex(std::string_view text, uint32_t* out);

}  // namespace weir
