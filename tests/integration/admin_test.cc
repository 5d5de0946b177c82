// Admin API (docs/admin-api.md): health, readiness, Prometheus metrics that match the
// traffic, bearer token on everything but /healthz and /readyz; logs: JSON lines with
// levels, no secret ever logged.
#include <catch2/catch.hpp>
#include <csignal>
#include <sstream>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::http_request;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

const std::string kAdminToken = "adm-7c1e-very-secret";
const std::string kHmacSecret = "hmac-5b2d-very-secret";

using Samples = std::multimap<std::string, std::pair<std::string, double>>;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A sample whose name contains every part of `name_parts`, whose labels contain
// `label`, with exactly `value`.
bool has_sample(const Samples& samples, std::vector<std::string> name_parts, const std::string& label, double value) {
  for (const auto& sample : samples) {  // not a structured binding: clang 14 cannot capture one (thread_safety)
    const std::string& name = sample.first;
    const auto& lv = sample.second;
    bool name_ok = std::all_of(name_parts.begin(), name_parts.end(), [&](const auto& p) { return contains(name, p); });
    if (name_ok && contains(lv.first, label) && lv.second == value) return true;
  }
  return false;
}

// At least one sample of the metric called exactly `name` has labels containing `label`,
// and every such sample has `value` (a "== 0" that cannot pass when the metric is gone,
// nor when one of several matching counters is 0 and another is not).
bool every_sample(const Samples& samples, const std::string& name, const std::string& label, double value) {
  auto [from, to] = samples.equal_range(name);
  size_t matched = 0;
  for (auto it = from; it != to; ++it) {
    if (!contains(it->second.first, label)) continue;
    ++matched;
    if (it->second.second != value) return false;
  }
  return matched > 0;
}

bool has_name(const Samples& samples, const std::string& part, const std::string& label = "") {
  for (const auto& [name, lv] : samples) {
    if (contains(name, part) && contains(lv.first, label)) return true;
  }
  return false;
}

std::string describe_samples(const Samples& samples, const std::string& label) {
  std::ostringstream s;
  for (const auto& [name, lv] : samples) {
    if (label.empty() || contains(lv.first, label)) s << name << "{" << lv.first << "} " << lv.second << "\n";
  }
  return s.str();
}

}  // namespace

