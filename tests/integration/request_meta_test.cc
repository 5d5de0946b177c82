// Request metadata in flows (docs/adr/0312-request-metadata.md): http-in stores the method,
// path, query and chosen headers beside the body; flows and sink header expressions read
// them as `meta`; they travel through dead letters and their replay. Through real weir,
// nats-server and weir-sink processes.
#include <catch2/catch.hpp>

#include "tests/integration/form_encoding.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

const std::string kSecret = "It's a Secret to Everybody";

// The one request a sink got for the event whose "id" is `id`; null when none.
json request_for(const SinkProcess& sink, const std::string& id) {
  for (const auto& r : sink.requests(100)) {
    json b = body_of(r);
    if (b.is_object() && b.value("id", "") == id) return r;
  }
  return nullptr;
}

// A GitHub delivery as GitHub sends it with the form content type: signed over the raw form.
HttpReply github_delivery(const WeirProcess& weir, const std::string& target, const std::string& event,
                          const std::string& delivery, const json& payload) {
  const std::string body = "payload=" + form_encode(payload.dump());
  return weir.post(target, body,
                   {"Content-Type: application/x-www-form-urlencoded", "X-GitHub-Event: " + event,
                    "X-GitHub-Delivery: " + delivery, "X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kSecret, body),
                    "User-Agent: GitHub-Hookshot/044aadd", "Authorization: Bearer not-to-be-stored"});
}

}  // namespace

TEST_CASE("a signed GitHub form delivery is routed by X-GitHub-Event, with query, method and the event type header",
          "[integration][meta]") {
  NatsServer nats;
  SinkProcess pushes, issues;
  auto sink = [](const SinkProcess& s, const std::string& path) {
    return "{ http: { url: \"" + s.url(path) +
           "\", timeout: 2s, headers: { X-GitHub-Event: { expr: \"meta.headers['x-github-event']\" } } } }";
  };
  const std::string flow =
      "flow: github\n"
      "from: { http: { path: /in/github, hmac: { secret_env: GH_SECRET, scheme: github } } }\n"
      "steps:\n"
      "  - set:\n"
      "      id: this.payload.id\n"
      "      event: \"meta.headers['x-github-event']\"\n"
      "      tenant: meta.query.tenant\n"
      "      method: meta.method\n"
      "      path: meta.path\n"
      "      agent: \"meta.headers['user-agent']\"\n"
      "      auth: \"meta.headers['authorization']\"\n"
      "      sig: \"meta.headers['x-hub-signature-256']\"\n"
      "  - branch:\n"
      "      - { when: \"meta.headers['x-github-event'] == 'push'\", to: pushes }\n"
      "      - { to: issues }\n"
      "to:\n"
      "  pushes: " +
      sink(pushes, "/pushes") + "\n  issues: " + sink(issues, "/issues") + "\n";
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"github.yaml", flow}}, .env = {{"GH_SECRET", kSecret}}});
  weir.start();
  INFO(weir.describe());

  REQUIRE(github_delivery(weir, "/in/github?tenant=acme", "push", "d-push-a",
                          {{"id", "m-push"}, {"ref", "refs/heads/main"}})
              .status == 202);
  REQUIRE(github_delivery(weir, "/in/github?tenant=acme&x=1", "issues", "d-iss-a",
                          {{"id", "m-issues"}, {"action", "opened"}})
              .status == 202);
  // Bad query escapes are refused as a bad body is: nothing stored.
  auto bad = github_delivery(weir, "/in/github?tenant=%G1", "push", "d-bad", {{"id", "m-bad"}});
  CHECK(bad.status == 400);
  CHECK(bad.body.find("query is not valid form data at byte 8: a '%' not followed by two hex digits") !=
        std::string::npos);

  REQUIRE(wait_until([&] { return pushes.ids().count("m-push") && issues.ids().count("m-issues"); }, 20s, 50ms));
  json push = request_for(pushes, "m-push");
  json b = body_of(push);
  CHECK(b["event"] == "push");
  CHECK(b["tenant"] == "acme");
  CHECK(b["method"] == "POST");
  CHECK(b["path"] == "/in/github");
  CHECK(b["agent"] == "GitHub-Hookshot/044aadd");
  CHECK(b["auth"].is_null());  // credentials and signatures are never stored
  CHECK(b["sig"].is_null());
  CHECK(b["payload"]["ref"] == "refs/heads/main");  // the form body decoded beside it (ADR 0308)
  CHECK(header_of(push, "X-GitHub-Event") == "push");

  json iss = request_for(issues, "m-issues");
  CHECK(body_of(iss)["event"] == "issues");
  CHECK(header_of(iss, "X-GitHub-Event") == "issues");
  // Each went to its own receiver only.
  CHECK(pushes.ids() == std::set<std::string>{"m-push"});
  CHECK(issues.ids() == std::set<std::string>{"m-issues"});
  CHECK(weir.log().find("not-to-be-stored") == std::string::npos);
}

