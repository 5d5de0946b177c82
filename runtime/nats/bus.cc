#include "runtime/nats/bus.h"
#include "runtime/nats/nats_msg.h"

#include <nats/nats.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/loop/io_loop.h"
#include "runtime/base/log.h"
#include "runtime/nats/loop_publisher.h"
#include "runtime/nats/nats_loop.h"
#include "runtime/nats/nats_status.h"
#include "runtime/base/redact.h"

namespace weir {

// ---- names ---------------------------------------------------------------------------

namespace layout {
namespace {
std::string g_cluster;  // set once at start (set_cluster), read-only after

std::string subject_prefix() { return g_cluster.empty() ? "weir" : "weirc." + g_cluster; }
std::string stream_prefix() { return g_cluster.empty() ? "weir_" : "weirc_" + g_cluster + "__"; }
}  // namespace

void set_cluster(std::string_view cluster) { g_cluster = std::string(cluster); }
const std::string& cluster() { return g_cluster; }

std::string invalid_cluster_name(std::string_view name) {
  if (name.empty() || name.size() > 32) return "must be 1 to 32 characters";
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return "may use only A-Z a-z 0-9 _ - (it names streams, subjects and KV buckets)";
  }
  if (name.find("__") != std::string_view::npos)
    return "may not contain \"__\" (it separates the cluster from the flow in stream names)";
  return "";
}

std::string flow_stream(std::string_view flow) { return stream_prefix() + std::string(flow); }
std::string flow_subjects(std::string_view flow) { return subject_prefix() + "." + std::string(flow) + ".>"; }
std::string input_subject(std::string_view flow) { return subject_prefix() + "." + std::string(flow) + ".in"; }
std::string output_subject(std::string_view flow, std::string_view sink) {
  return subject_prefix() + "." + std::string(flow) + ".out." + std::string(sink);
}
std::string flow_consumer(std::string_view flow) { return std::string(flow); }
std::string sink_consumer(std::string_view flow, std::string_view sink) {
  return std::string(flow) + "-to-" + std::string(sink);
}
std::string dlq_stream() { return stream_prefix() + "dlq"; }
std::string dlq_subjects() { return subject_prefix() + ".dlq.>"; }
std::string dlq_subject(std::string_view flow, std::string_view stage) {
  return subject_prefix() + ".dlq." + std::string(flow) + "." + std::string(stage);
}
std::string state_bucket() { return g_cluster.empty() ? "weir_state" : "weir_state_" + g_cluster; }
bool is_internal_subject(std::string_view subject) {
  return subject.rfind("weir.", 0) == 0 || subject.rfind("weirc.", 0) == 0 || subject == "weir" || subject == "weirc";
}
}  // namespace layout

// Spec §6 / hot-path review C6: a publish failed after it was written may still be
// stored (cnats' reconnect buffer replays it; a late PubAck is not waited for). Every
// such failure says so, since it becomes the 503 body at http-in.
const char* const kMayBeStored =
    " (a write already sent may still be stored: resend with the same Idempotency-Key, JetStream drops the duplicate)";

namespace {

Status js_status(natsStatus s, jsErrCode jerr, std::string_view what) { return nats_status(s, what, jerr); }

// How long the set-up calls wait for prefetch_setup()'s answers; what has not answered by
// then is asked again the usual way (a fresh or busy server answers the retries later).
constexpr auto kPrefetchWait = std::chrono::milliseconds(1000);
// Answers serve the start-up only: a set-up call later than this (a deploy) asks the server.
constexpr auto kPrefetchLife = std::chrono::seconds(10);
}  // namespace

// ---- BusMessage ----------------------------------------------------------------------

BusMessage::~BusMessage() { free_nats_msg(msg_); }

std::string_view BusMessage::data() const {
  return {natsMsg_GetData(msg_), static_cast<size_t>(natsMsg_GetDataLength(msg_))};
}
std::string_view BusMessage::subject() const { return natsMsg_GetSubject(msg_); }
std::string_view BusMessage::header(const char* name) const {
  const char* v = nullptr;
  if (natsMsgHeader_Get(msg_, name, &v) != NATS_OK || v == nullptr) return {};
  return v;
}
// The reply subject of a JetStream delivery: $JS.ACK.<stream>.<consumer>.<delivered>.
// <stream seq>.<consumer seq>.<time>.<pending> (v1), or with <domain>.<account hash>
// before the stream and a random token after pending (v2, newer servers).
void BusMessage::load_meta() const {
  if (meta_loaded_) return;
  meta_loaded_ = true;
  const char* r = natsMsg_GetReply(msg_);
  if (r == nullptr) return;
  std::string_view reply(r);
  constexpr std::string_view kPrefix = "$JS.ACK.";
  if (reply.substr(0, kPrefix.size()) != kPrefix) return;
  reply.remove_prefix(kPrefix.size());
  std::string_view tokens[12];
  size_t n = 0;
  while (n < 12) {
    size_t dot = reply.find('.');
    tokens[n++] = reply.substr(0, dot);
    if (dot == std::string_view::npos) break;
    reply.remove_prefix(dot + 1);
  }
  size_t at = n == 7 ? 2 : n >= 9 ? 4 : 12;  // index of <delivered>
  if (at + 4 >= n) return;
  auto number = [](std::string_view t) {
    uint64_t v = 0;
    for (char c : t) {
      if (c < '0' || c > '9') return v;
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    return v;
  };
  deliveries_ = number(tokens[at]);
  sequence_ = number(tokens[at + 1]);
  pending_ = number(tokens[at + 4]);
}
uint64_t BusMessage::deliveries() const {
  load_meta();
  return deliveries_;
}
uint64_t BusMessage::stream_sequence() const {
  load_meta();
  return sequence_;
}
uint64_t BusMessage::pending() const {
  load_meta();
  return pending_;
}
// Acks are fire-and-forget: a lost ack means a redelivery, which the next hop's
// Nats-Msg-Id deduplicates (docs/adr/0002-bus-layout.md).
bool BusMessage::reply(const char* body) {
  const char* r = natsMsg_GetReply(msg_);
  if (r == nullptr || *r == '\0') return false;
  return natsConnection_PublishString(nc_, r, body) == NATS_OK;
}
bool BusMessage::ack(std::atomic<uint64_t>* failed_later) {
  if (held_by_ != nullptr && held_by_->in_loop_thread()) {
    const char* r = natsMsg_GetReply(msg_);
    if (r == nullptr || *r == '\0') return false;
    if (held_by_->hold_ack(nc_, r, failed_later)) return true;
  }
  return reply("+ACK");
}
bool BusMessage::nak(std::chrono::milliseconds delay) {
  if (delay.count() <= 0) return reply("-NAK");
  char body[64];
  std::snprintf(body, sizeof body, "-NAK {\"delay\":%lld}",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count()));
  return reply(body);
}
bool BusMessage::term() { return reply("+TERM"); }

// ---- PullConsumer --------------------------------------------------------------------

struct PullConsumer::Impl : std::enable_shared_from_this<PullConsumer::Impl> {
  using Clock = std::chrono::steady_clock;
  // A request the server neither filled nor answered by expires + this is taken as lost.
  static constexpr auto kLostMargin = std::chrono::milliseconds(1000);
  // After an error answer or a failed send, the next request waits this long.
  static constexpr auto kRetryAfter = std::chrono::milliseconds(250);
  // How often request deadlines and delayed kicks are looked at (the flow loop's tick; the
  // Bus's timer thread ticks at its own kTick, the same 100 ms).
  static constexpr auto kTick = std::chrono::milliseconds(100);

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
  enum class Watch { kIdle, kInfo, kDelete, kPurge, kCreate };
  std::chrono::milliseconds starve_check{0};          // 0 = off; fixed after creation
  std::string stream_name, filter, create_body;       // fixed after creation
  std::atomic<uint64_t>* recreated_metric = nullptr;  // fixed after creation; may be null
  Watch watch GUARDED_BY(mu) = Watch::kIdle;
  uint64_t watch_gen GUARDED_BY(mu) = 0;  // the reply subject's number: a late answer is ignored
  Clock::time_point watch_sent GUARDED_BY(mu){};
  Clock::time_point next_check GUARDED_BY(mu){};
  std::chrono::milliseconds check_every GUARDED_BY(mu){0};  // grows while the consumer has nothing
  struct Suspect {
    std::string created;
    uint64_t delivered = 0, ack_floor = 0;
    Clock::time_point at;
  };
  std::optional<Suspect> suspect GUARDED_BY(mu);
  uint64_t purge_below GUARDED_BY(mu) = 0;
  std::chrono::milliseconds ack_wait{0};           // fixed after creation
  Clock::time_point defer_until GUARDED_BY(mu){};  // naks of this process delay redeliveries up to here
  std::atomic<uint64_t> recoveries{0};
  // An unanswered watch request is sent again after this.
  static constexpr auto kWatchTimeout = std::chrono::seconds(5);
  std::condition_variable complete_cv;
  std::atomic<bool> healthy{false};

  // Decides the requests to send now (under mu); returns their ids. The caller sends them
  // after unlocking (send()).
  std::vector<uint64_t> plan(Clock::time_point now) REQUIRES(mu) {
    std::vector<uint64_t> ids;
    if (stopped || window <= 0 || now < retry_at || !link_up()) return ids;
    while (in_hand + outstanding + batch <= window) {
      uint64_t id = next_id++;
      requests.push_back(Request{id, batch, now + expires + kLostMargin});
      outstanding += batch;
      ids.push_back(id);
    }
    return ids;
  }

  void send(const std::vector<uint64_t>& ids, int n) {
    if (ids.empty()) return;
    // The server ends a request a little before `expires` so its 408 arrives in time (as
    // cnats' own fetch does).
    const auto exp_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(expires - std::chrono::milliseconds(10))
                            .count();
    char body[96];
    std::snprintf(body, sizeof body, "{\"batch\":%d,\"expires\":%lld}", n, static_cast<long long>(exp_ns));
    for (uint64_t id : ids) {
      char reply[128];
      std::snprintf(reply, sizeof reply, "%s%llu", inbox_prefix.c_str(), static_cast<unsigned long long>(id));
      natsStatus s = natsConnection_PublishRequestString(nc, next_subject.c_str(), reply, body);
      if (s != NATS_OK) {
        MutexLock lock(mu);
        end_request(id, -1);
        retry_at = Clock::now() + kRetryAfter;
        if (!error) {
          error = true;
          log::warn("pull request not sent", {{"consumer", durable}, {"error", nats_status(s, "publish").str()}});
        }
        healthy = false;
      }
    }
  }

