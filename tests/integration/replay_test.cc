// A captured webhook replayed inside the signature's
// timestamp tolerance stores nothing new. Standard Webhooks: the signed webhook-id is
// the event id, whatever Idempotency-Key is sent with it; GitHub: X-GitHub-Delivery;
// JetStream's dedup window (the streams' duplicate_window, read from nats-server) spans
// the tolerance plus clock skew.
#include <catch2/catch.hpp>
#include <ctime>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::http_request;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

const std::string kGithubSecret = "replay-gh-secret";
const std::string kStandardKey = "replay-standard-key-0123456789ab";  // raw key bytes

std::vector<std::string> standard_headers(const std::string& id, long ts, const std::string& body) {
  std::string t = std::to_string(ts);
  return {"webhook-id: " + id, "webhook-timestamp: " + t,
          "webhook-signature: v1," + hmac_sha256_base64(kStandardKey, id + "." + t + "." + body)};
}

// How many requests weir-sink received whose body "id" is `id`.
int deliveries_of(const SinkProcess& sink, const std::string& id) {
  int n = 0;
  for (const auto& r : sink.requests(10000)) {
    json b = body_of(r);
    if (b.is_object() && b.value("id", "") == id) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("replayed webhooks are stored once: webhook-id and X-GitHub-Delivery are the event ids",
          "[integration][ingress][replay]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({
      .nats_url = nats.url(),
      .flows =
          {
              {"standard.yaml",
               http_flow("standard", "/in/standard", sink.url("/standard"), "retries: 8, " WEIR_TEST_RETRY,
                         "hmac: { secret_env: SW_SECRET, scheme: standard }")},
              {"github.yaml", http_flow("github", "/in/github", sink.url("/github"), "retries: 8, " WEIR_TEST_RETRY,
                                        "hmac: { secret_env: GH_SECRET }")},
          },
      .env = {{"SW_SECRET", "whsec_" + base64(kStandardKey)}, {"GH_SECRET", kGithubSecret}},
  });
  weir.start();
  INFO(weir.describe());
  const long now = static_cast<long>(std::time(nullptr));

  // Standard Webhooks: the original, a verbatim replay, and replays with a fresh
  // Idempotency-Key (unsigned) — one event, id msg_replay_1.
  const std::string body = R"({"id":"sw-replayed","amount":100})";
  auto headers = standard_headers("msg_replay_1", now, body);
  auto first = weir.post("/in/standard", body, headers);
  REQUIRE(first.status == 202);
  CHECK(id_from_reply(first) == "msg_replay_1");
  auto verbatim = weir.post("/in/standard", body, headers);
  CHECK(verbatim.status == 202);
  CHECK(id_from_reply(verbatim) == "msg_replay_1");
  for (int i = 0; i < 3; ++i) {
    auto h = headers;
    h.push_back("Idempotency-Key: fresh-key-" + std::to_string(i));
    auto r = weir.post("/in/standard", body, h);
    CHECK(r.status == 202);
    CHECK(id_from_reply(r) == "msg_replay_1");
  }
  // A second, genuinely new message is its own event.
  const std::string body2 = R"({"id":"sw-second"})";
  auto second = weir.post("/in/standard", body2, standard_headers("msg_replay_2", now, body2));
  CHECK(second.status == 202);
  CHECK(id_from_reply(second) == "msg_replay_2");

  // GitHub: keyed on X-GitHub-Delivery when it is sent.
  const std::string gh_body = R"({"id":"gh-replayed","action":"opened"})";
  const std::vector<std::string> gh = {"X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kGithubSecret, gh_body),
                                       "X-GitHub-Delivery: 72d3162e-cc78-11e3-81ab-4c9367dc0958"};
  for (int i = 0; i < 3; ++i) {
    auto r = weir.post("/in/github", gh_body, gh);
    CHECK(r.status == 202);
    CHECK(id_from_reply(r) == "72d3162e-cc78-11e3-81ab-4c9367dc0958");
  }
  // Without the header the sender's Idempotency-Key (or a fresh id) is used, as before.
  const std::string gh_body2 = R"({"id":"gh-keyed"})";
  auto keyed = weir.post(
      "/in/github", gh_body2,
      {"X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kGithubSecret, gh_body2), "Idempotency-Key: gh-own-key"});
  CHECK(keyed.status == 202);
  CHECK(id_from_reply(keyed) == "gh-own-key");
  // An over-long delivery id is refused like an over-long Idempotency-Key.
  CHECK(weir.post("/in/github", gh_body2,
                  {"X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kGithubSecret, gh_body2),
                   "X-GitHub-Delivery: " + std::string(201, 'd')})
            .status == 400);

  // An id the sinks could not send on (not printable ASCII) is refused at the door.
  CHECK(weir.post("/in/github", gh_body2,
                  {"X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kGithubSecret, gh_body2),
                   "Idempotency-Key: key\x01with-control"})
            .status == 400);
  CHECK(weir.post("/in/github", gh_body2,
                  {"X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kGithubSecret, gh_body2),
                   "Idempotency-Key: caf\xc3\xa9"})
            .status == 400);

  // Each event reached the sink once: the replays stored nothing.
  std::set<std::string> want{"sw-replayed", "sw-second", "gh-replayed", "gh-keyed"};
  REQUIRE(wait_until([&] { return missing(want, sink.ids()).empty(); }, 20s, 50ms));
  // Flush: events posted after the replays, delivered, mean the replays had their chance.
  for (const std::string flow : {"standard", "github"}) {
    const std::string b = R"({"id":"flush-)" + flow + R"("})";
    std::vector<std::string> h;
    if (flow == "standard") h = standard_headers("msg_flush", now, b);
    else h = {"X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kGithubSecret, b)};
    REQUIRE(weir.post("/in/" + flow, b, h).status == 202);
  }
  REQUIRE(
      wait_until([&] { return sink.ids().count("flush-standard") && sink.ids().count("flush-github"); }, 20s, 50ms));
  CHECK(deliveries_of(sink, "sw-replayed") == 1);
  CHECK(deliveries_of(sink, "gh-replayed") == 1);
  CHECK(sink.stat("duplicates") == 0);
}

TEST_CASE("the dedup window spans the webhook timestamp tolerance plus skew", "[integration][ingress][replay]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}}});
  weir.start();
  INFO(weir.describe());
  // What nats-server itself says about every stream weir created.
  auto jsz = http_request(
      "GET", "http://127.0.0.1:" + std::to_string(nats.monitor_port()) + "/jsz?accounts=true&streams=true&config=true");
  REQUIRE(jsz.status == 200);
  json j = json::parse(jsz.body);
  int streams = 0;
  for (const auto& account : j.value("account_details", json::array())) {
    for (const auto& stream : account.value("stream_detail", json::array())) {
      const json& config = stream.at("config");
      INFO(stream.value("name", "?") << ": " << config.dump());
      if (stream.value("name", "").rfind("KV_", 0) == 0) continue;  // KV buckets: not event streams
      ++streams;
      // 5 min tolerance (Standard Webhooks) + 1 min of clock skew, in nanoseconds.
      CHECK(config.value("duplicate_window", int64_t{0}) >= int64_t{360} * 1000 * 1000 * 1000);
    }
  }
  CHECK(streams > 0);
}
