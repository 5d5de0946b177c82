// Messages that say what to write instead (docs/flow-language.md, docs/connectors.md):
// bare words, near misses of functions and keys, durations without a unit, test cases
// naming a sink the flow lacks, `weir validate DIR` and unset secret variables.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "flows/cli.h"
#include "flows/flow.h"
#include "flows/text.h"

using namespace weir::flows;
namespace fs = std::filesystem;

namespace {

LoadOptions no_env() {
  LoadOptions o;
  o.env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  return o;
}

// The one diagnostic of `text` as "line:column: message" ("" when it loads).
std::string only_problem(const std::string& text) {
  LoadResult r = load_flow_text(text, "t.yaml", no_env());
  if (r.diagnostics.empty()) return "";
  CHECK(r.diagnostics.size() == 1);
  const Diagnostic& d = r.diagnostics[0];
  return std::to_string(d.where.line) + ":" + std::to_string(d.where.column) + ": " + d.message;
}

const std::string kHead = "flow: f\nfrom: { http: { path: /in/f } }\n";
const std::string kSink = "to: { out: { http: { url: \"http://127.0.0.1:9/\" } } }\n";

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "weir-teach-test-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

}  // namespace

TEST_CASE("a bare word as a whole expression: write the string literal, or this.word", "[teach]") {
  CHECK(only_problem(kHead + kSink + "steps: [ { set: { label: fixed } } ]\n") ==
        "4:26: invalid expression in steps[0].set.label: unknown name 'fixed': for the text fixed write a string "
        "literal, quoted once for YAML and once for the expression: \"'fixed'\"; for the event's field write "
        "this.fixed");
  // What the hint says to write loads, and sets the text.
  LoadResult r = load_flow_text(kHead + kSink + "steps: [ { set: { label: \"'fixed'\" } } ]\n", "t.yaml", no_env());
  REQUIRE(r.flow);
  CHECK(r.flow->run(Json::object()).event == Json::parse(R"({"label":"fixed"})"));
  // Within a larger expression the word is most likely a field: the this.x hint alone.
  CHECK(only_problem(kHead + kSink + "steps: [ { set: { a: \"amount * 2\" } } ]\n") ==
        "4:23: invalid expression in steps[0].set.a: unknown name 'amount' (the event is this, as in this.amount)");
}

TEST_CASE("an unknown function near a built-in one: did you mean", "[teach]") {
  CHECK(only_problem(kHead + kSink + "steps: [ { set: { a: \"numbr(this.a)\" } } ]\n") ==
        "4:23: invalid expression in steps[0].set.a: unknown function 'numbr' (did you mean number?)");
  CHECK(only_problem(kHead + kSink + "steps: [ { set: { a: \"uper(this.a)\" } } ]\n") ==
        "4:23: invalid expression in steps[0].set.a: unknown function 'uper' (did you mean upper?)");
  // Nothing near: no guess.
  CHECK(only_problem(kHead + kSink + "steps: [ { set: { a: \"frobnicate(this.a)\" } } ]\n") ==
        "4:23: invalid expression in steps[0].set.a: unknown function 'frobnicate'");
}

TEST_CASE("an unknown key near a known one names that key alone, otherwise the list", "[teach]") {
  CHECK(only_problem(kHead + "to: { out: { http: { url: \"http://127.0.0.1:9/\", timout: 2s } } }\n") ==
        "3:50: unknown key \"timout\" in to.out.http (did you mean \"timeout\"?)");
  CHECK(only_problem("flow: f\nfrom: { http: { path: /in/f, hmca: { secret_env: S } } }\n" + kSink) ==
        "2:30: unknown key \"hmca\" in from.http (did you mean \"hmac\"?)");
  CHECK(only_problem(kHead + "to: { out: { http: { url: \"http://127.0.0.1:9/\", colour: red } } }\n") ==
        "3:50: unknown key \"colour\" in to.out.http; expected one of: url, method, headers, timeout, retries, "
        "retry, max_connections, rate, order_by, sign, tls, oauth2");
}

TEST_CASE("closest_names: typos by length, nearest first, and did_you_mean", "[teach][text]") {
  using V = std::vector<std::string>;
  CHECK(closest_names("numbr", {"lower", "number", "now"}) == V{"number"});
  CHECK(closest_names("retrys", {"retries", "retry"}) == V{"retry", "retries"});  // nearest first
  CHECK(closest_names("hmca", {"hmac"}) == V{"hmac"});                            // a swap is one edit
  CHECK(closest_names("ab", {"xy", "a"}).empty());                                // 1-2 letters: no guess
  CHECK(closest_names("nope", {"now"}).empty());                                  // up to 5 letters: 1 edit
  CHECK(closest_names("completely", {"number"}).empty());
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(did_you_mean("retrys", {"retries", "retry"}, true) == "did you mean \"retry\" or \"retries\"?");
  CHECK(did_you_mean("uper", {"upper", "lower"}, false) == "did you mean upper?");
  CHECK(did_you_mean("zzz", {"upper"}, false).empty());
}