  void request(Clock::time_point now = Clock::now()) {
    if (off_loop()) {
      // Requests of a loop consumer leave from the loop thread, with its other writes.
      loop->loop().post([self = shared_from_this()] {
        {
          MutexLock lock(self->mu);
          if (self->stopped) return;
        }
        self->request();
      });
      return;
    }
    std::vector<uint64_t> ids;
    int n = 0;
    {
      MutexLock lock(mu);
      ids = plan(now);
      n = batch;
    }
    send(ids, n);
  }

  // Removes request `id` (if still known) with `left` messages it will not deliver (-1:
  // as estimated). Under mu.
  void end_request(uint64_t id, int64_t left) REQUIRES(mu) {
    auto it = std::find_if(requests.begin(), requests.end(), [&](const Request& r) { return r.id == id; });
    if (it == requests.end()) return;  // filled already (or forgotten at a reconnect)
    if (left < 0) left = it->remaining;
    requests.erase(it);
    outstanding = std::max<int64_t>(0, outstanding - left);
  }

  void answered() REQUIRES(mu) {
    if (error) {
      error = false;
      log::info("pull requests answered again", {{"consumer", durable}});
    }
    healthy = true;
    last_answer = Clock::now();
  }

  std::string describe(Clock::time_point now) const REQUIRES(mu) {
    auto age = [&](Clock::time_point t) {
      if (t == Clock::time_point{}) return std::string("never");
      return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count()) + "ms";
    };
    return "window=" + std::to_string(window) + " batch=" + std::to_string(batch) +
           " in_hand=" + std::to_string(in_hand) + " outstanding=" + std::to_string(outstanding) +
           " requests=" + std::to_string(requests.size()) + " healthy=" + (healthy.load() ? "1" : "0") +
           " link=" + (link_up() ? "up" : "down") + " last_message=" + age(last_message) +
           " last_answer=" + age(last_answer) + " last_release=" + age(last_release);
  }

  static void on_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    static_cast<Impl*>(closure)->receive(msg);
  }

  // Flow loop, after each read event: everything cnats parsed into the inbox (Asio is
  // edge-triggered: what is left would wait for the next event), then the end of the burst.
  void drain() {
    if (sub == nullptr) return;
    bool any = false;
    for (;;) {
      int msgs = 0, bytes = 0;
      // GetPending first: NextMsg on an empty queue would set cnats' error stack.
      if (natsSubscription_GetPending(sub, &msgs, &bytes) != NATS_OK || msgs <= 0) break;
      natsMsg* m = nullptr;
      if (natsSubscription_NextMsg(&m, sub, 0) != NATS_OK || m == nullptr) break;
      any = receive(m) || any;
      if (sub == nullptr) return;  // stopped by the handler's thread (run inline)
    }
    if (any) handler(nullptr);
  }

  // True when `msg` was a message handed to the handler.
  bool receive(natsMsg* msg) {
    const char* reply = natsMsg_GetReply(msg);
    if (reply != nullptr && std::strncmp(reply, "$JS.ACK.", 8) == 0) {
      auto m = std::make_unique<BusMessage>(msg, nc, loop != nullptr ? &loop->loop() : nullptr);
      {
        MutexLock lock(mu);
        suspect.reset();
        check_every = starve_check;
        ++in_hand;
        outstanding = std::max<int64_t>(0, outstanding - 1);
        if (!requests.empty() && --requests.front().remaining <= 0) requests.pop_front();
        answered();
        last_message = last_answer;
      }
      handler(std::move(m));
      return true;
    }
    std::string_view subject = natsMsg_GetSubject(msg);
    if (subject.size() > inbox_prefix.size() + 1 && subject.compare(0, inbox_prefix.size(), inbox_prefix) == 0 &&
        subject[inbox_prefix.size()] == 'w') {
      watch_answer(subject.substr(inbox_prefix.size() + 1), msg);
      free_nats_msg(msg);
      return false;
    }
    if (subject == kick_subject) {
      free_nats_msg(msg);
      {
        MutexLock lock(mu);
        kick_sent = false;
      }
      handler(nullptr);
      return false;
    }
    // A status message for one of our requests: 100 heartbeat, 404 no messages, 408
    // request expired, 409 ended by the server (max waiting, consumer deleted, …).
    const char* status = nullptr;
    const char* desc = nullptr;
    const char* pending = nullptr;
    natsMsgHeader_Get(msg, "Status", &status);
    natsMsgHeader_Get(msg, "Description", &desc);
    natsMsgHeader_Get(msg, "Nats-Pending-Messages", &pending);
    std::string code = status ? status : "";
    std::string why = desc ? desc : "";
    int64_t left = pending ? std::atoll(pending) : -1;
    const uint64_t id = inbox_id(subject, inbox_prefix);
    free_nats_msg(msg);
    if (code == "100") {
      MutexLock lock(mu);
      answered();
      return false;
    }
    {
      MutexLock lock(mu);
      end_request(id, left);
      if (code == "404" || code == "408") {
        answered();
      } else {
        retry_at = Clock::now() + kRetryAfter;
        healthy = false;
        if (!error) {
          error = true;
          log::warn("pull request refused", {{"consumer", durable}, {"status", code}, {"error", why}});
        }
      }
    }
    request();
    return false;
  }

  // On the Bus's timer thread (flow loop: the loop thread), every ~100 ms.
  void tick(Clock::time_point now) {
    bool kick_now = false, watch_step = false;
    {
      MutexLock lock(mu);
      if (stopped) return;
      for (auto it = requests.begin(); it != requests.end();) {
        if (it->deadline >= now) {
          ++it;
          continue;
        }
        // The server forgot it (restart, leader change) or its answer was lost; or it was
        // filled while the fills were counted against another request. Either way: gone.
        outstanding = std::max<int64_t>(0, outstanding - it->remaining);
        if (last_answer < it->deadline - expires - kLostMargin) {  // nothing came since it was sent
          healthy = false;
          if (!error) {
            error = true;
            log::warn("pull request unanswered, sending another", {{"consumer", durable}, {"state", describe(now)}});
          }
        }
        it = requests.erase(it);
      }
      // `outstanding` counts what requests may still bring. Fills are attributed to the
      // oldest request (the server may fill them in any order), so a request can be taken
      // off as filled while its status answer still comes; that answer's unfilled count is
      // then never subtracted. With no request left nothing can come: a leftover count
      // would shut a small window for good (careful mode's window of 1 after redeliveries:
      // the flow consumer stopped pulling after an R3 leader kill, ADR 0170).
      if (requests.empty()) outstanding = 0;
      if (in_hand > 0 && now - std::max(last_release, last_message) > kStallWarn && now - stall_logged > kStallWarn) {
        // Neither released nor received for that long: the owner holds messages it never
        // completes (the window stays shut) — say so, with the bookkeeping.
        stall_logged = now;
        log::warn("consumer holds messages none of which were released",
                  {{"consumer", durable}, {"state", describe(now)}});
      }
      if (kick_later) {
        kick_later = false;
        kick_now = true;
      }
      watch_step = watch_tick(now);
    }
    request(now);
    if (kick_now) do_kick();
    if (watch_step) send_watch();
  }

  // ---- the starvation watch (see the members above) ----

  // Under mu, on a tick: true when the current watch request is to be sent (send_watch()).
  bool watch_tick(Clock::time_point now) REQUIRES(mu) {
    if (starve_check.count() <= 0 || !link_up()) return false;
    if (watch != Watch::kIdle) {
      if (now - watch_sent < kWatchTimeout) return false;
      // Unanswered (a lost answer, a restarting server): an info is asked for later; a
      // step of a recovery is idempotent and sent again — a deleted durable must come back.
      if (watch == Watch::kInfo) {
        watch = Watch::kIdle;
        next_check = now + check_every;
        return false;
      }
      return true;
    }
    if (requests.empty() || now - last_message < starve_check) {
      suspect.reset();
      return false;
    }
    if (now < next_check) return false;
    watch = Watch::kInfo;
    return true;
  }

  // Sends the request of the current watch step, with a reply subject of its own.
  void send_watch() {
    std::string subject, body, reply;
    {
      MutexLock lock(mu);
      if (stopped || watch == Watch::kIdle) return;
      watch_sent = Clock::now();
      reply = inbox_prefix + "w" + std::to_string(++watch_gen);
      const std::string name = stream_name + "." + durable;
      switch (watch) {
        case Watch::kInfo: subject = "$JS.API.CONSUMER.INFO." + name; break;
        case Watch::kDelete: subject = "$JS.API.CONSUMER.DELETE." + name; break;
        case Watch::kPurge:
          subject = "$JS.API.STREAM.PURGE." + stream_name;
          body = nlohmann::json{{"filter", filter}, {"seq", purge_below}}.dump();
          break;
        case Watch::kCreate:
          subject = "$JS.API.CONSUMER.DURABLE.CREATE." + name;
          body = create_body;
          break;
        case Watch::kIdle: return;
      }
    }
    natsStatus s = natsConnection_PublishRequest(nc, subject.c_str(), reply.c_str(), body.data(),
                                                 static_cast<int>(body.size()));
    (void)s;  // not sent: the step times out and goes again (kWatchTimeout)
  }

  // The answer to watch request number `gen` (a late one is dropped).
  void watch_answer(std::string_view gen, natsMsg* msg) {
    auto j = nlohmann::json::parse(natsMsg_GetData(msg), natsMsg_GetData(msg) + natsMsg_GetDataLength(msg), nullptr,
                                   false);
    const bool no_answer = natsMsg_IsNoResponders(msg) || !j.is_object();
    const int err_code = (!no_answer && j.contains("error") && j["error"].is_object()) ? j["error"].value("err_code", 0)
                                                                                       : (no_answer ? -1 : 0);
    bool send = false;
    {
      MutexLock lock(mu);
      if (stopped || watch == Watch::kIdle || gen != std::to_string(watch_gen)) return;
      const auto now = Clock::now();
      switch (watch) {
        case Watch::kInfo: send = on_info(j, err_code, now); break;
        case Watch::kDelete:
          // Gone already (a peer sharing the durable recovered it a moment ago) counts as deleted.
          if (err_code != 0 && err_code != 10014) {
            log::warn("starved consumer not deleted, watching on", {{"consumer", durable}, {"error", j.dump()}});
            watch = Watch::kIdle;
            suspect.reset();
            next_check = now + check_every;
            break;
          }
          watch = purge_below > 1 ? Watch::kPurge : Watch::kCreate;
          send = true;
          break;
        case Watch::kPurge:
          // Not purged: what the stream holds below the floor is delivered again (duplicates).
          if (err_code != 0) log::warn("acked messages not purged", {{"consumer", durable}, {"error", j.dump()}});
          watch = Watch::kCreate;
          send = true;
          break;
        case Watch::kCreate:
          if (err_code != 0) {
            // Sent again after kWatchTimeout: the durable must exist again.
            log::warn("starved consumer not created again yet, retrying", {{"consumer", durable}, {"error", j.dump()}});
            break;
          }
          watch = Watch::kIdle;
          suspect.reset();
          next_check = now + check_every;
          recoveries.fetch_add(1);
          if (recreated_metric) recreated_metric->fetch_add(1);
          log::info("starved consumer created again from its ack floor", {{"consumer", durable}});
          // Its waiting requests went with the old durable.
          requests.clear();
          outstanding = 0;
          retry_at = {};
          break;
        case Watch::kIdle: break;
      }
    }
    if (send) send_watch();
    request();
  }

  // An info answer (under mu): true when a recovery starts (the delete is to be sent).
  bool on_info(const nlohmann::json& j, int err_code, Clock::time_point now) REQUIRES(mu) {
    watch = Watch::kIdle;
    next_check = now + check_every;
    if (err_code != 0) return false;
    auto num = [&](const nlohmann::json& o, const char* key) -> uint64_t {
      auto it = o.find(key);
      return it != o.end() && it->is_number_unsigned() ? it->get<uint64_t>()
             : it != o.end() && it->is_number_integer()
                 ? static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()))
                 : 0;
    };
    const uint64_t pending = num(j, "num_pending"), waiting = num(j, "num_waiting"),
                   ack_pending = num(j, "num_ack_pending");
    const auto& cfg = j.contains("config") && j["config"].is_object() ? j["config"] : nlohmann::json::object();
    const uint64_t max_ack_pending = num(cfg, "max_ack_pending");
    const auto& delivered = j.contains("delivered") && j["delivered"].is_object() ? j["delivered"]
                                                                                  : nlohmann::json::object();
    const auto& floor = j.contains("ack_floor") && j["ack_floor"].is_object() ? j["ack_floor"]
                                                                              : nlohmann::json::object();
    const std::string created = j.value("created", std::string());
    const uint64_t dseq = num(delivered, "consumer_seq"), floor_seq = num(floor, "stream_seq");
    // Starved: requests wait, and either new messages are not handed out although the
    // window is open, or entries due for redelivery are not redelivered — this process
    // holds none, none of its naks delays them, and AckWait has long passed. (Entries
    // that another process sharing the durable holds or delays look the same: recreating
    // it then redelivers early, duplicates, never a loss.)
    const bool window_open = max_ack_pending == 0 || ack_pending < max_ack_pending;
    const bool tail_starved = pending > 0 && window_open;
    const bool redeliveries_starved = ack_pending > 0 && in_hand == 0 && now >= defer_until &&
                                      now - last_message >= ack_wait + starve_check;
    if (waiting == 0 || (!tail_starved && !redeliveries_starved)) {
      // Nothing to deliver, or what is pending is held: look less often while nothing is
      // waiting at all; a message received resets it.
      suspect.reset();
      if (pending == 0 && ack_pending == 0)
        check_every = std::min(check_every * 2, std::max(starve_check, std::chrono::milliseconds(60000)));
      next_check = now + check_every;
      return false;
    }
    if (!suspect || suspect->created != created || suspect->delivered != dseq || suspect->ack_floor != floor_seq) {
      suspect = Suspect{created, dseq, floor_seq, now};
      return false;
    }
    if (now - suspect->at < starve_check) return false;
    // The same durable delivered nothing in that time although messages and requests were
    // waiting: starved.
    purge_below = floor_seq + 1;
    log::warn(
        "consumer starved: the server holds messages for waiting requests but delivers none; creating it "
        "again from its ack floor",
        {{"consumer", durable},
         {"num_pending", std::to_string(pending)},
         {"num_ack_pending", std::to_string(ack_pending)},
         {"ack_floor_stream_seq", std::to_string(purge_below - 1)},
         {"delivered_stream_seq", std::to_string(num(delivered, "stream_seq"))},
         {"silent_ms",
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_message).count())}});
    watch = Watch::kDelete;
    return true;
  }

  void connection(bool up) {
    {
      MutexLock lock(mu);
      if (stopped) return;
      // The server drops a client's waiting requests with its connection: start afresh.
      requests.clear();
      outstanding = 0;
      retry_at = {};
      kick_sent = false;
      if (up) {
        error = false;
        healthy = true;  // re-requested below; an error answer comes back at once
      } else {
        healthy = false;
      }
    }
    if (up) {
      request();
      do_kick();  // what waited for the connection (held messages) runs again
    }
  }

  void do_kick() {
    {
      MutexLock lock(mu);
      if (stopped || kick_sent) return;
      kick_sent = true;
    }
    if (loop != nullptr) {
      // A post, not a message: the loop thread is the handler's thread.
      loop->loop().post([self = shared_from_this()] {
        {
          MutexLock lock(self->mu);
          self->kick_sent = false;
          if (self->stopped) return;
        }
        self->handler(nullptr);
      });
      return;
    }
    if (natsConnection_PublishString(nc, kick_subject.c_str(), "") != NATS_OK) {
      MutexLock lock(mu);
      kick_sent = false;
      kick_later = true;
    }
  }

  static void on_complete(void* closure) {
    auto* self = static_cast<Impl*>(closure);
    MutexLock lock(self->mu);
    self->complete = true;
    self->complete_cv.notify_all();
  }
};

