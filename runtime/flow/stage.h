// Stages: the data plane. Each reads a durable pull consumer and acknowledges each input
// only after everything it produced is acknowledged (docs/architecture.md, guarantee 2).
// The flow stage runs on the flow loop (docs/adr/0220-flow-stage-on-a-loop.md): one
// thread, "weir-flows", with its own event-loop NATS connection shared by every flow stage
// of the process. Its messages are read, run, published and acked on that thread; a read
// event's messages run as one batch, outputs' PubAcks are read there too, and the acks,
// the next pull requests and the outputs of one loop turn leave in one write. Timers
// (re-requests, publish deadlines) are that loop's. With BusOptions::flow_loop off it
// runs as before ADR 0220, on cnats' shared delivery pool (ADR 0150).
// The sink stage has no thread of its own either: every sink stage's messages are read on
// the sink loop, "weir-sinks", with its own event-loop connection
// (docs/adr/0258-sink-loop.md; one stage's messages one at a time, in order) and handed to
// the sink there; sink results complete them on whatever thread reports them (their acks
// are buffered on the loop's connection and leave with its next flush), and the loop's
// timers re-request. With BusOptions::flow_loop off both stages run on cnats' shared
// delivery pool (ADR 0150), re-requested by the Bus's timer thread. With
// BusOptions::delivery_loops 1 both loops are one, "weir-delivery" (ADR 0272).
// The flow stage keeps up to two batches' worth of messages requested or in hand; the last
// output callback of a batch acks it (docs/adr/0084-two-flow-batches-in-flight.md).
//
//  FlowStage  weir.<flow>.in  → Flow::run → weir.<flow>.out.<sink> (or the DLQ)
//  SinkStage  weir.<flow>.out.<sink> → Sink::deliver → ack / nak with backoff / DLQ
//
// Lifecycle: construct, start() once, stop() once (finishes the batch in hand, waits
// for in-flight deliveries up to the drain timeout), then destroy. Nothing a stage does on
// its loop or pool thread blocks: it must not (the PubAcks it would wait for come on the
// same thread). pause/resume/stop come from other threads and only post to it or wait.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "flows/flow.h"
#include "flows/json_limits.h"
#include "runtime/nats/bus.h"
#include "runtime/flow/dlq.h"
#include "runtime/flow/key_order.h"
#include "runtime/base/metrics.h"
#include "runtime/flow/own_naks.h"
#include "runtime/flow/sink_health.h"
#include "runtime/ports/sink.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

// The consumers' AckWaits. What a stage holds is kept alive with in-progress acks once it
// has been held a quarter of AckWait (keep_alive_after), so AckWait bounds how long a peer
// waits for what an instance that died had in hand, not how long a flow, its PubAcks or a
// receiver may take: 1.5 s, which nats-server 2.9.10 redelivers ~1.5 s after the last
// receipt or in-progress ack, so a peer has it within 2 s of a kill -9
// (docs/adr/0297-two-second-failover.md; before it 0082's 12 s and 0293's 5 s).
inline constexpr std::chrono::milliseconds kFlowAckWait{1500};
inline constexpr std::chrono::milliseconds kSinkAckWait{1500};

// How long a stage holds a message (since it came or since its last in-progress ack)
// before it sends one: a quarter of AckWait, at least the consumer's ~100 ms tick. With the
// tick's lateness a message is refreshed every ~475 ms at 1.5 s, so a loop stalled ~1 s
// still costs no redelivery (ADR 0297).
constexpr std::chrono::milliseconds keep_alive_after(std::chrono::milliseconds ack_wait) {
  return std::max(ack_wait / 4, std::chrono::milliseconds(100));
}

