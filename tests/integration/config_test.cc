// Configuration errors (exit codes, weir.yaml and flow files, ${NAME} substitution:
// docs/configuration.md) and the SIGTERM drain.
#include <signal.h>

#include <catch2/catch.hpp>
#include <iostream>
#include <regex>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The message names line `line` ("file:3:", "line 3", "3:5").
bool names_line(const std::string& text, int line) {
  std::regex re("(:|line |Line )" + std::to_string(line) + "\\b");
  return std::regex_search(text, re);
}

// Spawns weir with `options`; it must exit 2 quickly. Returns its output.
std::string expect_exit_2(WeirOptions options) {
  WeirProcess weir(std::move(options));
  weir.spawn();
  auto code = weir.process().wait_exit(15s);
  INFO(weir.describe());
  REQUIRE(code.has_value());
  CHECK(*code == 2);
  return weir.log();
}

const std::string kGoodFlow =
    "flow: orders\nfrom: { http: { path: /in/orders } }\nsteps: []\n"
    "to: { out: { http: { url: \"http://127.0.0.1:9/out\" } } }\n";

}  // namespace

// With nats.url given, weir opens its NATS connections while the flows compile (ADR 0215).
// A flow error must still end start-up at once with its message and exit 2,
// before anything listens — also while the connections are still being retried (NATS
// unreachable: they would retry for 10 s).
TEST_CASE("a flow error while the NATS connections are being opened exits 2 at once, before serving",
          "[integration][config]") {
  const std::string bad_flow =
      "flow: orders\nfrom: { http: { path: /in/orders } }\n"
      "stepz: []\nto: { out: { http: { url: \"http://x/\" } } }\n";
  auto check = [&](const std::string& nats_url) {
    WeirProcess weir({.nats_url = nats_url, .flows = {{"orders.yaml", bad_flow}}});
    weir.spawn();
    // Well inside the 10 s the connections would keep retrying an unreachable NATS.
    auto code = weir.process().wait_exit(6s);
    INFO(weir.describe());
    REQUIRE(code.has_value());
    CHECK(*code == 2);
    const std::string out = weir.log();
    INFO(out);
    CHECK(contains(out, "orders.yaml"));
    CHECK(names_line(out, 3));
    CHECK(contains(out, "stepz"));
    CHECK_FALSE(contains(out, "listening"));  // nothing was served
  };
  SECTION("NATS up: the connections open, then close again") {
    NatsServer nats;
    check(nats.url());
  }
  SECTION("NATS unreachable: the retries stop") {
    check("nats://127.0.0.1:" + std::to_string(weir::testing::free_port()));
  }
}

// A secret variable a flow names but the environment lacks: weir run says which, where,
// and exits 2 before any listener or the embedded nats-server starts (flows/flow.h,
// unset_secret_variables; `weir validate` warns about the same).
TEST_CASE("an unset secret variable stops weir run before anything starts", "[integration][config][secrets]") {
  const std::string flow =
      "flow: hook\nfrom: { http: { path: /in/hook, hmac: { secret_env: WEIR_ITEST_UNSET_HOOK_SECRET } } }\n"
      "steps: []\nto: { out: { http: { url: \"http://127.0.0.1:9/out\" } } }\n";
  REQUIRE(std::getenv("WEIR_ITEST_UNSET_HOOK_SECRET") == nullptr);
  WeirProcess weir({.flows = {{"hook.yaml", flow}}});  // embedded nats-server: none may start
  weir.spawn();
  auto code = weir.process().wait_exit(15s);
  INFO(weir.describe());
  REQUIRE(code.has_value());
  CHECK(*code == 2);
  const std::string out = weir.log();
  INFO(out);
  CHECK(contains(out,
                 "hook.yaml:2:53: environment variable WEIR_ITEST_UNSET_HOOK_SECRET "
                 "(from.http.hmac.secret_env) is not set"));
  CHECK(contains(out, "weir: not started: set the environment variables above"));
  CHECK_FALSE(contains(out, "listening"));
  CHECK_FALSE(contains(out, "embedded nats-server started"));
}

