// PullConsumer (runtime/nats/bus.h; docs/adr/0150-stages-without-threads.md) against a real
// nats-server: its own pull requests within a window, acks written to the reply subject,
// the delivery metadata read from it, recovery after a server restart, acks after the
// consumer is gone, and no thread per consumer; the same on the flow loop (ADR 0220);
// deliveries refused by their body checksum (ADR 0286).
#include <catch2/catch.hpp>

#include <dirent.h>
#include <nats/nats.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/crc32c.h"
#include "runtime/nats/bus.h"
#include "tests/support/harness.h"
#include "tests/support/nats_conn.h"
#include "tests/support/support.h"

using namespace weir;
using namespace weir::testing;

namespace {

// Messages a handler received, for the test thread to take.
struct Inbox {
  std::mutex mu;
  std::deque<std::unique_ptr<BusMessage>> msgs;
  std::atomic<int> received{0};
  std::atomic<int> kicks{0};
  PullConsumer::Handler handler() {
    return [this](std::unique_ptr<BusMessage> m) {
      if (!m) {
        ++kicks;
        return;
      }
      ++received;
      std::lock_guard lock(mu);
      msgs.push_back(std::move(m));
    };
  }
  std::unique_ptr<BusMessage> take() {
    std::lock_guard lock(mu);
    if (msgs.empty()) return nullptr;
    auto m = std::move(msgs.front());
    msgs.pop_front();
    return m;
  }
  size_t size() {
    std::lock_guard lock(mu);
    return msgs.size();
  }
  // What is in hand now, and nothing that arrives while the caller acks or releases it
  // (a release requests more; under load its answers come before the loop ends).
  std::deque<std::unique_ptr<BusMessage>> take_held() {
    std::lock_guard lock(mu);
    return std::exchange(msgs, {});
  }
};

std::unique_ptr<Bus> connect(const NatsServer& nats, std::chrono::milliseconds ack_delay = BusOptions{}.ack_delay) {
  BusOptions o;
  o.url = nats.url();
  o.ack_delay = ack_delay;
  o.name = "pull-consumer-test";
  // Small streams: fifty of the default 1 GiB reserve more than the server's storage share
  // of a fuller disk (it failed at the 47th with 63 GB free).
  o.stream_max_bytes = 1 << 20;
  auto bus = Bus::connect(o);
  REQUIRE(bus);
  return std::move(bus.value());
}

void publish(Bus& bus, const std::string& subject, int n, int from = 0) {
  std::atomic<int> done{0}, ok{0};
  for (int i = from; i < from + n; ++i) {
    std::string id = "e" + std::to_string(i);
    bus.publish(subject, "{\"i\":" + std::to_string(i) + "}", {{layout::kHeaderId, id}, {layout::kHeaderMsgId, id}},
                std::chrono::seconds(5), [&](const Status& s, const PubAck&) {
                  if (s) ++ok;
                  ++done;
                });
  }
  REQUIRE(wait_until([&] { return done.load() == n; }, 10s));
  REQUIRE(ok.load() == n);
}

ConsumerOptions consumer_options(const std::string& durable) {
  ConsumerOptions co;
  co.stream = layout::flow_stream("pc");
  co.durable = durable;
  co.filter_subject = layout::input_subject("pc");
  co.ack_wait = std::chrono::seconds(30);
  co.request_expires = std::chrono::milliseconds(500);
  return co;
}

// The durable "pc" consumer, subscribed (window 0: nothing requested yet).
std::unique_ptr<PullConsumer> started(Bus& bus, Inbox& inbox) {
  auto c = bus.pull_consumer(consumer_options("pc"));
  REQUIRE(c);
  REQUIRE(c.value()->start(inbox.handler()));
  return std::move(c.value());
}

// Nothing is left for the durable of `co` (default "pc"): a fresh (pool) consumer of it
// gets no message.
void expect_none_left(Bus& bus, ConsumerOptions co = consumer_options("pc")) {
  co.loop = ConsumerLoop::kNone;
  Inbox late;
  auto again = bus.pull_consumer(co);
  REQUIRE(again);
  REQUIRE(again.value()->start(late.handler()));
  again.value()->set_window(10, 10);
  std::this_thread::sleep_for(700ms);  // an absence: longer than one request's expiry
  CHECK(late.received.load() == 0);
  CHECK(again.value()->healthy());  // the server answered (408): nothing to deliver
}

size_t threads() {
  size_t n = 0;
  DIR* d = opendir("/proc/self/task");
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

// ---- the flow loop (ConsumerOptions::loop; docs/adr/0220-flow-stage-on-a-loop.md) ----

std::string thread_name() {
  char name[32] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return name;
}

// What a loop consumer's handler saw. Acks (when `ack`) in the handler, on the loop thread.
// The durable's info from the server, as JSON (a plain request, off every consumer thread).
nlohmann::json consumer_info(Bus& bus, const std::string& stream, const std::string& durable) {
  natsMsg* reply = nullptr;
  const std::string subject = "$JS.API.CONSUMER.INFO." + stream + "." + durable;
  if (natsConnection_RequestString(&reply, bus.connection(), subject.c_str(), "", 5000) != NATS_OK) return {};
  auto j = nlohmann::json::parse(natsMsg_GetData(reply), natsMsg_GetData(reply) + natsMsg_GetDataLength(reply), nullptr,
                                 false);
  natsMsg_Destroy(reply);
  return j;
}

struct LoopInbox {
  std::mutex mu;
  std::deque<std::unique_ptr<BusMessage>> held;
  std::vector<std::string> ids;
  std::atomic<int> received{0}, bursts{0}, off_loop{0}, acked{0};
  bool ack = true;
  PullConsumer* consumer = nullptr;  // released per message when acking
  PullConsumer::Handler handler() {
    return [this](std::unique_ptr<BusMessage> m) {
      if (thread_name() != "weir-flows") ++off_loop;
      if (!m) {
        ++bursts;
        return;
      }
      ++received;
      std::lock_guard lock(mu);
      ids.emplace_back(m->header(layout::kHeaderId));
      if (ack) {
        if (m->ack()) ++acked;
        consumer->release(1);
      } else {
        held.push_back(std::move(m));
      }
    };
  }
};

ConsumerOptions loop_options(const std::string& flow) {
  ConsumerOptions co;
  co.stream = layout::flow_stream(flow);
  co.durable = flow;
  co.filter_subject = layout::input_subject(flow);
  co.ack_wait = std::chrono::seconds(30);
  co.request_expires = std::chrono::milliseconds(500);
  co.loop = ConsumerLoop::kFlows;
  return co;
}

std::unique_ptr<PullConsumer> started(Bus& bus, LoopInbox& inbox, const std::string& flow = "fl") {
  auto c = bus.pull_consumer(loop_options(flow));
  REQUIRE(c);
  REQUIRE(c.value()->on_loop());
  inbox.consumer = c.value().get();
  REQUIRE(c.value()->start(inbox.handler()));
  return std::move(c.value());
}

}  // namespace

TEST_CASE("pull consumer: requests within its window, acks by reply subject, reads the delivery metadata",
          "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  publish(*bus, layout::input_subject("pc"), 20);

  Inbox inbox;
  auto c = started(*bus, inbox);
  // Window 0: nothing is requested, nothing comes.
  std::this_thread::sleep_for(300ms);  // an absence: nothing to wait for
  CHECK(inbox.received.load() == 0);

  // Window 4, batch 2: at most 4 in hand while none is released.
  c->set_window(4, 2);
  REQUIRE(wait_until([&] { return inbox.received.load() == 4; }, 5s));
  std::this_thread::sleep_for(300ms);  // an absence: no fifth message while 4 are held
  CHECK(inbox.received.load() == 4);
  // Its bookkeeping, as the stall warnings log it: 4 in hand shut the window.
  const std::string held = c->state();
  INFO(held);
  CHECK(held.find("window=4 batch=2 in_hand=4 outstanding=0 requests=0") == 0);
  CHECK(held.find("last_release=never") != std::string::npos);

  auto first = inbox.take();
  CHECK(first->deliveries() == 1);
  CHECK(first->stream_sequence() == 1);
  CHECK(first->pending() == 19);  // 20 stored, this one delivered
  CHECK(first->header(layout::kHeaderId) == "e0");
  // A nak comes back with its delivery count raised; the released slots bring the rest.
  CHECK(first->nak(std::chrono::milliseconds(0)));
  c->release(1);
  std::vector<std::string> acked;
  bool redelivered = false;
  REQUIRE(wait_until(
      [&] {
        while (auto m = inbox.take()) {
          if (m->header(layout::kHeaderId) == "e0") {
            redelivered = redelivered || m->deliveries() == 2;
          }
          CHECK(m->ack());
          acked.emplace_back(m->header(layout::kHeaderId));
          c->release(1);
        }
        return acked.size() == 20;
      },
      10s));
  CHECK(redelivered);
  CHECK(c->healthy());

  // Acked means gone: a second consumer of the same durable gets nothing more.
  c->stop();
  expect_none_left(*bus);
}

TEST_CASE("pull consumer: a kick runs the handler without a message and an ack after stop() still acks",
          "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  publish(*bus, layout::input_subject("pc"), 3);
  Inbox inbox;
  auto c = started(*bus, inbox);
  c->kick();
  REQUIRE(wait_until([&] { return inbox.kicks.load() == 1; }, 5s));
  c->kick_later();  // the Bus's timer tick sends it
  REQUIRE(wait_until([&] { return inbox.kicks.load() == 2; }, 5s));

  c->set_window(3, 3);
  REQUIRE(wait_until([&] { return inbox.received.load() == 3; }, 5s));
  // The consumer (and its subscription) goes away with the messages in hand; their acks
  // need only the connection (a late ack once touched a freed subscription).
  c->stop();
  c.reset();
  while (auto m = inbox.take()) CHECK(m->ack());
  expect_none_left(*bus);  // none of the three comes back
}

TEST_CASE("pull consumer: after a nats-server restart it requests again at once", "[integration][bus][faults]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  Inbox inbox;
  auto c = started(*bus, inbox);
  c->set_window(8, 4);
  REQUIRE(c->healthy());

  nats.stop();
  REQUIRE(wait_until([&] { return !bus->connected(); }, 10s));
  CHECK_FALSE(c->healthy());
  nats.start();
  REQUIRE(wait_until([&] { return bus->connected(); }, 20s));
  // Requests sent at the reconnect deliver what is published afterwards.
  publish(*bus, layout::input_subject("pc"), 5);
  REQUIRE(wait_until([&] { return inbox.received.load() == 5; }, 10s));
  CHECK(c->healthy());
  while (auto m = inbox.take()) {
    CHECK(m->ack());
    c->release(1);
  }
}

TEST_CASE("pull consumer: fifty consumers add no thread beyond the delivery pool", "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  // cnats starts the pool's workers as subscriptions arrive, up to nats.delivery_threads.
  const size_t pool = static_cast<size_t>(bus->options().delivery_threads);
  const size_t idle = threads();
  std::vector<std::unique_ptr<PullConsumer>> consumers;
  std::vector<std::unique_ptr<Inbox>> inboxes;
  auto add = [&](int i) {
    const std::string flow = "pc" + std::to_string(i);
    REQUIRE(bus->ensure_flow_stream(flow));
    ConsumerOptions co = consumer_options(flow);
    co.stream = layout::flow_stream(flow);
    co.filter_subject = layout::input_subject(flow);
    auto c = bus->pull_consumer(co);
    REQUIRE(c);
    inboxes.push_back(std::make_unique<Inbox>());
    REQUIRE(c.value()->start(inboxes.back()->handler()));
    c.value()->set_window(2, 1);
    consumers.push_back(std::move(c.value()));
  };
  add(0);
  const size_t with_one = threads();
  for (int i = 1; i < 50; ++i) add(i);
  INFO("threads: " << idle << " connected, " << with_one << " with one consumer, " << threads() << " with fifty");
  CHECK(threads() <= idle + pool);  // fifty subscriptions, at most `pool` more threads
  CHECK(threads() <= with_one + pool);
  // And each of them works: every consumer gets the one event of its flow.
  for (int i = 0; i < 50; ++i) publish(*bus, layout::input_subject("pc" + std::to_string(i)), 1, i);
  REQUIRE(wait_until(
      [&] {
        for (auto& in : inboxes) {
          if (in->received.load() != 1) return false;
        }
        return true;
      },
      10s));
  for (auto& c : consumers) c->stop();
}

// ---- flow loop: a loop consumer's messages are handled, published from and acked on the
// one "weir-flows" thread; a read event's messages end with one burst kick; status answers
// keep it requesting; a deleted consumer is reported and recovered; a reconnect
// re-requests; stop() with messages in flight leaves no handler call behind; any number of
// loop consumers share one thread.

TEST_CASE("flow loop: messages handled, published from and acked on the weir-flows thread", "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("fl"));
  REQUIRE(bus->ensure_flow_stream("out"));
  publish(*bus, layout::input_subject("fl"), 50);

  // The handler publishes each message on (outputs) and acks it once the PubAck is in,
  // as the flow stage does; everything must happen on the loop thread.
  std::atomic<int> received{0}, bursts{0}, off_loop{0}, stored{0}, acked{0};
  std::unique_ptr<PullConsumer> c;
  std::vector<std::unique_ptr<BusMessage>> hold;  // loop thread only
  auto out = bus->pull_consumer(loop_options("fl"));
  REQUIRE(out);
  c = std::move(out.value());
  PullConsumer* pc = c.get();
  REQUIRE(c->start([&, pc](std::unique_ptr<BusMessage> m) {
    if (thread_name() != "weir-flows") ++off_loop;
    if (!m) {
      ++bursts;
      return;
    }
    ++received;
    auto msg = std::shared_ptr<BusMessage>(std::move(m));
    pc->publish(layout::input_subject("out"), msg->data(),
                {{layout::kHeaderMsgId, std::string(msg->header(layout::kHeaderId))}}, std::chrono::seconds(5),
                [&, msg, pc](const Status& s, const PubAck& a) {
                  if (thread_name() != "weir-flows") ++off_loop;
                  if (s && a.sequence > 0) ++stored;
                  if (s && msg->ack()) ++acked;
                  pc->release(1);
                });
  }));
  c->set_window(20, 10);
  REQUIRE(wait_until([&] { return acked.load() == 50; }, 10s));
  CHECK(received.load() == 50);
  CHECK(stored.load() == 50);
  CHECK(off_loop.load() == 0);
  // Read events deliver bursts: at least one kick ended them, never more than messages.
  CHECK(bursts.load() >= 1);
  CHECK(bursts.load() <= 50);
  CHECK(c->healthy());
  c->stop();
  expect_none_left(*bus, loop_options("fl"));
  // The outputs are stored once each.
  auto st = bus->stream_state(layout::flow_stream("out"));
  REQUIRE(st);
  CHECK(st.value().messages == 50);
}

TEST_CASE("flow loop: idle requests expire (408) and are renewed, a deleted consumer is reported and recovered",
          "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("fl"));
  LoopInbox inbox;
  auto c = started(*bus, inbox);
  c->set_window(4, 2);
  // Three expiries (500 ms each) with nothing to deliver: the 408s keep it healthy and
  // requesting, so a message published afterwards comes without a new set_window.
  std::this_thread::sleep_for(1600ms);  // an absence: several requests expire meanwhile
  CHECK(c->healthy());
  publish(*bus, layout::input_subject("fl"), 3);
  REQUIRE(wait_until([&] { return inbox.acked.load() == 3; }, 5s));
  // acked counts acks made; the loop holds them for its next write (ADR 0264). Deleted
  // before the server had them, the consumer created again would deliver those three once
  // more — at-least-once, but not what this test counts.
  REQUIRE(wait_until(
      [&] {
        auto info = consumer_info(*bus, layout::flow_stream("fl"), "fl");
        return info.value("num_ack_pending", -1) == 0 && info.value("num_pending", -1) == 0;
      },
      5s));

  // The server drops the consumer: its waiting requests end with 409 and the consumer is
  // unhealthy until requests are answered again.
  jsErrCode jerr = static_cast<jsErrCode>(0);
  REQUIRE(js_DeleteConsumer(bus->jetstream(), layout::flow_stream("fl").c_str(), "fl", nullptr, &jerr) == NATS_OK);
  REQUIRE(wait_until([&] { return !c->healthy(); }, 5s));
  // Created again (as a restarted stage would): the retried requests are answered.
  auto again = bus->pull_consumer(loop_options("fl"));
  REQUIRE(again);
  REQUIRE(wait_until([&] { return c->healthy(); }, 5s));
  publish(*bus, layout::input_subject("fl"), 2, 3);
  REQUIRE(wait_until([&] { return inbox.acked.load() >= 5; }, 5s));
  CHECK(inbox.acked.load() == 5);  // none of the first three again
  CHECK(inbox.off_loop.load() == 0);
  c->stop();
}

TEST_CASE("flow loop: after a nats-server restart it requests again at once", "[integration][bus][faults]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("fl"));
  LoopInbox inbox;
  auto c = started(*bus, inbox);
  c->set_window(8, 4);
  REQUIRE(c->healthy());
  nats.stop();
  REQUIRE(wait_until([&] { return !c->healthy(); }, 10s));
  nats.start();
  REQUIRE(wait_until([&] { return bus->connected() && c->healthy(); }, 20s));
  publish(*bus, layout::input_subject("fl"), 5);
  REQUIRE(wait_until([&] { return inbox.acked.load() == 5; }, 10s));
  CHECK(inbox.off_loop.load() == 0);
  c->stop();
  expect_none_left(*bus, loop_options("fl"));
}

TEST_CASE("flow loop: stop() with messages in flight, no handler call after it, late acks still ack",
          "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("fl"));
  publish(*bus, layout::input_subject("fl"), 200);
  LoopInbox inbox;
  inbox.ack = false;  // held: in flight when the consumer stops
  auto c = started(*bus, inbox);
  c->set_window(200, 50);
  REQUIRE(wait_until([&] { return inbox.received.load() >= 1; }, 5s));
  c->stop();  // while the rest of the window may still be arriving
  const int seen = inbox.received.load();
  const int bursts = inbox.bursts.load();
  c->kick();                           // a stopped consumer runs its handler no more
  std::this_thread::sleep_for(300ms);  // an absence: no call comes after stop()
  CHECK(inbox.received.load() == seen);
  CHECK(inbox.bursts.load() == bursts);
  c.reset();
  // Acked from this thread after the consumer (and its subscription) is gone: the acks
  // need only the loop's connection.
  std::deque<std::unique_ptr<BusMessage>> held;
  {
    std::lock_guard lock(inbox.mu);
    held.swap(inbox.held);
  }
  for (auto& m : held) CHECK(m->ack());
  // What was acked is gone; what arrived after stop() or was never received is delivered
  // to the next consumer (after AckWait for the former: not waited for here).
  CHECK(static_cast<int>(held.size()) == seen);
  CHECK(inbox.off_loop.load() == 0);
}

TEST_CASE("flow loop: fifty loop consumers share one thread", "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  // The streams first: set-up requests start cnats' delivery pool for the control connection.
  for (int i = 0; i < 50; ++i) REQUIRE(bus->ensure_flow_stream("fl" + std::to_string(i)));
  const size_t idle = threads();
  std::vector<std::unique_ptr<PullConsumer>> consumers;
  std::vector<std::unique_ptr<LoopInbox>> inboxes;
  auto add = [&](int i) {
    const std::string flow = "fl" + std::to_string(i);
    inboxes.push_back(std::make_unique<LoopInbox>());
    consumers.push_back(started(*bus, *inboxes.back(), flow));
    consumers.back()->set_window(2, 1);
  };
  add(0);
  const size_t with_one = threads();
  for (int i = 1; i < 50; ++i) add(i);
  INFO("threads: " << idle << " connected, " << with_one << " with one, " << threads() << " with fifty");
  CHECK(with_one <= idle + 1);   // the loop thread (its connection has no reader thread)
  CHECK(threads() <= with_one);  // and nothing per consumer
  for (int i = 0; i < 50; ++i) publish(*bus, layout::input_subject("fl" + std::to_string(i)), 1, i);
  REQUIRE(wait_until(
      [&] {
        for (auto& in : inboxes) {
          if (in->acked.load() != 1) return false;
        }
        return true;
      },
      10s));
  for (auto& in : inboxes) CHECK(in->off_loop.load() == 0);
  for (auto& c : consumers) c->stop();
}

namespace {

// The durable "pc" consumer with `ack_wait`, holding the first `window` of the 16 stored
// messages (received, neither acked nor released).
std::unique_ptr<PullConsumer> holding(Bus& bus, Inbox& inbox, std::chrono::seconds ack_wait, int window) {
  publish(bus, layout::input_subject("pc"), 16);
  ConsumerOptions co = consumer_options("pc");
  co.ack_wait = ack_wait;
  auto made = bus.pull_consumer(co);
  REQUIRE(made);
  auto c = std::move(made.value());
  REQUIRE(c->start(inbox.handler()));
  c->set_window(window, window / 2);
  REQUIRE(wait_until([&] { return inbox.received.load() == window; }, 5s));
  return c;
}

// Acks and releases whatever arrives until every id of `want` came (or `timeout`); INFO
// says what is missing and the consumer's bookkeeping.
void expect_delivered(const NatsServer& nats, Inbox& inbox, PullConsumer& c, const std::vector<std::string>& want,
                      std::chrono::milliseconds timeout) {
  std::set<std::string> ids;
  const auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& id : want) {
      if (!ids.count(id)) out.push_back(id);
    }
    return out;
  };
  const bool all = wait_until(
      [&] {
        while (auto m = inbox.take()) {
          ids.insert(std::string(m->header(layout::kHeaderId)));
          CHECK(m->ack());
          c.release(1);
        }
        return missing().empty();
      },
      timeout);
  std::string missed;
  for (const auto& id : missing()) missed += " " + id;
  INFO("consumer: " << c.state() << "; missing " << missing().size() << " of " << want.size() << ":" << missed
                    << "\nJetStream:\n"
                    << (all ? std::string() : itest::jetstream_state(nats.monitor_port())));
  CHECK(all);
}

}  // namespace

