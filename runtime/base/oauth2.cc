#include "runtime/base/oauth2.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "flows/text.h"

namespace weir::oauth2 {

using Json = nlohmann::json;

TokenCache::Clock::duration TokenCache::margin(Clock::duration lifetime) {
  return std::min<Clock::duration>(std::chrono::seconds(30), lifetime / 10);
}

void TokenCache::set(std::string token, Clock::duration lifetime, Clock::time_point now) {
  token_ = std::move(token);
  if (lifetime < Clock::duration::zero()) lifetime = Clock::duration::zero();
  refresh_at_ = now + lifetime - margin(lifetime);
  expires_at_ = now + lifetime;
}

std::optional<std::string> TokenCache::get(Clock::time_point now) const {
  if (token_.empty() || now >= refresh_at_) return std::nullopt;
  return token_;
}

std::optional<std::string> TokenCache::usable(Clock::time_point now) const {
  if (token_.empty() || now >= expires_at_) return std::nullopt;
  return token_;
}

Result<TokenResponse> parse_token_response(std::string_view body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::invalid("the token endpoint's answer is not a JSON object");
  auto token = j.find("access_token");
  if (token == j.end() || !token->is_string() || token->get<std::string>().empty()) {
    return Status::invalid("the token endpoint's answer has no access_token");
  }
  if (auto type = j.find("token_type"); type != j.end()) {
    std::string t = type->is_string() ? type->get<std::string>() : "";
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    if (t != "bearer") return Status::invalid("the token endpoint's token_type is not Bearer");
  }
  TokenResponse out;
  out.access_token = token->get<std::string>();
  // The token goes into an Authorization header line: a CR or LF would end that line and
  // start another header the endpoint chose (any control byte is no token: RFC 6750's
  // b64token). Refused, and the message never quotes the token.
  if (std::any_of(out.access_token.begin(), out.access_token.end(),
                  [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
    return Status::invalid(
        "the token endpoint's access_token holds a control character (CR, LF or another): refused, it would "
        "break the Authorization header");
  }
  if (auto e = j.find("expires_in"); e != j.end() && !e->is_null()) {
    // Some servers send the number as a string.
    double seconds = -1;
    if (e->is_number()) {
      seconds = e->get<double>();
    } else if (e->is_string()) {
      char* end = nullptr;
      const std::string s = e->get<std::string>();
      seconds = std::strtod(s.c_str(), &end);
      if (end == s.c_str() || *end != '\0') seconds = -1;
    }
    if (!(seconds >= 0) || seconds > 1e9)
      return Status::invalid("the token endpoint's expires_in is not a number of seconds");
    out.expires_in = std::chrono::seconds(static_cast<int64_t>(seconds));
  }
  return out;
}

std::string token_request_body(const std::string& client_id, const std::string& client_secret,
                               const std::vector<std::string>& scopes) {
  std::string body = "grant_type=client_credentials&client_id=" + flows::url_encode(client_id) +
                     "&client_secret=" + flows::url_encode(client_secret);
  if (!scopes.empty()) {
    std::string joined;
    for (const auto& s : scopes) joined += (joined.empty() ? "" : " ") + s;
    body += "&scope=" + flows::url_encode(joined);
  }
  return body;
}

namespace {
// The server's OAuth2 error code as far as its first character outside [A-Za-z0-9_.-]
// (and at most 64 characters): the codes RFC 6749 section 5.2 defines are made of those, and
// cutting there instead of dropping characters keeps markup, and whatever follows it, out of
// the logs. Never the description: servers echo client ids and more there.
std::string safe_code(std::string_view s) {
  const auto safe = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
  };
  std::string out;
  for (char c : s.substr(0, 64)) {
    if (!safe(c)) break;
    out += c;
  }
  return out;
}
}  // namespace

Result<TokenResponse> fetch_token(const Client& client, const PostFn& post) {
  const std::string what = "oauth2 token request to " + client.token_where;
  const std::string body = token_request_body(client.client_id, client.client_secret, client.scopes);
  auto r = post(client.token_url, {"Content-Type: application/x-www-form-urlencoded", "Accept: application/json"},
                body);
  if (!r) return r.status();
  if (r->status != 200) {
    std::string code;
    if (Json j = Json::parse(r->body, nullptr, false); j.is_object() && j.contains("error") && j["error"].is_string()) {
      code = safe_code(j["error"].get<std::string>());
    }
    return Status::unavailable(what + ": HTTP " + std::to_string(r->status) + (code.empty() ? "" : " (" + code + ")"));
  }
  auto parsed = parse_token_response(r->body);
  if (!parsed) return Status::invalid(what + ": " + parsed.status().message());
  return parsed;
}

Status read_credentials(const std::string& what, const std::string& client_id_env, const std::string& client_secret_env,
                        const EnvFn& env, Client* out) {
  auto lookup = env ? env : [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto id = lookup(client_id_env);
  if (!id || id->empty()) {
    return Status::invalid(what + ": oauth2.client_id_env: environment variable " + client_id_env + " is not set");
  }
  auto secret = lookup(client_secret_env);
  if (!secret || secret->empty()) {
    return Status::invalid(what + ": oauth2.client_secret_env: environment variable " + client_secret_env +
                           " is not set");
  }
  out->client_id = *id;
  out->client_secret = *secret;
  return Status::ok();
}

}  // namespace weir::oauth2
