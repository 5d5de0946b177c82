// ADR 0130: http-in publishes on its own NATS connection from the io thread,
// and the completions run there too. Many keep-alive clients at once each get exactly
// their own answer — the 202 carries the Idempotency-Key that client sent — every event
// answered 202 is delivered once, and the publishes went over weir's ingress connection.
#include <catch2/catch.hpp>
#include <thread>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::HttpClient;
using weir::testing::NatsServer;
using weir::testing::wait_until;

TEST_CASE("http-in on the io thread: 32 keep-alive clients each get their own 202, all delivered once",
          "[integration][ingress]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}}});
  weir.start();

  constexpr int kClients = 32;
  constexpr int kPerClient = 40;
  constexpr int kEvents = kClients * kPerClient;
  std::mutex mu;
  std::vector<std::string> failures;
  std::set<std::string> keys;
  std::vector<long> connects(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      HttpClient http;
      for (int i = 0; i < kPerClient; ++i) {
        std::string key = "k-" + std::to_string(c) + "-" + std::to_string(i);
        json event = {{"id", key}, {"c", c}, {"i", i}};
        auto r = http.request("POST", weir.ingress_url("/in/orders"), event.dump(),
                              {"Content-Type: application/json", "Idempotency-Key: " + key});
        std::lock_guard<std::mutex> lock(mu);
        // A mixed-up completion would hand this client another client's id.
        if (r.status != 202 || id_from_reply(r) != key) {
          failures.push_back(key + ": " + std::to_string(r.status) + " " + r.body + r.error);
        } else {
          keys.insert(key);
        }
      }
      connects[static_cast<size_t>(c)] = http.connects();
    });
  }
  for (auto& t : threads) t.join();
  INFO(weir.describe());
  INFO(failures.size() << " failed posts, first: " << (failures.empty() ? "" : failures.front()));
  REQUIRE(failures.empty());
  REQUIRE(keys.size() == kEvents);
  for (long n : connects) CHECK(n == 1);

  REQUIRE(wait_until([&] { return sink.stat("unique") >= kEvents; }, 60s, 50ms));
  CHECK(missing(keys, sink.ids()).empty());
  CHECK(sink.stat("duplicates") == 0);

  // The publishes went over the io thread's own connection ("<name>-ingress"), not the
  // Bus' threaded one.
  HttpClient mon;
  auto connz = mon.request("GET", "http://127.0.0.1:" + std::to_string(nats.monitor_port()) + "/connz");
  REQUIRE(connz.status == 200);
  json conns = json::parse(connz.body)["connections"];
  int64_t ingress_msgs = -1;
  for (const auto& c : conns) {
    if (c.value("name", "") == "weir-ingress") ingress_msgs = c.value("in_msgs", int64_t{0});
  }
  INFO(connz.body);
  CHECK(ingress_msgs >= kEvents);
}