// The rotating-fault run (tests/integration/fault_rotation_test.cc; the sink consumer
// stopped delivering with pending messages and waiting requests): messages held past AckWait
// are due for redelivery when their acks come (weir frozen, a slow sink); on a work-queue
// stream those acks delete them while the server may still hold them for redelivery. The
// consumer must go on delivering both what was due and what is published afterwards.
TEST_CASE("pull consumer: acks that come after AckWait do not stall the consumer", "[integration][bus][faults]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  Inbox inbox;
  auto c = holding(*bus, inbox, std::chrono::seconds(1), 8);
  // Held past AckWait: the server takes the 8 as unacknowledged and would redeliver them.
  std::this_thread::sleep_for(1500ms);  // the condition is elapsed time itself (AckWait)
  for (auto& m : inbox.take_held()) {
    CHECK(m->ack());
    c->release(1);
  }
  publish(*bus, layout::input_subject("pc"), 16, 16);
  // Everything not acked yet arrives: 8 + 16 new (redeliveries of acked ones may come too),
  // within the starvation watch's recovery if the server starved the consumer (ADR 0235:
  // ~21 s for entries due for redelivery), with room for a loaded machine. Only the 8 held
  // were acked above: the releases' requests bring e8.. while that loop runs, and a loop
  // that took from the inbox until it was empty acked them unseen.
  std::vector<std::string> want;
  for (int i = 8; i < 32; ++i) want.push_back("e" + std::to_string(i));
  expect_delivered(nats, inbox, *c, want, 45s);
}

