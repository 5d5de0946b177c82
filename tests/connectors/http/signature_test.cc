#include "connectors/http/signature.h"

#include <catch2/catch.hpp>

#include <string>

using weir::connectors::github_signature;
using weir::connectors::shopify_signature;
using weir::connectors::slack_signature;
using weir::connectors::standard_webhook_signature;
using weir::connectors::stripe_signature;
using weir::connectors::valid_standard_webhook_secret;
using weir::connectors::verify_github_signature;
using weir::connectors::verify_shopify_signature;
using weir::connectors::verify_slack_signature;
using weir::connectors::verify_standard_webhook;
using weir::connectors::verify_stripe_signature;

namespace {

// GitHub's documented example.
constexpr const char* kGithubSecret = "It's a Secret to Everybody";
constexpr const char* kGithubBody = "Hello, World!";
constexpr const char* kGithubHex = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

// The Standard Webhooks reference vector (spec and reference libraries).
constexpr const char* kSwSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr const char* kSwId = "msg_p5jXN8AQM9LWM0D4loKWxJek";
constexpr const char* kSwTimestamp = "1614265330";
constexpr int64_t kSwNow = 1614265330;
constexpr const char* kSwBody = R"({"test": 2432232314})";
constexpr const char* kSwSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

bool sw_verify(std::string_view header, int64_t now = kSwNow, std::string* why = nullptr,
               std::string_view body = kSwBody, std::string_view timestamp = kSwTimestamp, std::string_view id = kSwId,
               std::string_view secret = kSwSecret) {
  return verify_standard_webhook(secret, id, timestamp, body, header, now, why);
}

std::string sw_why(std::string_view header, int64_t now = kSwNow, std::string_view timestamp = kSwTimestamp,
                   std::string_view id = kSwId, std::string_view secret = kSwSecret) {
  std::string why;
  CHECK_FALSE(verify_standard_webhook(secret, id, timestamp, kSwBody, header, now, &why));
  return why;
}

}  // namespace

TEST_CASE("github signature: documented vector verifies", "[signature]") {
  const std::string header = std::string("sha256=") + kGithubHex;
  CHECK(github_signature(kGithubSecret, kGithubBody) == header);
  CHECK(verify_github_signature(kGithubSecret, kGithubBody, header));
  CHECK(verify_github_signature(kGithubSecret, kGithubBody, " " + header + " "));

  std::string upper = header;
  for (size_t i = 7; i < upper.size(); ++i) upper[i] = static_cast<char>(std::toupper(upper[i]));
  CHECK(verify_github_signature(kGithubSecret, kGithubBody, upper));
}

TEST_CASE("github signature: wrong secret, body or header is rejected", "[signature]") {
  const std::string header = std::string("sha256=") + kGithubHex;
  CHECK_FALSE(verify_github_signature("another secret", kGithubBody, header));
  CHECK_FALSE(verify_github_signature(kGithubSecret, "Hello, World?", header));
  CHECK_FALSE(verify_github_signature(kGithubSecret, "", header));
  CHECK_FALSE(verify_github_signature("", kGithubBody, header));

  std::string flipped = header;
  flipped.back() = flipped.back() == '7' ? '8' : '7';
  CHECK_FALSE(verify_github_signature(kGithubSecret, kGithubBody, flipped));

  CHECK_FALSE(verify_github_signature(kGithubSecret, kGithubBody, ""));
  CHECK_FALSE(verify_github_signature(kGithubSecret, kGithubBody, kGithubHex));  // no prefix
  CHECK_FALSE(verify_github_signature(kGithubSecret, kGithubBody, std::string("sha1=") + kGithubHex));
  CHECK_FALSE(verify_github_signature(kGithubSecret, kGithubBody, header.substr(0, header.size() - 2)));
  CHECK_FALSE(verify_github_signature(kGithubSecret, kGithubBody, header + "00"));
  std::string non_hex = header;
  non_hex[10] = 'g';
  CHECK_FALSE(verify_github_signature(kGithubSecret, kGithubBody, non_hex));
  CHECK_FALSE(verify_github_signature(kGithubSecret, kGithubBody, "sha256="));
}

TEST_CASE("standard webhooks: reference vector verifies", "[signature]") {
  CHECK(standard_webhook_signature(kSwSecret, kSwId, kSwTimestamp, kSwBody) == kSwSignature);
  std::string why = "untouched";
  CHECK(sw_verify(kSwSignature, kSwNow, &why));
  CHECK(why == "untouched");
}

