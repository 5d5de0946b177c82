// runtime/base/token_bucket.h: the HTTP sink's `rate:` (ADR 0296), on a clock the test
// moves by hand. The sink's use end to end, with a real receiver measuring the arrival
// rate: tests/integration/rate_limit_test.cc.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/base/token_bucket.h"

using weir::TokenBucket;
using namespace std::chrono_literals;

namespace {

const TokenBucket::TimePoint kStart = TokenBucket::TimePoint(1000h);

// A deterministic late wake-up of 0 … max_late: a loop on a loaded machine never wakes
// exactly when its timer is due.
struct Lateness {
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  std::chrono::nanoseconds max_late;
  std::chrono::nanoseconds next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return std::chrono::nanoseconds(static_cast<int64_t>((state >> 33) % (max_late.count() + 1)));
  }
};

// A taker that always has work: takes while it can, then sleeps until next_token() and
// wakes late. The times of its successful takes over `span`.
std::vector<TokenBucket::TimePoint> run(TokenBucket& bucket, std::chrono::nanoseconds span, Lateness late) {
  std::vector<TokenBucket::TimePoint> taken;
  TokenBucket::TimePoint now = kStart;
  while (now < kStart + span) {
    while (bucket.try_take(now)) taken.push_back(now);
    now = bucket.next_token(now) + late.next();
  }
  return taken;
}

}  // namespace

TEST_CASE("token bucket: a full bucket gives its burst at once, then one per interval", "[token_bucket]") {
  TokenBucket b(100, 5);  // 10 ms interval
  CHECK(b.interval() == 10ms);
  CHECK(b.burst() == 5);
  for (int i = 0; i < 5; ++i) CHECK(b.try_take(kStart));
  CHECK_FALSE(b.try_take(kStart));
  CHECK(b.next_token(kStart) == kStart + 10ms);
  CHECK_FALSE(b.try_take(kStart + 9ms));
  CHECK(b.try_take(kStart + 10ms));
  CHECK_FALSE(b.try_take(kStart + 10ms));
  CHECK(b.next_token(kStart + 10ms) == kStart + 20ms);
  // Idle for a long time: the bucket refills to its burst, not beyond.
  const auto later = kStart + 1h;
  CHECK(b.next_token(later) == later);
  int got = 0;
  while (b.try_take(later)) ++got;
  CHECK(got == 5);
}

TEST_CASE("token bucket: the default burst is 100 ms of the rate, at least 2", "[token_bucket]") {
  CHECK(TokenBucket::default_burst(0.5) == 2);
  CHECK(TokenBucket::default_burst(10) == 2);
  CHECK(TokenBucket::default_burst(50) == 5);
  CHECK(TokenBucket::default_burst(2000) == 200);
  CHECK(TokenBucket::default_burst(5000) == 500);
  CHECK(TokenBucket(2000).burst() == 200);
  // Per minute and per hour are per-second rates below one: the interval is exact.
  CHECK(TokenBucket(30.0 / 60).interval() == 2s);
  CHECK(TokenBucket(1000.0 / 3600).interval() == 3600ms);
}

TEST_CASE("token bucket: the rate is held within 1 % from 10/s to 5000/s with late wake-ups", "[token_bucket]") {
  for (double rate : {10.0, 50.0, 100.0, 500.0, 1000.0, 2000.0, 3000.0, 5000.0}) {
    for (auto max_late : {0ns, std::chrono::nanoseconds(1ms), std::chrono::nanoseconds(20ms)}) {
      INFO("rate " << rate << "/s, wake-ups up to " << max_late.count() << " ns late");
      TokenBucket bucket(rate);
      const auto taken = run(bucket, 20s, Lateness{.max_late = max_late});
      // Past the first burst: from the take after the burst to the last one.
      const auto first = static_cast<size_t>(bucket.burst());
      REQUIRE(taken.size() > first + 100);
      const double seconds = std::chrono::duration<double>(taken.back() - taken[first]).count();
      const double measured = static_cast<double>(taken.size() - 1 - first) / seconds;
      CHECK(measured == Approx(rate).epsilon(0.01));
      // Over the whole run, burst included: never more than burst + rate × t.
      const double whole = std::chrono::duration<double>(taken.back() - kStart).count();
      CHECK(static_cast<double>(taken.size()) <= static_cast<double>(bucket.burst()) + rate * whole + 1);
    }
  }
}

TEST_CASE("token bucket: in any one second at most rate + burst takes succeed", "[token_bucket]") {
  TokenBucket bucket(200);  // burst 20
  // Takers that come and go: bursts after idle spells, late wake-ups in between.
  std::vector<TokenBucket::TimePoint> taken;
  Lateness late{.max_late = std::chrono::nanoseconds(30ms)};
  TokenBucket::TimePoint now = kStart;
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 50; ++i) {
      while (bucket.try_take(now)) taken.push_back(now);
      now = bucket.next_token(now) + late.next();
    }
    now += (round % 3) * 150ms;  // idle: the bucket refills
  }
  size_t lo = 0;
  size_t most = 0;
  for (size_t hi = 0; hi < taken.size(); ++hi) {
    while (taken[hi] - taken[lo] >= 1s) ++lo;
    most = std::max(most, hi - lo + 1);
  }
  CHECK(most <= 200 + 20);
}

TEST_CASE("token bucket: a slow taker never builds up more than the burst", "[token_bucket]") {
  TokenBucket bucket(1000, 10);
  TokenBucket::TimePoint now = kStart;
  for (int i = 0; i < 100; ++i) {
    CHECK(bucket.try_take(now));
    now += 5ms;  // slower than the rate: every take succeeds, nothing is saved up past 10
  }
  int got = 0;
  while (bucket.try_take(now)) ++got;
  CHECK(got == 10);
}
