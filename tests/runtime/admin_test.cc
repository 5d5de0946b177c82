// Admin (runtime/admin/admin.h) with a fake backend: the token on every call but /healthz and
// /readyz (compared in full, scheme case-sensitive as sent by weir's own client), and the
// browser guard rails — Origin, Host without a token, Content-Type on writes.
#include <catch2/catch.hpp>

#include "runtime/admin/admin.h"
#include "tests/support/fake_request.h"

using weir::Admin;
using weir::test::call;
using weir::test::FakeRequest;

namespace {

struct FakeBackend final : weir::AdminBackend {
  int deploys = 0, promotes = 0, rollbacks = 0;
  bool ready(std::string*) const override { return true; }
  nlohmann::json flows() const override { return nlohmann::json::array({{{"name", "f"}}}); }
  std::optional<nlohmann::json> flow(const std::string& name) const override {
    if (name == "f") return nlohmann::json{{"name", "f"}};
    return std::nullopt;
  }
  weir::ControlResult deploy(const std::string&, const std::string&, const std::string&) override {
    ++deploys;
    return weir::ControlResult::created({{"version", 2}});
  }
  weir::ControlResult promote(const std::string&, int64_t, int64_t) override {
    ++promotes;
    return weir::ControlResult::done({{"active", 2}});
  }
  weir::ControlResult rollback(const std::string&) override {
    ++rollbacks;
    return weir::ControlResult::done({{"active", 1}});
  }
  nlohmann::json status() const override { return {{"flows", 1}}; }
};

const std::map<std::string, std::string> kJson = {{"Content-Type", "application/json"}, {"Host", "127.0.0.1:8081"}};

}  // namespace

TEST_CASE("admin: the token guards every call but healthz and readyz", "[admin]") {
  FakeBackend backend;
  weir::Metrics metrics;
  Admin admin(backend, metrics, nullptr, "the-token");
  auto h = admin.handler();
  struct C {
    std::string method, target, body;
  };
  const std::vector<C> calls = {{"GET", "/flows", ""},
                                {"GET", "/flows/f", ""},
                                {"PUT", "/flows/f", "flow: f"},
                                {"POST", "/flows/f/promote", R"({"version":2})"},
                                {"POST", "/flows/f/rollback", ""},
                                {"GET", "/status", ""},
                                {"GET", "/metrics", ""},
                                {"GET", "/dlq", ""},
                                {"POST", "/dlq/replay", "{}"}};
  for (const auto& c : calls) {
    INFO(c.method << " " << c.target);
    for (std::string auth : {"", "Bearer the-token-", "Bearer the-toke", "bearer the-token", "Basic the-token",
                             "Bearer  the-token", "the-token"}) {
      INFO("Authorization: " << auth);
      auto headers = kJson;
      if (!auth.empty()) headers["Authorization"] = auth;
      FakeRequest req(c.method, c.target, headers, c.body);
      auto r = call(h, req);
      CHECK(r.status == 401);
    }
    auto headers = kJson;
    headers["Authorization"] = "Bearer the-token";
    FakeRequest req(c.method, c.target, headers, c.body);
    int status = call(h, req).status;
    CHECK(status != 401);
    CHECK(status != 403);
  }
  CHECK(backend.deploys == 1);
  CHECK(backend.promotes == 1);
  CHECK(backend.rollbacks == 1);
  for (std::string path : {"/healthz", "/readyz"}) {
    FakeRequest req("GET", path, {{"Host", "127.0.0.1:8081"}});
    CHECK(call(h, req).status == 200);
  }
}

