// POST /dlq/replay's filter parser and answer, and ReplayFilter's matching
// (runtime/admin/replay_request.h, runtime/flow/dlq.h; docs/adr/0298-bulk-replay.md). The
// end-to-end behaviour through a real weir is tests/integration/dlq_replay_test.cc.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/admin/replay_request.h"

using weir::parse_replay_request;
using weir::ReplayFilter;
using weir::ReplayRequest;

namespace {
// The parse error, or "" when the body parses.
std::string error_of(const std::string& body, ReplayRequest* out = nullptr) {
  ReplayRequest r;
  auto bad = parse_replay_request(body, out ? out : &r);
  return bad.value_or("");
}
}  // namespace

TEST_CASE("replay request: empty, {} and every key parse into the filter", "[replay]") {
  ReplayRequest r;
  CHECK(error_of("", &r).empty());
  CHECK(error_of(" \r\n", &r).empty());
  CHECK(error_of("{}", &r).empty());
  CHECK_FALSE(r.dry_run);
  CHECK_FALSE(r.filter.flow);
  CHECK(r.filter.ids.empty());

  ReplayRequest all;
  REQUIRE(error_of(R"({"flow": "orders", "sink": "big", "ids": ["e1", "e2"], "since": "2026-01-01T00:00:00Z",
                      "until": "2026-01-01T01:00:00.250+01:00", "reason": "HTTP 400", "dry_run": true})",
                   &all)
              .empty());
  CHECK(all.dry_run);
  CHECK(*all.filter.flow == "orders");
  CHECK(*all.filter.sink == "big");
  CHECK(all.filter.ids == std::vector<std::string>{"e1", "e2"});
  CHECK(*all.filter.since_ms == 1767225600000);
  CHECK(*all.filter.until_ms == 1767225600250);  // the offset is applied
  CHECK(*all.filter.reason == "HTTP 400");

  ReplayRequest ms;
  REQUIRE(error_of(R"({"since": 1767225600000, "until": 1767225600001, "dry_run": false})", &ms).empty());
  CHECK(*ms.filter.since_ms == 1767225600000);
  CHECK_FALSE(ms.dry_run);
}

TEST_CASE("replay request: malformed filters say what was wrong", "[replay]") {
  CHECK(error_of("[]") == "the body must be a JSON object");
  CHECK(error_of("{") == "the body must be a JSON object");
  CHECK(error_of(R"({"flow": "a", "stage": "flow"})").find("unknown key \"stage\"") == 0);
  CHECK(error_of(R"({"flow": ""})").find("flow must be") == 0);
  CHECK(error_of(R"({"flow": null})").find("flow must be") == 0);
  CHECK(error_of(R"({"sink": 3})").find("sink must be") == 0);
  CHECK(error_of(R"({"reason": ""})").find("reason must be") == 0);
  CHECK(error_of(R"({"ids": []})").find("ids must name at least one") == 0);
  CHECK(error_of(R"({"ids": ["a", ""]})").find("ids must hold") == 0);
  CHECK(error_of(R"({"ids": "a"})").find("ids must be an array") == 0);
  CHECK(error_of(R"({"since": "today"})").find("since \"today\" is not an RFC 3339 timestamp") == 0);
  CHECK(error_of(R"({"since": ""})").find("since must be an RFC 3339 timestamp") == 0);
  CHECK(error_of(R"({"until": true})").find("until must be") == 0);
  CHECK(error_of(R"({"until": -1})").find("until must be") == 0);
  CHECK(error_of(R"({"until": 2.5})").find("until must be") == 0);
  CHECK(error_of(R"({"since": "2026-01-01T10:00:00Z", "until": "2026-01-01T09:00:00Z"})") ==
        "since must be before until (the range is since inclusive, until exclusive)");
  CHECK(error_of(R"({"since": 5, "until": 5})").find("since must be before until") == 0);
  CHECK(error_of(R"({"dry_run": 1})") == "dry_run must be true or false");
}

TEST_CASE("replay filter: every given field must match", "[replay]") {
  ReplayFilter none;
  CHECK(none.matches("a", "flow", "e1", 0, ""));

  ReplayFilter f;
  f.sink = "big";
  CHECK(f.matches("a", "sink:big", "e1", 0, "x"));
  CHECK(f.matches("b", "sink:big", "e1", 0, "x"));  // a sink name in any flow
  CHECK_FALSE(f.matches("a", "sink:bigger", "e1", 0, "x"));
  CHECK_FALSE(f.matches("a", "flow", "e1", 0, "x"));
  f.flow = "a";
  CHECK_FALSE(f.matches("b", "sink:big", "e1", 0, "x"));

  ReplayFilter t;
  t.since_ms = 100;
  t.until_ms = 200;
  CHECK_FALSE(t.matches("a", "flow", "e", 99, ""));
  CHECK(t.matches("a", "flow", "e", 100, ""));  // since inclusive
  CHECK(t.matches("a", "flow", "e", 199, ""));
  CHECK_FALSE(t.matches("a", "flow", "e", 200, ""));  // until exclusive

  ReplayFilter r;
  r.reason = "HTTP 400";
  CHECK(r.matches("a", "flow", "e", 0, "sink answered HTTP 400 Bad Request"));
  CHECK_FALSE(r.matches("a", "flow", "e", 0, "sink answered http 400"));  // case-sensitive
  r.ids = {"e1", "e2"};
  CHECK(r.matches("a", "flow", "e2", 0, "HTTP 400"));
  CHECK_FALSE(r.matches("a", "flow", "e3", 0, "HTTP 400"));
}

TEST_CASE("replay answer: the dry run's count and breakdown, the real run's replayed and remaining", "[replay]") {
  weir::ReplayResult r;
  r.matched = 3;
  r.by_stage["a"]["flow"] = 1;
  r.by_stage["a"]["sink:big"] = 2;
  CHECK(weir::replay_answer(r, true) ==
        nlohmann::json{{"dry_run", true}, {"would_replay", 3}, {"flows", {{"a", {{"flow", 1}, {"sink:big", 2}}}}}});
  r.replayed = 2;
  r.remaining = 1;
  r.held["a"] = "flow backlog full (4 events not yet delivered)";
  CHECK(weir::replay_answer(r, false) ==
        nlohmann::json{
            {"replayed", 2}, {"remaining", 1}, {"held", {{"a", "flow backlog full (4 events not yet delivered)"}}}});
  weir::ReplayResult clean;
  CHECK(weir::replay_answer(clean, false) == nlohmann::json{{"replayed", 0}, {"remaining", 0}});
}
