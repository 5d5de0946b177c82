// examples/recipes/github.yaml as shipped (docs/recipes/github.md), through the weir binary:
// a signed GitHub push (form content type) reaches the HTTP receiver with its event type as
// a header, an issue (JSON content type) the MQTT broker on its computed topic, a ping
// neither. A real mosquitto, nats-server and weir-sink on free loopback ports.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "flows/text.h"
#include "tests/support/harness.h"
#include "tests/support/mosquitto.h"
#include "tests/support/test_mqtt_client.h"

using namespace std::chrono_literals;
using weir::ctest::Mosquitto;
using weir::ctest::TestMqttClient;
using weir::itest::body_of;
using weir::itest::header_of;
using weir::itest::hmac_sha256_hex;
using weir::itest::SinkProcess;
using weir::itest::WeirOptions;
using weir::itest::WeirProcess;
using weir::testing::NatsServer;
using weir::testing::wait_until;
using json = nlohmann::json;

namespace {

const std::string kSecret = "recipe-secret";

std::string recipe() {
  std::ifstream in(std::string(WEIR_SOURCE_DIR) + "/examples/recipes/github.yaml");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// RFC 3986 unreserved characters kept, everything else %XX (as GitHub encodes its form).
std::string form_encode(const std::string& s) { return weir::flows::url_encode(s); }

int deliver(const WeirProcess& weir, const std::string& event, const std::string& delivery, const std::string& body,
            const std::string& type) {
  return weir
      .post("/in/github", body,
            {"Content-Type: " + type, "X-GitHub-Event: " + event, "X-GitHub-Delivery: " + delivery,
             "X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kSecret, body)})
      .status;
}

}  // namespace

TEST_CASE("the GitHub recipe as shipped: pushes to HTTP, issues to MQTT, routed by X-GitHub-Event",
          "[integration][meta][recipe]") {
  const std::string flow = recipe();
  REQUIRE_FALSE(flow.empty());
  NatsServer nats;
  Mosquitto broker;
  SinkProcess builds;
  TestMqttClient watch(broker.url(), "watch-github");
  watch.subscribe("github/#");
  WeirProcess weir(WeirOptions{
      .nats_url = nats.url(),
      .flows = {{"github.yaml", flow}},
      .env = {{"GITHUB_WEBHOOK_SECRET", kSecret}, {"BUILDS_URL", builds.url("")}, {"MQTT_BROKER", broker.url()}}});
  weir.start();
  INFO(weir.describe());

  const json push = {{"ref", "refs/heads/main"},
                     {"repository", {{"full_name", "octo/hello"}}},
                     {"sender", {{"login", "mona"}}},
                     {"commits", {{{"id", "a"}}, {{"id", "b"}}}}};
  CHECK(deliver(weir, "ping", "d-ping", R"({"zen":"Design for failure.","hook_id":1})", "application/json") == 202);
  CHECK(deliver(weir, "push", "d-push", "payload=" + form_encode(push.dump()), "application/x-www-form-urlencoded") ==
        202);
  const json issue = {{"action", "opened"},
                      {"issue", {{"number", 7}, {"title", "Crash on start"}}},
                      {"repository", {{"full_name", "octo/hello"}}}};
  CHECK(deliver(weir, "issues", "d-issue", issue.dump(), "application/json") == 202);
  CHECK(weir.post("/in/github", issue.dump(), {"Content-Type: application/json", "X-GitHub-Event: issues"}).status ==
        401);  // unsigned

  REQUIRE(wait_until([&] { return builds.stat("received") >= 1 && watch.count() >= 1; }, 20s, 50ms));
  json got = builds.requests(10).at(0);
  CHECK(got["path"] == "/github/push");
  CHECK(header_of(got, "X-GitHub-Event") == "push");
  CHECK(header_of(got, "X-GitHub-Delivery") == "d-push");
  json b = body_of(got);
  CHECK(b["event"] == "push");
  CHECK(b["repository"] == "octo/hello");
  CHECK(b["commits"] == 2);
  auto arrivals = watch.arrivals();
  REQUIRE(arrivals.size() == 1);
  CHECK(arrivals[0].topic == "github/octo/hello/issues");
  json m = json::parse(arrivals[0].payload);
  CHECK(m["event"] == "issues");
  CHECK(m["number"] == 7);
  CHECK(m["delivery"] == "d-issue");
  CHECK(builds.stat("received") == 1);  // the ping went nowhere
}
