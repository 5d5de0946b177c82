// Admin API (spec §5): health, readiness, Prometheus metrics that match the
// traffic, bearer token on everything but /healthz and /readyz; logs (issue #2
// item 8): JSON lines with levels, no secret ever logged.
#include <catch2/catch.hpp>
#include <sstream>

#include "tests/integration/harness.h"

using namespace weir::itest;
using weir::testing::http_request;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

const std::string kAdminToken = "adm-7c1e-very-secret";
const std::string kHmacSecret = "hmac-5b2d-very-secret";

using Samples = std::multimap<std::string, std::pair<std::string, double>>;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A sample whose name contains every part of `name_parts`, whose labels contain
// `label`, with exactly `value`.
bool has_sample(const Samples& samples, std::vector<std::string> name_parts, const std::string& label, double value) {
  for (const auto& [name, lv] : samples) {
    bool name_ok = std::all_of(name_parts.begin(), name_parts.end(), [&](const auto& p) { return contains(name, p); });
    if (name_ok && contains(lv.first, label) && lv.second == value) return true;
  }
  return false;
}

bool has_name(const Samples& samples, const std::string& part, const std::string& label = "") {
  for (const auto& [name, lv] : samples) {
    if (contains(name, part) && contains(lv.first, label)) return true;
  }
  return false;
}

std::string describe_samples(const Samples& samples, const std::string& label) {
  std::ostringstream s;
  for (const auto& [name, lv] : samples) {
    if (label.empty() || contains(lv.first, label)) s << name << "{" << lv.first << "} " << lv.second << "\n";
  }
  return s.str();
}

}  // namespace