TEST_CASE("a pass-through flow keeps the body byte-exact while its sink reads meta, through a dead letter and replay",
          "[integration][meta]") {
  NatsServer nats;
  SinkProcess sink({"--record", "100"});
  const std::string flow =
      "flow: plain\nfrom: { http: { path: /in/plain, meta_headers: [X-Tenant] } }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/plain") +
      "\", retries: 0, timeout: 2s, headers: {"
      " X-Event: { expr: \"meta.headers['x-github-event'] + '/' + meta.query.v\" },"
      " X-Tenant: { expr: \"meta.headers['x-tenant']\" } } } } }\n";
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"plain.yaml", flow}}});
  weir.start();
  INFO(weir.describe());

  // Spacing and number spelling a re-serialisation would change.
  const std::string body = "{ \"id\" : \"p-1\",  \"n\": 1.50 }";
  const std::vector<std::string> headers{"Content-Type: application/json", "X-GitHub-Event: ping", "X-Tenant: t-7",
                                         "Idempotency-Key: p-1"};
  REQUIRE(weir.post("/in/plain?v=3", body, headers).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("p-1") > 0; }, 20s, 50ms));
  json r = request_for(sink, "p-1");
  CHECK(r.at("body").get<std::string>() == body);
  CHECK(header_of(r, "X-Event") == "ping/3");
  CHECK(header_of(r, "X-Tenant") == "t-7");

  // Past the bounds: refused with the reason, nothing stored.
  std::string many = "/in/plain?";
  for (int i = 0; i < 65; ++i) many += "p" + std::to_string(i) + "=1&";
  auto too_many = weir.post(many, R"({"id":"p-many"})", {"Content-Type: application/json"});
  CHECK(too_many.status == 400);
  CHECK(too_many.body.find("query has 65 parameters, more than the 64 stored with an event") != std::string::npos);
  auto too_big = weir.post("/in/plain", R"({"id":"p-big"})",
                           {"Content-Type: application/json", "X-Tenant: " + std::string(8300, 't')});
  CHECK(too_big.status == 400);
  CHECK(too_big.body.find("request metadata (method, path, query and stored headers) is ") != std::string::npos);
  CHECK(too_big.body.find(" bytes as JSON, more than the 8192 stored with an event") != std::string::npos);

  // The receiver refuses the next one: a dead letter, which keeps the metadata.
  sink.control({{"status", 400}});
  const std::string body2 = "{\"id\":\"p-2\"}";
  REQUIRE(weir.post("/in/plain?v=4", body2,
                    {"Content-Type: application/json", "X-GitHub-Event: star", "X-Tenant: t-8", "Idempotency-Key: p-2"})
              .status == 202);
  json dead;
  REQUIRE(wait_until(
      [&] {
        auto list = weir.admin("GET", "/dlq?limit=10");
        if (list.status != 200) return false;
        for (const auto& d : json::parse(list.body)) {
          if (d.value("id", "") == "p-2") dead = d;
        }
        return dead.is_object();
      },
      20s, 100ms));
  CHECK(dead["meta"]["headers"]["x-github-event"] == "star");
  CHECK(dead["meta"]["query"]["v"] == "4");
  CHECK(dead["meta"]["method"] == "POST");
  // Posted before p-2 and refused: neither reached the receiver.
  CHECK(request_for(sink, "p-many").is_null());
  CHECK(request_for(sink, "p-big").is_null());

  // Replayed into a receiver that answers again: delivered with the headers from its metadata.
  sink.control({{"status", 204}});
  sink.reset();
  auto replayed = weir.admin("POST", "/dlq/replay", json{{"ids", {"p-2"}}}.dump());
  INFO(replayed.body);
  REQUIRE(replayed.status == 200);
  REQUIRE(wait_until([&] { return sink.ids().count("p-2") > 0; }, 20s, 50ms));
  json r2 = request_for(sink, "p-2");
  CHECK(r2.at("body").get<std::string>() == body2);
  CHECK(header_of(r2, "X-Event") == "star/4");
  CHECK(header_of(r2, "X-Tenant") == "t-8");
}