TEST_CASE("admin API: metrics match the traffic, the token guards all but health and readiness",
          "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  // Everything from weir.yaml this time (no flags), JSON logs at debug level.
  WeirProcess weir({
      .nats_url = nats.url(),
      .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/orders"))},
                {"refunds.yaml", http_flow("refunds", "/in/refunds", sink.url("/refunds"),
                                           "retries: 8, " WEIR_TEST_RETRY, "hmac: { secret_env: REFUNDS_SECRET }")}},
      .config = "nats: { url: \"{NATS}\" }\n"
                "data_dir: {DATA}\n"
                "http: { listen: \"{HTTP}\" }\n"
                "admin: { listen: \"{ADMIN}\", token_env: WEIR_ADMIN_TOKEN }\n"
                "flows: {FLOWS}\n"
                "log: { level: debug, format: json }\n",
      .env = {{"WEIR_ADMIN_TOKEN", kAdminToken}, {"REFUNDS_SECRET", kHmacSecret}},
      .use_flags = false,
  });
  weir.start();
  INFO(weir.describe());
  const std::vector<std::string> auth{"Authorization: Bearer " + kAdminToken};

  CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);
  CHECK(http_request("GET", weir.admin_url("/readyz")).status == 200);
  CHECK(weir.admin("GET", "/metrics").status == 401);
  CHECK(weir.admin("GET", "/metrics", "", {"Authorization: Bearer wrong"}).status == 401);
  CHECK(weir.admin("GET", "/metrics", "", {"Authorization: Bearer " + kAdminToken + "0"}).status == 401);
  CHECK(weir.admin("GET", "/dlq").status == 401);
  CHECK(weir.admin("POST", "/dlq/replay", "{}").status == 401);
  CHECK(weir.admin("GET", "/dlq", "", auth).status == 200);
  // The dashboard's page and assets hold no data: served without the token, with a CSP
  // that keeps the page to this origin; the data they ask for needs the token.
  auto page = http_request("GET", weir.admin_url("/"));
  CHECK(page.status == 200);
  CHECK(contains(page.header("content-type"), "text/html"));
  CHECK(contains(page.body, "/dashboard.js"));
  CHECK(contains(page.header("content-security-policy"), "default-src 'none'"));
  auto script = http_request("GET", weir.admin_url("/dashboard.js"));
  CHECK(script.status == 200);
  CHECK(contains(script.header("content-type"), "javascript"));
  CHECK(contains(script.body, "sessionStorage"));
  CHECK(http_request("GET", weir.admin_url("/dashboard.css")).status == 200);
  CHECK(http_request("GET", weir.admin_url("/index.htm")).status == 401);

  constexpr int kOrders = 37;
  constexpr int kRefunds = 5;
  std::set<std::string> ids;
  for (int i = 0; i < kOrders; ++i) {
    std::string id = "o" + std::to_string(i);
    auto r = weir.post("/in/orders", json{{"id", id}, {"n", i}}.dump());
    REQUIRE(r.status == 202);
    ids.insert(id);
  }
  for (int i = 0; i < kRefunds; ++i) {
    std::string id = "r" + std::to_string(i);
    std::string body = json{{"id", id}, {"refund", i}}.dump();
    auto r = weir.post("/in/refunds", body, {"X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kHmacSecret, body)});
    REQUIRE(r.status == 202);
    ids.insert(id);
  }
  // A rejected request is not counted as received.
  CHECK(weir.post("/in/refunds", R"({"refund":-1})", {"X-Hub-Signature-256: sha256=00"}).status == 401);
  REQUIRE(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 20s, 50ms));

  // Counters settle once the sink stage has acked its batches.
  Samples samples;
  auto metrics_settled = [&] {
    auto r = weir.admin("GET", "/metrics", "", auth);
    if (r.status != 200) return false;
    samples = parse_metrics(r.body);
    return has_sample(samples, {"acked"}, "flow=\"orders\"", kOrders) &&
           has_sample(samples, {"acked"}, "flow=\"refunds\"", kRefunds);
  };
  bool settled = wait_until(metrics_settled, 10s, 100ms);
  INFO("orders samples:\n" << describe_samples(samples, "flow=\"orders\""));
  CHECK(settled);
  auto m = weir.admin("GET", "/metrics", "", auth);
  REQUIRE(m.status == 200);
  CHECK(contains(m.header("content-type"), "text/plain"));
  CHECK(contains(m.body, "# TYPE"));
  samples = parse_metrics(m.body);
  CHECK(has_sample(samples, {"received"}, "flow=\"orders\"", kOrders));
  CHECK(has_sample(samples, {"received"}, "flow=\"refunds\"", kRefunds));
  CHECK(has_sample(samples, {"acked"}, "flow=\"orders\"", kOrders));
  CHECK(every_sample(samples, "weir_events_errors_total", "flow=\"orders\"", 0));
  CHECK(every_sample(samples, "weir_events_dlq_total", "flow=\"orders\"", 0));
  CHECK(samples.count("weir_events_in_flight") > 0);
  CHECK(has_name(samples, "weir_events_in_flight", "flow=\"orders\""));
  // Per stage: more than one stage label for the flow.
  std::set<std::string> stages;
  for (const auto& [name, lv] : samples) {
    size_t at = lv.first.find("stage=\"");
    if (contains(lv.first, "flow=\"orders\"") && at != std::string::npos) {
      stages.insert(lv.first.substr(at + 7, lv.first.find('"', at + 7) - at - 7));
    }
  }
  CHECK(stages.size() >= 2);
  // Latency histogram: buckets with le, a +Inf bucket and a count equal to the events.
  CHECK(has_name(samples, "_bucket", "flow=\"orders\""));
  CHECK(has_name(samples, "_bucket", "le=\"+Inf\""));
  CHECK(has_sample(samples, {"_count"}, "flow=\"orders\"", kOrders));
  // The same numbers as JSON (GET /status/metrics, the dashboard's feed), same token rule.
  CHECK(weir.admin("GET", "/status/metrics").status == 401);
  auto js = weir.admin("GET", "/status/metrics", "", auth);
  REQUIRE(js.status == 200);
  json stage_list = json::parse(js.body).value("stages", json::array());
  int matched = 0;
  for (const auto& st : stage_list) {
    if (st.value("flow", "") != "orders") continue;
    if (st.value("stage", "") == "flow" || st.value("stage", "") == "sink:out") {
      CHECK(st.value("acked", -1.0) == kOrders);
      CHECK(st.value("received", -1.0) >= kOrders);
      CHECK(st["latency_ms"].value("count", -1.0) == kOrders);
      CHECK(st["latency_ms"]["p50"].is_number());
      CHECK(st["latency_ms"]["p50"].get<double>() <= st["latency_ms"]["p99"].get<double>());
      ++matched;
    }
  }
  CHECK(matched == 2);
  // Process RSS and uptime.
  CHECK((has_name(samples, "resident") || has_name(samples, "rss")));
  CHECK((has_name(samples, "uptime") || has_name(samples, "start_time")));

  // Logs: JSON lines with a level; no secret anywhere.
  CHECK(weir.terminate() == std::optional<int>(0));
  std::string log = weir.log();
  CHECK_FALSE(contains(log, kAdminToken));
  CHECK_FALSE(contains(log, kHmacSecret));
  std::istringstream lines(log);
  std::string line;
  int json_lines = 0, bad_lines = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line.rfind("==== spawn", 0) == 0) continue;
    try {
      json j = json::parse(line);
      if (j.is_object() && (j.contains("level") || j.contains("lvl"))) {
        ++json_lines;
      } else {
        ++bad_lines;
      }
    } catch (const std::exception&) {
      ++bad_lines;
      UNSCOPED_INFO("not a JSON log line: " << line.substr(0, 200));
    }
  }
  CHECK(json_lines > 0);
  CHECK(bad_lines == 0);
}

