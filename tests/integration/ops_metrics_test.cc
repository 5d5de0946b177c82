// The metrics the drop-in alerts of docs/monitoring/ read beyond the per-stage ones
// (docs/metrics.md): weir_nats_connected follows the NATS server going away and coming
// back, and weir_flow_backlog_max_{bytes,events} report the backlog bounds in force.
#include <catch2/catch.hpp>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

// The sample of `name{labels}` in weir's /metrics; nullopt when it has none.
std::optional<double> sample(const WeirProcess& weir, const std::string& name, const std::string& labels = "") {
  for (const auto& [key, s] : parse_metrics(weir.admin("GET", "/metrics").body)) {
    if (key == name && s.first == labels) return s.second;
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("weir_nats_connected is 0 while NATS is away and 1 again once it is back", "[integration][metrics]") {
  NatsServer nats;
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"orders.yaml", http_flow("orders", "/in/orders", "http://127.0.0.1:9/out")}}};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  CHECK(sample(weir, "weir_nats_connected") == 1.0);
  nats.stop();
  CHECK(wait_until([&] { return sample(weir, "weir_nats_connected") == 0.0; }, 10s, 20ms));
  nats.start();
  CHECK(wait_until([&] { return sample(weir, "weir_nats_connected") == 1.0; }, 20s, 20ms));
  CHECK(weir.terminate() == std::optional<int>(0));
}

TEST_CASE("weir_flow_backlog_max_bytes and _max_events report the bounds in force", "[integration][metrics]") {
  NatsServer nats;
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"orders.yaml", http_flow("orders", "/in/orders", "http://127.0.0.1:9/out")}},
                .config = "backlog: { max_events: 5000, max_bytes: 64MiB }\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  const std::string labels = "flow=\"orders\",stage=\"ingress\"";
  // Set at the backlog's first refresh (every 200 ms).
  CHECK(wait_until([&] { return sample(weir, "weir_flow_backlog_max_events", labels) == 5000.0; }, 10s, 20ms));
  CHECK(sample(weir, "weir_flow_backlog_max_bytes", labels) == 64.0 * 1024 * 1024);
  CHECK(weir.terminate() == std::optional<int>(0));
}