// The rotating-fault run's loss after a nats-server SIGTERM and restart: messages naked
// with a delay (a failing sink's backoff) wait on the server across its restart; they and
// everything published after it must still be delivered.
TEST_CASE("pull consumer: naked messages and new ones are delivered after a nats-server restart",
          "[integration][bus][faults]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  Inbox inbox;
  auto c = holding(*bus, inbox, std::chrono::seconds(2), 16);
  int n = 0;
  for (auto& m : inbox.take_held()) {
    // Half acked, half naked with a backoff (as the sink stage after failed deliveries).
    CHECK((n++ % 2 == 0 ? m->ack() : m->nak(std::chrono::milliseconds(1500))));
    c->release(1);
  }
  SECTION("SIGTERM") { nats.stop(); }
  SECTION("kill -9") { nats.kill(); }
  REQUIRE(wait_until([&] { return !bus->connected(); }, 10s));
  nats.start();
  REQUIRE(wait_until([&] { return bus->connected(); }, 20s));
  publish(*bus, layout::input_subject("pc"), 16, 16);
  std::vector<std::string> want;  // the naked odd ones and the 16 new
  for (int i = 1; i < 32; ++i) {
    if (i >= 16 || i % 2 == 1) want.push_back("e" + std::to_string(i));
  }
  expect_delivered(nats, inbox, *c, want, 20s);
}

