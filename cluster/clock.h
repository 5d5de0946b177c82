// Clock: an injectable monotonic clock, so lease logic is tested without sleeping.
//
// Contract: `now()` is steady (never goes back) and is safe to call from any thread.
// Lease, Singleton and FlowRegistry read time only through a Clock; production code passes
// `Clock::steady()`, tests pass a `ManualClock` they advance by hand. Time points are
// process-local: they are never sent to another process or compared across processes
// (leases measure only durations, each on its own clock).
#pragma once

#include <atomic>
#include <chrono>

namespace weir::cluster {

class Clock {
 public:
  using Duration = std::chrono::steady_clock::duration;
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;

  // The process-wide real clock (std::chrono::steady_clock). Lives forever.
  static const Clock& steady();
};

class SteadyClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
};

inline const Clock& Clock::steady() {
  static const SteadyClock clock;
  return clock;
}

// A clock that moves only when told. Thread-safe: tests advance it from the test
// thread while other threads read it.
class ManualClock final : public Clock {
 public:
  // Starts well away from the epoch so that `now() - some_duration` stays meaningful.
  explicit ManualClock(TimePoint start = TimePoint(std::chrono::hours(24))) : ns_(start.time_since_epoch().count()) {}

  TimePoint now() const override { return TimePoint(Duration(ns_.load(std::memory_order_acquire))); }
  void advance(Duration d) { ns_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  std::atomic<Duration::rep> ns_;
};

}  // namespace weir::cluster
