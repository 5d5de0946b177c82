// Helpers on JSON values shared by the interpreter, the steps and the test runner:
// number classification (int64 vs double), type names for messages, UTF-8 checks,
// short renderings of values for error messages, sha-256.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace weir::flows {

using Json = nlohmann::json;

// The language has two number types: int64 and double. A JSON unsigned integer that
// fits int64 is an int; one above INT64_MAX counts as a double.
inline bool get_int(const Json& j, int64_t* out) {
  switch (j.type()) {
    case Json::value_t::number_integer: *out = j.get_ref<const Json::number_integer_t&>(); return true;
    case Json::value_t::number_unsigned: {
      auto u = j.get_ref<const Json::number_unsigned_t&>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return false;
      *out = static_cast<int64_t>(u);
      return true;
    }
    default: return false;
  }
}

inline bool is_int(const Json& j) {
  int64_t unused;
  return get_int(j, &unused);
}

// Any number (int, unsigned or double) as a double.
inline double get_double(const Json& j) {
  switch (j.type()) {
    case Json::value_t::number_integer: return static_cast<double>(j.get_ref<const Json::number_integer_t&>());
    case Json::value_t::number_unsigned: return static_cast<double>(j.get_ref<const Json::number_unsigned_t&>());
    case Json::value_t::number_float: return j.get_ref<const Json::number_float_t&>();
    default: return 0;
  }
}

// "null", "bool", "number", "string", "array", "object".
const char* type_name(const Json& j);

// A value rendered for an error message: compact JSON, cut at `max` bytes (on a
// UTF-8 boundary) with "..." appended. Never throws, also not on invalid UTF-8.
std::string brief(const Json& j, size_t max = 60);

// Compact JSON that never throws (invalid UTF-8 is replaced by U+FFFD).
std::string dump_safe(const Json& j);

// Valid UTF-8 (no overlongs, no surrogates, at most U+10FFFF)? On false, `*bad`
// holds the offset of the first invalid byte.
bool valid_utf8(std::string_view s, size_t* bad = nullptr);

// Length of the valid UTF-8 sequence starting at s[i] (1 for ASCII; no overlong, no
// surrogate, at most U+10FFFF), 0 when none does. valid_utf8 is this over the whole text.
size_t utf8_sequence_length(std::string_view s, size_t i);

// Number of code points (counts each invalid byte as one).
size_t utf8_length(std::string_view s);

// Appends the UTF-8 encoding of `cp` (which must be a scalar value).
void append_utf8(std::string* out, uint32_t cp);

// Deep equality with numbers compared by value across int and double (1 == 1.0).
bool values_equal(const Json& a, const Json& b);

}  // namespace weir::flows
