// Running flows: lookup, set, map, filter, branch, routing and run-time errors.
#include <catch2/catch.hpp>
#include <atomic>
#include <thread>

#include "flows/flow.h"

using namespace weir::flows;

namespace {

std::shared_ptr<const Flow> flow_of(const std::string& steps, const std::string& extra = "",
                                    const std::string& sinks = "to: { out: { nats: { subject: o } } }\n") {
  std::string text = "flow: f\nfrom: { http: { path: /in } }\n" + sinks + extra + "steps:\n" + steps;
  LoadResult r = load_flow_text(text, "t.yaml");
  for (const auto& d : r.diagnostics) UNSCOPED_INFO(d.str());
  REQUIRE(r.flow);
  return r.flow;
}

Json emit(const Flow& f, const Json& in, const std::string& sink = "out") {
  Outcome o = f.run(in);
  INFO("error: " << o.error.str());
  REQUIRE(o.kind == Outcome::Kind::kEmit);
  CHECK(o.sink == sink);
  return o.event;
}

FlowError error_of(const Flow& f, const Json& in) {
  Outcome o = f.run(in);
  REQUIRE(o.kind == Outcome::Kind::kError);
  return o.error;
}

const std::string kTable =
    "tables:\n  tiers: { key: id, rows: [ { id: c1, tier: gold, d: 10 }, { id: 2, tier: silver, d: 5 } ] }\n";

}  // namespace

TEST_CASE("lookup step", "[steps]") {
  auto f = flow_of("  - lookup: { table: tiers, key: this.cid, as: customer.tier_row, default: { tier: bronze } }\n",
                   kTable);
  CHECK(emit(*f, {{"cid", "c1"}}) ==
        Json::parse(R"({"cid": "c1", "customer": {"tier_row": {"id": "c1", "tier": "gold", "d": 10}}})"));
  CHECK(emit(*f, {{"cid", 2}})["customer"]["tier_row"]["tier"] == "silver");
  CHECK(emit(*f, {{"cid", "zz"}})["customer"]["tier_row"] == Json::parse(R"({"tier": "bronze"})"));
  CHECK(emit(*f, Json::object())["customer"]["tier_row"] == Json::parse(R"({"tier": "bronze"})"));  // null key: default
  FlowError e = error_of(*f, {{"cid", {1, 2}}});
  CHECK(e.message == "lookup key must be a string or a number, got array");
  CHECK(e.expression == "this.cid");
  // No default: null; no `as`: the table's name.
  auto g = flow_of("  - lookup: { table: tiers, key: this.cid }\n", kTable);
  CHECK(emit(*g, {{"cid", "x"}}) == Json::parse(R"({"cid": "x", "tiers": null})"));
  CHECK(emit(*g, {{"cid", "c1"}})["tiers"]["d"] == 10);
  // Into an event that is not an object: a flow error, not a crash.
  e = error_of(*g, Json::array({1}));
  CHECK(e.message == "the event is an array, not an object");
}

TEST_CASE("set step", "[steps]") {
  auto f = flow_of(
      "  - set:\n      a: 1\n      b.c.d: this.a + 1\n      this.e: \"'x'\"\n      n: null\n      t: true\n"
      "      s: \"'str'\"\n      empty: {}\n      nested: { x: this.a, y: { z: 2 } }\n");
  Json out = emit(*f, {{"keep", "k"}});
  CHECK(out == Json::parse(R"({"keep": "k", "a": 1, "b": {"c": {"d": 2}}, "e": "x", "n": null, "t": true,
                               "s": "str", "empty": {}, "nested": {"x": 1, "y": {"z": 2}}})"));
  // Null events become objects; other non-objects are errors naming the path.
  CHECK(emit(*f, nullptr)["a"] == 1);
  auto g = flow_of("  - set: { a.b: 1 }\n");
  CHECK(emit(*g, {{"a", nullptr}}) == Json::parse(R"({"a": {"b": 1}})"));
  FlowError e = error_of(*g, {{"a", 5}});
  CHECK(e.message == "cannot set a.b: a is a number, not an object");
  e = error_of(*g, {{"a", {1}}});
  CHECK(e.message == "cannot set a.b: a is an array, not an object");
  e = error_of(*g, Json("text"));
  CHECK(e.message == "cannot set a.b: the event is a string, not an object");
  // Copying a part of the event onto another part works (values are copied first).
  auto h = flow_of("  - set: { copy: this.src, src.x: 2 }\n");
  CHECK(emit(*h, {{"src", {{"x", 1}}}}) == Json::parse(R"({"src": {"x": 2}, "copy": {"x": 1}})"));
}

