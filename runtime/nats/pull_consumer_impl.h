// Internal to runtime/nats/: the pull consumer's state (PullConsumer::Impl) and the
// delivery loops that run consumers (Bus::FlowLoop). Included by bus.cc, bus_streams.cc,
// delivery_loop.cc, pull_consumer.cc and pull_consumer_watch.cc; nothing outside this room
// includes it (the Bus's interface is bus.h).
//
// Threads: a consumer on a delivery loop runs on that loop's thread (its handler, requests,
// ticks); one on the Bus's threaded connection is called on cnats' delivery thread and the
// Bus's timer thread, under `mu`.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/thread_annotations.h"
#include "runtime/base/wall_clock.h"
#include "runtime/loop/io_loop.h"
#include "runtime/nats/bus.h"
#include "runtime/nats/delivery_ledger.h"
#include "runtime/nats/loop_publisher.h"
#include "runtime/nats/nats_loop.h"

namespace weir {

// One durable pull consumer: its request window, its bookkeeping and the starvation watch.
// Methods: pull_consumer.cc; the starvation watch: pull_consumer_watch.cc.
struct PullConsumer::Impl : std::enable_shared_from_this<PullConsumer::Impl> {
  using Clock = std::chrono::steady_clock;
  // A request the server neither filled nor answered by expires + this is taken as lost.
  static constexpr auto kLostMargin = std::chrono::milliseconds(1000);
  // After an error answer or a failed send, the next request waits this long.
  static constexpr auto kRetryAfter = std::chrono::milliseconds(250);
  // How often request deadlines and delayed kicks are looked at (the flow loop's tick; the
  // Bus's timer thread ticks at its own kTick, the same 100 ms).
  static constexpr auto kTick = std::chrono::milliseconds(100);
  // Every pull request carries `max_bytes` (docs/adr/0276-byte-bounded-pulls.md): what all
  // consumers on one connection may have requested at once is about this many bytes, well
  // under nats-server's 64 MiB per-client pending limit, past which it closes the
  // connection as a slow consumer. Shared equally by the connection's consumers and by a
  // consumer's requests in flight, but never below one message of the server's
  // max_payload plus kMessageAllowance (the subject and ack reply the server counts too),
  // so the biggest event still fits a request.
  static constexpr int64_t kPullBytesBudget = int64_t{32} << 20;
  static constexpr int64_t kMessageAllowance = 4096;

  struct Request {
    uint64_t id;
    int remaining;  // an estimate: the server may fill requests in any order
    Clock::time_point deadline;
  };

  Bus* bus = nullptr;
  natsConnection* nc = nullptr;
  std::string durable, next_subject, inbox_prefix, kick_subject;  // fixed after creation
  std::chrono::milliseconds expires{2000};
  Handler handler;
  natsSubscription* sub = nullptr;
  // On the flow loop: its publisher (and connection); null on the pool (ADR 0220).
  LoopPublisher* loop = nullptr;
  Bus::FlowLoop* flow_loop = nullptr;
  bool sink_first = false;  // a sink stage's consumer: drained before the flows' (ADR 0272)

  bool link_up() const { return loop ? loop->connected() : bus->connected(); }
  // Flow loop: true when the caller must post to the loop thread instead.
  bool off_loop() const { return loop != nullptr && !loop->in_loop_thread(); }

  mutable Mutex mu;
  int window GUARDED_BY(mu) = 0;
  int batch GUARDED_BY(mu) = 1;
  int64_t in_hand GUARDED_BY(mu) = 0;           // received, not released
  int64_t outstanding GUARDED_BY(mu) = 0;       // requested, not received nor ended
  std::deque<Request> requests GUARDED_BY(mu);  // oldest first
  // The pool's consumer count (the Bus's); null on a delivery loop, whose consumers are
  // counted by flow_loop->consumers. Fixed after creation.
  const std::atomic<int>* pool_consumers = nullptr;
  uint64_t next_id GUARDED_BY(mu) = 1;
  Clock::time_point retry_at GUARDED_BY(mu){};  // no request before this
  bool kick_sent GUARDED_BY(mu) = false;        // a kick is on its way
  bool kick_later GUARDED_BY(mu) = false;
  bool stopped GUARDED_BY(mu) = false;
  bool complete GUARDED_BY(mu) = false;            // the subscription's last callback ran
  bool error GUARDED_BY(mu) = false;               // logged once until the next answer
  Clock::time_point last_answer GUARDED_BY(mu){};  // a message or status last came
  // For the stall warning (state()): a consumer holding messages that none of its owner's
  // completions releases, or requesting without receiving, says so with its bookkeeping.
  Clock::time_point last_message GUARDED_BY(mu){};
  Clock::time_point last_release GUARDED_BY(mu){};
  Clock::time_point stall_logged GUARDED_BY(mu){};
  // Nothing released for this long while messages are in hand: warned (once per this).
  static constexpr auto kStallWarn = std::chrono::seconds(30);

