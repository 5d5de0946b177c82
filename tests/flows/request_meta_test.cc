// Request metadata in flows (docs/adr/0312-request-metadata.md): the `meta` root of the
// expression language, `from.http.meta_headers` and its errors, a test case's `meta:`, the
// query decoder and the default header list.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "flows/flow.h"
#include "flows/json_limits.h"
#include "flows/request_meta.h"
#include "flows/testing.h"
#include "tests/flows/expr_helpers.h"

using namespace weir::flows;
using weir::flows::testing::compile_err;
using weir::flows::testing::eval_ok;

namespace {

const std::string kMeta = R"({"method":"POST","path":"/in/github","query":{"tenant":"acme","tag":["a","b"]},)"
                          R"("headers":{"x-github-event":"push","x-github-delivery":"d-1"}})";

// `text` evaluated over `self` with kMeta (or `meta`) as the request metadata.
Json eval_meta(const std::string& text, const Json& self = Json::object(), const std::string& meta = kMeta) {
  Expression e;
  CompileError ce;
  INFO("expression: " << text);
  REQUIRE(Expression::compile(text, CompileScope{}, &e, &ce));
  Json out;
  std::string err;
  INFO("eval error: " << err);
  REQUIRE(e.evaluate(self, nullptr, &out, &err, meta));
  return out;
}

LoadResult load(const std::string& text) {
  LoadOptions o;
  o.env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  return load_flow_text(text, "t.yaml", o);
}

std::vector<std::string> problems(const std::string& text) {
  LoadResult r = load(text);
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) {
    out.push_back(std::to_string(d.where.line) + ":" + std::to_string(d.where.column) + ": " + d.message);
  }
  return out;
}

const std::string kSink = "to: { out: { http: { url: \"http://127.0.0.1:1/x\" } } }\n";

std::string with_meta_headers(const std::string& list) {
  return "flow: f\nfrom: { http: { path: /in, meta_headers: " + list + " } }\n" + kSink;
}

}  // namespace

TEST_CASE("meta: method, path, query and headers of the request", "[meta][expr]") {
  CHECK(eval_meta("meta.method") == "POST");
  CHECK(eval_meta("meta.path") == "/in/github");
  CHECK(eval_meta("meta.query.tenant") == "acme");
  CHECK(eval_meta("meta.query['tag'][1]") == "b");
  CHECK(eval_meta("meta.headers['x-github-event']") == "push");
  CHECK(eval_meta("meta.headers['x-github-event'] == 'push' && this.n > 1", Json{{"n", 2}}) == true);
  CHECK(eval_meta("meta.headers['x-missing']").is_null());
  CHECK(eval_meta("meta.headers['x-missing'] ?? 'none'") == "none");
  // Inside a lambda, and as a whole value.
  CHECK(eval_meta("this.xs.map(x => x + meta.query.tenant)", Json{{"xs", {"1-", "2-"}}}) == Json{"1-acme", "2-acme"});
  CHECK(eval_meta("meta.headers") == Json{{"x-github-event", "push"}, {"x-github-delivery", "d-1"}});
}

TEST_CASE("meta: a field named meta in the event stays this.meta, a lambda parameter named meta wins", "[meta][expr]") {
  const Json self{{"meta", {{"method", "from the body"}}}};
  CHECK(eval_meta("this.meta.method", self) == "from the body");
  CHECK(eval_meta("meta.method", self) == "POST");
  CHECK(eval_meta("this.xs.map(meta => meta * 2)", Json{{"xs", {1, 2}}}) == Json{2, 4});
  // `{meta: …}` in an object literal is a key, not the root.
  CHECK(eval_meta("{meta: meta.method}") == Json{{"meta", "POST"}});
}

