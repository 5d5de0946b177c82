// PullConsumer (runtime/bus.h; docs/adr/0150-stages-without-threads.md) against a real
// nats-server: its own pull requests within a window, acks written to the reply subject,
// the delivery metadata read from it, recovery after a server restart, acks after the
// consumer is gone, and no thread per consumer.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/bus.h"
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
};

std::unique_ptr<Bus> connect(const NatsServer& nats) {
  BusOptions o;
  o.url = nats.url();
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

// Nothing is left for the durable "pc": a fresh consumer of it gets no message.
void expect_none_left(Bus& bus) {
  Inbox late;
  auto again = started(bus, late);
  again->set_window(10, 10);
  std::this_thread::sleep_for(700ms);  // an absence: longer than one request's expiry
  CHECK(late.received.load() == 0);
  CHECK(again->healthy());  // the server answered (408): nothing to deliver
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

TEST_CASE("pull consumer: a kick runs the handler without a message; an ack after stop() still acks",
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
  // need only the connection (issue #10 item 7: a late ack touched a freed subscription).
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
