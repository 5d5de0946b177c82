// TokenBucket: paces takes to `rate` per second, with up to `burst` at once after an idle
// spell — the HTTP sink's `rate:` (docs/connectors.md, docs/adr/0296-per-instance-rate-limits.md).
//
// Kept as GCRA (the generic cell rate algorithm, a token bucket written as one "theoretical
// arrival time"): one timestamp and two constants, no floating point per take. A take is
// allowed when the time it would be due is at most `(burst - 1)` intervals ahead of now; it
// then moves that time on by one interval. In any span t at most `burst + rate × t` takes
// succeed; while takers keep asking, the long-run rate is `rate`, within the rounding of the
// interval to whole nanoseconds (≤ 0.5 ns per interval: 0.05 % at the highest rate, 1e6/s).
//
// The clock is the caller's: every call takes `now`, so tests drive it by hand and the
// sink passes std::chrono::steady_clock::now(). Not thread-safe: one owner (the sink's loop
// thread). Header-only: the take is a few instructions and sits on the delivery path.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>

namespace weir {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  // The burst a sink gets for `rate_per_s` when none is given: 100 ms worth of the rate,
  // at least 2. A loop that wakes late (a loaded machine, a long turn) then catches up
  // instead of losing the time: with a burst of 1 every late wake-up would be lost for good
  // and a 10/s limit would deliver ~9.5/s on a busy box. 100 ms of the rate is a small
  // share of any second a receiver counts in.
  static int64_t default_burst(double rate_per_s) {
    return std::max<int64_t>(2, static_cast<int64_t>(std::ceil(rate_per_s * 0.1)));
  }

  // rate_per_s > 0 (one interval must fit in int64 nanoseconds), burst >= 1; both are
  // checked by the flow loader (flows/loader.cc), clamped here.
  explicit TokenBucket(double rate_per_s, int64_t burst = 0)
      : interval_(std::max<int64_t>(1, std::llround(1e9 / rate_per_s))),
        burst_(burst >= 1 ? burst : default_burst(rate_per_s)),
        tolerance_(interval_ * (burst_ - 1)) {}

  // Takes one token at `now`; false (and nothing taken) when none is there.
  bool try_take(TimePoint now) {
    const TimePoint due = std::max(tat_, now);
    if (due - now > tolerance_) return false;
    tat_ = due + interval_;
    return true;
  }

  // The earliest time a try_take() will succeed; `now` or earlier when one would now.
  TimePoint next_token(TimePoint now) const {
    if (tat_ <= now) return now;  // also the untouched bucket: tat_ - tolerance_ would underflow
    return std::max(now, tat_ - tolerance_);
  }

  std::chrono::nanoseconds interval() const { return interval_; }
  int64_t burst() const { return burst_; }

 private:
  std::chrono::nanoseconds interval_;
  int64_t burst_;
  std::chrono::nanoseconds tolerance_;
  TimePoint tat_ = TimePoint::min();  // when the next take is due; min: a full bucket
};

}  // namespace weir