// A consumer loop: one thread and one event-loop connection for every flow consumer of
// the process ("weir-flows", ADR 0220), or for every sink consumer ("weir-sinks",
// ADR 0258), or for both ("weir-delivery", BusOptions::delivery_loops 1, ADR 0272). `consumers` is touched on the loop
// thread only (start and stop run_sync there).
struct Bus::FlowLoop {
  explicit FlowLoop(const char* thread_name) : io(thread_name) {}
  IoLoop io;
  std::unique_ptr<LoopPublisher> pub;
  NatsLoop* nl = nullptr;  // pub's loop; outlives pub's connection (its last callbacks)
  std::vector<std::shared_ptr<PullConsumer::Impl>> consumers;

  void after_read() {
    // By index: a handler may stop a consumer (run inline on this thread).
    for (size_t i = 0; i < consumers.size(); ++i) {
      auto c = consumers[i];
      c->drain();
    }
  }
  void tick() {
    auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < consumers.size(); ++i) {
      auto c = consumers[i];
      c->tick(now);
    }
  }
  void remove(const PullConsumer::Impl* c) {
    auto it = std::find_if(consumers.begin(), consumers.end(), [&](const auto& p) { return p.get() == c; });
    if (it != consumers.end()) consumers.erase(it);
  }
  ~FlowLoop() {
    // Consumers still here (not stopped: a Bus destroyed before its stages) are stopped,
    // so nothing posted for them touches the publisher below.
    if (nl != nullptr) {
      nl->run_sync([&] {
        for (auto& c : consumers) {
          MutexLock lock(c->mu);
          c->stopped = true;
        }
        consumers.clear();
      });
    }
    // Closes the connection while the loop still runs (the publisher's last steps run on
    // it); work posted after that is dropped with the loop.
    pub.reset();
    io.stop();
    consumers.clear();
  }
};

Result<Bus::FlowLoop*> Bus::flow_loop(ConsumerLoop which) {
  MutexLock lock(flow_loop_mu_);
  // One loop for both kinds (ADR 0272): the flows' slot, under its own name.
  const bool shared = options_.delivery_loops == 1;
  auto& slot = loops_[shared ? 0 : static_cast<int>(which)];
  if (slot) return slot.get();
  const bool sinks = which == ConsumerLoop::kSinks;
  auto fl = std::make_unique<FlowLoop>(shared ? "weir-delivery" : sinks ? "weir-sinks" : "weir-flows");
  fl->io.start();
  FlowLoop* raw = fl.get();
  LoopHooks hooks;
  hooks.after_read = [raw] { raw->after_read(); };
  hooks.on_connection = [raw](bool up) {
    // A cnats thread: the consumers learn it on their own thread. Pull requests die with
    // the connection; the server forgets them, so they are sent again on reconnect.
    if (raw->nl == nullptr) return;  // connecting: nothing to tell yet
    raw->nl->post([raw, up] {
      for (size_t i = 0; i < raw->consumers.size(); ++i) {
        auto c = raw->consumers[i];
        c->connection(up);
      }
    });
  };
  auto lp = LoopPublisher::connect(fl->io, options_, shared ? "delivery" : sinks ? "sinks" : "flows", std::move(hooks));
  if (!lp) return lp.status();
  fl->pub = std::move(lp.value());
  fl->nl = &fl->pub->loop();
  fl->nl->set_ack_delay(options_.ack_delay);
  fl->pub->loop().every(PullConsumer::Impl::kTick, [raw] { raw->tick(); });
  slot = std::move(fl);
  return raw;
}

PullConsumer::~PullConsumer() { stop(); }

