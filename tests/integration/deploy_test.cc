// Deploying a flow that does not run yet (standalone; ADR 0121),
// through the real weir binary and CLI, a nats-server and weir-sink: the flow starts at
// once, its file is kept in the flows dir and runs after a restart; what cannot start
// (a taken http path, a chain to nothing, table files) is refused with why and leaves
// no file; a new flow's reference data travels in a KV table.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::wait_until;

namespace {

std::optional<json> delivered_with_id(const SinkProcess& sink, const std::string& id) {
  for (const auto& req : sink.requests(10000)) {
    json b = body_of(req);
    if (b.is_object() && b.value("id", "") == id) return b;
  }
  return std::nullopt;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("deploy: a new flow starts at once on a standalone weir and runs after a restart", "[integration][deploy]") {
  weir::testing::NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"good.yaml", http_flow("good", "/in/good", sink.url("/good"))}}});
  weir.start();
  INFO(weir.describe());
  const std::string server = weir.admin_url("");

  // Before: the path answers 404 (no such route).
  CHECK(weir.post("/in/fresh", R"({"id": "f0"})").status == 404);
  weir::testing::TempDir files;
  {
    std::ofstream f(files.file("fresh.yaml"));
    f << http_flow("fresh", "/in/fresh", sink.url("/fresh"));
  }
  auto deployed = run_cli({"deploy", files.file("fresh.yaml"), "--server", server});
  INFO(deployed.output);
  REQUIRE(deployed.code == 0);
  CHECK(contains(deployed.output, "\"started\": true"));
  CHECK(std::filesystem::exists(weir.flow_path("fresh.yaml")));
  REQUIRE(weir.post("/in/fresh", R"({"id": "f1"})").status == 202);
  REQUIRE(wait_until([&] { return delivered_with_id(sink, "f1").has_value(); }, 10s, 10ms));
  auto listed = weir.admin("GET", "/flows/fresh");
  CHECK(listed.status == 200);
  CHECK(weir.admin("GET", "/readyz").status == 200);
  // Deploying it again replaces its steps (the running-flow path, as before).
  std::string v2 =
      "flow: fresh\nfrom: { http: { path: \"/in/fresh\" } }\nsteps:\n  - set: { v: 2 }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/fresh") + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } } }\n";
  REQUIRE(weir.admin("PUT", "/flows/fresh", v2).status == 201);
  REQUIRE(weir.post("/in/fresh", R"({"id": "f2"})").status == 202);
  REQUIRE(wait_until([&] { return delivered_with_id(sink, "f2").has_value(); }, 10s, 10ms));
  CHECK((*delivered_with_id(sink, "f2"))["v"] == 2);

  // Refused, with why, and no file left behind.
  auto taken = weir.admin("PUT", "/flows/other", http_flow("other", "/in/good", sink.url("/other")));
  CHECK(taken.status == 409);
  CHECK(contains(taken.body, "/in/good is used by flow good"));
  CHECK_FALSE(std::filesystem::exists(weir.flow_path("other.yaml")));
  auto chained = weir.admin(
      "PUT", "/flows/chain",
      "flow: chain\nfrom: { flow: good.nothing }\nto: { out: { http: { url: \"" + sink.url("/chain") + "\" } } }\n");
  CHECK(chained.status == 422);
  CHECK(contains(chained.body, "good.nothing is not a running flow's `flow: {}` sink"));
  CHECK_FALSE(std::filesystem::exists(weir.flow_path("chain.yaml")));
  auto with_file = weir.admin(
      "PUT", "/flows/filed",
      "flow: filed\nfrom: { http: { path: /in/filed } }\ntables:\n  t: { file: t.csv, key: id }\n"
      "to: { out: { http: { url: \"" +
          sink.url("/filed") + "\" } } }\n");
  CHECK(with_file.status == 422);
  CHECK(contains(with_file.body, "kv: table"));
  // A name another (not running) file in the flows dir holds.
  {
    std::ofstream f(weir.flow_path("zz-broken.yaml"));
    f << http_flow("shadow", "/in/shadow", sink.url("/shadow"));
  }
  auto shadow = weir.admin("PUT", "/flows/shadow", http_flow("shadow", "/in/shadow2", sink.url("/shadow")));
  CHECK(shadow.status == 409);
  CHECK(contains(shadow.body, "zz-broken.yaml"));
  std::filesystem::remove(weir.flow_path("zz-broken.yaml"));

  // Reference data travels in KV: the row is there before the flow, the flow reads it.
  REQUIRE(weir.admin("PUT", "/tables/deploy_tiers/c1", R"({"tier": "gold"})").status == 200);
  auto kv_flow = weir.admin("PUT", "/flows/tiered",
                            "flow: tiered\nfrom: { http: { path: /in/tiered } }\ntables:\n"
                            "  tiers: { kv: deploy_tiers, key: customer }\nsteps:\n"
                            "  - lookup: { table: tiers, key: this.customer, as: tier }\n"
                            "to: { out: { http: { url: \"" +
                                sink.url("/tiered") + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } } }\n");
  INFO(kv_flow.body);
  REQUIRE(kv_flow.status == 201);
  REQUIRE(weir.post("/in/tiered", R"({"id": "t1", "customer": "c1"})").status == 202);
  REQUIRE(wait_until([&] { return delivered_with_id(sink, "t1").has_value(); }, 10s, 10ms));
  CHECK((*delivered_with_id(sink, "t1"))["tier"]["tier"] == "gold");

  // After a restart the deployed flows start from their files.
  REQUIRE(weir.terminate() == 0);
  weir.start();
  REQUIRE(weir.post("/in/fresh", R"({"id": "f3"})").status == 202);
  REQUIRE(wait_until([&] { return delivered_with_id(sink, "f3").has_value(); }, 10s, 10ms));
  CHECK((*delivered_with_id(sink, "f3"))["v"] == 2);
  REQUIRE(weir.post("/in/tiered", R"({"id": "t2", "customer": "c1"})").status == 202);
  REQUIRE(wait_until([&] { return delivered_with_id(sink, "t2").has_value(); }, 10s, 10ms));
  CHECK((*delivered_with_id(sink, "t2"))["tier"]["tier"] == "gold");
  CHECK(weir.terminate() == 0);
}