TEST_CASE("admin API: metrics match the traffic, the token guards all but health and readiness",
          "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  // Everything from weir.yaml this time (no flags), JSON logs at debug level.
  WeirProcess weir({
      .nats_url = nats.url(),
      .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/orders"))},
                {"refunds.yaml", http_flow("refunds", "/in/refunds", sink.url("/refunds"), "retries: 8",
                                           "hmac: { secret_env: REFUNDS_SECRET }")}},
      .config = "nats: { url: \"{NATS}\" }\n"
                "data_dir: {DATA}\n"
                "http: { listen: \"{HTTP}\" }\n"
                "admin: { listen: \"{ADMIN}\", token_env: WEIR_ADMIN_TOKEN }\n"
                "flows: {FLOWS}\n"
                "log: { level: debug, format: json }\n",
      .env = {{"WEIR_ADMIN_TOKEN", kAdminToken}, {"REFUNDS_SECRET", kHmacSecret}},
      .use_flags = false,
  });
  weir.start();
  INFO(weir.describe());
  const std::vector<std::string> auth{"Authorization: Bearer " + kAdminToken};

  CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);
  CHECK(http_request("GET", weir.admin_url("/readyz")).status == 200);
  CHECK(weir.admin("GET", "/metrics").status == 401);
  CHECK(weir.admin("GET", "/metrics", "", {"Authorization: Bearer wrong"}).status == 401);
  CHECK(weir.admin("GET", "/metrics", "", {"Authorization: Bearer " + kAdminToken + "0"}).status == 401);
  CHECK(weir.admin("GET", "/dlq").status == 401);
  CHECK(weir.admin("POST", "/dlq/replay", "{}").status == 401);
  CHECK(weir.admin("GET", "/dlq", "", auth).status == 200);

  constexpr int kOrders = 37;
  constexpr int kRefunds = 5;
  std::set<std::string> ids;
  for (int i = 0; i < kOrders; ++i) {
    std::string id = "o" + std::to_string(i);
    auto r = weir.post("/in/orders", json{{"id", id}, {"n", i}}.dump());
    REQUIRE(r.status == 202);
    ids.insert(id);
  }
  for (int i = 0; i < kRefunds; ++i) {
    std::string id = "r" + std::to_string(i);
    std::string body = json{{"id", id}, {"refund", i}}.dump();
    auto r = weir.post("/in/refunds", body, {"X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kHmacSecret, body)});
    REQUIRE(r.status == 202);
    ids.insert(id);
  }
  // A rejected request is not counted as received.
  CHECK(weir.post("/in/refunds", R"({"refund":-1})", {"X-Hub-Signature-256: sha256=00"}).status == 401);
  REQUIRE(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 20s, 50ms));

  // Counters settle once the sink stage has acked its batches.
  Samples samples;
  auto metrics_settled = [&] {
    auto r = weir.admin("GET", "/metrics", "", auth);
    if (r.status != 200) return false;
    samples = parse_metrics(r.body);
    return has_sample(samples, {"acked"}, "flow=\"orders\"", kOrders) &&
           has_sample(samples, {"acked"}, "flow=\"refunds\"", kRefunds);
  };
  bool settled = wait_until(metrics_settled, 10s, 100ms);
  INFO("orders samples:\n" << describe_samples(samples, "flow=\"orders\""));
  CHECK(settled);
  auto m = weir.admin("GET", "/metrics", "", auth);
  REQUIRE(m.status == 200);
  CHECK(contains(m.header("content-type"), "text/plain"));
  CHECK(contains(m.body, "# TYPE"));
  samples = parse_metrics(m.body);
  CHECK(has_sample(samples, {"received"}, "flow=\"orders\"", kOrders));
  CHECK(has_sample(samples, {"received"}, "flow=\"refunds\"", kRefunds));
  CHECK(has_sample(samples, {"acked"}, "flow=\"orders\"", kOrders));
  CHECK(has_sample(samples, {"error"}, "flow=\"orders\"", 0));
  CHECK((has_sample(samples, {"dlq"}, "flow=\"orders\"", 0) || has_sample(samples, {"dead"}, "flow=\"orders\"", 0)));
  CHECK((has_name(samples, "in_flight", "flow=\"orders\"") || has_name(samples, "inflight", "flow=\"orders\"")));
  // Per stage: more than one stage label for the flow.
  std::set<std::string> stages;
  for (const auto& [name, lv] : samples) {
    size_t at = lv.first.find("stage=\"");
    if (contains(lv.first, "flow=\"orders\"") && at != std::string::npos) {
      stages.insert(lv.first.substr(at + 7, lv.first.find('"', at + 7) - at - 7));
    }
  }
  CHECK(stages.size() >= 2);
  // Latency histogram: buckets with le, a +Inf bucket and a count equal to the events.
  CHECK(has_name(samples, "_bucket", "flow=\"orders\""));
  CHECK(has_name(samples, "_bucket", "le=\"+Inf\""));
  CHECK(has_sample(samples, {"_count"}, "flow=\"orders\"", kOrders));
  // Process RSS and uptime.
  CHECK((has_name(samples, "resident") || has_name(samples, "rss")));
  CHECK((has_name(samples, "uptime") || has_name(samples, "start_time")));

  // Logs: JSON lines with a level; no secret anywhere.
  CHECK(weir.terminate() == std::optional<int>(0));
  std::string log = weir.log();
  CHECK_FALSE(contains(log, kAdminToken));
  CHECK_FALSE(contains(log, kHmacSecret));
  std::istringstream lines(log);
  std::string line;
  int json_lines = 0, bad_lines = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line.rfind("==== spawn", 0) == 0) continue;
    try {
      json j = json::parse(line);
      if (j.is_object() && (j.contains("level") || j.contains("lvl"))) {
        ++json_lines;
      } else {
        ++bad_lines;
      }
    } catch (const std::exception&) {
      ++bad_lines;
      UNSCOPED_INFO("not a JSON log line: " << line.substr(0, 200));
    }
  }
  CHECK(json_lines > 0);
  CHECK(bad_lines == 0);
}

TEST_CASE("admin API without token_env is open, readyz follows the NATS connection", "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/orders"))}}});
  weir.start();
  INFO(weir.describe());
  CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);
  auto ready = http_request("GET", weir.admin_url("/readyz"));
  CHECK(ready.status == 200);
  auto m = weir.admin("GET", "/metrics");
  CHECK(m.status == 200);
  CHECK(contains(m.body, "flow=\"orders\""));
  auto dlq = weir.admin("GET", "/dlq");
  CHECK(dlq.status == 200);
  CHECK(json::parse(dlq.body).is_array());
  CHECK(weir.admin("GET", "/no-such-admin-call").status == 404);

  // NATS gone: /readyz says 503 with a reason, /healthz still 200.
  nats.stop();
  HttpReply r;
  CHECK(wait_until(
      [&] {
        r = http_request("GET", weir.admin_url("/readyz"), "", {}, 500ms);
        return r.status == 503;
      },
      5s, 20ms));
  CHECK_FALSE(r.body.empty());
  CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);
  nats.start();
  CHECK(wait_until([&] { return http_request("GET", weir.admin_url("/readyz"), "", {}, 500ms).status == 200; }, 20s,
                   50ms));
}
