// AdminService (runtime/admin/admin_service.h) with a fake backend: every Outcome of the
// control plane becomes its HTTP status, the body passes through unchanged, and the HTTP
// side (Admin) writes what the service answers.
#include <catch2/catch.hpp>

#include "runtime/admin/admin.h"
#include "runtime/admin/admin_service.h"
#include "tests/support/fake_request.h"

using weir::ControlResult;
using weir::Outcome;

namespace {

struct ScriptedBackend final : weir::AdminBackend {
  ControlResult next;
  std::string last_target;
  bool ready(std::string*) const override { return true; }
  nlohmann::json flows() const override { return nlohmann::json::array({{{"name", "f"}}}); }
  std::optional<nlohmann::json> flow(const std::string& name) const override {
    if (name == "f") return nlohmann::json{{"name", "f"}};
    return std::nullopt;
  }
  ControlResult deploy(const std::string&, const std::string&, const std::string& target) override {
    last_target = target;
    return next;
  }
  ControlResult promote(const std::string&, int64_t, int64_t) override { return next; }
  ControlResult rollback(const std::string&) override { return next; }
  nlohmann::json status() const override { return {{"flows", 1}}; }
};

}  // namespace

TEST_CASE("admin service: each outcome has its HTTP status", "[admin]") {
  const std::vector<std::pair<Outcome, int>> table = {{Outcome::kDone, 200},         {Outcome::kCreated, 201},
                                                      {Outcome::kBadRequest, 400},   {Outcome::kNotFound, 404},
                                                      {Outcome::kConflict, 409},     {Outcome::kTooLarge, 413},
                                                      {Outcome::kInvalid, 422},      {Outcome::kFailed, 500},
                                                      {Outcome::kNotSupported, 501}, {Outcome::kUnavailable, 503}};
  ScriptedBackend backend;
  weir::AdminService service(backend);
  for (const auto& [outcome, code] : table) {
    INFO("outcome " << static_cast<int>(outcome));
    CHECK(weir::http_status(outcome) == code);
    backend.next = ControlResult{outcome, {{"error", "why"}, {"detail", 7}}};
    for (const auto& a : {service.deploy("f", "flow: f", "file"), service.promote("f", 2, 0), service.rollback("f")}) {
      CHECK(a.code == code);
      CHECK(a.body == nlohmann::json{{"error", "why"}, {"detail", 7}});
    }
  }
  CHECK(backend.last_target == "file");
}

TEST_CASE("admin service: a flow that does not run is 404, and reads are 200", "[admin]") {
  ScriptedBackend backend;
  weir::AdminService service(backend);
  CHECK(service.flow("f").code == 200);
  auto missing = service.flow("nope");
  CHECK(missing.code == 404);
  CHECK(missing.body == nlohmann::json{{"error", "no flow named nope"}});
  CHECK(service.flows().code == 200);
  CHECK(service.status().body == nlohmann::json{{"flows", 1}});
}

TEST_CASE("admin service: Admin writes the service's answer", "[admin]") {
  ScriptedBackend backend;
  weir::Metrics metrics;
  weir::Admin admin(backend, metrics, nullptr, "");
  const std::map<std::string, std::string> json = {{"Content-Type", "application/json"}, {"Host", "127.0.0.1:8081"}};
  backend.next = ControlResult::failed(Outcome::kConflict, "stale promote");
  weir::test::FakeRequest req("POST", "/flows/f/promote", json, R"({"version":2})");
  auto res = weir::test::call(admin.handler(), req);
  CHECK(res.status == 409);
  CHECK(nlohmann::json::parse(res.body) == nlohmann::json{{"error", "stale promote"}});
  backend.next = ControlResult::failed(Outcome::kNotSupported, "standalone");
  weir::test::FakeRequest rb("POST", "/flows/f/rollback", json, "");
  CHECK(weir::test::call(admin.handler(), rb).status == 501);
}