namespace {

// nats-server 2.9.10's file for a durable's state (delivered, ack floor, pending).
std::string consumer_state_file(const NatsServer& nats, const std::string& stream, const std::string& durable) {
  return nats.store_dir() + "/jetstream/$G/streams/" + stream + "/obs/" + durable + "/o.dat";
}

}  // namespace

// docs/adr/0320-consumer-state-in-memory.md: on one server a durable's state stays in the
// server's memory (no state file rewritten for it); a restarted server has forgotten the
// durable and the consumer creates it again at once. What the stream still holds comes
// again — the messages held unacked across the restart, and new ones — and nothing that
// was acked before the (clean) restart.
TEST_CASE("pull consumer: on one server the durable's state is in memory and is created again after a restart",
          "[integration][bus][faults]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  const std::string stream = layout::flow_stream("pc");
  publish(*bus, layout::input_subject("pc"), 16);
  ConsumerOptions co = consumer_options("pc");
  std::atomic<uint64_t> recreated{0};
  co.recreated = &recreated;
  auto made = bus->pull_consumer(co);
  REQUIRE(made);
  auto c = std::move(made.value());
  Inbox inbox;
  REQUIRE(c->start(inbox.handler()));
  c->set_window(16, 8);
  REQUIRE(wait_until([&] { return inbox.received.load() == 16; }, 5s));
  std::vector<std::unique_ptr<BusMessage>> held;  // the odd ones, never acked
  while (auto m = inbox.take()) {
    if (std::stoi(std::string(m->header(layout::kHeaderId)).substr(1)) % 2 == 1) {
      held.push_back(std::move(m));
    } else {
      CHECK(m->ack());
    }
  }
  REQUIRE(wait_until([&] { return consumer_info(*bus, stream, "pc").value("num_ack_pending", -1) == 8; }, 5s));
  const auto info = consumer_info(*bus, stream, "pc");
  CHECK(info["config"].value("mem_storage", false));
  CHECK(read_file(consumer_state_file(nats, stream, "pc")).empty());

  nats.stop();
  REQUIRE(wait_until([&] { return !bus->connected(); }, 10s));
  nats.start();
  REQUIRE(wait_until([&] { return bus->connected(); }, 20s));
  c->release(static_cast<int>(held.size()));
  held.clear();  // their acks would go to the durable the server forgot
  publish(*bus, layout::input_subject("pc"), 4, 16);
  std::set<std::string> want{"e1", "e3", "e5", "e7", "e9", "e11", "e13", "e15", "e16", "e17", "e18", "e19"};
  std::set<std::string> ids;
  const bool all = wait_until(
      [&] {
        while (auto m = inbox.take()) {
          ids.insert(std::string(m->header(layout::kHeaderId)));
          CHECK(m->ack());
          c->release(1);
        }
        return ids.size() >= want.size();
      },
      10s);
  INFO("consumer: " << c->state() << "; server: " << consumer_info(*bus, stream, "pc").dump());
  CHECK(all);
  CHECK(ids == want);
  CHECK(recreated.load() == 1);
  CHECK(c->recoveries() == 1);
  CHECK(consumer_info(*bus, stream, "pc")["config"].value("mem_storage", false));
  c->stop();
}

