// Poison events (ADR 0081): an event no stage can handle — nested deeper than
// http.max_depth, or failing every delivery — ends in the dead-letter stream with the
// reason after at most `max_deliver` deliveries, and weir keeps serving.
//
// The deep event is written straight into the flow's stream with cnats (ingress refuses
// such bodies, so this is the route by which one can still get there: an older weir,
// another publisher on the subject, a replay).
#include <catch2/catch.hpp>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include "tests/support/harness.h"
#include "tests/integration/jetstream.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

// `{"id": id, "a": {"a": … 1 …}}` with `depth` nested objects in all.
std::string nested_event(const std::string& id, int depth) {
  std::string out = "{\"id\":\"" + id + "\"";
  for (int i = 1; i < depth; ++i) out += ",\"a\":{\"n\":" + std::to_string(i);
  out += ",\"leaf\":1";
  out.append(static_cast<size_t>(depth - 1), '}');
  out += "}";
  return out;
}

json dlq(const WeirProcess& weir) {
  auto r = weir.admin("GET", "/dlq");
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

}  // namespace

TEST_CASE("an event deeper than max_depth found in a flow's stream is dead-lettered, weir keeps serving",
          "[integration][dlq]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"deep.yaml", http_flow("deep", "/in/deep", sink.url("/out"),
                                                      "retries: 2, " WEIR_TEST_RETRY ", timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());

  // At the limit (128, the default) an event is an event; one level more is not.
  js_publish(nats.url(), "weir.deep.in", "edge-1", nested_event("edge-1", 128));
  js_publish(nats.url(), "weir.deep.in", "deep-1", nested_event("deep-1", 129));
  js_publish(nats.url(), "weir.deep.in", "deep-2", nested_event("deep-2", 1000));
  const auto written_at = std::chrono::steady_clock::now();
  auto r = weir.post("/in/deep", json{{"id", "after-1"}}.dump());
  REQUIRE(r.status == 202);

  REQUIRE(wait_until([&] { return sink.ids().count("edge-1") && sink.ids().count("after-1"); }, 20s, 50ms));
  json dead;
  REQUIRE(wait_until(
      [&] {
        dead = dlq(weir);
        return dead.size() >= 2;
      },
      20s, 100ms));
  const auto dead_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - written_at).count();
  INFO("dlq: " << dead.dump().substr(0, 800));
  REQUIRE(dead.size() == 2);
  std::set<std::string> ids;
  for (const auto& d : dead) {
    ids.insert(d.value("id", ""));
    CHECK(d.value("flow", "") == "deep");
    CHECK(d.value("stage", "") == "flow");
    CHECK(d.value("reason", "").find("nested deeper than 128 levels") != std::string::npos);
    CHECK(d.value("deliveries", 0) == 1);
  }
  CHECK(ids == std::set<std::string>{"deep-1", "deep-2"});
  CHECK_FALSE(sink.ids().count("deep-1"));
  CHECK_FALSE(sink.ids().count("deep-2"));

  // Still serving, nothing redelivered: the dead letters were acked.
  REQUIRE(weir.running());
  REQUIRE(weir.post("/in/deep", json{{"id", "after-2"}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("after-2") == 1; }, 20s, 50ms));
  CHECK(dlq(weir).size() == 2);
  std::cout << "poison (too deep, in the stream): 2 dead-lettered after 1 delivery each, within " << dead_ms
            << " ms of being written; weir serving, lost 0, duplicates " << sink.stat("duplicates") << "\n";
}