TEST_CASE("standard webhooks: key rotation, any v1 entry may match", "[signature]") {
  const std::string old_key_sig = standard_webhook_signature("whsec_b2xkIGtleSBieXRlcyBoZXJl", kSwId, kSwTimestamp,
                                                             kSwBody);
  REQUIRE_FALSE(old_key_sig.empty());
  CHECK(sw_verify(old_key_sig + " " + kSwSignature));
  CHECK(sw_verify(std::string(kSwSignature) + " " + old_key_sig));
  CHECK(sw_verify("v1a,c29tZXRoaW5nIGVsc2U= " + std::string(kSwSignature)));  // unknown version skipped
  CHECK(sw_verify("v1,!!!! " + std::string(kSwSignature)));                   // a malformed entry is skipped
  CHECK(sw_verify(std::string(kSwSignature) + "  "));
  CHECK_FALSE(sw_verify(old_key_sig));
  CHECK(sw_why(old_key_sig) == "no matching signature");
}

TEST_CASE("standard webhooks: timestamps more than 5 minutes off are rejected", "[signature]") {
  CHECK(sw_verify(kSwSignature, kSwNow + 300));
  CHECK(sw_verify(kSwSignature, kSwNow - 300));
  CHECK(sw_why(kSwSignature, kSwNow + 301) == "webhook-timestamp too old");
  CHECK(sw_why(kSwSignature, kSwNow - 301) == "webhook-timestamp too new");
  CHECK(sw_why(kSwSignature, kSwNow + 86400 * 365) == "webhook-timestamp too old");
}

TEST_CASE("standard webhooks: malformed headers and secrets are rejected with a reason", "[signature]") {
  CHECK(sw_why(kSwSignature, kSwNow, "") == "missing webhook-timestamp");
  CHECK(sw_why(kSwSignature, kSwNow, "abc") == "malformed webhook-timestamp");
  CHECK(sw_why(kSwSignature, kSwNow, "1614265330.5") == "malformed webhook-timestamp");
  CHECK(sw_why(kSwSignature, kSwNow, "-1614265330") == "malformed webhook-timestamp");
  CHECK(sw_why(kSwSignature, kSwNow, "99999999999999999999999") == "malformed webhook-timestamp");
  CHECK(sw_why(kSwSignature, kSwNow, kSwTimestamp, "") == "missing webhook-id");
  CHECK(sw_why("") == "missing webhook-signature");
  CHECK(sw_why("v1,") == "no matching signature");
  CHECK(sw_why("v1,!!!!") == "no matching signature");
  CHECK(sw_why("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE") == "no matching signature");  // unpadded
  CHECK(sw_why("garbage") == "no v1 signature in webhook-signature");
  CHECK(sw_why("v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=") == "no v1 signature in webhook-signature");
  CHECK(sw_why(kSwSignature, kSwNow, kSwTimestamp, kSwId, "whsec_%%%%") == "unusable secret");
  CHECK(sw_why(kSwSignature, kSwNow, kSwTimestamp, kSwId, "whsec_") == "unusable secret");
  CHECK(sw_why(kSwSignature, kSwNow, kSwTimestamp, kSwId, "") == "unusable secret");
}

TEST_CASE("standard webhooks: a secret is checked before use, the reason never quotes it", "[signature]") {
  std::string why;
  CHECK(valid_standard_webhook_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &why));
  CHECK(valid_standard_webhook_secret("raw-secret-bytes", &why));
  CHECK_FALSE(valid_standard_webhook_secret("", &why));
  CHECK(why == "the secret is empty");
  CHECK_FALSE(valid_standard_webhook_secret("whsec_", &why));
  CHECK(why == "the secret is whsec_ with no key after it");
  for (const std::string bad : {"whsec_%%%%SECRETX", "whsec_SECRETX", "whsec_SECR=TXY", "whsec_ SECRETX"}) {
    INFO(bad);
    CHECK_FALSE(valid_standard_webhook_secret(bad, &why));
    CHECK(why.find("not base64") != std::string::npos);
    CHECK(why.find("SECR") == std::string::npos);
  }
  CHECK_FALSE(valid_standard_webhook_secret("", nullptr));
}

TEST_CASE("standard webhooks: tampered content is rejected", "[signature]") {
  std::string why;
  CHECK_FALSE(sw_verify(kSwSignature, kSwNow, &why, R"({"test": 2432232315})"));
  CHECK(why == "no matching signature");
  CHECK_FALSE(sw_verify(kSwSignature, kSwNow + 1, &why, kSwBody, "1614265331"));
  CHECK_FALSE(sw_verify(kSwSignature, kSwNow, &why, kSwBody, kSwTimestamp, "msg_other"));
}