// A durable an earlier weir made with its state in files keeps its messages when the
// state moves to memory (ADR 0320): the config is updated in place.
TEST_CASE("pull consumer: a durable with its state in files is taken over with its state in memory",
          "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  const std::string stream = layout::flow_stream("pc");
  publish(*bus, layout::input_subject("pc"), 8);
  ConsumerOptions co = consumer_options("pc");
  co.ack_wait = std::chrono::seconds(1);
  co.memory_state = false;
  {
    auto made = bus->pull_consumer(co);
    REQUIRE(made);
    Inbox inbox;
    REQUIRE(made.value()->start(inbox.handler()));
    made.value()->set_window(4, 4);
    REQUIRE(wait_until([&] { return inbox.received.load() == 4; }, 5s));
    int n = 0;
    while (auto m = inbox.take()) {
      if (n++ < 2) CHECK(m->ack());  // e0, e1 acked; e2, e3 left unacked
    }
    REQUIRE(wait_until([&] { return consumer_info(*bus, stream, "pc").value("num_ack_pending", -1) == 2; }, 5s));
    made.value()->stop();
  }
  CHECK_FALSE(consumer_info(*bus, stream, "pc")["config"].value("mem_storage", false));
  co.memory_state.reset();
  auto made = bus->pull_consumer(co);
  REQUIRE(made);
  CHECK(consumer_info(*bus, stream, "pc")["config"].value("mem_storage", false));
  Inbox inbox;
  REQUIRE(made.value()->start(inbox.handler()));
  made.value()->set_window(8, 4);
  std::vector<std::string> want{"e2", "e3", "e4", "e5", "e6", "e7"};
  expect_delivered(nats, inbox, *made.value(), want, 10s);
  made.value()->stop();
}

