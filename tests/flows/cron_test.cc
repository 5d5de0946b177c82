// CronSchedule: parsing and the next-time computation (UTC).
#include <catch2/catch.hpp>

#include <chrono>
#include <random>

#include "flows/cron.h"

using weir::flows::CronSchedule;

namespace {

int64_t utc_ms(int y, unsigned mo, unsigned d, int h = 0, int mi = 0, int s = 0) {
  using namespace std::chrono;
  const sys_days date = year{y} / month{mo} / day{d};
  return duration_cast<milliseconds>(date.time_since_epoch() + hours{h} + minutes{mi} + seconds{s}).count();
}

int64_t next(const char* expr, int64_t after) {
  std::string error;
  auto c = CronSchedule::parse(expr, &error);
  INFO(error);
  REQUIRE(c);
  return c->next_after(after);
}

}  // namespace

TEST_CASE("cron: next time for common expressions", "[cron]") {
  // 2026-01-01 is a Thursday.
  CHECK(next("* * * * *", utc_ms(2026, 1, 1, 0, 0, 30)) == utc_ms(2026, 1, 1, 0, 1));
  CHECK(next("*/15 * * * *", utc_ms(2026, 1, 1, 10, 7)) == utc_ms(2026, 1, 1, 10, 15));
  CHECK(next("*/15 * * * *", utc_ms(2026, 1, 1, 10, 45)) == utc_ms(2026, 1, 1, 11, 0));
  CHECK(next("0 9 * * 1-5", utc_ms(2026, 1, 2, 10, 0)) == utc_ms(2026, 1, 5, 9, 0));  // Fri → Mon
  CHECK(next("30 2 1 * *", utc_ms(2026, 1, 15)) == utc_ms(2026, 2, 1, 2, 30));
  CHECK(next("0 0 1 1 *", utc_ms(2026, 6, 1)) == utc_ms(2027, 1, 1));
  CHECK(next("0 0 29 2 *", utc_ms(2026, 3, 1)) == utc_ms(2028, 2, 29));
  CHECK(next("0-30/10 * * * *", utc_ms(2026, 1, 1, 10, 31)) == utc_ms(2026, 1, 1, 11, 0));
  CHECK(next("5/20 * * * *", utc_ms(2026, 1, 1, 10, 26)) == utc_ms(2026, 1, 1, 10, 45));
  CHECK(next("1,2,58 * * * *", utc_ms(2026, 1, 1, 10, 2)) == utc_ms(2026, 1, 1, 10, 58));
}

TEST_CASE("cron: strictly after, even on a matching minute", "[cron]") {
  CHECK(next("*/5 * * * *", utc_ms(2026, 1, 1, 10, 5)) == utc_ms(2026, 1, 1, 10, 10));
  CHECK(next("*/5 * * * *", utc_ms(2026, 1, 1, 10, 5) - 1) == utc_ms(2026, 1, 1, 10, 5));
}

TEST_CASE("cron: day-of-month and day-of-week match either when both are restricted", "[cron]") {
  // The 13th or any Friday: the first is Friday 2 January 2026.
  CHECK(next("0 12 13 * 5", utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 2, 12, 0));
  // Only Fridays (day-of-month unrestricted).
  CHECK(next("0 12 * * FRI", utc_ms(2026, 1, 3)) == utc_ms(2026, 1, 9, 12, 0));
  // Only the 13th (day-of-week unrestricted).
  CHECK(next("0 12 13 * *", utc_ms(2026, 1, 3)) == utc_ms(2026, 1, 13, 12, 0));
}

TEST_CASE("cron: names and Sunday as 0 or 7", "[cron]") {
  CHECK(next("0 0 * JAN,jul SUN", utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 4));
  CHECK(next("0 0 * * 7", utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 4));
  CHECK(next("0 0 * * 0", utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 4));
  CHECK(next("0 0 1 feb-mar *", utc_ms(2026, 2, 2)) == utc_ms(2026, 3, 1));
}

