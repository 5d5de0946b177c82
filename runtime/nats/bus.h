// Bus: weir's one wrapper around cnats and JetStream (docs/adr/0002-bus-layout.md).
//
// Owns the NATS connection, tracks whether it is up, sets up the streams and durable
// consumers of the bus layout, and publishes to JetStream *pipelined*: every publish
// carries its own reply inbox, many are in flight at once on one connection, and each
// completes through its own callback (PubAck, JetStream error, timeout, or disconnect).
// cnats' js_PublishAsync has neither per-message callbacks nor per-message deadlines,
// which ingress (answer each HTTP request) and stages (ack each input) both need.
//
// Threading: every method is thread-safe. Publish callbacks run on a thread of cnats'
// shared delivery pool or on the deadline sweeper thread; they must be quick and must not
// block (above all not on a cnats request: its reply may wait for the same pool thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/nats/nats_status.h"
#include "runtime/base/status.h"
#include "runtime/base/thread_annotations.h"

struct __natsConnection;
struct __natsOptions;
struct __natsMsg;
struct __natsSubscription;
struct __jsCtx;
struct jsStreamConfig;

namespace weir {

class NatsLoop;
class DeliveryLedger;

using Headers = std::vector<std::pair<std::string, std::string>>;

// Names of the bus layout (docs/adr/0002-bus-layout.md, 0112-cluster-namespaces.md). One
// stream per flow holds its input and its sinks' queues. Standalone names are as they have
// always been; in a cluster C every stream, subject and bucket carries C, so two clusters
// on one NATS never share anything:
//                 standalone                 cluster C
//   flow stream   weir_<flow>                weirc_<C>__<flow>
//   subjects      weir.<flow>.in|out.<sink>  weirc.<C>.<flow>.in|out.<sink>
//   dead letters  weir_dlq, weir.dlq.>       weirc_<C>__dlq, weirc.<C>.dlq.>
//   source state  weir_state (KV)            weir_state_<C>
// (Cluster names have no "__" and flows may not be named "dlq", so no two names meet.)
namespace layout {
// The cluster this process belongs to ("" = standalone). Set once at start, before any
// name is made and before any thread that uses names runs; read-only after.
void set_cluster(std::string_view cluster);
const std::string& cluster();
// Why `name` cannot be a cluster name ("" when it can): [A-Za-z0-9_-]{1,32}, no "__".
std::string invalid_cluster_name(std::string_view name);
std::string flow_stream(std::string_view flow);
std::string flow_subjects(std::string_view flow);  // <prefix>.<flow>.>
std::string input_subject(std::string_view flow);
std::string output_subject(std::string_view flow, std::string_view sink);
std::string flow_consumer(std::string_view flow);                         // <flow>
std::string sink_consumer(std::string_view flow, std::string_view sink);  // <flow>-to-<sink>
// The flow whose stream holds `subject` (<flow> for weir.<flow>.in|out.<sink>), or "" when
// it is no flow subject of this namespace: where a dead-letter replay writes (ADR 0298).
std::string flow_of_subject(std::string_view subject);
std::string dlq_stream();
std::string dlq_subjects();  // <prefix>.dlq.>
std::string dlq_subject(std::string_view flow, std::string_view stage);
std::string state_bucket();
// True when `subject` lies in any weir namespace (weir.> or weirc.>): sinks may not write there.
bool is_internal_subject(std::string_view subject);
// Header names carried on bus messages.
inline constexpr const char* kHeaderId = "Weir-Id";         // stable event id
inline constexpr const char* kHeaderMsgId = "Nats-Msg-Id";  // per-hop dedup key
inline constexpr const char* kHeaderVersion = "Weir-Version";
inline constexpr const char* kHeaderIngestUs = "Weir-Ingest-Us";
// An http-in event's request metadata (method, path, query, chosen headers) as compact
// ASCII JSON, carried beside the body through every stage, dead letter and replay
// (docs/adr/0312-request-metadata.md).
inline constexpr const char* kHeaderMeta = "Weir-Meta";
// The body's CRC-32C, 8 hex digits: set on every publish, checked on every delivery (ADR 0286).
inline constexpr const char* kHeaderSum = "Weir-Sum";
// A sink's retry copy (docs/adr/0295-durable-retry-schedule.md): the attempts made before
// it, when the event first failed (ms since the epoch) and when the copy is due.
inline constexpr const char* kHeaderAttempts = "Weir-Attempts";
inline constexpr const char* kHeaderFailingSince = "Weir-Failing-Since";
inline constexpr const char* kHeaderRetryAt = "Weir-Retry-At";
// The reason of the copy's last failed attempt: a dead letter past max_deliver keeps it
// (docs/adr/0313-sink-health-from-recent-results.md).
inline constexpr const char* kHeaderLastError = "Weir-Last-Error";
}  // namespace layout

struct BusOptions {
  std::string url;
  std::string creds_file;  // optional .creds file
  std::string name = "weir";
  std::chrono::milliseconds reconnect_wait{250};
  int stream_replicas = 1;
  std::chrono::seconds dedup_window{
      360};  // ≥ webhook timestamp tolerance (5 min) + 1 min skew: replays dedup (ADR 0102)
  int64_t stream_max_bytes = 1LL << 30;  // per flow stream; the bound on a stalled sink's backlog
  // Stream/consumer set-up calls are retried with backoff this long while JetStream is not
  // ready (fresh server or cluster electing leaders) or a peer is creating the same thing.
  std::chrono::milliseconds setup_timeout{30000};
  // Threads of cnats' shared delivery pool: the threaded connection's subscriptions (pool
  // consumers, the PubAcks of Bus::publish) are handled on these (ADR 0150; the stages are
  // on the loops, ADR 0220, 0258). A process-wide setting: the first Bus sets it.
  int delivery_threads = 2;
  // Consumers asking for a loop run on it: one thread ("weir-flows") with its own
  // event-loop connection for every flow stage (ADR 0220), another ("weir-sinks") for every
  // sink stage (ADR 0258). Internal switch: false puts them back on the shared delivery
  // pool of the control connection (ADR 0150).
  bool flow_loop = true;
  // 1: the flow and sink consumers share one loop thread ("weir-delivery") and its
  // connection; 2: a loop each, as above (docs/adr/0272-one-delivery-loop-on-small-machines.md).
  int delivery_loops = 2;
  // The consumer loops hold their acks up to this long for a write to ride with
  // (NatsLoop::hold_ack, docs/adr/0264-held-acks.md); 0 = each ack is written at once.
  std::chrono::milliseconds ack_delay{5};
  std::function<void(bool connected)> on_connection_change;
};

struct PubAck {
  uint64_t sequence = 0;
  bool duplicate = false;
  // Set when JetStream answered with {"error":{…}}: its "code" and "err_code" (0 if absent).
  bool js_error = false;
  int js_code = 0;
  int js_err_code = 0;
};

using PublishCallback = std::function<void(const Status&, const PubAck&)>;

// A JetStream message received by a PullConsumer. Owns the natsMsg; destroys it in the
// destructor. Acks are published to the message's `$JS.ACK.…` reply subject on the Bus's
// connection (natsMsg_Ack needs a JetStream subscription; ours is a plain one), so a
// message may be acked after its consumer is gone; its delivery count, stream sequence
// and pending count are read from that subject.
class BusMessage {
 public:
  // `held_by`: the consumer loop that read it; its acks are held for the loop's next
  // write when acked on that loop's thread (NatsLoop::hold_ack). May be null.
  // `keep`: shares the ownership of `nc` when it may be replaced while the message lives
  // (a loop connection, docs/adr/0287-rebuilt-loop-connections.md); may be null.
  BusMessage(__natsMsg* msg, __natsConnection* nc, NatsLoop* held_by = nullptr,
             std::shared_ptr<__natsConnection> keep = nullptr)
      : msg_(msg), nc_(nc), held_by_(held_by), keep_(std::move(keep)) {}
  ~BusMessage();
  BusMessage(const BusMessage&) = delete;
  BusMessage& operator=(const BusMessage&) = delete;

