#include "runtime/flow/stage.h"

#include <algorithm>
#include <random>

#include "runtime/base/log.h"
#include "runtime/base/trace.h"
#include "runtime/base/trace_export.h"
#include "runtime/base/wall_clock.h"

namespace weir {
namespace {
using Clock = std::chrono::steady_clock;

std::string event_id_of(const BusMessage& m) {
  std::string_view id = m.header(layout::kHeaderId);
  if (!id.empty()) return std::string(id);
  return "seq-" + std::to_string(m.stream_sequence());
}

// `delivered` is the delivery in hand: the ones before it all failed.
std::string poison_reason(uint64_t delivered, int max_deliver) {
  return "failed " + std::to_string(delivered - 1) + " deliveries (max_deliver " + std::to_string(max_deliver) +
         "): dead-lettered before another attempt";
}

// A reason as one header value: one line, at most 500 bytes (its start says what failed).
std::string one_line_reason(std::string s) {
  for (char& c : s) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  if (s.size() > 500) s.resize(500);
  return s;
}

// What a completion says of input i (Batch::ok): its publish was stored, refused or failed
// (counts toward max_deliver), or not answered (the nak that follows is ours: OwnNaks).
constexpr char kRefused = 0, kStored = 1, kNotAnswered = 2;
char publish_verdict(const Status& s, const PubAck& ack) {
  if (s.is_ok()) return kStored;
  return publish_failure_is_transient(s, ack) ? kNotAnswered : kRefused;
}

std::string invalid_event_reason(const flows::JsonError& e, int max_depth) {
  if (e.too_deep) {
    return "event JSON nested deeper than " + std::to_string(max_depth) + " levels (http.max_depth)";
  }
  // Without the parser's "last read: '…'" excerpt: that is event text, and the reason is
  // logged (DeadLetters::publish) where bodies never are.
  std::string why = e.message.substr(0, e.message.find("; last read:"));
  return "event is not valid JSON at byte " + std::to_string(e.byte) + ": " + why;
}
// One exported span (ADR 0141), recorded when the scope ends; nothing when export is off.
struct SpanScope {
  trace::SpanExporter* x = trace::exporter();
  trace::Span s;
  SpanScope(const char* name, const std::string& flow, std::string_view self, std::string_view parent) {
    if (x == nullptr) return;
    if (!trace::set_ids(s, self, parent)) {
      x = nullptr;
      return;
    }
    s.name = name;
    s.flow = flow;
    s.start_ns = trace::now_ns();
  }
  SpanScope(const SpanScope&) = delete;
  SpanScope& operator=(const SpanScope&) = delete;
  void fail() { s.error = true; }
  ~SpanScope() {
    if (x == nullptr) return;
    s.end_ns = trace::now_ns();
    x->record(std::move(s));
  }
};
}  // namespace

int flow_batch_for(const StageOptions& o, std::chrono::nanoseconds per_event) {
  const int floor = std::max(1, o.batch);
  const int most = std::max(1, o.batches_in_flight);
  if (per_event.count() <= 0) return floor;
  const int64_t fits = std::chrono::nanoseconds(o.window_run_budget).count() / (per_event.count() * most);
  if (fits < floor) return static_cast<int>(std::max<int64_t>(fits, 1));
  const int64_t steps = std::min<int64_t>(fits, std::max(o.max_batch, floor)) / floor;
  return static_cast<int>(std::max<int64_t>(steps, 1)) * floor;
}

std::chrono::milliseconds retry_backoff(uint64_t attempt) {
  thread_local std::mt19937 rng{std::random_device{}()};
  uint64_t shift = attempt > 1 ? std::min<uint64_t>(attempt - 1, 8) : 0;
  int64_t base = std::min<int64_t>(200LL << shift, 30'000);
  std::uniform_int_distribution<int64_t> jitter(0, base / 4);
  return std::chrono::milliseconds(base + jitter(rng));
}

// ---- FlowStage -----------------------------------------------------------------------

FlowStage::FlowStage(Bus& bus, DeadLetters& dlq, Metrics& metrics, std::shared_ptr<const flows::Flow> flow,
                     StageOptions options, std::string input_stream, std::string input_subject)
    : bus_(bus),
      dlq_(dlq),
      metrics_(metrics.stage(flow->name(), "flow")),
      flow_(std::move(flow)),
      name_(flow_->name()),
      options_(options),
      input_stream_(input_stream.empty() ? layout::flow_stream(name_) : std::move(input_stream)),
      input_subject_(input_subject.empty() ? layout::input_subject(name_) : std::move(input_subject)) {}

FlowStage::~FlowStage() { stop(); }

const std::string& FlowStage::output_subject(const std::string& sink) {
  auto it = out_subjects_.find(sink);
  if (it == out_subjects_.end()) it = out_subjects_.emplace(sink, layout::output_subject(name_, sink)).first;
  return it->second;
}

std::shared_ptr<const flows::Flow> FlowStage::flow() const {
  MutexLock lock(flow_mu_);
  return flow_;
}

void FlowStage::apply_window() {
  if (!consumer_) return;
  // Nothing is requested while paused or stopping. Careful: one message, run alone. Else
  // `batches_in_flight` batches requested or in hand; the next is requested when one is done.
  // Set under flow_mu_ (the consumer never calls back into the stage under its own lock),
  // so a pause and a message arriving at once cannot leave a stale window behind.
  const int most = std::max(1, options_.batches_in_flight);
  MutexLock lock(flow_mu_);
  const int batch = batch_ > 0 ? batch_ : std::max(1, options_.batch);
  if (paused_ || stopping_.load()) consumer_->set_window(0, 1);
  else if (careful_.load()) consumer_->set_window(1, 1);
  else consumer_->set_window(most * batch, batch);
}

void FlowStage::note_run_time(size_t n, Clock::duration took) {
  if (n == 0) return;
  {
    MutexLock lock(flow_mu_);
    const auto per = std::chrono::duration_cast<std::chrono::nanoseconds>(took) / static_cast<int64_t>(n);
    // Smoothed, but a slower batch counts at once: the window must not outgrow AckWait.
    per_event_ = per_event_.count() == 0 || per > per_event_ ? per : (per_event_ * 7 + per) / 8;
    const int want = flow_batch_for(options_, per_event_);
    if (want == batch_) return;
    batch_ = want;
  }
  apply_window();
}

bool FlowStage::pause(std::chrono::milliseconds timeout) {
  UniqueLock lock(flow_mu_);
  paused_ = true;
  lock.unlock();
  apply_window();
  lock.lock();
  return lock.wait_for(pause_cv_, timeout, [&]() REQUIRES(flow_mu_) { return in_flight_batches_ == 0; });
}

void FlowStage::resume(std::shared_ptr<const flows::Flow> flow) {
  {
    MutexLock lock(flow_mu_);
    if (flow) flow_ = std::move(flow);
    paused_ = false;
  }
  pause_cv_.notify_all();
  apply_window();
  // What arrived while paused is run on the consumer's thread, by the new version.
  if (consumer_ && started_.load()) consumer_->kick();
}

bool FlowStage::paused() const {
  MutexLock lock(flow_mu_);
  return paused_;
}

void FlowStage::request_stop() {
  {
    MutexLock lock(flow_mu_);
    if (stopping_.load()) return;
    stopping_ = true;
    pause_cv_.notify_all();
  }
  apply_window();
  if (consumer_ && started_.load()) consumer_->kick();  // wakes the stage; stop() hands back what is held
}

Status FlowStage::start() {
  ConsumerOptions co;
  co.stream = input_stream_;
  co.durable = layout::flow_consumer(name_);
  co.filter_subject = input_subject_;
  co.max_ack_pending = 4096;
  // How long a crashed instance's batch takes to reach the others: short, and what this
  // stage holds longer than a quarter of it (a batch waiting for PubAcks or a dead letter,
  // a slow flow, a pause, a gate) is kept alive by keep_alive() on every tick, so a slow
  // server does not get a batch redelivered while it is being finished
  // (docs/adr/0297-two-second-failover.md).
  co.ack_wait = options_.flow_ack_wait;
  co.on_tick = [this] { keep_alive(); };
  co.request_expires = options_.fetch_wait;
  co.loop = ConsumerLoop::kFlows;  // the flow loop, when the Bus has it on (ADR 0220)
  co.recreated = &metrics_.consumer_recreated;
  co.corrupt = &metrics_.corrupt;
  auto c = bus_.pull_consumer(co);
  if (!c) return c.status();
  consumer_ = std::move(c.value());
  if (Status s = consumer_->start([this](std::unique_ptr<BusMessage> m) { on_message(std::move(m)); }); !s) return s;
  started_ = true;
  apply_window();
  return Status::ok();
}

void FlowStage::stop() {
  if (stopped_.exchange(true)) return;
  request_stop();
  if (!consumer_) return;
  {
    // The batches in flight complete by their PubAcks or deadlines (the Bus guarantees
    // each callback once); they release through the consumer, which lives until then.
    UniqueLock lock(flow_mu_);
    lock.wait(pause_cv_, [&]() REQUIRES(flow_mu_) { return in_flight_batches_ == 0; });
  }
  consumer_->stop();  // the handler does not run after this
  // Held (paused, gated, the kick did not come, or arrived while stopping): handed back
  // once, now that no pull request of ours is open, not after AckWait.
  std::vector<std::unique_ptr<BusMessage>> held;
  {
    MutexLock lock(flow_mu_);
    held.swap(held_);
  }
  for (auto& m : held) {
    if (!m->nak(std::chrono::milliseconds(0))) metrics_.ack_failures.fetch_add(1, std::memory_order_relaxed);
  }
}

void FlowStage::on_message(std::unique_ptr<BusMessage> m) {
  if (m) {
    metrics_.lag.store(static_cast<int64_t>(m->pending()), std::memory_order_relaxed);
    // Careful mode (docs/adr/0081-poison-events.md): after a start and while redeliveries
    // come back, one message is requested at a time, and the next only once it is acked,
    // so an event that crashes the process is run alone and only its delivery count climbs.
    const bool redelivered = m->deliveries() > 1;
    if (redelivered != careful_.load()) {
      careful_ = redelivered;
      apply_window();
    }
    MutexLock lock(flow_mu_);
    if (held_.empty()) held_progressed_ = Clock::now();
    held_.push_back(std::move(m));
    // On the flow loop a read event's messages are one burst, ended by a nullptr: they
    // run as one batch then (one Batch, one round of acks).
    if (consumer_->on_loop()) return;
  }
  run_held();
}

void FlowStage::run_held() {
  std::vector<std::unique_ptr<BusMessage>> batch;
  std::shared_ptr<const flows::Flow> flow;
  bool room = true;
  std::string why;
  {
    MutexLock lock(flow_mu_);
    if (held_.empty()) return;
    // Stopping: what arrives is held and handed back once, by stop() after the consumer
    // stopped. A nak now would be redelivered at once into the pull requests still open
    // at the server and naked again, round after round until stop() ends them: each
    // round counts a delivery, and the poison rule dead-lettered healthy events after a
    // restart (seen: 38 deliveries within one 2 ms drain).
    if (stopping_.load()) return;
    // The version that runs a batch is fixed when it starts; while paused nothing starts
    // (resume() kicks).
    if (paused_) return;
    if (gate_ && !gate_()) {
      // Not a fresh member (just woken from a stop, or cut off from NATS): look again on
      // the next timer tick.
      consumer_->kick_later();
      return;
    }
    batch.swap(held_);
    if (output_full_ && output_full_(&why)) {
      room = false;
    } else {
      ++in_flight_batches_;
      flow = flow_;
    }
  }
  if (!room) {
    hand_back_for_room(std::move(batch), why);
    return;
  }
  if (waiting_for_room_.exchange(false)) log::info("chained flow runs again: its stream has room", {{"flow", name_}});
  start_batch(std::move(batch), std::move(flow));
}

// Naked with a delay and not counted against them (OwnNaks): they wait in the other flow's
// stream, whose backlog then grows until its ingress refuses (ADR 0080).
void FlowStage::hand_back_for_room(std::vector<std::unique_ptr<BusMessage>> held, const std::string& why) {
  if (!waiting_for_room_.exchange(true)) {
    log::warn("chained flow waits: its stream is at its backlog bound", {{"flow", name_}, {"reason", why}});
  }
  constexpr auto kRoomRetry = std::chrono::milliseconds(1000);
  for (auto& m : held) {
    own_naks_.record(m->stream_sequence());
    if (!m->nak(kRoomRetry)) metrics_.ack_failures.fetch_add(1, std::memory_order_relaxed);
  }
  consumer_->deferred(kRoomRetry);
  consumer_->release(static_cast<int>(held.size()));
}

// The messages in hand from run to ack (one message — on the flow loop one read event's
// burst —, or what was held while paused or gated). Its outputs' callbacks run on the flow
// loop (pool threads without it; dead letters' on the Bus's threads) and the last one to
// complete acks the inputs (publishes to their reply subjects), so the next messages are
// run meanwhile.
struct FlowStage::Batch {
  FlowStage* stage = nullptr;
  std::vector<std::unique_ptr<BusMessage>> msgs;
  std::shared_ptr<const flows::Flow> flow;
  Clock::time_point started;
  Mutex mu;
  size_t remaining GUARDED_BY(mu);  // outputs not completed, +1 while launching
  std::vector<char> ok GUARDED_BY(mu);
  uint64_t dropped = 0;          // stage thread only, read after the last completion
  Clock::duration run_time{};    // of its slices (run_slices), stage thread only
  Clock::time_point progressed;  // the last in-progress ack (keep_alive); under the stage's live_mu_

  // +1: not finished before every output is launched.
  explicit Batch(size_t n) : remaining(n + 1), ok(n, 1) {}

  // `more` outputs of one input besides its first (a fan-out), before they are launched.
  void add_outputs(size_t more) {
    MutexLock lock(mu);
    remaining += more;
  }

  // `verdict`: kStored (true), kRefused or kNotAnswered; a refusal outweighs the rest.
  static void complete(const std::shared_ptr<Batch>& b, size_t i, char verdict) {
    std::vector<char> final_ok;
    {
      MutexLock lock(b->mu);
      if (verdict == kRefused || (verdict == kNotAnswered && b->ok[i] == kStored)) b->ok[i] = verdict;
      if (--b->remaining != 0) return;
      final_ok.swap(b->ok);  // the last completion: nobody writes it any more
    }
    b->stage->finish_batch(*b, final_ok);
  }
};

void FlowStage::start_batch(std::vector<std::unique_ptr<BusMessage>> batch, std::shared_ptr<const flows::Flow> flow) {
  const size_t n = batch.size();
  auto b = std::make_shared<Batch>(n);
  b->stage = this;
  b->msgs = std::move(batch);
  b->flow = std::move(flow);
  b->started = Clock::now();
  {
    MutexLock lock(live_mu_);
    live_.insert(b.get());
  }
  metrics_.received.fetch_add(n, std::memory_order_relaxed);
  metrics_.in_flight.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  std::string version = std::to_string(b->flow->version());
  if (!consumer_->on_loop()) {
    // A pool thread of its own: the batch runs to its end.
    for (size_t i = 0; i < n; ++i) run_input(b, i, version);
    note_run_time(n, Clock::now() - b->started);
    Batch::complete(b, 0, true);  // launched: whoever completes last (maybe this) acks
    return;
  }
  slices_.push_back(Slice{std::move(b), 0, std::move(version)});
  if (!slice_posted_ && !running_slices_) run_slices();
}

// The flow loop's turn for this stage (docs/adr/0288-flow-batches-in-slices.md): its
// batches in order, for kRunSlice at most (one input at least), then the rest in a later
// turn. One turn per stage is queued at a time, however many batches wait: every flow
// gets a slice per round of the loop, and reads, acks and timers run between.
void FlowStage::run_slices() {
  slice_posted_ = false;
  running_slices_ = true;  // a batch started from here (a completion's kick) only queues
  const auto t0 = Clock::now();
  bool spent = false;
  while (!slices_.empty() && !spent) {
    Slice& s = slices_.front();
    const size_t n = s.b->msgs.size();
    const auto from = Clock::now();
    while (s.next < n && !spent) {
      run_input(s.b, s.next++, s.version);
      spent = Clock::now() - t0 >= kRunSlice;
    }
    s.b->run_time += Clock::now() - from;
    if (s.next == n) {
      std::shared_ptr<Batch> b = std::move(s.b);
      slices_.pop_front();
      note_run_time(n, b->run_time);
      Batch::complete(b, 0, true);  // launched: whoever completes last (maybe this) acks
    }
  }
  running_slices_ = false;
  if (!slices_.empty() && !slice_posted_) {
    // `this` outlives the turn: stop() and pause() wait for the batches, which cannot
    // finish before their last input is launched.
    slice_posted_ = true;
    consumer_->post([this] { run_slices(); });
  }
}

// Dead-letters input i with `reason`; it is acked once the dead letter is stored.
void FlowStage::dead_letter_input(const std::shared_ptr<Batch>& b, size_t i, const std::string& id, std::string reason,
                                  uint64_t deliveries) {
  BusMessage& m = *b->msgs[i];
  DeadLetter d;
  d.flow = name_;
  d.version = b->flow->version();
  d.stage = "flow";
  d.reason = std::move(reason);
  d.deliveries = deliveries;
  d.event_id = id;
  d.replay_subject = input_subject_;
  d.body = m.data();
  d.source_sequence = m.stream_sequence();
  d.source_stream = input_stream_;
  d.traceparent = m.header(trace::kHeaderTraceparent);
  d.tracestate = m.header(trace::kHeaderTracestate);
  d.meta = m.header(layout::kHeaderMeta);
  metrics_.dead.fetch_add(1, std::memory_order_relaxed);
  dlq_.publish(
      d, [b, i](const Status& s, const PubAck& a) { Batch::complete(b, i, publish_verdict(s, a)); }, consumer_.get());
}

// Publishes the output of input i to `sink` (at most once per input and sink); `span_tp` is
// the flow stage's span, the outputs' parent.
void FlowStage::emit_output(const std::shared_ptr<Batch>& b, size_t i, const std::string& id,
                            const std::string& version, std::string span_tp, const std::string& sink,
                            std::string_view body) {
  const BusMessage& m = *b->msgs[i];
  Headers h;
  h.reserve(6);
  h.emplace_back(trace::kHeaderTraceparent, std::move(span_tp));
  if (auto ts = m.header(trace::kHeaderTracestate); !ts.empty())
    h.emplace_back(trace::kHeaderTracestate, std::string(ts));
  h.emplace_back(layout::kHeaderId, id);
  h.emplace_back(layout::kHeaderMsgId, id + "#" + sink);
  h.emplace_back(layout::kHeaderVersion, version);
  if (auto t = m.header(layout::kHeaderIngestUs); !t.empty()) h.emplace_back(layout::kHeaderIngestUs, std::string(t));
  // The request metadata travels beside the body to the sink (docs/adr/0312-request-metadata.md).
  if (auto meta = m.header(layout::kHeaderMeta); !meta.empty()) h.emplace_back(layout::kHeaderMeta, std::string(meta));
  consumer_->publish(output_subject(sink), body, h, options_.publish_timeout,
                     [b, i](const Status& s, const PubAck& a) { Batch::complete(b, i, publish_verdict(s, a)); });
}

void FlowStage::keep_alive() {
  const auto every = keep_alive_after(options_.flow_ack_wait);
  const auto now = Clock::now();
  uint64_t failed = 0;
  {
    // Held while paused, gated or stopping (a promote's barrier, a stale membership): all
    // of them at once, from the oldest one's arrival.
    MutexLock lock(flow_mu_);
    if (held_.empty() || now - held_progressed_ < every) {
      if (held_.empty()) held_progressed_ = now;
    } else {
      held_progressed_ = now;
      for (auto& m : held_) failed += m->in_progress() ? 0 : 1;
    }
  }
  {
    // Started: running (a slow flow runs in slices between ticks), waiting for its
    // outputs' PubAcks or its dead letters' (ADR 0297).
    MutexLock lock(live_mu_);
    for (Batch* b : live_) {
      if (now - std::max(b->started, b->progressed) < every) continue;
      b->progressed = now;
      for (auto& m : b->msgs) failed += m->in_progress() ? 0 : 1;
    }
  }
  if (failed) metrics_.ack_failures.fetch_add(failed, std::memory_order_relaxed);
}

// JetStream's delivery count less the redeliveries this process's own naks caused after
// publishes nobody answered (OwnNaks): at least 1, the delivery in hand.
uint64_t FlowStage::counted_deliveries(const BusMessage& m) const {
  const uint64_t delivered = m.deliveries();
  const uint64_t own = own_naks_.count(m.stream_sequence());
  return delivered > own ? delivered - own : 1;
}

// Input i of the batch: dead-lettered past max_deliver or when it is no event, else run
// by the batch's version and its outcome published, dropped or dead-lettered.
void FlowStage::run_input(const std::shared_ptr<Batch>& b, size_t i, const std::string& version) {
  BusMessage& m = *b->msgs[i];
  const flows::Flow& flow = *b->flow;
  std::string id = event_id_of(m);
  if (uint64_t delivered = counted_deliveries(m); delivered > static_cast<uint64_t>(options_.max_deliver)) {
    // Checked before the event is touched: if handling it is what kills the process,
    // this is the only place that can still act on it (ADR 0081). Redeliveries that
    // followed this process's own naks for want of an answer do not count (ADR 0225).
    metrics_.errors.fetch_add(1, std::memory_order_relaxed);
    dead_letter_input(b, i, id, poison_reason(delivered, options_.max_deliver), delivered - 1);
    return;
  }
  // The flow stage's span for this event (ADR 0140): a child of the incoming one; the
  // outputs carry it as their parent. Exported (when on) as this function returns.
  const std::string_view in_tp = m.header(trace::kHeaderTraceparent);
  std::string span_tp = trace::child_traceparent(in_tp);
  SpanScope span("flow", name_, span_tp, in_tp);
  flows::JsonError jerr;
  if (const std::string& sink = flow.pass_through_sink(); !sink.empty()) {
    // No steps: the stored bytes go out unchanged, checked without a DOM.
    if (flows::check_json(m.data(), options_.max_depth, &jerr)) {
      emit_output(b, i, id, version, std::move(span_tp), sink, m.data());
      return;
    }
    span.fail();
    metrics_.errors.fetch_add(1, std::memory_order_relaxed);
    dead_letter_input(b, i, id, invalid_event_reason(jerr, options_.max_depth), m.deliveries());
    return;
  }
  auto event = flows::parse_json(m.data(), options_.max_depth, &jerr);
  if (!event) {
    // Not a flow error (on_error does not apply): the bytes cannot become an event.
    // Ingress refuses such bodies; these came by another route (an older weir, a
    // direct publish into the stream, a replay).
    span.fail();
    metrics_.errors.fetch_add(1, std::memory_order_relaxed);
    dead_letter_input(b, i, id, invalid_event_reason(jerr, options_.max_depth), m.deliveries());
    return;
  }
  flows::Outcome outcome = flow.run(std::move(*event), m.header(layout::kHeaderMeta));
  switch (outcome.kind) {
    case flows::Outcome::Kind::kEmit: {
      const std::string body = flows::write_json(outcome.event);
      if (!outcome.also.empty()) {
        // A fan-out (docs/adr/0299-fan-out.md): one output per sink, each on its sink's own
        // subject and consumer; the input is acked once all of them are stored.
        b->add_outputs(outcome.also.size());
        for (const auto& sink : outcome.also) emit_output(b, i, id, version, span_tp, sink, body);
      }
      emit_output(b, i, id, version, std::move(span_tp), outcome.sink, body);
      break;
    }
    case flows::Outcome::Kind::kDropped:
      ++b->dropped;
      Batch::complete(b, i, true);
      break;
    case flows::Outcome::Kind::kError:
      span.fail();
      metrics_.errors.fetch_add(1, std::memory_order_relaxed);
      if (flow.on_error() == flows::OnError::kDrop) {
        log::debug("flow error, event dropped", {{"flow", name_}, {"id", id}, {"error", outcome.error.str()}});
        ++b->dropped;
        Batch::complete(b, i, true);
        break;
      }
      dead_letter_input(b, i, id, outcome.error.str(), m.deliveries());
      break;
  }
}

void FlowStage::finish_batch(Batch& b, const std::vector<char>& ok) {
  // Publish before ack: only inputs whose outputs are all persisted are acked. `ok` and
  // `dropped` are final: every completion happened before this, under b.mu.
  const size_t n = b.msgs.size();
  {
    MutexLock lock(live_mu_);
    live_.erase(&b);  // before its messages are acked: keep_alive() reads them under live_mu_
  }
  uint64_t acked = 0, ack_failures = 0;
  for (size_t i = 0; i < n; ++i) {
    if (ok[i] == kStored) {
      if (!b.msgs[i]->ack(&metrics_.ack_failures)) ++ack_failures;
      ++acked;
    } else {
      if (ok[i] == kNotAnswered) own_naks_.record(b.msgs[i]->stream_sequence());
      const auto delay = retry_backoff(b.msgs[i]->deliveries());
      if (!b.msgs[i]->nak(delay)) ++ack_failures;
      consumer_->deferred(delay);
      metrics_.errors.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (ack_failures) metrics_.ack_failures.fetch_add(ack_failures, std::memory_order_relaxed);
  metrics_.acked.fetch_add(acked - std::min(acked, b.dropped), std::memory_order_relaxed);
  metrics_.dropped.fetch_add(b.dropped, std::memory_order_relaxed);
  metrics_.in_flight.fetch_sub(static_cast<int64_t>(n), std::memory_order_relaxed);
  auto per_event = (Clock::now() - b.started);
  for (size_t i = 0; i < n; ++i) metrics_.latency.observe(per_event);
  consumer_->release(static_cast<int>(n));
  // Notified under the lock: once it is released, stop() may destroy the stage.
  MutexLock lock(flow_mu_);
  --in_flight_batches_;
  pause_cv_.notify_all();
}

// ---- SinkStage -----------------------------------------------------------------------

namespace {

// The retry headers of a sink's retry copy (layout::kHeaderAttempts, …); zeros on an
// event's first copy.
struct RetryMarks {
  uint64_t attempts = 0;      // attempts made before this copy
  int64_t failing_since = 0;  // ms since the epoch
  int64_t retry_at = 0;       // ms since the epoch
};

int64_t header_number(const BusMessage& m, const char* name) {
  std::string_view v = m.header(name);
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string_view::npos) return 0;
  return std::atoll(std::string(v).c_str());
}

RetryMarks retry_marks(const BusMessage& m) {
  RetryMarks r;
  r.attempts = static_cast<uint64_t>(header_number(m, layout::kHeaderAttempts));
  r.failing_since = header_number(m, layout::kHeaderFailingSince);
  r.retry_at = header_number(m, layout::kHeaderRetryAt);
  return r;
}

// Up to a tenth more than `d`: events that failed together are not retried in one burst.
std::chrono::milliseconds with_jitter(std::chrono::milliseconds d) {
  thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int64_t> extra(0, std::max<int64_t>(d.count() / 10, 0));
  return d + std::chrono::milliseconds(extra(rng));
}

std::string duration_text(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace

struct SinkStage::InFlight {
  std::unique_ptr<BusMessage> msg;
  std::string id;
  uint64_t attempt = 1;       // this attempt: the copies' attempts before it and this copy's deliveries
  int64_t failing_since = 0;  // ms since the epoch of the event's first failed attempt; 0: none yet
  bool probe = false;         // sent as the open circuit's probe
  Clock::time_point started;
  Clock::time_point progressed;  // the last in-progress ack (keep_alive); under the stage's mu_
  std::string traceparent;       // the sink span's, only while export is on (ADR 0141)
  int64_t start_ns = 0;
  bool keyed = false;  // order_by: `key` is its key (ADR 0310)
  std::string key;
  Clock::time_point retry_due;  // keyed, in delayed_: when it is retried in place
  std::string last_error;       // its last failed attempt's reason ("" when none is known)
};

SinkStage::SinkStage(Bus& bus, DeadLetters& dlq, Metrics& metrics, std::string flow, int64_t version,
                     std::string sink_name, std::unique_ptr<Sink> sink, StageOptions options)
    : bus_(bus),
      dlq_(dlq),
      metrics_(metrics.stage(flow, "sink:" + sink_name)),
      flow_(std::move(flow)),
      sink_name_(std::move(sink_name)),
      stage_("sink:" + sink_name_),
      version_(version),
      sink_(std::move(sink)),
      options_(options),
      retry_(sink_->retry_policy()),
      health_(std::make_shared<SinkHealth>(flow_, sink_name_)),
      order_by_(sink_->order_by()) {}

SinkStage::~SinkStage() { stop(); }

Status SinkStage::start() {
  if (Status s = sink_->start(); !s) return s;
  ConsumerOptions co;
  co.stream = layout::flow_stream(flow_);
  co.durable = layout::sink_consumer(flow_, sink_name_);
  co.filter_subject = layout::output_subject(flow_, sink_name_);
  co.max_ack_pending = std::max(1024, sink_->max_in_flight() * 8);
  // How long a dead instance's deliveries wait for a peer: what the stage holds longer
  // than a quarter of it is kept alive (keep_alive(), docs/adr/0293-in-progress-acks.md,
  // docs/adr/0297-two-second-failover.md).
  co.ack_wait = options_.sink_ack_wait;
  co.request_expires = options_.fetch_wait;
  co.recreated = &metrics_.consumer_recreated;
  co.corrupt = &metrics_.corrupt;
  co.loop = ConsumerLoop::kSinks;  // the sink loop (ADR 0258); acks leave with its turn's writes
  co.on_tick = [this] { keep_alive(); };
  auto c = bus_.pull_consumer(co);
  if (!c) return c.status();
  consumer_ = std::move(c.value());
  if (Status s = consumer_->start([this](std::unique_ptr<BusMessage> m) { on_message(std::move(m)); }); !s) return s;
  started_ = true;
  set_window_for(health_->state(), false);
  return Status::ok();
}

// Closed: up to twice max_in_flight() requested or in hand — the sink has all its slots
// busy and as many more queued behind them, and the next batch (one pool's worth) is
// requested as soon as that many completed, so a freed slot never waits for a pull round
// trip (closed loop: 5.3k/s against 7.9k/s with max_in_flight() alone). Open or paused:
// nothing new (ADR 0294), or one event when the probe is due and none is in hand.
void SinkStage::set_window_for(SinkState s, bool fetch_probe) {
  const int max = std::max(1, sink_->max_in_flight());
  // With order_by a key's later events wait in hand behind its owner: room for them
  // beyond the sink's own slots, so one busy key does not starve the others (ADR 0310).
  const int want = s == SinkState::kClosed ? (order_by_ != nullptr ? 8 : 2) * max : (fetch_probe ? 1 : 0);
  if (want == window_ || stopping_.load()) return;
  window_ = want;
  consumer_->set_window(want, want == 0 ? 1 : (s == SinkState::kClosed ? max : 1));
}

void SinkStage::request_stop() {
  {
    MutexLock lock(mu_);
    if (stopping_.load()) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (consumer_) consumer_->set_window(0, 1);
}

void SinkStage::stop() { stop_within(options_.drain_timeout); }

void SinkStage::stop_within(std::chrono::milliseconds budget) {
  if (stopped_.exchange(true)) return;
  const auto deadline = Clock::now() + budget;
  request_stop();
  size_t parked = 0;
  {
    // What waits for the circuit goes back to JetStream with the rest that arrived while
    // stopping (after the consumer stopped), so the drain waits only for the wire.
    MutexLock lock(mu_);
    std::vector<std::shared_ptr<InFlight>> back = keys_.take_waiting();
    back.insert(back.end(), waiting_.begin(), waiting_.end());
    back.insert(back.end(), delayed_.begin(), delayed_.end());
    waiting_.clear();
    delayed_.clear();
    parked = back.size();
    for (auto& f : back) {
      holding_.erase(f.get());
      returned_.push_back(std::move(f->msg));
      --in_flight_;
      metrics_.in_flight.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (parked > 0) consumer_->release(static_cast<int>(parked));
  {
    UniqueLock lock(mu_);
    lock.wait_until(cv_, deadline, [&]() REQUIRES(mu_) { return in_flight_ == 0; });
  }
  // Completes (as retries) whatever is still in flight; those are redelivered later.
  sink_->stop();
  // Every delivery completes after sink_->stop() (the Sink contract) and a dead letter's
  // publish within its deadline, so this ends. It must: a completion touches this stage
  // and releases through its consumer.
  {
    UniqueLock lock(mu_);
    while (!lock.wait_for(cv_, std::chrono::seconds(5), [&]() REQUIRES(mu_) { return in_flight_ == 0; })) {
      log::warn("sink stage stopping: waiting for deliveries in flight",
                {{"flow", flow_}, {"sink", sink_name_}, {"in_flight", std::to_string(in_flight_)}});
    }
  }
  // The handler does not run after this; what arrived while stopping is handed back.
  if (consumer_) consumer_->stop();
  std::vector<std::unique_ptr<BusMessage>> returned;
  {
    MutexLock lock(mu_);
    returned.swap(returned_);
  }
  for (auto& m : returned) {
    if (!m->nak(std::chrono::milliseconds(0))) metrics_.ack_failures.fetch_add(1, std::memory_order_relaxed);
  }
}

bool SinkStage::pause() {
  const bool changed = health_->pause(Clock::now());
  if (changed && consumer_) consumer_->kick();
  return changed;
}

bool SinkStage::resume() {
  const bool changed = health_->resume(Clock::now());
  if (changed && consumer_) consumer_->kick();
  return changed;
}

void SinkStage::on_message(std::unique_ptr<BusMessage> m) {
  if (!m) {
    pump();
    return;
  }
  bool taken = false;
  {
    // Decided under mu_ with stop's flag: a message taken here is waited for by stop().
    MutexLock lock(mu_);
    if (!stopping_.load()) {
      ++in_flight_;
      taken = true;
    }
  }
  if (!taken) {
    // Stopping: what arrives now goes back once, after the consumer stopped (a nak now
    // would come back at once into the pull requests still open: FlowStage::run_held).
    MutexLock lock(mu_);
    returned_.push_back(std::move(m));
    return;
  }
  metrics_.lag.store(static_cast<int64_t>(m->pending()), std::memory_order_relaxed);
  auto f = std::make_shared<InFlight>();
  f->id = event_id_of(*m);
  f->started = Clock::now();
  metrics_.in_flight.fetch_add(1, std::memory_order_relaxed);
  const RetryMarks marks = retry_marks(*m);
  // A retry copy is delivered once before it is due and naked until then (below): that
  // delivery is no failure. What is left counts toward max_deliver: deliveries that ended
  // without a receiver's answer, the crashes and wedges of ADR 0081 (ADR 0295).
  const uint64_t deliveries = m->deliveries();
  const uint64_t unanswered = deliveries - (marks.retry_at > 0 && deliveries > 1 ? 1 : 0);
  f->attempt = marks.attempts + unanswered;
  f->failing_since = marks.failing_since;
  if (marks.attempts > 0) f->last_error = std::string(m->header(layout::kHeaderLastError));  // a retry copy
  if (const int64_t wait_ms = marks.retry_at - wall_ms(); wait_ms > 0 && deliveries == 1) {
    // Not due: back into JetStream until it is, where it waits without a timer here.
    const auto delay = std::chrono::milliseconds(wait_ms);
    if (!m->nak(delay)) metrics_.ack_failures.fetch_add(1, std::memory_order_relaxed);
    consumer_->deferred(delay);
    f->msg = std::move(m);
    finish(f);
    return;
  }
  metrics_.received.fetch_add(1, std::memory_order_relaxed);
  if (unanswered > static_cast<uint64_t>(options_.max_deliver)) {
    // Before the sink sees it again: a delivery that crashes or wedges the process
    // must not be retried forever (ADR 0081).
    metrics_.errors.fetch_add(1, std::memory_order_relaxed);
    std::string reason = poison_reason(unanswered, options_.max_deliver);
    if (!f->last_error.empty()) reason += "; last: " + f->last_error;
    f->attempt -= 1;  // the attempts that were made
    f->msg = std::move(m);
    hold(f.get());
    dead_letter(f, std::move(reason));
    return;
  }
  f->msg = std::move(m);
  hold(f.get());
  if (order_by_ != nullptr && !key_of(f)) return;
  dispatch(std::move(f));
}

// NOLINTNEXTLINE(performance-unnecessary-value-param)
void SinkStage::dispatch(std::shared_ptr<InFlight> f) {
  if (f->keyed) {
    MutexLock lock(mu_);
    if (!keys_.admit(f->key, f)) return;  // behind its key's owner until finish() releases it
  }
  if (health_->held()) {
    wait(std::move(f));
    pump();  // this one may be the probe that was asked for
    return;
  }
  send(f);
}

bool SinkStage::key_of(const std::shared_ptr<InFlight>& f) {
  flows::JsonError jerr;
  auto event = flows::parse_json(f->msg->data(), options_.max_depth, &jerr);
  std::string error;
  if (event && order_by_->eval_key(*event, &f->key, &error, f->msg->header(layout::kHeaderMeta))) {
    f->keyed = true;
    return true;
  }
  if (!event) error = invalid_event_reason(jerr, options_.max_depth);
  metrics_.errors.fetch_add(1, std::memory_order_relaxed);
  dead_letter(f, "order_by \"" + order_by_->text() + "\": " + error);
  return false;
}

std::vector<std::shared_ptr<SinkStage::InFlight>> SinkStage::take_due_retries(Clock::time_point now) {
  std::vector<std::shared_ptr<InFlight>> due;
  MutexLock lock(mu_);
  auto keep = std::partition(delayed_.begin(), delayed_.end(),
                             [&](const std::shared_ptr<InFlight>& f) { return f->retry_due > now; });
  due.assign(std::make_move_iterator(keep), std::make_move_iterator(delayed_.end()));
  delayed_.erase(keep, delayed_.end());
  return due;
}

void SinkStage::send(const std::shared_ptr<InFlight>& f) {
  const BusMessage& m = *f->msg;
  Delivery d{f->id, std::string(m.data()), f->attempt, trace::child_traceparent(m.header(trace::kHeaderTraceparent)),
             std::string(m.header(trace::kHeaderTracestate))};
  d.meta = std::string(m.header(layout::kHeaderMeta));
  if (trace::exporter() != nullptr) {
    f->traceparent = d.traceparent;
    f->start_ns = trace::now_ns();
  }
  sink_->deliver(std::move(d), [this, f](DeliveryResult r) { on_result(f, std::move(r)); });
}

void SinkStage::wait(std::shared_ptr<InFlight> f) {
  f->probe = false;
  MutexLock lock(mu_);
  const uint64_t seq = f->msg->stream_sequence();
  auto at = std::find_if(waiting_.begin(), waiting_.end(),
                         [&](const std::shared_ptr<InFlight>& w) { return w->msg->stream_sequence() > seq; });
  waiting_.insert(at, std::move(f));
}

void SinkStage::pump() {
  if (stopping_.load() || !consumer_) return;
  for (auto& f : take_due_retries(Clock::now())) dispatch(std::move(f));  // their keys' owners: they go
  const SinkState state = health_->state();
  if (state == SinkState::kClosed) {
    std::deque<std::shared_ptr<InFlight>> go;
    {
      MutexLock lock(mu_);
      go.swap(waiting_);
    }
    set_window_for(state, false);
    for (const auto& f : go) send(f);
    return;
  }
  if (state == SinkState::kOpen && broker_down()) {
    set_window_for(state, false);  // no probe while the broker is away: its return is the probe
    return;
  }
  if (state == SinkState::kOpen && health_->take_probe(Clock::now())) {
    std::shared_ptr<InFlight> probe;
    {
      MutexLock lock(mu_);
      if (!waiting_.empty()) {
        probe = std::move(waiting_.front());
        waiting_.pop_front();
      }
    }
    if (probe) {
      probe->probe = true;
      set_window_for(state, false);
      send(probe);
      return;
    }
    // Nothing in hand: one event is asked for and becomes the probe when it comes.
    health_->return_probe(Clock::now());
    set_window_for(state, true);
    return;
  }
  if (state == SinkState::kPaused || window_ != 1) set_window_for(state, false);
}

void SinkStage::hold(InFlight* f) {
  MutexLock lock(mu_);
  holding_.insert(f);
}

bool SinkStage::broker_down() const {
  const auto link = sink_->broker_link();
  return link && !link->connected;
}

void SinkStage::follow_broker(Clock::time_point now) {
  const auto link = sink_->broker_link();
  if (!link || link->since_ms == 0) return;  // the first connect is under way: nothing known yet
  if (!link->connected) {
    std::string reason = "broker " + link->broker + " is not connected";
    if (!link->last_error.empty()) reason += ": " + link->last_error;
    health_->broker_down(now, reason);
  } else if (broker_was_down_) {
    health_->broker_up(now);
  }
  broker_was_down_ = !link->connected;
}

void SinkStage::keep_alive() {
  const auto every = keep_alive_after(options_.sink_ack_wait);
  const auto now = Clock::now();
  if (!stopping_.load()) follow_broker(now);
  bool due = false;
  {
    MutexLock lock(mu_);
    for (InFlight* f : holding_) {
      if (now - std::max(f->started, f->progressed) < every) continue;
      f->progressed = now;
      if (!f->msg->in_progress()) metrics_.ack_failures.fetch_add(1, std::memory_order_relaxed);
    }
    // The circuit's work for the consumer's thread: a probe that is due, or events held
    // while it was open that may go now.
    if (!stopping_.load()) {
      const SinkState s = health_->state();
      const auto next = health_->next_probe();
      due = (s == SinkState::kOpen && next && now >= *next) || (s == SinkState::kClosed && !waiting_.empty()) ||
            std::any_of(delayed_.begin(), delayed_.end(),
                        [&](const std::shared_ptr<InFlight>& f) { return f->retry_due <= now; });
    }
  }
  const SinkHealthView v = health_->view(now);
  metrics_.sink_state.store(static_cast<int64_t>(v.state), std::memory_order_relaxed);
  metrics_.sink_transitions.store(v.transitions, std::memory_order_relaxed);
  metrics_.sink_open_ms.store(v.not_closed.count(), std::memory_order_relaxed);
  metrics_.sink_queued.store(sink_->queued(), std::memory_order_relaxed);
  if (due) consumer_->kick();
}

void SinkStage::finish(const std::shared_ptr<InFlight>& f) {
  metrics_.latency.observe(Clock::now() - f->started);
  metrics_.in_flight.fetch_sub(1, std::memory_order_relaxed);
  std::optional<std::shared_ptr<InFlight>> next;
  {
    MutexLock lock(mu_);
    holding_.erase(f.get());  // before the message goes: keep_alive() reads it under mu_
    // Its key's next event goes now (a stop takes those that wait instead).
    if (f->keyed && !stopping_.load()) next = keys_.release(f->key, f);
  }
  f->msg.reset();  // acked or naked: nothing of it is needed after the stage lets go
  consumer_->release(1);
  if (next) dispatch(std::move(*next));
  // Notified under the lock: once it is released, stop() may destroy the stage.
  MutexLock lock(mu_);
  --in_flight_;
  cv_.notify_all();
}

// `f` by value (and dead_letter's): the call keeps the in-flight record alive whatever
// the sink does with the callback that holds the other reference.
// NOLINTNEXTLINE(performance-unnecessary-value-param)
void SinkStage::on_result(std::shared_ptr<InFlight> f, DeliveryResult r) {
  if (!f->traceparent.empty()) {
    trace::Span s;
    trace::SpanExporter* x = trace::exporter();
    if (x != nullptr && trace::set_ids(s, f->traceparent, f->msg->header(trace::kHeaderTraceparent))) {
      s.name = "sink";
      s.flow = flow_;
      s.sink = sink_name_;
      s.start_ns = f->start_ns;
      s.end_ns = trace::now_ns();
      s.error = r.kind != DeliveryResult::Kind::kOk;
      x->record(std::move(s));
    }
  }
  const auto now = Clock::now();
  switch (r.kind) {
    case DeliveryResult::Kind::kOk:
      if (!f->msg->ack(&metrics_.ack_failures)) metrics_.ack_failures.fetch_add(1, std::memory_order_relaxed);
      metrics_.acked.fetch_add(1, std::memory_order_relaxed);
      if (health_->answered(now, f->probe)) consumer_->kick();  // closed: what waits goes now
      finish(f);
      return;
    case DeliveryResult::Kind::kDead:
      metrics_.errors.fetch_add(1, std::memory_order_relaxed);
      if (health_->answered(now, f->probe, false)) consumer_->kick();
      f->last_error = r.reason;
      dead_letter(f, r.reason);
      return;
    case DeliveryResult::Kind::kRetry: break;
  }
  metrics_.errors.fetch_add(1, std::memory_order_relaxed);
  if (stopping_.load()) {
    // Abandoned by the sink's stop (or failing while the stage stops): back to JetStream
    // for the next instance, without a verdict on the receiver.
    const auto delay = retry_backoff(1);
    if (!f->msg->nak(delay)) metrics_.ack_failures.fetch_add(1, std::memory_order_relaxed);
    finish(f);
    return;
  }
  if (f->failing_since == 0) f->failing_since = wall_ms();
  f->last_error = r.reason;
  const bool held = health_->failed(now, r.reason, r.retry_after, f->probe);
  const int cap = sink_->max_retries();
  if (cap != flows::kNoRetryCap && f->attempt > static_cast<uint64_t>(cap)) {
    dead_letter(f, "gave up after " + std::to_string(f->attempt) + " attempts (retries " + std::to_string(cap) +
                       "): " + r.reason);
    return;
  }
  if (wall_ms() - f->failing_since >= retry_.give_up_after.count()) {
    dead_letter(f, "gave up after failing for " + duration_text(retry_.give_up_after) + " (give_up_after, " +
                       std::to_string(f->attempt) + " attempts): " + r.reason);
    return;
  }
  if (held) {
    // The receiver is away: the event waits here for the circuit, not on its own schedule.
    f->attempt += 1;
    wait(f);
    return;
  }
  const auto delay = r.retry_after ? std::min(*r.retry_after, std::chrono::milliseconds(600'000))
                                   : with_jitter(retry_.after(f->attempt));
  if (f->keyed) {
    // In place, holding its key: the key's later events wait behind it (ADR 0310).
    f->attempt += 1;
    f->retry_due = now + delay;
    MutexLock lock(mu_);
    delayed_.push_back(f);
    return;
  }
  retry_later(f, delay, r.reason);
}

void SinkStage::retry_later(const std::shared_ptr<InFlight>& f, std::chrono::milliseconds delay,
                            const std::string& reason) {
  const BusMessage& m = *f->msg;
  Headers h;
  h.reserve(10);
  if (auto tp = m.header(trace::kHeaderTraceparent); !tp.empty())
    h.emplace_back(trace::kHeaderTraceparent, std::string(tp));
  if (auto ts = m.header(trace::kHeaderTracestate); !ts.empty())
    h.emplace_back(trace::kHeaderTracestate, std::string(ts));
  h.emplace_back(layout::kHeaderId, f->id);
  // Its own dedup key: the copy must not be taken for the output it repeats.
  h.emplace_back(layout::kHeaderMsgId, f->id + "#" + sink_name_ + "#" + std::to_string(f->attempt));
  if (auto v = m.header(layout::kHeaderVersion); !v.empty()) h.emplace_back(layout::kHeaderVersion, std::string(v));
  if (auto t = m.header(layout::kHeaderIngestUs); !t.empty()) h.emplace_back(layout::kHeaderIngestUs, std::string(t));
  if (auto meta = m.header(layout::kHeaderMeta); !meta.empty()) h.emplace_back(layout::kHeaderMeta, std::string(meta));
  h.emplace_back(layout::kHeaderAttempts, std::to_string(f->attempt));
  h.emplace_back(layout::kHeaderFailingSince, std::to_string(f->failing_since));
  h.emplace_back(layout::kHeaderRetryAt, std::to_string(wall_ms() + delay.count()));
  h.emplace_back(layout::kHeaderLastError, one_line_reason(reason));
  log::debug("sink delivery failed, retried later", {{"flow", flow_},
                                                     {"sink", sink_name_},
                                                     {"id", f->id},
                                                     {"attempt", std::to_string(f->attempt)},
                                                     {"reason", reason},
                                                     {"retry_in", duration_text(delay)}});
  consumer_->publish(layout::output_subject(flow_, sink_name_), m.data(), h, options_.publish_timeout,
                     [this, f, delay](const Status& s, const PubAck&) {
                       // Stored: the copy carries the event on. Not stored: this one is naked for the
                       // same wait instead (its count then holds that failure, ADR 0295).
                       bool taken = s ? f->msg->ack(&metrics_.ack_failures) : f->msg->nak(delay);
                       if (!taken) metrics_.ack_failures.fetch_add(1, std::memory_order_relaxed);
                       consumer_->deferred(delay);
                       finish(f);
                     });
}

// NOLINTNEXTLINE(performance-unnecessary-value-param)
void SinkStage::dead_letter(std::shared_ptr<InFlight> f, std::string reason) {
  DeadLetter d;
  d.flow = flow_;
  d.version = version_;
  std::string_view v = f->msg->header(layout::kHeaderVersion);
  if (!v.empty()) d.version = std::atoll(std::string(v).c_str());
  d.stage = stage_;
  d.reason = std::move(reason);
  d.last_error = f->last_error;
  d.deliveries = f->attempt;
  d.event_id = f->id;
  d.replay_subject = layout::output_subject(flow_, sink_name_);
  d.body = f->msg->data();
  d.source_sequence = f->msg->stream_sequence();
  d.source_stream = layout::flow_stream(flow_);
  d.traceparent = f->msg->header(trace::kHeaderTraceparent);
  d.tracestate = f->msg->header(trace::kHeaderTracestate);
  d.meta = f->msg->header(layout::kHeaderMeta);
  dlq_.publish(
      d,
      [this, f](const Status& s, const PubAck&) {
        bool taken = s ? f->msg->ack(&metrics_.ack_failures) : f->msg->nak(std::chrono::seconds(1));
        if (s) metrics_.dead.fetch_add(1, std::memory_order_relaxed);
        if (!taken) metrics_.ack_failures.fetch_add(1, std::memory_order_relaxed);
        finish(f);
      },
      consumer_.get());
}

}  // namespace weir
