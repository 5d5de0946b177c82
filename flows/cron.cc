#include "flows/cron.h"

#include <array>
#include <chrono>
#include <cctype>
#include <utility>
#include <vector>

namespace weir::flows {

namespace {

using namespace std::chrono;

constexpr int64_t kMinuteMs = 60000;
constexpr int64_t kDayMinutes = 24 * 60;
constexpr int64_t kHorizonMinutes = int64_t{8} * 366 * kDayMinutes;

constexpr std::array<const char*, 12> kMonthNames = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                                     "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
constexpr std::array<const char*, 7> kDayNames = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

struct FieldSpec {
  const char* name;
  int min;
  int max;
  const char* const* names;  // nullptr, or names for min..min+count-1
  int name_count;
};

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

// A number or (where the field has them) a name; -1 when it is neither.
int parse_value(std::string_view s, const FieldSpec& f) {
  if (s.empty()) return -1;
  if (std::isdigit(static_cast<unsigned char>(s[0]))) {
    if (s.size() > 2) return -1;
    int v = 0;
    for (char c : s) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
      v = v * 10 + (c - '0');
    }
    return v;
  }
  if (f.names == nullptr || s.size() != 3) return -1;
  for (int i = 0; i < f.name_count; ++i) {
    bool same = true;
    for (int j = 0; j < 3; ++j) {
      if (std::toupper(static_cast<unsigned char>(s[j])) != f.names[i][j]) same = false;
    }
    if (same) return f.min + i;
  }
  return -1;
}

// Sets the bits of one field; an error message on bad input.
template <size_t N>
bool parse_field(std::string_view text, const FieldSpec& f, std::bitset<N>* bits, std::string* error) {
  const std::string where = std::string(f.name) + " field '" + std::string(text) + "'";
  if (text.empty()) {
    *error = "cron: empty " + std::string(f.name) + " field";
    return false;
  }
  for (std::string_view item : split(text, ',')) {
    if (item.empty()) {
      *error = "cron: " + where + ": empty list item";
      return false;
    }
    int step = 1;
    std::string_view range = item;
    const size_t slash = item.find('/');
    if (slash != std::string_view::npos) {
      std::string_view step_text = item.substr(slash + 1);
      range = item.substr(0, slash);
      if (step_text.empty() || step_text.size() > 2) {
        *error = "cron: " + where + ": bad step";
        return false;
      }
      step = 0;
      for (char c : step_text) {
        if (!std::isdigit(static_cast<unsigned char>(c))) {
          *error = "cron: " + where + ": bad step";
          return false;
        }
        step = step * 10 + (c - '0');
      }
      if (step == 0) {
        *error = "cron: " + where + ": step must be > 0";
        return false;
      }
    }
    int lo = f.min;
    int hi = f.max;
    if (range == "*") {
      // whole range
    } else {
      const size_t dash = range.find('-');
      if (dash == std::string_view::npos) {
        lo = parse_value(range, f);
        if (lo < 0) {
          *error = "cron: " + where + ": '" + std::string(range) + "' is not a value";
          return false;
        }
        hi = slash != std::string_view::npos ? f.max : lo;  // `a/n` runs to the maximum
      } else {
        lo = parse_value(range.substr(0, dash), f);
        hi = parse_value(range.substr(dash + 1), f);
        if (lo < 0 || hi < 0) {
          {
            *error = "cron: " + where + ": '" + std::string(range) + "' is not a range";
            return false;
          }
        }
      }
    }
    if (lo < f.min || hi > f.max || lo > hi) {
      {
        *error = "cron: " + where + ": out of range " + std::to_string(f.min) + "-" + std::to_string(f.max);
        return false;
      }
    }
    for (int v = lo; v <= hi; v += step) bits->set(static_cast<size_t>(v));
  }
  return true;
}

// The five fields a macro stands for (Vixie cron's list); nullptr when it is none.
const char* expand_macro(std::string_view text) {
  static constexpr std::pair<std::string_view, const char*> kMacros[] = {
      {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
      {"@daily", "0 0 * * *"},  {"@midnight", "0 0 * * *"}, {"@hourly", "0 * * * *"}};
  for (const auto& [name, fields] : kMacros) {
    if (text == name) return fields;
  }
  return nullptr;
}

}  // namespace

std::optional<CronSchedule> CronSchedule::parse(std::string_view text, std::string* error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  const std::string original(text);
  if (!text.empty() && text[0] == '@') {
    const char* fields = expand_macro(text);
    if (fields == nullptr) {
      *error = "cron: unknown macro '" + original +
               "' (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)";
      return std::nullopt;
    }
    text = fields;
  }
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) fields.push_back(text.substr(start, i - start));
  }
  if (fields.size() != 5) {
    *error = "cron: '" + original + "' has " + std::to_string(fields.size()) +
             " fields; expected 5 (minute hour day-of-month month day-of-week) or a macro such as @hourly";
    return std::nullopt;
  }
  CronSchedule c;
  c.text_ = original;
  const FieldSpec minute{"minute", 0, 59, nullptr, 0};
  const FieldSpec hour{"hour", 0, 23, nullptr, 0};
  const FieldSpec day{"day-of-month", 1, 31, nullptr, 0};
  const FieldSpec month{"month", 1, 12, kMonthNames.data(), 12};
  const FieldSpec weekday{"day-of-week", 0, 7, kDayNames.data(), 7};
  std::bitset<8> weekdays;
  if (!parse_field(fields[0], minute, &c.minutes_, error) || !parse_field(fields[1], hour, &c.hours_, error) ||
      !parse_field(fields[2], day, &c.days_, error) || !parse_field(fields[3], month, &c.months_, error) ||
      !parse_field(fields[4], weekday, &weekdays, error)) {
    return std::nullopt;
  }
  for (size_t d = 0; d < 7; ++d) c.weekdays_[d] = weekdays[d];
  if (weekdays[7]) c.weekdays_.set(0);  // 7 is Sunday too
  // Vixie cron: a day field counts as restricted unless it starts with '*'.
  c.days_restricted_ = fields[2][0] != '*';
  c.weekdays_restricted_ = fields[4][0] != '*';
  if (c.next_after(0) < 0) {
    *error = "cron: '" + original + "' never matches a date";
    return std::nullopt;
  }
  return c;
}