TEST_CASE("a duration without a unit is an error naming the units", "[teach][text]") {
  CHECK(duration_hint("5") == "a duration needs a unit: write 5s or 5ms (units: us, ms, s, m, h)");
  CHECK(duration_hint(" 1.5 ") == "a duration needs a unit: write 1.5s or 1.5ms (units: us, ms, s, m, h)");
  CHECK(duration_hint("5x") == "units: us, ms, s, m, h");
  CHECK(only_problem(kHead + "to: { out: { http: { url: \"http://127.0.0.1:9/\", timeout: 5 } } }\n") ==
        "3:59: to.out.http.timeout must be a positive duration such as 250ms, 2s, 1m or 1h, got \"5\": a duration "
        "needs a unit: write 5s or 5ms (units: us, ms, s, m, h)");
  CHECK(only_problem("flow: f\nfrom: { timer: { every: 30 } }\n" + kSink) ==
        "2:25: from.timer.every must be a positive duration such as 250ms, 2s, 1m or 1h, got \"30\": a duration "
        "needs a unit: write 30s or 30ms (units: us, ms, s, m, h)");
  CHECK(
      only_problem(kHead + "to: { out: { http: { url: \"http://127.0.0.1:9/\", retry: { backoff: [1s, 5] } } } }\n") ==
      "3:73: to.out.http.retry.backoff[1] must be a positive duration of at most 24h such as 500ms, 5s, 2m or 1h, "
      "got \"5\": a duration needs a unit: write 5s or 5ms (units: us, ms, s, m, h)");
  // With its unit it loads.
  CHECK(only_problem(kHead + "to: { out: { http: { url: \"http://127.0.0.1:9/\", timeout: 5s } } }\n").empty());
}

TEST_CASE("weir test --cases: an expectation at a sink the flow lacks is an error", "[teach][cli]") {
  TempDir dir;
  std::string flow = dir.write("f.yaml", kHead + "steps: []\n" + kSink);
  std::string cases = dir.write("cases.yaml",
                                "- { name: right, input: { a: 1 }, expect: { out: [ { a: 1 } ] } }\n"
                                "- { name: typo, input: { a: 1 }, expect: { outt: [] } }\n"
                                "- { name: other flow, flow: g, input: {}, expect: { elsewhere: [] } }\n");
  std::ostringstream out;
  CHECK(test_command({flow}, cases, out) == 2);
  INFO(out.str());
  CHECK(out.str().find(cases + ":2:44: tests[1].expect: unknown sink \"outt\" (sinks: out) (flow f)\n") !=
        std::string::npos);
  CHECK(out.str().find("elsewhere") == std::string::npos);  // a case for flow g is not checked against f
  CHECK(out.str().find("PASS") == std::string::npos);       // no case of f ran
}

TEST_CASE("weir validate DIR and weir test DIR read the directory's flow files", "[teach][cli]") {
  TempDir dir;
  std::string a = dir.write("a.yaml", "flow: a\nfrom: { http: { path: /in/a } }\nsteps: []\n" + kSink);
  std::string b = dir.write("b.json",
                            R"({"flow": "b", "from": {"http": {"path": "/in/b"}}, "steps": [],
                                "to": {"out": {"http": {"url": "http://127.0.0.1:9/"}}},
                                "tests": [{"input": {"x": 1}, "expect": {"out": [{"x": 1}]}}]})");
  dir.write("notes.txt", "not a flow");
  std::ostringstream out, err;
  CHECK(validate_command({dir.path.string()}, out, err) == 0);
  CHECK(err.str().empty());
  CHECK(out.str() == "ok " + a + " (flow a)\nok " + b + " (flow b)\n");
  std::ostringstream tout;
  CHECK(test_command({dir.path.string()}, "", tout) == 0);
  CHECK(tout.str().find("1 passed, 0 failed") != std::string::npos);

  TempDir empty;
  std::ostringstream out2, err2;
  CHECK(validate_command({empty.path.string()}, out2, err2) == 0);
  CHECK(err2.str() == empty.path.string() + ": warning: no flow files (*.yaml, *.yml, *.json) in this directory\n");
}

TEST_CASE("weir validate warns about a secret variable that is unset", "[teach][cli]") {
  TempDir dir;
  const std::string var = "WEIR_TEACH_TEST_UNSET_SECRET_7Q";
  REQUIRE(std::getenv(var.c_str()) == nullptr);
  std::string f = dir.write("hook.yaml", "flow: hook\nfrom: { http: { path: /in/h, hmac: { secret_env: " + var +
                                             " } } }\nsteps: []\n" + kSink);
  std::ostringstream out, err;
  CHECK(validate_command({f}, out, err) == 0);  // valid: a warning, not an error
  CHECK(out.str() == "ok " + f + " (flow hook)\n");
  CHECK(err.str() == f + ":2:50: warning: environment variable " + var +
                         " (from.http.hmac.secret_env) is not set (weir run refuses to start until it is)\n");
}

TEST_CASE("unset_secret_variables: every *_env setting, unset or empty, never a value", "[teach]") {
  const std::string text =
      "flow: f\n"
      "from: { http: { path: /in/f, hmac: { secret_env: HOOK_SECRET }, bearer: { token_env: HOOK_TOKEN } } }\n"
      "to:\n"
      "  m: { mqtt: { broker: \"tcp://127.0.0.1:1\", topic: t, username_env: MQ_USER, password_env: MQ_PASS } }\n";
  LoadResult r = load_flow_text(text, "t.yaml", no_env());
  REQUIRE(r.flow);
  REQUIRE(r.flow->secret_variables().size() == 4);
  std::map<std::string, std::string> vars{{"HOOK_SECRET", "s3cr3t-value"}, {"HOOK_TOKEN", ""}, {"MQ_USER", ""}};
  auto env = [&](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  std::vector<std::string> got;
  for (const auto& d : unset_secret_variables(*r.flow, env)) got.push_back(d.str());
  CHECK(got ==
        std::vector<std::string>{"t.yaml:2:86: environment variable HOOK_TOKEN (from.http.bearer.token_env) is empty",
                                 "t.yaml:4:92: environment variable MQ_PASS (to.m.mqtt.password_env) is not set"});
  // MQ_USER empty is allowed (an MQTT user name may be empty); no message carries a value.
  for (const auto& g : got) CHECK(g.find("s3cr3t") == std::string::npos);
}
