// SinkHealth (runtime/flow/sink_health.h, docs/adr/0294-sink-circuit-breaker.md): a sink's
// circuit opens after N retryable failures in a row or at once on a Retry-After, probes on
// a doubling interval, closes on the probe's answer, and can be paused and resumed by hand.
#include <catch2/catch.hpp>
#include <string>

#include "runtime/flow/sink_health.h"

using weir::CircuitOptions;
using weir::SinkHealth;
using weir::SinkState;
using namespace std::chrono_literals;

namespace {
const SinkHealth::Clock::time_point t0{std::chrono::hours(1000)};
}

TEST_CASE("a sink opens after the configured failures in a row, and an answer between resets the count",
          "[sink-health]") {
  SinkHealth h("f", "s", CircuitOptions{});
  for (int i = 0; i < 4; ++i) CHECK_FALSE(h.failed(t0, "HTTP 503", std::nullopt, false));
  CHECK_FALSE(h.answered(t0, false));  // an answer: the receiver is up, the run starts again
  for (int i = 0; i < 4; ++i) CHECK_FALSE(h.failed(t0, "HTTP 503", std::nullopt, false));
  CHECK(h.state() == SinkState::kClosed);
  CHECK(h.failed(t0, "connection refused", std::nullopt, false));
  CHECK(h.state() == SinkState::kOpen);
  auto v = h.view(t0);
  CHECK(v.last_error == "connection refused");
  CHECK(v.consecutive_failures == 5);
  CHECK(v.transitions == 1);
}

TEST_CASE("an open sink probes once when due, on a doubling interval up to its cap", "[sink-health]") {
  CircuitOptions o;
  o.failures_to_open = 1;
  o.probe_first = 1000ms;
  o.probe_max = 4000ms;
  SinkHealth h("f", "s", o);
  REQUIRE(h.failed(t0, "timeout", std::nullopt, false));
  auto next = h.next_probe();
  REQUIRE(next);
  // 1 s with up to a fifth of jitter
  CHECK(*next - t0 >= 1000ms);
  CHECK(*next - t0 <= 1200ms);
  CHECK_FALSE(h.take_probe(*next - 1ms));
  REQUIRE(h.take_probe(*next));
  CHECK_FALSE(h.take_probe(*next));  // one probe on the wire at a time
  CHECK_FALSE(h.next_probe());
  // The probe failed: the next waits twice as long, then four times, then the cap.
  auto now = *next;
  std::chrono::milliseconds expected[] = {2000ms, 4000ms, 4000ms};
  for (auto want : expected) {
    CHECK(h.failed(now, "timeout", std::nullopt, true));
    auto n = h.next_probe();
    REQUIRE(n);
    CHECK(*n - now >= want);
    CHECK(*n - now <= want + want / 5);
    now = *n;
    REQUIRE(h.take_probe(now));
  }
  // A failure of a delivery that was no probe does not move the probe.
  CHECK(h.failed(now, "timeout", std::nullopt, false));
  CHECK_FALSE(h.next_probe());
  CHECK(h.answered(now + 10ms, true));
  CHECK(h.state() == SinkState::kClosed);
  auto v = h.view(now + 10ms);
  CHECK(v.transitions == 2);
  CHECK(v.not_closed >= 1000ms + 2000ms + 4000ms + 4000ms);
}

TEST_CASE("a Retry-After opens the sink at once for that long, capped", "[sink-health]") {
  CircuitOptions o;
  o.retry_after_cap = 60000ms;
  SinkHealth h("f", "s", o);
  CHECK(h.failed(t0, "HTTP 429", 3000ms, false));
  CHECK(h.state() == SinkState::kOpen);
  auto n = h.next_probe();
  REQUIRE(n);
  CHECK(*n - t0 >= 3000ms);
  CHECK(*n - t0 <= 3600ms);  // the longer of Retry-After and the jittered first probe

  SinkHealth capped("f", "s2", o);
  CHECK(capped.failed(t0, "HTTP 503", std::chrono::hours(5), false));
  CHECK(*capped.next_probe() - t0 == 60000ms);

  // Open already: a later Retry-After pushes the probe out, never in.
  CHECK(capped.failed(t0, "HTTP 503", 1000ms, false));
  CHECK(*capped.next_probe() - t0 == 60000ms);
  CHECK(h.failed(t0, "HTTP 503", 30000ms, false));
  CHECK(*h.next_probe() - t0 == 30000ms);
}