  std::string_view data() const;
  std::string_view subject() const;
  std::string_view header(const char* name) const;  // "" when absent
  uint64_t deliveries() const;                      // 1 on first delivery
  // Deliveries that are not the event's failures, which deliveries() does not count: copies
  // the consumer refused for a body that did not match its Weir-Sum (docs/adr/0286-body-
  // checksums.md), and deliveries lost with a dropped connection (ADR 0289).
  void set_uncounted(uint32_t n) { uncounted_ = n; }
  // The consumer's DeliveryLedger (docs/adr/0292-deliveries-weir-was-handed.md): an ack or
  // a term tells it this message will not be delivered again.
  void set_ledger(std::shared_ptr<DeliveryLedger> ledger) { ledger_ = std::move(ledger); }
  uint64_t stream_sequence() const;
  // When the message was stored, in ns since the Unix epoch (the ack subject's timestamp);
  // 0 when unknown.
  uint64_t stored_ns() const;
  uint64_t pending() const;  // messages left in the consumer after this one
  // Fire-and-forget; false when the connection did not take it (e.g. the reconnect
  // buffer is full): the message is then redelivered after AckWait. A held ack (see the
  // constructor) returns true; if the connection does not take it when it is written,
  // `*failed_later` (when given) counts it.
  bool ack(std::atomic<uint64_t>* failed_later = nullptr);
  bool nak(std::chrono::milliseconds delay);
  bool term();
  // "Still working on it": JetStream restarts the message's AckWait (docs/adr/0293-in-
  // progress-acks.md). Fire-and-forget, like ack().
  bool in_progress();

