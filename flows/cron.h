// CronSchedule: a parsed cron expression and its next-time computation — the one cron
// grammar of weir: `weir validate` (the loader) and the timer source both use it, so a
// flow that validates runs.
//
// Macros: @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly.
// Fields: minute (0-59) hour (0-23) day-of-month (1-31) month (1-12 or JAN-DEC)
// day-of-week (0-7 or SUN-SAT; 0 and 7 are Sunday). Each field is `*`, a value, a range
// `a-b`, a step `*/n`, `a-b/n` or `a/n` (a to the field's maximum), or a comma list of
// those. As in Vixie cron, when both day fields are restricted a day matches if either
// does. Times are UTC. Immutable after parse; safe to share between threads.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>

#include <optional>

namespace weir::flows {

class CronSchedule {
 public:
  // nullopt with *error set on bad input. Errors name the field and the offending text; an
  // expression that can never match (say `0 0 30 2 *`) is an error too.
  static std::optional<CronSchedule> parse(std::string_view text, std::string* error);

  // The first matching minute strictly after `after_ms` (Unix epoch milliseconds, UTC),
  // in epoch milliseconds; -1 when none within the next eight years.
  int64_t next_after(int64_t after_ms) const;

  bool matches(int64_t epoch_minute) const;  // minutes since the epoch, UTC
  const std::string& text() const { return text_; }

 private:
  bool day_matches(int64_t day_number) const;  // days since the epoch

  std::string text_;
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;     // 1..31
  std::bitset<13> months_;   // 1..12
  std::bitset<7> weekdays_;  // 0..6, Sunday = 0
  bool days_restricted_ = false;
  bool weekdays_restricted_ = false;
};

}  // namespace weir::flows
