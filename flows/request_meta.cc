#include "flows/request_meta.h"

#include <algorithm>
#include <array>
#include <cctype>

#include <nlohmann/json.hpp>

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

namespace {

// Appends `s` as a JSON string. Printable ASCII is written here; a string with any other
// byte (a control character, DEL, UTF-8 or a stray byte) is left to nlohmann's escaping
// (\u escapes, U+FFFD for invalid UTF-8), the rare case.
void append_json_string(std::string* out, std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (!plain) {
    *out += nlohmann::json(std::string(s)).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    return;
  }
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') out->push_back('\\');
    out->push_back(c);
  }
  out->push_back('"');
}

}  // namespace

std::string write_request_meta(std::string_view method, std::string_view path, std::string_view query_json,
                               std::vector<MetaHeader> headers) {
  std::stable_sort(headers.begin(), headers.end(),
                   [](const MetaHeader& a, const MetaHeader& b) { return a.name < b.name; });
  std::string out;
  out.reserve(64 + method.size() + path.size() + query_json.size() + headers.size() * 48);
  out += "{\"headers\":{";
  std::string_view last;
  bool first = true;
  for (const MetaHeader& h : headers) {
    if (!first && h.name == last) continue;
    if (!first) out.push_back(',');
    first = false;
    last = h.name;
    append_json_string(&out, h.name);
    out.push_back(':');
    append_json_string(&out, h.value);
  }
  out += "},\"method\":";
  append_json_string(&out, method);
  out += ",\"path\":";
  append_json_string(&out, path);
  out += ",\"query\":";
  out += query_json;
  out.push_back('}');
  return out;
}

}  // namespace weir::flows