TEST_CASE("standard webhooks: a secret without whsec_ is used as raw bytes", "[signature]") {
  const std::string raw = "raw-secret-bytes";
  const std::string sig = standard_webhook_signature(raw, kSwId, kSwTimestamp, kSwBody);
  REQUIRE(sig.rfind("v1,", 0) == 0);
  CHECK(sw_verify(sig, kSwNow, nullptr, kSwBody, kSwTimestamp, kSwId, raw));
  // The base64 text of the reference secret, taken as raw bytes, is a different key.
  CHECK_FALSE(
      sw_verify(kSwSignature, kSwNow, nullptr, kSwBody, kSwTimestamp, kSwId, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
}

TEST_CASE("standard webhooks: reasons never contain the secret or signatures", "[signature]") {
  for (const std::string header : {"v1,AAAA", "garbage", ""}) {
    std::string why;
    CHECK_FALSE(sw_verify(header, kSwNow + 1000, &why));
    CHECK_FALSE(why.empty());
    CHECK(why.find("MfKQ9r8") == std::string::npos);
    CHECK(why.find("g0hM9SsE") == std::string::npos);
  }
}

// ---- Sender presets ------------------------------------------------------------------

namespace {

// Slack's published example ("Verifying requests from Slack"): a slash command's form body.
constexpr const char* kSlackSecret = "8f742231b10e8888abcd99yyyzzz85a5";
constexpr const char* kSlackTimestamp = "1531420618";
constexpr int64_t kSlackNow = 1531420618;
constexpr const char* kSlackBody =
    "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&"
    "channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url="
    "https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id="
    "398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
constexpr const char* kSlackSignature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

// Stripe and Shopify publish no fixed vector; these were computed with Python's hmac module
// from the schemes' documented recipes, and Stripe's own library (the `stripe` npm package's
// webhooks.generateTestHeaderString) makes the same Stripe header. The integration test
// posts headers made by that library (tests/integration/signature_presets_test.cc).
constexpr const char* kStripeSecret = "whsec_test_secret";
constexpr const char* kStripeBody = R"({"id":"evt_1","type":"charge.succeeded"})";
constexpr int64_t kStripeT = 1700000000;
constexpr const char* kStripeV1 = "c0475716eb2200f1fe97fcf35a3c05d1fd4f8ba9a07a596730c8d18bb87c0672";
constexpr const char* kShopifySecret = "shpss_test_secret";
constexpr const char* kShopifyBody = R"({"id":820982911946154500,"email":"jon@example.com"})";
constexpr const char* kShopifyHmac = "LQu9AFhOFC+0Iupluvt6ufk/lMzPYLv8hHLp5zpb60g=";

std::string stripe_why(std::string_view header, int64_t now = kStripeT, std::string_view body = kStripeBody) {
  std::string why;
  CHECK_FALSE(verify_stripe_signature(kStripeSecret, body, header, now, &why));
  return why;
}

std::string slack_why(std::string_view header, int64_t now = kSlackNow, std::string_view ts = kSlackTimestamp,
                      std::string_view body = kSlackBody) {
  std::string why;
  CHECK_FALSE(verify_slack_signature(kSlackSecret, ts, body, header, now, &why));
  return why;
}

}  // namespace

TEST_CASE("slack signature: the published example verifies", "[signature][presets]") {
  CHECK(slack_signature(kSlackSecret, kSlackTimestamp, kSlackBody) == kSlackSignature);
  CHECK(verify_slack_signature(kSlackSecret, kSlackTimestamp, kSlackBody, kSlackSignature, kSlackNow, nullptr));
  CHECK(verify_slack_signature(kSlackSecret, kSlackTimestamp, kSlackBody, kSlackSignature, kSlackNow + 300, nullptr));
  CHECK(verify_slack_signature(kSlackSecret, kSlackTimestamp, kSlackBody, kSlackSignature, kSlackNow - 300, nullptr));
}

TEST_CASE("slack signature: replays, tampering and malformed headers are refused with a reason",
          "[signature][presets]") {
  CHECK(slack_why(kSlackSignature, kSlackNow + 301) ==
        "X-Slack-Request-Timestamp is more than 300 s from now (a replay, or the clock is off)");
  CHECK(slack_why(kSlackSignature, kSlackNow - 301) ==
        "X-Slack-Request-Timestamp is more than 300 s from now (a replay, or the clock is off)");
  std::string tampered = kSlackBody;
  tampered[6] = 'X';
  CHECK(slack_why(kSlackSignature, kSlackNow, kSlackTimestamp, tampered) == "wrong signature in X-Slack-Signature");
  // The timestamp is signed: another one with the same signature is a forgery.
  CHECK(slack_why(kSlackSignature, kSlackNow, "1531420619") == "wrong signature in X-Slack-Signature");
  CHECK(slack_why(kSlackSignature, kSlackNow, "15314x0618") == "X-Slack-Request-Timestamp is not unix seconds");
  CHECK(slack_why("v1=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503") ==
        "X-Slack-Signature is not v0=<hex>");
  CHECK(slack_why("v0=a2114d") == "wrong signature in X-Slack-Signature");
  std::string why;
  CHECK_FALSE(verify_slack_signature("", kSlackTimestamp, kSlackBody, kSlackSignature, kSlackNow, &why));
  CHECK(why == "no secret");
}

TEST_CASE("stripe signature: the documented scheme, rotation with several v1, the tolerance", "[signature][presets]") {
  const std::string header = "t=1700000000,v1=" + std::string(kStripeV1);
  CHECK(stripe_signature(kStripeSecret, kStripeT, kStripeBody) == header);
  CHECK(verify_stripe_signature(kStripeSecret, kStripeBody, header, kStripeT, nullptr));
  // A rotation (two v1, either may be the one signed with this secret) and a v0 to skip.
  const std::string other = "v1=" + std::string(64, 'a');
  CHECK(verify_stripe_signature(kStripeSecret, kStripeBody, "t=1700000000," + other + ",v1=" + kStripeV1, kStripeT,
                                nullptr));
  CHECK(verify_stripe_signature(kStripeSecret, kStripeBody, header + ",v0=deadbeef", kStripeT, nullptr));
  CHECK(verify_stripe_signature(kStripeSecret, kStripeBody, header, kStripeT + 300, nullptr));
  CHECK(stripe_why(header, kStripeT + 301) ==
        "Stripe-Signature timestamp is more than 300 s from now (a replay, or the clock is off)");
  CHECK(stripe_why(header, kStripeT - 301) ==
        "Stripe-Signature timestamp is more than 300 s from now (a replay, or the clock is off)");
}

TEST_CASE("stripe signature: tampering and malformed headers are refused with a reason", "[signature][presets]") {
  const std::string header = "t=1700000000,v1=" + std::string(kStripeV1);
  CHECK(stripe_why(header, kStripeT, R"({"id":"evt_1","type":"charge.refunded"})") ==
        "wrong signature in Stripe-Signature");
  CHECK(stripe_why("t=1700000001,v1=" + std::string(kStripeV1), kStripeT) == "wrong signature in Stripe-Signature");
  CHECK(stripe_why(std::string("v1=") + kStripeV1) == "Stripe-Signature has no t=<unix seconds>");
  CHECK(stripe_why("t=17e8,v1=" + std::string(kStripeV1)) == "Stripe-Signature has no t=<unix seconds>");
  CHECK(stripe_why("t=1700000000") == "Stripe-Signature has no v1 signature");
  CHECK(stripe_why("t=1700000000,v0=" + std::string(kStripeV1)) == "Stripe-Signature has no v1 signature");
  CHECK(stripe_why("") == "Stripe-Signature has no t=<unix seconds>");
}

TEST_CASE("shopify signature: base64 HMAC of the body, refused when tampered or malformed", "[signature][presets]") {
  CHECK(shopify_signature(kShopifySecret, kShopifyBody) == kShopifyHmac);
  CHECK(verify_shopify_signature(kShopifySecret, kShopifyBody, kShopifyHmac));
  CHECK(verify_shopify_signature(kShopifySecret, kShopifyBody, std::string(" ") + kShopifyHmac + " "));
  CHECK_FALSE(
      verify_shopify_signature(kShopifySecret, R"({"id":820982911946154500,"email":"eve@example.com"})", kShopifyHmac));
  CHECK_FALSE(verify_shopify_signature("another", kShopifyBody, kShopifyHmac));
  CHECK_FALSE(verify_shopify_signature("", kShopifyBody, kShopifyHmac));
  CHECK_FALSE(verify_shopify_signature(kShopifySecret, kShopifyBody, "LQu9AFhOFC+0Iupluvt6ufk"));
  CHECK_FALSE(verify_shopify_signature(kShopifySecret, kShopifyBody, "not base64 at all!"));
  CHECK_FALSE(verify_shopify_signature(kShopifySecret, kShopifyBody, ""));
}
