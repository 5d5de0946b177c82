// Receivers' outages ridden out (docs/reliability.md, "Receivers' outages"; ADR 0294, 0295):
// with the default configuration a sink whose receiver is down, flapping or asking to wait
// dead-letters nothing and loses nothing; while it is open the receiver sees probes, not
// the backlog; a sink can be paused and resumed by hand; a restart keeps what waits.
// Every test posts through http-in, checks loss by event id against a real weir-sink and
// counts duplicates and dead letters.
#include <catch2/catch.hpp>

#include <atomic>
#include <iostream>
#include <optional>
#include <thread>

#include "tests/integration/paced_load.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string sink_state(WeirProcess& weir, const std::string& flow) {
  json v = sink_view(weir, flow);
  return v.is_object() ? v.value("state", "") : "";
}

}  // namespace

TEST_CASE("a receiver down 60 s at 20 events/s: nothing dead-lettered or lost, probes only, drained after the probe",
          "[integration][outage]") {
  NatsServer nats;
  std::optional<SinkProcess> before(std::in_place);
  const int port = before->port();
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", before->url("/out"), "timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());

  PacedPoster poster(weir, "/in/orders", "o", 20, 20 * 75);
  // A few seconds of normal delivery, then the receiver's port closes.
  REQUIRE(wait_until([&] { return before->ids().size() >= 60; }, 20s, 50ms));
  Seen first;
  first.add(*before);
  before.reset();  // killed: its port refuses connections
  const auto down_at = Clock::now();
  const int64_t errors_at_down = sink_metric(weir, "weir_events_errors_total", "orders");
  REQUIRE(wait_until([&] { return sink_state(weir, "orders") == "open"; }, 20s, 50ms));
  const double opened_after = seconds_since(down_at);
  std::this_thread::sleep_until(down_at + 60s);  // the outage's length: what the test is about
  const int64_t attempts_while_down = sink_metric(weir, "weir_events_errors_total", "orders") - errors_at_down;
  CHECK(sink_state(weir, "orders") == "open");
  SinkProcess after({}, port);
  const auto up_at = Clock::now();
  // Posting goes on for the rest of its 75 s, then every acknowledged event must arrive.
  REQUIRE(wait_until([&] { return poster.done(); }, 60s, 100ms));
  const std::set<std::string> acked = poster.acked();
  std::vector<std::string> lost;
  double first_after_up = -1;
  bool all = wait_until(
      [&] {
        Seen s = first;
        s.add(after);
        if (first_after_up < 0 && !after.ids().empty()) first_after_up = seconds_since(up_at);
        lost = missing(acked, s.ids);
        return lost.empty();
      },
      120s, 100ms);
  const double drained_after_up = seconds_since(up_at);
  Seen s = first;
  s.add(after);
  const json view = sink_view(weir, "orders");
  std::cout << "receiver down 60 s at 20/s: " << acked.size() << " acked, open after " << opened_after
            << " s; requests while down " << attempts_while_down << "; after recovery first delivery at "
            << first_after_up << " s, all " << acked.size() << " delivered at " << drained_after_up << " s; duplicates "
            << s.duplicates << "; circuit " << view.dump() << "\n";
  INFO("lost " << lost.size() << ", first " << (lost.empty() ? "" : lost.front()));
  CHECK(all);
  CHECK(poster.refused() == 0);
  CHECK(dead_letters(weir) == 0);
  // The backlog (~1,200 events) waited in JetStream: the receiver's port saw the window's
  // deliveries that failed when it closed and then probes, 1 s doubling (≤ 7 in 60 s).
  CHECK(attempts_while_down <= 2 * 8 + 7 + 2);
  // Everything within 5 s of the first probe that found the receiver up.
  CHECK(drained_after_up - first_after_up <= 5.0);
  CHECK(view.value("state", "") == "closed");
}