TEST_CASE("admin API without token_env is open, readyz follows the NATS connection", "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/orders"))}}});
  weir.start();
  INFO(weir.describe());
  CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);
  auto ready = http_request("GET", weir.admin_url("/readyz"));
  CHECK(ready.status == 200);
  auto m = weir.admin("GET", "/metrics");
  CHECK(m.status == 200);
  CHECK(contains(m.body, "flow=\"orders\""));
  auto dlq = weir.admin("GET", "/dlq");
  CHECK(dlq.status == 200);
  CHECK(json::parse(dlq.body).is_array());
  CHECK(weir.admin("GET", "/no-such-admin-call").status == 404);

  // NATS gone: /readyz says 503 with a reason, /healthz still 200.
  nats.stop();
  HttpReply r;
  CHECK(wait_until(
      [&] {
        r = http_request("GET", weir.admin_url("/readyz"), "", {}, 500ms);
        return r.status == 503;
      },
      5s, 20ms));
  CHECK_FALSE(r.body.empty());
  CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);
  nats.start();
  CHECK(wait_until([&] { return http_request("GET", weir.admin_url("/readyz"), "", {}, 500ms).status == 200; }, 20s,
                   50ms));
}

// ---------------------------------------------------------------- the rough edges

namespace {

// A flow whose step fails on every event without a numeric `n`: each such event is
// dead-lettered by the flow stage at once.
std::string failing_flow(const std::string& name, const std::string& path, const std::string& sink_url) {
  return "flow: " + name + "\nfrom: { http: { path: " + path +
         " } }\nsteps:\n  - set: { n: number(this.n) }\nto:\n"
         "  out: { http: { url: \"" +
         sink_url + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } }\n";
}

json dlq_items(const HttpReply& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_array() ? j : json::array();
}

std::vector<std::string> ids_of(const json& items) {
  std::vector<std::string> out;
  for (const auto& d : items) out.push_back(d.value("id", ""));
  return out;
}

// The path inside `Link: </dlq?...>; rel="next"`, "" when there is none.
std::string next_link(const HttpReply& r) {
  std::string link = r.header("link");
  auto lt = link.find('<'), gt = link.find('>');
  if (lt == std::string::npos || gt == std::string::npos || !contains(link, "rel=\"next\"")) return "";
  return link.substr(lt + 1, gt - lt - 1);
}

