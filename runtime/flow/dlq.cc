#include "runtime/flow/dlq.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "flows/json_limits.h"
#include "runtime/base/log.h"
#include "runtime/base/trace.h"

namespace weir {
namespace {
constexpr const char* kFlow = "Weir-Flow";
constexpr const char* kVersion = "Weir-Version";
constexpr const char* kStage = "Weir-Stage";
constexpr const char* kReason = "Weir-Reason";
constexpr const char* kDeliveries = "Weir-Deliveries";
constexpr const char* kSubject = "Weir-Subject";
// The last failed attempt's reason (DeadLetter::last_error), when one is known.
constexpr const char* kLastError = "Weir-Dlq-Last-Error";

std::string stage_token(const std::string& stage) {
  std::string t = stage;
  for (char& c : t) {
    if (c == ':' || c == '.' || c == '*' || c == '>' || c == ' ') c = '-';
  }
  return t;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string header_of(const StoredMessage& m, const char* name) {
  for (const auto& [k, v] : m.headers) {
    if (k == name) return v;
  }
  return {};
}

// The dead letter's last error, null when it has none (DeadLetter::last_error).
nlohmann::json last_error_of(const StoredMessage& m) {
  std::string e = header_of(m, kLastError);
  return e.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::move(e));
}

// Header values must be one line.
std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  if (s.size() > 1000) s.resize(1000);
  return s;
}
// GET /dlq shows a dead letter's request metadata (ADR 0312) as an object, when it has one.
void add_meta(const StoredMessage& m, nlohmann::json& item) {
  const std::string text = header_of(m, layout::kHeaderMeta);
  if (text.empty()) return;
  constexpr int kMetaDepth = 4;  // as flows/expr_eval.cc reads it
  if (auto meta = flows::parse_json(text, kMetaDepth); meta && meta->is_object()) item["meta"] = std::move(*meta);
}
}  // namespace

void DeadLetters::publish(const DeadLetter& d, PublishCallback done, PullConsumer* via) {
  Headers h = {
      {layout::kHeaderId, d.event_id},
      // One dead letter per dying message: a redelivered copy of the same message that
      // dies again is deduplicated, a replayed one (new sequence) is not.
      {layout::kHeaderMsgId,
       "dlq:" + d.source_stream + ":" + (d.source_key.empty() ? std::to_string(d.source_sequence) : d.source_key)},
      {kFlow, d.flow},
      {kVersion, std::to_string(d.version)},
      {kStage, d.stage},
      {kReason, one_line(d.reason)},
      {kDeliveries, std::to_string(d.deliveries)},
      {kSubject, d.replay_subject},
  };
  if (!d.last_error.empty()) h.emplace_back(kLastError, one_line(d.last_error));
  if (!d.traceparent.empty()) h.emplace_back(trace::kHeaderTraceparent, std::string(d.traceparent));
  if (!d.tracestate.empty()) h.emplace_back(trace::kHeaderTracestate, std::string(d.tracestate));
  if (!d.meta.empty()) h.emplace_back(layout::kHeaderMeta, std::string(d.meta));
  // Every dead letter of every stage passes here: its one log line is written here, once
  // the stream has it (a refused write is retried by the stage and said once by record(); a
  // redelivered copy's write is a duplicate, no new dead letter). Never the body.
  // The last error is logged beside the reason only when the reason does not say it already.
  std::string last = d.reason.find(d.last_error) == std::string::npos ? one_line(d.last_error) : "";
  PublishCallback written = [this, flow = d.flow, stage = d.stage, id = d.event_id, deliveries = d.deliveries,
                             reason = one_line(d.reason), last = std::move(last),
                             done = std::move(done)](const Status& s, const PubAck& ack) {
    record(s);
    if (s && !ack.duplicate) {
      log::warn("event dead-lettered", {{"flow", flow},
                                        {"stage", stage},
                                        {"id", id},
                                        {"deliveries", std::to_string(deliveries)},
                                        {"reason", reason},
                                        {"last_error", last.empty() ? "-" : last}});
    }
    done(s, ack);
  };
  const std::string subject = layout::dlq_subject(d.flow, stage_token(d.stage));
  if (via != nullptr) {
    via->publish(subject, d.body, h, std::chrono::seconds(5), std::move(written));
  } else {
    bus_.publish(subject, d.body, h, std::chrono::seconds(5), std::move(written));
  }
}

void DeadLetters::record(const Status& s) {
  if (s) {
    written_.fetch_add(1, std::memory_order_relaxed);
    if (holding_.exchange(false)) log::info("the dead-letter stream takes writes again");
    return;
  }
  refused_.fetch_add(1, std::memory_order_relaxed);
  last_refusal_ms_ = now_ms();
  {
    MutexLock lock(mu_);
    last_error_ = s.message();
  }
  if (!holding_.exchange(true)) {
    log::warn(
        "the dead-letter stream refuses writes: stages hold their events until it takes them "
        "(replay or delete dead letters, or raise dlq.max_bytes)",
        {{"error", s.message()}});
  }
}