struct StageOptions {
  // Messages per pull request. The flow stage starts with `batch` and, while its inputs
  // run fast, asks for up to `max_batch`: as many as keep the whole window
  // (batches_in_flight requests' worth) within `window_run_budget` at the run time per
  // event it measured (flow_batch_for, docs/adr/0262-deeper-flow-window.md). The sink
  // stage's window is its sink's max_in_flight.
  int batch = 256;
  int max_batch = 1024;
  std::chrono::milliseconds window_run_budget{500};
  // How long one pull request waits on the server (its "expires"): an idle stage sends
  // one request per this (ADR 0150).
  std::chrono::milliseconds fetch_wait{2000};
  std::chrono::milliseconds publish_timeout{5000};
  std::chrono::milliseconds drain_timeout{10000};
  std::chrono::milliseconds flow_ack_wait{kFlowAckWait};
  std::chrono::milliseconds sink_ack_wait{kSinkAckWait};
  // Poison events (ADR 0081): a message delivered more than `max_deliver` times is
  // dead-lettered before it is handled again, so an event that crashes or wedges the
  // process ends in the DLQ after that many restarts instead of looping.
  int max_deliver = 5;
  // Nesting bound for events parsed by the flow stage (http.max_depth): events that
  // reached the stream by another route than ingress are bounded here too.
  int max_depth = flows::kDefaultMaxDepth;
  // Flow stage: batches between request and ack at once. With 2 the next batch is requested
  // and run while the last one waits for its PubAcks; outputs still leave in stream order
  // (docs/adr/0084-two-flow-batches-in-flight.md). 1 restores one batch at a time.
  int batches_in_flight = 2;
};

class FlowStage {
 public:
  // Reads `input_stream`/`input_subject`: the flow's own `.in`, or — for a flow chained
  // with `from: {flow: other.sink}` — the other flow's `.out.<sink>`.
  FlowStage(Bus& bus, DeadLetters& dlq, Metrics& metrics, std::shared_ptr<const flows::Flow> flow, StageOptions options,
            std::string input_stream = "", std::string input_subject = "");
  ~FlowStage();
  Status start();
  void request_stop();  // returns at once; stop() then waits for the batches in hand
  void stop();
  // Started, not stopping, and the server answers its pull requests.
  bool healthy() const { return started_.load() && !stopping_.load() && consumer_->healthy(); }
  std::shared_ptr<const flows::Flow> flow() const;

  // The pause barrier of a promote (docs/adr/0042-version-registry.md). pause() stops
  // handling: it returns true once the batches in hand (if any) are run, published and
  // acked, and no batch starts until resume(); false when that took longer than
  // `timeout` (the stage stays paused). A batch fetched while paused waits and is run by
  // the flow given to resume(). May be called before start() and from any thread.
  bool pause(std::chrono::milliseconds timeout);
  void resume(std::shared_ptr<const flows::Flow> flow);
  bool paused() const;
  // A cluster member may handle events only while its membership is fresh (ADR 0042):
  // a batch starts only when `gate()` is true (checked per batch). Set before start().
  void set_gate(std::function<bool()> gate) { gate_ = std::move(gate); }
  // Set before start() for a chained flow (its inputs are in another flow's stream, its
  // outputs go to its own): true (with the reason) while its own stream is at its backlog
  // bounds. No batch runs then; its inputs are handed back for a while, not counted against
  // them, and wait in the other flow's stream, whose ingress then refuses (ADR 0080).
  void set_output_full(std::function<bool(std::string*)> full) { output_full_ = std::move(full); }

 private:
  struct Batch;
  // How long a batch runs on the flow loop before it lets the loop's other work in
  // (docs/adr/0288-flow-batches-in-slices.md).
  static constexpr std::chrono::milliseconds kRunSlice{2};
  // On the consumer's thread (flow loop or pool): a message (or nullptr: a kick, or the
  // end of a loop burst, to look at held_ again).
  void on_message(std::unique_ptr<BusMessage> m);
  // Starts what is held unless paused, gated or stopping (pool thread).
  void run_held();
  // The consumer's window from paused_/stopping_/careful_ and batch_.
  void apply_window();
  // After a batch ran: updates the run time per event and, when the request size it
  // allows changed, the window.
  void note_run_time(size_t n, std::chrono::steady_clock::duration took);
  void start_batch(std::vector<std::unique_ptr<BusMessage>> batch, std::shared_ptr<const flows::Flow> flow);
  // On the flow loop: runs the queued batches for kRunSlice, then yields the loop and
  // goes on in a later turn, so other flows' work, acks and timers run between (ADR 0288).
  void run_slices();
  void finish_batch(Batch& b, const std::vector<char>& ok);
  void run_input(const std::shared_ptr<Batch>& b, size_t i, const std::string& version);
  void emit_output(const std::shared_ptr<Batch>& b, size_t i, const std::string& id, const std::string& version,
                   std::string span_tp, const std::string& sink, std::string_view body);
  void dead_letter_input(const std::shared_ptr<Batch>& b, size_t i, const std::string& id, std::string reason,
                         uint64_t deliveries);
  uint64_t counted_deliveries(const BusMessage& m) const;
  // On the consumer's tick: an in-progress ack for each message held (not started, or in a
  // batch not yet acked) longer than keep_alive_after(AckWait) since it came or since its
  // last one (docs/adr/0297-two-second-failover.md).
  void keep_alive();
  // Batches started on the flow loop, not yet all launched (run_slices); flow loop only.
  struct Slice {
    std::shared_ptr<Batch> b;
    size_t next = 0;  // the next input to run
    std::string version;
  };
  std::deque<Slice> slices_;
  bool slice_posted_ = false;    // a turn is queued on the loop
  bool running_slices_ = false;  // run_slices() is on the stack
  // weir.<flow>.out.<sink>, built once per sink (pool thread only).
  const std::string& output_subject(const std::string& sink);

