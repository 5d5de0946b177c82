// PullConsumer: a durable pull consumer's requests, receipts and ticks, on a delivery loop
// or on the Bus's threaded connection. State: pull_consumer_impl.h.
#include <nats/nats.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/base/log.h"
#include "runtime/nats/body_sum.h"
#include "runtime/nats/nats_msg.h"
#include "runtime/nats/nats_status.h"
#include "runtime/nats/pull_consumer_impl.h"

namespace weir {

std::vector<uint64_t> PullConsumer::Impl::plan(Clock::time_point now) {
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

int64_t PullConsumer::Impl::request_bytes() const {
  int64_t peers = 1;
  if (flow_loop != nullptr) {
    peers = static_cast<int64_t>(flow_loop->consumers.size());
  } else if (pool_consumers != nullptr) {
    peers = pool_consumers->load();
  }
  const int64_t in_flight = batch > 0 ? std::max(1, window / batch) : 1;
  int64_t max_payload = nc != nullptr ? natsConnection_GetMaxPayload(nc) : 0;
  if (max_payload <= 0) max_payload = int64_t{1} << 20;  // nats-server's default
  const int64_t share = kPullBytesBudget / std::max<int64_t>(1, peers) / in_flight;
  return std::max(share, max_payload + kMessageAllowance);
}

void PullConsumer::Impl::send(const std::vector<uint64_t>& ids, int n, int64_t max_bytes) {
  if (ids.empty()) return;
  // The server ends a request a little before `expires` so its 408 arrives in time (as
  // cnats' own fetch does).
  const auto exp_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(expires - std::chrono::milliseconds(10))
                          .count();
  char body[128];
  std::snprintf(body, sizeof body, "{\"batch\":%d,\"expires\":%lld,\"max_bytes\":%lld}", n,
                static_cast<long long>(exp_ns), static_cast<long long>(max_bytes));
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

void PullConsumer::Impl::request(Clock::time_point now) {
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
  int64_t max_bytes = 0;
  {
    MutexLock lock(mu);
    ids = plan(now);
    n = batch;
    if (!ids.empty()) max_bytes = request_bytes();
  }
  send(ids, n, max_bytes);
}

void PullConsumer::Impl::end_request(uint64_t id, int64_t left) {
  auto it = std::find_if(requests.begin(), requests.end(), [&](const Request& r) { return r.id == id; });
  if (it == requests.end()) return;  // filled already (or forgotten at a reconnect)
  if (left < 0) left = it->remaining;
  requests.erase(it);
  outstanding = std::max<int64_t>(0, outstanding - left);
}

void PullConsumer::Impl::answered() {
  if (error) {
    error = false;
    log::info("pull requests answered again", {{"consumer", durable}});
  }
  healthy = true;
  last_answer = Clock::now();
}

std::string PullConsumer::Impl::describe(Clock::time_point now) const {
  auto age = [&](Clock::time_point t) {
    if (t == Clock::time_point{}) return std::string("never");
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count()) + "ms";
  };
  return "window=" + std::to_string(window) + " batch=" + std::to_string(batch) +
         " in_hand=" + std::to_string(in_hand) + " outstanding=" + std::to_string(outstanding) +
         " requests=" + std::to_string(requests.size()) + " healthy=" + (healthy.load() ? "1" : "0") +
         " link=" + (link_up() ? "up" : "down") + " last_message=" + age(last_message) +
         " last_answer=" + age(last_answer) + " last_release=" + age(last_release) + " last_info=" + age(last_info_at) +
         (last_info.empty() ? "" : " (" + last_info + ")");
}

void PullConsumer::Impl::on_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  static_cast<Impl*>(closure)->receive(msg);
}

// A delivery whose body does not match its Weir-Sum (docs/adr/0286-body-checksums.md):
// never handed to the stage, never acked; naked, so JetStream redelivers the stored
// original. The redelivery this causes is not counted against the event (set_uncounted).
// A copy cut by a reconnect is refused once and the redelivery is intact; a message stored
// with a wrong Weir-Sum (published by someone else) is refused every time: the delay
// doubles up to ~51 s and the log says so at the 1st, 2nd, 4th, 8th … refusal.
void PullConsumer::Impl::refuse(BusMessage& m, uint32_t refusals) {
  if (corrupt_metric != nullptr) corrupt_metric->fetch_add(1, std::memory_order_relaxed);
  if ((refusals & (refusals - 1)) == 0) {
    log::warn("delivery refused: its body does not match its checksum; the stored event is redelivered",
              {{"consumer", durable},
               {"stream_sequence", std::to_string(m.stream_sequence())},
               {"refusals", std::to_string(refusals)}});
  }
  m.nak(kRefusedRetry * (1 << std::min<uint32_t>(refusals - 1, 8)));
}

void PullConsumer::Impl::drain() {
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

// A JetStream delivery: handed to the handler, or refused (refuse()).
bool PullConsumer::Impl::take(natsMsg* msg) {
  auto m = loop != nullptr ? std::make_unique<BusMessage>(msg, nc, &loop->loop(), loop->connection_ref())
                           : std::make_unique<BusMessage>(msg, nc);
  const bool broken = check_body_sum(msg) == BodySum::kBroken;
  const uint64_t seq = m->stream_sequence();
  uint32_t refusals = 1;  // of this sequence, this one included
  uint64_t not_counted = 0;
  {
    MutexLock lock(mu);
    suspect.reset();
    check_every = starve_check;
    outstanding = std::max<int64_t>(0, outstanding - 1);
    if (!requests.empty() && --requests.front().remaining <= 0) requests.pop_front();
    answered();
    last_message = last_answer;
    if (broken) {
      if (auto r = refused.find(seq); r != refused.end()) refusals = ++r->second;
      else if (refused.size() < kRefusedCapacity) refused.emplace(seq, 1);
    } else {
      ++in_hand;
      if (auto r = refused.find(seq); r != refused.end()) {
        not_counted = r->second;
        refused.erase(r);
      }
      not_counted += lost_with_drops(*m, not_counted);
    }
  }
  if (broken) {
    refuse(*m, refusals);
    return false;
  }
  // JetStream's count, less what is known not to count, and never more than one above the
  // last delivery this consumer was handed (docs/adr/0292-deliveries-weir-was-handed.md).
  const uint64_t delivered = m->deliveries();
  const uint64_t counted = ledger->hand(seq, delivered > not_counted ? delivered - not_counted : 1,
                                        deliveries_possible(*m));
  if (counted < delivered) m->set_uncounted(static_cast<uint32_t>(std::min<uint64_t>(delivered - counted, UINT32_MAX)));
  m->set_ledger(ledger);
  handler(std::move(m));
  return true;
}

bool PullConsumer::Impl::receive(natsMsg* msg) {
  const char* reply = natsMsg_GetReply(msg);
  if (reply != nullptr && std::strncmp(reply, "$JS.ACK.", 8) == 0) return take(msg);
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
  // request expired, 409 ended by the server (max waiting, consumer deleted, …). A 409
  // "Message Size Exceeds MaxBytes" ends a request whose bytes (max_bytes) the next
  // message does not fit: an answer like a 408, not an error; the next request (at once)
  // fits at least one message of max_payload (request_bytes()).
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
  bool recreate = false;
  {
    MutexLock lock(mu);
    end_request(id, left);
    if (code == "404" || code == "408" || (code == "409" && why == "Message Size Exceeds MaxBytes")) {
      answered();
    } else if (code == "503" && recreate_forgotten()) {  // no responders: no such durable
      recreate = true;
      retry_at = Clock::now() + kRetryAfter;
      healthy = false;
    } else {
      retry_at = Clock::now() + kRetryAfter;
      healthy = false;
      if (!error) {
        error = true;
        log::warn("pull request refused", {{"consumer", durable}, {"status", code}, {"error", why}});
      }
    }
  }
  if (recreate) send_watch();
  request();
  return false;
}

void PullConsumer::Impl::tick(Clock::time_point now) {
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
  if (on_tick) on_tick();
}

// A loop consumer's subscription on its loop's connection, on the loop thread: at start,
// and again on every new connection (a dropped loop connection is replaced, not
// reconnected: docs/adr/0287-rebuilt-loop-connections.md). While the loop is not connected
// there is nothing to subscribe on: the next connection does it.
Status PullConsumer::Impl::subscribe_on_loop() {
  if (sub != nullptr) {
    natsSubscription_Destroy(sub);  // of the connection replaced: closed, nothing to send
    sub = nullptr;
  }
  nc = loop->connection();
  natsStatus s = natsConnection_SubscribeSync(&sub, nc, (inbox_prefix + "*").c_str());
  if (s == NATS_OK) s = natsSubscription_SetPendingLimits(sub, -1, -1);
  if (s == NATS_OK) return Status::ok();
  if (sub != nullptr) natsSubscription_Destroy(sub), sub = nullptr;
  if (!loop->connected()) return Status::ok();
  return nats_status(s, "subscribe consumer " + durable);
}

// docs/adr/0292-deliveries-weir-was-handed.md: a message this consumer was never handed can
// have failed in another process (one that crashed on it, or a peer's) once per AckWait
// since it was stored at most: a process that crashed never acked nor naked it, so the
// server sent it again only after AckWait. JetStream's count above that is the server's
// own (2.9.10 raises the count of a redelivery it could not send, again and again).
uint64_t PullConsumer::Impl::deliveries_possible(const BusMessage& m) const {
  const uint64_t stored = m.stored_ns();
  // Stored after this consumer was made, and no other process reads the durable: every
  // delivery of it went to this consumer, and one it was never handed (the ledger does not
  // know it and never forgot it) never failed: what JetStream counts is the server's own
  // (docs/adr/0319-first-delivery-of-a-message-stored-while-running.md).
  if (only_reader && stored > made_ns + kClockMarginNs && !ledger->forgot(m.stream_sequence())) return 1;
  const auto wait_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(ack_wait).count());
  if (stored == 0 || wait_ns == 0) return UINT64_MAX;
  const uint64_t now = wall_ns();
  return 1 + (now > stored ? (now - stored) / wait_ns : 0);
}

// docs/adr/0289-deliveries-lost-with-a-connection.md: each drop since the message was
// stored may have cost it one delivery; at most all but the one in hand.
uint64_t PullConsumer::Impl::lost_with_drops(const BusMessage& m, uint64_t not_counted) const {
  const uint64_t stored = m.stored_ns();
  if (drops_ns.empty() || stored == 0 || drops_ns.back() < stored) return 0;
  const uint64_t delivered = m.deliveries();  // JetStream's count (nothing discounted yet)
  if (delivered <= 1 + not_counted) return 0;
  const auto after = std::upper_bound(drops_ns.begin(), drops_ns.end(), stored);
  const auto drops = static_cast<uint64_t>(drops_ns.end() - after);
  return std::min(drops, delivered - 1 - not_counted);
}

void PullConsumer::Impl::connection(bool up) {
  bool check = false;
  {
    MutexLock lock(mu);
    if (stopped) return;
    if (!up) {
      drops_ns.push_back(wall_ns());
      if (drops_ns.size() > kMostDrops) drops_ns.pop_front();
    }
    // The server drops a client's waiting requests with its connection: start afresh.
    requests.clear();
    outstanding = 0;
    retry_at = {};
    kick_sent = false;
    if (up) {
      error = false;
      healthy = true;  // re-requested below; an error answer comes back at once
      // A server that restarted has forgotten a durable kept in its memory, and ignores
      // requests for it: ask whether it is there (ADR 0320).
      if (memory_state && starve_check.count() > 0) {
        verify_at = Clock::now();
        if (watch == Watch::kIdle) {
          watch = Watch::kInfo;
          check = true;
        }
      }
    } else {
      healthy = false;
    }
  }
  if (up && loop != nullptr && (sub == nullptr || nc != loop->connection())) {
    if (Status st = subscribe_on_loop(); !st) log::error("consumer not subscribed", {{"error", st.str()}});
  }
  if (up) {
    if (check) send_watch();
    request();
    do_kick();  // what waited for the connection (held messages) runs again
  }
}

void PullConsumer::Impl::do_kick() {
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

void PullConsumer::Impl::on_complete(void* closure) {
  auto* self = static_cast<Impl*>(closure);
  MutexLock lock(self->mu);
  self->complete = true;
  self->complete_cv.notify_all();
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

void PullConsumer::post(std::function<void()> fn) {
  if (impl_->loop != nullptr) {
    impl_->loop->loop().post(std::move(fn));
  } else {
    fn();
  }
}

Status PullConsumer::start(Handler handler) {
  Impl& c = *impl_;
  c.handler = std::move(handler);
  if (c.loop != nullptr) {
    // A sync subscription on the loop's connection, drained by the loop after each read
    // event; subscribing does not block (the SUB leaves with the next flush).
    Status s;
    c.loop->loop().run_sync([&] {
      s = c.subscribe_on_loop();
      if (!s) return;
      c.healthy = c.sub != nullptr;
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
    return s;
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

}  // namespace weir
