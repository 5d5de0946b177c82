#include "flows/time_format.h"

#include <cstdio>

namespace weir::flows {

// Howard Hinnant's algorithms (public domain), exact for the whole int64 range we use.
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

void civil_from_days(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = static_cast<int64_t>(yoe) + era * 400 + (*m <= 2);
}

namespace {

bool leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

unsigned days_in_month(int64_t y, unsigned m) {
  static constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && leap(y) ? 29 : kDays[m - 1];
}

bool digits(std::string_view s, size_t at, size_t n, int* out) {
  if (at + n > s.size()) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = s[at + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

bool parse_rfc3339(std::string_view s, int64_t* ms, std::string* error) {
  auto bad = [&](const char* why) {
    if (error) *error = std::string("not an RFC 3339 timestamp (") + why + ")";
    return false;
  };
  int y, mo, d, h = 0, mi = 0, sec = 0;
  if (!digits(s, 0, 4, &y) || s.size() < 10 || s[4] != '-' || !digits(s, 5, 2, &mo) || s[7] != '-' ||
      !digits(s, 8, 2, &d)) {
    return bad("expected YYYY-MM-DD");
  }
  if (mo < 1 || mo > 12) return bad("month out of range");
  if (d < 1 || static_cast<unsigned>(d) > days_in_month(y, static_cast<unsigned>(mo))) {
    return bad("day out of range");
  }
  int64_t frac_ms = 0;
  int64_t offset_min = 0;
  if (s.size() > 10) {
    char t = s[10];
    if (t != 'T' && t != 't' && t != ' ') return bad("expected T between date and time");
    if (!digits(s, 11, 2, &h) || s.size() < 19 || s[13] != ':' || !digits(s, 14, 2, &mi) || s[16] != ':' ||
        !digits(s, 17, 2, &sec)) {
      return bad("expected HH:MM:SS");
    }
    if (h > 23 || mi > 59 || sec > 60) return bad("time out of range");
    if (sec == 60) sec = 59;  // a leap second counts as the second before it
    size_t i = 19;
    if (i < s.size() && s[i] == '.') {
      ++i;
      size_t start = i;
      int64_t scale = 100;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        frac_ms += (s[i] - '0') * scale;
        scale /= 10;
        ++i;
      }
      if (i == start) return bad("expected digits after '.'");
    }
    if (i >= s.size()) return bad("missing time zone (Z or +HH:MM)");
    if (s[i] == 'Z' || s[i] == 'z') {
      ++i;
    } else if (s[i] == '+' || s[i] == '-') {
      int oh, om;
      if (!digits(s, i + 1, 2, &oh) || i + 3 >= s.size() || s[i + 3] != ':' || !digits(s, i + 4, 2, &om)) {
        return bad("expected +HH:MM");
      }
      if (oh > 23 || om > 59) return bad("offset out of range");
      offset_min = (oh * 60 + om) * (s[i] == '-' ? -1 : 1);
      i += 6;
    } else {
      return bad("expected Z or +HH:MM");
    }
    if (i != s.size()) return bad("unexpected text at the end");
  }
  int64_t days = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  int64_t secs = days * 86400 + h * 3600 + mi * 60 + sec - offset_min * 60;
  *ms = secs * 1000 + frac_ms;
  return true;
}

bool format_time(int64_t ms, std::string_view fmt, std::string* out, std::string* error) {
  // Years 0..9999: -62167219200000 .. 253402300799999 ms.
  if (ms < -62167219200000LL || ms > 253402300799999LL) {
    if (error) *error = "time out of range (years 0 to 9999)";
    return false;
  }
  int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
  auto milli = static_cast<int>(ms - secs * 1000);
  int64_t days = secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
  auto sod = static_cast<int>(secs - days * 86400);
  int64_t y;
  unsigned m, d;
  civil_from_days(days, &y, &m, &d);
  int h = sod / 3600, mi = sod / 60 % 60, s = sod % 60;
  static constexpr const char* kDay[] = {"Thursday", "Friday", "Saturday", "Sunday", "Monday", "Tuesday", "Wednesday"};
  static constexpr const char* kMonth[] = {"January", "February", "March",     "April",   "May",      "June",
                                           "July",    "August",   "September", "October", "November", "December"};
  int64_t wd = days % 7;
  if (wd < 0) wd += 7;
  int yday = static_cast<int>(days - days_from_civil(y, 1, 1)) + 1;
  std::string r;
  char buf[32];
  auto put = [&](const char* f, long long v) {
    std::snprintf(buf, sizeof buf, f, v);
    r += buf;
  };
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c != '%') {
      r.push_back(c);
      continue;
    }
    if (++i >= fmt.size()) {
      if (error) *error = "format ends with a lone %";
      return false;
    }
    switch (fmt[i]) {
      case 'Y': put("%04lld", y); break;
      case 'y': put("%02lld", y % 100); break;
      case 'm': put("%02lld", m); break;
      case 'd': put("%02lld", d); break;
      case 'e': put("%2lld", d); break;
      case 'H': put("%02lld", h); break;
      case 'I': put("%02lld", h % 12 == 0 ? 12 : h % 12); break;
      case 'p': r += h < 12 ? "AM" : "PM"; break;
      case 'M': put("%02lld", mi); break;
      case 'S': put("%02lld", s); break;
      case 'L': put("%03lld", milli); break;
      case 'f': put("%06lld", milli * 1000LL); break;
      case 'j': put("%03lld", yday); break;
      case 'a': r.append(kDay[wd], 3); break;
      case 'A': r += kDay[wd]; break;
      case 'b': r.append(kMonth[m - 1], 3); break;
      case 'B': r += kMonth[m - 1]; break;
      case 'Z': r += "UTC"; break;
      case 'z': r += "+0000"; break;
      case 's': put("%lld", secs); break;
      case 'F':
        put("%04lld", y);
        put("-%02lld", m);
        put("-%02lld", d);
        break;
      case 'T':
        put("%02lld", h);
        put(":%02lld", mi);
        put(":%02lld", s);
        break;
      case '%': r.push_back('%'); break;
      default:
        if (error) {
          auto ch = static_cast<unsigned char>(fmt[i]);
          *error = ch < 0x80 && ch >= 0x20 ? std::string("unknown conversion %") + fmt[i] + " in format"
                                           : std::string("unknown conversion in format");
        }
        return false;
    }
  }
  *out = std::move(r);
  return true;
}

}  // namespace weir::flows