TEST_CASE("configuration errors exit 2 naming the file, the line and the field", "[integration][config]") {
  NatsServer nats;

  SECTION("unknown key in weir.yaml") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"orders.yaml", kGoodFlow}},
                                     .config = "log: { level: info }\nhttpp: { max_body: 1MiB }\n"});
    INFO(out);
    CHECK(contains(out, "weir.yaml"));
    CHECK(contains(out, "httpp"));
    CHECK(names_line(out, 2));
  }
  SECTION("unknown nested key in weir.yaml") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"orders.yaml", kGoodFlow}},
                                     .config = "log:\n  level: info\nhttp:\n  max_body: 1MiB\n  read_timeoutt: 3s\n"});
    INFO(out);
    CHECK(contains(out, "weir.yaml"));
    CHECK(contains(out, "read_timeoutt"));
    CHECK(names_line(out, 5));
  }
  SECTION("wrong type in weir.yaml") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"orders.yaml", kGoodFlow}},
                                     .config = "log: { level: info }\nhttp:\n  max_body: lots\n"});
    INFO(out);
    CHECK(contains(out, "weir.yaml"));
    CHECK(contains(out, "max_body"));
    CHECK(names_line(out, 3));
  }
  SECTION("bad duration in weir.yaml") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"orders.yaml", kGoodFlow}},
                                     .config = "http: { read_timeout: 10 parsecs }\n"});
    INFO(out);
    CHECK(contains(out, "weir.yaml"));
    CHECK(contains(out, "read_timeout"));
  }
  SECTION("unknown key in a flow file") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"orders.yaml",
                                                "flow: orders\nfrom: { http: { path: /in/orders } }\n"
                                                "stepz: []\nto: { out: { http: { url: \"http://x/\" } } }\n"}}});
    INFO(out);
    CHECK(contains(out, "orders.yaml"));
    CHECK(contains(out, "stepz"));
    CHECK(names_line(out, 3));
  }
  SECTION("wrong type in a flow file") {
    std::string out = expect_exit_2(
        {.nats_url = nats.url(),
         .flows = {{"orders.yaml",
                    "flow: orders\nfrom: { http: { path: /in/orders } }\nsteps: []\nto:\n  out:\n"
                    "    http:\n      url: \"http://127.0.0.1:9/out\"\n      retries: many\n"}}});
    INFO(out);
    CHECK(contains(out, "orders.yaml"));
    CHECK(contains(out, "retries"));
    CHECK(names_line(out, 8));
  }
  SECTION("invalid flow name") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"bad.yaml",
                                                "flow: Orders!\nfrom: { http: { path: /in/o } }\n"
                                                "steps: []\nto: { out: { http: { url: \"http://x/\" } } }\n"}}});
    INFO(out);
    CHECK(contains(out, "bad.yaml"));
    CHECK(contains(out, "flow name \"Orders!\""));  // the field and the value, not just the word
    CHECK(names_line(out, 1));
  }
  SECTION("invalid JSON flow file") {
    std::string out = expect_exit_2({.nats_url = nats.url(), .flows = {{"orders.json", "{\"flow\": \"orders\",\n,}"}}});
    INFO(out);
    CHECK(contains(out, "orders.json"));
    CHECK(names_line(out, 2));
  }
  SECTION("missing ${VAR}") {
    std::string out = expect_exit_2(
        {.nats_url = nats.url(),
         .flows = {{"orders.yaml", http_flow("orders", "/in/orders", "${WEIR_TEST_NO_SUCH_VAR_Q7}/out")}}});
    INFO(out);
    CHECK(contains(out, "WEIR_TEST_NO_SUCH_VAR_Q7"));
    CHECK(contains(out, "orders.yaml"));
  }
  SECTION("missing ${VAR} in weir.yaml") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"orders.yaml", kGoodFlow}},
                                     .config = "http: { max_body: \"${WEIR_TEST_NO_SUCH_SIZE_Q7}\" }\n"});
    INFO(out);
    CHECK(contains(out, "WEIR_TEST_NO_SUCH_SIZE_Q7"));
    CHECK(contains(out, "weir.yaml"));
  }
  SECTION("unknown command-line flag") {
    weir::testing::TempDir dir;
    auto p = weir::testing::Process::spawn({weir_binary(), "run", "--no-such-flag"}, {}, dir.file("log"));
    auto code = p.wait_exit(10s);
    INFO(p.read_log());
    REQUIRE(code.has_value());
    CHECK(*code == 2);
    CHECK(contains(p.read_log(), "no-such-flag"));
  }
}

