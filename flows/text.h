// Small text conversions shared by flow files and the runtime config:
// `${NAME}` substitution, durations ("250ms", "3s", "1m", "1h") and sizes
// ("512KiB", "1MiB", plain bytes); and the two digest helpers every folder uses (one copy:
// sha256_hex, constant_time_equals; OpenSSL's libcrypto). Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace weir::flows {

// Looks a variable up; the default reads the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Replaces `${NAME}` and `${NAME:-default}` in `text`. On a missing variable without a
// default returns nullopt and sets `error` to a message naming the variable.
// `$$` stands for a literal `$`.
std::optional<std::string> substitute_env(std::string_view text, const EnvLookup& env, std::string* error);

// "250ms", "3s", "1.5s", "1m", "1h", "100us"; a bare number is milliseconds.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

// Lowercase hex SHA-256 of `bytes` ("" only if OpenSSL fails).
std::string sha256_hex(std::string_view bytes);

// True when `a == b`, for tokens and other secrets. Timing depends on the two lengths only,
// never on where the contents differ or whether the lengths match (the compare is of
// digests, with CRYPTO_memcmp).
bool constant_time_equals(std::string_view a, std::string_view b);

// Percent-encodes everything but RFC 3986's unreserved characters (A-Z a-z 0-9 - _ . ~):
// for query values and form bodies.
std::string url_encode(std::string_view text);
// "512KiB", "1MiB", "1GiB", "10KB", "1MB", or a plain number of bytes.
std::optional<int64_t> parse_size(std::string_view text);

}  // namespace weir::flows
