// runtime/retry_after: the one reading of Retry-After, for the HTTP sink's retries and the
// poll source's next poll (the sink's use end to end: tests/connectors/http/, a 503 with
// the header delays the retry).
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <string>

#include "runtime/base/retry_after.h"

using weir::parse_retry_after;
using namespace std::chrono_literals;

namespace {
// Wed, 21 Oct 2015 07:28:00 GMT
const auto kNow = std::chrono::system_clock::from_time_t(1445412480);
}  // namespace

TEST_CASE("parse_retry_after reads delta-seconds", "[retry_after]") {
  CHECK(parse_retry_after("120", kNow) == std::optional(120000ms));
  CHECK(parse_retry_after(" 5 ", kNow) == std::optional(5000ms));
  CHECK(parse_retry_after("\t7\r\n", kNow) == std::optional(7000ms));
  CHECK(parse_retry_after("0", kNow) == std::optional(0ms));
  CHECK(parse_retry_after("86400", kNow) == std::optional<std::chrono::milliseconds>(24h));
  CHECK(parse_retry_after("86401", kNow) == std::optional<std::chrono::milliseconds>(24h));  // capped
  CHECK(parse_retry_after("99999999999999999999", kNow) == std::optional<std::chrono::milliseconds>(24h));
}

TEST_CASE("parse_retry_after reads HTTP dates against now", "[retry_after]") {
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", kNow) == std::optional(30000ms));
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:20:00 GMT", kNow) == std::optional(0ms));  // past
  CHECK(parse_retry_after("Thu, 22 Oct 2015 07:28:00 GMT", kNow) == std::optional<std::chrono::milliseconds>(24h));
  CHECK(parse_retry_after("Fri, 30 Oct 2015 07:28:00 GMT", kNow) == std::optional<std::chrono::milliseconds>(24h));
}

TEST_CASE("parse_retry_after refuses malformed values", "[retry_after]") {
  CHECK_FALSE(parse_retry_after("", kNow).has_value());
  CHECK_FALSE(parse_retry_after("   ", kNow).has_value());
  CHECK_FALSE(parse_retry_after("-1", kNow).has_value());
  CHECK_FALSE(parse_retry_after("1.5", kNow).has_value());
  CHECK_FALSE(parse_retry_after("soon", kNow).has_value());
  CHECK_FALSE(parse_retry_after("12abc", kNow).has_value());
  CHECK_FALSE(parse_retry_after(std::string(65, '1'), kNow).has_value());  // past kMaxRetryAfterValue
}
