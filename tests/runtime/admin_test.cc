// Admin (runtime/admin/admin.h) with a fake backend: the token on every call but /healthz and
// /readyz (compared in full, scheme case-sensitive as sent by weir's own client), and the
// browser guard rails — Origin, Host without a token, Content-Type on writes (CSV on a
// table import); the token checked from the header alone (header_check); the worker: a
// job that throws, the bound on waiting jobs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <new>
#include <stdexcept>

#include "runtime/admin/admin.h"
#include "tests/support/fake_request.h"
#include "tests/support/support.h"

using namespace std::chrono_literals;
using weir::testing::wait_until;

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

namespace {

// A backend whose flows() throws and whose status() waits until released: the worker's
// failure and queue paths.
struct TroubleBackend final : weir::AdminBackend {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  mutable bool hold = false, holding = false;
  bool ready(std::string*) const override { return true; }
  nlohmann::json flows() const override { throw std::runtime_error("token=s3cr3t in the message"); }
  std::optional<nlohmann::json> flow(const std::string&) const override { throw std::bad_alloc(); }
  weir::ControlResult deploy(const std::string&, const std::string&, const std::string&) override { throw 42; }
  weir::ControlResult promote(const std::string&, int64_t, int64_t) override { return weir::ControlResult::done({}); }
  weir::ControlResult rollback(const std::string&) override { return weir::ControlResult::done({}); }
  nlohmann::json status() const override {
    std::unique_lock lock(mu);
    holding = true;
    cv.notify_all();
    cv.wait(lock, [&] { return !hold; });
    holding = false;
    return {{"flows", 0}};
  }
};

}  // namespace

TEST_CASE("admin: a job that throws is a 500 without its message and the worker goes on", "[admin]") {
  TroubleBackend backend;
  weir::Metrics metrics;
  Admin admin(backend, metrics, nullptr, "");
  auto h = admin.handler();
  const std::map<std::string, std::string> host = {{"Host", "127.0.0.1:8081"}};
  for (const auto& [method, target] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/flows"}, {"GET", "/flows/f"}, {"PUT", "/flows/f"}}) {
    INFO(method << " " << target);
    auto headers = kJson;
    FakeRequest req(method, target, headers, method == "PUT" ? "{}" : "");
    auto r = call(h, req);
    CHECK(r.status == 500);
    CHECK(r.body.find("s3cr3t") == std::string::npos);
    CHECK(r.body.find("internal error") != std::string::npos);
    // The worker still serves.
    FakeRequest status("GET", "/status", host);
    CHECK(call(h, status).status == 200);
  }
}

TEST_CASE("admin: past kMaxQueuedJobs waiting jobs a call is 503 with Retry-After", "[admin]") {
  TroubleBackend backend;
  backend.hold = true;
  weir::Metrics metrics;
  Admin admin(backend, metrics, nullptr, "");
  auto h = admin.handler();
  const std::map<std::string, std::string> host = {{"Host", "127.0.0.1:8081"}};
  std::mutex mu;
  std::vector<int> answers;
  auto ask = [&] {
    FakeRequest req("GET", "/status", host);
    h(req, [&](weir::HttpResponse r) {
      std::lock_guard lock(mu);
      answers.push_back(r.status);
    });
  };
  ask();  // taken by the worker, which waits in status()
  {
    std::unique_lock lock(backend.mu);
    REQUIRE(backend.cv.wait_for(lock, 10s, [&] { return backend.holding; }));
  }
  for (size_t i = 0; i < Admin::kMaxQueuedJobs; ++i) ask();  // queued
  {
    std::lock_guard lock(mu);
    CHECK(answers.empty());
  }
  FakeRequest extra("GET", "/status", host);
  auto refused = call(h, extra);  // answered at once, on this thread
  CHECK(refused.status == 503);
  bool retry_after = false;
  for (const auto& [k, v] : refused.headers) retry_after |= k == "Retry-After" && v == "1";
  CHECK(retry_after);
  {
    std::lock_guard lock(backend.mu);
    backend.hold = false;
  }
  backend.cv.notify_all();
  CHECK(wait_until(
      [&] {
        std::lock_guard lock(mu);
        return answers.size() == Admin::kMaxQueuedJobs + 1;
      },
      10s));
  std::lock_guard lock(mu);
  CHECK(std::count(answers.begin(), answers.end(), 200) == static_cast<long>(Admin::kMaxQueuedJobs + 1));
}

TEST_CASE("admin: header_check refuses a missing or wrong token from the header alone", "[admin]") {
  FakeBackend backend;
  weir::Metrics metrics;
  Admin admin(backend, metrics, nullptr, "the-token");
  auto check = admin.header_check();
  auto refused = [&](const std::string& method, const std::string& target, const std::string& auth) {
    std::map<std::string, std::string> headers = kJson;
    if (!auth.empty()) headers["Authorization"] = auth;
    FakeRequest req(method, target, headers);
    auto r = check(req);
    return r ? r->status : 0;
  };
  CHECK(refused("PUT", "/flows/f", "") == 401);
  CHECK(refused("POST", "/dlq/replay", "Bearer wrong") == 401);
  CHECK(refused("PUT", "/tables/t", "Bearer the-token-") == 401);
  CHECK(refused("PUT", "/flows/f", "Bearer the-token") == 0);
  CHECK(refused("GET", "/healthz", "") == 0);
  CHECK(refused("GET", "/readyz", "") == 0);
  CHECK(refused("GET", "/", "") == 0);  // the dashboard's page (ADR 0093)
  CHECK(refused("POST", "/", "") == 401);
  Admin open(backend, metrics, nullptr, "");
  FakeRequest any("PUT", "/flows/f", kJson);
  CHECK(!open.header_check()(any));
}

TEST_CASE("admin: text/csv is accepted on a table import only", "[admin]") {
  FakeBackend backend;
  weir::Metrics metrics;
  Admin admin(backend, metrics, nullptr, "");
  auto h = admin.handler();
  auto status = [&](const std::string& method, const std::string& target) {
    FakeRequest req(method, target, {{"Content-Type", "text/csv; charset=utf-8"}, {"Host", "127.0.0.1:8081"}},
                    "customer,tier\nc1,gold\n");
    return call(h, req).status;
  };
  CHECK(status("PUT", "/tables/tiers") == 503);  // past the guard: no tables without NATS
  CHECK(status("PUT", "/tables/tiers/c1") == 415);
  CHECK(status("POST", "/tables/tiers") == 415);
  CHECK(status("POST", "/dlq/replay") == 415);
  CHECK(status("PUT", "/flows/f") == 415);
}