TEST_CASE("cron: bad expressions are clear errors", "[cron]") {
  struct Case {
    const char* expr;
    const char* needle;
  };
  const Case cases[] = {
      {"", "5"},
      {"* * * *", "expected 5"},
      {"* * * * * *", "expected 5"},
      {"60 * * * *", "minute"},
      {"* 24 * * *", "hour"},
      {"* * 0 * *", "day-of-month"},
      {"* * 32 * *", "day-of-month"},
      {"* * * 13 *", "month"},
      {"* * * * 8", "day-of-week"},
      {"*/0 * * * *", "step"},
      {"5-1 * * * *", "minute"},
      {"0 22-2 * * *", "hour"},
      {"a * * * *", "minute"},
      {"1,,2 * * * *", "empty"},
      {"* * * FOO *", "month"},
      {"0 0 30 2 *", "never"},
      {"0 0 31 4,6,9,11 *", "never"},
  };
  for (const Case& c : cases) {
    std::string error;
    auto r = CronSchedule::parse(c.expr, &error);
    INFO(c.expr);
    REQUIRE_FALSE(r);
    CHECK(error.find(c.needle) != std::string::npos);
  }
}

TEST_CASE("cron: next_after agrees with a minute-by-minute scan", "[cron]") {
  const char* exprs[] = {"*/7 3-5 * * *", "0 */6 1,15 * *", "15 10 * 2 MON-WED", "*/30 * 29-31 * *",
                         "0 0 * * 6",     "59 23 31 12 *",  "0 12 1 */3 *",      "10-20/5 8 * * 1,3,5"};
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> when(utc_ms(2024, 1, 1), utc_ms(2027, 1, 1));
  for (const char* expr : exprs) {
    auto c = CronSchedule::parse(expr, nullptr);
    REQUIRE(c);
    for (int i = 0; i < 20; ++i) {
      const int64_t after = when(rng);
      int64_t minute = after / 60000 + 1;
      while (!c->matches(minute)) ++minute;
      INFO(expr << " after " << after);
      CHECK(c->next_after(after) == minute * 60000);
    }
  }
}

TEST_CASE("cron: the @ macros are the five-field schedules they stand for", "[cron]") {
  // 2026-01-01 is a Thursday; the next Sunday is 2026-01-04.
  const int64_t t = utc_ms(2026, 1, 1, 10, 7);
  CHECK(next("@hourly", t) == utc_ms(2026, 1, 1, 11, 0));
  CHECK(next("@daily", t) == utc_ms(2026, 1, 2));
  CHECK(next("@midnight", t) == utc_ms(2026, 1, 2));
  CHECK(next("@weekly", t) == utc_ms(2026, 1, 4));
  CHECK(next("@monthly", t) == utc_ms(2026, 2, 1));
  CHECK(next("@yearly", t) == utc_ms(2027, 1, 1));
  CHECK(next("@annually", t) == utc_ms(2027, 1, 1));
  std::string error;
  CHECK_FALSE(CronSchedule::parse("@every_minute", &error));
  CHECK(error.find("unknown macro") != std::string::npos);
  auto c = CronSchedule::parse("@hourly", &error);
  REQUIRE(c);
  CHECK(c->text() == "@hourly");
}

TEST_CASE("cron: impossible dates are refused", "[cron]") {
  for (const char* expr :
       {"0 0 30 2 *", "0 0 31 2 *", "0 0 31 4 *", "0 0 31 6 *", "0 0 31 9 *", "0 0 31 11 *", "0 0 30,31 2 *"}) {
    std::string error;
    INFO(expr);
    CHECK_FALSE(CronSchedule::parse(expr, &error));
    CHECK(error.find("never matches a date") != std::string::npos);
  }
  // Feb 29 exists in leap years: a valid schedule.
  CHECK(CronSchedule::parse("0 0 29 2 *", nullptr));
}