bool PullConsumer::on_loop() const { return impl_->loop != nullptr; }

void PullConsumer::publish(std::string_view subject, std::string_view data, const Headers& headers,
                           std::chrono::milliseconds timeout, PublishCallback done) {
  Impl& c = *impl_;
  if (c.loop == nullptr) {
    c.bus->publish(subject, data, headers, timeout, std::move(done));
    return;
  }
  if (c.loop->in_loop_thread()) {
    c.loop->publish(subject, data, headers, timeout, std::move(done));
    return;
  }
  // Not expected (stages publish from their handler); kept correct rather than fast.
  c.loop->loop().post([self = impl_, subj = std::string(subject), body = std::string(data), headers, timeout,
                       done = std::move(done)]() mutable {
    {
      MutexLock lock(self->mu);
      if (self->stopped) {
        done(Status::unavailable("the flow stage has stopped"), PubAck{});
        return;
      }
    }
    self->loop->publish(subj, body, headers, timeout, std::move(done));
  });
}

Status PullConsumer::start(Handler handler) {
  Impl& c = *impl_;
  c.handler = std::move(handler);
  if (c.loop != nullptr) {
    // A sync subscription on the loop's connection, drained by the loop after each read
    // event; subscribing does not block (the SUB leaves with the next flush).
    natsStatus s = NATS_OK;
    c.loop->loop().run_sync([&] {
      s = natsConnection_SubscribeSync(&c.sub, c.nc, (c.inbox_prefix + "*").c_str());
      if (s == NATS_OK) s = natsSubscription_SetPendingLimits(c.sub, -1, -1);
      if (s != NATS_OK) {
        if (c.sub) natsSubscription_Destroy(c.sub), c.sub = nullptr;
        return;
      }
      c.healthy = true;
      // On a shared delivery loop (ADR 0272) the sinks are drained first: what is ready to
      // go out is sent before a flow batch runs (closed-loop e2e p99 ~74 → ~50 ms).
      auto& all = c.flow_loop->consumers;
      if (c.sink_first) {
        all.insert(all.begin(), impl_);
      } else {
        all.push_back(impl_);
      }
      c.request();
    });
    return s == NATS_OK ? Status::ok() : nats_status(s, "subscribe consumer " + c.durable);
  }
  natsStatus s = natsConnection_Subscribe(&c.sub, c.nc, (c.inbox_prefix + "*").c_str(), &Impl::on_msg, &c);
  if (s == NATS_OK) s = natsSubscription_SetOnCompleteCB(c.sub, &Impl::on_complete, &c);
  // The window bounds what arrives; cnats' default limits would drop (slow consumer).
  if (s == NATS_OK) s = natsSubscription_SetPendingLimits(c.sub, -1, -1);
  if (s != NATS_OK) {
    if (c.sub) natsSubscription_Destroy(c.sub), c.sub = nullptr;
    return nats_status(s, "subscribe consumer " + c.durable);
  }
  c.healthy = true;
  c.bus->add_consumer(&c);
  c.request();
  return Status::ok();
}

void PullConsumer::set_window(int window, int batch) {
  {
    MutexLock lock(impl_->mu);
    impl_->window = window;
    impl_->batch = std::max(1, batch);
  }
  impl_->request();
}

void PullConsumer::release(int n) {
  {
    MutexLock lock(impl_->mu);
    impl_->in_hand = std::max<int64_t>(0, impl_->in_hand - n);
    impl_->last_release = Impl::Clock::now();
  }
  impl_->request();
}

void PullConsumer::kick() { impl_->do_kick(); }

void PullConsumer::kick_later() {
  MutexLock lock(impl_->mu);
  impl_->kick_later = true;
}

bool PullConsumer::healthy() const { return impl_->healthy.load(); }

std::string PullConsumer::state() const {
  MutexLock lock(impl_->mu);
  return impl_->describe(Impl::Clock::now());
}

uint64_t PullConsumer::recoveries() const { return impl_->recoveries.load(); }

void PullConsumer::deferred(std::chrono::milliseconds delay) {
  MutexLock lock(impl_->mu);
  impl_->defer_until = std::max(impl_->defer_until, Impl::Clock::now() + delay);
}

void PullConsumer::stop() {
  if (!impl_ || !impl_->sub) return;
  Impl& c = *impl_;
  if (c.loop != nullptr) {
    // On the loop thread, the handler's only thread: once this ran, it never runs again
    // (posted kicks and requests see `stopped`). Acks of messages still held go out on
    // the loop's connection, which outlives every consumer.
    c.loop->loop().run_sync([&] {
      {
        MutexLock lock(c.mu);
        if (c.stopped) return;
        c.stopped = true;
      }
      c.flow_loop->remove(&c);
      if (c.sub) {
        natsSubscription_Unsubscribe(c.sub);
        natsSubscription_Destroy(c.sub);
        c.sub = nullptr;
      }
      c.healthy = false;
    });
    return;
  }
  {
    MutexLock lock(c.mu);
    if (c.stopped) return;
    c.stopped = true;
  }
  c.bus->remove_consumer(&c);  // no tick runs on it after this
  natsSubscription_Unsubscribe(c.sub);
  {
    UniqueLock lock(c.mu);
    // cnats calls on_complete once the handler has returned for the last time. Bounded:
    // a subscription already closed with its connection may never call it.
    if (!lock.wait_for(c.complete_cv, std::chrono::seconds(10), [&]() REQUIRES(c.mu) { return c.complete; })) {
      log::warn("consumer subscription did not complete", {{"consumer", c.durable}});
    }
  }
  natsSubscription_Destroy(c.sub);
  c.sub = nullptr;
  c.healthy = false;
}

