// Metrics: counters and latency histograms per flow and stage, rendered as
// Prometheus text. Recording is lock-free (relaxed atomics) and safe from any thread;
// stage handles are created at start-up and live as long as the registry.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "runtime/base/thread_annotations.h"

namespace weir {

class Histogram {
 public:
  // Bucket upper bounds in seconds (Prometheus `le`).
  static constexpr std::array<double, 16> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  void observe(std::chrono::nanoseconds d);
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

struct StageMetrics {
  std::string flow, stage;            // stage: "ingress", "flow", "sink:<name>"
  std::atomic<uint64_t> received{0};  // events that entered the stage
  std::atomic<uint64_t> acked{0};     // events done (output persisted / delivered)
  std::atomic<uint64_t> errors{0};    // failed attempts (nak, 503 answered, flow error)
  std::atomic<uint64_t> dead{0};      // sent to the dead-letter stream
  std::atomic<uint64_t> dropped{0};   // filtered out or dropped on error
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> lag{0};  // messages waiting in the consumer (last fetch)
  // ingress only: refused by backpressure, and the flow's backlog as last checked (ADR 0080)
  std::atomic<uint64_t> rejected{0};
  std::atomic<int64_t> backlog_bytes{0};
  std::atomic<int64_t> backlog_events{0};
  // backlog.max_delay (ADR 0085): the message bound in force (0 = none: off, or stalled and
  // only the size bounds apply) and the stream messages removed per second it comes from
  std::atomic<int64_t> backlog_delay_bound{0};
  std::atomic<int64_t> backlog_drain_rate{0};
  // the size bounds in force (backlog.max_bytes, backlog.max_events; 0 = none), beside the
  // backlog they bound, so an alert can say "near the bound" whatever the config
  std::atomic<int64_t> backlog_max_bytes{0};
  std::atomic<int64_t> backlog_max_events{0};
  // acks/naks the connection refused (e.g. past the reconnect buffer): a redelivery follows
  std::atomic<uint64_t> ack_failures{0};
  // the stage's durable consumer was starved and created again (ADR 0235)
  std::atomic<uint64_t> consumer_recreated{0};
  std::atomic<uint64_t> corrupt{0};  // deliveries refused by their Weir-Sum (ADR 0286)
  // sink stages only: the circuit (ADR 0294) — 0 closed, 1 open, 2 paused; its transitions;
  // the time it spent open or paused, in ms
  std::atomic<int64_t> sink_state{0};
  std::atomic<uint64_t> sink_transitions{0};
  std::atomic<int64_t> sink_open_ms{0};
  std::atomic<int64_t> sink_queued{0};  // deliveries in the sink's own queue (Sink::queued)
  Histogram latency;
};

class Metrics {
 public:
  StageMetrics& stage(const std::string& flow, const std::string& stage);
  std::string render_prometheus() const;
  // Sum of `acked` over all stages named `stage` of `flow` (for status output).
  uint64_t acked(const std::string& flow, const std::string& stage) const;
  // Events sources handed to JetStream and still waiting for their PubAck (whole process).
  std::atomic<int64_t> ingress_pending{0};
  // Whether weir's NATS connections are up, asked at each render as weir_nats_connected
  // (1 up, 0 one of them away); without a probe (before they exist) it is 0.
  void set_nats_probe(std::function<bool()> probe);
  // SIGHUP reloads by outcome (docs/adr/0306-reload-on-sighup.md).
  std::atomic<uint64_t> reloads_ok{0};
  std::atomic<uint64_t> reloads_failed{0};

 private:
  mutable Mutex mu_;
  std::deque<StageMetrics> stages_ GUARDED_BY(mu_);  // for insertion; deque keeps addresses stable
  std::function<bool()> nats_probe_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// Resident set size of this process in bytes (from /proc/self/statm).
int64_t process_rss_bytes();

}  // namespace weir