double metric_value(const std::string& text, const std::string& name) {
  for (const auto& [n, lv] : parse_metrics(text)) {
    if (n == name) return lv.second;
  }
  return -1;
}

}  // namespace

TEST_CASE("dlq: a malformed replay filter is a 400 and replays nothing, GET /dlq pages, the CLI follows pages",
          "[integration][admin][dlq]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string token = "tok-dlq-3f9a";
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"bad.yaml", failing_flow("bad", "/in/bad", sink.url("/bad"))},
                              {"good.yaml", http_flow("good", "/in/good", sink.url("/good"))}},
                    .config = "admin: { token_env: MY_ADMIN_TOKEN }\n",
                    .env = {{"MY_ADMIN_TOKEN", token}}});
  weir.start();
  INFO(weir.describe());
  const std::vector<std::string> auth{"Authorization: Bearer " + token};

  constexpr int kDead = 7;
  std::vector<std::string> posted;
  for (int i = 0; i < kDead; ++i) {
    std::string id = "dead-" + std::to_string(i);
    REQUIRE(weir.post("/in/bad", json{{"n", "not a number"}}.dump(), {"Idempotency-Key: " + id}).status == 202);
    posted.push_back(id);
  }
  HttpReply all;
  REQUIRE(wait_until(
      [&] {
        all = weir.admin("GET", "/dlq", "", auth);
        return dlq_items(all).size() == kDead;
      },
      20s, 50ms));
  // Stream order is the order they died in: one flow stage, one at a time.
  CHECK(ids_of(dlq_items(all)) == posted);
  CHECK(all.header("x-more") == "false");
  CHECK(next_link(all).empty());
  std::vector<uint64_t> seqs;
  for (const auto& d : dlq_items(all)) seqs.push_back(d.value("seq", uint64_t{0}));

  SECTION("malformed replay filters are refused and nothing moves") {
    for (const std::string body :
         {R"({"flow": 5})", R"({"ids": []})", R"({"ids": "x"})", R"({"ids": [5]})", R"({"flows": "bad"})",
          R"({"flow": "bad", "id": "dead-1"})", R"([1])", R"({"flow": ""})", "not json"}) {
      auto r = weir.admin("POST", "/dlq/replay", body, auth);
      INFO(body << " → " << r.status << " " << r.body);
      CHECK(r.status == 400);
      CHECK(contains(r.body, "replay filter"));
    }
    auto after = weir.admin("GET", "/dlq", "", auth);
    std::vector<uint64_t> seqs_after;
    for (const auto& d : dlq_items(after)) seqs_after.push_back(d.value("seq", uint64_t{0}));
    CHECK(seqs_after == seqs);  // the same dead letters, none replayed (a replay makes a new seq)

    // A well-formed filter still works: one id goes back to the flow, dies again (new seq).
    auto one = weir.admin("POST", "/dlq/replay", json{{"ids", {"dead-3"}}}.dump(), auth);
    CHECK(one.status == 200);
    CHECK(json::parse(one.body).value("replayed", -1) == 1);
    CHECK(wait_until([&] { return ids_of(dlq_items(weir.admin("GET", "/dlq", "", auth))).back() == "dead-3"; }, 20s,
                     50ms));
  }

  SECTION("pages: limit, Link with after_seq, after=ID, whether more exist") {
    std::vector<std::string> seen;
    std::string path = "/dlq?limit=3";
    int pages = 0;
    for (; !path.empty() && pages < 10; ++pages) {
      auto r = weir.admin("GET", path, "", auth);
      REQUIRE(r.status == 200);
      auto items = dlq_items(r);
      CHECK(items.size() <= 3);
      for (const auto& id : ids_of(items)) seen.push_back(id);
      std::string next = next_link(r);
      CHECK(r.header("x-more") == (next.empty() ? "false" : "true"));
      if (!next.empty()) CHECK(r.header("x-next-after") == items.back().value("id", ""));
      path = next;
    }
    CHECK(pages == 3);  // 3 + 3 + 1
    CHECK(seen == posted);

    auto after = weir.admin("GET", "/dlq?after=dead-2&limit=2", "", auth);
    REQUIRE(after.status == 200);
    CHECK(ids_of(dlq_items(after)) == std::vector<std::string>{"dead-3", "dead-4"});
    CHECK(after.header("x-more") == "true");
    auto last = weir.admin("GET", "/dlq?after=dead-5", "", auth);
    CHECK(ids_of(dlq_items(last)) == std::vector<std::string>{"dead-6"});
    CHECK(last.header("x-more") == "false");
    CHECK(dlq_items(weir.admin("GET", "/dlq?flow=good", "", auth)).empty());
    CHECK(dlq_items(weir.admin("GET", "/dlq?flow=bad&limit=1000", "", auth)).size() == kDead);
    CHECK(weir.admin("GET", "/dlq?after=no-such-id", "", auth).status == 404);
    for (const std::string bad : {"/dlq?limit=0", "/dlq?limit=abc", "/dlq?limit=1001", "/dlq?after_seq=-1"}) {
      INFO(bad);
      CHECK(weir.admin("GET", bad, "", auth).status == 400);
    }
  }

  SECTION("the CLI: token from admin.token_env or --token-env, every page, any id, exit codes") {
    const std::string server = "http://127.0.0.1:" + std::to_string(weir.admin_port());
    const std::map<std::string, std::string> env{{"MY_ADMIN_TOKEN", token}};
    // The config names the token's variable; pages of 2 are followed to the end.
    auto list = run_cli({"dlq", "list", "--server", server, "--config", weir.config_path(), "--page-size", "2"}, env);
    INFO(list.output);
    REQUIRE(list.code == 0);
    auto listed = json::parse(list.output, nullptr, false);
    REQUIRE(listed.is_array());
    CHECK(ids_of(listed) == posted);
    // --token-env names another variable.
    auto other = run_cli({"dlq", "list", "--server", server, "--token-env", "OTHER_TOKEN"}, {{"OTHER_TOKEN", token}});
    CHECK(other.code == 0);
    // The last id, found across pages of 2.
    auto show = run_cli({"dlq", "show", "dead-6", "--server", server, "--token-env", "OTHER_TOKEN", "--page-size", "2"},
                        {{"OTHER_TOKEN", token}});
    INFO(show.output);
    CHECK(show.code == 0);
    CHECK(json::parse(show.output, nullptr, false).value("id", "") == "dead-6");
    CHECK(
        run_cli({"dlq", "show", "no-such", "--server", server, "--token-env", "OTHER_TOKEN"}, {{"OTHER_TOKEN", token}})
            .code == 1);
    // No token: 401, a usage error → 2; a named variable that is unset → 2.
    auto no_token = run_cli({"dlq", "list", "--server", server});
    CHECK(no_token.code == 2);
    CHECK(contains(no_token.output, "token"));
    auto unset = run_cli({"dlq", "list", "--server", server, "--token-env", "NOT_SET_ANYWHERE_12"});
    CHECK(unset.code == 2);
    CHECK(contains(unset.output, "NOT_SET_ANYWHERE_12"));
    // A malformed replay (no such flow is fine: 0 replayed) and an invalid flow: 422 → 2.
    weir::testing::TempDir files;
    weir::testing::write_file(files.file("good.yaml"),
                              "flow: good\nfrom: { http: { path: /in/good } }\n"
                              "steps:\n  - set: { x: number( }\nto: { out: { http: { url: \"" +
                                  sink.url("/good") + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } } }\n");
    auto invalid = run_cli({"deploy", files.file("good.yaml"), "--server", server, "--config", weir.config_path()},
                           env);
    INFO(invalid.output);
    CHECK(invalid.code == 2);
    CHECK(contains(invalid.output, "not valid"));
    // Standalone promote: 501 (not a usage error: 1) that says why.
    auto promote = run_cli({"promote", "good", "2", "--server", server, "--config", weir.config_path()}, env);
    CHECK(promote.code == 1);
    CHECK(contains(promote.output, "--cluster"));
    // Unreachable: 1.
    CHECK(run_cli({"status", "--server", "http://127.0.0.1:" + std::to_string(weir::testing::free_port())}).code == 1);
  }
}