uint64_t inbox_id(std::string_view subject, std::string_view prefix) {
  if (subject.size() <= prefix.size() || subject.substr(0, prefix.size()) != prefix) return 0;
  uint64_t id = 0;
  for (char c : subject.substr(prefix.size())) {
    if (c < '0' || c > '9') return 0;
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  return id;
}

// ---- Publisher: pipelined request/reply over one wildcard inbox ------------------------

// A PubAck is {"stream":"…","seq":N[,"duplicate":true]} or {"error":{…}}. The success
// case is read without a DOM (two publishes per event go through here); errors, rare, take
// the DOM. Returns false when the text is neither.
Status puback_status(natsMsg* msg, PubAck* ack) {
  if (natsMsg_IsNoResponders(msg)) return Status::unavailable("no JetStream stream answered (no responders)");
  Status status;
  std::string_view data(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
  if (!parse_puback(data, ack, &status)) return Status::internal("unreadable PubAck");
  return status;
}

bool parse_puback(std::string_view data, PubAck* ack, Status* status) {
  if (data.find("\"error\"") != std::string_view::npos) {
    auto j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return false;
    auto e = j.find("error");
    if (e == j.end() || !e->is_object()) return false;
    int code = e->value("code", 0);
    std::string desc = e->value("description", std::string("error"));
    ack->js_error = true;
    ack->js_code = code;
    ack->js_err_code = e->value("err_code", 0);
    *status = code == 503 ? Status::unavailable("JetStream: " + desc) : Status::internal("JetStream: " + desc);
    return true;
  }
  // The value after "key", past the colon and blanks.
  auto value_of = [&](std::string_view key) -> std::string_view {
    size_t at = data.find(key);
    if (at == std::string_view::npos) return {};
    size_t i = at + key.size();
    while (i < data.size() && (data[i] == ' ' || data[i] == ':')) ++i;
    return data.substr(i);
  };
  std::string_view seq = value_of("\"seq\"");
  if (seq.empty() || seq[0] < '0' || seq[0] > '9') return false;
  uint64_t n = 0;
  for (size_t i = 0; i < seq.size() && seq[i] >= '0' && seq[i] <= '9'; ++i)
    n = n * 10 + static_cast<uint64_t>(seq[i] - '0');
  ack->sequence = n;
  ack->duplicate = value_of("\"duplicate\"").substr(0, 4) == "true";
  return true;
}

bool publish_failure_is_transient(const Status& s, const PubAck& ack) {
  if (s.code() != Status::Code::kUnavailable && s.code() != Status::Code::kTimeout) return false;
  if (!ack.js_error) return true;  // no JetStream answer: timeout, no responders, connection
  // nats-server 2.9.10's "not now" answers: JSClusterNotAvailErr (10008); a raft proposal
  // that failed during an election ({"code":503} without err_code, "raft: not leader");
  // JSStreamStoreFailedF (10077) for a store being closed. 10077 with "maximum bytes/
  // messages exceeded", JSInsufficientResourcesErr (10023) and the rest are refusals.
  if (ack.js_err_code == 10008) return true;
  if (ack.js_err_code == 0 && ack.js_code == 503) return true;
  return ack.js_err_code == 10077 && s.message().find("store is closed") != std::string::npos;
}

struct Bus::Publisher {
  using Clock = std::chrono::steady_clock;
  // How late a publish timeout may fire. The sweeper wakes once per tick while anything
  // is pending, not once per publish (hot-path review §1.4).
  static constexpr auto kTick = std::chrono::milliseconds(100);

  struct Pending {
    PublishCallback done;
  };
  // Every caller uses a fixed timeout, so deadlines arrive in order per timeout: one FIFO
  // per distinct timeout instead of a heap. Entries of completed publishes are dropped
  // when they reach the front.
  struct Deadlines {
    std::chrono::milliseconds timeout;
    std::deque<std::pair<Clock::time_point, uint64_t>> fifo;
  };

  Bus* bus = nullptr;
  std::string inbox_prefix;  // "_INBOX.<nuid>."
  natsSubscription* sub = nullptr;
  mutable Mutex mu;
  std::unordered_map<uint64_t, Pending> pending GUARDED_BY(mu);
  std::vector<Deadlines> deadlines GUARDED_BY(mu);
  size_t queued GUARDED_BY(mu) = 0;  // entries in all fifos
  uint64_t next_id GUARDED_BY(mu) = 1;
  std::condition_variable cv;
  bool stopping GUARDED_BY(mu) = false;
  bool closed GUARDED_BY(mu) = false;  // Bus::shutdown()
  std::thread sweeper;

  // Registers a publish; returns its id. Called with `mu` held.
  uint64_t add(PublishCallback done, std::chrono::milliseconds timeout) REQUIRES(mu) {
    uint64_t id = next_id++;
    pending.emplace(id, Pending{std::move(done)});
    auto q = std::find_if(deadlines.begin(), deadlines.end(), [&](const Deadlines& d) { return d.timeout == timeout; });
    if (q == deadlines.end()) q = deadlines.insert(deadlines.end(), Deadlines{timeout, {}});
    q->fifo.emplace_back(Clock::now() + timeout, id);
    if (queued++ == 0) cv.notify_one();  // the sweeper sleeps without a deadline only when empty
    return id;
  }

  std::optional<Pending> take(uint64_t id) {
    MutexLock lock(mu);
    auto it = pending.find(id);
    if (it == pending.end()) return std::nullopt;
    Pending p = std::move(it->second);
    pending.erase(it);
    return p;
  }

  static void on_reply(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    auto* self = static_cast<Publisher*>(closure);
    const uint64_t id = inbox_id(natsMsg_GetSubject(msg), self->inbox_prefix);
    auto p = self->take(id);
    if (!p) {
      free_nats_msg(msg);
      return;  // answered after its deadline: the caller already got a timeout
    }
    PubAck ack;
    Status status = puback_status(msg, &ack);
    free_nats_msg(msg);
    p->done(status, ack);
  }

  void fail_all(const Status& why) {
    std::unordered_map<uint64_t, Pending> failed;
    {
      MutexLock lock(mu);
      failed.swap(pending);
    }
    for (auto& [id, p] : failed) p.done(why, PubAck{});
  }

  // Every publish completes exactly once: take() / the erase below under `mu` decide
  // between the PubAck, this timeout, fail_all and the synchronous failure path.
  void sweep_loop() {
    UniqueLock lock(mu);
    auto next_tick = Clock::now();
    while (!stopping) {
      // Consumers' request deadlines and delayed kicks are looked at once per tick too
      // (ADR 0150): this thread is the stages' only timer.
      const bool ticking = bus->consumer_count_.load() > 0;
      if (queued == 0 && !ticking) {
        lock.wait(cv);
        continue;
      }
      auto now = Clock::now();
      std::vector<Pending> expired;
      for (auto& d : deadlines) {
        while (!d.fifo.empty()) {
          auto [deadline, id] = d.fifo.front();
          auto it = pending.find(id);
          if (it != pending.end()) {
            if (deadline > now) break;
            expired.push_back(std::move(it->second));
            pending.erase(it);
          }
          d.fifo.pop_front();
          --queued;
        }
      }
      if (!expired.empty()) {
        lock.unlock();
        for (auto& p : expired)
          p.done(Status::timeout(std::string("JetStream did not acknowledge in time") + kMayBeStored), PubAck{});
        expired.clear();
        lock.lock();
      }
      if (ticking && now >= next_tick) {
        next_tick = now + kTick;
        lock.unlock();
        bus->tick_consumers();
        lock.lock();
      }
      lock.wait_for(cv, kTick, [&]() REQUIRES(mu) { return stopping; });
    }
  }
};

// ---- Bus: consumers --------------------------------------------------------------

void Bus::add_consumer(PullConsumer::Impl* c) {
  {
    MutexLock lock(consumers_mu_);
    consumers_.push_back(c);
  }
  consumer_count_.fetch_add(1);
  MutexLock lock(publisher_->mu);
  publisher_->cv.notify_all();  // the timer ticks while consumers exist
}

void Bus::remove_consumer(PullConsumer::Impl* c) {
  MutexLock lock(consumers_mu_);
  auto it = std::find(consumers_.begin(), consumers_.end(), c);
  if (it == consumers_.end()) return;
  consumers_.erase(it);
  consumer_count_.fetch_sub(1);
}

void Bus::tick_consumers() {
  auto now = std::chrono::steady_clock::now();
  MutexLock lock(consumers_mu_);
  for (auto* c : consumers_) c->tick(now);
}

// ---- Bus -----------------------------------------------------------------------------

// The answers of prefetch_setup(): one sync subscription on a fresh inbox, read when the
// first set-up call asks.
struct Bus::Prefetch {
  natsSubscription* sub = nullptr;
  std::string inbox_prefix;                         // "<inbox>."
  std::vector<std::pair<bool, std::string>> asked;  // by request id - 1: (is a stream info, stream)
  std::vector<bool> answered;
  size_t waiting = 0;
  std::chrono::steady_clock::time_point sent, deadline;
  std::unordered_map<std::string, nlohmann::json> streams;    // info, or null: does not exist
  std::unordered_map<std::string, nlohmann::json> consumers;  // "<stream>/<durable>" → config

  void read_answers() {
    while (sub != nullptr && waiting > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                              std::chrono::steady_clock::now());
      natsMsg* msg = nullptr;
      if (left.count() <= 0 || natsSubscription_NextMsg(&msg, sub, left.count()) != NATS_OK) break;
      const uint64_t id = inbox_id(natsMsg_GetSubject(msg), inbox_prefix);
      if (id >= 1 && id <= asked.size() && !answered[id - 1]) {
        answered[id - 1] = true;
        --waiting;
        if (!natsMsg_IsNoResponders(msg)) take(asked[id - 1], msg);
      }
      free_nats_msg(msg);
    }
    if (sub != nullptr) {
      natsSubscription_Unsubscribe(sub);
      natsSubscription_Destroy(sub);
      sub = nullptr;
    }
  }

  void take(const std::pair<bool, std::string>& what, natsMsg* msg) {
    auto j = nlohmann::json::parse(natsMsg_GetData(msg), natsMsg_GetData(msg) + natsMsg_GetDataLength(msg), nullptr,
                                   false);
    if (!j.is_object()) return;
    const auto& [is_stream, stream] = what;
    if (auto e = j.find("error"); e != j.end()) {
      // Only "no such stream" is an answer; any other error leaves it unknown.
      if (is_stream && e->is_object() && e->value("err_code", 0) == JSStreamNotFoundErr) streams[stream] = nullptr;
      return;
    }
    if (is_stream) {
      if (j.contains("config") && j["config"].is_object()) streams[stream] = std::move(j);
      return;
    }
    // A consumer list holds at most a page (256); one beyond it stays unknown.
    auto list = j.find("consumers");
    if (list == j.end() || !list->is_array()) return;
    for (auto& c : *list) {
      if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || !c.contains("config")) continue;
      consumers[stream + "/" + c["name"].get<std::string>()] = std::move(c["config"]);
    }
  }
};

void Bus::prefetch_setup(const std::vector<std::string>& streams) {
  auto p = std::make_unique<Prefetch>();
  natsInbox* ib = nullptr;
  natsInbox_Create(&ib);
  p->inbox_prefix = std::string(static_cast<const char*>(ib)) + ".";
  natsInbox_Destroy(ib);
  if (natsConnection_SubscribeSync(&p->sub, nc_, (p->inbox_prefix + "*").c_str()) != NATS_OK) {
    p->sub = nullptr;
    return;  // set up as without a prefetch
  }
  natsSubscription_SetPendingLimits(p->sub, -1, -1);
  std::vector<std::string> names = streams;
  names.push_back(layout::dlq_stream());
  for (const auto& name : names) p->asked.emplace_back(true, name);
  for (const auto& name : streams) p->asked.emplace_back(false, name);
  p->answered.assign(p->asked.size(), false);
  for (size_t i = 0; i < p->asked.size(); ++i) {
    const auto& [is_stream, name] = p->asked[i];
    const std::string subject = (is_stream ? "$JS.API.STREAM.INFO." : "$JS.API.CONSUMER.LIST.") + name;
    const std::string reply = p->inbox_prefix + std::to_string(i + 1);
    if (natsConnection_PublishRequestString(nc_, subject.c_str(), reply.c_str(), is_stream ? "" : "{\"offset\":0}") ==
        NATS_OK) {
      ++p->waiting;
    } else {
      p->answered[i] = true;
    }
  }
  p->sent = std::chrono::steady_clock::now();
  p->deadline = p->sent + kPrefetchWait;
  MutexLock lock(prefetch_mu_);
  prefetch_ = std::move(p);
}

std::optional<nlohmann::json> Bus::prefetched(bool stream, const std::string& key, bool take) {
  MutexLock lock(prefetch_mu_);
  if (!prefetch_) return std::nullopt;
  prefetch_->read_answers();
  if (std::chrono::steady_clock::now() - prefetch_->sent > kPrefetchLife) {
    prefetch_.reset();
    return std::nullopt;
  }
  auto& answers = stream ? prefetch_->streams : prefetch_->consumers;
  auto it = answers.find(key);
  if (it == answers.end()) return std::nullopt;
  if (!take) return it->second;
  std::optional<nlohmann::json> out = std::move(it->second);
  answers.erase(it);
  return out;
}

Status set_connection_options(natsOptions* opts, const BusOptions& options, const std::string& name) {
  // A NATS cluster is given as a comma-separated list; natsOptions_SetURL takes one URL
  // and would fail with "No server available" (only natsConnection_ConnectTo splits).
  std::vector<std::string> urls;
  for (size_t from = 0; from <= options.url.size();) {
    size_t comma = std::min(options.url.find(',', from), options.url.size());
    std::string u = options.url.substr(from, comma - from);
    u.erase(0, u.find_first_not_of(' '));
    u.erase(u.find_last_not_of(' ') + 1);
    if (!u.empty()) urls.push_back(std::move(u));
    from = comma + 1;
  }
  std::vector<const char*> servers;
  servers.reserve(urls.size());
  for (const auto& u : urls) servers.push_back(u.c_str());
  natsStatus s = NATS_OK;
  if (servers.size() > 1) {
    s = natsOptions_SetServers(opts, servers.data(), static_cast<int>(servers.size()));  // copies
  } else {
    s = natsOptions_SetURL(opts, options.url.c_str());
  }
  if (s == NATS_OK) s = natsOptions_SetName(opts, name.c_str());
  // Writes go out at once: no 1 ms flusher floor on PubAcks, acks and fetches
  // (platform notes; docs/adr/0003-threading-model.md). On an event-loop connection
  // this only asks the loop for a write event: a loop turn's publishes leave in one write.
  if (s == NATS_OK) s = natsOptions_SetSendAsap(opts, true);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, options.reconnect_wait.count());
  if (s == NATS_OK) s = natsOptions_SetReconnectBufSize(opts, 64 * 1024);
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetPingInterval(opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(opts, 2);
  if (s == NATS_OK && !options.creds_file.empty()) {
    s = natsOptions_SetUserCredentialsFromFiles(opts, options.creds_file.c_str(), nullptr);
  }
  return nats_status(s, "connection options");
}

