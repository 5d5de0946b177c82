#include "connectors/http/signature.h"

#include <catch2/catch.hpp>

#include <string>

using weir::connectors::github_signature;
using weir::connectors::standard_webhook_signature;
using weir::connectors::valid_standard_webhook_secret;
using weir::connectors::verify_github_signature;
using weir::connectors::verify_standard_webhook;

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
