// Cluster namespaces (docs/adr/0112-cluster-namespaces.md): every stream, subject and bucket
// carries the cluster name, so two clusters (and a standalone weir) on one NATS with the same
// flow names are independent — each gets only its own events and runs its own singletons.
#include <catch2/catch.hpp>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

std::map<std::string, std::string> flows_to(const SinkProcess& sink) {
  return {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/orders"))},
          {"ticks.yaml", "flow: ticks\nfrom: { timer: { every: 200ms } }\nto:\n  out: { http: { url: \"" +
                             sink.url("/ticks") + "\" } }\n"}};
}

int64_t ticks(const SinkProcess& sink) {
  json s = sink.stats();
  return s["by_path"].value("/ticks", int64_t{0});
}

}  // namespace

TEST_CASE("two clusters and a standalone weir on one NATS with the same flow names are independent",
          "[integration][cluster][namespaces]") {
  NatsServer nats;
  SinkProcess sink1, sink2, sink0;
  WeirProcess c1({.nats_url = nats.url(), .flows = flows_to(sink1), .args = {"--cluster", "c1"}});
  WeirProcess c2({.nats_url = nats.url(), .flows = flows_to(sink2), .args = {"--cluster", "c2"}});
  WeirProcess solo(
      {.nats_url = nats.url(), .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink0.url("/orders"))}}});
  c1.spawn();
  c2.spawn();
  solo.spawn();
  REQUIRE(c1.wait_ready());
  REQUIRE(c2.wait_ready());
  REQUIRE(solo.wait_ready());

  std::set<std::string> ids1, ids2, ids0;
  for (int i = 0; i < 100; ++i) {
    for (auto [weir, ids, prefix] :
         {std::tuple{&c1, &ids1, "one-"}, std::tuple{&c2, &ids2, "two-"}, std::tuple{&solo, &ids0, "solo-"}}) {
      std::string id = prefix + std::to_string(i);
      auto r = weir->post("/in/orders", json{{"id", id}}.dump());
      REQUIRE(r.status == 202);
      ids->insert(id);
    }
  }
  auto ids_at = [](const SinkProcess& sink) {
    std::set<std::string> out;
    for (const auto& id : sink.ids()) {
      if (id.find('-') != std::string::npos) out.insert(id);  // order ids, not ticks
    }
    return out;
  };
  REQUIRE(
      wait_until([&] { return ids_at(sink1) == ids1 && ids_at(sink2) == ids2 && ids_at(sink0) == ids0; }, 30s, 50ms));
  // Each cluster's timer runs under its own lease: both tick, at about 5/s each.
  REQUIRE(wait_until([&] { return ticks(sink1) >= 5 && ticks(sink2) >= 5; }, 10s, 50ms));
  CHECK(sink0.stats()["by_path"].value("/ticks", int64_t{0}) == 0);
  // Nothing crossed over: every delivered order id belongs to its own deployment.
  CHECK(missing(ids_at(sink1), ids1).empty());
  CHECK(missing(ids_at(sink2), ids2).empty());
  CHECK(sink1.stat("duplicates") == 0);
  CHECK(sink2.stat("duplicates") == 0);
  // The names say which is which (GET /status lists the cluster).
  CHECK(json::parse(c1.admin("GET", "/status").body)["cluster"] == "c1");
}

TEST_CASE("a cluster name that cannot name streams is a configuration error", "[integration][cluster][namespaces]") {
  NatsServer nats;
  for (std::string bad : {"a__b", "eu.west", "x y"}) {
    WeirProcess weir({.nats_url = nats.url(),
                      .flows = {{"a.yaml", http_flow("a", "/in/a", "http://127.0.0.1:9/a")}},
                      .args = {"--cluster", bad}});
    weir.spawn();
    auto code = weir.process().wait_exit(20s);
    INFO(bad << ": " << weir.describe());
    REQUIRE(code.has_value());
    CHECK(*code == 2);
    CHECK(weir.log().find("cluster.name") != std::string::npos);
  }
}

TEST_CASE("a clustered start beside a stream of the old layout that still holds events names it and stops",
          "[integration][cluster][namespaces]") {
  NatsServer nats;
  // A standalone weir whose sink is down leaves its events in weir_orders.
  WeirProcess before({.nats_url = nats.url(),
                      .flows = {{"orders.yaml", http_flow("orders", "/in/orders", "http://127.0.0.1:9/down")}}});
  before.start();
  REQUIRE(before.post("/in/orders", R"({"id":"left-behind"})").status == 202);
  REQUIRE(before.terminate() == 0);
  WeirProcess after({.nats_url = nats.url(),
                     .flows = {{"orders.yaml", http_flow("orders", "/in/orders", "http://127.0.0.1:9/down")}},
                     .args = {"--cluster", "c1"}});
  after.spawn();
  auto code = after.process().wait_exit(30s);
  INFO(after.describe());
  REQUIRE(code.has_value());
  CHECK(*code == 2);
  CHECK(after.log().find("stream weir_orders") != std::string::npos);
  CHECK(after.log().find("weirc_c1__orders") != std::string::npos);
}