Result<std::unique_ptr<Bus>> Bus::connect(BusOptions options) {
  std::unique_ptr<Bus> bus(new Bus());
  bus->options_ = std::move(options);
  natsOptions* opts = nullptr;
  natsOptions_Create(&opts);
  if (Status st = set_connection_options(opts, bus->options_, bus->options_.name); !st) {
    natsOptions_Destroy(opts);
    return st;
  }
  // Every async subscription of this connection (consumers, PubAcks) is served by cnats'
  // shared delivery pool instead of a thread each (ADR 0150).
  nats_SetMessageDeliveryPoolSize(std::max(1, bus->options_.delivery_threads));
  natsOptions_UseGlobalMessageDelivery(opts, true);
  Bus* raw = bus.get();
  natsOptions_SetDisconnectedCB(
      opts, [](natsConnection* nc, void* c) { static_cast<Bus*>(c)->set_connected(false, nats_disconnect_reason(nc)); },
      raw);
  natsOptions_SetReconnectedCB(
      opts, [](natsConnection*, void* c) { static_cast<Bus*>(c)->set_connected(true); }, raw);
  natsOptions_SetClosedCB(
      opts,
      [](natsConnection*, void* c) {
        auto* b = static_cast<Bus*>(c);
        b->set_connected(false);
        b->closed_.store(true, std::memory_order_release);  // nothing of the Bus is touched after this
      },
      raw);
  natsStatus s = natsConnection_Connect(&bus->nc_, opts);
  natsOptions_Destroy(opts);
  if (s != NATS_OK) return nats_status(s, "connect to " + bus->options_.url);

  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 5000;
  s = natsConnection_JetStream(&bus->js_, bus->nc_, &jo);
  if (s != NATS_OK) return nats_status(s, "JetStream context");

  auto pub = std::make_unique<Publisher>();
  pub->bus = raw;
  char inbox[64];
  natsInbox* ib = nullptr;
  natsInbox_Create(&ib);
  std::snprintf(inbox, sizeof inbox, "%s.", static_cast<const char*>(ib));
  natsInbox_Destroy(ib);
  pub->inbox_prefix = inbox;
  std::string wildcard = pub->inbox_prefix + "*";
  s = natsConnection_Subscribe(&pub->sub, bus->nc_, wildcard.c_str(), &Publisher::on_reply, pub.get());
  if (s != NATS_OK) return nats_status(s, "subscribe to publish inbox");
  natsSubscription_SetPendingLimits(pub->sub, -1, -1);
  pub->sweeper = std::thread([p = pub.get()] { p->sweep_loop(); });
  pthread_setname_np(pub->sweeper.native_handle(), "weir-sweep");
  bus->publisher_ = std::move(pub);
  bus->connected_ = true;
  return bus;
}

Bus::~Bus() {
  {
    // Their connections first: nothing of them outlives the Bus.
    std::unique_ptr<FlowLoop> fl[2];
    {
      MutexLock lock(flow_loop_mu_);
      for (int i = 0; i < 2; ++i) fl[i] = std::move(loops_[i]);
    }
    for (auto& l : fl) l.reset();
  }
  if (publisher_) {
    {
      MutexLock lock(publisher_->mu);
      publisher_->stopping = true;
    }
    publisher_->cv.notify_all();
    if (publisher_->sweeper.joinable()) publisher_->sweeper.join();
    if (publisher_->sub) {
      natsSubscription_Unsubscribe(publisher_->sub);
    }
    publisher_->fail_all(Status::unavailable(std::string("bus closed") + kMayBeStored));
  }
  {
    MutexLock lock(prefetch_mu_);
    if (prefetch_ && prefetch_->sub) {
      natsSubscription_Unsubscribe(prefetch_->sub);
      natsSubscription_Destroy(prefetch_->sub);
      prefetch_->sub = nullptr;
    }
  }
  if (js_) jsCtx_Destroy(js_);
  if (nc_) {
    closing_.store(true, std::memory_order_release);
    natsConnection_Close(nc_);
    // cnats runs the disconnected and closed callbacks on its own thread after Close
    // returns; without this wait they could run on a destroyed Bus (seen as an abort on
    // SIGTERM: set_connected logging a freed url). Bounded, in case no callback comes.
    for (int i = 0; i < 2000 && !closed_.load(std::memory_order_acquire); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (publisher_ && publisher_->sub) natsSubscription_Destroy(publisher_->sub);
    natsConnection_Destroy(nc_);
  }
}

void Bus::set_connected(bool up, const std::string& why) {
  bool was = connected_.exchange(up);
  // Fail what is in flight now instead of at its deadline: the caller answers 503 or
  // naks its input, and a retry is deduplicated by Nats-Msg-Id if the write did land.
  // A publish registers under the publisher's lock after reading `connected_`, so it
  // either saw `false` or is in the map fail_all swaps out.
  if (!up && publisher_) publisher_->fail_all(Status::unavailable(std::string("NATS connection lost") + kMayBeStored));
  {
    // Pull requests die with the connection: consumers forget theirs, and re-request once
    // it is back (the subscriptions themselves are renewed by cnats).
    MutexLock lock(consumers_mu_);
    for (auto* c : consumers_) c->connection(up);
  }
  if (was != up) {
    if (up) log::info("nats connected", {{"url", redact_urls(options_.url)}});
    else if (closing_.load(std::memory_order_acquire))
      log::info("nats connection closed", {{"url", redact_urls(options_.url)}});
    else log::warn("nats disconnected", {{"url", redact_urls(options_.url)}, {"reason", why}});
    if (options_.on_connection_change) options_.on_connection_change(up);
  }
}

std::vector<Bus::FlowLoop*> Bus::loops_made() const {
  MutexLock lock(flow_loop_mu_);
  std::vector<FlowLoop*> out;
  for (const auto& l : loops_)
    if (l) out.push_back(l.get());  // lives as long as the Bus once made
  return out;
}

void Bus::fail_pending(const std::string& why) {
  publisher_->fail_all(Status::unavailable(why + kMayBeStored));
  for (FlowLoop* fl : loops_made()) fl->pub->fail_pending(why);
}

void Bus::shutdown() {
  {
    MutexLock lock(publisher_->mu);
    publisher_->closed = true;
  }
  publisher_->fail_all(Status::unavailable(std::string("weir is shutting down") + kMayBeStored));
  for (FlowLoop* fl : loops_made()) fl->pub->shutdown();
}

size_t Bus::pending_publishes() const {
  size_t n = 0;
  for (const FlowLoop* fl : loops_made()) n += fl->pub->pending();
  MutexLock lock(publisher_->mu);
  return n + publisher_->pending.size();
}

void Bus::publish(std::string_view subject, std::string_view data, const Headers& headers,
                  std::chrono::milliseconds timeout, PublishCallback done) {
  auto& p = *publisher_;
  uint64_t id = 0;  // 0: not registered, fails below
  {
    MutexLock lock(p.mu);
    if (!p.closed && connected_.load(std::memory_order_acquire)) id = p.add(std::move(done), timeout);
  }
  if (id == 0) {
    // Not moved: add() takes `done` only when it registers it (ids start at 1).
    // NOLINTNEXTLINE(bugprone-use-after-move)
    done(Status::unavailable(connected() ? "weir is shutting down" : "NATS is not connected"), PubAck{});
    return;
  }
  char reply[96];
  std::snprintf(reply, sizeof reply, "%s%llu", p.inbox_prefix.c_str(), static_cast<unsigned long long>(id));
  std::string subj(subject);
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subj.c_str(), reply, data.data(), static_cast<int>(data.size()));
  for (const auto& [k, v] : headers) {
    if (s == NATS_OK) s = natsMsgHeader_Set(msg, k.c_str(), v.c_str());
  }
  if (s == NATS_OK) s = natsConnection_PublishMsg(nc_, msg);
  free_nats_msg(msg);
  if (s != NATS_OK) {
    if (auto pending = p.take(id)) pending->done(nats_status(s, "publish"), PubAck{});
  }
}

namespace {
// Answers that mean "not yet" rather than "no" at start-up: the server or a fresh cluster
// is still electing leaders, or the API did not answer in time.
bool transient(natsStatus s, jsErrCode jerr) {
  if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_DISCONNECTED) return true;
  // 10049 (generic create error) comes back when a peer's create of the same stream is
  // still being applied: the next attempt finds the stream (10058) and confirms it.
  // 10005 (no suitable peers for placement): on a brand-new cluster the meta leader counts
  // a peer as offline until that peer's first statistics reach it, a second or so after
  // /healthz is green; a peer that is really down comes back or the deadline says so.
  return jerr == JSClusterNotAvailErr || jerr == JSClusterNotLeaderErr || jerr == JSStreamCreateErr ||
         jerr == JSClusterNoPeersErr;
}

// Waits before attempt `n` (1-based) of a start-up call: 100 ms doubling to 2 s.
void setup_backoff(int n) {
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(2000, 100 << std::min(n - 1, 5))));
}

