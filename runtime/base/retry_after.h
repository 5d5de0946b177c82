// Retry-After (RFC 9110 §10.2.3), the one reading for every HTTP connector: the HTTP sink
// (a 429/503 answer delays the retry) and the poll source (a 429/503 delays the next poll).
// Here rather than in either connector because connectors/<kind>/ never includes another
// connector's folder (docs/development.md, Layout).
//
// Pure apart from curl_getdate (libcurl's HTTP-date parser, loaded on first use: ADR 0161);
// any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>

namespace weir {

// Longest header value kept; a longer one is malformed (a caller that stores the raw
// header may cut it to this).
inline constexpr size_t kMaxRetryAfterValue = 64;

// `Retry-After` as delta-seconds ("120") or an HTTP date; a date in the past gives 0.
// nullopt when malformed. Capped at one day. Blanks around the value are ignored.
std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value,
                                                           std::chrono::system_clock::time_point now);

}  // namespace weir