TEST_CASE("environment references NAME and NAME:-default are substituted at load", "[integration][config]") {
  NatsServer nats;
  SinkProcess sink;
  std::string sink_base = sink.url("");
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"a.yaml", http_flow("a", "${A_PATH}", "${A_SINK}/a")},
                              // Block style, as users write it: plain ${...} scalars, a number from a default.
                              {"b.yaml",
                               "flow: b\n"
                               "from:\n"
                               "  http:\n"
                               "    path: /in/b\n"
                               "steps: []\n"
                               "to:\n"
                               "  out:\n"
                               "    http:\n"
                               "      url: ${WEIR_TEST_UNSET_SINK_Q7:-" +
                                   sink_base +
                                   "}/b\n"
                                   "      retries: ${WEIR_TEST_UNSET_RETRIES_Q7:-3}\n"
                                   "      timeout: ${WEIR_TEST_UNSET_TIMEOUT_Q7:-2s}\n"}},
                    .config = "http: { max_body: \"${WEIR_TEST_UNSET_MAX_Q7:-64KiB}\" }\n",
                    .env = {{"A_PATH", "/in/from-env"}, {"A_SINK", sink_base}}});
  weir.start();
  INFO(weir.describe());
  auto a = weir.post("/in/from-env", R"({"id":"a1"})");
  CHECK(a.status == 202);
  auto b = weir.post("/in/b", R"({"id":"b1"})");
  CHECK(b.status == 202);
  std::set<std::string> ids{"a1", "b1"};
  CHECK(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 20s, 50ms));
  std::multiset<std::string> paths;
  for (const auto& req : sink.requests(10)) paths.insert(req.value("path", ""));
  CHECK(paths == std::multiset<std::string>{"/a", "/b"});
}

TEST_CASE("SIGTERM finishes deliveries in flight before it exits", "[integration][config]") {
  NatsServer nats;
  SinkProcess sink({"--delay-ms", "800"});
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                           "retries: 8, " WEIR_TEST_RETRY ", timeout: 5s, max_connections: 8")}}});
  weir.start();
  INFO(weir.describe());
  std::set<std::string> ids;
  for (int i = 0; i < 8; ++i) {
    std::string id = "f" + std::to_string(i);
    REQUIRE(weir.post("/in/orders", json{{"id", id}}.dump()).status == 202);
    ids.insert(id);
  }
  // The sink holds each answer 800 ms: wait until deliveries are in flight, then stop.
  REQUIRE(wait_until([&] { return sink.requests(100).size() >= 1; }, 10s, 10ms));
  auto code = weir.terminate(15s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  // A restart delivers the rest. Had weir abandoned the deliveries in flight instead
  // of finishing (and acking) them, it would send them again now: duplicates.
  sink.control({{"delay_ms", 0}});
  weir.start();
  CHECK(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 20s, 50ms));
  CHECK(sink.stat("duplicates") == 0);
  CHECK(weir.terminate(15s) == std::optional<int>(0));
}

