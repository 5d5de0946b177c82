// Flow files: the schema of every source, sink and step, and its diagnostics.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "flows/flow.h"
#include "flows/testing.h"
#include "flows/schema.h"
#include "flows/text.h"
#include "flows/value.h"

using namespace weir::flows;

namespace {

const std::string kData = WEIR_FLOWS_TEST_DATA;

LoadOptions env_options(std::map<std::string, std::string> vars = {}) {
  LoadOptions o;
  o.env = [vars](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  return o;
}

LoadResult load(const std::string& text, const std::string& name = "t.yaml",
                std::map<std::string, std::string> vars = {}) {
  return load_flow_text(text, name, env_options(std::move(vars)));
}

// Diagnostics as "line:column: message".
std::vector<std::string> problems(const std::string& text, const std::string& name = "t.yaml") {
  LoadResult r = load(text, name);
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) {
    out.push_back(std::to_string(d.where.line) + ":" + std::to_string(d.where.column) + ": " + d.message);
  }
  CHECK((r.flow == nullptr) == !out.empty());
  return out;
}

std::string one_problem(const std::string& text, const std::string& name = "t.yaml") {
  auto p = problems(text, name);
  INFO("problems: " << p.size());
  for (const auto& x : p) UNSCOPED_INFO(x);
  REQUIRE(p.size() == 1);
  return p[0];
}

const std::string kHead = "flow: f\nfrom: { http: { path: /in } }\n";
const std::string kSink = "to: { out: { http: { url: \"http://127.0.0.1:1/x\" } } }\n";

std::shared_ptr<const Flow> must_load(const std::string& text, std::map<std::string, std::string> vars = {}) {
  LoadResult r = load(text, "t.yaml", std::move(vars));
  for (const auto& d : r.diagnostics) UNSCOPED_INFO(d.str());
  REQUIRE(r.flow);
  return r.flow;
}

}  // namespace

TEST_CASE("three separate mistakes are all reported with line and column", "[loader][errors]") {
  for (const char* file : {"three_mistakes.yaml", "three_mistakes.json"}) {
    INFO(file);
    LoadResult r = load_flow_file(kData + "/" + file);
    REQUIRE_FALSE(r.flow);
    std::vector<std::string> got;
    for (const auto& d : r.diagnostics) got.push_back(d.str());
    REQUIRE(got.size() == 3);
    bool yaml = std::string(file).find(".yaml") != std::string::npos;
    std::string path = kData + "/" + file;
    CHECK(got[0] == path + (yaml ? ":7:15" : ":5:25") +
                        ": invalid expression in steps[0].set.amount: unknown function 'numbr' "
                        "(did you mean number?)");
    CHECK(got[1] ==
          path + (yaml ? ":11:13" : ":7:53") + ": steps[2].branch[0].to: unknown sink \"bigg\" (sinks: big, small)");
    CHECK(got[2].find(path + (yaml ? ":14:54" : ":10:58") +
                      ": unknown key \"retrys\" in to.big.http (did you mean \"retry\" or \"retries\"?)") == 0);
    CHECK(got[2].find("expected one of") == std::string::npos);  // the near key alone, not the list
  }
}

TEST_CASE("YAML and JSON files give identical flows", "[loader]") {
  LoadResult y = load_flow_file(kData + "/orders.yaml");
  LoadResult j = load_flow_file(kData + "/orders.json");
  for (const auto& d : y.diagnostics) UNSCOPED_INFO(d.str());
  for (const auto& d : j.diagnostics) UNSCOPED_INFO(d.str());
  REQUIRE(y.flow);
  REQUIRE(j.flow);
  CHECK(y.flow->name() == j.flow->name());
  CHECK(y.flow->on_error() == j.flow->on_error());
  CHECK(y.flow->tests() == j.flow->tests());
  const auto& ys = std::get<HttpSourceSpec>(y.flow->source());
  const auto& js = std::get<HttpSourceSpec>(j.flow->source());
  CHECK(ys.path == js.path);
  REQUIRE(ys.hmac);
  REQUIRE(js.hmac);
  CHECK(ys.hmac->secret_env == js.hmac->secret_env);
  REQUIRE(y.flow->sinks().size() == j.flow->sinks().size());
  for (size_t i = 0; i < y.flow->sinks().size(); ++i) {
    const auto& a = y.flow->sinks()[i];
    const auto& b = j.flow->sinks()[i];
    CHECK(a.name == b.name);
    const auto& ah = std::get<HttpSinkSpec>(a.kind);
    const auto& bh = std::get<HttpSinkSpec>(b.kind);
    CHECK(ah.url == bh.url);
    CHECK(ah.timeout == bh.timeout);
    CHECK(ah.retries == bh.retries);
    CHECK(ah.max_connections == bh.max_connections);
  }
  // Same outputs for a spread of events (CSV table in one, JSON table in the other).
  for (int i = 0; i < 60; ++i) {
    Json ev = {{"id", "o" + std::to_string(i)},
               {"customer_id", "c" + std::to_string(i % 5)},
               {"amount", std::to_string(i * 7) + ".5"},
               {"ts", "2026-01-01T00:00:00Z"},
               {"items", Json::array()}};
    for (int k = 0; k < i % 4; ++k) {
      ev["items"].push_back({{"sku", "s" + std::to_string(k)},
                             {"qty", std::to_string(k + 1)},
                             {"price", std::to_string(i * 3 % 70) + ".25"}});
    }
    if (i % 13 == 0) ev["amount"] = "n/a";
    Outcome a = y.flow->run(ev);
    Outcome b = j.flow->run(ev);
    CHECK(a.kind == b.kind);
    CHECK(a.sink == b.sink);
    CHECK(a.event == b.event);
    CHECK(a.error.message == b.error.message);
  }
}

TEST_CASE("flow basics: name, hash, file, version", "[loader]") {
  std::string text = kHead + kSink;
  auto f = must_load(text);
  CHECK(f->name() == "f");
  CHECK(f->file() == "t.yaml");
  CHECK(f->content_hash() == sha256_hex(text));
  CHECK(f->version() == 1);
  CHECK(f->on_error() == OnError::kDlq);
  CHECK(f->tests() == Json::array());
  CHECK(std::get<HttpSourceSpec>(f->source()).path == "/in");
  // No steps: the event passes through to the only sink.
  Outcome o = f->run(Json::parse(R"({"a": 1})"));
  CHECK(o.kind == Outcome::Kind::kEmit);
  CHECK(o.sink == "out");
  CHECK(o.event == Json::parse(R"({"a": 1})"));
  auto drop = must_load(kHead + kSink + "on_error: drop\n");
  CHECK(drop->on_error() == OnError::kDrop);
}

TEST_CASE("flow file top level errors", "[loader][errors]") {
  CHECK(one_problem("- a\n") == "1:1: a flow file must be a mapping, got a list");
  CHECK(one_problem("flow: f\n" + kSink) == "1:1: the flow needs `from:` (its source)");
  CHECK(one_problem(kHead) == "1:1: the flow needs `to:` (at least one sink)");
  CHECK(one_problem("from: { http: { path: /in } }\n" + kSink) == "1:1: the flow file needs `flow`");
  CHECK(one_problem("flow: Bad_Name\nfrom: { http: { path: /in } }\n" + kSink) ==
        "1:7: flow name \"Bad_Name\" must match ^[a-z][a-z0-9_-]{0,62}$");
  CHECK(one_problem(kHead + kSink + "on_error: retry\n") == "4:11: on_error must be dlq or drop, got \"retry\"");
  CHECK(one_problem(kHead + kSink + "stepz: []\n")
            .find("4:1: unknown key \"stepz\" in the flow file (did you mean \"steps\"?)") == 0);
  CHECK(one_problem(kHead + "to: {}\n") == "3:5: `to` needs at least one sink");
  CHECK(one_problem(kHead + "to: [a]\n") == "3:5: to must be a mapping, got a list");
  CHECK(one_problem("flow: f\nfrom: { http: { path: /in }, nats: { subject: x } }\n" + kSink) ==
        "2:7: from must have exactly one key, found 2");
  CHECK(one_problem("flow: f\nfrom: { ftp: {} }\n" + kSink).find("2:9: unknown source kind \"ftp\"") == 0);
  CHECK(one_problem(kHead + "to: { out: { smtp: {} } }\n").find("3:14: unknown sink kind \"smtp\"") == 0);
  CHECK(one_problem(kHead + "to: { Out: { flow: {} } }\n") ==
        "3:7: sink name \"Out\" must match ^[a-z][a-z0-9_-]{0,62}$");
  CHECK(one_problem(kHead + kSink + "description: [x]\n") == "4:14: description must be a string, got a list");
  CHECK(problems("flow: f\n") == std::vector<std::string>{"1:1: the flow needs `from:` (its source)",
                                                          "1:1: the flow needs `to:` (at least one sink)"});
  // YAML syntax errors stop at the first (the parser cannot go on), with a position.
  auto p = problems("flow: f\nfrom: { http: { path: /in }\n");
  REQUIRE(p.size() == 1);
  CHECK(p[0].find("YAML syntax error") != std::string::npos);
  p = problems("{\"flow\": \"f\",}", "t.json");
  REQUIRE(p.size() == 1);
  CHECK(p[0] == "1:14: JSON syntax error: expected a string key");
}