 private:
  void load_meta() const;
  bool reply(const char* body);
  __natsMsg* msg_;
  __natsConnection* nc_;
  NatsLoop* held_by_;
  std::shared_ptr<__natsConnection> keep_;
  std::shared_ptr<DeliveryLedger> ledger_;
  mutable bool meta_loaded_ = false;
  mutable uint64_t deliveries_ = 1, sequence_ = 0, pending_ = 0, stored_ns_ = 0;
  uint32_t uncounted_ = 0;
};

// The Bus's consumer loops (ADR 0220, ADR 0258): one thread and one event-loop connection
// each, shared by every consumer that asks for it.
enum class ConsumerLoop { kNone = -1, kFlows = 0, kSinks = 1 };

struct ConsumerOptions {
  std::string stream, durable, filter_subject;
  std::chrono::milliseconds ack_wait{30000};
  int64_t max_ack_pending = 1000;
  int replicas = 0;  // 0 = as the stream
  // Where the server keeps the durable's state (delivered, acked, pending): unset = in its
  // memory on one server (replicas 1), in its files on a cluster of servers
  // (docs/adr/0320-consumer-state-in-memory.md).
  std::optional<bool> memory_state;
  // How long one pull request waits on the server for messages (its "expires"). An idle
  // consumer sends one request per this; a request the server lost (a restart without a
  // reconnect seen here, a leader change) is re-sent after this plus a margin.
  std::chrono::milliseconds request_expires{2000};
  // Which of the Bus's consumer loops reads it (when BusOptions::flow_loop); none: the
  // delivery pool.
  ConsumerLoop loop = ConsumerLoop::kNone;
  // The starvation watch (docs/adr/0235-starved-consumer-recovery.md): requests out and no
  // message for this long → the consumer's info is read; the same starved info again this
  // much later → the durable is created again from its ack floor. 0 = off.
  std::chrono::milliseconds starve_check{10000};
  // Counts those recoveries (a metric; may be null; must outlive the consumer).
  std::atomic<uint64_t>* recreated = nullptr;
  // Deliveries refused for a body that does not match its Weir-Sum (ADR 0286); may be null.
  std::atomic<uint64_t>* corrupt = nullptr;
  // Called on every tick of the consumer (~100 ms; on its loop's thread, or the Bus's timer
  // thread for a pool consumer) until stop(): for an owner that tells the server it is still working on messages it
  // holds (BusMessage::in_progress). May be empty.
  std::function<void()> on_tick;
};

// A durable pull consumer bound by one or more processes (work is shared), read without a
// thread of its own (docs/adr/0150-stages-without-threads.md): it sends its own pull
// requests ($JS.API.CONSUMER.MSG.NEXT, batch + expires) and receives on a plain inbox
// subscription — never two messages at once for one consumer, in the order the server
// sent them. Flow control is a window: messages in hand (received, not yet released) plus
// messages requested stay within `window`; a new request for `batch` goes out when they
// drop to `window - batch`. Lost requests are found by a local deadline on a 100 ms tick;
// a reconnect re-requests at once.
//
// Two homes, one logic:
//  - pool (default): an async subscription on the Bus's connection; the handler runs on
//    cnats' shared delivery pool; ticks on the Bus's timer thread.
//  - a consumer loop (ConsumerOptions::loop: the flow loop, ADR 0220, or the sink loop,
//    ADR 0258): a *sync* subscription on that loop's own event-loop connection, drained
//    on the loop thread after every read event; the handler, the pull requests, kicks
//    and ticks all run on that thread, and the
//    messages of one read event are followed by one handler(nullptr) (a burst ends), so
//    the owner may run them as one batch. publish() then goes out on the same connection
//    and its completions run on the loop thread too; acks of its messages are written
//    with the same turn's other writes.
//
// Threading: every method is thread-safe; none blocks except stop(). The handler must not
// block either (it runs on a thread shared with every other consumer and the PubAcks).
class PullConsumer {
 public:
  // Called with each message, and with nullptr for a kick().
  using Handler = std::function<void(std::unique_ptr<BusMessage>)>;
  ~PullConsumer();  // stop()s
  // Subscribes and starts requesting (if the window allows). Once.
  Status start(Handler handler);
  // 0 = request nothing more (what was requested may still arrive).
  void set_window(int window, int batch);
  // `n` messages received earlier are done with (acked, naked, dead-lettered, handed back).
  void release(int n);
  // The handler runs with nullptr soon, on its pool thread (an empty message sent to the
  // consumer's own inbox): how another thread hands work to the consumer's thread.
  void kick();
  // kick() at the Bus's next timer tick (within ~100 ms): "try again later" without a thread.
  void kick_later();
  // True while the server answers this consumer's requests: false after an error status,
  // a lost request or a failed request until the next answer; a (re)connect starts afresh.
  bool healthy() const;
  // The window's bookkeeping in one line (window, batch, in hand, outstanding, requests,
  // healthy, link, ages of the last message, answer and release) for logs and tests.
  std::string state() const;
  // How often the starvation watch created the durable again (ConsumerOptions::starve_check).
  uint64_t recoveries() const;
  // A message of this consumer was naked with `delay`: its redelivery is not due before
  // then, which the starvation watch must not take for starvation. Any thread.
  void deferred(std::chrono::milliseconds delay);
  // On the flow loop (see above).
  bool on_loop() const;
  // On the flow loop: runs `fn` in a later turn of the loop (after what is queued); on the
  // pool: runs it now. For a handler that yields the loop (docs/adr/0288).
  void post(std::function<void()> fn);
  // A pipelined JetStream publish on the consumer's connection: on the flow loop the
  // loop's publisher (call it from the handler; completions on the loop thread), else
  // Bus::publish. `done` is called exactly once.
  void publish(std::string_view subject, std::string_view data, const Headers& headers,
               std::chrono::milliseconds timeout, PublishCallback done);
  // Unsubscribes and returns once the handler is not running and will not run again.
  // Messages received but not yet handled are dropped (redelivered after AckWait).
  void stop();

