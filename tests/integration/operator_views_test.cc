// Operator views that tell the truth about sinks (docs/operations.md "weir status",
// docs/adr/0313-sink-health-from-recent-results.md): a killed receiver shows as not healthy
// in `weir status` and /status within seconds, with its errors and dead letters; a
// retry-exhausted dead letter keeps its root cause and is logged once.
#include <catch2/catch.hpp>
#include <iostream>
#include <optional>
#include <sstream>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

// /status "sinks" entry of flow/sink; null when absent.
json sink_status(const WeirProcess& weir, const std::string& flow, const std::string& sink) {
  auto r = weir.admin("GET", "/status");
  if (r.status != 200) return nullptr;
  auto j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("sinks")) return nullptr;
  for (const auto& s : j["sinks"]) {
    if (s.value("flow", "") == flow && s.value("sink", "") == sink) return s;
  }
  return nullptr;
}

// The whitespace-separated words of the first line of `text` whose first two are `a` `b`.
std::vector<std::string> row(const std::string& text, const std::string& a, const std::string& b) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.size() >= 2 && w[0] == a && w[1] == b) return w;
  }
  return {};
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The log lines that contain every one of `needles`.
std::vector<std::string> log_lines(const std::string& log, const std::vector<std::string>& needles) {
  std::vector<std::string> out;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    bool all = true;
    for (const auto& n : needles) all = all && line.find(n) != std::string::npos;
    if (all) out.push_back(line);
  }
  return out;
}

}  // namespace

TEST_CASE("a killed receiver shows as not healthy in weir status and /status within seconds", "[integration][ops]") {
  NatsServer nats;
  std::optional<SinkProcess> sink(std::in_place);
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink->url("/out"), "retries: 0, timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());
  for (int i = 0; i < 3; ++i)
    REQUIRE(weir.post("/in/orders", json{{"id", "up-" + std::to_string(i)}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink->ids().size() == 3; }, 20s, 50ms));
  json up;  // weir counts a delivery once the receiver's answer is in: a moment after the receiver has it
  REQUIRE(wait_until(
      [&] {
        up = sink_status(weir, "orders", "out");
        return up.is_object() && up.value("delivered", 0) == 3;
      },
      5s, 20ms));
  CHECK(up.value("health", "") == "healthy");
  CHECK(up.value("state", "") == "closed");

  sink.reset();  // the receiver is gone: its port refuses connections
  const auto killed = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) {
    REQUIRE(weir.post("/in/orders", json{{"id", "down-" + std::to_string(i)}}.dump()).status == 202);
  }
  json down;
  const bool shown = wait_until(
      [&] {
        down = sink_status(weir, "orders", "out");
        return down.is_object() && down.value("health", "") != "healthy" && down.value("dead", 0) > 0;
      },
      5s, 50ms);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed)
                        .count();
  INFO("/status sink: " << down.dump());
  REQUIRE(shown);
  std::cout << "ops: killed receiver shown " << down.value("health", "") << " by /status after " << took << " ms\n";
  CHECK((down.value("health", "") == "failing" || down.value("health", "") == "down"));
  CHECK(down.value("errors", 0) > 0);
  CHECK(down["recent"].value("failed", 0) > 0);
  CHECK(down["last_error"].is_string());

  auto cli = run_cli({"status", "--server", weir.admin_url(""), "--interval-ms", "200"});
  INFO("weir status:\n" << cli.output);
  REQUIRE(cli.code == 0);
  std::cout << "ops: weir status with the receiver down:\n" << cli.output;
  const auto s = row(cli.output, "orders", "out");
  REQUIRE(s.size() >= 9);
  CHECK((s[2] == "failing" || s[2] == "down"));
  CHECK(std::stoi(s[7]) > 0);  // ERRORS
  CHECK(std::stoi(s[8]) > 0);  // DLQ: the sink's dead letters, no longer hidden
  const auto f = row(cli.output, "orders", "1");
  REQUIRE(f.size() >= 10);
  CHECK(std::stoi(f[9]) >= std::stoi(s[8]));                                 // the flow's DLQ adds its sinks'
  CHECK(cli.output.find("DLQ: events dead-lettered") != std::string::npos);  // what the columns count
}

TEST_CASE("a retry-exhausted dead letter keeps its root cause and is logged once", "[integration][ops]") {
  NatsServer nats;
  const int nobody = weir::testing::free_port();  // nothing listens: every attempt is refused
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml",
                               http_flow("orders", "/in/orders", "http://127.0.0.1:" + std::to_string(nobody) + "/out",
                                         "retries: 2, retry: {backoff: [100ms, 100ms]}, timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());
  const std::string marker = "body-never-logged-7f3a";
  REQUIRE(weir.post("/in/orders", json{{"note", marker}}.dump(), {"Idempotency-Key: lost-1"}).status == 202);
  json dead;
  REQUIRE(wait_until(
      [&] {
        auto r = weir.admin("GET", "/dlq?flow=orders");
        auto j = json::parse(r.body, nullptr, false);
        if (r.status != 200 || !j.is_array() || j.empty()) return false;
        dead = j[0];
        return true;
      },
      10s, 50ms));
  INFO("dead letter: " << dead.dump());
  CHECK(dead.value("id", "") == "lost-1");
  CHECK(dead.value("deliveries", 0) == 3);
  REQUIRE(dead["last_error"].is_string());
  const std::string cause = dead["last_error"].get<std::string>();
  CHECK(cause.find("refused") != std::string::npos);
  CHECK(dead.value("reason", "").find("gave up after 3 attempts (retries 2)") != std::string::npos);
  CHECK(dead.value("reason", "").find(cause) != std::string::npos);

  auto cli = run_cli({"dlq", "list", "--server", weir.admin_url("")});
  INFO("weir dlq list:\n" << cli.output);
  REQUIRE(cli.code == 0);
  auto listed = json::parse(cli.output, nullptr, false);
  REQUIRE(listed.is_array());
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].value("last_error", "") == cause);

  // One line, once the stream has it: flow, stage, id and reason; never the body.
  REQUIRE(wait_until([&] { return !log_lines(weir.log(), {"event dead-lettered", "id=lost-1"}).empty(); }, 5s, 50ms));
  // A second dead letter's line: written after the first one's, so a duplicate would be there too.
  REQUIRE(weir.post("/in/orders", "{}", {"Idempotency-Key: lost-2"}).status == 202);
  REQUIRE(wait_until([&] { return !log_lines(weir.log(), {"event dead-lettered", "id=lost-2"}).empty(); }, 10s, 50ms));
  const std::string log = weir.log();
  const auto lines = log_lines(log, {"event dead-lettered", "id=lost-1"});
  INFO(log);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("flow=orders") != std::string::npos);
  CHECK(lines[0].find("stage=sink:out") != std::string::npos);
  CHECK(lines[0].find("refused") != std::string::npos);
  CHECK(count_of(log, marker) == 0);
}