// The rotating-fault run's sink-side loss (docs/adr/0235-starved-consumer-recovery.md): after
// a kill -9 the consumer's stored state can be older than its stream's — acks that deleted
// messages from the work-queue stream are not in it, so the durable comes back with pending
// entries whose messages are gone. nats-server 2.9.10 re-queues them every AckWait and
// serves that queue first, one entry per wake-up of its delivery loop; with more of them
// than wake-ups per AckWait, what is behind them — new messages, or real redeliveries —
// is not delivered for minutes or never. Made deterministic here: the durable's state
// file is saved while 400 messages are pending, they are acked (and so deleted), and the
// saved state is put back while the server is stopped. e0 stays unacked: a message below
// the vanished ones keeps the stream's first sequence low, as the acked messages whose
// deletes were lost did in the failing runs (else the server drops pending entries below
// its first sequence itself).
TEST_CASE("pull consumer: a durable starved by pending entries whose messages are gone is created again",
          "[integration][bus][faults]") {
  // What is behind the gone entries: 20 messages published afterwards (the first failing
  // runs: num_pending 110), or 20 delivered before and due for redelivery (a later one:
  // num_pending 0, ack pending 328).
  bool redeliveries = false;
  SECTION("new messages") { redeliveries = false; }
  SECTION("redeliveries") { redeliveries = true; }
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  const std::string stream = layout::flow_stream("pc");
  constexpr int kGone = 400, kBehind = 20;
  const int stored = kGone + 1 + (redeliveries ? kBehind : 0);
  Inbox inbox;
  publish(*bus, layout::input_subject("pc"), stored);
  ConsumerOptions co = consumer_options("pc");
  co.ack_wait = std::chrono::seconds(1);
  co.request_expires = std::chrono::milliseconds(500);
  co.starve_check = std::chrono::seconds(2);
  co.memory_state = false;  // a state file, as on a cluster of servers (ADR 0320)
  std::atomic<uint64_t> recreated{0};
  co.recreated = &recreated;
  auto made = bus->pull_consumer(co);
  REQUIRE(made);
  auto c = std::move(made.value());
  REQUIRE(c->start(inbox.handler()));
  c->set_window(2 * stored, stored);
  REQUIRE(wait_until([&] { return inbox.received.load() >= stored; }, 10s));
  c->set_window(0, 1);  // no more requests while the server is swapped underneath

  // The state with all of them pending, as a crash would leave it.
  nats.stop();
  const std::string state_file = consumer_state_file(nats, stream, "pc");
  const std::string saved = read_file(state_file);
  REQUIRE(!saved.empty());
  nats.start();
  REQUIRE(wait_until([&] { return bus->connected(); }, 20s));
  // e1..e400 acked (deleted from the work-queue stream); e0 and the 20 behind held.
  std::vector<std::unique_ptr<BusMessage>> held;
  while (auto m = inbox.take()) {
    const std::string id(m->header(layout::kHeaderId));
    if (id == "e0" || std::stoi(id.substr(1)) > kGone) {
      held.push_back(std::move(m));
    } else {
      CHECK(m->ack());
    }
  }
  const int64_t still = stored - kGone;
  REQUIRE(wait_until([&] { return consumer_info(*bus, stream, "pc").value("num_ack_pending", -1) == still; }, 10s));
  nats.stop();
  write_file(state_file, saved);  // the consumer's state from before those acks
  nats.start();
  REQUIRE(wait_until([&] { return bus->connected(); }, 20s));
  const auto info = consumer_info(*bus, stream, "pc");
  INFO("after the restart: " << info.dump());
  REQUIRE(info.value("num_ack_pending", 0) == stored);  // the vanished 400 are pending again

  // Requests out again (e0's redeliveries are held, never acked: it stays first in the
  // stream). Past AckWait the server queues every pending entry for redelivery and starts
  // trying them (each try counts as a redelivery, delivered or not).
  c->release(stored);
  c->set_window(32, 16);
  REQUIRE(wait_until([&] { return consumer_info(*bus, stream, "pc").value("num_redelivered", 0) > 0; }, 10s));
  std::vector<std::string> want;
  if (redeliveries) {
    for (int i = kGone + 1; i < stored; ++i) want.push_back("e" + std::to_string(i));
  } else {
    publish(*bus, layout::input_subject("pc"), kBehind, stored);
    for (int i = stored; i < stored + kBehind; ++i) want.push_back("e" + std::to_string(i));
  }
  std::set<std::string> ids;
  const bool all = wait_until(
      [&] {
        while (auto m = inbox.take()) {
          std::string id(m->header(layout::kHeaderId));
          if (id == "e0") {
            held.push_back(std::move(m));
          } else {
            ids.insert(id);
            CHECK(m->ack());
          }
          c->release(1);
        }
        return std::all_of(want.begin(), want.end(), [&](const std::string& id) { return ids.count(id) > 0; });
      },
      30s);
  INFO("consumer: " << c->state() << "; server: " << consumer_info(*bus, stream, "pc").dump());
  CHECK(all);
  CHECK(c->recoveries() == 1);
  CHECK(recreated.load() == 1);
  // Created again with the same config: a restarted stage confirms it without a change.
  const auto after = consumer_info(*bus, stream, "pc");
  CHECK(after["config"].value("deliver_policy", "") == "all");
  CHECK(after["config"].value("ack_wait", int64_t{0}) == 1000000000);
  c->stop();
}

// The starvation watch's other side: entries that are pending because this process naked
// them with a delay (a sink's backoff or Retry-After) are not starvation — the durable is
// left alone, and they come when due.
TEST_CASE("pull consumer: messages naked with a long delay are not taken for starvation",
          "[integration][bus][faults]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  Inbox inbox;
  publish(*bus, layout::input_subject("pc"), 4);
  ConsumerOptions co = consumer_options("pc");
  co.ack_wait = std::chrono::seconds(1);
  co.starve_check = std::chrono::seconds(1);
  auto made = bus->pull_consumer(co);
  REQUIRE(made);
  auto c = std::move(made.value());
  REQUIRE(c->start(inbox.handler()));
  c->set_window(8, 4);
  REQUIRE(wait_until([&] { return inbox.received.load() == 4; }, 5s));
  const auto delay = std::chrono::milliseconds(7000);
  while (auto m = inbox.take()) {
    CHECK(m->nak(delay));
    c->deferred(delay);
    c->release(1);
  }
  // Requests out, nothing received, four entries ack-pending on the server: past AckWait
  // and two checks, but not past the delay — they must arrive after it, from the same durable.
  std::set<std::string> ids;
  REQUIRE(wait_until(
      [&] {
        while (auto m = inbox.take()) {
          ids.insert(std::string(m->header(layout::kHeaderId)));
          CHECK(m->ack());
          c->release(1);
        }
        return ids.size() == 4;
      },
      15s));
  CHECK(c->recoveries() == 0);
  c->stop();
}