  // The starvation watch (docs/adr/0235-starved-consumer-recovery.md). nats-server 2.9.10
  // keeps a pending entry whose message is gone from the stream (its delete outlived a
  // crash the consumer's ack did not) and re-queues it every AckWait; each try to load it
  // ends the delivery loop's turn, and the redelivery queue is served before new messages,
  // so with more such entries than wake-ups per AckWait nothing new is ever delivered. When
  // requests are out and nothing came for `starve_check`, the consumer's info is asked for
  // (a request on this consumer's own inbox: no call blocks); the same info twice, that
  // far apart — messages waiting, requests waiting, window not full, nothing delivered —
  // is starvation: the durable is deleted, what its stream holds of its subject at or
  // below its ack floor is purged (acked already: deletes lost in crashes) and the
  // durable is created again with the same config, so it starts after its ack floor.
  // A durable whose state the server keeps in memory (one server: ADR 0320) is gone after
  // that server restarts: its pull requests find no responder (503) or its info "not
  // found" (10014), and the watch creates it again at once, with the same config; the new
  // durable delivers what the stream still holds (`forgotten`: that kind of re-creation).
  enum class Watch { kIdle, kInfo, kDelete, kPurge, kCreate };
  bool memory_state = false;                          // fixed after creation
  std::chrono::milliseconds starve_check{0};          // 0 = off; fixed after creation
  std::string stream_name, filter, create_body;       // fixed after creation
  std::atomic<uint64_t>* recreated_metric = nullptr;  // fixed after creation; may be null
  // Deliveries refused for a body that does not match its Weir-Sum (refuse(); ADR 0286):
  // counted in `corrupt_metric`; per stream sequence, how many until an intact one came
  // (that one's delivery count is lowered by as many: BusMessage::set_uncounted).
  std::atomic<uint64_t>* corrupt_metric = nullptr;  // fixed after creation; may be null
  std::function<void()> on_tick;                    // ConsumerOptions::on_tick; fixed after creation
  static constexpr size_t kRefusedCapacity = 4096;
  static constexpr auto kRefusedRetry = std::chrono::milliseconds(200);
  std::unordered_map<uint64_t, uint32_t> refused GUARDED_BY(mu);
  // When this consumer's connection dropped (wall clock, ns since the epoch; the last
  // kMostDrops): a delivery of a message stored before a drop may have been lost with that
  // connection — on the wire, or read and its ack refused by the closed connection — and
  // JetStream counts it. Such deliveries are not the event's failures (ADR 0289).
  static constexpr size_t kMostDrops = 256;
  std::deque<uint64_t> drops_ns GUARDED_BY(mu);
  uint64_t lost_with_drops(const BusMessage& m, uint64_t not_counted) const REQUIRES(mu);
  // The most failed deliveries a message not handed here before can have had (ADR 0292,
  // ADR 0319): none when no other process reads this durable and the message was stored
  // after this consumer was made.
  uint64_t deliveries_possible(const BusMessage& m) const;
  // When this consumer was made (wall clock, ns since the epoch) and whether it is the
  // durable's only reader: a process outside a cluster is (ADR 0319).
  const uint64_t made_ns = wall_ns();
  const bool only_reader = layout::cluster().empty();
  // Clocks of weir and the server (the stored time) may differ by this much (ADR 0319).
  static constexpr uint64_t kClockMarginNs = 2'000'000'000;
  // The deliveries this consumer was handed, per stream sequence (ADR 0292); shared with
  // the messages it hands out, whose ack or term outlives nothing else of the consumer.
  const std::shared_ptr<DeliveryLedger> ledger = std::make_shared<DeliveryLedger>();
  Watch watch GUARDED_BY(mu) = Watch::kIdle;
  uint64_t watch_gen GUARDED_BY(mu) = 0;  // the reply subject's number: a late answer is ignored
  Clock::time_point watch_sent GUARDED_BY(mu){};
  Clock::time_point next_check GUARDED_BY(mu){};
  std::chrono::milliseconds check_every GUARDED_BY(mu){0};  // grows while the consumer has nothing
  // What the last info said (pending, ack pending, waiting, max ack pending) and when: in
  // describe(), so a stall's report says what the server reported.
  std::string last_info GUARDED_BY(mu);
  Clock::time_point last_info_at GUARDED_BY(mu){};
  struct Suspect {
    std::string created;
    uint64_t delivered = 0, ack_floor = 0;
    Clock::time_point at;
  };
  std::optional<Suspect> suspect GUARDED_BY(mu);
  uint64_t purge_below GUARDED_BY(mu) = 0;
  bool forgotten GUARDED_BY(mu) = false;
  // After a reconnect, until the server answers whether the durable is there (a server
  // still starting answers with another error): asked again from this time on.
  std::optional<Clock::time_point> verify_at GUARDED_BY(mu);
  static constexpr auto kVerifyRetry = std::chrono::milliseconds(250);
  // Starts creating a forgotten durable again, unless the watch is busy (under mu); true
  // when the caller is to send_watch().
  bool recreate_forgotten() REQUIRES(mu);
  std::chrono::milliseconds ack_wait{0};           // fixed after creation
  Clock::time_point defer_until GUARDED_BY(mu){};  // naks of this process delay redeliveries up to here
  std::atomic<uint64_t> recoveries{0};
  // An unanswered watch request is sent again after this.
  static constexpr auto kWatchTimeout = std::chrono::seconds(5);
  std::condition_variable complete_cv;
  std::atomic<bool> healthy{false};