TEST_CASE("source: http", "[loader][sources]") {
  auto f = must_load(
      "flow: f\nfrom: { http: { path: /in/x, hmac: { secret_env: S, header: X-Sig, scheme: github },"
      " bearer: { token_env: TOK } } }\n" +
      kSink);
  const auto& s = std::get<HttpSourceSpec>(f->source());
  CHECK(s.path == "/in/x");
  REQUIRE(s.hmac);
  CHECK(s.hmac->secret_env == "S");
  CHECK(s.hmac->header == "X-Sig");
  CHECK(s.hmac->scheme == HmacSpec::Scheme::kGithub);
  CHECK(s.bearer_token_env == "TOK");
  const std::pair<const char*, HmacSpec::Scheme> schemes[] = {{"standard", HmacSpec::Scheme::kStandard},
                                                              {"stripe", HmacSpec::Scheme::kStripe},
                                                              {"slack", HmacSpec::Scheme::kSlack},
                                                              {"shopify", HmacSpec::Scheme::kShopify}};
  for (const auto& [name, scheme] : schemes) {
    auto pf = must_load(std::string("flow: f\nfrom: { http: { path: /in, hmac: { secret_env: S, scheme: ") + name +
                        " } } }\n" + kSink);
    CHECK(std::get<HttpSourceSpec>(pf->source()).hmac->scheme == scheme);
  }
  CHECK(one_problem("flow: f\nfrom: { http: { path: /a, hmac: { secret_env: S, scheme: stripe, header: X } } }\n" +
                    kSink) ==
        "2:74: from.http.hmac.header is for the github scheme only; stripe signatures come in the headers its "
        "sender uses (docs/connectors.md)");
  auto g = must_load("flow: f\nfrom: { http: { path: /in, hmac: { secret_env: S } } }\n" + kSink);
  CHECK(std::get<HttpSourceSpec>(g->source()).hmac->header == "X-Hub-Signature-256");
  CHECK(std::get<HttpSourceSpec>(g->source()).hmac->scheme == HmacSpec::Scheme::kGithub);
  CHECK(one_problem("flow: f\nfrom: { http: { path: in } }\n" + kSink).find("2:23: from.http.path must start with /") ==
        0);
  CHECK(one_problem("flow: f\nfrom: { http: {} }\n" + kSink) == "2:15: from.http needs `path`");
  CHECK(one_problem("flow: f\nfrom: { http: { path: /a, hmac: { scheme: x, secret_env: S } } }\n" + kSink) ==
        "2:43: from.http.hmac.scheme must be github, standard, stripe, slack or shopify, got \"x\"");
  CHECK(one_problem("flow: f\nfrom: { http: { path: /a, hmac: {} } }\n" + kSink) ==
        "2:33: from.http.hmac needs `secret_env`");
  CHECK(one_problem("flow: f\nfrom: { http: { path: /a, hmac: { secret_env: \"a b\" } } }\n" + kSink) ==
        "2:47: from.http.hmac.secret_env must name an environment variable (letters, digits, _)");
  auto bp = problems("flow: f\nfrom: { http: { path: /a, bearer: { token: x } } }\n" + kSink);
  REQUIRE(bp.size() == 2);
  CHECK(bp[0] == "2:35: from.http.bearer needs `token_env`");
  CHECK(bp[1] == "2:37: unknown key \"token\" in from.http.bearer; expected one of: token_env");
  CHECK(one_problem("flow: f\nfrom: { http: [1] }\n" + kSink) == "2:15: from.http must be a mapping, got a list");
}

TEST_CASE("source: mqtt", "[loader][sources]") {
  auto f = must_load(
      "flow: f\nfrom:\n  mqtt: { broker: \"tcp://127.0.0.1:1883\", topic: a/+/b, qos: 0, clean_session: true,\n"
      "          username_env: U, password_env: P, ca_file: ca.pem, cert_file: c.pem, key_file: k.pem,\n"
      "          insecure_skip_verify: true }\n" +
      kSink);
  const auto& s = std::get<MqttSourceSpec>(f->source());
  CHECK(s.broker == "tcp://127.0.0.1:1883");
  CHECK(s.topics == std::vector<std::string>{"a/+/b"});
  CHECK(s.qos == 0);
  CHECK(s.client_id == "weir-f");
  CHECK(s.clean_session);
  CHECK(s.username_env == "U");
  CHECK(s.password_env == "P");
  CHECK(s.ca_file == "ca.pem");
  CHECK(s.cert_file == "c.pem");
  CHECK(s.key_file == "k.pem");
  CHECK(s.insecure_skip_verify);
  auto g = must_load("flow: f\nfrom: { mqtt: { broker: \"ssl://h:8883\", topics: [a, b], client_id: me } }\n" + kSink);
  CHECK(std::get<MqttSourceSpec>(g->source()).topics == std::vector<std::string>{"a", "b"});
  CHECK(std::get<MqttSourceSpec>(g->source()).qos == 1);
  CHECK(std::get<MqttSourceSpec>(g->source()).client_id == "me");
  auto p = problems("flow: f\nfrom: { mqtt: { broker: \"http://h\", qos: 2, clean_session: maybe } }\n" + kSink);
  REQUIRE(p.size() == 4);
  CHECK(p[0] == "2:15: from.mqtt needs `topic` (or `topics`)");
  CHECK(p[1].find("2:25: from.mqtt.broker must be a URL starting with tcp://") == 0);
  CHECK(p[2] == "2:42: from.mqtt.qos must be between 0 and 1");
  CHECK(p[3] == "2:60: from.mqtt.clean_session must be true or false, got a string");
  CHECK(one_problem("flow: f\nfrom: { mqtt: { broker: \"tcp://h:1\", topic: a, topics: [b] } }\n" + kSink) ==
        "2:56: from.mqtt takes `topic` or `topics`, not both");
  CHECK(one_problem("flow: f\nfrom: { mqtt: { broker: \"tcp://h:1\", topics: [] } }\n" + kSink) ==
        "2:46: from.mqtt.topics must not be empty");
  CHECK(one_problem("flow: f\nfrom: { mqtt: { broker: \"tcp://h:1\", topic: a, qos: one } }\n" + kSink) ==
        "2:53: from.mqtt.qos must be an integer, got a string");
}

// One list of broker schemes (flows/schema.h) for the loader and the MQTT connectors:
// the source's own session speaks no WebSocket, the sink's Paho does; `tls://` is neither.
TEST_CASE("mqtt: every broker scheme, source and sink", "[loader][sources][mqtt]") {
  for (std::string_view scheme : weir::flows::schema::kMqttSinkSchemes) {
    std::string url = std::string(scheme) + "://h:1";
    INFO(url);
    must_load(kHead + "to: { m: { mqtt: { broker: \"" + url + "\", topic: t } } }\n");
    bool source_ok = scheme.rfind("ws", 0) != 0;
    auto p = problems("flow: f\nfrom: { mqtt: { broker: \"" + url + "\", topic: t } }\n" + kSink);
    CHECK(p.empty() == source_ok);
    if (!source_ok) {
      REQUIRE(p.size() == 1);
      CHECK(p[0] ==
            "2:25: from.mqtt.broker must be a URL starting with tcp:// or mqtt:// or ssl:// or mqtts://, got \"" + url +
                "\"");
    }
  }
  CHECK(one_problem(kHead + "to: { m: { mqtt: { broker: \"tls://h:1\", topic: t } } }\n")
            .find("to.m.mqtt.broker must be a URL starting with tcp:// or mqtt:// or ssl:// or mqtts:// or ws:// or "
                  "wss://") != std::string::npos);
  CHECK_FALSE(problems("flow: f\nfrom: { mqtt: { broker: \"tls://h:1\", topic: t } }\n" + kSink).empty());
}

// docs/adr/0181: a sink topic is text; an expression only when written `topic: {expr: …}`,
// compiled at load (a typo is a load error, not a literal topic).
TEST_CASE("mqtt sink topic: text, or an expression when written as one", "[loader][sinks][mqtt]") {
  auto sink = [](const std::string& topic) {
    return kHead + "to: { m: { mqtt: { broker: \"tcp://h:1\", topic: " + topic + " } } }\n";
  };
  auto plain = must_load(sink("devices/all/cmd"));
  const auto& p = std::get<MqttSinkSpec>(plain->sinks()[0].kind);
  CHECK(p.topic == "devices/all/cmd");
  CHECK(p.topic_expr == nullptr);

  auto ex = must_load(sink(R"({ expr: "'devices/' + this.device" })"));
  const auto& e = std::get<MqttSinkSpec>(ex->sinks()[0].kind);
  REQUIRE(e.topic_expr != nullptr);
  CHECK(e.topic_expr->text() == "'devices/' + this.device");
  std::string out, err;
  CHECK(e.topic_expr->eval_string(Json{{"device", "d1"}}, &out, &err));
  CHECK(out == "devices/d1");
  CHECK_FALSE(e.topic_expr->eval_string(Json{{"device", 1}}, &out, &err));

  // A typo in an expression: a load error with its place, never a literal topic.
  CHECK(one_problem(sink(R"({ expr: "'devices/' + this.device +" })"))
            .find("invalid expression in to.m.mqtt.topic.expr") != std::string::npos);
  CHECK(one_problem(sink("{ exp: this.t }")).find("unknown key \"exp\" in to.m.mqtt.topic (did you mean \"expr\"?)") !=
        std::string::npos);
  CHECK(one_problem(sink("{ }")).find("to.m.mqtt.topic needs `expr`") != std::string::npos);
  CHECK(one_problem(sink("{ expr: 5 }")).find("to.m.mqtt.topic.expr must be an expression") != std::string::npos);
  // What the old rule read as an expression is refused as text, with the way to write it.
  CHECK(one_problem(sink(R"("'devices/' + this.device")")).find("is an expression; write `topic: {expr: ") !=
        std::string::npos);
  CHECK(one_problem(sink("this.topic")).find("is an expression") != std::string::npos);
  CHECK(one_problem(sink(R"("'out/quoted'")")).find("is an expression") != std::string::npos);
  CHECK(one_problem(sink("out/#")).find("has + or #") != std::string::npos);
}

