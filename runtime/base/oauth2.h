// OAuth2 client credentials (RFC 6749 §4.4), the one implementation shared by the poll
// source (connectors/poll) and the HTTP sink (connectors/http): the token request's form
// body, the reading of the token endpoint's answer, the error reasons and a token cache
// with its refresh time. The HTTP exchange itself is the caller's (each connector has its
// own client and its own thread rules), passed to fetch_token() as a function.
//
// Secrets: nothing here logs. Errors never quote the client secret, the token or the
// endpoint's body (servers echo client ids and more in error descriptions); the only
// part of an error answer quoted is its `error` code, cut to safe characters.
//
// Thread safety: free functions are pure and safe from any thread; a TokenCache is not
// thread-safe (its owner guards it). docs/adr/0302-http-sink-tls-and-oauth2.md.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace weir::oauth2 {

// An OAuth2 token with its refresh time. Pure: the caller passes the time, so tests drive
// it with a manual clock.
class TokenCache {
 public:
  using Clock = std::chrono::steady_clock;
  // How long before expiry a token is replaced: 30 s, or 10% of its lifetime when that is
  // shorter (a 1 s token is replaced after 900 ms).
  static Clock::duration margin(Clock::duration lifetime);
  void set(std::string token, Clock::duration lifetime, Clock::time_point now);
  // The token while it is fresh at `now` (before its refresh time).
  std::optional<std::string> get(Clock::time_point now) const;
  // The token while it has not expired at `now`, fresh or not: a sender may keep using it
  // while a new one is being fetched.
  std::optional<std::string> usable(Clock::time_point now) const;
  // Whether `now` is past the refresh time of a token that is still usable.
  bool due(Clock::time_point now) const { return !token_.empty() && now >= refresh_at_ && now < expires_at_; }
  void invalidate() { token_.clear(); }
  // When the cached token should be replaced (meaningless without one).
  Clock::time_point refresh_at() const { return refresh_at_; }
  bool empty() const { return token_.empty(); }
  // Whether the cached token is `token` (expired or not).
  bool holds(const std::string& token) const { return !token_.empty() && token_ == token; }

 private:
  std::string token_;
  Clock::time_point refresh_at_{};
  Clock::time_point expires_at_{};
};

struct TokenResponse {
  std::string access_token;
  std::chrono::seconds expires_in{3600};  // absent: an hour (a 401 refreshes earlier)
};
// Parses a token endpoint's 200 answer. Errors never contain the body (it holds the token).
Result<TokenResponse> parse_token_response(std::string_view body);

// The form body of a client-credentials token request.
std::string token_request_body(const std::string& client_id, const std::string& client_secret,
                               const std::vector<std::string>& scopes);

// What a token request needs: the endpoint and the credentials (read from the environment
// by the connector at start; never logged).
struct Client {
  std::string token_url;
  std::string token_where;  // token_url redacted (runtime/base/redact.h), for reasons
  std::string client_id, client_secret;
  std::vector<std::string> scopes;
};

// One HTTP answer as fetch_token() needs it.
struct Answer {
  long status = 0;
  std::string body;
};
// POSTs `body` to `url` with `headers` ("Name: value" lines); a transport failure is an
// error Status whose message names the request ("oauth2 token request to <where>: ...")
// without secrets: fetch_token() returns it as it is.
using PostFn = std::function<Result<Answer>(const std::string& url, const std::vector<std::string>& headers,
                                            const std::string& body)>;

// One client-credentials token request through `post`. Errors: "oauth2 token request to
// <where>: HTTP 401 (invalid_client)", "...: the token endpoint's answer has no
// access_token", or post's own error; unavailable for transport failures and statuses,
// invalid for an answer that does not parse.
Result<TokenResponse> fetch_token(const Client& client, const PostFn& post);

// The credentials of `client_id_env` / `client_secret_env` from `env` (the process
// environment when empty). A missing or empty variable is an error naming `what` and the
// variable, never a value.
using EnvFn = std::function<std::optional<std::string>(const std::string&)>;
Status read_credentials(const std::string& what, const std::string& client_id_env, const std::string& client_secret_env,
                        const EnvFn& env, Client* out);

}  // namespace weir::oauth2
