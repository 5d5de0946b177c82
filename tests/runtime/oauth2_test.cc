// runtime/base/oauth2: the OAuth2 client-credentials code the poll source and the HTTP sink
// share (docs/adr/0302-http-sink-tls-and-oauth2.md): the token cache on a manual clock, the
// token endpoint's answer, the form body, and fetch_token's errors. Both users end to end:
// tests/connectors/poll/ and tests/connectors/http/ (against a real token endpoint on
// loopback), tests/integration/sink_auth_test.cc.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <vector>
#include <string>

#include "runtime/base/oauth2.h"

namespace oauth2 = weir::oauth2;
using namespace std::chrono_literals;

TEST_CASE("oauth2 token cache: refreshed 30 s (or 10%) before expiry, usable until it expires, on a manual clock",
          "[oauth2]") {
  using Clock = oauth2::TokenCache::Clock;
  CHECK(oauth2::TokenCache::margin(3600s) == 30s);
  CHECK(oauth2::TokenCache::margin(100s) == 10s);
  CHECK(oauth2::TokenCache::margin(1s) == 100ms);

  const Clock::time_point t0{};  // a manual clock: time is whatever the test says
  oauth2::TokenCache cache;
  CHECK_FALSE(cache.get(t0));
  cache.set("tok-1", 3600s, t0);
  CHECK(cache.get(t0) == "tok-1");
  CHECK(cache.get(t0 + 3569s) == "tok-1");
  CHECK_FALSE(cache.get(t0 + 3570s));  // 30 s before expiry: time for a new one

  // Past its refresh time a token is still usable until it expires, and due for a refresh.
  CHECK(cache.usable(t0 + 3570s) == "tok-1");
  CHECK(cache.due(t0 + 3570s));
  CHECK_FALSE(cache.due(t0 + 3569s));
  CHECK_FALSE(cache.usable(t0 + 3600s));
  CHECK_FALSE(cache.due(t0 + 3600s));
  CHECK(cache.holds("tok-1"));
  CHECK_FALSE(cache.holds("tok-0"));

  cache.set("tok-2", 1s, t0);
  CHECK(cache.get(t0 + 899ms) == "tok-2");
  CHECK_FALSE(cache.get(t0 + 900ms));

  cache.set("tok-3", 0s, t0);  // expires_in 0: used once, never cached
  CHECK_FALSE(cache.get(t0));

  cache.set("tok-4", 60s, t0);
  cache.invalidate();  // a 401
  CHECK_FALSE(cache.get(t0));
}

TEST_CASE("oauth2 token responses: Bearer tokens with expires_in - errors never quote the body", "[oauth2]") {
  auto ok = oauth2::parse_token_response(R"({"access_token": "abc", "token_type": "bearer", "expires_in": 120})");
  REQUIRE(ok);
  CHECK(ok->access_token == "abc");
  CHECK(ok->expires_in == 120s);
  CHECK(oauth2::parse_token_response(R"({"access_token": "abc", "expires_in": "60"})")->expires_in == 60s);
  CHECK(oauth2::parse_token_response(R"({"access_token": "abc"})")->expires_in == 3600s);

  for (const char* bad :
       {R"({"token_type": "bearer"})", R"({"access_token": ""})", "[1]", "nope",
        R"({"access_token": "TOPSECRET", "token_type": "mac"})",
        R"({"access_token": "TOPSECRET", "expires_in": "soon"})", R"({"access_token": "TOPSECRET", "expires_in": -5})",
        R"({"access_token": "TOPSECRET\r\nX-Injected: 1"})", R"({"access_token": "TOPSECRET\n"})",
        R"({"access_token": "TOP\u0000SECRET"})"}) {
    auto r = oauth2::parse_token_response(bad);
    INFO(bad);
    REQUIRE_FALSE(r);
    CHECK(r.status().message().find("TOPSECRET") == std::string::npos);
  }
  CHECK(oauth2::token_request_body("id 1", "p&ss=", {"read", "write"}) ==
        "grant_type=client_credentials&client_id=id%201&client_secret=p%26ss%3D&scope=read%20write");
  CHECK(oauth2::token_request_body("i", "s", {}) == "grant_type=client_credentials&client_id=i&client_secret=s");
}

