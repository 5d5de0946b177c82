// SinkHealth: one sink's circuit breaker (docs/adr/0294-sink-circuit-breaker.md).
//
//   closed ──N retryable failures in a row, or a Retry-After──▶ open
//   open ──probe due──▶ one probe in flight ──answered──▶ closed
//                                           └─failed───▶ open, next probe later (doubling, jitter)
//   any ──pause()──▶ paused ──resume()──▶ closed
//
// While the sink is open or paused its stage takes nothing new from JetStream: events
// wait there, durable, with no attempt counted against them. An open sink sends one
// probe (the oldest waiting event) when the probe is due. A receiver's answer that is
// not retryable (a 4xx other than 408/429) is an answer: the receiver is up.
//
// Pure logic over a steady clock the caller passes in; thread-safe (one mutex). Every
// transition is logged once, with the flow and sink names.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/base/thread_annotations.h"

namespace weir {

enum class SinkState { kClosed = 0, kOpen = 1, kPaused = 2 };
const char* sink_state_name(SinkState s);  // "closed", "open", "paused"

// How long the results behind a sink's health word are remembered
// (docs/adr/0313-sink-health-from-recent-results.md).
inline constexpr std::chrono::seconds kRecentResults{10};

struct CircuitOptions {
  int failures_to_open = 5;                           // retryable failures in a row
  std::chrono::milliseconds probe_first{1000};        // the first probe after opening
  std::chrono::milliseconds probe_max{60000};         // the probe interval doubles up to this
  std::chrono::milliseconds retry_after_cap{600000};  // the longest Retry-After honoured
};

// What GET /sinks, `weir sink status`, /status and the dashboard show of one sink.
struct SinkHealthView {
  SinkState state = SinkState::kClosed;
  int64_t since_ms = 0;       // wall clock (ms since the epoch) of the last transition; 0: never left closed
  int64_t next_probe_ms = 0;  // wall clock of the next probe; 0 when none is planned (closed, paused, probing)
  bool probing = false;       // a probe is on the wire
  std::string last_error;     // the last retryable failure's reason ("" when none yet)
  int consecutive_failures = 0;
  uint64_t transitions = 0;
  std::chrono::milliseconds not_closed{0};  // time spent open or paused, in all
  // Results of the last kRecentResults: delivered, and not delivered (a retryable failure,
  // or a refusal that dead-letters the event).
  uint64_t recent_delivered = 0;
  uint64_t recent_failed = 0;
};

// The one word an operator reads (ADR 0313): "paused", "down" (open), and for a closed
// circuit from the recent results: "failing" (half or more failed), "degraded" (some
// failed), else "healthy" (no failure, or no result at all).
const char* sink_health_word(const SinkHealthView& v);
// The failed share of the recent results, 0 when there were none.
double recent_failure_share(const SinkHealthView& v);

class SinkHealth {
 public:
  using Clock = std::chrono::steady_clock;
  SinkHealth(std::string flow, std::string sink, CircuitOptions options = {});

  // The receiver answered (accepted, or refused for good: `delivered` false). Closes an
  // open sink when `probe` (the probe's answer) or when it was open anyway. True when
  // this closed it.
  bool answered(Clock::time_point now, bool probe, bool delivered = true);
  // A retryable failure. `retry_after`: the receiver asked to wait that long (capped):
  // the whole sink is open until then. True when the sink is held (open or paused) after it.
  bool failed(Clock::time_point now, const std::string& reason, std::optional<std::chrono::milliseconds> retry_after,
              bool probe);
  // By hand (admin API, CLI). pause(): true when it was not paused. resume(): closed
  // again, and the next failures count afresh; true when it was paused.
  bool pause(Clock::time_point now);
  bool resume(Clock::time_point now);

  // A broker sink's connection is down (docs/adr/0315-broker-sink-health.md): a closed
  // circuit opens at once, without waiting for failures (a delivery could only fail), and
  // no probe is planned — the connection coming back is the probe. True when this opened it.
  bool broker_down(Clock::time_point now, const std::string& reason);
  // The broker is back: an open circuit's probe is due now, not after its doubling wait.
  void broker_up(Clock::time_point now);

  SinkState state() const;
  bool held() const { return state() != SinkState::kClosed; }
  // Open, no probe on the wire and the next one due: takes the probe slot (the caller
  // sends one event as the probe and reports it with probe = true).
  bool take_probe(Clock::time_point now);
  // The probe could not be sent (nothing is waiting yet): gives the slot back, due at once.
  void return_probe(Clock::time_point now);
  // When the next probe is due; nullopt when none is planned.
  std::optional<Clock::time_point> next_probe() const;
  SinkHealthView view(Clock::time_point now) const;

 private:
  void set_state(Clock::time_point now, SinkState s) REQUIRES(mu_);
  void schedule_probe(Clock::time_point now, std::chrono::milliseconds at_least) REQUIRES(mu_);
  // One result into its second's bucket of the recent window.
  void count_result(Clock::time_point now, bool delivered) REQUIRES(mu_);

  // One bucket a second over kRecentResults, indexed by the second modulo their count.
  struct Bucket {
    int64_t second = -1;
    uint64_t delivered = 0, failed = 0;
  };
  static constexpr size_t kBuckets = static_cast<size_t>(kRecentResults.count());

  const std::string flow_, sink_;
  const CircuitOptions options_;
  mutable Mutex mu_;
  SinkState state_ GUARDED_BY(mu_) = SinkState::kClosed;
  Clock::time_point since_ GUARDED_BY(mu_){};
  int64_t since_wall_ms_ GUARDED_BY(mu_) = 0;
  int failures_ GUARDED_BY(mu_) = 0;                       // retryable failures in a row
  std::chrono::milliseconds interval_ GUARDED_BY(mu_){0};  // the probe interval in force
  std::optional<Clock::time_point> next_probe_ GUARDED_BY(mu_);
  bool probing_ GUARDED_BY(mu_) = false;
  std::string last_error_ GUARDED_BY(mu_);
  uint64_t transitions_ GUARDED_BY(mu_) = 0;
  Clock::duration not_closed_ GUARDED_BY(mu_){0};  // closed periods excluded, the current one too
  std::array<Bucket, kBuckets> recent_ GUARDED_BY(mu_){};
};

}  // namespace weir
