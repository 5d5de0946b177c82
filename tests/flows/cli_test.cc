// `weir validate` and `weir test` as library functions.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "flows/cli.h"

using namespace weir::flows;
namespace fs = std::filesystem;

namespace {

const std::string kData = WEIR_FLOWS_TEST_DATA;
const std::string kSource = WEIR_SOURCE_DIR;

// A temporary directory removed when the test ends, also on failure.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "weir-flows-test-XXXXXX").string();
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

size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("validate: valid files exit 0", "[cli]") {
  std::ostringstream out, err;
  int rc = validate_command(
      {kData + "/orders.yaml", kData + "/orders.json", kSource + "/bench/flows/bench_orders.yaml"}, out, err);
  INFO(err.str());
  CHECK(rc == 0);
  // Valid files; the two orders flows name a secret variable the test leaves unset: a
  // warning each (teaching_errors_test.cc), no error.
  CHECK(count_lines(err.str()) == 2);
  CHECK(err.str().find("warning: environment variable ORDERS_SECRET (from.http.hmac.secret_env) is not set") !=
        std::string::npos);
  CHECK(count_lines(out.str()) == 3);
  CHECK(out.str().find("ok " + kSource + "/bench/flows/bench_orders.yaml (flow bench_orders)") != std::string::npos);
}

TEST_CASE("validate: three mistakes, all reported, exit 2", "[cli]") {
  std::ostringstream out, err;
  std::string file = kData + "/three_mistakes.yaml";
  int rc = validate_command({file, kData + "/orders.yaml"}, out, err);
  CHECK(rc == 2);
  std::string e = err.str();
  CHECK(count_lines(e) == 4);  // three errors, and orders.yaml's unset-secret warning
  CHECK(e.find(file +
               ":7:15: invalid expression in steps[0].set.amount: unknown function 'numbr' (did you mean number?)\n") !=
        std::string::npos);
  CHECK(e.find(file + ":11:13: steps[2].branch[0].to: unknown sink \"bigg\"") != std::string::npos);
  CHECK(e.find(file + ":14:54: unknown key \"retrys\" in to.big.http") != std::string::npos);
  CHECK(out.str().find("ok " + kData + "/orders.yaml") != std::string::npos);  // the valid one is still checked
}

TEST_CASE("validate: usage and unreadable files", "[cli]") {
  std::ostringstream out, err;
  CHECK(validate_command({}, out, err) == 2);
  CHECK(err.str().find("usage") != std::string::npos);
  std::ostringstream out2, err2;
  CHECK(validate_command({kData + "/nope.yaml"}, out2, err2) == 2);
  CHECK(err2.str().find(kData + "/nope.yaml: cannot read") == 0);
}

TEST_CASE("test: bench_orders passes its own cases", "[cli]") {
  std::ostringstream out;
  int rc = test_command({kSource + "/bench/flows/bench_orders.yaml"}, "", out);
  INFO(out.str());
  CHECK(rc == 0);
  std::string s = out.str();
  CHECK(s.find("bench_orders (") == 0);
  CHECK(s.find("  PASS a gold customer's big order goes to big\n") != std::string::npos);
  CHECK(s.find("FAIL") == std::string::npos);
  CHECK(s.find("\n7 passed, 0 failed\n") != std::string::npos);
}

TEST_CASE("test: the examples and the recipes pass their cases", "[cli]") {
  std::vector<std::string> files;
  for (const char* dir : {"/examples/flows", "/examples/recipes"}) {
    for (const auto& e : fs::directory_iterator(kSource + dir)) {
      if (e.path().extension() == ".yaml" || e.path().extension() == ".json") files.push_back(e.path().string());
    }
  }
  REQUIRE(files.size() >= 4);  // examples/flows (2), examples/recipes (2 or more)
  std::ostringstream out;
  int rc = test_command(files, "", out);
  INFO(out.str());
  CHECK(rc == 0);
  CHECK(out.str().find(" 0 failed\n") != std::string::npos);
  CHECK(out.str().find("(no test cases)") == std::string::npos);
}

TEST_CASE("test: failures are printed and exit 1", "[cli]") {
  TempDir dir;
  std::string flow = dir.write("f.yaml",
                               "flow: f\nfrom: { http: { path: /in } }\nto: { out: { nats: { subject: o } } }\n"
                               "steps: [ { set: { n2: this.n * 2 } }, { filter: this.n2 > 0 } ]\n"
                               "tests:\n"
                               "  - { name: doubles, input: { n: 2 }, expect: { out: [ { n2: 4 } ] } }\n"
                               "  - { name: wrong value, input: { n: 2 }, expect: { out: [ { n2: 5 } ] } }\n"
                               "  - { name: wrong kind, input: { n: 0 }, expect: { out: [ {} ] } }\n"
                               "  - { name: expects error, input: { n: 1 }, expect: error }\n"
                               "  - { name: is error, input: { n: x }, expect: error }\n"
                               "  - { name: dropped, input: { n: -1 }, expect: dropped }\n"
                               "  - { name: nothing here, input: { n: -1 }, expect: { out: [] } }\n"
                               "  - { input: { n: 1 }, expect: { out: [] } }\n");
  std::ostringstream out;
  int rc = test_command({flow}, "", out);
  std::string s = out.str();
  INFO(s);
  CHECK(rc == 1);
  CHECK(s.find("  PASS doubles\n") != std::string::npos);
  CHECK(s.find("  FAIL wrong value: event at out differs at .n2: expected 5, got 4;") != std::string::npos);
  CHECK(s.find("  FAIL wrong kind: expected an event at out, got dropped\n") != std::string::npos);
  CHECK(s.find("  FAIL expects error: expected error, got emitted to out: {\"n\":1,\"n2\":2}\n") != std::string::npos);
  CHECK(s.find("  PASS is error\n") != std::string::npos);
  CHECK(s.find("  PASS dropped\n") != std::string::npos);
  CHECK(s.find("  PASS nothing here\n") != std::string::npos);
  CHECK(s.find("  FAIL case 8: expected nothing at out, got emitted to out") != std::string::npos);
  CHECK(s.find("\n4 passed, 4 failed\n") != std::string::npos);
}

TEST_CASE("test: --cases file, per-flow cases, load failures exit 2", "[cli]") {
  TempDir dir;
  std::string a = dir.write("a.yaml",
                            "flow: a\nfrom: { http: { path: /a } }\nto: { out: { nats: { subject: o } } }\n"
                            "steps: [ { set: { who: \"'a'\" } } ]\n"
                            "tests: [ { input: {}, expect: dropped } ]\n");
  std::string b = dir.write("b.json", R"({"flow": "b", "from": {"http": {"path": "/b"}},
    "to": {"out": {"nats": {"subject": "o"}}}, "steps": [{"set": {"who": "'b'"}}]})");
  std::string cases = dir.write("cases.yaml",
                                "tests:\n"
                                "  - { name: any flow, input: { x: 1 }, expect: { out: [ { x: 1 } ] } }\n"
                                "  - { name: only a, flow: a, input: {}, expect: { out: [ { who: a } ] } }\n"
                                "  - { name: only b, flow: b, input: {}, expect: { out: { who: b } } }\n");
  std::ostringstream out;
  int rc = test_command({a, b}, cases, out);
  std::string s = out.str();
  INFO(s);
  CHECK(rc == 0);
  CHECK(s.find("a (" + a + ")\n  PASS any flow\n  PASS only a\n") != std::string::npos);
  CHECK(s.find("b (" + b + ")\n  PASS any flow\n  PASS only b\n") != std::string::npos);
  CHECK(s.find("\n4 passed, 0 failed\n") != std::string::npos);
  // A list works as well as a mapping with tests:.
  std::string list = dir.write("list.json", R"([{"input": {}, "expect": "dropped"}])");
  std::ostringstream out2;
  CHECK(test_command({a}, list, out2) == 1);
  CHECK(out2.str().find("0 passed, 1 failed") != std::string::npos);
  // Broken cases file.
  std::string bad = dir.write("bad.yaml", "tests:\n  - { input: {}, expect: sometimes }\n");
  std::ostringstream out3;
  CHECK(test_command({a}, bad, out3) == 2);
  CHECK(out3.str().find(bad + ":2:26: tests[0].expect must be dropped, error or a mapping") == 0);
  // A flow that does not load: its problems, the others still run, exit 2.
  std::ostringstream out4;
  CHECK(test_command({kData + "/three_mistakes.yaml", a}, "", out4) == 2);
  CHECK(out4.str().find(":7:15: invalid expression") != std::string::npos);
  CHECK(out4.str().find("0 passed, 1 failed") != std::string::npos);
  std::ostringstream out5;
  CHECK(test_command({}, "", out5) == 2);
}

// docs/adr/0301: an HTTP sink's header expression is compiled by validate; a typo is an
// error at its line and column inside the expression, exit 2.
TEST_CASE("validate: a bad http sink header expression names its line and column", "[cli][sinks]") {
  TempDir dir;
  const std::string file = dir.write("hooks.yaml",
                                     "flow: hooks\n"
                                     "from: { http: { path: /in } }\n"
                                     "to:\n"
                                     "  out:\n"
                                     "    http:\n"
                                     "      url: \"http://127.0.0.1:1/x\"\n"
                                     "      headers:\n"
                                     "        X-Fixed: abc\n"
                                     "        X-Event-Type: { expr: \"'order.' + this.type +\" }\n");
  std::ostringstream out, err;
  CHECK(validate_command({file}, out, err) == 2);
  INFO(out.str() << err.str());
  CHECK(err.str() == file +
                         ":9:54: invalid expression in to.out.http.headers.X-Event-Type.expr: expected a value, found "
                         "end of expression\n");
}
