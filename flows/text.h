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
#include <vector>

namespace weir::flows {

// Looks a variable up; the default reads the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Replaces `${NAME}` and `${NAME:-default}` in `text`. On a missing variable without a
// default returns nullopt and sets `error` to a message naming the variable.
// `$$` stands for a literal `$`.
std::optional<std::string> substitute_env(std::string_view text, const EnvLookup& env, std::string* error);

// "250ms", "3s", "1.5s", "1m", "1h", "100us". A number needs its unit: "5" is refused
// (it was once milliseconds, which made `timeout: 5` a silent 5 ms), and so is "0" (a setting
// where 0 means "no limit" checks for it first; runtime/base/config.cc's dlq.max_age).
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);
// The units parse_duration accepts, for messages.
inline constexpr std::string_view kDurationUnits = "us, ms, s, m, h";
// A hint for a text parse_duration refused: for a bare number, "needs a unit: write 5s or
// 5ms (units: us, ms, s, m, h)"; otherwise "units: us, ms, s, m, h".
std::string duration_hint(std::string_view text);

// Edit distance (insert, delete, substitute, swap two neighbours), for "did you mean" hints.
size_t edit_distance(std::string_view a, std::string_view b);
// The candidates within a distance that still reads as a typo of `word` (none for 1–2
// letters, 1 edit up to 5 letters, 2 beyond), nearest first (ties in the given order).
std::vector<std::string> closest_names(std::string_view word, const std::vector<std::string>& candidates);
// "did you mean X?" / "did you mean X or Y?" (each in double quotes when `quoted`), or ""
// when no candidate is near.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates, bool quoted);

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