bool DeadLetters::holding(std::string* why) const {
  if (!holding_.load() || now_ms() - last_refusal_ms_.load() > kHoldingFor.count()) return false;
  MutexLock lock(mu_);
  *why = "the dead-letter stream refuses writes (" + last_error_ +
         "); events that would be dead-lettered are held and retried";
  return true;
}

void DeadLetters::render_metrics(std::string& out) const {
  out +=
      "# HELP weir_dlq_written_total Dead letters written to the dead-letter stream.\n"
      "# TYPE weir_dlq_written_total counter\n"
      "weir_dlq_written_total " +
      std::to_string(written_.load()) + "\n";
  out +=
      "# HELP weir_dlq_write_failures_total Dead-letter writes refused (stream at dlq.max_bytes, or NATS away); "
      "each one's event is held and retried.\n"
      "# TYPE weir_dlq_write_failures_total counter\n"
      "weir_dlq_write_failures_total " +
      std::to_string(refused_.load()) + "\n";
  std::string why;
  out +=
      "# HELP weir_dlq_holding 1 while the last dead-letter write failed (stages hold events).\n"
      "# TYPE weir_dlq_holding gauge\n"
      "weir_dlq_holding " +
      std::string(holding(&why) ? "1" : "0") + "\n";
}

Result<DeadLetterPage> DeadLetters::list(const DeadLetterQuery& q) {
  auto bounds = bus_.stream_bounds(layout::dlq_stream());
  if (!bounds) return bounds.status();
  DeadLetterPage page;
  // Plain variables, not a structured binding: lambdas below capture them (clang 14 cannot
  // capture a binding).
  const uint64_t first = bounds.value().first, last = bounds.value().second;
  if (first == 0) {
    if (q.after_id) return Status::not_found("no dead letter with id " + *q.after_id);
    return page;
  }
  uint64_t seq = std::max(first, q.after_seq + 1);
  // The stream is read in batches (Bus::read_stream), not a round trip per dead letter:
  // the dashboard polls this every few seconds on the one admin worker.
  if (q.after_id) {
    // Resolve the id to its first stored dead letter (ids repeat when an event dies in
    // two sinks; after_seq is the exact cursor and what the Link header gives).
    bool found = false;
    Status s = bus_.read_stream(layout::dlq_stream(), layout::dlq_subjects(), first, kScanBatch, kListTimeout,
                                [&](StoredMessage&& m) {
                                  if (m.sequence > last) return false;
                                  if (header_of(m, layout::kHeaderId) != *q.after_id) return true;
                                  seq = std::max(seq, m.sequence + 1);
                                  found = true;
                                  return false;
                                });
    if (!s) return s;
    if (!found) return Status::not_found("no dead letter with id " + *q.after_id + " (replayed, or never stored)");
  }
  if (seq > last) return page;
  const size_t limit = std::clamp<size_t>(q.limit, 1, kMaxPage);
  // One more than the page when nothing is filtered out (to learn whether more follow).
  const size_t batch = q.flow || q.id ? kScanBatch : limit + 1;
  Status s = bus_.read_stream(layout::dlq_stream(), layout::dlq_subjects(), seq, batch, kListTimeout,
                              [&](StoredMessage&& m) {
                                if (m.sequence > last) return false;
                                std::string f = header_of(m, kFlow);
                                if (q.flow && f != *q.flow) return true;
                                std::string id = header_of(m, layout::kHeaderId);
                                if (q.id && id != *q.id) return true;
                                if (page.items.size() == limit) {  // one more matches: say so and stop
                                  page.more = true;
                                  return false;
                                }
                                // Bounded: a dead letter may be the very event that was too deep to run.
                                auto parsed = flows::parse_json(m.data, flows::kDefaultMaxDepth);
                                nlohmann::json event = parsed ? std::move(*parsed) : nlohmann::json(m.data);
                                auto num = [&](const char* name) -> int64_t {
                                  try {
                                    return std::stoll(header_of(m, name));
                                  } catch (...) {
                                    return 0;
                                  }
                                };
                                page.items.push_back({{"id", id},
                                                      {"seq", m.sequence},
                                                      {"flow", f},
                                                      {"version", num(kVersion)},
                                                      {"stage", header_of(m, kStage)},
                                                      {"reason", header_of(m, kReason)},
                                                      {"deliveries", num(kDeliveries)},
                                                      {"at", m.time_ns / 1'000'000},
                                                      {"event", std::move(event)}});
                                page.items.back()["last_error"] = last_error_of(m);
                                if (std::string tp = header_of(m, trace::kHeaderTraceparent); !tp.empty()) {
                                  page.items.back()["traceparent"] = std::move(tp);
                                }
                                add_meta(m, page.items.back());
                                page.last_seq = m.sequence;
                                page.last_id = std::move(id);
                                return true;
                              });
  if (!s) return s;
  return page;
}

