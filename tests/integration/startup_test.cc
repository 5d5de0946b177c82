// Start-up that survives a fresh NATS and fits its limits (issue: two instances racing to
// create the same stream exited 1 with "JetStream error 10065"; weir asked a server with
// max_file_store 256MB for 1 GiB per stream and exited blaming connectivity).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>

#include "tests/cluster/nats_cluster.h"
#include "tests/integration/harness.h"

using namespace weir::itest;
using weir::cluster::testing::NatsCluster;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

int rounds(const char* env, int fallback) {
  const char* v = std::getenv(env);
  return v && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

std::map<std::string, std::string> two_flows(const SinkProcess& sink) {
  return {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/orders"))},
          {"audit.yaml", http_flow("audit", "/in/audit", sink.url("/audit"))}};
}

// Spawns every instance before waiting for any, so they race for the same streams,
// consumers and buckets; then each must become ready and take an event.
// Then each must become ready and take an event, which is delivered.
void start_together(std::vector<std::unique_ptr<WeirProcess>>& instances, int round, const SinkProcess& sink) {
  for (auto& w : instances) w->spawn();
  for (size_t i = 0; i < instances.size(); ++i) {
    INFO("round " << round << ", instance " << i);
    if (!instances[i]->wait_ready(60s)) FAIL(instances[i]->describe());
  }
  std::set<std::string> ids;
  for (size_t i = 0; i < instances.size(); ++i) {
    std::string id = "r" + std::to_string(round) + "-" + std::to_string(i);
    auto r = instances[i]->post("/in/orders", R"({"id":")" + id + R"("})");
    CHECK(r.status == 202);
    ids.insert(id);
  }
  INFO("round " << round);
  CHECK(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 30s, 20ms));
}

}  // namespace

TEST_CASE("three instances started at the same instant on a fresh nats-server all come up",
          "[integration][startup]") {
  SinkProcess sink;
  const int n = rounds("WEIR_STARTUP_ROUNDS", 6);
  for (int round = 1; round <= n; ++round) {
    NatsServer nats;
    std::vector<std::unique_ptr<WeirProcess>> instances;
    // Odd rounds: one cluster (leases, registry and member buckets race too); even: standalone.
    std::vector<std::string> args;
    if (round % 2 == 1) args = {"--cluster", "c1"};
    for (int i = 0; i < 3; ++i) {
      instances.push_back(std::make_unique<WeirProcess>(
          WeirOptions{.nats_url = nats.url(), .flows = two_flows(sink), .args = args}));
    }
    start_together(instances, round, sink);
  }
}

TEST_CASE("three clustered instances started at the same instant on a brand-new R3 cluster all come up",
          "[integration][startup][r3]") {
  SinkProcess sink;
  const int n = rounds("WEIR_STARTUP_R3_ROUNDS", 2);
  for (int round = 1; round <= n; ++round) {
    NatsCluster nats;
    std::vector<std::unique_ptr<WeirProcess>> instances;
    for (int i = 0; i < 3; ++i) {
      instances.push_back(std::make_unique<WeirProcess>(WeirOptions{.nats_url = nats.urls(),
                                                                    .flows = two_flows(sink),
                                                                    .config = "nats: { replicas: 3 }\n",
                                                                    .args = {"--cluster", "c1"}}));
    }
    start_together(instances, round, sink);
  }
}

TEST_CASE("weir fits its streams into a nats-server with max_file_store 256MB and says how",
          "[integration][startup]") {
  NatsServer nats("", 256LL << 20);
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(), .flows = two_flows(sink)});
  weir.start();
  // The two flow streams share what the server can reserve (dead letters are unlimited).
  std::string log = weir.log();
  INFO(log);
  CHECK(log.find("streams sized to fit the server's JetStream storage") != std::string::npos);
  CHECK(log.find("streams=2") != std::string::npos);
  CHECK(log.find("nats.stream_max_bytes") != std::string::npos);
  CHECK(weir.post("/in/orders", R"({"id":"small"})").status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("small") == 1; }, 20s, 20ms));
  // A restart keeps the same sizes (what its streams hold counts as available).
  REQUIRE(weir.terminate() == 0);
  weir.start();
  CHECK(weir.post("/in/audit", R"({"id":"again"})").status == 202);
}

TEST_CASE("a server too small for weir's streams is a clear start-up error naming the limit",
          "[integration][startup]") {
  NatsServer nats("", 20LL << 20);   // under (2 streams + 1 unreserved) x 8 MiB
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(), .flows = two_flows(sink)});
  weir.spawn();
  auto code = weir.process().wait_exit(30s);
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  std::string log = weir.log();
  INFO(log);
  CHECK(log.find("max_file_store") != std::string::npos);
  CHECK(log.find("cannot reach NATS") == std::string::npos);
}
