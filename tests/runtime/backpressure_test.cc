// FlowBacklog's admission arithmetic (ADR 0080 and 0085) with stream states
// and read times given by the test — no NATS, no clock: the refresh thread and STREAM.INFO
// are covered by tests/integration/backpressure_test.cc.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>

#include "runtime/flow/backpressure.h"
#include "runtime/base/metrics.h"

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
  o.max_delay = 10s;
  FlowBacklog b("s", o, pending, nullptr);
  read(b, 0, 0, t0);
  CHECK(b.delay_bound() == kMinDelayBound);  // no rate yet: the floor
  std::string why;
  CHECK(admit_all(b, &why) == kMinDelayBound);
  CHECK(why.find("delay bound") != std::string::npos);
  CHECK(why.find("10000 ms") != std::string::npos);

  // One second: our kMinDelayBound events and their outputs were added (last_seq 2 × floor),
  // the stream holds 96: the rest left it, 2 messages per event, so an event admitted now
  // waits 10 s behind left × 10 / 2 messages.
  const int64_t left = 2 * kMinDelayBound - 96;
  read(b, 96, 2 * kMinDelayBound, t0 + 1s);
  CHECK(b.drain_rate() == Approx(static_cast<double>(left)));
  const int64_t bound = left * 10 / 2;
  CHECK(b.delay_bound() == bound);
  CHECK(admit_all(b, &why) == bound - 96);

  // Smoothed: a second in which three times as many left raises it to the mean rate, twice
  // the first.
  const uint64_t seq = 2 * kMinDelayBound + 2 * (bound - 96);
  read(b, 96 + 2 * (bound - 96) - 3 * left, seq, t0 + 2s);
  CHECK(b.drain_rate() == Approx(2.0 * static_cast<double>(left)));
  CHECK(b.delay_bound() == 2 * bound);
}

TEST_CASE("backlog: the delay floor holds until a rate is known and again after an idle spell", "[backpressure]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  o.max_messages = 1000000;
  o.max_delay = 100ms;
  FlowBacklog b("s", o, pending, nullptr);
  CHECK(b.delay_bound() == kMinDelayBound);
  read(b, 0, 0, t0);
  read(b, 0, 200, t0 + 1s);  // 200 msgs/s: 10 messages in 100 ms, under the floor
  CHECK(b.delay_bound() == kMinDelayBound);
  read(b, 0, 200, t0 + 2s);  // idle: nothing held, nothing left
  CHECK(b.drain_rate() == 0);
  CHECK(b.delay_bound() == kMinDelayBound);
}

TEST_CASE("backlog: the delay bound divides by the messages each event becomes", "[backpressure]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  o.max_messages = 1000000;
  o.max_delay = 1s;
  FlowBacklog b("s", o, pending, nullptr);
  read(b, 0, 0, t0);
  std::string why;
  REQUIRE(admit_all(b, &why) == kMinDelayBound);
  // A flow with three sinks: each event is 4 messages; 4 × floor added, all gone.
  read(b, 0, 4 * kMinDelayBound, t0 + 1s);
  CHECK(b.delay_bound() == static_cast<int64_t>(4 * kMinDelayBound * 1.0 / 3));  // smoothed: (2 + 4) / 2 per event
}

TEST_CASE("backlog: a flow that drained nothing (sinks down) keeps only the size bounds", "[backpressure]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  o.max_messages = 5000;
  o.max_delay = 100ms;
  FlowBacklog b("s", o, pending, nullptr);
  read(b, 0, 0, t0);
  read(b, 100, 60100, t0 + 1s);  // 60,000 msgs/s drained, 2 per event → bound 3,000
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

TEST_CASE("backlog: each refresh sets the delay bound and drain rate gauges", "[backpressure]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  o.max_messages = 1000000;
  o.max_delay = 1s;
  weir::StageMetrics m;
  FlowBacklog b("s", o, pending, &m);
  read(b, 0, 0, t0);
  CHECK(m.backlog_delay_bound.load() == kMinDelayBound);  // no rate yet: the floor
  CHECK(m.backlog_drain_rate.load() == 0);
  std::string why;
  REQUIRE(admit_all(b, &why) == kMinDelayBound);
  // Every message of the floor's events and their outputs left within the second.
  read(b, 0, 2 * kMinDelayBound, t0 + 1s);
  CHECK(m.backlog_drain_rate.load() == 2 * kMinDelayBound);
  CHECK(m.backlog_delay_bound.load() == b.delay_bound());
  CHECK(m.backlog_delay_bound.load() == kMinDelayBound);  // 2 × floor per s × 1 s ÷ 2 per event
  CHECK(m.backlog_events.load() == 0);
  // Then a window in which nothing left a non-empty stream: stalled, no delay bound.
  REQUIRE(admit_all(b, &why, 10) == 10);
  read(b, 10, 2 * kMinDelayBound + 10, t0 + 2s);
  CHECK(m.backlog_drain_rate.load() == 0);
  CHECK(m.backlog_delay_bound.load() == 0);
  CHECK(m.backlog_events.load() == 10);
}

TEST_CASE("backlog: replay room uses the size bounds only and counts what replay stored", "[backpressure][replay]") {
  std::atomic<int64_t> pending{0};
  BackpressureOptions o;
  o.max_messages = 10;
  o.max_bytes = 10000;
  o.max_pending = 1;
  o.max_delay = 100ms;
  FlowBacklog b("s", o, pending, nullptr);
  read(b, 4, 4, t0);
  pending = 1;  // the ingress pending cap is reached: it does not hold replay back
  std::string why;
  int n = 0;
  while (b.has_room(100, &why)) {
    b.add_stored(100);
    ++n;
  }
  CHECK(n == 6);  // 4 in the stream + 6 replayed = max_events
  CHECK(why.find("10 events") != std::string::npos);
  // A refresh that sees them in the stream keeps the count (nothing counted twice or lost).
  read(b, 10, 10, t0 + 1s);
  CHECK(b.backlog_messages() == 10);
  CHECK_FALSE(b.has_room(100, &why));
  // A message larger than the byte room left is refused by the byte bound.
  read(b, 0, 10, t0 + 2s);
  CHECK(b.has_room(100, &why));
  CHECK_FALSE(b.has_room(10001, &why));
  CHECK(why.find("10000 bytes") != std::string::npos);
}