TEST_CASE("flow files in JSON are loaded beside YAML ones", "[integration][config]") {
  NatsServer nats;
  SinkProcess sink;
  json flow = {{"flow", "jsonflow"},
               {"from", {{"http", {{"path", "/in/json"}}}}},
               {"steps", json::array()},
               {"to", {{"out", {{"http", {{"url", sink.url("/json")}, {"retries", 3}, {"timeout", "2s"}}}}}}}};
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"jsonflow.json", flow.dump(2)},
                              {"yamlflow.yaml", http_flow("yamlflow", "/in/yaml", sink.url("/yaml"))},
                              {"notes.txt", "not a flow: ignored"}}});
  weir.start();
  INFO(weir.describe());
  CHECK(weir.post("/in/json", R"({"id":"j1"})").status == 202);
  CHECK(weir.post("/in/yaml", R"({"id":"y1"})").status == 202);
  std::set<std::string> ids{"j1", "y1"};
  CHECK(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 20s, 50ms));
}

TEST_CASE("an ingress address already in use is a clear startup failure", "[integration][config]") {
  NatsServer nats;
  WeirOptions options{
      .nats_url = nats.url(), .flows = {{"orders.yaml", kGoodFlow}}, .config = "", .env = {}, .use_flags = false};
  // Something else holds the ingress port (given through weir.yaml this time).
  int busy = weir::testing::free_port();
  weir::testing::ResettingListener taken(busy);
  options.config = "nats: { url: \"{NATS}\" }\ndata_dir: {DATA}\nflows: {FLOWS}\nhttp: { listen: \"127.0.0.1:" +
                   std::to_string(busy) + "\" }\nadmin: { listen: \"{ADMIN}\" }\n";
  WeirProcess weir(std::move(options));
  weir.spawn();
  auto code = weir.process().wait_exit(15s);
  INFO(weir.describe());
  REQUIRE(code.has_value());
  CHECK(*code == 1);  // a runtime failure (exit 1), not a crash
  CHECK(weir.log().find(std::to_string(busy)) != std::string::npos);
}

TEST_CASE("SIGTERM drains and exits 0, nothing acknowledged is lost", "[integration][config]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}}});
  weir.start();

  std::set<std::string> acked;
  {
    Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(500));
    REQUIRE(wait_until([&] { return posters.acked() >= 400; }, 20s, 5ms));
    auto t0 = std::chrono::steady_clock::now();
    auto code = weir.terminate(15s);
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    INFO(weir.describe());
    REQUIRE(code.has_value());
    CHECK(*code == 0);
    CHECK(took < 10s);
    std::cout << "SIGTERM under load: exit " << *code << " after " << took.count() << " ms\n";
    posters.stop();
    acked = posters.acked_ids();
    // While draining and after, no request was acknowledged without an answer: every
    // answer is 202, 503, or no answer at all.
    for (auto [status, n] : posters.status_counts()) {
      INFO("HTTP " << status << " x" << n);
      CHECK((status == 202 || status == 503 || status == 0));
    }
  }

  // Whatever was acked is delivered, at the latest by the next run on the same stream.
  weir.start();
  INFO(weir.describe());
  std::vector<std::string> lost;
  bool all = wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        return lost.empty();
      },
      30s, 100ms);
  CHECK(all);
  if (!lost.empty()) FAIL_CHECK("lost " << lost.size() << " of " << acked.size() << ", first: " << lost.front());
  CHECK(weir.terminate(15s) == std::optional<int>(0));

  // SIGINT drains the same way.
  weir.start();
  weir.process().signal(SIGINT);
  CHECK(weir.process().wait_exit(15s) == std::optional<int>(0));
}

