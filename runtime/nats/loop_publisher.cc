#include "runtime/nats/loop_publisher.h"

#include <nats/nats.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/base/log.h"
#include "runtime/base/thread_annotations.h"
#include "runtime/nats/body_sum.h"
#include "runtime/nats/nats_msg.h"
#include "runtime/nats/nats_loop.h"
#include "runtime/nats/nats_status.h"
#include "runtime/base/redact.h"

namespace weir {

struct LoopPublisher::Impl : std::enable_shared_from_this<Impl> {
  using Clock = std::chrono::steady_clock;
  // How late a publish timeout may fire; the timer runs only while publishes are pending.
  static constexpr auto kTick = std::chrono::milliseconds(100);

  struct Deadlines {
    std::chrono::milliseconds timeout;
    std::deque<std::pair<Clock::time_point, uint64_t>> fifo;
  };

  std::unique_ptr<NatsLoop> loop;
  // The connection, io thread (and connect/destructor). Shared with what still holds a
  // message read on it (BusMessage): a rebuilt connection's predecessor lives until they
  // are gone (docs/adr/0287-rebuilt-loop-connections.md).
  natsConnection* nc = nullptr;
  std::shared_ptr<natsConnection> conn;
  std::vector<std::shared_ptr<natsConnection>> retired;  // io thread: until consumers moved
  std::string url, inbox_prefix, label;
  LoopHooks hooks;
  std::atomic<bool> connected{false};
  std::atomic<bool> closed_cb{false};  // cnats' last callback ran: nothing touches Impl after
  std::atomic<bool> closing{false};    // ~LoopPublisher closes the connection: its drop is no fault
  std::atomic<size_t> pending_count{0};

  // Rebuilding (ADR 0287): cnats never reconnects a loop connection (its parser would keep
  // a cut message's state across the reconnect, upstream nats-io/nats.c#1007); when it
  // closes, a thread of its own connects a new one with the same options and the io
  // thread installs it.
  natsOptions* opts = nullptr;  // kept for the rebuilds; destroyed with the Impl
  std::chrono::milliseconds reconnect_wait{250};
  Mutex rb_mu;
  std::condition_variable rb_cv;
  std::thread rebuilder GUARDED_BY(rb_mu);
  bool rb_stop GUARDED_BY(rb_mu) = false;

  ~Impl() {
    if (opts != nullptr) natsOptions_Destroy(opts);
  }

  // io thread only.
  natsSubscription* sub = nullptr;
  std::unordered_map<uint64_t, PublishCallback> pending;
  std::vector<Deadlines> deadlines;
  size_t queued = 0;
  uint64_t next_id = 1;
  bool timer_set = false;
  bool closed = false;

  // Every completion runs here, on the io thread, so erasing from `pending` decides
  // between the PubAck, the deadline, a disconnect and the synchronous failure path.
  void complete(uint64_t id, const Status& s, const PubAck& ack) {
    auto it = pending.find(id);
    if (it == pending.end()) return;  // already completed (late PubAck after a timeout)
    PublishCallback done = std::move(it->second);
    pending.erase(it);
    pending_count.store(pending.size(), std::memory_order_relaxed);
    done(s, ack);
  }

  void fail_all(const Status& why) {
    std::unordered_map<uint64_t, PublishCallback> failed;
    failed.swap(pending);
    pending_count.store(0, std::memory_order_relaxed);
    for (auto& [id, done] : failed) done(why, PubAck{});
  }

  void on_reply(natsMsg* msg) {
    std::string_view subj = natsMsg_GetSubject(msg);
    const uint64_t id = inbox_id(subj, inbox_prefix);
    Status status;
    PubAck ack;
    if (pending.count(id)) status = puback_status(msg, &ack);
    free_nats_msg(msg);
    complete(id, status, ack);
  }

  // After every read event: the PubAcks cnats parsed into the inbox's queue.
  void drain() {
    if (!sub) return;
    for (;;) {
      int msgs = 0, bytes = 0;
      // GetPending first: NextMsg on an empty queue would set cnats' error stack.
      if (natsSubscription_GetPending(sub, &msgs, &bytes) != NATS_OK || msgs <= 0) return;
      natsMsg* m = nullptr;
      if (natsSubscription_NextMsg(&m, sub, 0) != NATS_OK || m == nullptr) return;
      on_reply(m);
    }
  }