TEST_CASE("a flapping receiver (5 s up, 5 s down, 2 minutes) loses nothing and dead-letters nothing",
          "[integration][outage]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"), "timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());

  const auto start = Clock::now();
  PacedPoster poster(weir, "/in/orders", "f", 20, 20 * 120);
  int phases = 0;
  for (auto at = start + 5s; at < start + 120s; at += 5s, ++phases) {
    std::this_thread::sleep_until(at);  // the flapping's rhythm
    sink.control(json{{"status", phases % 2 == 0 ? 503 : 204}});
  }
  sink.control(json{{"status", 204}});
  REQUIRE(wait_until([&] { return poster.done(); }, 30s, 100ms));
  const std::set<std::string> acked = poster.acked();
  // An event that failed while the circuit was closed waits for its next step (1 s, 5 s,
  // 30 s, 2 min): the wait covers two of the longest it can reach in two minutes.
  std::vector<std::string> lost = wait_delivered(acked, sink, 300s);
  const double drained = seconds_since(start) - 120;
  Seen s;
  s.add(sink);
  const json view = sink_view(weir, "orders");
  std::cout << "flapping receiver, 5 s up / 5 s down for 120 s at 20/s: " << acked.size() << " acked, "
            << sink.stat("rejected") << " requests answered 503, all delivered " << drained
            << " s after the end; duplicates " << s.duplicates << "; circuit " << view.dump() << "\n";
  INFO("lost " << lost.size() << ", first " << (lost.empty() ? "" : lost.front()));
  CHECK(lost.empty());
  CHECK(poster.refused() == 0);
  CHECK(dead_letters(weir) == 0);
  CHECK(view.value("transitions", 0) >= 2);
}

