// Backpressure (ADR 0080): when a flow stalls, http-in answers 503 with
// Retry-After once the flow's backlog reaches its bound — below the stream size, so the
// flow's own outputs still fit — and after the flow is released everything acknowledged
// is delivered (loss counted by id).
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <set>

#include "tests/support/harness.h"
#include "tests/integration/jetstream.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

// The delay bound's floor in stream messages, as docs/configuration.md states it (runtime/flow/backpressure.h
// kMinDelayBound; these tests drive weir from outside only).
constexpr double kDelayFloor = 512;

double metric(const WeirProcess& weir, const std::string& name, const std::string& labels) {
  auto r = weir.admin("GET", "/metrics");
  for (const auto& [key, sample] : parse_metrics(r.body)) {
    if (key == name && sample.first == labels) return sample.second;
  }
  return -1;
}

}  // namespace

TEST_CASE("a stalled flow's ingress answers 503 at the backlog bound and drains everything after release",
          "[integration][backpressure]") {
  NatsServer nats;
  SinkProcess sink;
  constexpr int64_t kStream = 1 << 20, kBound = 256 << 10;
  WeirOptions o{
      .nats_url = nats.url(),
      .flows = {{"orders.yaml",
                 http_flow("orders", "/in/orders", sink.url("/out"), "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}},
      .config = "nats: { stream_max_bytes: 1MiB }\nhttp: { max_body: 64KiB }\nbacklog: { max_bytes: 256KiB }\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/orders", json{{"id", "warm-1"}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("warm-1") == 1; }, 20s, 50ms));

  // Stall the flow: without its consumer the flow stage fetches nothing, `.in` only grows.
  js_delete_consumer(nats.url(), "weir_orders", "orders");

  Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(500));
  REQUIRE(wait_until([&] { return posters.status_counts()[503] >= 50; }, 30s, 20ms));
  posters.stop();

  // The 503 says why and when to come back; nothing of it was stored. (16 KiB: more than
  // the room a poster's last refused event may have left under the bound.)
  HttpReply full = weir.post("/in/orders", json{{"id", "refused-1"}, {"pad", std::string(16 << 10, 'x')}}.dump());
  CHECK(full.status == 503);
  CHECK_FALSE(full.header("retry-after").empty());
  CHECK(full.body.find("backlog") != std::string::npos);
  // The stream stopped at the bound, far from its own limit: the outputs have room.
  JsStreamState st = js_stream_state(nats.url(), "weir_orders");
  INFO("stream bytes " << st.bytes << ", messages " << st.messages);
  CHECK(st.max_bytes == kStream);
  CHECK(st.bytes <= kBound);
  CHECK(st.bytes > kBound / 2);
  CHECK(metric(weir, "weir_ingress_rejected_total", "flow=\"orders\",stage=\"ingress\"") >= 51);
  // A gauge set at each backlog refresh (every 200 ms): the fill may have outrun the last one.
  CHECK(wait_until(
      [&] { return metric(weir, "weir_flow_backlog_bytes", "flow=\"orders\",stage=\"ingress\"") > kBound / 2; }, 5s,
      20ms));
  for (auto [status, n] : posters.status_counts()) {
    INFO("HTTP " << status << " x" << n);
    CHECK((status == 202 || status == 503));
  }
  for (const auto& r : posters.records()) {
    if (r.status == 503) CHECK(r.has_retry_after);
  }

  // Release: a restart creates the consumer again; the flow runs the whole backlog.
  REQUIRE(weir.terminate() == 0);
  weir.spawn();
  REQUIRE(weir.wait_ready(30s));
  std::set<std::string> acked = posters.acked_ids();
  acked.insert("warm-1");
  std::vector<std::string> lost;
  bool all = wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        return lost.empty();
      },
      60s, 200ms);
  CHECK(all);
  if (!lost.empty()) FAIL_CHECK("lost " << lost.size() << " of " << acked.size() << " acked, first: " << lost.front());
  CHECK_FALSE(sink.ids().count("refused-1"));
  std::cout << "backpressure: " << acked.size() << " acked before the bound, " << posters.status_counts()[503]
            << " answered 503, stream held " << st.bytes << " of " << kStream << " bytes\n";

  // Drained: the stream is empty again and ingress takes events.
  CHECK(wait_until([&] { return js_stream_state(nats.url(), "weir_orders").messages == 0; }, 20s, 100ms));
  REQUIRE(wait_until([&] { return weir.post("/in/orders", json{{"id", "after-1"}}.dump()).status == 202; }, 5s, 100ms));
  CHECK(wait_until([&] { return sink.ids().count("after-1") == 1; }, 20s, 50ms));
  auto dead = weir.admin("GET", "/dlq");
  CHECK(json::parse(dead.body).empty());
}

