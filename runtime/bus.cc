#include "runtime/bus.h"

#include <nats/nats.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/log.h"

namespace weir {

// ---- names ---------------------------------------------------------------------------

namespace layout {
std::string flow_stream(std::string_view flow) { return "weir_" + std::string(flow); }
std::string input_subject(std::string_view flow) { return "weir." + std::string(flow) + ".in"; }
std::string output_subject(std::string_view flow, std::string_view sink) {
  return "weir." + std::string(flow) + ".out." + std::string(sink);
}
std::string flow_consumer(std::string_view flow) { return std::string(flow); }
std::string sink_consumer(std::string_view flow, std::string_view sink) {
  return std::string(flow) + "-to-" + std::string(sink);
}
std::string dlq_subject(std::string_view flow, std::string_view stage) {
  return "weir.dlq." + std::string(flow) + "." + std::string(stage);
}
}  // namespace layout

Status nats_status(int s, std::string_view what) {
  auto st = static_cast<natsStatus>(s);
  if (st == NATS_OK) return Status::ok();
  std::string msg = std::string(what) + ": " + natsStatus_GetText(st);
  switch (st) {
    case NATS_TIMEOUT: return Status::timeout(msg);
    case NATS_NOT_FOUND: return Status::not_found(msg);
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NO_SERVER:
    case NATS_NO_RESPONDERS:
    case NATS_STALE_CONNECTION:
    case NATS_INSUFFICIENT_BUFFER:
      return Status::unavailable(msg);
    default: return Status::internal(msg);
  }
}

namespace {
Status js_status(natsStatus s, jsErrCode jerr, std::string_view what) {
  if (s == NATS_OK) return Status::ok();
  Status base = nats_status(s, what);
  if (jerr == 0 || base.code() != Status::Code::kInternal) return base;
  return Status::internal(base.message() + " (JetStream error " + std::to_string(jerr) + ")");
}
}  // namespace

// ---- BusMessage ----------------------------------------------------------------------

BusMessage::~BusMessage() { natsMsg_Destroy(msg_); }

std::string_view BusMessage::data() const {
  return {natsMsg_GetData(msg_), static_cast<size_t>(natsMsg_GetDataLength(msg_))};
}
std::string_view BusMessage::subject() const { return natsMsg_GetSubject(msg_); }
std::string_view BusMessage::header(const char* name) const {
  const char* v = nullptr;
  if (natsMsgHeader_Get(msg_, name, &v) != NATS_OK || v == nullptr) return {};
  return v;
}
void BusMessage::load_meta() const {
  if (meta_loaded_) return;
  meta_loaded_ = true;
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, msg_) == NATS_OK && meta) {
    deliveries_ = meta->NumDelivered;
    sequence_ = meta->Sequence.Stream;
    pending_ = meta->NumPending;
    jsMsgMetaData_Destroy(meta);
  }
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
void BusMessage::ack() { natsMsg_Ack(msg_, nullptr); }
void BusMessage::nak(std::chrono::milliseconds delay) {
  if (delay.count() > 0) natsMsg_NakWithDelay(msg_, delay.count(), nullptr);
  else natsMsg_Nak(msg_, nullptr);
}
void BusMessage::term() { natsMsg_Term(msg_, nullptr); }

// ---- PullConsumer --------------------------------------------------------------------

PullConsumer::~PullConsumer() {
  if (sub_) natsSubscription_Destroy(sub_);
}

Result<std::vector<std::unique_ptr<BusMessage>>> PullConsumer::fetch(int batch,
                                                                    std::chrono::milliseconds wait) {
  natsMsgList list{};
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = natsSubscription_Fetch(&list, sub_, batch, wait.count(), &jerr);
  std::vector<std::unique_ptr<BusMessage>> out;
  if (s == NATS_TIMEOUT) return out;
  if (s != NATS_OK) return js_status(s, jerr, "fetch");
  out.reserve(list.Count);
  for (int i = 0; i < list.Count; ++i) {
    out.push_back(std::make_unique<BusMessage>(list.Msgs[i]));
    list.Msgs[i] = nullptr;
  }
  natsMsgList_Destroy(&list);
  return out;
}