// ADR 0081, 0295: at the sink stage max_deliver counts deliveries that ended without the
// receiver's answer — weir killed (or wedged) while it held the event — never the
// receiver's failures. A receiver that never answers holds each delivery; weir is killed
// with it in flight, max_deliver times; the next start dead-letters it without a fourth try.
TEST_CASE("an event weir dies with at its sink max_deliver times is dead-lettered, never sent a fourth time",
          "[integration][sink][dlq][poison]") {
  NatsServer nats;
  SinkProcess sink({"--delay-ms", "600000", "--record", "100"});
  WeirOptions options{.nats_url = nats.url(),
                      .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"), "timeout: 60s")}},
                      .config = "max_deliver: 3\n"};
  for (int k = 1; k <= 3; ++k) {
    WeirProcess weir(options);
    weir.start();
    INFO(weir.describe());
    if (k == 1) REQUIRE(weir.post("/in/orders", json{{"id", "p0"}}.dump()).status == 202);
    // The delivery is on the wire, held by the receiver: weir dies with it.
    REQUIRE(wait_until([&] { return static_cast<int>(sink.requests(100).size()) >= k; }, 30s, 20ms));
    weir.kill9();
  }
  WeirProcess weir(options);
  weir.start();
  json dead;
  REQUIRE(wait_until(
      [&] {
        dead = dlq(weir);
        return !dead.empty();
      },
      30s, 100ms));
  INFO("dlq: " << dead.dump().substr(0, 1500));
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].value("stage", "") == "sink:out");
  CHECK(dead[0].value("reason", "").find("failed 3 deliveries") != std::string::npos);
  CHECK(dead[0].value("deliveries", 0) == 3);
  CHECK(sink.requests(100).size() == 3);  // no fourth
  std::cout << "poison at the sink (weir killed 3 times with the event in flight, max_deliver 3): dead-lettered "
            << "after " << sink.requests(100).size() << " deliveries\n";
}

// ADR 0295: the receiver's failures are not poison. With max_deliver 2 an event its
// receiver refuses four times is retried (across a restart: its attempts travel in its
// retry copy) and delivered on the fifth, with its one Idempotency-Key.
TEST_CASE("an event its receiver fails more often than max_deliver is retried across a restart, not dead-lettered",
          "[integration][sink][dlq][poison]") {
  NatsServer nats;
  SinkProcess sink({"--fail-first", "4", "--fail-status", "500", "--record", "100"});
  WeirOptions options{
      .nats_url = nats.url(),
      .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"), "timeout: 2s, " WEIR_TEST_RETRY)}},
      .config = "max_deliver: 2\n"};
  {
    WeirProcess weir(options);
    weir.start();
    INFO(weir.describe());
    REQUIRE(weir.post("/in/orders", json{{"id", "r0"}}.dump()).status == 202);
    REQUIRE(wait_until([&] { return sink.stat("rejected") >= 3; }, 30s, 20ms));
    REQUIRE(weir.terminate() == std::optional<int>(0));
  }
  WeirProcess weir(options);
  weir.start();
  REQUIRE(wait_delivered({"r0"}, sink, 30s).empty());
  json reqs = sink.requests(100);
  std::set<std::string> keys;
  for (const auto& r : reqs) keys.insert(header_of(r, "Idempotency-Key"));
  CHECK(reqs.size() == 5);
  CHECK(keys.size() == 1);
  CHECK(dlq(weir).empty());
}

// ADR 0225: the poison rule counts deliveries that crashed or wedged weir and definite
// refusals, not the redeliveries that follow weir's own naks when JetStream did not answer
// its output publishes (a leader election, an outage). `second` reads `first`'s stream and
// publishes into its own; with its own stream's output subject taken away, each output
// publish gets "no responders" — what a flow sees while no server answers for the stream.
TEST_CASE("outputs JetStream does not answer: the flow stage's naks do not count toward max_deliver",
          "[integration][poison][dlq]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string first = "flow: first\nfrom: { http: { path: /in/first } }\nto: { next: { flow: {} } }\n";
  const std::string second = "flow: second\nfrom: { flow: first.next }\nto: { out: { http: { url: \"" +
                             sink.url("/out") + "\", retries: 2, timeout: 2s } } }\n";
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"first.yaml", first}, {"second.yaml", second}},
                    .config = "max_deliver: 2\n"});
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/first", json{{"id", "warm-1"}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("warm-1") == 1; }, 20s, 50ms));

  auto errors = [&] {
    for (const auto& [key, sample] : parse_metrics(weir.admin("GET", "/metrics").body)) {
      if (key == "weir_events_errors_total" && sample.first == "flow=\"second\",stage=\"flow\"") return sample.second;
    }
    return -1.0;
  };
  const double errors_before = errors();
  const std::vector<std::string> subjects = js_set_stream_subjects(nats.url(), "weir_second", {"weir.second.in"});
  REQUIRE(weir.post("/in/first", json{{"id", "held-1"}}.dump()).status == 202);
  // Four failed runs (twice max_deliver), or the dead letter the rule used to write.
  json dead;
  REQUIRE(wait_until(
      [&] {
        dead = dlq(weir);
        return !dead.empty() || errors() - errors_before >= 4;
      },
      30s, 100ms));
  const double failed_runs = errors() - errors_before;
  INFO("dlq: " << dead.dump().substr(0, 800));
  CHECK(dead.empty());
  CHECK_FALSE(sink.ids().count("held-1"));

  // JetStream answers again: the event is delivered once, nothing dead-lettered.
  const auto back_at = std::chrono::steady_clock::now();
  js_set_stream_subjects(nats.url(), "weir_second", subjects);
  CHECK(wait_until([&] { return sink.ids().count("held-1") == 1; }, 30s, 50ms));
  const auto delivered_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - back_at).count();
  CHECK(dlq(weir).empty());
  CHECK(sink.stat("duplicates") == 0);
  std::cout << "poison (outputs not answered, max_deliver 2): " << failed_runs << " failed runs not counted, delivered "
            << delivered_ms << " ms after JetStream answered again, dead-lettered 0, lost 0, duplicates "
            << sink.stat("duplicates") << "\n";
}

