// Bus: the threaded control connection and its lifecycle, the pipelined publisher, the
// consumers on that connection and the start-up prefetch. Stream and consumer set-up:
// bus_streams.cc; pull consumers: pull_consumer.cc; delivery loops: delivery_loop.cc;
// messages: bus_message.cc; names: bus_names.cc (docs/adr/0273-runtime-rooms.md).
#include "runtime/nats/body_sum.h"
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
#include "runtime/nats/pull_consumer_impl.h"
#include "runtime/base/redact.h"

namespace weir {

// A publish failed after it was written may still be
// stored (cnats' reconnect buffer replays it; a late PubAck is not waited for). Every
// such failure says so, since it becomes the 503 body at http-in.
const char* const kMayBeStored =
    " (a write already sent may still be stored: resend with the same Idempotency-Key, JetStream drops the duplicate)";

bool may_be_stored(const Status& s) {
  const std::string& m = s.message();
  const size_t n = std::char_traits<char>::length(kMayBeStored);
  return !s.is_ok() && m.size() >= n && m.compare(m.size() - n, n, kMayBeStored) == 0;
}

namespace {
// How long the set-up calls wait for prefetch_setup()'s answers; what has not answered by
// then is asked again the usual way (a fresh or busy server answers the retries later).
constexpr auto kPrefetchWait = std::chrono::milliseconds(1000);
// Answers serve the start-up only: a set-up call later than this (a deploy) asks the server.
constexpr auto kPrefetchLife = std::chrono::seconds(10);
}  // namespace

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
  // is pending, not once per publish.
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
  natsStatus s = make_stamped_msg(&msg, subj.c_str(), reply, data, headers);
  if (s == NATS_OK) s = natsConnection_PublishMsg(nc_, msg);
  free_nats_msg(msg);
  if (s != NATS_OK) {
    if (auto pending = p.take(id)) pending->done(nats_publish_status(s, nc_, data.size()), PubAck{});
  }
}

}  // namespace weir
