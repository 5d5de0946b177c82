// Outbound signatures and header expressions of the HTTP sink (docs/connectors.md,
// `to.<name>.http.sign` and `to.<name>.http.headers.<header>`; docs/adr/0300, 0301),
// checked by the reference implementations: a Node receiver (tests/integration/npm/
// receiver.mjs) verifies every request with the `standardwebhooks` package and
// `@octokit/webhooks-methods`, installed by `npm ci` from the committed lock file.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "tests/integration/npm_packages.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::Process;
using weir::testing::TempDir;
using weir::testing::wait_until;

namespace {

// Test secrets: Standard Webhooks form (whsec_ + base64 of the key) and GitHub's (any text).
const std::string kNewSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const std::string kOldSecret = "whsec_c2lnbmluZy10ZXN0LW9sZC1rZXktMzJieXRlcyE=";
const std::string kGithubSecret = "It's a Secret to Everybody";

// The Node receiver of receiver.mjs on a free loopback port.
class Receiver {
 public:
  explicit Receiver(const json& config) {
    ensure_npm_packages();
    proc_ = Process::spawn({"node", kNpmDir + "/receiver.mjs", config.dump()}, {}, dir_.file("receiver.log"));
    if (!proc_.wait_log("listening ", 20s)) throw std::runtime_error("receiver did not start: " + proc_.read_log());
    const std::string log = proc_.read_log();
    port_ = std::stoi(log.substr(log.find("listening ") + 10));
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  json requests() const {
    auto r = weir::testing::http_request("GET", url("/requests"));
    if (r.status != 200) throw std::runtime_error("receiver /requests answered " + std::to_string(r.status));
    return json::parse(r.body);
  }
  std::string log() const { return proc_.read_log(); }

 private:
  TempDir dir_;
  Process proc_;
  int port_ = 0;
};

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string header(const json& record, const std::string& name) { return record["headers"].value(name, ""); }

}  // namespace

// Every attempt is answered 503 first, then 200: each event is sent twice. Both clients of
// the sink (ADR 0270) are run: weir's own for this plain loopback URL, curl when told.
TEST_CASE("Standard Webhooks signatures verify with the reference package, re-sends and rotation included",
          "[integration][signing]") {
  const std::string client = GENERATE(as<std::string>{}, "weir", "curl");
  INFO("client " << client);
  NatsServer nats;
  Receiver receiver(json{{"standard", {kNewSecret, kOldSecret}}, {"fail_first", true}});
  // The backoff is over a second, so a re-send's timestamp (whole seconds) must differ.
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"orders.yaml", http_flow("orders", "/in/orders", receiver.url("/hook"),
                                           "sign: { scheme: standard, secrets_env: [SIGN_NEW, SIGN_OLD] }, "
                                           "retry: {backoff: [1100ms]}, timeout: 2s")}},
       .env = {{"SIGN_NEW", kNewSecret},
               {"SIGN_OLD", kOldSecret},
               {"WEIR_HTTP_SINK_CLIENT", client == "curl" ? "curl" : "weir"}}});
  weir.start();
  INFO(weir.describe());

  constexpr int kEvents = 5;
  for (int i = 0; i < kEvents; ++i) {
    auto r = weir.post("/in/orders", json{{"n", i}, {"text", "caf\u00e9 \"quoted\" " + std::to_string(i)}}.dump(),
                       {"Idempotency-Key: order-" + std::to_string(i)});
    REQUIRE(r.status == 202);
  }
  json records;
  REQUIRE(wait_until(
      [&] {
        records = receiver.requests();
        return records.size() >= 2 * kEvents;
      },
      20s, 50ms));
  INFO("receiver: " << records.dump().substr(0, 3000));
  CHECK(records.size() == 2 * kEvents);

  std::map<std::string, std::vector<json>> by_id;
  for (const json& r : records) {
    const std::string id = header(r, "webhook-id");
    // The event id, as in Idempotency-Key: the same on every attempt.
    CHECK(id == header(r, "idempotency-key"));
    by_id[id].push_back(r);
    // Two signatures, one per secret, each accepted by the reference verifier for its
    // secret; the same headers over a changed body are refused.
    const std::string signature = header(r, "webhook-signature");
    CHECK(signature.rfind("v1,", 0) == 0);
    CHECK(signature.find(" v1,") != std::string::npos);
    for (int s = 0; s < 2; ++s) {
      INFO("secret " << s);
      CHECK(r["verdicts"]["standard"][s]["ok"] == true);
      CHECK(r["verdicts"]["standard_tampered"][s]["ok"] == false);
      CHECK(r["verdicts"]["standard_tampered"][s]["error"] == "No matching signature found");
    }
    const int64_t ts = std::stoll(header(r, "webhook-timestamp"));
    CHECK(std::llabs(ts - now_seconds()) < 60);
  }
  REQUIRE(by_id.size() == kEvents);
  for (const auto& [id, attempts] : by_id) {
    INFO("event " << id);
    REQUIRE(attempts.size() == 2);
    CHECK(attempts[0]["status"] == 503);
    CHECK(attempts[1]["status"] == 200);
    CHECK(attempts[0]["body"] == attempts[1]["body"]);
    // Signed afresh: the re-send has its own, later timestamp and so its own signatures.
    CHECK(std::stoll(header(attempts[1], "webhook-timestamp")) > std::stoll(header(attempts[0], "webhook-timestamp")));
    CHECK(header(attempts[1], "webhook-signature") != header(attempts[0], "webhook-signature"));
  }
}