// GET /dlq reads the dead-letter stream in batches (DeadLetters::list, Bus::read_stream),
// not one JetStream request per dead letter: the dashboard polls it every 5 s on the one
// admin worker. Counted on nats-server's own monitor: the messages it received while one
// page of 300 dead letters was listed.
TEST_CASE("dlq: GET /dlq lists and pages many dead letters in a few NATS requests", "[integration][admin][dlq]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"bad.yaml", failing_flow("bad", "/in/bad", sink.url("/bad"))},
                              {"good.yaml", http_flow("good", "/in/good", sink.url("/good"))}}});
  weir.start();
  INFO(weir.describe());
  constexpr int kDead = 300;
  std::vector<std::string> posted;
  for (int i = 0; i < kDead; ++i) {
    std::string id = "many-" + std::to_string(i);
    REQUIRE(weir.post("/in/bad", json{{"n", "not a number"}}.dump(), {"Idempotency-Key: " + id}).status == 202);
    posted.push_back(id);
  }
  HttpReply all;
  REQUIRE(wait_until(
      [&] {
        all = weir.admin("GET", "/dlq?limit=1000");
        return dlq_items(all).size() == kDead;
      },
      30s, 100ms));
  auto in_msgs = [&] {
    auto r = http_request("GET", "http://127.0.0.1:" + std::to_string(nats.monitor_port()) + "/varz");
    return json::parse(r.body, nullptr, false).value("in_msgs", int64_t{-1});
  };
  const int64_t before = in_msgs();
  all = weir.admin("GET", "/dlq?limit=1000");
  const int64_t after = in_msgs();
  WARN("GET /dlq?limit=1000 of " << kDead << " dead letters: nats-server received " << after - before
                                 << " messages meanwhile");
  REQUIRE(all.status == 200);
  CHECK(ids_of(dlq_items(all)) == posted);
  CHECK(all.header("x-more") == "false");
  REQUIRE(before >= 0);
  CHECK(after - before < kDead / 3);  // one request per dead letter would be 300 and more

  // Pages of 100 through the Link header: 3 pages, in order, the last without more.
  std::vector<std::string> seen;
  std::string path = "/dlq?limit=100";
  int pages = 0;
  for (; !path.empty() && pages < 10; ++pages) {
    auto r = weir.admin("GET", path);
    REQUIRE(r.status == 200);
    auto items = dlq_items(r);
    CHECK(items.size() == 100);
    for (const auto& id : ids_of(items)) seen.push_back(id);
    path = next_link(r);
    CHECK(r.header("x-more") == (path.empty() ? "false" : "true"));
  }
  CHECK(pages == 3);
  CHECK(seen == posted);
  // after=ID in the middle, a flow filter, an id filter.
  auto middle = weir.admin("GET", "/dlq?after=many-149&limit=100");
  REQUIRE(middle.status == 200);
  auto mid_ids = ids_of(dlq_items(middle));
  REQUIRE(mid_ids.size() == 100);
  CHECK(mid_ids.front() == "many-150");
  CHECK(mid_ids.back() == "many-249");
  CHECK(middle.header("x-more") == "true");
  CHECK(dlq_items(weir.admin("GET", "/dlq?flow=bad&limit=1000")).size() == kDead);
  CHECK(dlq_items(weir.admin("GET", "/dlq?flow=good")).empty());
  CHECK(ids_of(dlq_items(weir.admin("GET", "/dlq?id=many-277"))) == std::vector<std::string>{"many-277"});
  CHECK(weir.admin("GET", "/dlq?after=no-such-id").status == 404);
}