  // Decides the requests to send now (under mu); returns their ids. The caller sends them
  // after unlocking (send()).
  std::vector<uint64_t> plan(Clock::time_point now) REQUIRES(mu);

  void send(const std::vector<uint64_t>& ids, int n, int64_t max_bytes);

  // The max_bytes of the next request (kPullBytesBudget). On the consumer's thread (the
  // loop thread for a loop consumer), under mu.
  int64_t request_bytes() const REQUIRES(mu);

  void request(Clock::time_point now = Clock::now());

  // Removes request `id` (if still known) with `left` messages it will not deliver (-1:
  // as estimated). Under mu.
  void end_request(uint64_t id, int64_t left) REQUIRES(mu);

  void answered() REQUIRES(mu);

  std::string describe(Clock::time_point now) const REQUIRES(mu);

  static void on_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* closure);
  bool take(natsMsg* msg);
  Status subscribe_on_loop();
  void refuse(BusMessage& m, uint32_t refusals);

  // Flow loop, after each read event: everything cnats parsed into the inbox (Asio is
  // edge-triggered: what is left would wait for the next event), then the end of the burst.
  void drain();

  // True when `msg` was a message handed to the handler.
  bool receive(natsMsg* msg);

  // On the Bus's timer thread (flow loop: the loop thread), every ~100 ms.
  void tick(Clock::time_point now);

  // ---- the starvation watch (see the members above) ----

  // Under mu, on a tick: true when the current watch request is to be sent (send_watch()).
  bool watch_tick(Clock::time_point now) REQUIRES(mu);

  // Sends the request of the current watch step, with a reply subject of its own.
  void send_watch();

  // The answer to watch request number `gen` (a late one is dropped).
  void watch_answer(std::string_view gen, natsMsg* msg);

  // An info answer (under mu): true when a recovery starts (the delete is to be sent).
  bool on_info(const nlohmann::json& j, int err_code, Clock::time_point now) REQUIRES(mu);

  void connection(bool up);

  void do_kick();

  static void on_complete(void* closure);
};

// A consumer loop: one thread and one event-loop connection for every flow consumer of
// the process ("weir-flows", ADR 0220), or for every sink consumer ("weir-sinks",
// ADR 0258), or for both ("weir-delivery", BusOptions::delivery_loops 1, ADR 0272).
// `consumers` is touched on the loop thread only (start and stop run_sync there).
// Defined in delivery_loop.cc.
struct Bus::FlowLoop {
  explicit FlowLoop(const char* thread_name) : io(thread_name) {}
  ~FlowLoop();
  IoLoop io;
  std::unique_ptr<LoopPublisher> pub;
  NatsLoop* nl = nullptr;  // pub's loop; outlives pub's connection (its last callbacks)
  std::vector<std::shared_ptr<PullConsumer::Impl>> consumers;

  void after_read();  // drains every consumer, after each read event
  void tick();        // every PullConsumer::Impl::kTick
  void remove(const PullConsumer::Impl* c);
};

}  // namespace weir
