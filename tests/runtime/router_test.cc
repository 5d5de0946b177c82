// HttpRouter: routes by exact path, 404 for unknown paths, 405 (with Allow) for a method
// other than POST, a conflict for a second flow on one path, 503 while starting for a path
// not added yet, 503 + close while draining.
#include <catch2/catch.hpp>

#include "runtime/http/http_router.h"
#include "tests/support/fake_request.h"

using weir::HttpResponse;
using weir::HttpRouter;
using weir::test::call;
using weir::test::FakeRequest;

namespace {
std::string header_of(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}
}  // namespace

TEST_CASE("router: exact paths, 404, 405, conflicts, draining", "[router]") {
  HttpRouter router;
  int a = 0, b = 0;
  REQUIRE(router.add_route("/in/a", [&](weir::HttpRequest&, weir::Responder r) {
    ++a;
    r(HttpResponse::json(202, "{}"));
  }));
  REQUIRE(router.add_route("/in/b", [&](weir::HttpRequest&, weir::Responder r) {
    ++b;
    r(HttpResponse::json(202, "{}"));
  }));
  CHECK_FALSE(router.add_route("/in/a", [](weir::HttpRequest&, weir::Responder) {}));
  weir::Handler h = [&](weir::HttpRequest& req, weir::Responder r) { router.handle(req, std::move(r)); };

  // Until every flow runs, a path no source added yet is 503 "starting" with Retry-After
  // (its flow may be on the way: never a 404); a path already added is served (ADR 0215).
  FakeRequest early("POST", "/in/c");
  HttpResponse starting = call(h, early);
  CHECK(starting.status == 503);
  CHECK(header_of(starting, "Retry-After") == "1");
  FakeRequest early_a("POST", "/in/a");
  CHECK(call(h, early_a).status == 202);
  CHECK(a == 1);
  router.set_serving();

  FakeRequest post_a("POST", "/in/a?x=1", {}, "{}");
  CHECK(call(h, post_a).status == 202);
  FakeRequest post_b("POST", "/in/b");
  CHECK(call(h, post_b).status == 202);
  CHECK(a == 2);
  CHECK(b == 1);

  FakeRequest unknown("POST", "/in/c");
  CHECK(call(h, unknown).status == 404);
  FakeRequest prefix("POST", "/in/a/more");
  CHECK(call(h, prefix).status == 404);
  FakeRequest get("GET", "/in/a");
  auto r405 = call(h, get);
  CHECK(r405.status == 405);
  CHECK(header_of(r405, "Allow") == "POST");
  CHECK(a == 2);

  router.remove_route("/in/b");
  FakeRequest gone("POST", "/in/b");
  CHECK(call(h, gone).status == 404);

  router.set_draining();
  FakeRequest late("POST", "/in/a");
  auto r503 = call(h, late);
  CHECK(r503.status == 503);
  CHECK(r503.close);
  CHECK(header_of(r503, "Retry-After") == "1");
  CHECK(a == 2);
}
