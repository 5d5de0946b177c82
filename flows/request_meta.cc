#include "flows/request_meta.h"

#include <array>
#include <cctype>

namespace weir::flows {

const std::vector<std::string>& default_meta_headers() {
  // Each sender's event type and delivery id, what a flow routes or deduplicates on; none
  // of them is a credential (refused_meta_header says no to every one, checked in tests).
  static const std::vector<std::string> kDefault = {
      // GitHub
      "x-github-event", "x-github-delivery", "x-github-hook-id", "x-github-hook-installation-target-id",
      "x-github-hook-installation-target-type",
      // GitLab (its X-Gitlab-Token is the secret: not here)
      "x-gitlab-event", "x-gitlab-event-uuid", "x-gitlab-webhook-uuid",
      // Bitbucket Cloud
      "x-event-key", "x-request-uuid", "x-hook-uuid",
      // Shopify
      "x-shopify-topic", "x-shopify-webhook-id", "x-shopify-event-id", "x-shopify-shop-domain", "x-shopify-api-version",
      "x-shopify-triggered-at",
      // Standard Webhooks (Svix, Clerk, Resend, …)
      "webhook-id", "webhook-timestamp",
      // Slack's Events API retries
      "x-slack-request-timestamp", "x-slack-retry-num", "x-slack-retry-reason",
      // any sender
      "content-type", "user-agent", "idempotency-key"};
  return kDefault;
}

std::string lower_header_name(std::string_view name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string refused_meta_header(std::string_view name, std::string_view hmac_header) {
  const std::string n = lower_header_name(name);
  if (!hmac_header.empty() && n == lower_header_name(hmac_header)) {
    return "it is this flow's hmac.header, a signature";
  }
  // Substrings of the credential and signature headers in use: Authorization,
  // Proxy-Authorization, Cookie, Set-Cookie, X-Hub-Signature-256, Stripe-Signature,
  // X-Slack-Signature, webhook-signature, X-Shopify-Hmac-Sha256, X-Gitlab-Token,
  // X-Api-Key, X-Twilio-Signature, …
  static constexpr std::array<std::string_view, 10> kWords = {
      "authorization", "cookie", "signature", "hmac", "token", "secret", "password", "api-key", "apikey", "credential"};
  for (std::string_view w : kWords) {
    if (n.find(w) != std::string::npos) {
      return "a name holding \"" + std::string(w) + "\" is a credential or a signature";
    }
  }
  return "";
}

}  // namespace weir::flows