bool CronSchedule::day_matches(int64_t day_number) const {
  const sys_days day{days(day_number)};
  const year_month_day ymd(day);
  if (!months_[static_cast<unsigned>(ymd.month())]) return false;
  const bool dom = days_[static_cast<unsigned>(ymd.day())];
  const bool dow = weekdays_[weekday(day).c_encoding()];
  if (days_restricted_ && weekdays_restricted_) return dom || dow;
  if (days_restricted_) return dom;
  if (weekdays_restricted_) return dow;
  return true;
}

bool CronSchedule::matches(int64_t epoch_minute) const {
  const int64_t day_number = floor_div(epoch_minute, kDayMinutes);
  const int minute_of_day = static_cast<int>(epoch_minute - day_number * kDayMinutes);
  return day_matches(day_number) && hours_[minute_of_day / 60] && minutes_[minute_of_day % 60];
}

int64_t CronSchedule::next_after(int64_t after_ms) const {
  int64_t minute = floor_div(after_ms, kMinuteMs) + 1;
  const int64_t limit = minute + kHorizonMinutes;
  while (minute <= limit) {
    const int64_t day_number = floor_div(minute, kDayMinutes);
    const sys_days day{days(day_number)};
    const year_month_day ymd(day);
    if (!months_[static_cast<unsigned>(ymd.month())]) {
      const year_month next_month = year_month(ymd.year(), ymd.month()) + months(1);
      minute = int64_t{sys_days(next_month / 1).time_since_epoch().count()} * kDayMinutes;
      continue;
    }
    const int64_t day_start = day_number * kDayMinutes;
    if (!day_matches(day_number)) {
      minute = day_start + kDayMinutes;
      continue;
    }
    const int minute_of_day = static_cast<int>(minute - day_start);
    const int hour = minute_of_day / 60;
    if (!hours_[hour]) {
      minute = day_start + (hour + 1) * 60;
      continue;
    }
    if (!minutes_[minute_of_day % 60]) {
      ++minute;
      continue;
    }
    return minute * kMinuteMs;
  }
  return -1;
}

}  // namespace weir::flows