TEST_CASE(
    "a flow stream filled by another route: outputs that cannot be stored are dead-lettered at max_deliver, "
    "nothing is lost",
    "[integration][backpressure][dlq]") {
  NatsServer nats;
  SinkProcess sink;
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"full.yaml", http_flow("full", "/in/full", sink.url("/out"),
                                                  "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}},
                .config =
                    "nats: { stream_max_bytes: 256KiB }\nhttp: { max_body: 16KiB }\n"
                    "backlog: { max_bytes: 128KiB }\nmax_deliver: 2\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/full", json{{"id", "warm-1"}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("warm-1") == 1; }, 20s, 50ms));
  REQUIRE(weir.terminate() == 0);

  // Ingress would stop at 128 KiB; a publisher writing straight into `.in` does not: fill
  // the stream to its limit, so the flow's first outputs find no room.
  std::set<std::string> stored;
  std::string refused;
  for (int i = 0; i < 2000 && refused.empty(); ++i) {
    std::string id = "f" + std::to_string(i);
    try {
      js_publish(nats.url(), "weir.full.in", id, json{{"id", id}, {"pad", std::string(300, 'x')}}.dump());
      stored.insert(id);
    } catch (const std::runtime_error& e) {
      refused = e.what();
    }
  }
  INFO("stored " << stored.size() << ", then: " << refused);
  REQUIRE_FALSE(refused.empty());
  REQUIRE(stored.size() > 100);
  REQUIRE(js_stream_state(nats.url(), "weir_full").bytes > (200 << 10));

  weir.spawn();
  REQUIRE(weir.wait_ready(30s));
  // Every event ends delivered or dead-lettered, none both, none neither.
  std::set<std::string> delivered, dead;
  json letters;
  bool settled = wait_until(
      [&] {
        delivered = sink.ids();
        // Every page of dead letters (GET /dlq pages at most 1000 per answer).
        letters = json::array();
        std::string cursor;
        for (;;) {
          auto r = weir.admin("GET", "/dlq?limit=1000" + (cursor.empty() ? "" : "&after_seq=" + cursor));
          if (r.status != 200) return false;
          for (auto& d : json::parse(r.body)) letters.push_back(std::move(d));
          if (r.header("x-more") != "true") break;
          cursor = r.header("x-next-after-seq");
        }
        dead.clear();
        for (const auto& d : letters) dead.insert(d.value("id", ""));
        for (const auto& id : stored) {
          if (!delivered.count(id) && !dead.count(id)) return false;
        }
        return true;
      },
      60s, 250ms);
  JsStreamState left = js_stream_state(nats.url(), "weir_full");
  INFO("stream left: " << left.messages << " messages, " << left.bytes << " bytes; dlq stream "
                       << js_stream_state(nats.url(), "weir_dlq").messages << " messages; sink " << sink.stats().dump()
                       << "; delivered " << delivered.size() << ", dead " << dead.size());
  CHECK(settled);
  size_t both = 0, neither = 0;
  for (const auto& id : stored) {
    both += delivered.count(id) && dead.count(id);
    neither += !delivered.count(id) && !dead.count(id);
  }
  CHECK(both == 0);
  CHECK(neither == 0);
  CHECK_FALSE(dead.empty());
  for (const auto& d : letters) {
    INFO(d.dump().substr(0, 300));
    CHECK(d.value("stage", "") == "flow");
    CHECK(d.value("reason", "").find("failed 2 deliveries") != std::string::npos);
  }
  std::cout << "stream filled past the bound: " << stored.size() << " events, " << delivered.size() - 1
            << " delivered, " << dead.size() << " dead-lettered after max_deliver\n";
  // Recovered: the stream drained and ingress serves again.
  CHECK(wait_until([&] { return js_stream_state(nats.url(), "weir_full").messages == 0; }, 20s, 100ms));
  // Ingress admits again once its next backlog reading sees the drained stream (until then
  // it answers 503 with Retry-After, which a sender retries).
  REQUIRE(wait_until([&] { return weir.post("/in/full", json{{"id", "after-1"}}.dump()).status == 202; }, 10s, 100ms));
  CHECK(wait_until([&] { return sink.ids().count("after-1") == 1; }, 20s, 50ms));
}