// ---- Publisher: pipelined request/reply over one wildcard inbox ------------------------

struct Bus::Publisher {
  struct Pending {
    PublishCallback done;
    std::chrono::steady_clock::time_point deadline;
  };

  Bus* bus = nullptr;
  std::string inbox_prefix;                       // "_INBOX.<nuid>."
  natsSubscription* sub = nullptr;
  mutable std::mutex mu;
  std::unordered_map<uint64_t, Pending> pending;  // GUARDED_BY(mu)
  std::priority_queue<std::pair<std::chrono::steady_clock::time_point, uint64_t>,
                      std::vector<std::pair<std::chrono::steady_clock::time_point, uint64_t>>,
                      std::greater<>> deadlines;  // GUARDED_BY(mu); lazy: entries may be gone
  uint64_t next_id = 1;                           // GUARDED_BY(mu)
  std::condition_variable cv;
  bool stopping = false;                          // GUARDED_BY(mu)
  std::thread sweeper;

  std::optional<Pending> take(uint64_t id) {
    std::lock_guard lock(mu);
    auto it = pending.find(id);
    if (it == pending.end()) return std::nullopt;
    Pending p = std::move(it->second);
    pending.erase(it);
    return p;
  }

  static void on_reply(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    auto* self = static_cast<Publisher*>(closure);
    std::string_view subj = natsMsg_GetSubject(msg);
    uint64_t id = 0;
    if (subj.size() > self->inbox_prefix.size()) {
      for (char c : subj.substr(self->inbox_prefix.size())) {
        if (c < '0' || c > '9') { id = 0; break; }
        id = id * 10 + static_cast<uint64_t>(c - '0');
      }
    }
    auto p = self->take(id);
    if (!p) {
      natsMsg_Destroy(msg);
      return;   // answered after its deadline: the caller already got a timeout
    }
    Status status;
    PubAck ack;
    if (natsMsg_IsNoResponders(msg)) {
      status = Status::unavailable("no JetStream stream answered (no responders)");
    } else {
      std::string_view data(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
      auto j = nlohmann::json::parse(data, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        status = Status::internal("unreadable PubAck");
      } else if (auto e = j.find("error"); e != j.end()) {
        int code = e->value("code", 0);
        std::string desc = e->value("description", std::string("error"));
        status = code == 503 ? Status::unavailable("JetStream: " + desc)
                             : Status::internal("JetStream: " + desc);
      } else {
        ack.sequence = j.value("seq", uint64_t{0});
        ack.duplicate = j.value("duplicate", false);
      }
    }
    natsMsg_Destroy(msg);
    p->done(status, ack);
  }

  void fail_all(const Status& why) {
    std::unordered_map<uint64_t, Pending> failed;
    {
      std::lock_guard lock(mu);
      failed.swap(pending);
    }
    for (auto& [id, p] : failed) p.done(why, PubAck{});
  }

  void sweep_loop() {
    std::unique_lock lock(mu);
    while (!stopping) {
      auto now = std::chrono::steady_clock::now();
      std::vector<Pending> expired;
      while (!deadlines.empty() && deadlines.top().first <= now) {
        auto id = deadlines.top().second;
        deadlines.pop();
        if (auto it = pending.find(id); it != pending.end()) {
          expired.push_back(std::move(it->second));
          pending.erase(it);
        }
      }
      if (!expired.empty()) {
        lock.unlock();
        for (auto& p : expired) p.done(Status::timeout("JetStream did not acknowledge in time"), PubAck{});
        lock.lock();
        continue;
      }
      if (deadlines.empty()) cv.wait(lock);
      else {
        const auto next = deadlines.top().first;  // a copy: publish() may grow the queue while we wait
        cv.wait_until(lock, next);
      }
    }
  }
};

// ---- Bus -----------------------------------------------------------------------------

Result<std::unique_ptr<Bus>> Bus::connect(BusOptions options) {
  std::unique_ptr<Bus> bus(new Bus());
  bus->options_ = std::move(options);
  natsOptions* opts = nullptr;
  natsOptions_Create(&opts);
  // A NATS cluster is given as a comma-separated list; natsOptions_SetURL takes one URL
  // and would fail with "No server available" (only natsConnection_ConnectTo splits).
  std::vector<std::string> urls;
  for (size_t from = 0; from <= bus->options_.url.size();) {
    size_t comma = std::min(bus->options_.url.find(',', from), bus->options_.url.size());
    std::string u = bus->options_.url.substr(from, comma - from);
    u.erase(0, u.find_first_not_of(' '));
    u.erase(u.find_last_not_of(' ') + 1);
    if (!u.empty()) urls.push_back(std::move(u));
    from = comma + 1;
  }
  std::vector<const char*> servers;
  for (const auto& u : urls) servers.push_back(u.c_str());
  if (servers.size() > 1) {
    natsOptions_SetServers(opts, servers.data(), static_cast<int>(servers.size()));
  } else {
    natsOptions_SetURL(opts, bus->options_.url.c_str());
  }
  natsOptions_SetName(opts, bus->options_.name.c_str());
  // Writes go out at once: no 1 ms flusher floor on PubAcks, acks and fetches
  // (platform notes; docs/adr/0003-threading-model.md).
  natsOptions_SetSendAsap(opts, true);
  natsOptions_SetMaxReconnect(opts, -1);
  natsOptions_SetReconnectWait(opts, bus->options_.reconnect_wait.count());
  natsOptions_SetReconnectBufSize(opts, 64 * 1024);
  natsOptions_SetTimeout(opts, 2000);
  natsOptions_SetPingInterval(opts, 2000);
  natsOptions_SetMaxPingsOut(opts, 2);
  if (!bus->options_.creds_file.empty()) {
    natsOptions_SetUserCredentialsFromFiles(opts, bus->options_.creds_file.c_str(), nullptr);
  }
  Bus* raw = bus.get();
  natsOptions_SetDisconnectedCB(
      opts, [](natsConnection*, void* c) { static_cast<Bus*>(c)->set_connected(false); }, raw);
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
  bus->publisher_ = std::move(pub);
  bus->connected_ = true;
  return bus;
}

Bus::~Bus() {
  if (publisher_) {
    {
      std::lock_guard lock(publisher_->mu);
      publisher_->stopping = true;
    }
    publisher_->cv.notify_all();
    if (publisher_->sweeper.joinable()) publisher_->sweeper.join();
    if (publisher_->sub) {
      natsSubscription_Unsubscribe(publisher_->sub);
    }
    publisher_->fail_all(Status::unavailable("bus closed"));
  }
  if (js_) jsCtx_Destroy(js_);
  if (nc_) {
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

void Bus::set_connected(bool up) {
  bool was = connected_.exchange(up);
  // Fail what is in flight now instead of at its deadline: the caller answers 503 or
  // naks its input, and a retry is deduplicated by Nats-Msg-Id if the write did land.
  // A publish registers under the publisher's lock after reading `connected_`, so it
  // either saw `false` or is in the map fail_all swaps out.
  if (!up && publisher_) publisher_->fail_all(Status::unavailable("NATS connection lost"));
  if (was != up) {
    if (up) log::info("nats connected", {{"url", log::redact_url(options_.url)}});
    else log::warn("nats disconnected", {{"url", log::redact_url(options_.url)}});
    if (options_.on_connection_change) options_.on_connection_change(up);
  }
}

size_t Bus::pending_publishes() const {
  std::lock_guard lock(publisher_->mu);
  return publisher_->pending.size();
}

void Bus::publish(std::string_view subject, std::string_view data, const Headers& headers,
                  std::chrono::milliseconds timeout, PublishCallback done) {
  auto& p = *publisher_;
  uint64_t id;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  {
    std::lock_guard lock(p.mu);
    if (!connected_.load(std::memory_order_acquire)) {
      // fall through to the failure below without registering
      id = 0;
    } else {
      id = p.next_id++;
      bool wake = p.deadlines.empty() || deadline < p.deadlines.top().first;
      p.pending.emplace(id, Publisher::Pending{std::move(done), deadline});
      p.deadlines.emplace(deadline, id);
      if (wake) p.cv.notify_one();
    }
  }
  if (id == 0) {
    done(Status::unavailable("NATS is not connected"), PubAck{});
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
  natsMsg_Destroy(msg);
  if (s != NATS_OK) {
    if (auto pending = p.take(id)) pending->done(nats_status(s, "publish"), PubAck{});
  }
}

Status Bus::add_or_update_stream(const std::string& name, const std::vector<std::string>& subjects,
                                 bool work_queue, int64_t max_age_ns) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = name.c_str();
  std::vector<const char*> subs;
  for (const auto& s : subjects) subs.push_back(s.c_str());
  cfg.Subjects = subs.data();
  cfg.SubjectsLen = static_cast<int>(subs.size());
  cfg.Storage = js_FileStorage;
  cfg.Retention = work_queue ? js_WorkQueuePolicy : js_LimitsPolicy;
  cfg.Replicas = options_.stream_replicas;
  cfg.Duplicates = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.dedup_window).count();
  cfg.MaxBytes = options_.stream_max_bytes;
  cfg.MaxAge = max_age_ns;
  // A full stream refuses new writes (ingress answers 503) instead of dropping old ones.
  cfg.Discard = work_queue ? js_DiscardNew : js_DiscardOld;
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_AddStream(&si, js_, &cfg, nullptr, &jerr);
  if (s != NATS_OK && jerr == JSStreamNameExistErr) {
    s = js_UpdateStream(&si, js_, &cfg, nullptr, &jerr);
  }
  if (si) jsStreamInfo_Destroy(si);
  return js_status(s, jerr, "create stream " + name);
}

Status Bus::ensure_flow_stream(std::string_view flow) {
  std::string f(flow);
  return add_or_update_stream(layout::flow_stream(f), {"weir." + f + ".>"}, true, 0);
}

Status Bus::ensure_dlq_stream() {
  // Dead letters are kept for 14 days or until replayed.
  return add_or_update_stream(layout::kDlqStream, {"weir.dlq.>"}, false,
                              int64_t{14} * 24 * 3600 * 1'000'000'000LL);
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
  jsConsumerInfo* ci = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_AddConsumer(&ci, js_, o.stream.c_str(), &cc, nullptr, &jerr);
  if (s != NATS_OK && jerr != 0) {  // exists with another config (e.g. a changed AckWait)
    s = js_UpdateConsumer(&ci, js_, o.stream.c_str(), &cc, nullptr, &jerr);
  }
  if (ci) jsConsumerInfo_Destroy(ci);
  if (s != NATS_OK) return js_status(s, jerr, "create consumer " + o.durable);

  std::unique_ptr<PullConsumer> pc(new PullConsumer());
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = o.stream.c_str();
  so.Consumer = o.durable.c_str();
  s = js_PullSubscribe(&pc->sub_, js_, o.filter_subject.c_str(), o.durable.c_str(), nullptr, &so, &jerr);
  if (s != NATS_OK) return js_status(s, jerr, "bind consumer " + o.durable);
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
  natsMsg_Destroy(msg);
  return out;
}

Status Bus::delete_message(const std::string& stream, uint64_t seq) {
  jsErrCode jerr = static_cast<jsErrCode>(0);
  return js_status(js_DeleteMsg(js_, stream.c_str(), seq, nullptr, &jerr), jerr, "delete message");
}

}  // namespace weir