TEST_CASE("map step: projection", "[steps]") {
  auto f = flow_of(
      "  - map:\n      id: this.id\n      again: this.id\n      whole_a: this.a\n      inner: this.a.b\n"
      "      sum: this.a.b + this.n\n      deep: { x: this.n, y: this.missing }\n      c.d: \"'lit'\"\n");
  Json in = Json::parse(R"({"id": "i", "n": 1, "a": {"b": 2}, "drop": "me"})");
  CHECK(emit(*f, in) == Json::parse(R"({"id": "i", "again": "i", "whole_a": {"b": 2}, "inner": 2, "sum": 3,
                                         "deep": {"x": 1, "y": null}, "c": {"d": "lit"}})"));
  // Plain paths that nothing else reads are moved, and the result is the same.
  auto g = flow_of("  - map: { id: this.id, items: this.items, count: this.items.len() }\n");
  Json big = {{"id", "x"}, {"items", Json::array()}};
  for (int i = 0; i < 100; ++i) big["items"].push_back({{"n", i}});
  Json out = emit(*g, big);
  CHECK(out["items"] == big["items"]);
  CHECK(out["count"] == 100);
  CHECK(out["id"] == "x");
  // The map step may also be a single expression: the event becomes its value.
  auto h = flow_of("  - map: \"{k: this.a, list: [this.b, 1]}\"\n");
  CHECK(emit(*h, {{"a", 1}, {"b", 2}}) == Json::parse(R"({"k": 1, "list": [2, 1]})"));
  auto w = flow_of("  - map: this.inner\n");
  CHECK(emit(*w, {{"inner", {1, 2}}}) == Json::parse("[1, 2]"));
  auto whole = flow_of("  - map: { copy: this }\n");
  CHECK(emit(*whole, {{"a", 1}}) == Json::parse(R"({"copy": {"a": 1}})"));
}

TEST_CASE("filter step", "[steps]") {
  auto f = flow_of("  - filter: this.n > 1\n  - set: { passed: true }\n");
  CHECK(f->run({{"n", 0}}).kind == Outcome::Kind::kDropped);
  CHECK(emit(*f, {{"n", 2}})["passed"] == true);
  auto g = flow_of("  - filter: this.flag\n");
  CHECK(g->run(Json::object()).kind == Outcome::Kind::kDropped);  // null: dropped
  CHECK(g->run({{"flag", true}}).kind == Outcome::Kind::kEmit);
  FlowError e = error_of(*g, {{"flag", "yes"}});
  CHECK(e.message == "condition must be a bool (or null), got string \"yes\"");
  auto h = flow_of("  - filter: false\n");
  CHECK(h->run(Json::object()).kind == Outcome::Kind::kDropped);
}

TEST_CASE("branch step: first match wins, nested steps, default", "[steps][routing]") {
  std::string sinks =
      "to:\n  big: { nats: { subject: b } }\n  mid: { nats: { subject: m } }\n  small: { nats: { subject: s } }\n";
  auto f = flow_of(
      "  - branch:\n"
      "      - when: this.n > 100\n        steps: [ { set: { tag: \"'big'\" } } ]\n        to: big\n"
      "      - when: this.n > 10\n        steps:\n          - set: { tag: \"'mid'\" }\n          - branch:\n"
      "              - { when: this.n > 50, steps: [ { set: { upper: true } } ], to: big }\n"
      "        to: mid\n"
      "      - when: this.n > 5\n        to: mid\n"
      "      - to: small\n",
      "", sinks);
  Json o = emit(*f, {{"n", 500}}, "big");
  CHECK(o == Json::parse(R"({"n": 500, "tag": "big"})"));
  o = emit(*f, {{"n", 60}}, "big");  // second arm; its nested branch routes first
  CHECK(o == Json::parse(R"({"n": 60, "tag": "mid", "upper": true})"));
  o = emit(*f, {{"n", 20}}, "mid");  // second arm, nested branch does not match: the arm's `to`
  CHECK(o == Json::parse(R"({"n": 20, "tag": "mid"})"));
  o = emit(*f, {{"n", 7}}, "mid");  // third arm (the second did not match)
  CHECK(o == Json::parse(R"({"n": 7})"));
  o = emit(*f, {{"n", 1}}, "small");  // the default arm
  CHECK(o == Json::parse(R"({"n": 1})"));
}

TEST_CASE("branch without a route continues after it", "[steps][routing]") {
  auto f = flow_of(
      "  - branch:\n      - when: this.n > 10\n        steps: [ { set: { big: true } } ]\n"
      "      - when: this.n > 5\n        steps: [ { set: { mid: true } } ]\n"
      "  - set: { after: true }\n");
  CHECK(emit(*f, {{"n", 20}}) == Json::parse(R"({"n": 20, "big": true, "after": true})"));
  CHECK(emit(*f, {{"n", 7}}) == Json::parse(R"({"n": 7, "mid": true, "after": true})"));
  CHECK(emit(*f, {{"n", 1}}) == Json::parse(R"({"n": 1, "after": true})"));
  FlowError e = error_of(*f, {{"n", "x"}});
  CHECK(e.step == 0);
  CHECK(e.step_path == "branch");
  CHECK(e.expression == "this.n > 10");
  CHECK(e.message == "this.n > 10: cannot compare string with number");
}