// docs/admin-api.md "Flows": a standalone deploy answers a version number a restart keeps.
TEST_CASE("a standalone deploy's version number survives a restart", "[integration][ops]") {
  NatsServer nats;
  SinkProcess sink;
  // orders is deployed, not in the options: a restart (spawn) leaves its file as deployed.
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"idle.yaml", http_flow("idle", "/in/idle", sink.url("/idle"))}}});
  weir.start();
  INFO(weir.describe());
  auto version_of = [](const HttpReply& r) { return json::parse(r.body, nullptr, false).value("version", -1); };
  const std::string head = "flow: orders\nfrom: { http: { path: \"/in/orders\" } }\n";
  const std::string to = "to: { out: { http: { url: \"" + sink.url("/out") + "\", timeout: 2s } } }\n";
  auto first = weir.admin("PUT", "/flows/orders", head + "steps: []\n" + to);
  INFO(first.body);
  REQUIRE(first.status == 201);
  CHECK(version_of(first) == 1);
  auto second = weir.admin("PUT", "/flows/orders", head + "steps:\n  - set: { seen: true }\n" + to);
  INFO(second.body);
  REQUIRE(second.status == 201);
  CHECK(version_of(second) == 2);

  REQUIRE(weir.terminate() == 0);
  weir.start();
  auto shown = json::parse(weir.admin("GET", "/flows/orders").body, nullptr, false);
  INFO(shown.dump());
  CHECK(shown.value("active_version", -1) == 2);
  REQUIRE(weir.post("/in/orders", json{{"id", "after-restart"}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("after-restart") == 1; }, 20s, 50ms));
  bool seen = false;  // version 2's step ran on it
  for (const auto& r : sink.requests(50)) {
    if (body_of(r).value("id", "") == "after-restart") seen = body_of(r).value("seen", false);
  }
  CHECK(seen);
  auto third = weir.admin("PUT", "/flows/orders",
                          head + "steps:\n  - set: { seen: true }\n  - set: { again: true }\n" + to);
  INFO(third.body);
  REQUIRE(third.status == 201);
  CHECK(version_of(third) == 3);
}

// ADR 0081, 0313: an event whose retry copy weir dies with max_deliver times is dead-lettered
// by the count, and the receiver's answer to its last attempt stays beside the count.
TEST_CASE("a dead letter past max_deliver keeps the last failure beside the count", "[integration][ops]") {
  NatsServer nats;
  SinkProcess sink({"--status", "500", "--record", "100"});
  WeirOptions options{.nats_url = nats.url(),
                      .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                          "retries: 50, " WEIR_TEST_RETRY ", timeout: 60s")}},
                      .config = "max_deliver: 2\n"};
  json dead;
  auto dead_letters = [&](const WeirProcess& w) {
    auto j = json::parse(w.admin("GET", "/dlq").body, nullptr, false);
    if (j.is_array() && !j.empty()) dead = j[0];
    return j.is_array() && !j.empty();
  };
  {
    WeirProcess weir(options);
    weir.start();
    INFO(weir.describe());
    REQUIRE(weir.post("/in/orders", "{}", {"Idempotency-Key: p0"}).status == 202);
    REQUIRE(wait_until([&] { return sink.requests(100).size() >= 1; }, 10s, 20ms));  // answered 500
    sink.control({{"status", 200}, {"delay_ms", 600000}});  // from now on the receiver holds each delivery
    REQUIRE(wait_until([&] { return sink.requests(100).size() >= 2; }, 10s, 20ms));  // the retry copy, held
    weir.kill9();
  }
  // Each start gets the copy again and dies with it, until one start dead-letters it unsent.
  for (int start = 0; start < 5 && dead.is_null(); ++start) {
    WeirProcess weir(options);
    weir.start();
    INFO(weir.describe());
    const size_t before = sink.requests(100).size();
    REQUIRE(wait_until([&] { return dead_letters(weir) || sink.requests(100).size() > before; }, 30s, 50ms));
    if (dead.is_null()) weir.kill9();
  }
  INFO("dead letter: " << dead.dump());
  REQUIRE(dead.is_object());
  const std::string reason = dead.value("reason", "");
  CHECK(reason.find("(max_deliver 2): dead-lettered before another attempt; last: HTTP 500") != std::string::npos);
  REQUIRE(dead["last_error"].is_string());
  CHECK(dead["last_error"].get<std::string>().find("HTTP 500") == 0);
  std::cout << "ops: past max_deliver: " << reason << "\n";
}
