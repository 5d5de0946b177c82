// FlowIngest: the runtime's `Ingest` for one flow — writes source events into the
// flow's input subject with the event id as Nats-Msg-Id (dedup) and Weir-Id.
// Thread-safe. A publish made on the io thread (http-in) goes through the io thread's own
// connection (LoopPublisher, ADR 0130) and completes on the io thread; one made on any
// other thread (broker, timer, poll, exec sources) goes through the Bus and completes on
// a bus thread.
#pragma once

#include <memory>
#include <string>

#include "runtime/flow/backpressure.h"
#include "runtime/nats/bus.h"
#include "runtime/flow/dlq.h"
#include "runtime/nats/loop_publisher.h"
#include "runtime/base/metrics.h"
#include "runtime/ports/source.h"

namespace weir {

class FlowIngest final : public Ingest {
 public:
  FlowIngest(Bus& bus, DeadLetters& dlq, Metrics& metrics, std::string flow);
  void publish(IngestEvent event, std::chrono::milliseconds timeout,
               std::function<void(const Status&, const std::string& id)> done) override;
  void reject(IngestEvent event, std::string reason, std::chrono::milliseconds timeout,
              std::function<void(const Status&, const std::string& id)> done) override;
  bool ready() const override { return on_loop() ? loop_->connected() : bus_.connected(); }
  // The io thread's publisher; null: every publish goes through the Bus. Set before the
  // source starts.
  void set_loop_publisher(LoopPublisher* loop) { loop_ = loop; }
  // Backpressure (ADR 0080): from now on each publish is admitted by `backlog` first and
  // refused with Status::unavailable (http-in: 503 + Retry-After) past its bounds. Set
  // before the source starts.
  void set_backlog(std::shared_ptr<FlowBacklog> backlog) { backlog_ = std::move(backlog); }

 private:
  bool on_loop() const { return loop_ != nullptr && loop_->in_loop_thread(); }

  Bus& bus_;
  LoopPublisher* loop_ = nullptr;
  DeadLetters& dlq_;
  StageMetrics& metrics_;
  std::string flow_, subject_;
  std::shared_ptr<FlowBacklog> backlog_;
};

// A new random event id: 28 hex digits — 12 of milliseconds since the epoch (so ids sort
// by time), then 16 of a random 64-bit number.
std::string new_event_id();

// Makes `h` carry the ingress span's traceparent (a child of the one in `h`, or a new
// trace) and drops a tracestate that cannot travel with it. docs/adr/0140-trace-context.md.
void trace_ingress(Headers& h);

}  // namespace weir
