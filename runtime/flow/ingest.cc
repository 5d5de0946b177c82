#include "runtime/flow/ingest.h"

#include <random>

#include "runtime/base/trace.h"
#include "runtime/base/trace_export.h"
#include "runtime/base/wall_clock.h"

namespace weir {

std::string new_event_id() {
  thread_local std::mt19937_64 rng{std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32)};
  const int64_t ms = wall_ms();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%012llx%016llx", static_cast<unsigned long long>(ms) & 0xffffffffffffULL,
                static_cast<unsigned long long>(rng()));
  return std::string(buf, 28);
}

// The ingress span (ADR 0140): a source's `traceparent` (http-in copies the request's) is
// replaced by a child of it, or by a new trace when absent or invalid — never refused. A
// `tracestate` survives only beside a valid traceparent (W3C §3.3.1).
void trace_ingress(Headers& h) {
  Headers::iterator tp = h.end(), ts = h.end();
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it->first == trace::kHeaderTraceparent) tp = it;
    else if (it->first == trace::kHeaderTracestate) ts = it;
  }
  const bool valid = tp != h.end() && trace::valid_traceparent(tp->second);
  if (valid) {
    trace::random_span_id(&tp->second[36]);
  } else if (tp != h.end()) {
    tp->second = trace::new_traceparent();
  }
  // Last: both change the vector, which invalidates the iterators.
  if (ts != h.end() && (!valid || ts->second.empty() || !trace::valid_tracestate(ts->second))) h.erase(ts);
  if (tp == h.end()) h.emplace_back(trace::kHeaderTraceparent, trace::new_traceparent());
}

FlowIngest::FlowIngest(Bus& bus, DeadLetters& dlq, Metrics& metrics, std::string flow)
    : bus_(bus),
      dlq_(dlq),
      metrics_(metrics.stage(flow, "ingress")),
      flow_(std::move(flow)),
      subject_(layout::input_subject(flow_)) {}

void FlowIngest::publish(IngestEvent event, std::chrono::milliseconds timeout,
                         std::function<void(const Status&, const std::string& id)> done) {
  if (event.id.empty()) event.id = new_event_id();
  auto started = std::chrono::steady_clock::now();
  auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  Headers h = std::move(event.headers);
  // Export on (ADR 0141): the ingress span runs from here to the PubAck.
  std::unique_ptr<trace::Span> span;
  std::string sender_tp;  // the sender's traceparent, kept only while export is on
  if (trace::exporter() != nullptr) {
    span = std::make_unique<trace::Span>();
    span->name = "ingress";
    span->flow = flow_;
    span->start_ns = trace::now_ns();
    for (const auto& [k, v] : h) {
      if (k == trace::kHeaderTraceparent) sender_tp = v;
    }
  }
  trace_ingress(h);
  if (span) {
    for (const auto& [k, v] : h) {
      // An invalid sender's header (or none) leaves the span a root: set_ids checks.
      if (k == trace::kHeaderTraceparent && span && !trace::set_ids(*span, v, sender_tp)) span.reset();
    }
  }
  h.emplace_back(layout::kHeaderId, event.id);
  h.emplace_back(layout::kHeaderMsgId, event.id);
  h.emplace_back(layout::kHeaderIngestUs, std::to_string(now_us));
  metrics_.received.fetch_add(1, std::memory_order_relaxed);
  int64_t size = 0;
  if (backlog_) {
    size = stored_size(subject_, event.body, h);
    std::string why;
    if (!backlog_->admit(size, &why)) {
      metrics_.errors.fetch_add(1, std::memory_order_relaxed);
      done(Status::unavailable(why), event.id);
      return;
    }
  }
  metrics_.in_flight.fetch_add(1, std::memory_order_relaxed);
  PublishCallback completed = [this, id = std::move(event.id), started, size,
                               span = std::shared_ptr<trace::Span>(std::move(span)),
                               done = std::move(done)](const Status& s, const PubAck&) {
    if (span) {
      if (trace::SpanExporter* x = trace::exporter()) {
        span->end_ns = trace::now_ns();
        span->error = !s.is_ok();
        x->record(std::move(*span));
      }
    }
    if (backlog_) backlog_->completed(size, s.is_ok());
    metrics_.in_flight.fetch_sub(1, std::memory_order_relaxed);
    if (s) {
      metrics_.acked.fetch_add(1, std::memory_order_relaxed);
      metrics_.latency.observe(std::chrono::steady_clock::now() - started);
    } else {
      metrics_.errors.fetch_add(1, std::memory_order_relaxed);
    }
    done(s, id);
  };
  if (on_loop()) {
    loop_->publish(subject_, event.body, h, timeout, std::move(completed));
  } else {
    bus_.publish(subject_, event.body, h, timeout, std::move(completed));
  }
}

void FlowIngest::reject(IngestEvent event, std::string reason, std::chrono::milliseconds,
                        std::function<void(const Status&, const std::string& id)> done) {
  if (event.id.empty()) event.id = new_event_id();
  metrics_.received.fetch_add(1, std::memory_order_relaxed);
  metrics_.dead.fetch_add(1, std::memory_order_relaxed);
  DeadLetter d;
  d.flow = flow_;
  d.stage = "source";
  d.reason = std::move(reason);
  d.deliveries = 1;
  d.event_id = event.id;
  d.replay_subject = subject_;
  d.body = event.body;
  for (const auto& [k, v] : event.headers) {
    if (k == layout::kHeaderMeta) d.meta = v;
  }
  // One dead letter per event id: a broker's redelivery of the same message is deduplicated.
  d.source_stream = "source";
  d.source_key = event.id;
  dlq_.publish(d, [id = std::move(event.id), done = std::move(done)](const Status& s, const PubAck&) { done(s, id); });
}

}  // namespace weir