TEST_CASE("meta: an event without request metadata reads empty headers and query, null method", "[meta][expr]") {
  CHECK(eval_ok("meta.headers['x-github-event']").is_null());
  CHECK(eval_ok("meta.query") == Json::object());
  CHECK(eval_ok("meta.method").is_null());
  // Text that is no object (an older or foreign publisher) reads the same.
  CHECK(eval_meta("meta", Json::object(), "[1]") == Json{{"headers", Json::object()}, {"query", Json::object()}});
  CHECK(eval_meta("meta.headers", Json::object(), "not json") == Json::object());
  CHECK(eval_meta("meta.query", Json::object(), R"({"query": 5})") == Json::object());
  // Nested past the bound: not parsed, so not walked.
  CHECK(eval_meta("meta.method", Json::object(), R"({"method":"GET","x":[[[[[[1]]]]]]})").is_null());
}

TEST_CASE("meta: compile errors name it as a root, not a function", "[meta][expr][errors]") {
  auto e = compile_err("meta()");
  CHECK(e.message == "unknown function 'meta'");
  Expression x;
  CompileError ce;
  REQUIRE(Expression::compile("meta.headers['x-a']", CompileScope{}, &x, &ce));
  CHECK(x.reads_meta());
  CHECK_FALSE(x.reads_this());
  REQUIRE(Expression::compile("this.meta", CompileScope{}, &x, &ce));
  CHECK_FALSE(x.reads_meta());
}

TEST_CASE("meta: a flow's steps and branch read it", "[meta][steps]") {
  LoadResult r = load(
      "flow: f\nfrom: { http: { path: /in } }\n"
      "steps:\n"
      "  - set: { event: \"meta.headers['x-github-event']\", tenant: meta.query.tenant }\n"
      "  - branch:\n"
      "      - { when: \"meta.headers['x-github-event'] == 'push'\", to: pushes }\n"
      "      - { to: other }\n"
      "to:\n  pushes: { nats: { subject: p } }\n  other: { nats: { subject: o } }\n");
  for (const auto& d : r.diagnostics) UNSCOPED_INFO(d.str());
  REQUIRE(r.flow);
  Outcome push = r.flow->run(Json{{"a", 1}}, kMeta);
  CHECK(push.sink == "pushes");
  CHECK(push.event == Json{{"a", 1}, {"event", "push"}, {"tenant", "acme"}});
  Outcome other = r.flow->run(Json{{"a", 1}}, R"({"headers":{"x-github-event":"issues"}})");
  CHECK(other.sink == "other");
  Outcome none = r.flow->run(Json{{"a", 1}});
  CHECK(none.sink == "other");
  CHECK(none.event["event"].is_null());
}

TEST_CASE("meta: a connector's expression reads it", "[meta][sinks]") {
  LoadResult r = load(
      "flow: f\nfrom: { http: { path: /in } }\n"
      "to: { out: { mqtt: { broker: \"tcp://127.0.0.1:1883\", topic: { expr: \"'gh/' + "
      "meta.headers['x-github-event']\" "
      "} } } }\n");
  for (const auto& d : r.diagnostics) UNSCOPED_INFO(d.str());
  REQUIRE(r.flow);
  const auto& spec = std::get<MqttSinkSpec>(r.flow->sinks()[0].kind);
  REQUIRE(spec.topic_expr);
  std::string topic, err;
  CHECK(spec.topic_expr->eval_string(Json::object(), &topic, &err, kMeta));
  CHECK(topic == "gh/push");
  CHECK_FALSE(spec.topic_expr->eval_string(Json::object(), &topic, &err));
  CHECK(err ==
        "failed: 'gh/' + meta.headers['x-github-event']: cannot add string and null (convert with string(x) or "
        "number(x))");
}

TEST_CASE("from.http.meta_headers: names added to the default list, lower case", "[meta][loader]") {
  LoadResult r = load(with_meta_headers("[X-Tenant, x-request-id, X-GitHub-Event]"));
  for (const auto& d : r.diagnostics) UNSCOPED_INFO(d.str());
  REQUIRE(r.flow);
  // A default name listed again is accepted and changes nothing.
  CHECK(std::get<HttpSourceSpec>(r.flow->source()).meta_headers ==
        std::vector<std::string>{"x-tenant", "x-request-id"});
}