TEST_CASE("deploy: a flow with table files gets an answer that says why", "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"good.yaml", http_flow("good", "/in/good", sink.url("/good"))}}});
  weir.start();
  INFO(weir.describe());
  // (A new flow deployed standalone starts at once: tests/integration/deploy_test.cc.)
  std::string with_table =
      "flow: good\nfrom: { http: { path: /in/good } }\ntables:\n"
      "  tiers: { file: tiers.csv, key: id }\nsteps:\n"
      "  - lookup: { table: tiers, key: this.id, as: tier }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/good") + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } } }\n";
  // (from: and to: as the running version has them: a live deploy checks that first.)
  auto tables = weir.admin("PUT", "/flows/good", with_table);
  INFO(tables.body);
  CHECK(tables.status == 422);
  CHECK(contains(tables.body, "table files are not allowed"));
  CHECK(contains(tables.body, "rows"));
}

TEST_CASE("dlq retention: at dlq.max_bytes the stage holds the event (metric, /readyz), none is dropped",
          "[integration][admin][dlq]") {
  NatsServer nats;
  SinkProcess sink({"--status", "500"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"full.yaml", http_flow("full", "/in/full", sink.url("/full"),
                                                      "retries: 0, " WEIR_TEST_RETRY ", timeout: 2s")}},
                    .config = "dlq: { max_age: 0, max_bytes: 4KiB }\n"});
  weir.start();
  INFO(weir.describe());
  constexpr int kEvents = 12;
  std::set<std::string> ids;
  const std::string pad(700, 'p');
  for (int i = 0; i < kEvents; ++i) {
    std::string id = "held-" + std::to_string(i);
    REQUIRE(weir.post("/in/full", json{{"id", id}, {"pad", pad}}.dump()).status == 202);
    ids.insert(id);
  }
  // The stream takes a few, then refuses: the stage holds the rest.
  HttpReply ready;
  REQUIRE(wait_until(
      [&] {
        ready = http_request("GET", weir.admin_url("/readyz"));
        return ready.status == 503;
      },
      30s, 50ms));
  CHECK(contains(ready.body, "dead-letter"));
  auto m = weir.admin("GET", "/metrics");
  CHECK(metric_value(m.body, "weir_dlq_write_failures_total") > 0);
  CHECK(metric_value(m.body, "weir_dlq_holding") == 1);
  size_t stored = dlq_items(weir.admin("GET", "/dlq")).size();
  CHECK(stored > 0);
  CHECK(stored < kEvents);

  // The receiver recovers; what was dead-lettered is replayed, what was held is retried:
  // every event arrives.
  sink.control({{"status", 200}});
  CHECK(weir.admin("POST", "/dlq/replay", "{}").status == 200);
  bool all = wait_until(
      [&] {
        weir.admin("POST", "/dlq/replay", "{}");  // any that were dead-lettered meanwhile
        return missing(ids, sink.ids()).empty();
      },
      60s, 250ms);
  INFO("missing: " << missing(ids, sink.ids()).size());
  CHECK(all);
  CHECK(wait_until([&] { return http_request("GET", weir.admin_url("/readyz")).status == 200; }, 20s, 100ms));
}

