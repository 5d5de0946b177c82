// JSON nested deeper than `http.max_depth` (default 128) gets a 400 naming
// the limit and is never stored; the same limit holds for broker sources (a NATS subject
// here), whose too-deep payloads are dead-lettered with the reason. Regression for the
// crash of December 2026: one 1 MiB `[[[…]]]` body was acked with 202, overflowed a stage
// thread's stack in a recursive dump, and crashed weir again after every restart.
#include <catch2/catch.hpp>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::TcpClient;
using weir::testing::wait_until;

namespace {

// {"id": id, "v": [[…[1]…]]} nested `depth` levels in all (the object is level 1).
std::string nested_event(const std::string& id, int depth) {
  std::string v = "1";
  for (int i = 1; i < depth; ++i) v = "[" + v + "]";
  return R"({"id":")" + id + R"(","v":)" + v + "}";
}

// One message on a NATS subject over the plain protocol (PUB, then PING/PONG so it was read).
void nats_publish(int port, const std::string& subject, const std::string& payload) {
  TcpClient c(port);
  REQUIRE(c.send("CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPUB " + subject + " " +
                 std::to_string(payload.size()) + "\r\n" + payload + "\r\nPING\r\n"));
  REQUIRE(c.recv(5s, "PONG").find("PONG") != std::string::npos);
}

json dead_letters(const WeirProcess& weir) {
  auto r = weir.admin("GET", "/dlq");
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

}  // namespace

TEST_CASE("JSON deeper than http.max_depth is refused with 400 and never stored", "[integration][ingress][depth]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}}});
  weir.start();

  // At the limit: stored and delivered.
  auto ok = weir.post("/in/orders", nested_event("at-limit", 128));
  CHECK(ok.status == 202);
  // One level more: 400 naming the limit.
  auto deep = weir.post("/in/orders", nested_event("too-deep", 129));
  CHECK(deep.status == 400);
  CHECK(deep.body.find("128") != std::string::npos);
  // The body that crashed weir: ~1 MiB of brackets, half a million levels.
  std::string bomb(520'000, '[');
  bomb += std::string(520'000, ']');
  auto crash = weir.post("/in/orders", bomb, {}, 30s);
  CHECK(crash.status == 400);
  CHECK(crash.body.find("nested deeper than 128") != std::string::npos);
  // Deep objects too, not only arrays.
  std::string objects;
  for (int i = 0; i < 200; ++i) objects += R"({"a":)";
  objects += "1" + std::string(200, '}');
  CHECK(weir.post("/in/orders", objects).status == 400);

  // weir still serves, and only the event at the limit arrived.
  auto after = weir.post("/in/orders", nested_event("after", 3));
  CHECK(after.status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("after") == 1; }, 20s, 20ms));
  auto ids = sink.ids();
  CHECK(ids.count("at-limit") == 1);
  CHECK(ids.count("too-deep") == 0);
  CHECK(sink.stat("received") == 2);
  CHECK(weir.admin("GET", "/readyz").status == 200);
  CHECK(dead_letters(weir).empty());
  CHECK(weir.running());
}

TEST_CASE("http.max_depth sets the limit", "[integration][ingress][depth][config]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}},
                    .config = "http: { max_depth: 8 }\n"});
  weir.start();
  CHECK(weir.post("/in/orders", nested_event("eight", 8)).status == 202);
  auto r = weir.post("/in/orders", nested_event("nine", 9));
  CHECK(r.status == 400);
  CHECK(r.body.find("nested deeper than 8 levels") != std::string::npos);
  CHECK(r.body.find("http.max_depth") != std::string::npos);
  REQUIRE(wait_until([&] { return sink.ids().count("eight") == 1; }, 20s, 20ms));
  CHECK(sink.ids().count("nine") == 0);
}

TEST_CASE("a too-deep payload from a NATS subject is dead-lettered, not stored in the flow",
          "[integration][depth][dlq]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string flow =
      "flow: feed\n"
      "from: { nats: { subject: \"feed.in\" } }\n"
      "steps: []\n"
      "to: { out: { http: { url: \"" +
      sink.url("/out") + "\" } } }\n";
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"feed.yaml", flow}}});
  weir.start();

  // The payload sits one level down in the event ({"subject", "payload": …}): 127 fits.
  nats_publish(nats.port(), "feed.in", nested_event("fits", 127));
  std::string bomb(300'000, '[');
  bomb += std::string(300'000, ']');
  nats_publish(nats.port(), "feed.in", bomb);
  nats_publish(nats.port(), "feed.in", nested_event("one-too-deep", 128));
  nats_publish(nats.port(), "feed.in", nested_event("last", 2));

  json dlq;
  REQUIRE(wait_until(
      [&] {
        dlq = dead_letters(weir);
        return dlq.size() >= 2;
      },
      20s, 50ms));
  INFO(dlq.dump().substr(0, 1000));
  CHECK(dlq.size() == 2);
  for (const auto& d : dlq) {
    CHECK(d["flow"] == "feed");
    CHECK(d["stage"] == "source");
    CHECK(d["reason"].get<std::string>().find("nested deeper than 127 levels") != std::string::npos);
  }
  // What fits is delivered (inside the envelope), the rest never reached the flow.
  REQUIRE(wait_until([&] { return sink.stat("received") >= 2; }, 20s, 20ms));
  auto requests = sink.requests(10);
  std::set<std::string> payload_ids;
  for (const auto& r : requests) {
    json b = body_of(r);
    if (b.contains("payload") && b["payload"].is_object()) payload_ids.insert(b["payload"].value("id", ""));
  }
  CHECK(payload_ids == std::set<std::string>{"fits", "last"});
  CHECK(weir.admin("GET", "/readyz").status == 200);
}

// The evaluation budget (ADR 0111) through the real binary: an event of ~30 KB whose
// expression copies its array into each of its elements (36M values, once 586 MB for
// n = 6,000, and an abort at n = 20,000) is dead-lettered with the reason; weir goes on.
TEST_CASE("an expression that amplifies one event's data is dead-lettered, weir keeps serving",
          "[integration][depth][dlq][budget]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string flow =
      "flow: amp\n"
      "from: { http: { path: /in } }\n"
      "steps:\n  - set: { ys: \"this.xs.map(i => {a: this.xs})\" }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/out") + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } } }\n";
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"amp.yaml", flow}}});
  weir.start();

  json xs = json::array();
  for (int i = 0; i < 6000; ++i) xs.push_back(i);
  REQUIRE(weir.post("/in", json{{"id", "bomb"}, {"xs", xs}}.dump()).status == 202);
  REQUIRE(weir.post("/in", json{{"id", "small"}, {"xs", {1, 2}}}.dump()).status == 202);

  json dlq;
  REQUIRE(wait_until(
      [&] {
        dlq = dead_letters(weir);
        return !dlq.empty();
      },
      20s, 50ms));
  INFO(dlq.dump().substr(0, 1000));
  REQUIRE(dlq.size() == 1);
  CHECK(dlq[0]["flow"] == "amp");
  CHECK(dlq[0]["reason"].get<std::string>().find("evaluation budget exceeded") != std::string::npos);
  REQUIRE(wait_until([&] { return sink.ids().count("small") == 1; }, 20s, 20ms));
  CHECK(sink.ids().count("bomb") == 0);
  const json small = body_of(sink.requests(10).front());
  CHECK(small["ys"] == json::parse(R"([{"a": [1, 2]}, {"a": [1, 2]}])"));
  CHECK(weir.running());
  CHECK(weir.admin("GET", "/readyz").status == 200);
}