TEST_CASE("deploy in a cluster: a new flow stored, then promoted, starts on every instance and after a restart",
          "[integration][deploy][cluster]") {
  weir::testing::NatsServer nats;
  SinkProcess sink;
  const std::vector<std::string> cluster{"--cluster", "c1"};
  WeirProcess a({.nats_url = nats.url(),
                 .flows = {{"good.yaml", http_flow("good", "/in/good", sink.url("/good"))}},
                 .args = cluster});
  WeirProcess b({.nats_url = nats.url(),
                 .flows = {{"good.yaml", http_flow("good", "/in/good", sink.url("/good"))}},
                 .args = cluster});
  a.start();
  b.start();
  INFO(a.describe() << "\n" << b.describe());
  std::string fresh =
      "flow: fresh\nfrom: { http: { path: /in/fresh } }\nsteps:\n  - set: { v: 1 }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/fresh") + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } } }\n";
  // Stored, not started: the answer says to promote.
  auto stored = a.admin("PUT", "/flows/fresh", fresh);
  INFO(stored.body);
  REQUIRE(stored.status == 201);
  CHECK(contains(stored.body, "promote"));
  CHECK(b.post("/in/fresh", R"({"id": "n0"})").status == 404);
  CHECK_FALSE(std::filesystem::exists(a.flow_path("fresh.yaml")));  // the registry is the source of truth
  // A taken path is refused before it is stored.
  CHECK(a.admin("PUT", "/flows/other", http_flow("other", "/in/good", sink.url("/other"))).status == 409);
  // Promoted through the other instance: both start it.
  auto promoted = b.admin("POST", "/flows/fresh/promote", R"({"version": 1})");
  INFO(promoted.body);
  REQUIRE(promoted.status == 200);
  for (WeirProcess* w : {&a, &b}) {
    REQUIRE(wait_until([&] { return w->admin("GET", "/flows/fresh").status == 200; }, 10s, 20ms));
  }
  REQUIRE(a.post("/in/fresh", R"({"id": "n1"})").status == 202);
  REQUIRE(b.post("/in/fresh", R"({"id": "n2"})").status == 202);
  for (const char* id : {"n1", "n2"}) {
    REQUIRE(wait_until([&] { return delivered_with_id(sink, id).has_value(); }, 10s, 10ms));
    CHECK((*delivered_with_id(sink, id))["v"] == 1);
  }
  CHECK(a.admin("GET", "/readyz").status == 200);
  CHECK(b.admin("GET", "/readyz").status == 200);
  // A later version switches both, as for any running flow.
  std::string v2 = fresh;
  v2.replace(v2.find("v: 1"), 4, "v: 2");
  REQUIRE(a.admin("PUT", "/flows/fresh", v2).status == 201);
  REQUIRE(a.admin("POST", "/flows/fresh/promote", R"({"version": 2})").status == 200);
  REQUIRE(b.post("/in/fresh", R"({"id": "n3"})").status == 202);
  REQUIRE(wait_until([&] { return delivered_with_id(sink, "n3").has_value(); }, 10s, 10ms));
  CHECK((*delivered_with_id(sink, "n3"))["v"] == 2);
  // A restarted instance starts it from the registry (its flows dir does not have it).
  REQUIRE(a.terminate() == 0);
  a.start();
  REQUIRE(wait_until([&] { return a.admin("GET", "/flows/fresh").status == 200; }, 10s, 20ms));
  REQUIRE(a.post("/in/fresh", R"({"id": "n4"})").status == 202);
  REQUIRE(wait_until([&] { return delivered_with_id(sink, "n4").has_value(); }, 10s, 10ms));
  CHECK((*delivered_with_id(sink, "n4"))["v"] == 2);
  CHECK(a.terminate() == 0);
  CHECK(b.terminate() == 0);
}