TEST_CASE("admin: Origin, Host and Content-Type guard rails", "[admin]") {
  FakeBackend backend;
  weir::Metrics metrics;
  Admin open(backend, metrics, nullptr, "");
  auto h = open.handler();
  auto status_of = [&](const std::string& method, const std::string& target, std::map<std::string, std::string> hd,
                       const std::string& body = "") {
    FakeRequest req(method, target, hd, body);
    return call(h, req).status;
  };
  // Origin: only the admin's own (http://<Host>).
  CHECK(status_of("GET", "/status", {{"Host", "127.0.0.1:8081"}, {"Origin", "http://127.0.0.1:8081"}}) == 200);
  CHECK(status_of("GET", "/status", {{"Host", "127.0.0.1:8081"}, {"Origin", "HTTP://127.0.0.1:8081"}}) == 200);
  CHECK(status_of("GET", "/status", {{"Host", "127.0.0.1:8081"}, {"Origin", "http://evil.example"}}) == 403);
  CHECK(status_of("GET", "/status", {{"Host", "127.0.0.1:8081"}, {"Origin", "null"}}) == 403);
  CHECK(status_of("GET", "/status", {{"Host", "127.0.0.1:8081"}, {"Origin", "http://127.0.0.1:8082"}}) == 403);
  CHECK(status_of("POST", "/flows/f/rollback", {{"Host", "127.0.0.1:8081"}, {"Origin", "http://evil.example"}}) == 403);
  CHECK(backend.rollbacks == 0);
  // Host, without a token: loopback names only (DNS rebinding).
  for (std::string host : {"127.0.0.1:8081", "localhost:8081", "LOCALHOST", "[::1]:8081", "127.0.0.1"}) {
    INFO(host);
    CHECK(status_of("GET", "/status", {{"Host", host}}) == 200);
  }
  for (std::string host : {"evil.example:8081", "evil.example", "10.0.0.1:8081", "127.0.0.1.evil.example:8081"}) {
    INFO(host);
    CHECK(status_of("GET", "/status", {{"Host", host}}) == 403);
  }
  CHECK(status_of("GET", "/status", {}) == 200);  // HTTP/1.0 without Host
  // With a token, any Host (the token is what protects it).
  Admin guarded(backend, metrics, nullptr, "t");
  FakeRequest named("GET", "/status", {{"Host", "weir.internal:8081"}, {"Authorization", "Bearer t"}});
  CHECK(call(guarded.handler(), named).status == 200);

  // Content-Type on writes.
  const std::map<std::string, std::string> host = {{"Host", "127.0.0.1:8081"}};
  auto with_type = [&](const std::string& type) {
    auto hd = host;
    if (!type.empty()) hd["Content-Type"] = type;
    return hd;
  };
  CHECK(status_of("POST", "/flows/f/promote", with_type("application/json"), R"({"version":2})") == 200);
  CHECK(status_of("POST", "/flows/f/promote", with_type("Application/JSON; charset=utf-8"), R"({"version":2})") == 200);
  for (std::string type : {"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                           "application/yaml", "application/jsonx"}) {
    INFO("POST with " << type);
    CHECK(status_of("POST", "/flows/f/promote", with_type(type), R"({"version":2})") == 415);
    CHECK(status_of("POST", "/dlq/replay", with_type(type), "{}") == 415);
  }
  CHECK(backend.promotes == 2);
  for (std::string type : {"application/json", "application/yaml", "text/yaml", "application/x-yaml"}) {
    INFO("PUT with " << type);
    CHECK(status_of("PUT", "/flows/f", with_type(type), "flow: f") == 201);
  }
  CHECK(status_of("PUT", "/flows/f", with_type("text/plain"), "flow: f") == 415);
  CHECK(status_of("PUT", "/flows/f", with_type(""), "flow: f") == 415);
  CHECK(backend.deploys == 4);
  // A write without a body may have any type (nothing to interpret; curl sends a form type).
  CHECK(status_of("POST", "/flows/f/rollback", with_type("")) == 200);
  CHECK(status_of("POST", "/flows/f/rollback", with_type("application/x-www-form-urlencoded")) == 200);
  CHECK(status_of("POST", "/flows/f/rollback", with_type("text/plain"), "x") == 415);
}