std::string size_text(int64_t bytes) {
  if (bytes % (1LL << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes % (1LL << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  return std::to_string(bytes) + " bytes";
}

constexpr int64_t kMinStreamBytes = 8LL << 20;

int64_t number_at(const nlohmann::json& j, const char* key, int64_t absent) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : absent;
}
std::string text_at(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// True when a stream's config as the server reports it is what `cfg` would create: every
// field weir sets, and the limits weir leaves at "none" (so a hand-set limit is still reset
// by the update, as without a prefetch).
bool same_stream_config(const nlohmann::json& have, const jsStreamConfig& cfg) {
  if (!have.is_object()) return false;
  auto subjects = have.find("subjects");
  if (subjects == have.end() || !subjects->is_array() || subjects->size() != static_cast<size_t>(cfg.SubjectsLen)) {
    return false;
  }
  for (int i = 0; i < cfg.SubjectsLen; ++i) {
    if (!(*subjects)[i].is_string() || (*subjects)[i].get<std::string>() != cfg.Subjects[i]) return false;
  }
  const char* retention = cfg.Retention == js_WorkQueuePolicy ? "workqueue" : "limits";
  const char* discard = cfg.Discard == js_DiscardNew ? "new" : "old";
  return text_at(have, "retention") == retention && text_at(have, "storage") == "file" &&
         text_at(have, "discard") == discard && number_at(have, "num_replicas", 1) == cfg.Replicas &&
         number_at(have, "duplicate_window", 0) == cfg.Duplicates && number_at(have, "max_bytes", -1) == cfg.MaxBytes &&
         number_at(have, "max_age", 0) == cfg.MaxAge && number_at(have, "max_msgs", -1) == -1 &&
         number_at(have, "max_msgs_per_subject", -1) == -1 && number_at(have, "max_msg_size", -1) == -1 &&
         number_at(have, "max_consumers", -1) == -1 && !have.value("sealed", false) &&
         !have.value("deny_delete", false) && !have.value("deny_purge", false);
}

// The same for a durable pull consumer weir creates (Bus::pull_consumer).
bool same_consumer_config(const nlohmann::json& have, const jsConsumerConfig& cc) {
  if (!have.is_object()) return false;
  const int64_t replicas = number_at(have, "num_replicas", 0);
  return text_at(have, "durable_name") == cc.Durable && text_at(have, "filter_subject") == cc.FilterSubject &&
         text_at(have, "deliver_subject").empty() && text_at(have, "ack_policy") == "explicit" &&
         text_at(have, "deliver_policy") == "all" && number_at(have, "ack_wait", 0) == cc.AckWait &&
         number_at(have, "max_ack_pending", 0) == cc.MaxAckPending &&
         number_at(have, "max_deliver", -1) == cc.MaxDeliver && number_at(have, "max_waiting", 0) == cc.MaxWaiting &&
         replicas == cc.Replicas;
}
}  // namespace

// Create-or-confirm, safe when several instances start at the same instant and on a server
// that is still coming up (issue: JetStream error 10065 when two instances raced):
//  - 10058 name exists → update it to this config;
//  - 10065 subjects overlap → a racing peer created it a moment ago: if a stream of this
//    name exists, update it; otherwise another stream owns the subjects (a clear error);
//  - 10047/10023 no storage → the server's JetStream limit (max_file_store) is smaller than
//    asked: halve the size down to 8 MiB and say what was chosen;
//  - timeouts, no responders, no leader yet, no peers for placement yet → retried with
//    backoff up to setup_timeout.
namespace {
// Creates stream cfg.Name or, when it exists, updates it to `cfg`. A subject overlap with a
// stream of that name is a peer's create that landed first (confirmed like an existing
// one); with no such stream the subjects belong to someone else: `*foreign` is set.
natsStatus add_or_update(jsCtx* js, jsStreamConfig& cfg, jsErrCode* jerr, bool* foreign) {
  jsStreamInfo* si = nullptr;
  *jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_AddStream(&si, js, &cfg, nullptr, jerr);
  if (si) jsStreamInfo_Destroy(si), si = nullptr;
  if (s != NATS_OK && *jerr == JSStreamSubjectOverlapErr) {
    jsErrCode ierr = static_cast<jsErrCode>(0);
    natsStatus is = js_GetStreamInfo(&si, js, cfg.Name, nullptr, &ierr);
    if (si) jsStreamInfo_Destroy(si), si = nullptr;
    if (is == NATS_OK) {
      *jerr = JSStreamNameExistErr;  // a peer made it first: confirm it below
    } else if (is == NATS_NOT_FOUND || ierr == JSStreamNotFoundErr) {
      *foreign = true;
      return s;
    }
  }
  if (s != NATS_OK && *jerr == JSStreamNameExistErr) {
    *jerr = static_cast<jsErrCode>(0);
    s = js_UpdateStream(&si, js, &cfg, nullptr, jerr);
    if (si) jsStreamInfo_Destroy(si), si = nullptr;
  }
  return s;
}

// JetStream refused the storage: halves cfg.MaxBytes while that stays at least
// kMinStreamBytes (nullopt: try again), else the operator's error.
std::optional<Status> shrink_or_fail(jsStreamConfig& cfg, const std::string& name, jsErrCode jerr) {
  if (cfg.MaxBytes <= 0) {
    return Status::unavailable("create stream " + name +
                               ": JetStream's storage is fully reserved by other "
                               "streams (JetStream error " +
                               std::to_string(jerr) +
                               "); raise the server's "
                               "jetstream max_file_store, or lower nats.stream_max_bytes");
  }
  if (cfg.MaxBytes / 2 >= kMinStreamBytes) {
    cfg.MaxBytes /= 2;
    return std::nullopt;
  }
  return Status::unavailable("create stream " + name + ": JetStream has no storage left for it even at " +
                             size_text(cfg.MaxBytes) + " (JetStream error " + std::to_string(jerr) +
                             "); raise the server's jetstream max_file_store, free space, or lower "
                             "nats.stream_max_bytes");
}
}  // namespace

Status Bus::add_or_update_stream(const std::string& name, const std::vector<std::string>& subjects, bool work_queue,
                                 int64_t max_age_ns, std::optional<int64_t> max_bytes) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = name.c_str();
  std::vector<const char*> subs;
  subs.reserve(subjects.size());
  for (const auto& s : subjects) subs.push_back(s.c_str());
  cfg.Subjects = subs.data();
  cfg.SubjectsLen = static_cast<int>(subs.size());
  cfg.Storage = js_FileStorage;
  cfg.Retention = work_queue ? js_WorkQueuePolicy : js_LimitsPolicy;
  cfg.Replicas = options_.stream_replicas;
  cfg.Duplicates = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.dedup_window).count();
  // The flow stream size (nats.stream_max_bytes) bounds flow streams only. The dead-letter
  // stream keeps every dead letter (spec §3 dlq.max_bytes 0): with a byte limit and
  // DiscardOld, a burst of dead letters would silently push out the oldest.
  cfg.MaxBytes = work_queue ? options_.stream_max_bytes : -1;
  cfg.MaxAge = max_age_ns;
  // A full stream refuses new writes (ingress answers 503) instead of dropping old ones.
  cfg.Discard = work_queue ? js_DiscardNew : js_DiscardOld;
  // Dead letters: an explicit limit (0 = none) with discard-new, so a full stream refuses a
  // dead letter (the stage holds the event) instead of dropping the oldest (ADR 0090).
  if (max_bytes) {
    cfg.MaxBytes = *max_bytes > 0 ? *max_bytes : -1;
    cfg.Discard = js_DiscardNew;
  }
  const int64_t asked = cfg.MaxBytes;
  auto info = prefetched(true, name, true);
  if (info && info->is_object() && same_stream_config((*info)["config"], cfg)) {
    return Status::ok();  // it is as it would be made: confirmed without a request (ADR 0215)
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.setup_timeout;
  for (int attempt = 1;; ++attempt) {
    jsErrCode jerr = static_cast<jsErrCode>(0);
    bool foreign = false;
    natsStatus s = add_or_update(js_, cfg, &jerr, &foreign);
    if (foreign) {
      return Status::invalid("create stream " + name + ": its subjects (" + subjects.front() +
                             ") belong to another stream on this NATS; remove that stream or use another "
                             "cluster name");
    }
    if (s == NATS_OK) {
      if (cfg.MaxBytes != asked) {
        log::warn("stream sized to fit the server's JetStream storage", {{"stream", name},
                                                                         {"max_bytes", size_text(cfg.MaxBytes)},
                                                                         {"asked", size_text(asked)},
                                                                         {"key", "nats.stream_max_bytes"}});
      }
      return Status::ok();
    }
    if (jerr == JSStorageResourcesExceededErr || jerr == JSInsufficientResourcesErr) {
      if (auto failed = shrink_or_fail(cfg, name, jerr)) return *failed;
      continue;
    }
    if (transient(s, jerr) && std::chrono::steady_clock::now() < deadline) {
      if (attempt == 1 || attempt % 10 == 0) {
        log::info("JetStream not ready, retrying", {{"stream", name}, {"error", js_status(s, jerr, "create").str()}});
      }
      setup_backoff(attempt);
      continue;
    }
    return js_status(s, jerr, "create stream " + name);
  }
}

Status Bus::plan_stream_sizes(const std::vector<std::string>& streams) {
  if (streams.empty()) return Status::ok();
  const int64_t n = static_cast<int64_t>(streams.size());
  // What these streams reserve already (a restart re-ensures them with the same share).
  int64_t ours = 0;
  for (const auto& name : streams) {
    if (auto info = prefetched(true, name, false)) {  // answered: no request (ADR 0215)
      if (info->is_object()) ours += std::max<int64_t>(0, number_at((*info)["config"], "max_bytes", -1));
      continue;
    }
    jsStreamInfo* si = nullptr;
    if (js_GetStreamInfo(&si, js_, name.c_str(), nullptr, nullptr) == NATS_OK && si) {
      if (si->Config && si->Config->MaxBytes > 0) ours += si->Config->MaxBytes;
    }
    if (si) jsStreamInfo_Destroy(si);
  }
  const int64_t want = options_.stream_max_bytes * n;
  if (want <= ours) return Status::ok();
  // The largest probe the server accepts, halving from what is still wanted.
  natsInbox* ib = nullptr;
  natsInbox_Create(&ib);
  std::string token(static_cast<const char*>(ib));
  natsInbox_Destroy(ib);
  for (char& c : token) {
    if (c == '.') c = '_';
  }
  const std::string probe = "weir_probe" + token.substr(token.find('_', 1));
  const std::string subject = probe + ".x";
  int64_t free_bytes = -1;
  // The smallest share worth having: 8 MiB, or the configured size when that is smaller.
  const int64_t floor = std::min(kMinStreamBytes, options_.stream_max_bytes);
  for (int64_t size = want - ours; size > 0 && size >= floor / 2; size /= 2) {
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = probe.c_str();
    const char* subs[] = {subject.c_str()};
    cfg.Subjects = subs;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = options_.stream_replicas;
    cfg.MaxBytes = size;
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddStream(&si, js_, &cfg, nullptr, &jerr);
    if (si) jsStreamInfo_Destroy(si);
    if (s == NATS_OK) {
      js_DeleteStream(js_, probe.c_str(), nullptr, nullptr);
      free_bytes = size;
      break;
    }
    if (jerr != JSStorageResourcesExceededErr && jerr != JSInsufficientResourcesErr) {
      return Status::ok();  // not a storage answer: nothing learned; creation reports errors itself
    }
  }
  if (free_bytes == want - ours) return Status::ok();  // everything fits as configured
  const int64_t budget = std::max<int64_t>(free_bytes, 0) + ours;
  // One share stays unreserved: streams without a size limit (dead letters, KV buckets) are
  // refused by the server once reservations take all of its storage.
  int64_t share = (budget / (n + 1)) & ~((int64_t{1} << 20) - 1);  // whole MiB
  if (share < floor) {
    return Status::unavailable("JetStream storage is too small for weir: " + std::to_string(n) +
                               " streams need at least " + size_text(floor) +
                               " each (and as much left "
                               "unreserved), the server can give " +
                               size_text(budget) +
                               " in all; raise the server's jetstream max_file_store or free "
                               "space (weir sizes its streams with nats.stream_max_bytes)");
  }
  share = std::min(share, options_.stream_max_bytes);
  log::warn("streams sized to fit the server's JetStream storage", {{"streams", std::to_string(n)},
                                                                    {"max_bytes_each", size_text(share)},
                                                                    {"asked", size_text(options_.stream_max_bytes)},
                                                                    {"available", size_text(budget)},
                                                                    {"key", "nats.stream_max_bytes"}});
  options_.stream_max_bytes = share;
  return Status::ok();
}

Status Bus::ensure_flow_stream(std::string_view flow) {
  std::string f(flow);
  std::string name = layout::flow_stream(f);
  // nats-server enforces a lowered MaxBytes by deleting stored messages, DiscardNew or
  // not: refuse to shrink a stream below what it holds (those are acked events).
  Result<StreamState> st = Status::not_found("");
  if (auto info = prefetched(true, name, false)) {  // answered: no request (ADR 0215)
    if (info->is_object()) {
      StreamState known;
      known.bytes = number_at((*info)["state"], "bytes", 0);
      known.max_bytes = number_at((*info)["config"], "max_bytes", -1);
      st = known;
    }
  } else {
    st = stream_state(name);
  }
  if (st && options_.stream_max_bytes > 0 && st->bytes > options_.stream_max_bytes &&
      st->max_bytes != options_.stream_max_bytes) {
    return Status::invalid("stream " + name + " holds " + std::to_string(st->bytes) +
                           " bytes, more than nats.stream_max_bytes (" + std::to_string(options_.stream_max_bytes) +
                           "): shrinking it would delete stored events; raise nats.stream_max_bytes or let the flow "
                           "drain first");
  }
  return add_or_update_stream(name, {layout::flow_subjects(f)}, true, 0);
}

Status Bus::ensure_dlq_stream(std::chrono::milliseconds max_age, int64_t max_bytes) {
  // Dead letters are kept until replayed, unless the config bounds them (spec §1.3, §3).
  return add_or_update_stream(layout::dlq_stream(), {layout::dlq_subjects()}, false,
                              std::chrono::duration_cast<std::chrono::nanoseconds>(max_age).count(), max_bytes);
}

Result<std::unique_ptr<PullConsumer>> Bus::pull_consumer(const ConsumerOptions& o) {
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = o.durable.c_str();
  cc.FilterSubject = o.filter_subject.c_str();
  cc.AckPolicy = js_AckExplicit;
  cc.DeliverPolicy = js_DeliverAll;
  cc.AckWait = std::chrono::duration_cast<std::chrono::nanoseconds>(o.ack_wait).count();
  cc.MaxAckPending = o.max_ack_pending;
  cc.MaxDeliver = -1;
  cc.MaxWaiting = 512;
  if (o.replicas > 0) cc.Replicas = o.replicas;
  // Create-or-confirm with retries, like streams: a consumer that exists with another config
  // (a changed AckWait) is updated; a server still electing leaders is waited for.
  auto have = prefetched(false, o.stream + "/" + o.durable, true);
  const bool confirmed = have && same_consumer_config(*have, cc);  // no request (ADR 0215)
  const auto deadline = std::chrono::steady_clock::now() + options_.setup_timeout;
  for (int attempt = 1; !confirmed; ++attempt) {
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddConsumer(&ci, js_, o.stream.c_str(), &cc, nullptr, &jerr);
    if (ci) jsConsumerInfo_Destroy(ci), ci = nullptr;
    if (s != NATS_OK && jerr != 0 && !transient(s, jerr)) {
      jerr = static_cast<jsErrCode>(0);
      s = js_UpdateConsumer(&ci, js_, o.stream.c_str(), &cc, nullptr, &jerr);
      if (ci) jsConsumerInfo_Destroy(ci), ci = nullptr;
    }
    if (s == NATS_OK) break;
    if (!transient(s, jerr) || std::chrono::steady_clock::now() >= deadline) {
      return js_status(s, jerr, "create consumer " + o.durable);
    }
    if (attempt == 1 || attempt % 10 == 0) {
      log::info("JetStream not ready, retrying",
                {{"consumer", o.durable}, {"error", js_status(s, jerr, "create").str()}});
    }
    setup_backoff(attempt);
  }
  std::unique_ptr<PullConsumer> pc(new PullConsumer());
  pc->impl_ = std::make_shared<PullConsumer::Impl>();
  auto& c = *pc->impl_;
  c.bus = this;
  c.nc = nc_;
  if (o.loop != ConsumerLoop::kNone && options_.flow_loop) {
    auto fl = flow_loop(o.loop);
    if (!fl) return fl.status();
    c.flow_loop = fl.value();
    c.sink_first = o.loop == ConsumerLoop::kSinks;
    c.loop = c.flow_loop->pub.get();
    c.nc = c.loop->connection();
  }
  c.durable = o.durable;
  c.next_subject = "$JS.API.CONSUMER.MSG.NEXT." + o.stream + "." + o.durable;
  natsInbox* ib = nullptr;
  natsInbox_Create(&ib);
  c.inbox_prefix = std::string(static_cast<const char*>(ib)) + ".";
  natsInbox_Destroy(ib);
  c.kick_subject = c.inbox_prefix + "k";
  c.expires = std::max(o.request_expires, std::chrono::milliseconds(100));
  c.starve_check = o.starve_check;
  c.ack_wait = o.ack_wait;
  {
    MutexLock lock(c.mu);
    c.check_every = o.starve_check;
  }
  c.recreated_metric = o.recreated;
  c.stream_name = o.stream;
  c.filter = o.filter_subject;
  // The config above, as the watch creates the durable again (same_consumer_config holds).
  nlohmann::json config{{"durable_name", o.durable},    {"filter_subject", o.filter_subject},
                        {"ack_policy", "explicit"},     {"deliver_policy", "all"},
                        {"ack_wait", cc.AckWait},       {"max_ack_pending", cc.MaxAckPending},
                        {"max_deliver", cc.MaxDeliver}, {"max_waiting", cc.MaxWaiting},
                        {"replay_policy", "instant"}};
  if (cc.Replicas > 0) config["num_replicas"] = cc.Replicas;
  c.create_body = nlohmann::json{{"stream_name", o.stream}, {"config", std::move(config)}}.dump();
  return pc;
}

Result<std::pair<uint64_t, uint64_t>> Bus::stream_bounds(const std::string& stream) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, js_, stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK) return js_status(s, jerr, "stream info " + stream);
  std::pair<uint64_t, uint64_t> out{si->State.FirstSeq, si->State.LastSeq};
  if (si->State.Msgs == 0) out = {0, 0};
  jsStreamInfo_Destroy(si);
  return out;
}