TEST_CASE("a paused sink neither probes nor closes on its own, and resume closes it", "[sink-health]") {
  SinkHealth h("f", "s", CircuitOptions{});
  CHECK(h.pause(t0));
  CHECK_FALSE(h.pause(t0));
  CHECK(h.state() == SinkState::kPaused);
  CHECK(h.failed(t0, "HTTP 500", std::nullopt, false));
  CHECK_FALSE(h.answered(t0, false));
  CHECK(h.state() == SinkState::kPaused);
  CHECK_FALSE(h.take_probe(t0 + std::chrono::hours(1)));
  CHECK(h.resume(t0 + 5s));
  CHECK_FALSE(h.resume(t0 + 5s));
  CHECK(h.state() == SinkState::kClosed);
  CHECK(h.view(t0 + 6s).not_closed == 5s);
  CHECK(h.view(t0 + 6s).consecutive_failures == 0);
}

TEST_CASE("a probe slot given back is due at once", "[sink-health]") {
  CircuitOptions o;
  o.failures_to_open = 1;
  SinkHealth h("f", "s", o);
  REQUIRE(h.failed(t0, "timeout", std::nullopt, false));
  auto n = *h.next_probe();
  REQUIRE(h.take_probe(n));
  h.return_probe(n);
  auto again = h.next_probe();
  REQUIRE(again);
  CHECK(*again == n);
  CHECK(h.take_probe(n));
}

// The health word (docs/adr/0313-sink-health-from-recent-results.md): the circuit first,
// then the failed share of the results of the last kRecentResults.
TEST_CASE("a sink's health word comes from its circuit and its recent results", "[sink-health]") {
  SinkHealth h("f", "s", CircuitOptions{});
  CHECK(std::string(weir::sink_health_word(h.view(t0))) == "healthy");  // no result yet: no evidence of trouble
  for (int i = 0; i < 3; ++i) h.answered(t0, false);
  h.failed(t0, "HTTP 503", std::nullopt, false);
  auto v = h.view(t0);
  CHECK(v.recent_delivered == 3);
  CHECK(v.recent_failed == 1);
  CHECK(weir::recent_failure_share(v) == Approx(0.25));
  CHECK(std::string(weir::sink_health_word(v)) == "degraded");
  h.answered(t0, false, false);  // a refusal that dead-letters the event: not delivered
  h.failed(t0, "HTTP 503", std::nullopt, false);
  v = h.view(t0);
  CHECK(v.recent_failed == 3);
  CHECK(std::string(weir::sink_health_word(v)) == "failing");  // half or more failed
  // The failures leave the window: healthy again, with no result since.
  v = h.view(t0 + weir::kRecentResults + 1s);
  CHECK(v.recent_delivered + v.recent_failed == 0);
  CHECK(std::string(weir::sink_health_word(v)) == "healthy");
}

TEST_CASE("an open sink is down and a paused one paused, whatever the recent results", "[sink-health]") {
  SinkHealth h("f", "s", CircuitOptions{});
  for (int i = 0; i < 20; ++i) h.answered(t0, false);
  for (int i = 0; i < 5; ++i) h.failed(t0, "connection refused", std::nullopt, false);
  REQUIRE(h.state() == SinkState::kOpen);
  CHECK(std::string(weir::sink_health_word(h.view(t0))) == "down");
  CHECK(h.view(t0).last_error == "connection refused");
  h.pause(t0);
  CHECK(std::string(weir::sink_health_word(h.view(t0))) == "paused");
  h.resume(t0);
  CHECK(std::string(weir::sink_health_word(h.view(t0))) == "degraded");  // 5 of 25 failed: fewer than half
}

TEST_CASE("a broker sink's lost connection opens the circuit at once, its return makes the probe due",
          "[sink-health]") {
  SinkHealth h("f", "s", CircuitOptions{});
  CHECK(h.broker_down(t0, "broker 127.0.0.1:1883 is not connected: connection refused by 127.0.0.1:1883"));
  CHECK(h.state() == SinkState::kOpen);
  CHECK_FALSE(h.next_probe());  // no probe while it is away: the reconnect is the probe
  CHECK_FALSE(h.take_probe(t0 + 1h));
  CHECK(h.view(t0).last_error == "broker 127.0.0.1:1883 is not connected: connection refused by 127.0.0.1:1883");
  CHECK_FALSE(h.broker_down(t0 + 1s, "still down"));  // already open: no second transition
  CHECK(h.view(t0).transitions == 1);
  h.broker_up(t0 + 5s);
  REQUIRE(h.next_probe());
  CHECK(*h.next_probe() == t0 + 5s);
  REQUIRE(h.take_probe(t0 + 5s));
  CHECK(h.answered(t0 + 5s, true));
  CHECK(h.state() == SinkState::kClosed);
}

TEST_CASE("a paused broker sink stays paused when its broker goes and comes back", "[sink-health]") {
  SinkHealth h("f", "s", CircuitOptions{});
  REQUIRE(h.pause(t0));
  CHECK_FALSE(h.broker_down(t0, "down"));
  h.broker_up(t0 + 1s);
  CHECK(h.state() == SinkState::kPaused);
  CHECK_FALSE(h.next_probe());
}
