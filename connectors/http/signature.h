// Webhook signature checks for http-in: GitHub-style `X-Hub-Signature-256`, Standard
// Webhooks 1.0 (`webhook-id` / `webhook-timestamp` / `webhook-signature`) and bearer tokens.
//
// Contract: pure functions, no state, thread-safe; OpenSSL does the HMAC-SHA256 and base64.
// Every comparison of a secret-derived value runs in constant time (CRYPTO_memcmp).
// Secrets, expected signatures and header values never appear in `why`: it names only
// what was wrong, so it can go into a 401 body or a log line as it is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace weir::connectors {

// Raw 32-byte HMAC-SHA256(key, data).
std::string hmac_sha256(std::string_view key, std::string_view data);

// GitHub: `header` is `sha256=<hex HMAC-SHA256(secret, body)>` (hex in either case,
// surrounding blanks ignored). False on any malformed header or an empty secret.
bool verify_github_signature(std::string_view secret, std::string_view body, std::string_view header);
// The header value a sender would put in `X-Hub-Signature-256` (for tests and tools).
std::string github_signature(std::string_view secret, std::string_view body);

// Standard Webhooks 1.0. Signed content is `{id}.{timestamp}.{body}`. `secret` is
// `whsec_<base64>` (decoded) or, without that prefix, the raw key bytes. `timestamp` is
// the `webhook-timestamp` header (integer seconds since the epoch) and must be within
// kStandardWebhookTolerance of `now_seconds` either way. `signature_header` holds
// space-separated `v1,<base64>` entries (several during key rotation: any match wins;
// entries of other versions are skipped). On false, `why` (if not null) says why.
inline constexpr int64_t kStandardWebhookToleranceSeconds = 5 * 60;
bool verify_standard_webhook(std::string_view secret, std::string_view id, std::string_view timestamp,
                             std::string_view body, std::string_view signature_header, int64_t now_seconds,
                             std::string* why);
// True when `secret` can sign Standard Webhooks: `whsec_` followed by the base64 of at
// least one byte, or (without the prefix) not empty. Otherwise `why` (if not null) says
// what is wrong without quoting the secret: a malformed secret never verifies anything,
// so the source refuses to start with it instead of answering every sender 401.
bool valid_standard_webhook_secret(std::string_view secret, std::string* why);
// One `v1,<base64>` entry for the given content (for tests, tools and the bench sender).
// Empty when the secret is malformed.
std::string standard_webhook_signature(std::string_view secret, std::string_view id, std::string_view timestamp,
                                       std::string_view body);

// ---- Sender presets (`hmac: {scheme: stripe | slack | shopify}`, docs/connectors.md) ----
// Each verifies in constant time and says in `why` (if not null) only what was wrong.

// Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "t.body")>[,v1=…]`
// (several v1 during secret rotation: any match wins; v0 and other schemes are skipped).
// The whole secret (`whsec_…` as Stripe shows it) is the key. `t` must be within
// kStripeToleranceSeconds of `now_seconds` either way (Stripe's libraries: 300 s).
inline constexpr int64_t kStripeToleranceSeconds = 300;
bool verify_stripe_signature(std::string_view secret, std::string_view body, std::string_view header,
                             int64_t now_seconds, std::string* why);
// The `Stripe-Signature` value a sender would send (for tests and tools).
std::string stripe_signature(std::string_view secret, int64_t timestamp, std::string_view body);

// Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256(secret, "v0:timestamp:body")>` with
// `X-Slack-Request-Timestamp: <unix seconds>` within kSlackToleranceSeconds (Slack: 5 min).
inline constexpr int64_t kSlackToleranceSeconds = 5 * 60;
bool verify_slack_signature(std::string_view secret, std::string_view timestamp, std::string_view body,
                            std::string_view header, int64_t now_seconds, std::string* why);
std::string slack_signature(std::string_view secret, std::string_view timestamp, std::string_view body);

// Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(secret, body)>`. No timestamp is
// signed: replays are caught only by the event id (X-Shopify-Webhook-Id, ADR 0102's window).
bool verify_shopify_signature(std::string_view secret, std::string_view body, std::string_view header);
std::string shopify_signature(std::string_view secret, std::string_view body);

}  // namespace weir::connectors