TEST_CASE("routing with several sinks", "[steps][routing]") {
  std::string sinks = "to:\n  a: { nats: { subject: a } }\n  b: { nats: { subject: b } }\n";
  auto f = flow_of(
      "  - filter: this.keep ?? true\n  - branch:\n      - { when: this.x == 1, to: a }\n      - { to: b }\n"
      "  - set: { unreachable: true }\n",
      "", sinks);
  CHECK(emit(*f, {{"x", 1}}, "a") == Json::parse(R"({"x": 1})"));
  CHECK(emit(*f, {{"x", 2}}, "b") == Json::parse(R"({"x": 2})"));
  CHECK(f->run({{"keep", false}}).kind == Outcome::Kind::kDropped);
}

TEST_CASE("run-time errors name flow, version, step, expression and message", "[steps][errors]") {
  auto f = flow_of(
      "  - set: { ok: 1 }\n  - branch:\n      - when: this.go\n        steps:\n          - set: { a: 1 }\n"
      "          - set: { amount: number(this.amount) }\n");
  Outcome o = f->run({{"go", true}, {"amount", "abc"}});
  REQUIRE(o.kind == Outcome::Kind::kError);
  CHECK(o.error.flow == "f");
  CHECK(o.error.version == 1);
  CHECK(o.error.step == 1);
  CHECK(o.error.step_path == "branch arm 0 > set amount");
  CHECK(o.error.expression == "number(this.amount)");
  CHECK(o.error.message == "number(this.amount): cannot convert \"abc\" to a number");
  CHECK(o.error.str() ==
        "flow f v1 step 1 (branch arm 0 > set amount) expression \"number(this.amount)\": "
        "number(this.amount): cannot convert \"abc\" to a number");
  // Versions set by the registry show up.
  Flow moved;
  {
    LoadResult r = load_flow_text(
        "flow: g\nfrom: { http: { path: /in } }\nto: { o: { flow: {} } }\n"
        "steps: [ { filter: \"1 / this.n > 0\" } ]\n",
        "g.yaml");
    REQUIRE(r.flow);
    auto copy = std::const_pointer_cast<Flow>(r.flow);
    copy->set_version(7);
    moved = std::move(*copy);
  }
  FlowError e = error_of(moved, {{"n", 0}});
  CHECK(e.flow == "g");
  CHECK(e.version == 7);
  CHECK(e.step == 0);
  CHECK(e.step_path == "filter");
  CHECK(e.message == "1 / this.n: division by zero");
  // Every data problem is an outcome, never an exception.
  auto h = flow_of("  - set: { a: \"this.x.map(i => i * 2)\", b: \"lookup(this.t, 1)\", c: this.s + 1 }\n", kTable);
  for (const Json& bad : {Json(nullptr), Json(5), Json("s"), Json::array(), Json::parse(R"({"x": "nope"})"),
                          Json::parse(R"({"x": [1, "a"]})"), Json::parse(R"({"x": [], "t": "missing"})"),
                          Json::parse(R"({"x": [], "t": "tiers", "s": "str"})")}) {
    INFO(bad.dump());
    Outcome out;
    REQUIRE_NOTHROW(out = h->run(bad));
    CHECK(out.kind == Outcome::Kind::kError);
    CHECK_FALSE(out.error.message.empty());
  }
  FlowError t = error_of(*h, Json::parse(R"({"x": [], "t": "missing"})"));
  CHECK(t.message == "lookup(this.t, 1): no table named \"missing\"");
}

TEST_CASE("a moved-from Flow is safe to run", "[steps][errors]") {
  Flow empty;
  Outcome o = empty.run(Json::object());
  CHECK(o.kind == Outcome::Kind::kError);
}

TEST_CASE("one flow runs on several threads at once", "[steps]") {
  auto f = flow_of(
      "  - set: { total: this.items.map(i => i.q * i.p).sum(), id2: this.id + '!' }\n"
      "  - filter: this.total > 0\n");
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        int n = (i + t) % 5;
        Json ev = {{"id", std::to_string(i)}, {"items", Json::array()}};
        for (int k = 0; k < n; ++k) ev["items"].push_back({{"q", k + 1}, {"p", 2}});
        Outcome o = f->run(ev);
        int expected = 0;
        for (int k = 0; k < n; ++k) expected += (k + 1) * 2;
        if (n == 0 ? o.kind != Outcome::Kind::kDropped
                   : (o.kind != Outcome::Kind::kEmit || o.event["total"] != expected ||
                      o.event["id2"] != std::to_string(i) + "!")) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
}