TEST_CASE("a 429 with Retry-After: 3 pauses the whole sink about 3 s and dead-letters nothing",
          "[integration][outage]") {
  NatsServer nats;
  SinkProcess sink({"--record", "5000", "--status", "429", "--retry-after", "3"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"), "timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());

  std::set<std::string> acked;
  for (int i = 0; i < 40; ++i) {
    std::string id = "r" + std::to_string(i);
    REQUIRE(weir.post("/in/orders", json{{"id", id}}.dump()).status == 202);
    acked.insert(id);
  }
  // The first answers are 429s; then the sink is held until the probe.
  REQUIRE(wait_until([&] { return sink_state(weir, "orders") == "open"; }, 20s, 20ms));
  REQUIRE(wait_until([&] { return sink.stat("rejected") >= 1; }, 20s, 20ms));
  // Let the probe after the pause fail once more (its Retry-After pauses again), then accept.
  REQUIRE(wait_until(
      [&] { return sink.requests(5000).size() >= 2 && sink_view(weir, "orders").value("transitions", 0) >= 1; }, 20s,
      20ms));
  json reqs;
  REQUIRE(wait_until(
      [&] {
        reqs = sink.requests(5000);
        // the last 429 before a gap of more than 2 s, and the request after it
        for (size_t i = 1; i < reqs.size(); ++i) {
          if (reqs[i]["arrival_us"].get<int64_t>() - reqs[i - 1]["arrival_us"].get<int64_t>() > 2'000'000) return true;
        }
        return false;
      },
      30s, 100ms));
  sink.control(json{{"status", 204}, {"retry_after", -1}});
  std::vector<std::string> lost = wait_delivered(acked, sink, 60s);
  reqs = sink.requests(5000);
  // Gaps between requests: the first long one is the pause the receiver asked for.
  std::vector<double> gaps;
  for (size_t i = 1; i < reqs.size(); ++i) {
    const double gap = static_cast<double>(reqs[i]["arrival_us"].get<int64_t>() -
                                           reqs[i - 1]["arrival_us"].get<int64_t>()) /
                       1e6;
    if (gap > 1.0) gaps.push_back(gap);
  }
  std::cout << "429 with Retry-After: 3: " << reqs.size() << " requests, pauses between them (s):";
  for (double g : gaps) std::cout << " " << g;
  std::cout << "\n";
  INFO("lost " << lost.size());
  CHECK(lost.empty());
  CHECK(dead_letters(weir) == 0);
  REQUIRE_FALSE(gaps.empty());
  // Not before the 3 s asked for; the upper bound leaves room for a loaded machine.
  for (double g : gaps) {
    CHECK(g >= 2.95);
    CHECK(g <= 6.0);
  }
}

TEST_CASE("a sink paused and resumed by hand through the admin API and the CLI holds events and then delivers them",
          "[integration][outage]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"), "timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());
  const std::string server = weir.admin_url("");

  auto paused = weir.admin("POST", "/sinks/orders/out/pause");
  REQUIRE(paused.status == 200);
  CHECK(json::parse(paused.body).value("state", "") == "paused");
  CHECK(weir.admin("POST", "/sinks/orders/nope/pause").status == 404);
  CHECK(weir.admin("POST", "/sinks/nope/out/pause").status == 404);
  CHECK(weir.admin("GET", "/sinks/orders/out/pause").status == 405);
  CHECK(weir.admin("POST", "/sinks/orders/out/stop").status == 404);

  std::set<std::string> acked;
  for (int i = 0; i < 50; ++i) {
    std::string id = "p" + std::to_string(i);
    REQUIRE(weir.post("/in/orders", json{{"id", id}}.dump()).status == 202);
    acked.insert(id);
  }
  // Held: stored and run through the flow, nothing delivered while paused.
  REQUIRE(wait_until([&] { return sink_metric(weir, "weir_events_acked_total", "orders", "flow") == 50; }, 10s, 50ms));
  const bool delivered_while_paused = wait_until([&] { return sink.stat("received") > 0; }, 3s, 100ms);
  CHECK_FALSE(delivered_while_paused);
  CliResult status = run_cli({"sink", "status", "--server", server});
  INFO(status.output);
  CHECK(status.code == 0);
  CHECK(status.output.find("paused") != std::string::npos);
  CHECK(sink_metric(weir, "weir_sink_state", "orders") == 2);
  CliResult whole = run_cli({"status", "--server", server, "--interval-ms", "0"});
  INFO(whole.output);
  CHECK(whole.code == 0);
  CHECK(whole.output.find("paused") != std::string::npos);

  CliResult resumed = run_cli({"sink", "resume", "orders", "out", "--server", server});
  INFO(resumed.output);
  CHECK(resumed.code == 0);
  std::vector<std::string> lost = wait_delivered(acked, sink, 30s);
  CHECK(lost.empty());
  CHECK(sink_state(weir, "orders") == "closed");
  CHECK(run_cli({"sink", "pause", "orders", "--server", server}).code == 2);  // FLOW and SINK
  CHECK(run_cli({"sink", "pause", "orders", "nope", "--server", server}).code == 2);
  CHECK(dead_letters(weir) == 0);
}

TEST_CASE("a weir restart while a sink is open keeps every waiting event", "[integration][outage]") {
  NatsServer nats;
  std::optional<SinkProcess> sink(std::in_place);
  const int port = sink->port();
  WeirOptions options{.nats_url = nats.url(),
                      .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink->url("/out"), "timeout: 2s")}}};
  sink.reset();  // the receiver is down from the start
  std::set<std::string> acked;
  {
    WeirProcess weir(options);
    weir.start();
    INFO(weir.describe());
    for (int i = 0; i < 100; ++i) {
      std::string id = "w" + std::to_string(i);
      REQUIRE(weir.post("/in/orders", json{{"id", id}}.dump()).status == 202);
      acked.insert(id);
    }
    REQUIRE(wait_until([&] { return sink_state(weir, "orders") == "open"; }, 20s, 50ms));
    REQUIRE(weir.terminate() == std::optional<int>(0));
  }
  WeirProcess weir(options);
  weir.start();
  REQUIRE(wait_until([&] { return sink_state(weir, "orders") == "open"; }, 20s, 50ms));
  SinkProcess up({}, port);
  std::vector<std::string> lost = wait_delivered(acked, up, 90s);
  INFO("lost " << lost.size());
  CHECK(lost.empty());
  CHECK(dead_letters(weir) == 0);
}