TEST_CASE("every documented weir.yaml key loads, and sizes and durations in every spelling", "[integration][config]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 3, " WEIR_TEST_RETRY ", timeout: 1500ms")}},
                    .config = "nats:    { url: \"{NATS}\" }\n"
                              "data_dir: {DATA}\n"
                              "http:    { listen: \"{HTTP}\", max_body: 200, read_timeout: 1m }\n"
                              "admin:   { listen: \"{ADMIN}\" }\n"
                              "flows:   {FLOWS}\n"
                              "cluster: { name: \"\", lease_ttl: 3s }\n"
                              "log:     { level: info, format: text }\n",
                    .env = {},
                    .use_flags = false});
  weir.start();
  INFO(weir.describe());
  // max_body: 200 is a plain number of bytes.
  CHECK(weir.post("/in/orders", json{{"id", "small"}}.dump()).status == 202);
  CHECK(weir.post("/in/orders", json{{"id", "large"}, {"pad", std::string(300, 'p')}}.dump()).status == 413);
  std::set<std::string> ids{"small"};
  CHECK(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 20s, 50ms));
  CHECK(weir.terminate() == std::optional<int>(0));

  for (const char* spelling : {"512KiB", "1MiB", "4096"}) {
    INFO("max_body " << spelling);
    WeirProcess other({.nats_url = nats.url(),
                       .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}},
                       .config = std::string("http: { max_body: ") + spelling + ", read_timeout: 250ms }\n"});
    other.start();
    CHECK(other.post("/in/orders", json{{"id", std::string("s-") + spelling}}.dump()).status == 202);
    CHECK(other.terminate() == std::optional<int>(0));
  }
}

TEST_CASE("conflicting flows are configuration errors", "[integration][config]") {
  NatsServer nats;
  SECTION("two flows with one name") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"a.yaml", http_flow("orders", "/in/a", "http://127.0.0.1:9/a")},
                                               {"b.yaml", http_flow("orders", "/in/b", "http://127.0.0.1:9/b")}}});
    INFO(out);
    CHECK(contains(out, "orders"));
  }
  SECTION("two flows on one path") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"a.yaml", http_flow("a", "/in/same", "http://127.0.0.1:9/a")},
                                               {"b.yaml", http_flow("b", "/in/same", "http://127.0.0.1:9/b")}}});
    INFO(out);
    CHECK(contains(out, "/in/same"));
  }
  SECTION("several sinks and no route") {
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"two.yaml",
                                                "flow: two\nfrom: { http: { path: /in/two } }\nsteps: []\nto:\n"
                                                "  a: { http: { url: \"http://127.0.0.1:9/a\" } }\n"
                                                "  b: { http: { url: \"http://127.0.0.1:9/b\" } }\n"}}});
    INFO(out);
    CHECK(contains(out, "two.yaml"));
  }
}

// A Standard Webhooks secret that cannot be decoded verifies no signature: every sender
// would get 401 with a signature that is right. It is a start-up error naming the
// variable and what is wrong, never the secret.
TEST_CASE("a malformed whsec_ secret is a start-up error naming its variable, not the secret",
          "[integration][config][signature]") {
  NatsServer nats;
  SinkProcess sink;
  for (const std::string bad : {"whsec_SECRETVALUE!", "whsec_", "whsec_SECRETV"}) {
    INFO(bad);
    std::string out = expect_exit_2({.nats_url = nats.url(),
                                     .flows = {{"standard.yaml", http_flow("standard", "/in/standard", sink.url("/s"),
                                                                           "retries: 8, " WEIR_TEST_RETRY,
                                                                           "hmac: { secret_env: SW_SECRET, scheme: "
                                                                           "standard }")}},
                                     .env = {{"SW_SECRET", bad}}});
    CHECK(contains(out, "SW_SECRET"));
    CHECK(contains(out, "no Standard Webhooks secret"));
    CHECK_FALSE(contains(out, "SECRETV"));
  }
  // A well-formed one starts.
  WeirProcess good(
      {.nats_url = nats.url(),
       .flows = {{"standard.yaml", http_flow("standard", "/in/standard", sink.url("/s"), "retries: 8, " WEIR_TEST_RETRY,
                                             "hmac: { secret_env: SW_SECRET, scheme: standard }")}},
       .env = {{"SW_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}});
  good.start();
  CHECK(good.terminate() == std::optional<int>(0));
}
