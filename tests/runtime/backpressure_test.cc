// FlowBacklog's admission arithmetic (spec §1.7, ADR 0080 and 0085) with stream states
// and read times given by the test — no NATS, no clock: the refresh thread and STREAM.INFO
// are covered by tests/integration/backpressure_test.cc.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>

#include "runtime/backpressure.h"

using namespace std::chrono_literals;
using weir::BackpressureOptions;
using weir::FlowBacklog;
using weir::kMinDelayBound;

namespace {

// Admits (and completes as stored) up to `cap` events; returns how many were admitted.
int admit_all(FlowBacklog& b, std::string* why, int cap = 1000000) {
  int n = 0;
  while (n < cap && b.admit(100, why)) {
    b.completed(100, true);
    ++n;
  }
  return n;
}

// A stream read: `msgs` held, `last_seq` its last sequence, read at `at`.
void read(FlowBacklog& b, int64_t msgs, uint64_t last_seq, std::chrono::steady_clock::time_point at) {
  b.refreshed(0, msgs, b.stored_marker(), b.stored_msgs_marker(), last_seq, at);
}

const auto t0 = std::chrono::steady_clock::time_point{} + 10s;

}  // namespace

TEST_CASE("backlog: the event bound counts the stream, what was stored since and what is in flight", "[backpressure]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  o.max_messages = 10;
  FlowBacklog b("s", o, pending, nullptr);
  read(b, 4, 4, t0);
  std::string why;
  CHECK(admit_all(b, &why) == 6);
  CHECK(why.find("10 events") != std::string::npos);
  CHECK(pending.load() == 0);
}

TEST_CASE("backlog: max_delay bounds a delivering flow by its drain rate", "[backpressure]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  o.max_messages = 1000000;
  o.max_delay = 200ms;
  FlowBacklog b("s", o, pending, nullptr);
  read(b, 0, 0, t0);
  CHECK(b.delay_bound() == 0);   // no rate yet: only the size bounds
  std::string why;
  REQUIRE(admit_all(b, &why, 50000) == 50000);

  // One second: our 50,000 events and their 50,000 outputs were added (last_seq 100,000),
  // the stream holds 2,000: 98,000 messages left it, 2 messages per event, so an event
  // admitted now waits 200 ms behind 98,000 × 0.2 / 2 = 9,800 messages.
  read(b, 2000, 100000, t0 + 1s);
  CHECK(b.drain_rate() == Approx(98000.0));
  CHECK(b.delay_bound() == 9800);
  CHECK(admit_all(b, &why) == 7800);
  CHECK(why.find("delay bound") != std::string::npos);
  CHECK(why.find("200 ms") != std::string::npos);

  // The rate is smoothed: a slower second brings the bound down, but never below the floor.
  read(b, 9800, 100000 + 2 * 7800, t0 + 2s);   // 15,600 added, 9,800 held: 7,800 left
  CHECK(b.drain_rate() == Approx((98000.0 + 7800.0) / 2));
  CHECK(b.delay_bound() == static_cast<int64_t>(52900 * 0.2 / 2));
  read(b, 9800, 100000 + 2 * 7800 + 100, t0 + 3s);   // 100 added, 100 left
  CHECK(b.delay_bound() == std::max<int64_t>(kMinDelayBound, static_cast<int64_t>((52900 + 100) / 2 * 0.2 / 2)));
}

TEST_CASE("backlog: the delay bound divides by the messages each event becomes", "[backpressure]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  o.max_messages = 1000000;
  o.max_delay = 1s;
  FlowBacklog b("s", o, pending, nullptr);
  read(b, 0, 0, t0);
  std::string why;
  REQUIRE(admit_all(b, &why, 10000) == 10000);
  // A flow with three sinks: each event is 4 messages; 40,000 added, all gone.
  read(b, 0, 40000, t0 + 1s);
  CHECK(b.delay_bound() == static_cast<int64_t>(40000 * 1.0 / 3));   // smoothed: (2 + 4) / 2 = 3 per event
}

TEST_CASE("backlog: a flow that drained nothing (sinks down) keeps only the size bounds", "[backpressure]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  o.max_messages = 5000;
  o.max_delay = 100ms;
  FlowBacklog b("s", o, pending, nullptr);
  read(b, 0, 0, t0);
  read(b, 100, 60100, t0 + 1s);   // 60,000 msgs/s drained, 2 per event → bound 3,000
  CHECK(b.delay_bound() == 3000);
  std::string why;
  CHECK(admit_all(b, &why) == 2900);
  // Nothing left the stream in the next window: stored for later, up to max_events.
  read(b, 3000, 63000, t0 + 2s);
  CHECK(b.drain_rate() == 0);
  CHECK(b.delay_bound() == 0);
  CHECK(admit_all(b, &why) == 2000);
  CHECK(why.find("5000 events") != std::string::npos);
}

TEST_CASE("backlog: max_delay 0 never bounds by rate", "[backpressure]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  FlowBacklog b("s", o, pending, nullptr);
  read(b, 0, 0, t0);
  read(b, 0, 1000000, t0 + 1s);
  CHECK(b.drain_rate() == Approx(1000000.0));
  CHECK(b.delay_bound() == 0);
  std::string why;
  CHECK(admit_all(b, &why, 20000) == 20000);
}