TEST_CASE("from.http.meta_headers: credentials, signatures and bad names are load errors", "[meta][loader][errors]") {
  CHECK(problems(with_meta_headers("[Authorization]")) ==
        std::vector<std::string>{
            "2:43: from.http.meta_headers[0]: Authorization is never stored: a name holding \"authorization\" is a "
            "credential or a signature, and stored events are readable in the stream, in dead letters and through "
            "the admin API"});
  CHECK(problems(with_meta_headers("[X-Tenant, X-Hub-Signature-256]")) ==
        std::vector<std::string>{
            "2:53: from.http.meta_headers[1]: X-Hub-Signature-256 is never stored: a name holding \"signature\" is a "
            "credential or a signature, and stored events are readable in the stream, in dead letters and through "
            "the admin API"});
  CHECK(problems(with_meta_headers("[Cookie]")).at(0).find("Cookie is never stored: a name holding \"cookie\"") !=
        std::string::npos);
  CHECK(problems(with_meta_headers("[X-Gitlab-Token]")).at(0).find("a name holding \"token\"") != std::string::npos);
  CHECK(problems(with_meta_headers("[X-Shopify-Hmac-Sha256]")).at(0).find("a name holding \"hmac\"") !=
        std::string::npos);
  // The flow's own signature header, whatever its name.
  CHECK(problems("flow: f\nfrom: { http: { path: /in, hmac: { secret_env: S, header: X-Check }, "
                 "meta_headers: [x-check] } }\n" +
                 kSink) ==
        std::vector<std::string>{
            "2:85: from.http.meta_headers[0]: x-check is never stored: it is this flow's hmac.header, a signature, "
            "and stored events are readable in the stream, in dead letters and through the admin API"});
  CHECK(problems(with_meta_headers("[\"X Tenant\"]")) ==
        std::vector<std::string>{
            "2:43: from.http.meta_headers[0]: \"X Tenant\" is not a header name (letters, digits and "
            "!#$%&'*+-.^_`|~)"});
  CHECK(
      problems(with_meta_headers("[X-Tenant, x-tenant]")) ==
      std::vector<std::string>{"2:53: from.http.meta_headers[1]: x-tenant is listed twice (header names ignore case)"});
  CHECK(problems(with_meta_headers("X-Tenant")) ==
        std::vector<std::string>{"2:42: from.http.meta_headers must be a list of strings, got a string"});
  std::string many = "[";
  for (int i = 0; i <= 32; ++i) many += std::string(i ? ", " : "") + "X-H" + std::to_string(i);
  CHECK(problems(with_meta_headers(many + "]")) ==
        std::vector<std::string>{"2:42: from.http.meta_headers names 33 headers, more than the 32 a flow may add"});
}

TEST_CASE("the default header list holds no credential or signature", "[meta]") {
  for (const auto& name : default_meta_headers()) {
    INFO(name);
    CHECK(refused_meta_header(name).empty());
    CHECK(name == lower_header_name(name));
  }
  CHECK(refused_meta_header("Proxy-Authorization") ==
        "a name holding \"authorization\" is a credential or a signature");
  CHECK(refused_meta_header("Stripe-Signature") == "a name holding \"signature\" is a credential or a signature");
  CHECK(refused_meta_header("X-Api-Key") == "a name holding \"api-key\" is a credential or a signature");
  CHECK(refused_meta_header("X-Sig", "x-sig") == "it is this flow's hmac.header, a signature");
}

