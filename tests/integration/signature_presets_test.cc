// http-in's signature presets (docs/connectors.md, `from.http.hmac`; docs/adr/0311-signature-presets.md):
// deliveries signed as Stripe, Slack and Shopify sign them — Stripe's header made by its own
// `stripe` npm package, Slack's and Shopify's as their documentation computes them
// (tests/integration/npm/sign.mjs) — are stored; forgeries and replays are refused with 401
// and never reach the receiver. Through real weir, nats-server and weir-sink.
#include <catch2/catch.hpp>
#include <set>

#include "tests/integration/npm_packages.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

const std::string kStripeSecret = "whsec_presets_stripe_test";
const std::string kSlackSecret = "8f742231b10e8888abcd99yyyzzz85a5";
const std::string kShopifySecret = "shpss_presets_shopify_test";

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string sign(const std::string& scheme, const std::string& secret, const std::string& body, int64_t timestamp) {
  return node_output("sign.mjs",
                     json{{"scheme", scheme}, {"secret", secret}, {"body", body}, {"timestamp", timestamp}}.dump());
}

std::string flow(const std::string& name, const std::string& scheme, const std::string& env,
                 const std::string& sink_url, const std::string& steps = "") {
  return "flow: " + name + "\nfrom: { http: { path: /in/" + name + ", hmac: { secret_env: " + env +
         ", scheme: " + scheme + " } } }\n" + steps + "to: { out: { http: { url: \"" + sink_url +
         "\", timeout: 2s } } }\n";
}

}  // namespace

