// N events posted → N delivered with the right bodies and headers (docs/architecture.md,
// guarantees 1 and 4; docs/connectors.md, the http sink; the 202 of ingress answers).
#include <catch2/catch.hpp>
#include <thread>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::HttpClient;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

// The n-th test event. "id" is what weir-sink counts by; weir picks its own event id.
json expected_event(int n) {
  return {{"id", "ev-" + std::to_string(n)},
          {"n", n},
          {"name", "order " + std::to_string(n)},
          {"items", {{{"sku", "a"}, {"qty", n % 7}}}},
          {"unicode", "caf\u00e9 \u2713"}};
}

}  // namespace

TEST_CASE("N events posted are delivered once with their bodies and headers", "[integration][delivery]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}}});
  weir.start();

  constexpr int kEvents = 500;
  constexpr int kClients = 4;
  std::map<int, std::string> id_by_n;  // event n → id from the 202
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<long> connects(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      HttpClient http;
      for (int n = c; n < kEvents; n += kClients) {
        json event = expected_event(n);
        auto r = http.request("POST", weir.ingress_url("/in/orders"), event.dump(), {"Content-Type: application/json"});
        std::lock_guard<std::mutex> lock(mu);
        if (r.status != 202 || id_from_reply(r).empty()) {
          failures.push_back("n=" + std::to_string(n) + ": " + std::to_string(r.status) + " " + r.body + r.error);
        } else {
          id_by_n[n] = id_from_reply(r);
        }
      }
      connects[static_cast<size_t>(c)] = http.connects();
    });
  }
  for (auto& t : threads) t.join();
  INFO(weir.describe());
  INFO(failures.size() << " failed posts, first: " << (failures.empty() ? "" : failures.front())
                       << (failures.size() > 1 ? ", last: " + failures.back() : std::string()));
  REQUIRE(failures.empty());
  REQUIRE(id_by_n.size() == kEvents);
  // Ids are distinct, and keep-alive held: one connection per client for all its posts.
  std::set<std::string> ids;
  for (auto& [n, id] : id_by_n) ids.insert(id);
  CHECK(ids.size() == kEvents);
  for (long c : connects) CHECK(c == 1);

  REQUIRE(wait_until([&] { return sink.stat("received") >= kEvents; }, 30s, 50ms));
  CHECK(sink.stat("unique") == kEvents);
  CHECK(sink.stat("duplicates") == 0);
  std::set<std::string> body_ids;
  for (int n = 0; n < kEvents; ++n) body_ids.insert(expected_event(n)["id"].get<std::string>());
  CHECK(missing(body_ids, sink.ids()).empty());

  json requests = sink.requests(kEvents);
  REQUIRE(requests.is_array());
  REQUIRE(requests.size() == kEvents);
  std::set<int> seen;
  for (const auto& req : requests) {
    json body = body_of(req);
    REQUIRE(body.contains("n"));
    int n = body["n"].get<int>();
    CHECK(body == expected_event(n));
    CHECK(req.value("method", "") == "POST");
    CHECK(req.value("path", "") == "/out");
    CHECK(header_of(req, "Content-Type").rfind("application/json", 0) == 0);
    CHECK(header_of(req, "Idempotency-Key") == id_by_n[n]);
    seen.insert(n);
  }
  CHECK(seen.size() == kEvents);
}

TEST_CASE("an Idempotency-Key becomes the event id and a repeated key delivers once", "[integration][delivery]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}}});
  weir.start();
  INFO(weir.describe());

  const std::string key = "order-7f3a-2026";
  const std::string first_body = json{{"id", key}, {"try", 1}}.dump();
  auto first = weir.post("/in/orders", first_body, {"Idempotency-Key: " + key});
  REQUIRE(first.status == 202);
  CHECK(id_from_reply(first) == key);
  auto second = weir.post("/in/orders", json{{"id", key}, {"try", 2}}.dump(), {"Idempotency-Key: " + key});
  CHECK(second.status / 100 == 2);
  CHECK(id_from_reply(second) == key);

  // Events posted after the repeat: once they are all delivered, the repeat has had
  // every chance to show up too.
  std::set<std::string> later;
  for (int i = 0; i < 20; ++i) {
    std::string id = "later-" + std::to_string(i);
    auto r = weir.post("/in/orders", json{{"id", id}, {"n", 100 + i}}.dump(), {"Idempotency-Key: " + id});
    REQUIRE(r.status == 202);
    CHECK(id_from_reply(r) == id);
    later.insert(id);
  }
  later.insert(key);
  REQUIRE(wait_until([&] { return missing(later, sink.ids()).empty(); }, 20s, 50ms));
  CHECK(sink.stat("received") == 21);
  CHECK(sink.stat("duplicates") == 0);

  // The stored event is the first one posted with that key.
  json requests = sink.requests(100);
  int with_key = 0;
  for (const auto& req : requests) {
    if (header_of(req, "Idempotency-Key") == key) {
      ++with_key;
      CHECK(body_of(req) == json::parse(first_body));
    }
  }
  CHECK(with_key == 1);
}

