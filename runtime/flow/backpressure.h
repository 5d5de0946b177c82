// Backpressure at ingress (docs/adr/0080-backlog-admission.md).
//
// Every source writes through FlowIngest, which asks its flow's FlowBacklog before each
// publish. An event is refused (503 + Retry-After at http-in; broker sources do not
// acknowledge) when
//  - the flow's backlog — what its stream holds: `.in` not yet run plus `.out.<sink>`
//    not yet delivered — is at `max_bytes` or `max_messages`, or
//  - the process has `max_pending` ingress publishes waiting for their PubAck, or
//  - (opt-in, `max_delay` > 0) the flow is delivering, and its backlog would take longer
//    than `max_delay` to drain at the rate it drained lately: the backlog is then bounded by
//    that rate × max_delay, in events (never below kMinDelayBound messages), which bounds the queueing
//    delay — and so end-to-end latency — of a flow that keeps up less fast than its senders.
//    Until a rate is known (start, after an idle spell) the floor applies. A flow that
//    drained nothing from a non-empty stream in the last refresh (sinks down, flow paused)
//    keeps only the size bounds: it stores for later delivery (docs/adr/0085-backlog-delay-bound.md).
//
// Checking costs no NATS round trip: BacklogMonitor's thread reads each flow stream's
// state every `interval` on the control-plane connection and stores it in atomics. The
// estimate a check uses never undercounts what this process wrote: between refreshes
// every admitted publish is added (in flight, then stored), and a refresh subtracts only
// what was stored before its request left. Writes of other cluster members show up at
// the next refresh.
//
// Threading: FlowBacklog is lock-free and safe from any thread. BacklogMonitor::watch /
// the destructor from any thread; the refresh runs on the monitor's own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <condition_variable>
#include <vector>

#include "runtime/nats/bus.h"
#include "runtime/base/metrics.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

struct BackpressureOptions {
  int64_t max_bytes = 0;                    // per flow backlog in stream bytes; 0 = no bound
  int64_t max_messages = 0;                 // per flow backlog in messages; 0 = no bound
  int64_t max_pending = 0;                  // ingress publishes awaiting a PubAck, whole process; 0 = no cap
  std::chrono::milliseconds interval{200};  // stream state refresh
  std::chrono::milliseconds max_delay{0};   // backlog.max_delay; 0 = no delay bound
};

// The delay bound never goes below this many stream messages: one flow pull batch of the
// smallest size (256) and its outputs — the sink's deliveries in flight (max_connections,
// 8 by default) fit in that — so the bound does not throttle throughput. It is also the
// bound until a rate is known. Not higher: at 6,000–7,000 deliveries/s the floor was 2,048
// (~300 ms of queue) and held the 64-connection bench over a 250 ms max_delay (ADR 0085,
// update of 2026-12-03).
inline constexpr int64_t kMinDelayBound = 512;

class FlowBacklog {
 public:
  FlowBacklog(std::string stream, const BackpressureOptions& options, std::atomic<int64_t>& process_pending,
              StageMetrics* metrics)
      : stream_(std::move(stream)), options_(options), process_pending_(process_pending), metrics_(metrics) {
    if (options_.max_delay.count() > 0) delay_bound_.store(kMinDelayBound, std::memory_order_relaxed);
  }

  const std::string& stream() const { return stream_; }

  // Admits one publish of about `bytes` stream bytes, or returns false with the reason
  // (the event must then not be published). An admitted publish must be completed.
  bool admit(int64_t bytes, std::string* why);
  void completed(int64_t bytes, bool stored);

  // From the monitor: stream state read by a request sent after `stored_before` was taken.
  int64_t stored_marker() const { return stored_bytes_.load(std::memory_order_acquire); }
  int64_t stored_msgs_marker() const { return stored_msgs_.load(std::memory_order_acquire); }
  // `last_seq`: the stream's last sequence (its growth is what was added, by anyone);
  // `at`: when the state was read. Updates the drain rate and the delay bound.
  void refreshed(int64_t stream_bytes, int64_t stream_msgs, int64_t stored_bytes_before, int64_t stored_msgs_before,
                 uint64_t last_seq = 0, std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now());

  // What a check compares (for metrics).
  int64_t backlog_bytes() const;
  int64_t backlog_messages() const;
  // At its size bounds (max_bytes or max_messages), with `why` as admit() says it: a chained
  // flow writing into this stream waits (FlowStage::set_output_full, ADR 0080).
  bool full(std::string* why) const;
  // Dead-letter replay writes into the stream without going through ingress (ADR 0298): it
  // asks whether `bytes` more stay within the size bounds (not the pending cap, not the delay
  // bound) and, once the write is stored, adds it so the estimate counts it before the next
  // refresh. One writer at a time; `why` as admit() says it.
  bool has_room(int64_t bytes, std::string* why) const;
  void add_stored(int64_t bytes);
  // Stream messages removed (delivered/acked) per second, smoothed; 0 while stalled.
  double drain_rate() const { return drain_rate_.load(std::memory_order_relaxed); }
  // The message bound from max_delay in force now; 0 = none (off, stalled, or no rate yet).
  int64_t delay_bound() const { return delay_bound_.load(std::memory_order_relaxed); }

 private:
  void reject();

  std::string stream_;
  BackpressureOptions options_;
  std::atomic<int64_t>& process_pending_;
  StageMetrics* metrics_;                                  // the flow's ingress stage; may be null
  std::atomic<int64_t> base_bytes_{0}, base_msgs_{0};      // stream state at the last refresh
  std::atomic<int64_t> stored_bytes_{0}, stored_msgs_{0};  // stored by this process since then
  std::atomic<int64_t> inflight_bytes_{0}, inflight_msgs_{0};
  // Drain-rate state: written by the monitor thread only (refreshed), read by admit.
  bool have_last_ = false;
  int64_t last_msgs_ = 0;
  uint64_t last_seq_ = 0;
  std::chrono::steady_clock::time_point last_at_{};
  double msgs_per_event_ = 2;  // an input and one output until measured
  std::atomic<double> drain_rate_{0};
  std::atomic<int64_t> delay_bound_{0};  // set in the constructor: the floor while max_delay is on
};

class BacklogMonitor {
 public:
  // Pending ingress publishes are counted in `metrics.ingress_pending`.
  BacklogMonitor(Bus& bus, Metrics& metrics, BackpressureOptions options);
  ~BacklogMonitor();  // stops and joins the thread
  BacklogMonitor(const BacklogMonitor&) = delete;
  BacklogMonitor& operator=(const BacklogMonitor&) = delete;

  const BackpressureOptions& options() const { return options_; }
  // A backlog for `stream`, refreshed until the last owner drops it. The first refresh
  // happens before this returns, so the first check is not against an empty state.
  // `metrics` (the flow's ingress stage, may be null) gets the rejections and gauges.
  std::shared_ptr<FlowBacklog> watch(const std::string& stream, StageMetrics* metrics);

 private:
  void loop();
  void refresh(FlowBacklog& b);
  bool stopping() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return stopping_;
  }

  Bus& bus_;
  BackpressureOptions options_;
  std::atomic<int64_t>& pending_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::weak_ptr<FlowBacklog>> watched_ GUARDED_BY(mu_);
  std::thread thread_;
};

// Stream bytes JetStream charges for one message (file store: record header, subject,
// headers, payload, checksum), rounded up so the estimate errs on the full side.
int64_t stored_size(std::string_view subject, std::string_view data, const Headers& headers);

}  // namespace weir