// GitHub's scheme, and headers from expressions beside a fixed one: an event whose
// expression gives no string is dead-lettered with the reason, the others are delivered.
TEST_CASE("GitHub signatures verify with octokit, header expressions are sent or dead-letter with the reason",
          "[integration][signing]") {
  const std::string client = GENERATE(as<std::string>{}, "weir", "curl");
  INFO("client " << client);
  NatsServer nats;
  Receiver receiver(json{{"github", kGithubSecret}});
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"events.yaml", http_flow("events", "/in/events", receiver.url("/gh"),
                                           "sign: { scheme: github, secret_env: GH_SECRET }, "
                                           "headers: { X-Event-Type: { expr: \"'order.' + this.type\" }, "
                                           "X-Fixed: abc, X-Empty: \"\" }, timeout: 2s")}},
       .env = {{"GH_SECRET", kGithubSecret}, {"WEIR_HTTP_SINK_CLIENT", client == "curl" ? "curl" : "weir"}}});
  weir.start();
  INFO(weir.describe());

  const std::vector<std::string> types = {"created", "paid", "shipped"};
  for (const std::string& t : types) {
    REQUIRE(weir.post("/in/events", json{{"type", t}}.dump()).status == 202);
  }
  // 'order.' + null fails: no string for the header.
  auto bad = weir.post("/in/events", json{{"kind", "no type"}}.dump());
  REQUIRE(bad.status == 202);
  const std::string bad_id = id_from_reply(bad);

  json records;
  REQUIRE(wait_until(
      [&] {
        records = receiver.requests();
        return records.size() >= types.size();
      },
      20s, 50ms));
  json dead;
  REQUIRE(wait_until(
      [&] {
        auto r = weir.admin("GET", "/dlq");
        dead = r.status == 200 ? json::parse(r.body) : json::array();
        return dead.size() >= 1;
      },
      20s, 50ms));
  INFO("receiver: " << records.dump().substr(0, 3000) << "\ndlq: " << dead.dump());
  std::set<std::string> seen_types;
  for (const json& r : records) {
    CHECK(r["verdicts"]["github"] == true);
    CHECK(r["verdicts"]["github_tampered"] == false);
    CHECK(header(r, "x-hub-signature-256").rfind("sha256=", 0) == 0);
    CHECK(header(r, "x-fixed") == "abc");
    CHECK(r["headers"].contains("x-empty"));
    CHECK(header(r, "x-empty").empty());
    CHECK(!r["headers"].contains("webhook-signature"));
    const json body = json::parse(r["body"].get<std::string>());
    CHECK(header(r, "x-event-type") == "order." + body.value("type", "?"));
    seen_types.insert(header(r, "x-event-type"));
  }
  CHECK(records.size() == types.size());
  CHECK(seen_types == std::set<std::string>{"order.created", "order.paid", "order.shipped"});
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].value("id", "") == bad_id);
  const std::string reason = dead[0].value("reason", "");
  CHECK(reason.find("header X-Event-Type: expression `'order.' + this.type`") != std::string::npos);
  CHECK(dead[0]["deliveries"] == 1);  // dead at once, not retried
}

// A signing sink without its secret does not start: the error names the variable, and a
// malformed secret is described without being quoted.
TEST_CASE("a signing sink refuses to start without a usable secret and never prints it", "[integration][signing]") {
  NatsServer nats;
  const std::string flow = http_flow("orders", "/in/orders", "http://127.0.0.1:9/hook",
                                     "sign: { scheme: standard, secret_env: SIGN_SECRET }, timeout: 2s");
  {
    WeirProcess weir({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}});
    weir.spawn();
    const bool ready = weir.wait_ready(15s);
    INFO(weir.describe());
    CHECK_FALSE(ready);
    CHECK(weir.log().find("environment variable SIGN_SECRET is not set") != std::string::npos);
  }
  const std::string bad = "whsec_not*base64!";
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}, .env = {{"SIGN_SECRET", bad}}});
  weir.spawn();
  const bool ready = weir.wait_ready(15s);
  INFO(weir.describe());
  CHECK_FALSE(ready);
  CHECK(weir.log().find("environment variable SIGN_SECRET") != std::string::npos);
  CHECK(weir.log().find("not base64") != std::string::npos);
  CHECK(weir.log().find("not*base64") == std::string::npos);
}