TEST_CASE("oauth2 fetch_token: statuses, the error code and transport errors become reasons without secrets",
          "[oauth2]") {
  oauth2::Client client{"https://auth/token", "https://auth/token", "id", "TOPSECRET", {"a"}};
  std::string seen_body;
  std::vector<std::string> seen_headers;
  auto answer = [&](long status, std::string body) {
    return [&, status, body](const std::string& url, const std::vector<std::string>& headers,
                             const std::string& form) -> weir::Result<oauth2::Answer> {
      CHECK(url == "https://auth/token");
      seen_headers = headers;
      seen_body = form;
      return oauth2::Answer{status, body};
    };
  };
  auto ok = oauth2::fetch_token(client, answer(200, R"({"access_token":"t1","expires_in":2})"));
  REQUIRE(ok);
  CHECK(ok->access_token == "t1");
  CHECK(ok->expires_in == 2s);
  CHECK(seen_body == "grant_type=client_credentials&client_id=id&client_secret=TOPSECRET&scope=a");
  CHECK(seen_headers ==
        std::vector<std::string>{"Content-Type: application/x-www-form-urlencoded", "Accept: application/json"});

  auto refused = oauth2::fetch_token(
      client, answer(401, R"({"error":"invalid_client <b>","error_description":"client id TOPSECRET unknown"})"));
  CHECK(refused.status().message() == "oauth2 token request to https://auth/token: HTTP 401 (invalid_client)");
  CHECK(refused.status().code() == weir::Status::Code::kUnavailable);
  // The code is cut at its first character outside [A-Za-z0-9_.-], not filtered: nothing
  // after markup reaches the message.
  CHECK(oauth2::fetch_token(client, answer(400, R"({"error":"bad.code-1<script>TOPSECRET"})")).status().message() ==
        "oauth2 token request to https://auth/token: HTTP 400 (bad.code-1)");
  CHECK(oauth2::fetch_token(client, answer(400, R"({"error":"<b>invalid_client"})")).status().message() ==
        "oauth2 token request to https://auth/token: HTTP 400");
  CHECK(oauth2::fetch_token(client, answer(503, "down")).status().message() ==
        "oauth2 token request to https://auth/token: HTTP 503");
  auto garbled = oauth2::fetch_token(client, answer(200, R"({"token":"TOPSECRET"})"));
  CHECK(garbled.status().message() ==
        "oauth2 token request to https://auth/token: the token endpoint's answer has no access_token");
  auto down = oauth2::fetch_token(
      client,
      [](const std::string&, const std::vector<std::string>&, const std::string&) -> weir::Result<oauth2::Answer> {
        return weir::Status::unavailable("oauth2 token request to https://auth/token: Couldn't connect to server");
      });
  CHECK(down.status().message() == "oauth2 token request to https://auth/token: Couldn't connect to server");
}

TEST_CASE("oauth2 read_credentials: a missing or empty variable is named, values never", "[oauth2]") {
  std::map<std::string, std::string> env = {{"ID", "the-id"}, {"SECRET", "the-secret"}, {"EMPTY", ""}};
  auto lookup = [&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  oauth2::Client c;
  REQUIRE(oauth2::read_credentials("http sink erp", "ID", "SECRET", lookup, &c).is_ok());
  CHECK(c.client_id == "the-id");
  CHECK(c.client_secret == "the-secret");
  CHECK(oauth2::read_credentials("http sink erp", "NOPE", "SECRET", lookup, &c).message() ==
        "http sink erp: oauth2.client_id_env: environment variable NOPE is not set");
  CHECK(oauth2::read_credentials("poll", "ID", "EMPTY", lookup, &c).message() ==
        "poll: oauth2.client_secret_env: environment variable EMPTY is not set");
}