  void arm_timer() {
    if (timer_set || queued == 0) return;
    timer_set = true;
    loop->set_timer(kTick, [self = shared_from_this()] {
      self->timer_set = false;
      self->sweep();
    });
  }

  void sweep() {
    auto now = Clock::now();
    std::vector<uint64_t> expired;
    for (auto& d : deadlines) {
      while (!d.fifo.empty()) {
        auto [deadline, id] = d.fifo.front();
        if (pending.count(id) && deadline > now) break;
        if (pending.count(id)) expired.push_back(id);
        d.fifo.pop_front();
        --queued;
      }
    }
    for (uint64_t id : expired) {
      complete(id, Status::timeout(std::string("JetStream did not acknowledge in time") + kMayBeStored), PubAck{});
    }
    arm_timer();
  }

  void set_connected(bool up, const std::string& why = {}) {
    bool was = connected.exchange(up);
    if (!up) {
      // Fail what is in flight on the io thread (a publish made before this runs is in
      // the map and fails with the rest; one made after sees connected == false).
      loop->post([self = shared_from_this()] {
        self->fail_all(Status::unavailable(std::string("NATS connection lost") + kMayBeStored));
      });
    }
    if (was != up) {
      if (up) log::info("nats connected", {{"url", url}, {"connection", label}});
      else if (closing.load(std::memory_order_acquire))
        log::info("nats connection closed", {{"url", url}, {"connection", label}});
      else log::warn("nats disconnected", {{"url", url}, {"connection", label}, {"reason", why}});
    }
    if (hooks.on_connection) hooks.on_connection(up);
  }

  static std::shared_ptr<natsConnection> share(natsConnection* c) {
    return {c, [](natsConnection* x) { natsConnection_Destroy(x); }};
  }

  // cnats' closed callback when the drop was not ours: connect again on another thread.
  void start_rebuild() {
    MutexLock lock(rb_mu);
    if (rb_stop) return;
    if (rebuilder.joinable()) rebuilder.join();  // the last one ended with its install post
    rebuilder = std::thread([self = shared_from_this()] { self->rebuild(); });
  }

  void stop_rebuild() {
    std::thread t;
    {
      MutexLock lock(rb_mu);
      rb_stop = true;
      t = std::move(rebuilder);
    }
    rb_cv.notify_all();
    if (t.joinable()) t.join();  // at most one connect's timeout (2 s)
  }

  void rebuild() {
    for (uint64_t attempt = 1;; ++attempt) {
      {
        UniqueLock lock(rb_mu);
        lock.wait_for(rb_cv, reconnect_wait, [&]() REQUIRES(rb_mu) { return rb_stop; });
        if (rb_stop) return;
      }
      closed_cb.store(false, std::memory_order_release);
      natsConnection* fresh = nullptr;
      natsStatus s = natsConnection_Connect(&fresh, opts);
      if (s == NATS_OK) {
        loop->post([self = shared_from_this(), fresh] { self->install(fresh); });
        return;
      }
      // The first failure of an outage, then one in 40 (every ~10 s at the default wait).
      if (attempt % 40 == 1) {
        log::warn("nats connect failed; trying again", {{"url", url},
                                                        {"connection", label},
                                                        {"attempt", std::to_string(attempt)},
                                                        {"error", natsStatus_GetText(s)}});
      }
    }
  }

