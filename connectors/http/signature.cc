#include "connectors/http/signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <charconv>
#include <optional>
#include <vector>

namespace weir::connectors {
namespace {

constexpr size_t kSha256Size = 32;
constexpr std::string_view kWhsecPrefix = "whsec_";
constexpr std::string_view kBlanks = " \t";

std::string_view trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(kBlanks);
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(kBlanks);
  return s.substr(begin, end - begin + 1);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> hex_decode(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

bool is_base64_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

// Strict standard base64 with padding. EVP_DecodeBlock alone would skip blanks and
// count padding as zero bytes, so the shape is checked here first.
std::optional<std::string> base64_decode(std::string_view in) {
  if (in.empty() || in.size() % 4 != 0) return std::nullopt;
  size_t padding = 0;
  if (in.back() == '=') padding = (in[in.size() - 2] == '=') ? 2 : 1;
  for (size_t i = 0; i < in.size() - padding; ++i) {
    if (!is_base64_char(in[i])) return std::nullopt;
  }
  std::string out(in.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  if (n < 0 || static_cast<size_t>(n) < padding) return std::nullopt;
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

std::string base64_encode(std::string_view in) {
  std::string out((in.size() + 2) / 3 * 4 + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

// Bytes of the HMAC key from a configured secret; nullopt when it cannot be used.
std::optional<std::string> standard_webhook_key(std::string_view secret) {
  if (secret.substr(0, kWhsecPrefix.size()) == kWhsecPrefix) {
    auto key = base64_decode(secret.substr(kWhsecPrefix.size()));
    if (!key || key->empty()) return std::nullopt;
    return key;
  }
  if (secret.empty()) return std::nullopt;
  return std::string(secret);
}

std::string standard_webhook_content(std::string_view id, std::string_view timestamp, std::string_view body) {
  std::string content;
  content.reserve(id.size() + timestamp.size() + body.size() + 2);
  content.append(id).append(".").append(timestamp).append(".").append(body);
  return content;
}

std::string slack_content(std::string_view timestamp, std::string_view body) {
  std::string content = "v0:";
  content.append(timestamp).append(":").append(body);
  return content;
}

bool fail(std::string* why, const char* message) {
  if (why != nullptr) *why = message;
  return false;
}

// `given` hex equals the HMAC `expected`, in constant time.
bool hex_matches(std::string_view given, const std::string& expected) {
  if (given.size() != 2 * kSha256Size || expected.size() != kSha256Size) return false;
  const auto bytes = hex_decode(given);
  return bytes && CRYPTO_memcmp(bytes->data(), expected.data(), kSha256Size) == 0;
}

std::string to_hex(const std::string& bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace

std::string hmac_sha256(std::string_view key, std::string_view data) {
  static const unsigned char kNoKey = 0;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const void* key_ptr = key.empty() ? static_cast<const void*>(&kNoKey) : key.data();
  if (HMAC(EVP_sha256(), key_ptr, static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), out, &len) == nullptr) {
    return {};
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool verify_github_signature(std::string_view secret, std::string_view body, std::string_view header) {
  constexpr std::string_view kPrefix = "sha256=";
  if (secret.empty()) return false;
  header = trim(header);
  if (header.substr(0, kPrefix.size()) != kPrefix) return false;
  return hex_matches(header.substr(kPrefix.size()), hmac_sha256(secret, body));
}

std::string github_signature(std::string_view secret, std::string_view body) {
  return "sha256=" + to_hex(hmac_sha256(secret, body));
}

bool verify_standard_webhook(std::string_view secret, std::string_view id, std::string_view timestamp,
                             std::string_view body, std::string_view signature_header, int64_t now_seconds,
                             std::string* why) {
  id = trim(id);
  timestamp = trim(timestamp);
  signature_header = trim(signature_header);
  if (id.empty()) return fail(why, "missing webhook-id");
  if (timestamp.empty()) return fail(why, "missing webhook-timestamp");
  if (signature_header.empty()) return fail(why, "missing webhook-signature");

  int64_t sent = 0;
  const auto [end, ec] = std::from_chars(timestamp.data(), timestamp.data() + timestamp.size(), sent);
  if (ec != std::errc() || end != timestamp.data() + timestamp.size() || sent < 0) {
    return fail(why, "malformed webhook-timestamp");
  }
  if (now_seconds - kStandardWebhookToleranceSeconds > sent) {
    return fail(why, "webhook-timestamp too old");
  }
  if (sent - kStandardWebhookToleranceSeconds > now_seconds) {
    return fail(why, "webhook-timestamp too new");
  }

  const auto key = standard_webhook_key(secret);
  if (!key) return fail(why, "unusable secret");
  const std::string expected = hmac_sha256(*key, standard_webhook_content(id, timestamp, body));
  if (expected.size() != kSha256Size) return fail(why, "signature computation failed");

  bool any_v1 = false;
  bool match = false;
  std::string_view rest = signature_header;
  while (!rest.empty()) {
    const size_t space = rest.find(' ');
    const std::string_view entry = rest.substr(0, space);
    rest = (space == std::string_view::npos) ? std::string_view{} : rest.substr(space + 1);
    if (entry.empty()) continue;
    const size_t comma = entry.find(',');
    if (comma == std::string_view::npos) continue;
    if (entry.substr(0, comma) != "v1") continue;
    any_v1 = true;
    const auto given = base64_decode(entry.substr(comma + 1));
    if (!given || given->size() != kSha256Size) continue;
    // Keep looking after a match: the time taken does not depend on which entry matched.
    match |= CRYPTO_memcmp(given->data(), expected.data(), kSha256Size) == 0;
  }
  if (match) return true;
  return fail(why, any_v1 ? "no matching signature" : "no v1 signature in webhook-signature");
}

bool valid_standard_webhook_secret(std::string_view secret, std::string* why) {
  if (standard_webhook_key(secret)) return true;
  if (why != nullptr) {
    *why = secret.empty() ? "the secret is empty"
           : secret.size() == kWhsecPrefix.size()
               ? "the secret is whsec_ with no key after it"
               : "the secret starts with whsec_ but the rest is not base64 (A-Z a-z 0-9 + /, padded with = to a "
                 "multiple of 4)";
  }
  return false;
}

std::string standard_webhook_signature(std::string_view secret, std::string_view id, std::string_view timestamp,
                                       std::string_view body) {
  const auto key = standard_webhook_key(secret);
  if (!key) return {};
  return "v1," + base64_encode(hmac_sha256(*key, standard_webhook_content(id, timestamp, body)));
}

// ---- sender presets ----------------------------------------------------------------

namespace {

// Unix seconds written as digits only; nullopt otherwise.
std::optional<int64_t> unix_seconds(std::string_view text) {
  int64_t v = 0;
  if (text.empty() || text.size() > 12) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

bool within(int64_t t, int64_t now, int64_t tolerance) { return t >= now - tolerance && t <= now + tolerance; }

}  // namespace

bool verify_stripe_signature(std::string_view secret, std::string_view body, std::string_view header,
                             int64_t now_seconds, std::string* why) {
  if (secret.empty()) return fail(why, "no secret");
  std::string_view t;
  std::vector<std::string_view> v1;
  for (size_t start = 0; start <= header.size();) {
    size_t end = header.find(',', start);
    if (end == std::string_view::npos) end = header.size();
    std::string_view item = trim(header.substr(start, end - start));
    if (item.substr(0, 2) == "t=") t = item.substr(2);
    else if (item.substr(0, 3) == "v1=") v1.push_back(item.substr(3));
    start = end + 1;
  }
  const auto ts = unix_seconds(t);
  if (!ts) return fail(why, "Stripe-Signature has no t=<unix seconds>");
  if (v1.empty()) return fail(why, "Stripe-Signature has no v1 signature");
  if (!within(*ts, now_seconds, kStripeToleranceSeconds)) {
    return fail(why, "Stripe-Signature timestamp is more than 300 s from now (a replay, or the clock is off)");
  }
  std::string content;
  content.append(t).append(".").append(body);
  const std::string expected = hmac_sha256(secret, content);
  bool match = false;
  for (std::string_view v : v1) match = hex_matches(v, expected) || match;  // every entry compared
  return match || fail(why, "wrong signature in Stripe-Signature");
}

std::string stripe_signature(std::string_view secret, int64_t timestamp, std::string_view body) {
  const std::string t = std::to_string(timestamp);
  std::string content = t + ".";
  content.append(body);
  return "t=" + t + ",v1=" + to_hex(hmac_sha256(secret, content));
}

bool verify_slack_signature(std::string_view secret, std::string_view timestamp, std::string_view body,
                            std::string_view header, int64_t now_seconds, std::string* why) {
  constexpr std::string_view kPrefix = "v0=";
  if (secret.empty()) return fail(why, "no secret");
  const auto ts = unix_seconds(trim(timestamp));
  if (!ts) return fail(why, "X-Slack-Request-Timestamp is not unix seconds");
  header = trim(header);
  if (header.substr(0, kPrefix.size()) != kPrefix) return fail(why, "X-Slack-Signature is not v0=<hex>");
  if (!within(*ts, now_seconds, kSlackToleranceSeconds)) {
    return fail(why, "X-Slack-Request-Timestamp is more than 300 s from now (a replay, or the clock is off)");
  }
  if (!hex_matches(header.substr(kPrefix.size()), hmac_sha256(secret, slack_content(trim(timestamp), body)))) {
    return fail(why, "wrong signature in X-Slack-Signature");
  }
  return true;
}

std::string slack_signature(std::string_view secret, std::string_view timestamp, std::string_view body) {
  return "v0=" + to_hex(hmac_sha256(secret, slack_content(timestamp, body)));
}

bool verify_shopify_signature(std::string_view secret, std::string_view body, std::string_view header) {
  if (secret.empty()) return false;
  const auto given = base64_decode(trim(header));
  const std::string expected = hmac_sha256(secret, body);
  if (!given || given->size() != kSha256Size || expected.size() != kSha256Size) return false;
  return CRYPTO_memcmp(given->data(), expected.data(), kSha256Size) == 0;
}

std::string shopify_signature(std::string_view secret, std::string_view body) {
  return base64_encode(hmac_sha256(secret, body));
}

}  // namespace weir::connectors