 private:
  friend class Bus;
  struct Impl;
  PullConsumer() = default;
  std::shared_ptr<Impl> impl_;  // shared with work posted to the flow loop
};

struct StoredMessage {
  uint64_t sequence = 0;
  std::string subject;
  std::string data;
  Headers headers;
  int64_t time_ns = 0;
};

class Bus {
 public:
  static Result<std::unique_ptr<Bus>> connect(BusOptions options);
  ~Bus();

  bool connected() const { return connected_.load(std::memory_order_acquire); }
  // The flow stream size in force: nats.stream_max_bytes, or its share after plan_stream_sizes.
  int64_t stream_max_bytes() const { return options_.stream_max_bytes; }
  const std::string& url() const { return options_.url; }
  const BusOptions& options() const { return options_; }

  // Sizes the streams weir is about to ensure (`streams`: their names) to fit the server's
  // JetStream storage: each gets stream_max_bytes, or an equal share of what the server
  // can still reserve (plus what these streams already hold) when that is less. The
  // server's limit (max_file_store) is not visible through the API, so it is found with
  // a throwaway probe stream. Logs what it chose. Call before ensure_*_stream.
  // A budget too small for weir is measured again for kBorrowedStorageWait before it is
  // reported: a peer's probe may have held the storage (ADR 0290).
  Status plan_stream_sizes(const std::vector<std::string>& streams);