  // io thread: the new connection replaces the closed one. Held acks leave on it (an ack
  // is a publish to its reply subject, good on any connection); the consumers subscribe
  // again when told (hooks.on_connection, posted), and the old connection is let go after
  // that (a second post runs after theirs).
  void install(natsConnection* fresh) {
    loop->release_acks();
    if (sub != nullptr) {
      natsSubscription_Destroy(sub);
      sub = nullptr;
    }
    if (conn) retired.push_back(std::move(conn));
    conn = share(fresh);
    nc = fresh;
    if (closed) return;  // shutting down: the destructor closes it
    natsStatus s = natsConnection_SubscribeSync(&sub, nc, (inbox_prefix + "*").c_str());
    if (s == NATS_OK) s = natsSubscription_SetPendingLimits(sub, -1, -1);
    if (s != NATS_OK) {
      log::error("nats publish inbox not subscribed on the new connection",
                 {{"url", url}, {"connection", label}, {"error", natsStatus_GetText(s)}});
      if (sub != nullptr) natsSubscription_Destroy(sub), sub = nullptr;
      natsConnection_Close(nc);  // closed: rebuilt again
      return;
    }
    set_connected(true);
    loop->post([self = shared_from_this()] { self->retired.clear(); });
  }
};

Result<std::unique_ptr<LoopPublisher>> LoopPublisher::connect(IoLoop& io, const BusOptions& options,
                                                              const std::string& label, LoopHooks hooks) {
  std::unique_ptr<LoopPublisher> lp(new LoopPublisher());
  auto impl = std::make_shared<Impl>();
  lp->impl_ = impl;
  impl->url = redact_urls(options.url);
  impl->label = label;
  impl->hooks = std::move(hooks);
  impl->loop = std::make_unique<NatsLoop>(io);
  natsOptions* opts = nullptr;
  if (natsOptions_Create(&opts) != NATS_OK) return Status::internal("cannot create NATS options");
  if (Status s = set_connection_options(opts, options, options.name + "-" + label); !s) {
    natsOptions_Destroy(opts);
    return s;
  }
  // One read fetches a whole burst of PubAcks.
  natsOptions_SetIOBufSize(opts, 256 * 1024);
  Impl* raw = impl.get();
  impl->loop->configure(opts, [raw] {
    raw->drain();
    if (raw->hooks.after_read) raw->hooks.after_read();
  });
  natsOptions_SetDisconnectedCB(
      opts,
      [](natsConnection* nc, void* c) { static_cast<Impl*>(c)->set_connected(false, nats_disconnect_reason(nc)); },
      raw);
  // Never reconnected by cnats: rebuilt (ADR 0287). A drop closes the connection; its
  // closed callback starts the rebuild unless weir is closing it.
  natsOptions_SetAllowReconnect(opts, false);
  natsOptions_SetClosedCB(
      opts,
      [](natsConnection*, void* c) {
        auto* i = static_cast<Impl*>(c);
        if (i->connected.load(std::memory_order_acquire)) i->set_connected(false, "connection closed");
        if (!i->closing.load(std::memory_order_acquire)) i->start_rebuild();
        i->closed_cb.store(true, std::memory_order_release);
      },
      raw);
  impl->opts = opts;
  impl->reconnect_wait = options.reconnect_wait;
  natsStatus s = natsConnection_Connect(&impl->nc, opts);
  if (s != NATS_OK) {
    impl->nc = nullptr;
    return nats_status(s, "connect to " + options.url + " (" + label + ")");
  }
  impl->conn = Impl::share(impl->nc);
  natsInbox* ib = nullptr;
  natsInbox_Create(&ib);
  impl->inbox_prefix = std::string(static_cast<const char*>(ib)) + ".";
  natsInbox_Destroy(ib);
  // The subscription lives on the io thread (it is drained there); subscribing does not
  // block (the SUB goes out with the next flush).
  impl->loop->run_sync([&] {
    s = natsConnection_SubscribeSync(&impl->sub, impl->nc, (impl->inbox_prefix + "*").c_str());
    if (s == NATS_OK) natsSubscription_SetPendingLimits(impl->sub, -1, -1);
  });
  if (s != NATS_OK) return nats_status(s, "subscribe to the " + label + " publish inbox");
  impl->connected.store(true);
  return lp;
}

LoopPublisher::~LoopPublisher() {
  if (!impl_) return;
  shutdown();
  auto& i = *impl_;
  // No rebuild from here on; one under way ends (its install, if it connected, runs
  // before the run_sync below and leaves the new connection to be closed here).
  i.closing.store(true, std::memory_order_release);
  i.stop_rebuild();
  i.loop->run_sync([] {});
  if (i.nc) {
    i.loop->release_acks();  // the consumers' held acks leave before the connection closes
    i.loop->run_sync([&] {
      if (i.sub) {
        natsSubscription_Unsubscribe(i.sub);
        natsSubscription_Destroy(i.sub);
        i.sub = nullptr;
      }
    });
    // Not on the io thread: Close may wait for cnats' threads. It detaches (a post);
    // cnats' closed callback follows on its own thread (not for one closed already).
    const bool open = natsConnection_Status(i.nc) != NATS_CONN_STATUS_CLOSED;
    if (open) i.closed_cb.store(false, std::memory_order_release);
    natsConnection_Close(i.nc);
    for (int n = 0; open && n < 2000 && !i.closed_cb.load(std::memory_order_acquire); ++n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // After the posted detach: no io-thread handler uses the connection any more. What
    // still holds a message read on it frees it last (BusMessage).
    i.loop->run_sync([&] {
      i.retired.clear();
      i.conn.reset();
    });
    i.nc = nullptr;
  }
  i.loop.reset();
}

NatsLoop& LoopPublisher::loop() { return *impl_->loop; }
natsConnection* LoopPublisher::connection() { return impl_->nc; }
const std::shared_ptr<natsConnection>& LoopPublisher::connection_ref() { return impl_->conn; }

bool LoopPublisher::in_loop_thread() const { return impl_->loop->in_loop_thread(); }
bool LoopPublisher::connected() const { return impl_->connected.load(std::memory_order_acquire); }
size_t LoopPublisher::pending() const { return impl_->pending_count.load(std::memory_order_relaxed); }

void LoopPublisher::publish(std::string_view subject, std::string_view data, const Headers& headers,
                            std::chrono::milliseconds timeout, PublishCallback done) {
  auto& i = *impl_;
  if (i.closed || !i.connected.load(std::memory_order_acquire) || !i.sub) {
    done(Status::unavailable(i.closed ? "weir is shutting down" : "NATS is not connected"), PubAck{});
    return;
  }
  uint64_t id = i.next_id++;
  i.pending.emplace(id, std::move(done));
  i.pending_count.store(i.pending.size(), std::memory_order_relaxed);
  auto q = std::find_if(i.deadlines.begin(), i.deadlines.end(),
                        [&](const Impl::Deadlines& d) { return d.timeout == timeout; });
  if (q == i.deadlines.end()) q = i.deadlines.insert(i.deadlines.end(), Impl::Deadlines{timeout, {}});
  q->fifo.emplace_back(Impl::Clock::now() + timeout, id);
  ++i.queued;
  i.arm_timer();

  char reply[96];
  std::snprintf(reply, sizeof reply, "%s%llu", i.inbox_prefix.c_str(), static_cast<unsigned long long>(id));
  std::string subj(subject);
  natsMsg* msg = nullptr;
  natsStatus s = make_stamped_msg(&msg, subj.c_str(), reply, data, headers);
  // Buffered: the loop's flush handler writes this turn's publishes at once.
  if (s == NATS_OK) s = natsConnection_PublishMsg(i.nc, msg);
  free_nats_msg(msg);
  if (s != NATS_OK) i.complete(id, nats_publish_status(s, i.nc, data.size()), PubAck{});
}

void LoopPublisher::fail_pending(const std::string& why) {
  impl_->loop->run_sync([&] { impl_->fail_all(Status::unavailable(why + kMayBeStored)); });
}

void LoopPublisher::shutdown() {
  // No new connection from here on: a rebuild under way ends after its current attempt
  // (the destructor waits for it), while the rest of weir stops.
  {
    MutexLock lock(impl_->rb_mu);
    impl_->rb_stop = true;
  }
  impl_->rb_cv.notify_all();
  impl_->loop->run_sync([&] {
    impl_->closed = true;
    impl_->fail_all(Status::unavailable(std::string("weir is shutting down") + kMayBeStored));
  });
}

}  // namespace weir