Result<Bus::StreamState> Bus::stream_state(const std::string& stream) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, js_, stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK) return js_status(s, jerr, "stream info " + stream);
  StreamState out;
  out.bytes = static_cast<int64_t>(si->State.Bytes);
  out.messages = static_cast<int64_t>(si->State.Msgs);
  out.last_seq = si->State.LastSeq;
  if (si->Config) out.max_bytes = si->Config->MaxBytes;
  jsStreamInfo_Destroy(si);
  return out;
}

Result<StoredMessage> Bus::get_message(const std::string& stream, uint64_t seq) {
  natsMsg* msg = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetMsg(&msg, js_, stream.c_str(), seq, nullptr, &jerr);
  if (s != NATS_OK) return js_status(s, jerr, "get message");
  StoredMessage out;
  out.sequence = seq;
  out.subject = natsMsg_GetSubject(msg);
  out.data.assign(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
  out.time_ns = natsMsg_GetTime(msg);
  const char** keys = nullptr;
  int count = 0;
  if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK) {
    for (int i = 0; i < count; ++i) {
      const char* v = nullptr;
      if (natsMsgHeader_Get(msg, keys[i], &v) == NATS_OK && v) out.headers.emplace_back(keys[i], v);
    }
    free(static_cast<void*>(keys));
  }
  free_nats_msg(msg);
  return out;
}

Status Bus::delete_message(const std::string& stream, uint64_t seq) {
  jsErrCode jerr = static_cast<jsErrCode>(0);
  return js_status(js_DeleteMsg(js_, stream.c_str(), seq, nullptr, &jerr), jerr, "delete message");
}

}  // namespace weir