  // Start-up in one round trip (docs/adr/0215-start-up-round-trips.md): asks the server for
  // the info of `streams`, of the dead-letter stream and for the consumers of `streams`,
  // all at once, and returns without waiting. The set-up calls below that come next
  // (plan_stream_sizes, ensure_*_stream, pull_consumer) wait for those answers (at most
  // 1 s) and send nothing when what exists is what they would create; each
  // answer serves once. What did not answer is set up as without a prefetch.
  void prefetch_setup(const std::vector<std::string>& streams);

  // Stream and consumer setup; idempotent (updates what changed).
  Status ensure_flow_stream(std::string_view flow);
  // dlq.max_age / dlq.max_bytes; 0 = no limit. Full: writes are refused, none dropped (ADR 0090).
  Status ensure_dlq_stream(std::chrono::milliseconds max_age, int64_t max_bytes);
  Result<std::unique_ptr<PullConsumer>> pull_consumer(const ConsumerOptions& options);

  // Pipelined JetStream publish. `done` is called exactly once.
  void publish(std::string_view subject, std::string_view data, const Headers& headers,
               std::chrono::milliseconds timeout, PublishCallback done);

  // Direct stream access (admin/DLQ; synchronous, not for hot paths).
  Result<std::pair<uint64_t, uint64_t>> stream_bounds(const std::string& stream);  // first, last
  struct StreamState {
    int64_t bytes = 0, messages = 0, max_bytes = -1;
    uint64_t last_seq = 0;  // every message ever stored: its growth counts what was added
  };
  // One STREAM.INFO request, waiting `wait` at most (0: the Bus's JetStream wait, 5 s).
  Result<StreamState> stream_state(const std::string& stream,
                                   std::chrono::milliseconds wait = std::chrono::milliseconds(0));
  Result<StoredMessage> get_message(const std::string& stream, uint64_t seq);
  // Reads `stream` (subjects `subject`) in order from sequence `from_seq` through an
  // ephemeral pull consumer (memory storage, no acks), `batch` messages per round trip
  // (at most 8 MiB), handing each to `visit` until it returns false, the messages stored
  // when the read began are all read, or `timeout` has passed (then unavailable). Round
  // trips: create, info, one per batch, delete; not one per message.
  Status read_stream(const std::string& stream, const std::string& subject, uint64_t from_seq, size_t batch,
                     std::chrono::milliseconds timeout, const std::function<bool(StoredMessage&&)>& visit);
  Status delete_message(const std::string& stream, uint64_t seq);

  __natsConnection* connection() { return nc_; }  // for cluster/ (KV); not owned by the caller
  __jsCtx* jetstream() { return js_; }

  size_t pending_publishes() const;
  // Completes every publish waiting for its PubAck now, as unavailable with `why` and the
  // note that it may still be stored (shutdown: their callbacks then run while the objects
  // they capture are still alive).
  void fail_pending(const std::string& why);
  // From here on every publish fails at once, and what is pending is failed. Call before
  // destroying anything a publish callback may touch (sources, stages); idempotent.
  void shutdown();