// Every dead letter is one warn line naming flow, stage, id and reason, and never the
// body: a stored event that is not JSON (flow stage), one whose sink retries ran out, one
// past max_deliver (sink stage). Counted per id, so a second line anywhere would show.
TEST_CASE("every dead letter is logged once with its flow, stage, id and reason, never its body",
          "[integration][dlq]") {
  NatsServer nats;
  SinkProcess sink({"--status", "500"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"few.yaml", http_flow("few", "/in/few", sink.url("/few"),
                                                     "retries: 1, " WEIR_TEST_RETRY ", timeout: 2s")},
                              {"many.yaml", http_flow("many", "/in/many", sink.url("/many"),
                                                      "retries: 2, " WEIR_TEST_RETRY ", timeout: 2s")}},
                    .config = "max_deliver: 3\n"});
  weir.start();
  INFO(weir.describe());

  const std::string marker = "body-marker-7f3a";
  js_publish(nats.url(), "weir.few.in", "not-json", "{\"id\": \"not-json\", " + marker);
  REQUIRE(weir.post("/in/few", json{{"m", marker}}.dump(), {"Idempotency-Key: gave-up"}).status == 202);
  REQUIRE(weir.post("/in/many", json{{"m", marker}}.dump(), {"Idempotency-Key: capped"}).status == 202);

  REQUIRE(wait_until([&] { return dlq(weir).size() >= 3; }, 30s, 100ms));
  const auto lines_for = [&](const std::string& id) {
    std::vector<std::string> out;
    std::istringstream in(weir.log());
    for (std::string line; std::getline(in, line);) {
      if (line.find("dead-lettered") != std::string::npos && line.find("id=" + id) != std::string::npos) {
        out.push_back(line);
      }
    }
    return out;
  };
  const std::map<std::string, std::pair<std::string, std::string>> expected = {
      {"not-json", {"stage=flow", "not valid JSON at byte 20"}},
      {"gave-up", {"stage=sink:out", "gave up after 2 attempts"}},
      {"capped", {"stage=sink:out", "gave up after 3 attempts (retries 2)"}},
  };
  // Plain variables, not a structured binding, in what the lambda captures (clang 14).
  for (const auto& entry : expected) {
    const std::string& id = entry.first;
    REQUIRE(wait_until([&] { return !lines_for(id).empty(); }, 10s, 50ms));
  }
  // A second line would come right behind the first (same completion); make sure the
  // stages are idle before counting.
  REQUIRE(weir.post("/in/few", "{}", {"Idempotency-Key: after"}).status == 202);
  REQUIRE(wait_until([&] { return !lines_for("after").empty(); }, 30s, 50ms));
  for (const auto& [id, want] : expected) {
    auto lines = lines_for(id);
    INFO(id << ": " << lines.size() << " lines\n" << weir.log().substr(0, 6000));
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find(" warn ") != std::string::npos);
    CHECK(lines[0].find(want.first) != std::string::npos);
    CHECK(lines[0].find(want.second) != std::string::npos);
    CHECK(lines[0].find(id == "capped" ? "flow=many" : "flow=few") != std::string::npos);
  }
  CHECK(weir.log().find(marker) == std::string::npos);
}