bool ReplayFilter::matches(std::string_view f, std::string_view stage, std::string_view id, int64_t at_ms,
                           std::string_view why) const {
  if (flow && f != *flow) return false;
  if (sink && stage != "sink:" + *sink) return false;
  if (!ids.empty() && std::find(ids.begin(), ids.end(), id) == ids.end()) return false;
  if (since_ms && at_ms < *since_ms) return false;
  if (until_ms && at_ms >= *until_ms) return false;
  if (reason && why.find(*reason) == std::string_view::npos) return false;
  return true;
}

Result<ReplayResult> DeadLetters::replay(const ReplayFilter& filter, bool dry_run) {
  auto bounds = bus_.stream_bounds(layout::dlq_stream());
  if (!bounds) return bounds.status();
  ReplayResult out;
  const uint64_t first = bounds.value().first, last = bounds.value().second;
  if (first == 0) return out;
  // Select first, in batches (what GET /dlq does), keeping only sequences and subjects: a
  // dry run and the real run choose by the same test, so their counts agree when nothing
  // changed in between. Dead letters that arrive during the call are not selected.
  struct Selected {
    uint64_t seq;
    std::string subject;
  };
  std::vector<Selected> selected;
  Status scanned = bus_.read_stream(
      layout::dlq_stream(), layout::dlq_subjects(), first, kScanBatch, kReplayScanTimeout, [&](StoredMessage&& m) {
        if (m.sequence > last) return false;
        std::string subject = header_of(m, kSubject);
        if (subject.empty()) return true;  // nowhere to put it back
        std::string f = header_of(m, kFlow), stage = header_of(m, kStage);
        if (!filter.matches(f, stage, header_of(m, layout::kHeaderId), m.time_ns / 1'000'000, header_of(m, kReason))) {
          return true;
        }
        ++out.by_stage[f][stage];
        ++out.matched;
        if (!dry_run) selected.push_back({m.sequence, std::move(subject)});
        return true;
      });
  if (!scanned) return scanned;
  if (dry_run) return out;

  // A flow stream's backlog bound (ADR 0080) holds for replay too: ingress stops below the
  // stream's size so the flow's outputs always fit, and a bulk replay must not take that
  // room. Once a stream has no room, its later dead letters stay (in order) for a later call.
  std::map<std::string, std::shared_ptr<FlowBacklog>> backlogs;
  for (const Selected& sel : selected) {
    const std::string target = layout::flow_of_subject(sel.subject);
    if (out.held.count(target)) {
      ++out.remaining;
      continue;
    }
    auto m = bus_.get_message(layout::dlq_stream(), sel.seq);
    if (!m) continue;  // replayed by another call or expired meanwhile
    const std::string id = header_of(m.value(), layout::kHeaderId);
    Headers h = {{layout::kHeaderId, id}, {layout::kHeaderMsgId, id + "#replay" + std::to_string(sel.seq)}};
    // A replayed event stays in its trace and keeps its request metadata (ADR 0312).
    for (const char* name : {trace::kHeaderTraceparent, trace::kHeaderTracestate, layout::kHeaderMeta}) {
      if (std::string v = header_of(m.value(), name); !v.empty()) h.emplace_back(name, std::move(v));
    }
    FlowBacklog* backlog = nullptr;
    const int64_t bytes = stored_size(sel.subject, m->data, h);
    if (backlog_ && !target.empty()) {
      auto& b = backlogs[target];
      if (!b) b = backlog_->watch(layout::flow_stream(target), nullptr);
      backlog = b.get();
      std::string why;
      if (!backlog->has_room(bytes, &why)) {
        out.held[target] = why;
        ++out.remaining;
        continue;
      }
    }
    std::promise<Status> done;
    bus_.publish(sel.subject, m->data, h, std::chrono::seconds(5),
                 [&done](const Status& s, const PubAck&) { done.set_value(s); });
    Status s = done.get_future().get();
    if (!s) return Status(s);
    if (backlog) backlog->add_stored(bytes);
    if (Status d = bus_.delete_message(layout::dlq_stream(), sel.seq); !d) return d;
    ++out.replayed;
  }
  if (!out.held.empty()) {
    log::info("replay stopped at a flow's backlog bound",
              {{"replayed", std::to_string(out.replayed)}, {"remaining", std::to_string(out.remaining)}});
  }
  return out;
}

}  // namespace weir