  Bus& bus_;
  DeadLetters& dlq_;
  StageMetrics& metrics_;
  mutable Mutex flow_mu_;
  std::shared_ptr<const flows::Flow> flow_ GUARDED_BY(flow_mu_);
  std::condition_variable pause_cv_;
  bool paused_ GUARDED_BY(flow_mu_) = false;
  int in_flight_batches_ GUARDED_BY(flow_mu_) = 0;                      // started, not yet acked
  int batch_ GUARDED_BY(flow_mu_) = 0;                                  // the pull request size now (flow_batch_for)
  std::chrono::nanoseconds per_event_ GUARDED_BY(flow_mu_){0};          // run time per event, smoothed
  std::vector<std::unique_ptr<BusMessage>> held_ GUARDED_BY(flow_mu_);  // received, not started
  // held_'s last in-progress ack, or the last tick that found it empty (keep_alive).
  std::chrono::steady_clock::time_point held_progressed_ GUARDED_BY(flow_mu_);
  // Batches started and not yet acked or naked, kept alive by keep_alive(); a batch leaves
  // before its messages are acked (finish_batch), so no in-progress ack follows an ack.
  Mutex live_mu_;
  std::unordered_set<Batch*> live_ GUARDED_BY(live_mu_);
  // One message at a time after a start and while redeliveries come (ADR 0081).
  std::atomic<bool> careful_{true};
  OwnNaks own_naks_;                               // redeliveries the poison rule does not count (ADR 0225)
  std::function<bool()> gate_;                     // set before start(); read on the pool thread
  std::function<bool(std::string*)> output_full_;  // set before start(); read on the pool thread
  std::atomic<bool> waiting_for_room_{false};      // output_full_ said so last: logged once
  void hand_back_for_room(std::vector<std::unique_ptr<BusMessage>> held, const std::string& why);
  std::string name_;
  StageOptions options_;
  std::string input_stream_, input_subject_;
  std::unique_ptr<PullConsumer> consumer_;                     // set by start(), destroyed with the stage
  std::unordered_map<std::string, std::string> out_subjects_;  // pool thread only
  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
};

class SinkStage {
 public:
  SinkStage(Bus& bus, DeadLetters& dlq, Metrics& metrics, std::string flow, int64_t version, std::string sink_name,
            std::unique_ptr<Sink> sink, StageOptions options);
  ~SinkStage();
  Status start();
  void request_stop();  // stops taking messages at once; stop() then drains
  void stop();
  // stop() with the wait for deliveries in flight bounded by `budget` instead of
  // drain_timeout: the runtime's drain shares one drain_timeout among all stages.
  void stop_within(std::chrono::milliseconds budget);
  bool healthy() const { return started_.load() && !stopping_.load() && consumer_->healthy(); }
  // The sink's circuit (docs/adr/0294-sink-circuit-breaker.md): shown by GET /sinks and
  // paused or resumed by hand through pause()/resume() (any thread).
  const std::shared_ptr<SinkHealth>& health() const { return health_; }
  const std::string& name() const { return sink_name_; }
  // The sink's broker connection (MQTT, NATS); nullopt for sinks without one. Any thread.
  std::optional<BrokerLink> broker_link() const { return sink_->broker_link(); }
  bool pause();
  bool resume();