 private:
  Bus() = default;
  struct Publisher;
  struct FlowLoop;
  friend class PullConsumer;
  // A consumer loop, connected on first use (ADR 0220, 0258).
  Result<FlowLoop*> flow_loop(ConsumerLoop which);
  // The loops made so far (each lives as long as the Bus once made).
  std::vector<FlowLoop*> loops_made() const;
  // Consumers ticked by the publisher's timer thread and told of (re)connects.
  void add_consumer(PullConsumer::Impl* c);
  void remove_consumer(PullConsumer::Impl* c);
  void tick_consumers();
  // `max_bytes` given: that bound (0 = none) with discard-new (a full stream refuses writes).
  // `subjects` starts with the stream's "<prefix>.>"; returns once the stream serves (ADR 0321).
  Status add_or_update_stream(const std::string& name, const std::vector<std::string>& subjects, bool work_queue,
                              int64_t max_age_ns, std::optional<int64_t> max_bytes = std::nullopt);
  // Creates or updates stream `name` as `cfg` says, retrying what JetStream may still
  // refuse at start-up; `subject` names its subjects in errors.
  Status create_stream(jsStreamConfig& cfg, const std::string& name, const std::string& subject);
  void set_connected(bool up, const std::string& why = {});
  // A prefetched answer: `stream` true, the info of stream `key` ({"config":…,"state":…},
  // or a null JSON when the server said it does not exist); false, the config of consumer
  // `key` = "<stream>/<durable>". nullopt when unknown (no prefetch, no answer, past the
  // start-up, or already taken). `take`: it serves only this once.
  struct Prefetch;
  std::optional<nlohmann::json> prefetched(bool stream, const std::string& key, bool take);
  // The largest size from `size` halving down to `smallest` that a throwaway stream is
  // granted (created, then deleted at once): -1 when none is, nullopt when the server
  // answered something other than a storage refusal.
  std::optional<int64_t> probe_free_storage(int64_t size, int64_t smallest);

  BusOptions options_;
  __natsConnection* nc_ = nullptr;
  __jsCtx* js_ = nullptr;
  std::atomic<bool> connected_{false};
  std::atomic<bool> closed_{false};   // set by cnats' closed callback, the last one it delivers
  std::atomic<bool> closing_{false};  // ~Bus closes the connection: its drop is no fault
  std::unique_ptr<Publisher> publisher_;
  Mutex consumers_mu_;  // also held while ticking them
  std::vector<PullConsumer::Impl*> consumers_ GUARDED_BY(consumers_mu_);
  std::atomic<int> consumer_count_{0};
  mutable Mutex flow_loop_mu_;
  std::unique_ptr<FlowLoop> loops_[2] GUARDED_BY(flow_loop_mu_);  // by ConsumerLoop
  Mutex prefetch_mu_;
  std::unique_ptr<Prefetch> prefetch_ GUARDED_BY(prefetch_mu_);
};

// cnats statuses become Status in runtime/nats/nats_status.h (one mapper for every adapter).

// Shared with the io-thread publisher (runtime/nats/loop_publisher.h):
// Reads a PubAck ({"stream":…,"seq":N[,"duplicate":true]} or {"error":{…}}); false when
// the text is neither.
bool parse_puback(std::string_view data, PubAck* ack, Status* status);
// The outcome of a publish from its reply message: no responders, a JetStream error or a
// PubAck (into `ack`). Shared by the Bus's publisher and http-in's io-thread publisher.
Status puback_status(__natsMsg* msg, PubAck* ack);
// True when a failed publish failed for want of an answer, not because JetStream refused
// the message: nothing answered (timeout, no responders, connection lost) or it answered
// "not now" (no stream leader, a raft proposal dropped, a store closing). False for a
// definite refusal, such as a full stream ("maximum bytes exceeded") or "insufficient
// resources", though JetStream answers those with code 503 as well (ADR 0225).
bool publish_failure_is_transient(const Status& s, const PubAck& ack);
// The number after `prefix` in `subject` ("<inbox>.<id>" replies); 0 when there is none.
uint64_t inbox_id(std::string_view subject, std::string_view prefix);
// Appended to every failure of a publish that was perhaps written: a sender can then resend with the same
// Idempotency-Key and JetStream drops the duplicate.
extern const char* const kMayBeStored;
// Whether `s` is such a failure: the event may be stored after all.
bool may_be_stored(const Status& s);
// The connection options every weir connection uses (servers, name, reconnect, pings,
// credentials, send-asap); `name` overrides options.name.
Status set_connection_options(__natsOptions* opts, const BusOptions& options, const std::string& name);

}  // namespace weir
