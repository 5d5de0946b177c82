// RFC 3339 timestamps and strftime-style formatting in UTC, for the time() and
// format_time() functions. Pure functions; thread-safe (no locale, no TZ database).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace weir::flows {

// "2026-01-01T00:00:00Z", "2026-01-01T01:30:00.250+01:30", "2026-01-01 00:00:00z",
// "2026-01-01" (midnight UTC) → milliseconds since the Unix epoch. Fractions beyond
// milliseconds are truncated. False with `*error` on anything else.
bool parse_rfc3339(std::string_view text, int64_t* ms, std::string* error);

// Formats `ms` (milliseconds since the epoch, UTC). Conversions: %Y %m %d %H %M %S
// %L (milliseconds, 3 digits) %f (microseconds, 6 digits) %j %y %e %a %A %b %B %p %I
// %Z (UTC) %z (+0000) %s (epoch seconds) %F (%Y-%m-%d) %T (%H:%M:%S) %%.
// Years 0 to 9999 only. False with `*error` on an unknown conversion or a year out of range.
bool format_time(int64_t ms, std::string_view fmt, std::string* out, std::string* error);

inline constexpr std::string_view kDefaultTimeFormat = "%Y-%m-%dT%H:%M:%S.%LZ";

// Days since 1970-01-01 of a civil date (proleptic Gregorian), and back.
int64_t days_from_civil(int64_t y, unsigned m, unsigned d);
void civil_from_days(int64_t z, int64_t* y, unsigned* m, unsigned* d);

}  // namespace weir::flows