// A chained flow (`from: {flow: first.next}`) reads the first flow's stream and writes into
// its own, which no ingress guards. Behind a slow sink its stream fills: it waits at its
// backlog bound (FlowStage::set_output_full) instead of having its outputs refused and its
// inputs dead-lettered, its inputs pile up in the first flow's stream, and the first flow's
// ingress answers 503 (ADR 0080).
TEST_CASE("a chained flow behind a slow sink pushes back to the first flow's ingress: 503s, no dead letters",
          "[integration][backpressure]") {
  NatsServer nats;
  // 10 deliveries/s: the chained flow's 256 KiB stream would fill in a few seconds of posting.
  SinkProcess sink({"--delay-ms", "100"});
  const std::string first = "flow: first\nfrom: { http: { path: /in/first } }\nto: { next: { flow: {} } }\n";
  const std::string second = "flow: second\nfrom: { flow: first.next }\nto: { out: { http: { url: \"" +
                             sink.url("/out") + "\", retries: 8, timeout: 5s, max_connections: 1 } } }\n";
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"first.yaml", first}, {"second.yaml", second}},
                    .config = "nats: { stream_max_bytes: 256KiB }\nhttp: { max_body: 16KiB }\n"
                              "backlog: { max_bytes: 128KiB }\n"});
  weir.start();
  INFO(weir.describe());
  std::set<std::string> acked;
  std::map<int, int> statuses;
  // At least 2000 posts, then on (bounded) until the chained flow has waited: which bound
  // trips first in the opening second depends on the 200 ms backlog reads (ADR 0080); with
  // posts going on, the chained flow's stream reaches its bound while the first flow's
  // ingress admits what the drain makes room for.
  const auto until = std::chrono::steady_clock::now() + 20s;
  bool waited = false;
  int posted = 0;
  for (; posted < 2000 || (!waited && posted < 20000 && std::chrono::steady_clock::now() < until); ++posted) {
    const std::string id = "c" + std::to_string(posted);
    const int status = weir.post("/in/first", json{{"id", id}, {"pad", std::string(1000, 'x')}}.dump()).status;
    ++statuses[status];
    if (status == 202) acked.insert(id);
    if (posted % 100 == 99) waited = weir.log().find("chained flow waits") != std::string::npos;
  }
  std::vector<std::string> lost;
  const bool all = wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        return lost.empty();
      },
      60s, 200ms);
  const json dead = json::parse(weir.admin("GET", "/dlq?limit=1000").body);
  std::cout << "chained flow behind a slow sink: " << posted << " posted, 202 " << statuses[202] << ", 503 "
            << statuses[503] << ", delivered " << acked.size() - lost.size() << ", dead-lettered " << dead.size()
            << "\n";
  CHECK(statuses[202] + statuses[503] == posted);
  CHECK(statuses[503] > 0);
  CHECK(all);
  CHECK(dead.empty());
  CHECK(weir.log().find("chained flow waits") != std::string::npos);
}