TEST_CASE("write_request_meta: the text nlohmann's ASCII dump of the same object gives", "[meta]") {
  // Printable ASCII, quotes and backslashes, control characters, DEL, UTF-8, a stray byte.
  const std::vector<std::string> values = {
      "",        "push",        "a \"quoted\" \\ path/", "tab\there",   "bell\x07",
      "del\x7f", "caf\xc3\xa9", "\xf0\x9f\x98\x80",      "bad\xff\xfe", "line\r\nbreak"};
  for (const std::string& v : values) {
    INFO("value: " << Json(v).dump(-1, ' ', true, Json::error_handler_t::replace));
    const Json query = {{"q", v}, {"a", {"1", v}}};
    const std::string query_json = query.dump(-1, ' ', true, Json::error_handler_t::replace);
    const Json expected = {{"method", "POST"},
                           {"path", "/in/" + v},
                           {"query", query},
                           {"headers", {{"x-github-event", v}, {"content-type", "application/json"}, {"a-first", v}}}};
    // Out of order and with a repeated name, as the default list and a flow's own names may give.
    const std::string text = write_request_meta(
        "POST", "/in/" + v, query_json,
        {{"x-github-event", v}, {"content-type", "application/json"}, {"a-first", v}, {"a-first", v}});
    CHECK(text == expected.dump(-1, ' ', true, Json::error_handler_t::replace));
  }
  CHECK(write_request_meta("GET", "/", "{}", {}) == R"({"headers":{},"method":"GET","path":"/","query":{}})");
}

TEST_CASE("parse_query: a query decoded as a form, no field read as JSON", "[meta][form]") {
  JsonError err;
  auto q = parse_query("a=1&b=x+y%21&a=2&payload=%7B%7D&empty=", &err);
  REQUIRE(q);
  CHECK(*q == Json{{"a", {"1", "2"}}, {"b", "x y!"}, {"payload", "{}"}, {"empty", ""}});
  CHECK(parse_query("", &err) == Json::object());
  CHECK_FALSE(parse_query("a=%zz", &err));
  CHECK(err.byte == 3);
  CHECK(err.message == "a '%' not followed by two hex digits");
}

TEST_CASE("weir test: a case's meta is the request metadata, its shape checked", "[meta][tests]") {
  LoadResult r = load(
      "flow: f\nfrom: { http: { path: /in } }\n"
      "steps:\n  - set: { event: \"meta.headers['x-github-event']\", m: meta.method }\n" +
      kSink +
      "tests:\n"
      "  - { input: {}, meta: { method: POST, headers: { X-GitHub-Event: push } },"
      " expect: { out: { event: push, m: POST } } }\n");
  for (const auto& d : r.diagnostics) UNSCOPED_INFO(d.str());
  REQUIRE(r.flow);
  CHECK(run_test_case(*r.flow, r.flow->tests()[0], 0).passed);
  auto t = [](const std::string& c) {
    return problems("flow: f\nfrom: { http: { path: /in } }\n" + kSink + "tests:\n" + c);
  };
  CHECK(
      t("  - { input: {}, meta: [1], expect: dropped }\n") ==
      std::vector<std::string>{"5:24: tests[0].meta must be a mapping of method, path, query and headers, got a list"});
  CHECK(t("  - { input: {}, meta: { verb: GET }, expect: dropped }\n") ==
        std::vector<std::string>{
            "5:26: unknown key \"verb\" in tests[0].meta; expected one of: method, path, query, headers"});
  CHECK(t("  - { input: {}, meta: { headers: [a] }, expect: dropped }\n") ==
        std::vector<std::string>{"5:35: tests[0].meta.headers must be a mapping, got a list"});
  CHECK(t("  - { input: {}, metadata: {}, expect: dropped }\n") ==
        std::vector<std::string>{
            "5:18: unknown key \"metadata\" in tests[0]; expected one of: name, input, meta, expect"});
  CHECK(t("  - { input: {}, meta: { method: [GET] }, expect: dropped }\n") ==
        std::vector<std::string>{"5:34: tests[0].meta.method must be text, got a list"});
}

TEST_CASE("docs/recipes/github.md shows examples/recipes/github.yaml in full", "[meta][docs]") {
  auto read = [](const std::string& rel) {
    std::ifstream in(std::string(WEIR_SOURCE_DIR) + "/" + rel);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  };
  const std::string page = read("docs/recipes/github.md");
  const std::string flow = read("examples/recipes/github.yaml");
  REQUIRE_FALSE(flow.empty());
  const std::string open = "```yaml\n";
  const size_t start = page.find(open);
  REQUIRE(start != std::string::npos);
  const size_t end = page.find("```\n", start + open.size());
  REQUIRE(end != std::string::npos);
  CHECK(page.substr(start + open.size(), end - start - open.size()) == flow);
}