TEST_CASE(
    "signature presets: Stripe, Slack and Shopify deliveries signed as their senders sign them are stored, "
    "forgeries and replays refused",
    "[integration][presets]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"stripe.yaml", flow("stripe", "stripe", "STRIPE_SECRET", sink.url("/stripe"))},
                 // A slash command is a form: the flow reads its fields (docs/adr/0308-form-bodies.md).
                 {"slack.yaml", flow("slack", "slack", "SLACK_SECRET", sink.url("/slack"),
                                     "steps:\n  - set: { id: this.trigger_id, command: this.command }\n")},
                 {"shopify.yaml", flow("shopify", "shopify", "SHOPIFY_SECRET", sink.url("/shopify"))}},
       .env = {{"STRIPE_SECRET", kStripeSecret}, {"SLACK_SECRET", kSlackSecret}, {"SHOPIFY_SECRET", kShopifySecret}}});
  weir.start();
  INFO(weir.describe());
  const int64_t now = now_seconds();
  const std::vector<std::string> json_type{"Content-Type: application/json"};
  auto with = [](std::vector<std::string> h, const std::string& more) {
    h.push_back(more);
    return h;
  };

  // Stripe: t=<now>,v1=<hex> from stripe's own library; the tolerance is 300 s.
  const std::string stripe_body = R"({"id":"evt_ok","type":"charge.succeeded"})";
  const std::string stripe_sig = sign("stripe", kStripeSecret, stripe_body, now);
  CHECK(stripe_sig.rfind("t=" + std::to_string(now) + ",v1=", 0) == 0);
  CHECK(weir.post("/in/stripe", stripe_body, with(json_type, "Stripe-Signature: " + stripe_sig)).status == 202);
  auto r = weir.post("/in/stripe", R"({"id":"evt_forged","type":"charge.succeeded"})",
                     with(json_type, "Stripe-Signature: " + stripe_sig));
  CHECK(r.status == 401);
  CHECK(r.body.find("wrong signature in Stripe-Signature") != std::string::npos);
  const std::string old_body = R"({"id":"evt_replayed","type":"charge.succeeded"})";
  r = weir.post("/in/stripe", old_body,
                with(json_type, "Stripe-Signature: " + sign("stripe", kStripeSecret, old_body, now - 600)));
  CHECK(r.status == 401);
  CHECK(r.body.find("more than 300 s from now") != std::string::npos);
  CHECK(
      weir.post("/in/stripe", R"({"id":"evt_wrong_key"})",
                with(json_type, "Stripe-Signature: " + sign("stripe", "whsec_other", R"({"id":"evt_wrong_key"})", now)))
          .status == 401);
  r = weir.post("/in/stripe", R"({"id":"evt_unsigned"})", json_type);
  CHECK(r.status == 401);
  CHECK(r.body.find("missing Stripe-Signature header") != std::string::npos);

  // Slack: a slash command's form, X-Slack-Signature over "v0:<timestamp>:<body>".
  const std::string slack_body =
      "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&command=%2Fwebhook-collect&text=&trigger_id=trigger-ok";
  const std::vector<std::string> form{"Content-Type: application/x-www-form-urlencoded"};
  auto slack_headers = [&](const std::string& body, int64_t ts, const std::string& secret) {
    return std::vector<std::string>{form[0], "X-Slack-Request-Timestamp: " + std::to_string(ts),
                                    "X-Slack-Signature: " + sign("slack", secret, body, ts)};
  };
  CHECK(weir.post("/in/slack", slack_body, slack_headers(slack_body, now, kSlackSecret)).status == 202);
  const std::string slack_forged = "token=x&command=%2Fdeploy&trigger_id=trigger-forged";
  auto forged_headers = slack_headers(slack_body, now, kSlackSecret);  // another body's signature
  r = weir.post("/in/slack", slack_forged, forged_headers);
  CHECK(r.status == 401);
  CHECK(r.body.find("wrong signature in X-Slack-Signature") != std::string::npos);
  const std::string slack_old = "command=%2Fold&trigger_id=trigger-replayed";
  r = weir.post("/in/slack", slack_old, slack_headers(slack_old, now - 600, kSlackSecret));
  CHECK(r.status == 401);
  CHECK(r.body.find("X-Slack-Request-Timestamp is more than 300 s from now") != std::string::npos);
  r = weir.post("/in/slack", slack_body, {form[0], "X-Slack-Signature: v0=00"});
  CHECK(r.status == 401);
  CHECK(r.body.find("missing X-Slack-Request-Timestamp header") != std::string::npos);

  // Shopify: base64 over the body; no timestamp, so a resend is caught by its webhook id.
  const std::string shopify_body = R"({"id":"shop-ok","email":"jon@example.com"})";
  const auto shopify_headers = with(
      with(json_type, "X-Shopify-Hmac-Sha256: " + sign("shopify", kShopifySecret, shopify_body, 0)),
      "X-Shopify-Webhook-Id: b54557e4-bdd9-4b37-8a5f-bf7d70bcd043");
  auto first = weir.post("/in/shopify", shopify_body, shopify_headers);
  auto again = weir.post("/in/shopify", shopify_body, shopify_headers);
  REQUIRE(first.status == 202);
  REQUIRE(again.status == 202);
  CHECK(json::parse(first.body).at("id") == "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043");
  CHECK(json::parse(again.body).at("id") == json::parse(first.body).at("id"));
  r = weir.post("/in/shopify", R"({"id":"shop-forged","email":"eve@example.com"})",
                with(json_type, "X-Shopify-Hmac-Sha256: " + sign("shopify", kShopifySecret, shopify_body, 0)));
  CHECK(r.status == 401);
  CHECK(r.body.find("wrong signature in X-Shopify-Hmac-Sha256") != std::string::npos);

  // What the receiver got: each accepted delivery once, nothing forged, the form read.
  const std::set<std::string> want{"evt_ok", "trigger-ok", "shop-ok"};
  REQUIRE(wait_until([&] { return sink.ids() == want; }, 20s, 50ms));
  bool slack_read = false;
  for (const auto& req : sink.requests(100)) {
    const json b = body_of(req);
    if (b.is_object() && b.value("id", "") == "trigger-ok") slack_read = b.value("command", "") == "/webhook-collect";
  }
  CHECK(slack_read);
  CHECK(sink.stat("received") == 3);
  CHECK(sink.stat("duplicates") == 0);
  // Secrets are never in weir's log.
  const std::string log = weir.log();
  for (const auto& s : {kStripeSecret, kSlackSecret, kShopifySecret}) CHECK(log.find(s) == std::string::npos);
}