TEST_CASE("backlog.max_delay: a flow slower than its senders is held near rate x max_delay, then drains, lost 0",
          "[integration][backpressure]") {
  NatsServer nats;
  // ~4 connections x 20 ms: the sink takes about 200 events/s; the senders offer far more.
  SinkProcess sink({"--delay-ms", "20"});
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"slow.yaml", http_flow("slow", "/in/slow", sink.url("/out"),
                                                  "retries: 8, " WEIR_TEST_RETRY ", timeout: 5s, max_connections: 4")}},
                .config = "backlog: { max_delay: 500ms }\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/slow", json{{"id", "warm-1"}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("warm-1") == 1; }, 20s, 50ms));

  Posters posters(weir.ingress_url("/in/slow"), 6, std::chrono::microseconds(200));
  // At ~400 stream messages/s drained and 2 per event, 500 ms is ~100 events: below the
  // floor, so the bound in force is the floor (512 messages) — far below
  // backlog.max_events (100,000), which alone would let the backlog grow for minutes.
  std::string why;
  bool refused = wait_until(
      [&] {
        auto r = weir.post("/in/slow", json{{"id", "probe"}}.dump());
        why = r.body;
        return r.status == 503 && r.body.find("delay bound") != std::string::npos;
      },
      30s, 20ms);
  INFO("last answer: " << why);
  CHECK(refused);
  // Once the rate is known the backlog settles under the bound (it may have passed it
  // before the first rate was measured).
  double backlog = -1;
  CHECK(wait_until(
      [&] {
        backlog = metric(weir, "weir_flow_backlog_events", "flow=\"slow\",stage=\"ingress\"");
        return backlog >= 0 && backlog <= kDelayFloor + 64;
      },
      30s, 100ms));
  INFO("backlog events " << backlog);
  // The bound in force and its rate are gauges: here the flow delivers too slowly for
  // rate × max_delay to reach the floor, so the floor is what holds it.
  double bound = -1, drain = -1;
  CHECK(wait_until(
      [&] {
        bound = metric(weir, "weir_flow_backlog_delay_bound", "flow=\"slow\",stage=\"ingress\"");
        drain = metric(weir, "weir_flow_backlog_drain_rate", "flow=\"slow\",stage=\"ingress\"");
        return bound == kDelayFloor && drain > 0;
      },
      10s, 100ms));
  INFO("delay bound " << bound << ", drain rate " << drain);
  posters.stop();
  for (auto [status, n] : posters.status_counts()) {
    INFO("HTTP " << status << " x" << n);
    CHECK((status == 202 || status == 503));
  }
  CHECK(posters.status_counts()[503] > 0);

  std::set<std::string> acked = posters.acked_ids();
  acked.insert("warm-1");
  std::vector<std::string> lost;
  bool all = wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        return lost.empty();
      },
      90s, 200ms);
  CHECK(all);
  if (!lost.empty()) FAIL_CHECK("lost " << lost.size() << " of " << acked.size() << " acked, first: " << lost.front());
  std::cout << "backlog.max_delay: " << acked.size() << " acked, " << posters.status_counts()[503]
            << " answered 503, backlog settled at " << backlog << " messages\n";
}

// ADR 0268: http-in's thread (weir-io, with the admin API) runs backlog.ingress_nice steps
// (default 10) below every other thread of the process, so when the CPU is short the
// threads that deliver get it first; 0 keeps them equal. The nice values are read from
// /proc/PID/task/*/stat, relative to the main thread's (the test may itself run niced).
TEST_CASE("backlog.ingress_nice: the io thread runs below the delivery threads, level with them at 0",
          "[integration][backpressure]") {
  // The third column: the delivery loops the config asks for (ADR 0272); 0 = auto, one
  // loop on fewer than 4 CPUs.
  const auto [config, steps, asked_loops] = GENERATE(
      table<std::string, int, int>({{"", 10, 0},
                                    {"backlog: { ingress_nice: 0 }\ndelivery_loops: 2\n", 0, 2},
                                    {"backlog: { ingress_nice: 3 }\ndelivery_loops: 1\n", 3, 1}}));
  INFO("config: " << config);
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"nice.yaml", http_flow("nice", "/in/nice", sink.url("/out"))}},
                    .config = config});
  weir.start();
  INFO(weir.describe());
  // One event through, so every loop that starts on demand runs.
  REQUIRE(weir.post("/in/nice", R"({"id":"nice-1"})", {"Content-Type: application/json"}).status == 202);
  REQUIRE(wait_until([&] { return sink.stat("unique") >= 1; }, 30s, 20ms));

  const auto nices = weir::testing::thread_nices(weir.process().pid());
  std::string listing;
  for (const auto& [name, values] : nices) {
    for (int v : values) listing += name + "=" + std::to_string(v) + " ";
  }
  INFO("threads: " << listing);
  REQUIRE(nices.count("weir") == 1);
  REQUIRE(nices.at("weir").size() == 1);
  const int base = *nices.at("weir").begin();
  REQUIRE(nices.count("weir-io") == 1);
  CHECK(nices.at("weir-io") == std::set<int>{std::min(19, base + steps)});
  // weir logs the layout in force at start (auto: by the CPUs it may use; the rule is
  // tested in tests/runtime/config_test.cc).
  const int loops = delivery_loops_logged(weir.log());
  if (asked_loops != 0) CHECK(loops == asked_loops);
  const std::vector<const char*> delivering_threads = loops == 1 ? std::vector<const char*>{"weir-delivery"}
                                                                 : std::vector<const char*>{"weir-flows", "weir-sinks"};
  CHECK(nices.count(loops == 1 ? "weir-flows" : "weir-delivery") == 0);
  for (const char* delivering : delivering_threads) {
    REQUIRE(nices.count(delivering) == 1);
    CHECK(nices.at(delivering) == std::set<int>{base});
  }
  // No other thread inherited the io thread's value.
  for (const auto& [name, values] : nices) {
    if (name != "weir-io") CHECK(values == std::set<int>{base});
  }
}