// Held acks (docs/adr/0264-held-acks.md): an ack made on a consumer loop's thread waits for
// the loop connection's next write — a pull request here — or for the delay, or for the
// connection to close, whichever comes first; never lost, never written alone when
// something else is being written.
TEST_CASE("flow loop: acks are held for the connection's next write, the delay or the close", "[integration][bus]") {
  NatsServer nats;
  const std::string stream = layout::flow_stream("fl");
  auto ack_pending = [&](Bus& bus) { return consumer_info(bus, stream, "fl").value("num_ack_pending", -1); };
  // Handled on the loop: acked there, released only when the test says (no write of its own).
  std::atomic<int> acked{0}, off_loop{0};
  auto handler = [&](std::unique_ptr<BusMessage> m) {
    if (thread_name() != "weir-flows") ++off_loop;
    if (m && m->ack()) ++acked;
  };
  {
    auto bus = connect(nats, std::chrono::minutes(10));  // only a write or the close sends them
    REQUIRE(bus->ensure_flow_stream("fl"));
    publish(*bus, layout::input_subject("fl"), 5);
    auto made = bus->pull_consumer(loop_options("fl"));
    REQUIRE(made);
    auto c = std::move(made.value());
    REQUIRE(c->start(handler));
    c->set_window(3, 3);  // one request for 3, filled: nothing else to write
    REQUIRE(wait_until([&] { return acked.load() == 3; }, 5s));
    std::this_thread::sleep_for(300ms);  // an absence: the acks are held, not written
    CHECK(ack_pending(*bus) == 3);
    // Releasing asks for more: that request carries the held acks.
    c->release(3);
    REQUIRE(wait_until([&] { return acked.load() == 5; }, 5s));
    CHECK(wait_until([&] { return ack_pending(*bus) <= 2; }, 5s));
    CHECK(ack_pending(*bus) == 2);  // the last two, held until the close below
    c->stop();
  }  // the consumer stops and the Bus closes the loop's connection: nothing held is lost
  auto bus = connect(nats, std::chrono::milliseconds(200));
  CHECK(ack_pending(*bus) == 0);
  expect_none_left(*bus, loop_options("fl"));  // all five acked: none comes back

  // With nothing else to write, they leave after the delay.
  publish(*bus, layout::input_subject("fl"), 2, 5);
  auto made = bus->pull_consumer(loop_options("fl"));
  REQUIRE(made);
  auto c = std::move(made.value());
  REQUIRE(c->start(handler));
  c->set_window(2, 2);
  REQUIRE(wait_until([&] { return acked.load() == 7; }, 5s));
  CHECK(wait_until([&] { return ack_pending(*bus) == 0; }, 5s));
  CHECK(off_loop.load() == 0);
  c->stop();
}

TEST_CASE("flow loop: pull requests carry max_bytes, a 409 Message Size Exceeds MaxBytes ends one, the next follows",
          "[integration][bus]") {
  NatsServer nats;
  BusOptions o;
  o.url = nats.url();
  o.name = "pull-consumer-test";
  o.stream_max_bytes = 64 << 20;
  auto made = Bus::connect(o);
  REQUIRE(made);
  auto bus = std::move(made.value());
  REQUIRE(bus->ensure_flow_stream("big"));
  // 60 × 600 KB = 36 MB: more than one request's bytes (docs/adr/0276-byte-bounded-pulls.md:
  // the whole 32 MiB budget for a lone consumer with one request in flight), so the request
  // ends with the 409.
  constexpr int kEvents = 60;
  const std::string pad(600 << 10, 'x');
  {
    std::atomic<int> done{0}, ok{0};
    for (int i = 0; i < kEvents; ++i) {
      std::string id = "b" + std::to_string(i);
      bus->publish(layout::input_subject("big"), pad, {{layout::kHeaderId, id}, {layout::kHeaderMsgId, id}},
                   std::chrono::seconds(10), [&](const Status& s, const PubAck&) {
                     if (s) ++ok;
                     ++done;
                   });
    }
    REQUIRE(wait_until([&] { return done.load() == kEvents; }, 20s));
    REQUIRE(ok.load() == kEvents);
  }
  // What the consumer asks the server for, seen by another client of the same server.
  natsConnection* spy = nullptr;
  natsSubscription* requests = nullptr;
  REQUIRE(natsConnection_ConnectTo(&spy, nats.url().c_str()) == NATS_OK);
  REQUIRE(natsConnection_SubscribeSync(&requests, spy, "$JS.API.CONSUMER.MSG.NEXT.>") == NATS_OK);
  REQUIRE(natsConnection_Flush(spy) == NATS_OK);

  LoopInbox inbox;
  auto c = started(*bus, inbox, "big");
  c->set_window(1024, 1024);
  // Everything arrives though no request's bytes fit all 60: the 409 is followed by the next request.
  REQUIRE(wait_until([&] { return inbox.received.load() == kEvents; }, 20s));
  CHECK(c->healthy());
  int seen = 0;
  int64_t max_bytes = 0;
  for (natsMsg* m = nullptr; natsSubscription_NextMsg(&m, requests, 100) == NATS_OK; m = nullptr) {
    auto body = nlohmann::json::parse(std::string(natsMsg_GetData(m), natsMsg_GetDataLength(m)));
    natsMsg_Destroy(m);
    ++seen;
    CHECK(body.value("batch", 0) == 1024);
    max_bytes = body.value("max_bytes", int64_t{0});
    CHECK(max_bytes >= (int64_t{1} << 20));   // at least one max_payload message
    CHECK(max_bytes <= (int64_t{32} << 20));  // the 32 MiB budget
  }
  INFO("requests seen " << seen << ", max_bytes " << max_bytes);
  CHECK(seen >= 2);  // one at first, and at least one after the 409
  c->stop();
  natsSubscription_Destroy(requests);
  natsConnection_Destroy(spy);
}

namespace {

// Stores `body` in the "pc" stream under `id` with the given Weir-Sum header ("" = none),
// through a plain connection: what another publisher, or a hybrid, would look like.
void store_raw(const NatsServer& nats, const std::string& id, const std::string& body, const std::string& sum) {
  weir::cluster::testing::NatsConn conn(nats.url());
  natsMsg* m = nullptr;
  REQUIRE(natsMsg_Create(&m, layout::input_subject("pc").c_str(), nullptr, body.data(),
                         static_cast<int>(body.size())) == NATS_OK);
  REQUIRE(natsMsgHeader_Set(m, layout::kHeaderId, id.c_str()) == NATS_OK);
  REQUIRE(natsMsgHeader_Set(m, layout::kHeaderMsgId, id.c_str()) == NATS_OK);
  if (!sum.empty()) REQUIRE(natsMsgHeader_Set(m, layout::kHeaderSum, sum.c_str()) == NATS_OK);
  natsMsg* ack = nullptr;
  REQUIRE(natsConnection_RequestMsg(&ack, conn.get(), m, 5000) == NATS_OK);
  const std::string answer(natsMsg_GetData(ack), static_cast<size_t>(natsMsg_GetDataLength(ack)));
  INFO(answer);
  CHECK(answer.find("\"seq\"") != std::string::npos);  // a PubAck: stored
  natsMsg_Destroy(ack);
  natsMsg_Destroy(m);
}

}  // namespace