TEST_CASE("http sink options: method, headers with ${NAME} secrets, max_connections", "[integration][delivery]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string token = "sink-token-9a8b7c-secret";
  std::string flow =
      "flow: tenant\n"
      "from: { http: { path: /in/tenant } }\n"
      "steps: []\n"
      "to:\n"
      "  out:\n"
      "    http:\n"
      "      url: \"" +
      sink.url("/put-here") +
      "\"\n"
      "      method: PUT\n"
      "      headers: { X-Tenant: acme, Authorization: \"Bearer ${SINK_TOKEN}\" }\n"
      "      timeout: 2s\n"
      "      retries: 3\n"
      "      max_connections: 2\n";
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"tenant.yaml", flow}}, .config = "", .env = {{"SINK_TOKEN", token}}});
  weir.start();
  INFO(weir.describe());
  std::set<std::string> ids;
  for (int i = 0; i < 10; ++i) {
    std::string id = "t" + std::to_string(i);
    REQUIRE(weir.post("/in/tenant", json{{"id", id}}.dump()).status == 202);
    ids.insert(id);
  }
  REQUIRE(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 20s, 50ms));
  for (const auto& req : sink.requests(10)) {
    CHECK(req.value("method", "") == "PUT");
    CHECK(req.value("path", "") == "/put-here");
    CHECK(header_of(req, "X-Tenant") == "acme");
    CHECK(header_of(req, "Authorization") == "Bearer " + token);
    CHECK(header_of(req, "Content-Type").rfind("application/json", 0) == 0);
    CHECK_FALSE(header_of(req, "Idempotency-Key").empty());
  }
  CHECK(weir.log().find(token) == std::string::npos);
}

// libcurl's proxy variables still apply: weir reads them once and, when none is set, tells
// curl "no proxy" instead of letting it read the environment for every request.
TEST_CASE("http sinks go through the proxy the environment names, except for no_proxy hosts",
          "[integration][delivery]") {
  NatsServer nats;
  SinkProcess target;
  SinkProcess proxy;  // answers as a proxy would not, but records what reached it
  const std::string out = target.url("/out");
  for (const bool bypass : {false, true}) {
    DYNAMIC_SECTION((bypass ? "no_proxy names the host" : "http_proxy alone")) {
      std::map<std::string, std::string> env = {
          {"http_proxy", proxy.url("")}, {"no_proxy", bypass ? "127.0.0.1" : ""}, {"NO_PROXY", ""}};
      WeirProcess weir({.nats_url = nats.url(), .flows = {{"p.yaml", http_flow("p", "/in/p", out)}}, .env = env});
      weir.start();
      INFO(weir.describe());
      std::set<std::string> ids;
      for (int i = 0; i < 3; ++i) {
        std::string id = std::string(bypass ? "direct-" : "proxied-") + std::to_string(i);
        REQUIRE(weir.post("/in/p", json{{"id", id}}.dump()).status == 202);
        ids.insert(id);
      }
      SinkProcess& via = bypass ? target : proxy;
      SinkProcess& other = bypass ? proxy : target;
      REQUIRE(wait_until([&] { return missing(ids, via.ids()).empty(); }, 20s, 50ms));
      CHECK(other.stat("received") == 0);
      for (const auto& req : via.requests(3)) {
        // Through a proxy the request line carries the absolute URL; directly, the path.
        CHECK(req.value("target", "") == (bypass ? "/out" : out));
      }
    }
  }
}