// docs/adr/0317-per-event-urls.md: `url: {base, expr, allow}`.
TEST_CASE("http sink url: a base origin, an expression compiled at load and allowed origins", "[loader][sinks]") {
  auto sink = [](const std::string& url) { return kHead + "to: { h: { http: { url: " + url + " } } }\n"; };
  auto f = must_load(sink(R"({ base: "https://erp.example.com", expr: "'/orders/' + this.id", )"
                          R"(allow: ["https://erp2.example.com:8443", "http://10.0.0.1/"] })"));
  const auto& h = std::get<HttpSinkSpec>(f->sinks()[0].kind);
  CHECK(h.url == "https://erp.example.com");
  REQUIRE(h.url_expr != nullptr);
  CHECK(h.url_expr->text() == "'/orders/' + this.id");
  CHECK(h.url_allow == std::vector<std::string>{"https://erp2.example.com:8443", "http://10.0.0.1/"});
  const auto fixed_flow = must_load(sink("\"http://h/x\""));
  const auto& fixed = std::get<HttpSinkSpec>(fixed_flow->sinks()[0].kind);
  CHECK(fixed.url == "http://h/x");
  CHECK(fixed.url_expr == nullptr);

  CHECK(one_problem(sink(R"({ base: "https://erp.example.com/api", expr: "'/x'" })")) ==
        "3:33: to.h.http.url.base must be an origin, scheme://host[:port] without a user, path or query (the "
        "expression gives the path), got \"https://erp.example.com/api\"");
  CHECK(one_problem(sink(R"({ base: "https://u:p@erp.example.com", expr: "'/x'" })"))
            .find("to.h.http.url.base must be an origin") != std::string::npos);
  CHECK(one_problem(sink(R"({ base: "ftp://erp", expr: "'/x'" })")) ==
        "3:33: to.h.http.url.base must be a URL starting with http:// or https://, got \"ftp://erp\"");
  CHECK(one_problem(sink(R"({ base: "https://erp.example.com" })")) ==
        "3:25: to.h.http.url needs `expr` (the path, or the URL, of each delivery), or write the url as text");
  CHECK(one_problem(sink(R"({ expr: "'/x'" })")).find("to.h.http.url needs `base`") != std::string::npos);
  CHECK(
      one_problem(sink(R"({ base: "https://e", expr: "'/x' +" })")).find("invalid expression in to.h.http.url.expr") !=
      std::string::npos);
  CHECK(one_problem(sink(R"({ base: "https://e", expr: "'/x'", allow: "https://f" })")) ==
        "3:67: to.h.http.url.allow must be a list of origins (scheme://host[:port]), got a string");
  CHECK(one_problem(sink(R"({ base: "https://e", expr: "'/x'", allow: ["f.example.com"] })")) ==
        "3:68: to.h.http.url.allow[0] must be an origin starting with http:// or https://, got \"f.example.com\"");
  CHECK(one_problem(sink(R"({ base: "https://e", expr: "'/x'", allow: ["https://f/x"] })"))
            .find("to.h.http.url.allow[0] must be an origin") != std::string::npos);
  CHECK(one_problem(sink(R"({ base: "https://e", expr: "'/x'", alow: [] })")) ==
        "3:60: unknown key \"alow\" in to.h.http.url (did you mean \"allow\"?)");
}

// docs/adr/0301: HTTP sink headers are fixed text or `{expr: …}`, compiled at load.
TEST_CASE("http sink headers: fixed values beside expressions compiled at load", "[loader][sinks]") {
  auto sink = [](const std::string& headers) {
    return kHead + "to: { h: { http: { url: \"http://h/x\", headers: " + headers + " } } }\n";
  };
  auto f = must_load(sink(R"({ X-Fixed: abc, X-Empty: "", X-Event-Type: { expr: "'order.' + this.type" } })"));
  const auto& h = std::get<HttpSinkSpec>(f->sinks()[0].kind);
  CHECK(h.headers.size() == 2);
  CHECK(h.headers.at("X-Fixed") == "abc");
  CHECK(h.headers.at("X-Empty").empty());
  REQUIRE(h.header_exprs.size() == 1);
  const auto& e = h.header_exprs.at("X-Event-Type");
  REQUIRE(e != nullptr);
  CHECK(e->text() == "'order.' + this.type");
  std::string out, err;
  CHECK(e->eval_string(Json{{"type", "paid"}}, &out, &err));
  CHECK(out == "order.paid");

  // A typo in an expression: a load error at its place inside the expression.
  CHECK(one_problem(sink(R"({ X-T: { expr: "this.type +" } })")) ==
        "3:75: invalid expression in to.h.http.headers.X-T.expr: expected a value, found end of expression");
  CHECK(one_problem(sink("{ X-T: { exp: this.t } }")).find("unknown key \"exp\" in to.h.http.headers.X-T") !=
        std::string::npos);
  CHECK(one_problem(sink("{ X-T: {} }")).find("to.h.http.headers.X-T needs `expr`") != std::string::npos);
  CHECK(one_problem(sink("{ X-T: { expr: 5 } }")).find("to.h.http.headers.X-T.expr must be an expression") !=
        std::string::npos);
  CHECK(one_problem(sink("{ \"X T\": a }")).find("\"X T\" is not a header name") != std::string::npos);
  CHECK(one_problem(sink("{ X-A: a, x-a: { expr: this.a } }")).find("\"x-a\" repeats \"X-A\"") != std::string::npos);
}

// docs/adr/0300: `sign:` names the scheme and the variables; the secrets are read at start.
TEST_CASE("http sink sign: scheme and secret variables, misuse is a load error", "[loader][sinks]") {
  auto sink = [](const std::string& sign, const std::string& more = "") {
    return kHead + "to: { h: { http: { url: \"http://h/x\", sign: " + sign + more + " } } }\n";
  };
  auto d = must_load(kHead + kSink);
  CHECK(std::get<HttpSinkSpec>(d->sinks()[0].kind).sign.secret_envs.empty());

  auto s = must_load(sink("{ scheme: standard, secret_env: HOOK_SECRET }"));
  const auto& ss = std::get<HttpSinkSpec>(s->sinks()[0].kind).sign;
  CHECK(ss.scheme == HttpSignSpec::Scheme::kStandard);
  CHECK(ss.secret_envs == std::vector<std::string>{"HOOK_SECRET"});
  auto r = must_load(sink("{ secrets_env: [NEW_SECRET, OLD_SECRET] }"));  // standard by default
  const auto& rs = std::get<HttpSinkSpec>(r->sinks()[0].kind).sign;
  CHECK(rs.scheme == HttpSignSpec::Scheme::kStandard);
  CHECK(rs.secret_envs == std::vector<std::string>{"NEW_SECRET", "OLD_SECRET"});
  auto g = must_load(sink("{ scheme: github, secret_env: GH }"));
  CHECK(std::get<HttpSinkSpec>(g->sinks()[0].kind).sign.scheme == HttpSignSpec::Scheme::kGithub);

  CHECK(one_problem(sink("{ scheme: svix, secret_env: A }")) ==
        "3:55: to.h.http.sign.scheme must be standard or github, got \"svix\"");
  CHECK(one_problem(sink("{ scheme: standard }")).find("to.h.http.sign needs one of `secret_env`") !=
        std::string::npos);
  CHECK(one_problem(sink("{ secret_env: A, secrets_env: [B] }")).find("needs one of") != std::string::npos);
  CHECK(one_problem(sink("{ secrets_env: [] }")).find("must name 1 to 4 environment variables") != std::string::npos);
  CHECK(one_problem(sink("{ secrets_env: [A, A] }")).find("names A twice") != std::string::npos);
  CHECK(one_problem(sink("{ secret_env: \"not a name\" }")).find("must name an environment variable") !=
        std::string::npos);
  CHECK(one_problem(sink("{ scheme: github, secrets_env: [A, B] }"))
            .find("scheme github has one signature header (X-Hub-Signature-256)") != std::string::npos);
  CHECK(one_problem(sink("{ secret_env: A, key: x }")).find("unknown key \"key\" in to.h.http.sign") !=
        std::string::npos);
  CHECK(one_problem(sink("{ secret_env: A }", ", headers: { Webhook-Signature: x }"))
            .find("to.h.http.headers.Webhook-Signature is set by `sign`") != std::string::npos);
  CHECK(one_problem(sink("{ scheme: github, secret_env: A }", ", headers: { X-Hub-Signature-256: { expr: this.s } }"))
            .find("is set by `sign`") != std::string::npos);
}

TEST_CASE("source: nats, timer, poll, exec, flow", "[loader][sources]") {
  auto n = must_load("flow: f\nfrom: { nats: { subject: orders.in } }\n" + kSink);
  CHECK(std::get<NatsSourceSpec>(n->source()).subject == "orders.in");
  CHECK(std::get<NatsSourceSpec>(n->source()).queue == "weir-f");
  CHECK(one_problem("flow: f\nfrom: { nats: { subject: \"a b\" } }\n" + kSink) ==
        "2:26: from.nats.subject must not contain spaces");

  auto t = must_load("flow: f\nfrom: { timer: { every: 250ms, payload: { kind: tick, n: 1 } } }\n" + kSink);
  const auto& ts = std::get<TimerSourceSpec>(t->source());
  REQUIRE(ts.every);
  CHECK(ts.every->count() == 250);
  CHECK(ts.payload == Json::parse(R"({"kind": "tick", "n": 1})"));
  auto c = must_load("flow: f\nfrom: { timer: { cron: \"*/5 9-17 * jan-mar mon,fri\" } }\n" + kSink);
  CHECK(std::get<TimerSourceSpec>(c->source()).cron == "*/5 9-17 * jan-mar mon,fri");
  CHECK_FALSE(std::get<TimerSourceSpec>(c->source()).every);
  must_load("flow: f\nfrom: { timer: { cron: \"@hourly\" } }\n" + kSink);
  CHECK(one_problem("flow: f\nfrom: { timer: {} }\n" + kSink) == "2:16: from.timer needs `every` or `cron`");
  CHECK(one_problem("flow: f\nfrom: { timer: { every: 1s, cron: \"* * * * *\" } }\n" + kSink) ==
        "2:16: from.timer takes `every` or `cron`, not both");
  for (const char* bad : {"* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 8", "*/0 * * * *",
                          "5-1 * * * *", "a * * * *", "* * * foo *"}) {
    INFO(bad);
    CHECK(one_problem("flow: f\nfrom: { timer: { cron: \"" + std::string(bad) + "\" } }\n" + kSink)
              .find("from.timer.cron: cron: ") != std::string::npos);
  }
  // validate ⇒ run: the loader uses the timer's own parser, so what it passes the timer
  // accepts, and what the timer rejects (a date that never comes, an unknown macro) fails here.
  for (const char* macro : {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}) {
    must_load("flow: f\nfrom: { timer: { cron: \"" + std::string(macro) + "\" } }\n" + kSink);
  }
  CHECK(one_problem("flow: f\nfrom: { timer: { cron: \"0 0 30 2 *\" } }\n" + kSink).find("never matches a date") !=
        std::string::npos);
  CHECK(one_problem("flow: f\nfrom: { timer: { cron: \"@fortnightly\" } }\n" + kSink).find("unknown macro") !=
        std::string::npos);
  CHECK(
      one_problem("flow: f\nfrom: { timer: { every: soon } }\n" + kSink) ==
      "2:25: from.timer.every must be a positive duration such as 250ms, 2s, 1m or 1h, got \"soon\": units: us, ms, s, "
      "m, h");
  CHECK(one_problem("flow: f\nfrom: { timer: { every: 0s } }\n" + kSink).find("positive duration") !=
        std::string::npos);
  CHECK(one_problem("flow: f\nfrom: { timer: { every: 1s, payload: [1] } }\n" + kSink) ==
        "2:38: from.timer.payload must be a mapping");

  auto p = must_load(
      "flow: f\nfrom:\n  poll:\n    url: https://api.example.com/items\n    every: 30s\n"
      "    headers: { Accept: application/json }\n    split: data.items\n    cursor_field: next\n"
      "    cursor_param: after\n    oauth2: { token_url: \"https://auth/token\", client_id_env: CID,"
      " client_secret_env: CSEC, scopes: \"read write\" }\n" +
      kSink);
  const auto& ps = std::get<PollSourceSpec>(p->source());
  CHECK(ps.url == "https://api.example.com/items");
  CHECK(ps.every.count() == 30000);
  CHECK(ps.headers.at("Accept") == "application/json");
  CHECK(ps.split == "data.items");
  CHECK(ps.cursor_field == "next");
  CHECK(ps.cursor_param == "after");
  REQUIRE(ps.oauth2);
  CHECK(ps.oauth2->token_url == "https://auth/token");
  CHECK(ps.oauth2->client_id_env == "CID");
  CHECK(ps.oauth2->client_secret_env == "CSEC");
  CHECK(ps.oauth2->scopes == std::vector<std::string>{"read", "write"});
  auto pd = must_load("flow: f\nfrom: { poll: { url: \"http://h/x\" } }\n" + kSink);
  CHECK(std::get<PollSourceSpec>(pd->source()).every.count() == 60000);
  auto pp = problems(
      "flow: f\nfrom: { poll: { url: ftp://x, headers: [a], cursor_field: c, oauth2: { token_url: \"http://t\" } } "
      "}\n" +
      kSink);
  REQUIRE(pp.size() == 6);
  CHECK(pp[0].find("2:22: from.poll.url must be a URL starting with http:// or https://") == 0);
  CHECK(pp[1] == "2:40: from.poll.headers must be a mapping, got a list");
  CHECK(pp[2] == "2:59: from.poll.cursor_field needs `cursor_param` too");
  CHECK(pp[3] == "2:70: from.poll.oauth2 needs `client_id_env`");
  CHECK(pp[4] == "2:70: from.poll.oauth2 needs `client_secret_env`");
  CHECK(pp[5].find("2:83: from.poll.oauth2.token_url must be https://") == 0);
  // Plain http for the token endpoint only when written deliberately.
  auto insecure = must_load(
      "flow: f\nfrom: { poll: { url: \"http://h/x\", oauth2: { token_url: \"http://127.0.0.1:9/t\", "
      "insecure_http: true, client_id_env: CID, client_secret_env: CSEC } } }\n" +
      kSink);
  CHECK(std::get<PollSourceSpec>(insecure->source()).oauth2->token_url == "http://127.0.0.1:9/t");

  auto e = must_load(
      "flow: f\nfrom: { exec: { command: [\"/bin/echo\", \"hi there\"], format: text, max_line: 64KiB } }\n" + kSink);
  const auto& es = std::get<ExecSourceSpec>(e->source());
  CHECK(es.command == std::vector<std::string>{"/bin/echo", "hi there"});
  CHECK(es.format == "text");
  CHECK(es.max_line == 65536);
  auto e2 = must_load("flow: f\nfrom: { exec: { command: \"tail -F /var/log/x\" } }\n" + kSink);
  CHECK(std::get<ExecSourceSpec>(e2->source()).command == std::vector<std::string>{"tail", "-F", "/var/log/x"});
  CHECK(std::get<ExecSourceSpec>(e2->source()).format == "json");
  CHECK(one_problem("flow: f\nfrom: { exec: { command: [] } }\n" + kSink) ==
        "2:26: from.exec.command must not be empty");
  CHECK(one_problem("flow: f\nfrom: { exec: {} }\n" + kSink) == "2:15: from.exec needs `command`");
  CHECK(one_problem("flow: f\nfrom: { exec: { command: x, format: xml } }\n" + kSink) ==
        "2:37: from.exec.format must be json or text, got \"xml\"");
  CHECK(one_problem("flow: f\nfrom: { exec: { command: x, max_line: lots } }\n" + kSink)
            .find("from.exec.max_line must be a positive size") != std::string::npos);

  auto fl = must_load("flow: f\nfrom: { flow: orders.big }\n" + kSink);
  CHECK(std::get<FlowSourceSpec>(fl->source()).flow == "orders");
  CHECK(std::get<FlowSourceSpec>(fl->source()).sink == "big");
  CHECK(one_problem("flow: f\nfrom: { flow: orders }\n" + kSink) ==
        "2:15: from.flow must be other_flow.sink, got \"orders\"");
  CHECK(one_problem("flow: f\nfrom: { flow: f.out }\n" + kSink) == "2:15: from.flow: a flow cannot read its own sink");
}

TEST_CASE("sinks: http, mqtt, nats, flow", "[loader][sinks]") {
  auto f = must_load(kHead +
                     "steps:\n  - branch:\n      - { when: this.a == 1, to: h }\n      - { when: this.a == 2, to: m }\n"
                     "      - { when: this.a == 3, to: n }\n      - { to: fl }\n"
                     "to:\n"
                     "  h: { http: { url: \"https://h/x\", method: put, headers: { X-A: b }, timeout: 2s, retries: 3,"
                     " max_connections: 16 } }\n"
                     "  m: { mqtt: { broker: \"tcp://h:1883\", topic: out/t, qos: 0, retain: true, client_id: c,"
                     " username_env: U, password_env: P, retries: 2 } }\n"
                     "  n: { nats: { subject: out.n } }\n"
                     "  fl: { flow: {} }\n");
  REQUIRE(f->sinks().size() == 4);
  const auto& h = std::get<HttpSinkSpec>(f->sinks()[0].kind);
  CHECK(f->sinks()[0].name == "h");
  CHECK(f->sinks()[0].where.line == 10);
  CHECK(f->sinks()[0].where.column == 3);
  CHECK(h.url == "https://h/x");
  CHECK(h.method == "PUT");
  CHECK(h.headers.at("X-A") == "b");
  CHECK(h.timeout.count() == 2000);
  CHECK(h.retries == 3);
  CHECK(h.max_connections == 16);
  const auto& m = std::get<MqttSinkSpec>(f->sinks()[1].kind);
  CHECK(m.broker == "tcp://h:1883");
  CHECK(m.topic == "out/t");
  CHECK(m.qos == 0);
  CHECK(m.retain);
  CHECK(m.client_id == "c");
  CHECK(m.username_env == "U");
  CHECK(m.password_env == "P");
  CHECK(m.retries == 2);
  CHECK(std::get<NatsSinkSpec>(f->sinks()[2].kind).subject == "out.n");
  CHECK(std::holds_alternative<FlowSinkSpec>(f->sinks()[3].kind));
  // Defaults.
  auto d = must_load(kHead + kSink);
  const auto& dh = std::get<HttpSinkSpec>(d->sinks()[0].kind);
  CHECK(dh.method == "POST");
  CHECK(dh.timeout.count() == 5000);
  CHECK(dh.retries == weir::flows::kNoRetryCap);  // no cap: the retry schedule governs (ADR 0295)
  CHECK(dh.retry.backoff.size() == 7);
  CHECK(dh.retry.backoff.front().count() == 1000);
  CHECK(dh.retry.backoff.back().count() == 3'600'000);
  CHECK(dh.retry.give_up_after.count() == 72LL * 3'600'000);
  CHECK(dh.retry.after(1).count() == 1000);
  CHECK(dh.retry.after(3).count() == 30'000);
  CHECK(dh.retry.after(50).count() == 3'600'000);  // the last step repeats
  CHECK(dh.max_connections == 8);
  // A schedule of its own.
  auto r = must_load(kHead +
                     "to: { h: { http: { url: \"http://x/\", retry: { backoff: [500ms, 2m], give_up_after: "
                     "24h } } } }\n");
  const auto& rh = std::get<HttpSinkSpec>(r->sinks()[0].kind);
  REQUIRE(rh.retry.backoff.size() == 2);
  CHECK(rh.retry.backoff[1].count() == 120'000);
  CHECK(rh.retry.give_up_after.count() == 24LL * 3'600'000);
  auto keeps = must_load(kHead + "to: { h: { http: { url: \"http://x/\", retry: { give_up_after: 1h } } } }\n");
  CHECK(std::get<HttpSinkSpec>(keeps->sinks()[0].kind).retry.backoff.size() == 7);
  for (const char* bad :
       {"retry: { backoff: [] }", "retry: { backoff: 5s }", "retry: { backoff: [1s, soon] }",
        "retry: { backoff: [25h] }", "retry: { give_up_after: 0s }", "retry: { backof: [1s] }", "retry: 3"}) {
    INFO(bad);
    auto msgs = problems(kHead + "to: { h: { http: { url: \"http://x/\", " + bad + " } } }\n");
    REQUIRE_FALSE(msgs.empty());
    CHECK(msgs[0].find("retry") != std::string::npos);
  }
  auto dm = must_load(kHead + "to: { m: { mqtt: { broker: \"tcp://h:1\", topic: t } } }\n");
  CHECK(std::get<MqttSinkSpec>(dm->sinks()[0].kind).client_id == "weir-f-m");
  CHECK(std::get<MqttSinkSpec>(dm->sinks()[0].kind).qos == 1);
  must_load(kHead + "to: { x: { flow: } }\n");
  // Errors.
  auto p = problems(
      kHead +
      "to: { o: { http: { method: GET, timeout: -1s, retries: -1, max_connections: 0, headers: { a: [1] } } } }\n");
  REQUIRE(p.size() == 6);
  CHECK(p[0] == "3:18: to.o.http needs `url`");
  CHECK(p[1] == "3:28: to.o.http.method must be POST, PUT or PATCH (the event is the body), got \"GET\"");
  CHECK(p[2].find("3:42: to.o.http.timeout must be a positive duration") == 0);
  CHECK(p[3] == "3:56: to.o.http.retries must be between 0 and 1000");
  CHECK(p[4] == "3:77: to.o.http.max_connections must be between 1 and 1024");
  CHECK(p[5] == "3:94: to.o.http.headers.a must be a string, got a list");
  CHECK(one_problem(kHead + "to: { m: { mqtt: { broker: \"tcp://h:1\" } } }\n") == "3:18: to.m.mqtt needs `topic`");
  CHECK(one_problem(kHead + "to: { n: { nats: { subject: \"a.*\" } } }\n") ==
        "3:29: to.n.nats.subject must be a plain subject (no spaces or wildcards)");
  // Subjects weir and the server own are refused for sinks and sources alike.
  for (const char* subject : {"$JS.API.STREAM.DELETE.weir_f", "$KV.weir_state.x", "weir.f.in", "weirc.c.f.in"}) {
    INFO(subject);
    CHECK(one_problem(kHead + "to: { n: { nats: { subject: \"" + subject + "\" } } }\n")
              .find("3:29: to.n.nats.subject") == 0);
    CHECK(one_problem("flow: f\nfrom: { nats: { subject: \"" + std::string(subject) + "\" } }\n" + kSink)
              .find("2:26: from.nats.subject") == 0);
  }
  CHECK(one_problem("flow: f\nfrom: { nats: { subject: \">\" } }\n" + kSink).find("starts with a wildcard") !=
        std::string::npos);
  CHECK(must_load(kHead + "to: { n: { nats: { subject: weirdly.named } } }\n") != nullptr);
  CHECK(one_problem(kHead + "to: { x: { flow: { a: 1 } } }\n") ==
        "3:18: to.x.flow takes no settings: write `flow: {}`");
  CHECK(one_problem(kHead + "to: { x: { http: { url: \"http://h\" }, nats: { subject: s } } }\n") ==
        "3:10: to.x must have exactly one key, found 2");
}

TEST_CASE("http sink rate: per second, minute or hour, decimals allowed, unset is no limit", "[loader][sinks]") {
  auto rate_of = [](const std::string& rate) {
    auto f = must_load(kHead + "to: { out: { http: { url: \"http://127.0.0.1:1/x\", rate: " + rate + " } } }\n");
    return std::get<HttpSinkSpec>(f->sinks()[0].kind);
  };
  CHECK(rate_of("200/s").rate_per_s == 200);
  CHECK(rate_of("200/s").rate == "200/s");
  CHECK(rate_of("30/min").rate_per_s == Approx(0.5));
  CHECK(rate_of("1000/h").rate_per_s == Approx(1000.0 / 3600));
  CHECK(rate_of("0.5/s").rate_per_s == Approx(0.5));
  CHECK(rate_of("\"2.5 / s\"").rate_per_s == Approx(2.5));
  CHECK(rate_of("1000000/s").rate_per_s == 1e6);
  CHECK(rate_of("1/h").rate_per_s == Approx(1.0 / 3600));
  CHECK(std::get<HttpSinkSpec>(must_load(kHead + kSink)->sinks()[0].kind).rate_per_s == 0);
  // JSON spells it as a string too.
  auto j = load_flow_text(
      R"({"flow": "f", "from": {"http": {"path": "/in"}},
          "to": {"out": {"http": {"url": "http://127.0.0.1:1/x", "rate": "50/s"}}}})",
      "t.json", env_options());
  REQUIRE(j.flow);
  CHECK(std::get<HttpSinkSpec>(j.flow->sinks()[0].kind).rate_per_s == 50);
}

TEST_CASE("http sink rate: bad rates are file:line errors naming the key", "[loader][sinks][errors]") {
  auto rate_problem = [](const std::string& rate) {
    LoadResult r = load(kHead + "to: { out: { http: { url: \"http://127.0.0.1:1/x\",\n  rate: " + rate + " } } }\n");
    CHECK(r.flow == nullptr);
    REQUIRE(r.diagnostics.size() == 1);
    return r.diagnostics[0].str();
  };
  CHECK(rate_problem("fast") ==
        "t.yaml:4:9: to.out.http.rate must be a positive number per unit such as 200/s, 30/min, 1000/h or 0.5/s, "
        "got \"fast\"");
  CHECK(rate_problem("0/s") ==
        "t.yaml:4:9: to.out.http.rate must be more than 0 (leave `rate` out for no limit), got \"0/s\"");
  CHECK(rate_problem("0.0/min").find("must be more than 0") != std::string::npos);
  CHECK(rate_problem("-5/s").find("t.yaml:4:9: to.out.http.rate must be a positive number per unit") == 0);
  CHECK(rate_problem("10/day") ==
        "t.yaml:4:9: to.out.http.rate has an unknown unit \"/day\"; use /s, /min or /h, got "
        "\"10/day\"");
  CHECK(rate_problem("200") ==
        "t.yaml:4:9: to.out.http.rate needs a unit: N/s, N/min or N/h (e.g. 200/s), got \"200\"");
  CHECK(rate_problem("1e3/s").find("must be a positive number per unit") != std::string::npos);
  CHECK(rate_problem("1.2.3/s").find("must be a positive number per unit") != std::string::npos);
  CHECK(rate_problem("/s").find("must be a positive number per unit") != std::string::npos);
  CHECK(rate_problem("2000000/s").find("must be at most 1000000/s") != std::string::npos);
  CHECK(rate_problem("0.01/h").find("must be at least one a day") != std::string::npos);
  CHECK(rate_problem("[1, 2]") ==
        "t.yaml:4:9: to.out.http.rate must be a rate such as 200/s, 30/min or 1000/h, got a list");
  CHECK(rate_problem("{ n: 5 }").find("to.out.http.rate must be a rate such as 200/s") != std::string::npos);
}

TEST_CASE("tables in a flow file", "[loader][tables]") {
  std::string base = "flow: f\nfrom: { http: { path: /in } }\n" + kSink;
  // Relative to the file's folder; CSV and JSON.
  for (const char* file : {"tiers.csv", "tiers.json"}) {
    LoadResult r = load(base + "tables: { tiers: { file: " + file +
                            ", key: customer_id } }\n"
                            "steps: [ { set: { t: \"lookup(tiers, this.c).tier\" } } ]\n",
                        kData + "/inline.yaml");
    for (const auto& d : r.diagnostics) UNSCOPED_INFO(d.str());
    REQUIRE(r.flow);
    CHECK(r.flow->run(Json::parse(R"({"c": "c3"})")).event["t"] == "bronze, plus");
  }
  // Inline rows.
  auto f = must_load(base +
                     "tables:\n  t: { key: k, rows: [ { k: a, v: 1 }, { k: 2, v: two } ] }\n"
                     "steps: [ { set: { x: \"lookup(t, 'a').v\", y: \"lookup(t, 2).v\" } } ]\n");
  Outcome o = f->run(Json::object());
  CHECK(o.event == Json::parse(R"({"x": 1, "y": "two"})"));
  // Errors.
  auto p = problems(
      base +
          "tables:\n  a: { file: missing.csv, key: k }\n  b: { file: x.txt, key: k }\n"
          "  c: { file: tiers.csv }\n  d: { key: k }\n  e-f: { rows: [] }\n  g: { rows: [ { x: 1 } ], key: k }\n"
          "  h: { file: tiers.csv, key: nope }\n",
      kData + "/inline.yaml");
  REQUIRE(p.size() == 7);
  CHECK(p[0].find("5:14: tables.a.file: cannot read " + kData + "/missing.csv") == 0);
  CHECK(p[1] == "6:14: tables.b.file must end in .csv or .json, got \"x.txt\"");
  CHECK(p[2] == "7:6: tables.c needs `key` (the column to look rows up by)");
  CHECK(p[3] == "8:6: tables.d needs `file`, `rows` or `kv` (one of them)");
  CHECK(p[4] == "9:3: table name \"e-f\" must be a name (letters, digits, _)");
  CHECK(p[5] == "10:14: tables.g.rows: row 0 has no string or number field \"k\"");
  CHECK(p[6] == "1:1: key column \"nope\" is not in the header row");
  // Devices would never end; deploys may forbid table files altogether.
  {
    std::string tmpl = (std::filesystem::temp_directory_path() / "weir-flows-zero-XXXXXX").string();
    std::filesystem::path dir = mkdtemp(tmpl.data());
    std::filesystem::create_symlink("/dev/zero", dir / "zero.csv");
    auto zp = problems(base + "tables: { t: { file: " + (dir / "zero.csv").string() + ", key: id } }\n");
    std::filesystem::remove_all(dir);
    REQUIRE(zp.size() == 1);
    CHECK(zp[0].find("is not a regular file") != std::string::npos);
  }
  LoadOptions no_files = env_options();
  no_files.allow_table_files = false;
  LoadResult nf = load_flow_text(base + "tables: { t: { file: tiers.csv, key: id } }\n", kData + "/x.yaml", no_files);
  REQUIRE(nf.diagnostics.size() == 1);
  CHECK(nf.diagnostics[0].message ==
        "tables.t.file: table files are not allowed here; give the rows inline with `rows:`");
  // Table problems in the table's own file are named by that file.
  LoadResult r = load(base + "tables: { t: { file: bad.csv, key: id } }\n", kData + "/inline.yaml");
  REQUIRE(r.diagnostics.size() == 1);
  CHECK(r.diagnostics[0].str() == kData + "/bad.csv:3:1: row has 1 fields, the header has 2");
}

TEST_CASE("steps: schema errors", "[loader][steps][errors]") {
  auto steps = [](const std::string& s) { return kHead + kSink + "steps:\n" + s; };
  CHECK(one_problem(steps("  - sett: { a: 1 }\n")).find("5:5: unknown step \"sett\"") == 0);
  CHECK(one_problem(steps("  - { set: { a: 1 }, filter: true }\n")) ==
        "5:5: steps[0] must have exactly one key, found 2");
  CHECK(one_problem(steps("  - set: a\n")) ==
        "5:10: steps[0].set must be a mapping of field: expression, got a string");
  CHECK(one_problem(steps("  - set: {}\n")) == "5:10: steps[0].set is empty");
  CHECK(one_problem(steps("  - set: { a: [1] }\n")) ==
        "5:15: steps[0].set.a must be an expression (a string), a number, a boolean or null, got a list");
  CHECK(one_problem(steps("  - set: { a..b: 1 }\n")) == "5:12: steps[0].set: target \"a..b\" has an empty part");
  CHECK(one_problem(steps("  - set: { this: 1 }\n")) ==
        "5:12: steps[0].set: target \"this\" is not a field path (write a.b.c)");
  CHECK(one_problem(steps("  - set: { a: 1, a.b: 2 }\n")) == "5:10: steps[0].set: \"a.b\" overlaps \"a\"");
  CHECK(one_problem(steps("  - map: [a]\n")) ==
        "5:10: steps[0].map must be a mapping of field: expression (or one expression), got a list");
  CHECK(one_problem(steps("  - filter: { a: 1 }\n")) ==
        "5:13: steps[0].filter must be an expression (a string), a number, a boolean or null, got a mapping");
  CHECK(one_problem(steps("  - filter: this.a >\n")) ==
        "5:21: invalid expression in steps[0].filter: expected a value, found end of expression");
  CHECK(one_problem(steps("  - lookup: { table: t, key: this.a }\n")) ==
        "5:22: steps[0].lookup.table: unknown table \"t\" (the flow has no `tables:`)");
  CHECK(one_problem(steps("  - lookup: { key: this.a }\n")) == "5:13: steps[0].lookup needs `table`");
  CHECK(one_problem(kHead + kSink + "tables: { t: { rows: [], key: k } }\nsteps:\n  - lookup: { table: t }\n") ==
        "6:13: steps[0].lookup needs `key`");
  CHECK(one_problem(kHead + kSink +
                    "tables: { t: { rows: [], key: k } }\nsteps:\n  - lookup: { table: t, key: this.k, x: 1 }\n")
            .find("6:38: unknown key \"x\" in steps[0].lookup") == 0);
  CHECK(one_problem(steps("  - branch: []\n")) ==
        "5:13: steps[0].branch must be a non-empty list of arms ({when, steps, to})");
  CHECK(one_problem(steps("  - branch:\n      - { to: out }\n      - { when: true, to: out }\n")) ==
        "7:9: steps[0].branch[1] can never match: it follows the default arm (the one without `when`)");
  CHECK(one_problem(steps("  - branch:\n      - { when: true, steps: [ { nope: 1 } ] }\n"))
            .find("6:34: unknown step \"nope\"") == 0);
  CHECK(one_problem(steps("  - branch:\n      - { when: true, goto: out }\n")).find("6:23: unknown key \"goto\"") == 0);
  CHECK(one_problem(steps("  - branch:\n      - { when: true, steps: {} }\n")) ==
        "6:30: steps[0].branch[0].steps must be a list of steps, got a mapping");
  CHECK(one_problem(kHead + kSink + "steps: { a: 1 }\n") == "4:8: steps must be a list of steps, got a mapping");
  // Steps nested deeper than the limit.
  std::string deep = "x";
  for (int i = 0; i < 20; ++i) deep = "[ { branch: [ { when: true, steps: " + deep + " } ] } ]";
  deep.replace(deep.find("steps: x"), 8, "steps: []");
  CHECK(problems(kHead + kSink + "steps: " + deep + "\n").at(0).find("steps nested deeper than 16 levels") !=
        std::string::npos);
}

TEST_CASE("routing: unknown sinks and unrouted paths", "[loader][routing]") {
  std::string two = "to:\n  a: { nats: { subject: a } }\n  b: { nats: { subject: b } }\n";
  CHECK(one_problem(kHead + two)
            .find("3:1: the flow has several sinks (a, b) but events can leave the steps without a route") == 0);
  CHECK(one_problem(kHead + two + "steps:\n  - branch:\n      - { when: this.x, to: a }\n")
            .find("6:1: the flow has several sinks") == 0);
  CHECK(one_problem(kHead + two +
                    "steps:\n  - branch:\n      - { when: this.x, to: a }\n      - { steps: [ { set: { y: 1 } } ] }\n")
            .find("the flow has several sinks") != std::string::npos);
  // Every arm routes and there is a default: fine, also through nested branches.
  must_load(kHead + two + "steps:\n  - branch:\n      - { when: this.x, to: a }\n      - { to: b }\n");
  must_load(kHead + two +
            "steps:\n  - filter: this.ok\n  - branch:\n      - when: this.x\n        steps:\n          - branch:\n"
            "              - { when: this.y, to: a }\n              - { to: b }\n      - { to: a }\n  - set: { never: "
            "true }\n");
  CHECK(one_problem(kHead + kSink + "steps:\n  - branch:\n      - { to: nope }\n") ==
        "6:15: steps[0].branch[0].to: unknown sink \"nope\" (sinks: out)");
}

TEST_CASE("routing: a to list fans out, each sink known and named once", "[loader][routing]") {
  std::string three =
      "to:\n  a: { nats: { subject: a } }\n  b: { nats: { subject: b } }\n  c: { nats: { subject: c } }\n";
  auto f = must_load(kHead + three +
                     "steps:\n  - branch:\n      - { when: this.x, to: a }\n      - { to: [b, a, c] }\n");
  Outcome one = f->run(Json{{"x", true}});
  CHECK(one.sink == "a");
  CHECK(one.also.empty());
  Outcome all = f->run(Json{{"x", false}});
  REQUIRE(all.kind == Outcome::Kind::kEmit);
  CHECK(all.sink == "b");
  CHECK(all.also == std::vector<std::string>{"a", "c"});
  CHECK(all.goes_to("a"));
  CHECK(all.goes_to("c"));
  CHECK_FALSE(one.goes_to("b"));
  // A list of one is the sink itself.
  must_load(kHead + kSink + "steps:\n  - branch:\n      - { to: [out] }\n");
  CHECK(one_problem(kHead + three + "steps:\n  - branch:\n      - { to: [a, nope] }\n") ==
        "9:19: steps[0].branch[0].to[1]: unknown sink \"nope\" (sinks: a, b, c)");
  CHECK(one_problem(kHead + three + "steps:\n  - branch:\n      - { to: [a, b, a] }\n") ==
        "9:22: steps[0].branch[0].to[2]: sink \"a\" is named twice in this list");
  CHECK(one_problem(kHead + kSink + "steps:\n  - branch:\n      - { to: [] }\n") ==
        "6:15: steps[0].branch[0].to is an empty list; name one sink or several (`to: [a, b]`)");
  CHECK(one_problem(kHead + kSink + "steps:\n  - branch:\n      - { to: { a: 1 } }\n") ==
        "6:15: steps[0].branch[0].to must be a sink name or a list of sink names (`to: [a, b]`), got a mapping");
  // A fan-out arm routes like any other: with a default arm every path has a route.
  CHECK(problems(kHead + three + "steps:\n  - branch:\n      - { when: this.x, to: [a, b] }\n").size() == 1);
}

TEST_CASE("tests: a fan-out's event is expected at each of its sinks", "[loader][tests][routing]") {
  auto f = must_load(kHead + "to:\n  a: { nats: { subject: a } }\n  b: { nats: { subject: b } }\n" +
                     "steps:\n  - branch:\n      - { when: this.one, to: a }\n      - { to: [a, b] }\n");
  auto run = [&](const char* test_case) { return run_test_case(*f, Json::parse(test_case), 0); };
  CHECK(run(R"({"input": {"v": 1}, "expect": {"a": {"v": 1}, "b": [{"v": 1}]}})").passed);
  CHECK(run(R"({"input": {"v": 1}, "expect": {"b": {"v": 1}}})").passed);  // a is not checked
  auto miss = run(R"({"input": {"one": true}, "expect": {"a": {}, "b": {}}})");
  CHECK_FALSE(miss.passed);
  CHECK(miss.detail == "expected an event at b, got emitted to a: {\"one\":true}");
  auto nothing = run(R"({"input": {"v": 2}, "expect": {"a": {"v": 2}, "b": []}})");
  CHECK_FALSE(nothing.passed);
  CHECK(nothing.detail == "expected nothing at b, got emitted to a, b: {\"v\":2}");
  auto differs = run(R"({"input": {"v": 2}, "expect": {"b": {"v": 3}}})");
  CHECK_FALSE(differs.passed);
  CHECK(differs.detail == "event at b differs at .v: expected 3, got 2; got {\"v\":2}");
}

TEST_CASE("tests: shape is checked at load", "[loader][tests]") {
  auto t = [](const std::string& s) { return kHead + kSink + "tests:\n" + s; };
  must_load(
      t("  - { name: a, input: {}, expect: dropped }\n  - { input: 1, expect: error }\n"
        "  - { input: {}, expect: { out: [ { a: 1 } ] } }\n  - { input: {}, expect: { out: { a: 1 } } }\n"
        "  - { input: {}, expect: { out: [] } }\n"));
  CHECK(one_problem(t("  - { input: {}, expect: { nope: [] } }\n")) ==
        "5:28: tests[0].expect: unknown sink \"nope\" (sinks: out)");
  CHECK(one_problem(t("  - { input: {}, expect: maybe }\n")) ==
        "5:26: tests[0].expect must be dropped, error or a mapping of sink: [events], got \"maybe\"");
  CHECK(one_problem(t("  - { input: {} }\n")) == "5:5: tests[0] needs `expect` (dropped, error, or sink: [events])");
  CHECK(one_problem(t("  - { expect: dropped }\n")) == "5:5: tests[0] needs `input`");
  CHECK(one_problem(t("  - { input: {}, expect: dropped, extra: 1 }\n"))
            .find("5:35: unknown key \"extra\" in tests[0]") == 0);
  CHECK(one_problem(t("  - { input: {}, expect: { out: [ {}, {} ] } }\n")) ==
        "5:33: tests[0].expect.out: a flow sends at most one event per input to a sink, this lists 2");
  CHECK(one_problem(kHead + kSink + "tests: {}\n") == "4:8: tests must be a list of cases, got a mapping");
  CHECK(one_problem(t("  - { input: { a: .nan }, expect: dropped }\n")).find("out of range") != std::string::npos);
}

TEST_CASE("${} substitution in flow files", "[loader]") {
  std::string text =
      "flow: f\nfrom: { http: { path: \"${IN_PATH:-/in}\" } }\n"
      "to: { out: { http: { url: \"${SINK}/x\", retries: \"${RETRIES:-3}\" } } }\n"
      "steps: [ { filter: \"this.n > ${MIN:-0}\" } ]\n";
  auto f = must_load(text, {{"SINK", "http://h:1"}, {"MIN", "10"}});
  CHECK(std::get<HttpSourceSpec>(f->source()).path == "/in");
  CHECK(std::get<HttpSinkSpec>(f->sinks()[0].kind).url == "http://h:1/x");
  CHECK(std::get<HttpSinkSpec>(f->sinks()[0].kind).retries == 3);
  CHECK(f->run(Json::parse(R"({"n": 5})")).kind == Outcome::Kind::kDropped);
  CHECK(f->run(Json::parse(R"({"n": 11})")).kind == Outcome::Kind::kEmit);
  // A missing variable is reported once, at the scalar.
  CHECK(one_problem(text) == "3:27: environment variable SINK is not set (write ${SINK:-default} to give a default)");
}

TEST_CASE("expression errors point into the expression", "[loader][errors]") {
  CHECK(one_problem(kHead + kSink + "steps: [ { set: { a: \"this.b + + \" } } ]\n") ==
        "4:32: invalid expression in steps[0].set.a: expected a value, found '+'");
  CHECK(one_problem(kHead + kSink + "steps:\n  - filter: |\n      this.a > 0 &&\n        nope(1)\n") ==
        "7:9: invalid expression in steps[0].filter: unknown function 'nope'");
  CHECK(one_problem(kHead + kSink + "steps:\n  - set:\n      a: this.x +\n         zz\n") ==
        "7:10: invalid expression in steps[0].set.a: unknown name 'zz' (the event is this, as in this.zz)");
}

TEST_CASE("load_flow_file: unreadable paths", "[loader][errors]") {
  LoadResult r = load_flow_file(kData + "/does-not-exist.yaml");
  REQUIRE(r.diagnostics.size() == 1);
  CHECK(r.diagnostics[0].message.find("No such file") != std::string::npos);
  r = load_flow_file(kData);
  REQUIRE(r.diagnostics.size() == 1);
  CHECK(r.diagnostics[0].message.find("is a directory") != std::string::npos);
}

TEST_CASE("the flow name dlq is reserved for the dead-letter stream", "[loader]") {
  auto r = weir::flows::load_flow_text(
      "flow: dlq\nfrom: { http: { path: /in/x } }\nsteps: []\nto: { out: { http: { url: \"http://127.0.0.1:9/x\" } } "
      "}\n",
      "dlq.yaml");
  REQUIRE_FALSE(r.flow);
  REQUIRE(r.diagnostics.size() == 1);
  CHECK(r.diagnostics[0].str().find("reserved for the dead-letter stream") != std::string::npos);
}

TEST_CASE("exec env: a list of variable names", "[loader][exec]") {
  auto e = must_load("flow: f\nfrom: { exec: { command: [x], env: [API_KEY, _B2] } }\n" + kSink);
  CHECK(std::get<ExecSourceSpec>(e->source()).env == std::vector<std::string>{"API_KEY", "_B2"});
  CHECK(
      std::get<ExecSourceSpec>(must_load("flow: f\nfrom: { exec: { command: [x] } }\n" + kSink)->source()).env.empty());
  CHECK(one_problem("flow: f\nfrom: { exec: { command: [x], env: [\"A-B\"] } }\n" + kSink)
            .find("from.exec.env: \"A-B\" is not an environment variable name") != std::string::npos);
  CHECK(one_problem("flow: f\nfrom: { exec: { command: [x], env: [\"1A\"] } }\n" + kSink)
            .find("is not an environment variable name") != std::string::npos);
  CHECK(one_problem("flow: f\nfrom: { exec: { command: [x], env: PATH } }\n" + kSink).find("from.exec.env") !=
        std::string::npos);
}

TEST_CASE("substitute_env = false: ${NAME} only under kept from: and to: or for allowed names, errors naming no value",
          "[loader]") {
  LoadOptions net = env_options({{"SINK", "http://127.0.0.1:9"}, {"SECRET", "s3cr3t-v4lue"}, {"P", "/in/p"}});
  net.substitute_env = false;
  auto ok = load_flow_text(
      "flow: f\nfrom: { http: { path: \"${P}\" } }\n"
      "steps:\n  - set: { price: \"'$$5'\" }\n"
      "to: { out: { http: { url: \"${SINK}/x\" } } }\n",
      "t.yaml", net);
  REQUIRE(ok.diagnostics.empty());
  CHECK(std::get<HttpSourceSpec>(ok.flow->source()).path == "/in/p");
  CHECK(std::get<HttpSinkSpec>(ok.flow->sinks().at(0).kind).url == "http://127.0.0.1:9/x");
  for (const std::string& text :
       {std::string("flow: f\nfrom: { http: { path: /in } }\nsteps:\n  - set: { x: \"'${SECRET}'\" }\n") + kSink,
        std::string("flow: f\nfrom: { http: { path: /in } }\nsteps:\n  - set: { x: \"'${SECRET:-d}'\" }\n") + kSink,
        std::string("flow: \"${SECRET}\"\nfrom: { http: { path: /in } }\n") + kSink}) {
    INFO(text);
    auto r = load_flow_text(text, "t.yaml", net);
    REQUIRE_FALSE(r.diagnostics.empty());
    CHECK(r.flow == nullptr);
    bool named = false;
    for (const auto& d : r.diagnostics) {
      CHECK(d.message.find("s3cr3t-v4lue") == std::string::npos);
      named = named || d.message.find("${SECRET}: a flow sent over the network reads only") == 0;
    }
    CHECK(named);
  }
  // A new flow (wiring_kept = false): from:/to: get the same rule as the steps.
  LoadOptions fresh = net;
  fresh.wiring_kept = false;
  auto wired = load_flow_text("flow: f\nfrom: { http: { path: \"/in/${SECRET}\" } }\n" + kSink, "t.yaml", fresh);
  REQUIRE(wired.diagnostics.size() == 1);
  CHECK(wired.diagnostics[0].message.find("${SECRET}: a flow sent over the network reads only") == 0);
  CHECK(wired.diagnostics[0].message.find("s3cr3t-v4lue") == std::string::npos);
  // Names the operator listed (admin.allow_env) are read everywhere, the others still refused.
  fresh.env_allowed = [](const std::string& n) { return n == "P" || n == "SINK"; };
  auto listed = load_flow_text(
      "flow: f\nfrom: { http: { path: \"${P}\" } }\nsteps:\n  - set: { u: \"'${SINK}'\" }\n"
      "to: { out: { http: { url: \"${SINK}/x\" } } }\n",
      "t.yaml", fresh);
  REQUIRE(listed.diagnostics.empty());
  CHECK(std::get<HttpSourceSpec>(listed.flow->source()).path == "/in/p");
  CHECK(load_flow_text("flow: f\nfrom: { http: { path: \"${P}${SECRET:-x}\" } }\n" + kSink, "t.yaml", fresh)
            .diagnostics.at(0)
            .message.find("${SECRET}:") == 0);
  // The same text loaded as a local file substitutes everywhere.
  auto local = load_flow_text(
      "flow: f\nfrom: { http: { path: /in } }\nsteps:\n  - set: { x: \"'${SECRET}'\" }\n" + kSink, "t.yaml",
      env_options({{"SECRET", "v"}}));
  CHECK(local.diagnostics.empty());
}

// docs/adr/0310-per-key-order.md: `order_by` is an expression over the event, compiled at
// load; its value (text as is, anything else as JSON) is the key.
TEST_CASE("http sink order_by: an expression compiled at load", "[loader][sinks][order-by]") {
  auto sink = [](const std::string& order_by) {
    return kHead + "to: { out: { http: { url: \"http://127.0.0.1:1/x\", order_by: " + order_by + " } } }\n";
  };
  auto f = must_load(sink("this.customer.id"));
  const auto& h = std::get<HttpSinkSpec>(f->sinks()[0].kind);
  REQUIRE(h.order_by != nullptr);
  CHECK(h.order_by->text() == "this.customer.id");
  std::string key, err;
  CHECK(h.order_by->eval_key(Json{{"customer", {{"id", "c1"}}}}, &key, &err));
  CHECK(key == "c1");
  CHECK(h.order_by->eval_key(Json{{"customer", {{"id", 7}}}}, &key, &err));
  CHECK(key == "7");
  CHECK(std::get<HttpSinkSpec>(
            must_load(kHead + "to: { out: { http: { url: \"http://127.0.0.1:1/x\" } } }\n")->sinks()[0].kind)
            .order_by == nullptr);

  const std::string bad = one_problem(sink(R"("this.customer +")"));
  CHECK(bad.find("invalid expression in to.out.http.order_by") != std::string::npos);
  CHECK(bad.rfind("3:", 0) == 0);  // its line and column
  CHECK(one_problem(sink("5")).find("to.out.http.order_by must be an expression (a string)") != std::string::npos);
  CHECK(one_problem(sink("{ expr: this.a }")).find("to.out.http.order_by must be an expression") != std::string::npos);
}

// ---- HTTP sink tls and oauth2 (docs/adr/0302-http-sink-tls-and-oauth2.md) -------------

TEST_CASE("http sink tls and oauth2: the keys load, relative files resolved against the flow file",
          "[loader][sinks][auth]") {
  auto f = must_load(kHead +
                     "to: { out: { http: { url: \"https://127.0.0.1:1/x\",\n"
                     "  tls: { ca_file: ca.pem, cert_file: /etc/c.pem, key_file: keys/c.key },\n"
                     "  oauth2: { token_url: \"https://auth/token\", client_id_env: CID, client_secret_env: CSEC,\n"
                     "            scope: \"read write\" } } } }\n");
  const auto& s = std::get<HttpSinkSpec>(f->sinks().at(0).kind);
  REQUIRE(s.tls);
  CHECK(s.tls->ca_file == "./ca.pem");
  CHECK(s.tls->cert_file == "/etc/c.pem");
  CHECK(s.tls->key_file == "./keys/c.key");
  REQUIRE(s.oauth2);
  CHECK(s.oauth2->token_url == "https://auth/token");
  CHECK(s.oauth2->client_id_env == "CID");
  CHECK(s.oauth2->client_secret_env == "CSEC");
  CHECK(s.oauth2->scopes == std::vector<std::string>{"read", "write"});

  auto list = must_load(kHead +
                        "to: { out: { http: { url: \"http://127.0.0.1:1/x\", oauth2: { token_url: "
                        "\"http://127.0.0.1:9/t\", insecure_http: true, client_id_env: A, client_secret_env: B, "
                        "scope: [a, b] } } } }\n");
  const auto& l = std::get<HttpSinkSpec>(list->sinks().at(0).kind);
  CHECK(l.oauth2->scopes == std::vector<std::string>{"a", "b"});
  CHECK_FALSE(l.tls);
  CHECK_FALSE(std::get<HttpSinkSpec>(must_load(kHead + kSink)->sinks().at(0).kind).oauth2);
}

TEST_CASE("http sink tls: each misuse is a file:line:column error", "[loader][sinks][auth][errors]") {
  const std::string url = "to: { out: { http: { url: \"https://127.0.0.1:1/x\",\n  ";
  CHECK(one_problem(kHead + url + "tls: { cert_file: c.pem } } } }\n") ==
        "4:8: to.out.http.tls.cert_file needs `key_file` too");
  CHECK(one_problem(kHead + url + "tls: { key_file: c.key } } } }\n") ==
        "4:8: to.out.http.tls.key_file needs `cert_file` too");
  CHECK(one_problem(kHead + url + "tls: {} } } }\n") ==
        "4:8: to.out.http.tls needs `ca_file`, or `cert_file` with `key_file`, or all three");
  CHECK(one_problem(kHead + url + "tls: { ca_file: \"\" } } } }\n") ==
        "4:19: to.out.http.tls.ca_file must be a string, got an empty string");
  CHECK(one_problem(kHead + url + "tls: { ca_file: a.pem, verify: false } } } }\n")
            .find("4:26: unknown key \"verify\" in to.out.http.tls; expected one of: ca_file, cert_file, key_file") ==
        0);
  CHECK(one_problem(kHead + url + "tls: ca.pem } } }\n").find("4:8: to.out.http.tls must be a mapping") == 0);
  CHECK(one_problem(kHead + "to: { out: { http: { url: \"http://127.0.0.1:1/x\",\n  tls: { ca_file: a.pem } } } }\n") ==
        "4:8: to.out.http.tls: TLS settings need an https:// url, and to.out.http.url is http://");
  // Another scheme is the url's own error, the only one.
  CHECK(one_problem(kHead + "to: { out: { http: { url: \"ftp://127.0.0.1:1/x\",\n  tls: { ca_file: a.pem } } } }\n") ==
        "3:27: to.out.http.url must be a URL starting with http:// or https://, got \"ftp://127.0.0.1:1/x\"");
}

TEST_CASE("http sink oauth2: each misuse is a file:line:column error", "[loader][sinks][auth][errors]") {
  const std::string url = "to: { out: { http: { url: \"https://127.0.0.1:1/x\",\n  ";
  auto p = problems(kHead + url + "oauth2: { token_url: \"http://t/x\" } } } }\n");
  REQUIRE(p.size() == 3);
  CHECK(p[0] == "4:11: to.out.http.oauth2 needs `client_id_env`");
  CHECK(p[1] == "4:11: to.out.http.oauth2 needs `client_secret_env`");
  CHECK(p[2].find("4:24: to.out.http.oauth2.token_url must be https:// (the client secret is sent to it)") == 0);
  CHECK(one_problem(
            kHead + url +
            "oauth2: { token_url: \"https://t/x\", client_id_env: \"not a name\", client_secret_env: S } } } }\n") ==
        "4:54: to.out.http.oauth2.client_id_env must name an environment variable (letters, digits, _)");
  CHECK(one_problem(kHead + url +
                    "oauth2: { token_url: \"https://t/x\", client_id_env: I, client_secret_env: S, scopes: a } } } }\n")
            .find("4:79: unknown key \"scopes\" in to.out.http.oauth2 (did you mean \"scope\"?)") == 0);
  CHECK(
      one_problem(kHead + url + "oauth2: { token_url: \"ftp://t/x\", client_id_env: I, client_secret_env: S } } } }\n")
          .find("4:24: to.out.http.oauth2.token_url must be a URL starting with http:// or https://, got "
                "\"ftp://t/x\"") == 0);
  CHECK(one_problem(
            kHead + url +
            "headers: { Authorization: \"Bearer x\" },\n  oauth2: { token_url: \"https://t/x\", client_id_env: I, "
            "client_secret_env: S } } } }\n") ==
        "4:12: to.out.http.headers sets Authorization, which `oauth2` sends: remove one of them");
}