TEST_CASE("shutdown: sink stages drain in parallel within drain_timeout, SIGTERM during start-up exits 0",
          "[integration][admin][drain]") {
  SECTION("four sinks with deliveries stuck in flight") {
    NatsServer nats;
    SinkProcess slow({"--delay-ms", "60000"});
    std::map<std::string, std::string> flows;
    for (std::string n : {"a", "b", "c", "d"}) {
      flows[n + ".yaml"] = http_flow(n, "/in/" + n, slow.url("/" + n), "retries: 8, " WEIR_TEST_RETRY ", timeout: 10s");
    }
    WeirProcess weir({.nats_url = nats.url(), .flows = flows, .config = "drain_timeout: 3s\n"});
    weir.start();
    INFO(weir.describe());
    for (std::string n : {"a", "b", "c", "d"}) {
      REQUIRE(weir.post("/in/" + n, json{{"id", "stuck-" + n}}.dump()).status == 202);
    }
    // Every sink stage has its delivery on the wire.
    REQUIRE(wait_until(
        [&] {
          auto samples = parse_metrics(weir.admin("GET", "/metrics").body);
          int busy = 0;
          for (const auto& [name, lv] : samples) {
            if (name == "weir_events_in_flight" && contains(lv.first, "stage=\"sink:out\"") && lv.second >= 1) ++busy;
          }
          return busy == 4;
        },
        20s, 50ms));
    auto t0 = std::chrono::steady_clock::now();
    auto code = weir.terminate(30s);
    auto took = std::chrono::steady_clock::now() - t0;
    CHECK(code == std::optional<int>(0));
    // drain_timeout (3 s) plus the HTTP sink's 1 s grace, and slack for a loaded machine;
    // one sink after another took at least 4 × 3 s.
    INFO("shutdown took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
    CHECK(took < 8s);
    // Nothing lost: the abandoned deliveries come back after a restart.
    slow.control({{"delay_ms", 0}});
    weir.start();
    std::set<std::string> want{"stuck-a", "stuck-b", "stuck-c", "stuck-d"};
    // (abandoned deliveries are nakked; were a nak lost, the sink AckWait: 1.5 s, ADR 0297)
    CHECK(wait_until([&] { return missing(want, slow.ids()).empty(); }, 40s, 100ms));
  }
  SECTION("SIGTERM while NATS cannot be reached yet") {
    int dead_port = weir::testing::free_port();
    WeirProcess weir({.nats_url = "nats://127.0.0.1:" + std::to_string(dead_port),
                      .flows = {{"a.yaml", http_flow("a", "/in/a", "http://127.0.0.1:9/a")}}});
    weir.spawn();
    // The admin listener is up first (/healthz) while weir keeps trying NATS.
    REQUIRE(wait_until([&] { return http_request("GET", weir.admin_url("/healthz"), "", {}, 500ms).status == 200; },
                       10s, 20ms));
    CHECK(http_request("GET", weir.admin_url("/readyz")).status == 503);
    auto code = weir.terminate(8s);
    INFO(weir.describe());
    CHECK(code == std::optional<int>(0));
    CHECK(contains(weir.log(), "during start-up"));
  }
}

TEST_CASE("dlq config: 0 and sizes/durations load, anything else is an exit-2 error naming the key",
          "[integration][admin][dlq]") {
  struct Case {
    std::string yaml;
    std::string field;  // "" = loads
  };
  for (const Case& c :
       {Case{"dlq: { max_age: 0, max_bytes: 0 }\n", ""}, Case{"dlq: { max_age: 7d }\n", "dlq.max_age"},
        Case{"dlq: { max_bytes: -5 }\n", "dlq.max_bytes"}, Case{"dlq: { max_bytes: lots }\n", "dlq.max_bytes"},
        Case{"dlq: { keep: forever }\n", "dlq.keep"}, Case{"dlq: { max_age: 1h, max_bytes: 64MiB }\n", ""}}) {
    INFO(c.yaml);
    weir::testing::TempDir dir;
    weir::testing::write_file(dir.file("weir.yaml"), c.yaml);
    weir::testing::write_file(dir.file("flows/a.yaml"), http_flow("a", "/in/a", "http://127.0.0.1:9/a"));
    // A wrong config ends `weir run` with 2 before anything starts; a good one gets as far
    // as the admin listener (NATS is not there: start-up waits for it) and stops on SIGTERM.
    const int admin_port = weir::testing::free_port();
    const std::string admin = "127.0.0.1:" + std::to_string(admin_port);
    auto p = weir::testing::Process::spawn(
        {weir_binary(), "run", "--config", dir.file("weir.yaml"), "--flows", dir.file("flows"), "--nats",
         "nats://127.0.0.1:" + std::to_string(weir::testing::free_port()), "--admin", admin, "--http", "127.0.0.1:0",
         "--data-dir", dir.file("data")},
        {}, dir.file("log"));
    if (c.field.empty()) {
      CHECK(wait_until([&] { return http_request("GET", "http://" + admin + "/healthz", "", {}, 500ms).status == 200; },
                       10s, 20ms));
      p.signal(SIGTERM);
      CHECK(p.wait_exit(10s) == std::optional<int>(0));
      CHECK_FALSE(contains(p.read_log(), "dlq."));
      continue;
    }
    auto code = p.wait_exit(30s);
    std::string log = p.read_log();
    INFO(log);
    {
      CHECK(code == std::optional<int>(2));
      CHECK(contains(log, c.field));
    }
  }
}