// docs/adr/0286-body-checksums.md: a copy whose body does not match its Weir-Sum (a message
// a reconnect cut and completed with other bytes) is never handed to the stage nor acked.
TEST_CASE("pull consumer: a delivery whose body does not match its Weir-Sum is refused, naked and counted",
          "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  publish(*bus, layout::input_subject("pc"), 1);  // e0, stamped by the Bus
  store_raw(nats, "bad", R"({"i":"cut"})", crc32c_hex(R"({"i":"whole"})"));
  store_raw(nats, "older", R"({"i":"no sum"})", "");  // an older weir's or a foreign message

  std::atomic<uint64_t> corrupt{0};
  auto co = consumer_options("pc");
  co.corrupt = &corrupt;
  auto made = bus->pull_consumer(co);
  REQUIRE(made);
  auto& c = *made.value();
  Inbox inbox;
  REQUIRE(c.start(inbox.handler()));
  c.set_window(10, 1);  // room for requests while the two good ones are held
  // Refused, naked with 200 ms, redelivered and refused again: still never handed over.
  const bool seen = wait_until([&] { return corrupt.load() >= 3 && inbox.received.load() == 2; }, 10s);
  INFO("refused " << corrupt.load() << ", received " << inbox.received.load() << ": " << c.state());
  REQUIRE(seen);
  std::set<std::string> got;
  while (auto m = inbox.take()) {
    CHECK(m->data().find('i') != std::string_view::npos);
    got.emplace(m->header(layout::kHeaderId));
    CHECK(m->ack());
    c.release(1);
  }
  CHECK(got == std::set<std::string>{"e0", "older"});
  CHECK(inbox.received.load() == 2);
  CHECK(c.healthy());
  c.stop();
}

namespace {

// Takes one delivery of the durable `durable` of the "pc" stream through a plain connection
// (another reader of the durable) and never acks it; returns JetStream's delivery count of
// it (the ack subject's fifth token).
uint64_t take_without_ack(const NatsServer& nats, const std::string& durable) {
  weir::cluster::testing::NatsConn raw(nats.url());
  const std::string next = "$JS.API.CONSUMER.MSG.NEXT." + layout::flow_stream("pc") + "." + durable;
  natsMsg* reply = nullptr;
  REQUIRE(natsConnection_RequestString(&reply, raw.get(), next.c_str(), R"({"batch":1,"expires":4000000000})", 5000) ==
          NATS_OK);
  const std::string ack = natsMsg_GetReply(reply) != nullptr ? natsMsg_GetReply(reply) : "";
  natsMsg_Destroy(reply);
  INFO("ack subject: " << ack);
  REQUIRE(ack.rfind("$JS.ACK.", 0) == 0);  // a delivery, not a status
  std::vector<std::string> tokens;
  for (size_t at = 0;;) {
    const size_t dot = ack.find('.', at);
    tokens.push_back(ack.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  REQUIRE(tokens.size() >= 5);
  return std::stoull(tokens[4]);
}

// Puts the cluster name back when a test that set it ends.
struct ClusterName {
  explicit ClusterName(const std::string& name) { layout::set_cluster(name); }
  ~ClusterName() { layout::set_cluster(""); }
  ClusterName(const ClusterName&) = delete;
  ClusterName& operator=(const ClusterName&) = delete;
};

// A message stored after the consumer was made (past the clocks' margin), delivered twice
// to another reader that never acked: the consumer's first delivery of it comes with
// JetStream's count 3. Returns the count the consumer's message says, then checks that a
// nak of this consumer's own counts one more.
uint64_t first_count_after_two_foreign_deliveries(const NatsServer& nats) {
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("pc"));
  auto co = consumer_options("pc");
  co.ack_wait = 500ms;
  Inbox inbox;
  auto made = bus->pull_consumer(co);
  REQUIRE(made);
  auto& c = *made.value();
  REQUIRE(c.start(inbox.handler()));  // window 0: nothing requested yet
  // A duration, not a condition: the message's stored time must be past the consumer's
  // making by the clocks' margin (2 s, runtime/nats/pull_consumer_impl.h).
  std::this_thread::sleep_for(2500ms);
  publish(*bus, layout::input_subject("pc"), 1);
  CHECK(take_without_ack(nats, "pc") == 1);
  CHECK(take_without_ack(nats, "pc") == 2);  // redelivered to the other reader after AckWait
  c.set_window(1, 1);
  REQUIRE(wait_until([&] { return inbox.received.load() == 1; }, 10s));
  auto m = inbox.take();
  REQUIRE(m);
  const uint64_t first = m->deliveries();
  CHECK(m->nak(std::chrono::milliseconds(0)));  // a failure of this consumer's own
  c.release(1);
  REQUIRE(wait_until([&] { return inbox.received.load() == 2; }, 10s));
  auto again = inbox.take();
  REQUIRE(again);
  CHECK(again->deliveries() == first + 1);
  CHECK(again->ack());
  c.release(1);
  c.stop();
  return first;
}

}  // namespace

// docs/adr/0319-first-delivery-of-a-message-stored-while-running.md: outside a cluster no
// other process reads a durable, so what JetStream counted for a message stored after the
// consumer was made, before its first delivery here, was never a failure (the server raises
// counts without a delivery, ADR 0292) and counts nothing; in a cluster a peer may have
// failed it, and the AckWait cap of ADR 0292 applies.
TEST_CASE("pull consumer: a message stored while it runs counts from its first delivery here outside a cluster",
          "[integration][bus]") {
  NatsServer nats;
  CHECK(first_count_after_two_foreign_deliveries(nats) == 1);
}

TEST_CASE("pull consumer: in a cluster a message's first delivery here keeps what peers may have failed",
          "[integration][bus]") {
  ClusterName cluster("c1");
  NatsServer nats;
  CHECK(first_count_after_two_foreign_deliveries(nats) == 3);
}