 private:
  struct InFlight;
  // The consumer's thread: hands waiting events to the sink when the circuit is closed,
  // sends the probe when one is due, and sets the window the circuit allows.
  void pump();
  void send(const std::shared_ptr<InFlight>& f);
  // Keeps a delivery in hand (un-acked, kept alive) until the circuit lets it go.
  void wait(std::shared_ptr<InFlight> f);
  // A retryable failure while the sink is closed: a copy of the event that carries its
  // attempts goes back into the stream, due after `delay`, and this one is acked
  // (docs/adr/0295-durable-retry-schedule.md).
  void retry_later(const std::shared_ptr<InFlight>& f, std::chrono::milliseconds delay, const std::string& reason);
  void set_window_for(SinkState s, bool fetch_probe);
  // On the consumer's pool thread: hands a message to the sink (the window keeps at most
  // max_in_flight() in hand, so every message that arrives has a free slot).
  void on_message(std::unique_ptr<BusMessage> m);
  void on_result(std::shared_ptr<InFlight> f, DeliveryResult r);
  void dead_letter(std::shared_ptr<InFlight> f, std::string reason);
  void finish(const std::shared_ptr<InFlight>& f);
  // On the consumer's tick: an in-progress ack for each delivery held longer than a quarter
  // of AckWait since it came or since its last one (docs/adr/0293-in-progress-acks.md).
  void keep_alive();
  // On the consumer's tick: a broker sink's lost connection opens the circuit at once, its
  // return makes the probe due (docs/adr/0315-broker-sink-health.md).
  void follow_broker(std::chrono::steady_clock::time_point now);
  bool broker_down() const;
  void hold(InFlight* f);  // now in holding_ (until finish())
  // Sends `f`, or keeps it for the circuit (wait()) when the sink is held. With order_by
  // (docs/adr/0310-per-key-order.md) only its key's owner goes; a later event of the key
  // waits behind it in keys_ until finish() releases the key.
  void dispatch(std::shared_ptr<InFlight> f);
  // order_by's key of f's event into f->key; false when it cannot be had (f is then
  // dead-lettered with the reason).
  bool key_of(const std::shared_ptr<InFlight>& f);
  // Keyed events whose in-place retry is due (consumer's thread; ADR 0310).
  std::vector<std::shared_ptr<InFlight>> take_due_retries(std::chrono::steady_clock::time_point now);

  Bus& bus_;
  DeadLetters& dlq_;
  StageMetrics& metrics_;
  std::string flow_, sink_name_, stage_;
  int64_t version_;
  std::unique_ptr<Sink> sink_;
  StageOptions options_;
  flows::RetrySpec retry_;
  std::shared_ptr<SinkHealth> health_;
  std::unique_ptr<PullConsumer> consumer_;  // set by start(), destroyed with the stage
  int window_ = -1;                         // the window last set by set_window_for (consumer's thread)
  bool broker_was_down_ = false;            // follow_broker's last reading (consumer's thread)
  Mutex mu_;
  // Deliveries held while the circuit is open or paused, oldest (stream order) first.
  std::deque<std::shared_ptr<InFlight>> waiting_ GUARDED_BY(mu_);
  std::condition_variable cv_;
  int in_flight_ GUARDED_BY(mu_) = 0;
  std::unordered_set<InFlight*> holding_ GUARDED_BY(mu_);              // handed to the sink or the DLQ, not finished
  std::vector<std::unique_ptr<BusMessage>> returned_ GUARDED_BY(mu_);  // arrived while stopping
  const flows::EventExpression* order_by_ = nullptr;                   // the sink's, for its life
  KeyOrder<std::shared_ptr<InFlight>> keys_ GUARDED_BY(mu_);
  // Keyed events that failed while the sink was closed, retried in place when due: they
  // keep their key (a retry copy at the stream's end would let the key's later events pass).
  std::vector<std::shared_ptr<InFlight>> delayed_ GUARDED_BY(mu_);
  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};  // written under mu_
  std::atomic<bool> stopped_{false};
};

// The flow stage's pull request size for a measured run time per event (0: none yet):
// the largest multiple of options.batch, at most options.max_batch, whose window
// (batches_in_flight of them) runs within options.window_run_budget. When not even
// options.batch fits, as many as fit, at least 1: a slow flow does not hold more than its
// budget's worth in hand (ADR 0262, 0288). The budget was set as a quarter of what the
// 12 s AckWait of ADR 0082 allowed for running (ADR 0262); held batches are kept alive
// with in-progress acks since ADR 0297.
int flow_batch_for(const StageOptions& options, std::chrono::nanoseconds per_event);

// Backoff before re-sending attempt `attempt` (1-based) when the sink gave no Retry-After.
std::chrono::milliseconds retry_backoff(uint64_t attempt);

}  // namespace weir
