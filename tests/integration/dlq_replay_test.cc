// Bulk replay of dead letters with a plan (docs/admin-api.md "POST /dlq/replay",
// docs/adr/0298-bulk-replay.md): the filters flow, sink, ids, since, until and reason, alone
// and together; a dry run counts what the real run then replays; malformed filters are a
// 400 naming what was wrong and move nothing; a replay stops at its flow's backlog bound
// and answers what remains; the CLI's `weir dlq replay` flags.
#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

// A flow whose step fails on a non-numeric "n" (a flow-stage dead letter) and that sends
// an event to sink `two` when its "to" says so, else to `one`, each at <base>/<flow>/<sink>
// (sink-stage dead letters where the receiver says 400).
std::string two_sink_flow(const std::string& name, const std::string& base, bool with_two) {
  std::string f = "flow: " + name + "\nfrom: { http: { path: /in/" + name +
                  " } }\n"
                  "steps:\n"
                  "  - set: { n: number(this.n) }\n";
  if (with_two) {
    f += "  - branch:\n"
         "      - when: this.to == 'two'\n"
         "        to: two\n"
         "      - to: one\n";
  }
  f += "to:\n  one: { http: { url: \"" + base + "/" + name +
       "/one\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } }\n";
  if (with_two)
    f += "  two: { http: { url: \"" + base + "/" + name + "/two\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } }\n";
  return f;
}

json dead_letters(const WeirProcess& weir) {
  auto r = weir.admin("GET", "/dlq?limit=1000");
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

// Posts {"id": id, "n": n, "to": to} with the id as the event id; REQUIREs the 202.
void post(const WeirProcess& weir, const std::string& flow, const std::string& id, const json& n,
          const std::string& to = "one") {
  auto r = weir.post("/in/" + flow, json{{"id", id}, {"n", n}, {"to", to}}.dump(), {"Idempotency-Key: " + id});
  REQUIRE(r.status == 202);
}

json replay(const WeirProcess& weir, const json& body) {
  auto r = weir.admin("POST", "/dlq/replay", body.dump());
  INFO(body.dump() << " → " << r.status << " " << r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

int64_t would_replay(const WeirProcess& weir, json body) {
  body["dry_run"] = true;
  json j = replay(weir, body);
  CHECK(j.value("dry_run", false));
  return j.value("would_replay", int64_t{-1});
}

std::vector<uint64_t> seqs(const json& items) {
  std::vector<uint64_t> out;
  for (const auto& d : items) out.push_back(d.value("seq", uint64_t{0}));
  return out;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string rfc3339(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms % 1000));
  return out;
}

}  // namespace

TEST_CASE("POST /dlq/replay filters by flow, sink, ids, since, until and reason, and a dry run counts the real run",
          "[integration][dlq][replay]") {
  NatsServer nats;
  SinkProcess sink({"--status", "400"});  // 400: not retryable, each delivery dies at once
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"a.yaml", two_sink_flow("a", sink.url(""), true)},
                              {"b.yaml", two_sink_flow("b", sink.url(""), false)}}});
  weir.start();
  INFO(weir.describe());

  // Early: a1 dies at a's sink one, a2 at a's sink two, b1 at b's sink one.
  post(weir, "a", "a1", 1);
  post(weir, "a", "a2", 2, "two");
  post(weir, "b", "b1", 1);
  json dead;
  REQUIRE(wait_until(
      [&] {
        dead = dead_letters(weir);
        return dead.size() >= 3;
      },
      30s, 50ms));
  REQUIRE(dead.size() == 3);
  int64_t first_at = INT64_MAX, split = 0;
  for (const auto& d : dead) {
    first_at = std::min(first_at, d.at("at").get<int64_t>());
    split = std::max(split, d.at("at").get<int64_t>() + 1);
  }
  // Late (every one after `split`): a3 and b2 fail in the flow's step, b3 dies at b's sink.
  // weir and the test share the machine's clock: what is posted from now on dies after `split`.
  REQUIRE(wait_until([&] { return now_ms() >= split; }, 1s, 1ms));
  post(weir, "a", "a3", "not a number");
  post(weir, "b", "b2", "not a number");
  post(weir, "b", "b3", 3);
  REQUIRE(wait_until(
      [&] {
        dead = dead_letters(weir);
        return dead.size() >= 6;
      },
      30s, 50ms));
  REQUIRE(dead.size() == 6);
  std::string flow_reason;
  for (const auto& d : dead) {
    INFO(d.dump());
    if (d.value("stage", "") == "flow") flow_reason = d.value("reason", "");
    else CHECK(d.value("reason", "").find("400") != std::string::npos);
    if (d.value("id", "") == "a3" || d.value("id", "") == "b2" || d.value("id", "") == "b3") {
      CHECK(d.at("at").get<int64_t>() >= split);
    } else {
      CHECK(d.at("at").get<int64_t>() < split);
    }
  }
  REQUIRE_FALSE(flow_reason.empty());
  CHECK(flow_reason.find("400") == std::string::npos);
  const std::vector<uint64_t> before = seqs(dead);

  SECTION("each filter alone and combined, counted by dry runs that change nothing") {
    // Everything, with the breakdown per flow and stage.
    json all = replay(weir, {{"dry_run", true}});
    CHECK(all.value("would_replay", -1) == 6);
    CHECK(all.at("flows") ==
          json{{"a", {{"flow", 1}, {"sink:one", 1}, {"sink:two", 1}}}, {"b", {{"flow", 1}, {"sink:one", 2}}}});
    CHECK(would_replay(weir, {{"flow", "a"}}) == 3);
    CHECK(would_replay(weir, {{"flow", "c"}}) == 0);
    CHECK(would_replay(weir, {{"sink", "one"}}) == 3);  // a sink name in every flow: a1, b1, b3
    CHECK(would_replay(weir, {{"sink", "two"}}) == 1);
    CHECK(would_replay(weir, {{"sink", "flow"}}) == 0);  // a sink's name, never a stage
    CHECK(would_replay(weir, {{"ids", {"a1"}}}) == 1);
    CHECK(would_replay(weir, {{"ids", {"a1", "b2", "nope"}}}) == 2);
    CHECK(would_replay(weir, {{"since", rfc3339(split)}}) == 3);
    CHECK(would_replay(weir, {{"until", rfc3339(split)}}) == 3);
    CHECK(would_replay(weir, {{"since", split}}) == 3);  // epoch milliseconds, as `at`
    CHECK(would_replay(weir, {{"since", first_at}, {"until", split}}) == 3);
    CHECK(would_replay(weir, {{"until", first_at}}) == 0);  // until is exclusive
    CHECK(would_replay(weir, {{"since", first_at}}) == 6);  // since is inclusive
    CHECK(would_replay(weir, {{"reason", "400"}}) == 4);
    // A flow-stage reason names the flow, version, step and expression: a part common to
    // a's and b's matches both, the whole text of one matches that one.
    CHECK(would_replay(weir, {{"reason", "step 0 (set n) expression"}}) == 2);
    CHECK(would_replay(weir, {{"reason", flow_reason}}) == 1);
    // Case-sensitive: the same text in other case matches nothing (when it has letters).
    std::string flipped = flow_reason;
    bool letters = false;
    for (char& c : flipped) {
      if (std::isalpha(static_cast<unsigned char>(c))) {
        letters = true;
        c = std::islower(static_cast<unsigned char>(c)) ? static_cast<char>(std::toupper(c))
                                                        : static_cast<char>(std::tolower(c));
      }
    }
    if (letters) CHECK(would_replay(weir, {{"reason", flipped}}) == 0);
    // Together: every filter must match.
    CHECK(would_replay(weir, {{"flow", "b"}, {"sink", "one"}}) == 2);
    CHECK(would_replay(weir, {{"flow", "a"}, {"sink", "one"}, {"since", rfc3339(split)}}) == 0);
    CHECK(would_replay(weir, {{"flow", "b"}, {"reason", "400"}, {"since", rfc3339(split)}}) == 1);
    CHECK(would_replay(weir, {{"sink", "one"}, {"until", split}, {"ids", {"a1", "b1", "b3"}}}) == 2);
    CHECK(would_replay(weir, {{"reason", "400"}, {"flow", "a"}, {"dry_run", true}}) == 2);
    CHECK(seqs(dead_letters(weir)) == before);  // nothing moved
    CHECK(sink.stat("unique") == 0);
  }

  SECTION("the real run replays what the dry run counted, into the stage each died in") {
    sink.reset();
    sink.control({{"status", 204}});
    // b's sink dead letters: b1 and b3, not b2 (its flow step fails).
    const json b_sink = {{"flow", "b"}, {"reason", "400"}};
    CHECK(would_replay(weir, b_sink) == 2);
    json r = replay(weir, b_sink);
    CHECK(r == json{{"replayed", 2}, {"remaining", 0}});
    CHECK(wait_until([&] { return sink.ids() == std::set<std::string>{"b1", "b3"}; }, 20s, 50ms));
    CHECK(dead_letters(weir).size() == 4);

    // Sink "two" only: a2 arrives at /a/two and nothing at /a/one.
    CHECK(would_replay(weir, {{"sink", "two"}}) == 1);
    CHECK(replay(weir, {{"sink", "two"}}).value("replayed", -1) == 1);
    CHECK(wait_until([&] { return sink.stat("unique") == 3; }, 20s, 50ms));
    json by_path = sink.stats().at("by_path");
    INFO(by_path.dump());
    CHECK(by_path.value("/a/two", 0) == 1);
    CHECK(by_path.value("/a/one", 0) == 0);

    // A time window: the early one left is a1 at a's sink one.
    const json early = {{"until", rfc3339(split)}};
    CHECK(would_replay(weir, early) == 1);
    CHECK(replay(weir, early).value("replayed", -1) == 1);
    CHECK(wait_until([&] { return sink.stats().at("by_path").value("/a/one", 0) == 1; }, 20s, 50ms));

    // Left: the two flow-stage dead letters. Replayed into the flow's input they fail the
    // same step again: two new dead letters, nothing delivered.
    json left = dead_letters(weir);
    CHECK(left.size() == 2);
    for (const auto& d : left) CHECK(d.value("stage", "") == "flow");
    CHECK(would_replay(weir, json::object()) == 2);
    CHECK(replay(weir, json::object()).value("replayed", -1) == 2);
    CHECK(wait_until(
        [&] {
          json again = dead_letters(weir);
          return again.size() == 2 && seqs(again) != seqs(left);
        },
        20s, 50ms));
    // Each sink dead letter was delivered once, at the sink it died at.
    CHECK(sink.stats().at("by_path") == json{{"/a/one", 1}, {"/a/two", 1}, {"/b/one", 2}});
    CHECK(sink.stat("unique") == 4);
    CHECK(sink.stat("duplicates") == 0);
  }

  SECTION("malformed filters are a 400 naming what was wrong, and nothing moves") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"since": "yesterday"})", "since"},
        {R"({"since": ""})", "since must be an RFC 3339 timestamp"},
        {R"({"until": "2026-13-01T00:00:00Z"})", "month out of range"},
        {R"({"until": "2026-01-01T00:00:00"})", "time zone"},
        {R"({"until": -5})", "until must be"},
        {R"({"since": 1.5})", "since must be"},
        {R"({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"})", "since must be before until"},
        {R"({"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"})", "since must be before until"},
        {R"({"reason": ""})", "reason must be"},
        {R"({"reason": 400})", "reason must be"},
        {R"({"sink": ""})", "sink must be"},
        {R"({"sink": ["one"]})", "sink must be"},
        {R"({"flow": null})", "flow must be"},
        {R"({"dry_run": "yes"})", "dry_run must be true or false"},
        {R"({"ids": []})", "ids must name at least one"},
        {R"({"sink": "one", "stage": "sink:one"})", "unknown key \"stage\""},
        {R"({"dryrun": true})", "unknown key \"dryrun\""},
        {R"([{"flow": "a"}])", "JSON object"},
        {"{\"flow\": \"a\"", "JSON object"},
    };
    for (const auto& [body, says] : cases) {
      auto r = weir.admin("POST", "/dlq/replay", body);
      INFO(body << " → " << r.status << " " << r.body);
      CHECK(r.status == 400);
      const std::string error = json::parse(r.body).value("error", "");
      CHECK(error.find("malformed replay filter: ") == 0);
      CHECK(error.find(says) != std::string::npos);
    }
    CHECK(seqs(dead_letters(weir)) == before);
    CHECK(sink.stat("unique") == 0);
  }

  SECTION("weir dlq replay: flags become the filter, --dry-run counts, bad input exits 2") {
    sink.reset();
    sink.control({{"status", 204}});
    const std::string server = "http://127.0.0.1:" + std::to_string(weir.admin_port());
    auto dry = run_cli({"dlq", "replay", "--server", server, "--sink", "one", "--until", rfc3339(split), "--dry-run"});
    INFO(dry.output);
    CHECK(dry.code == 0);
    CHECK(dry.output.find("\"would_replay\": 2") != std::string::npos);  // a1, b1
    auto bad = run_cli({"dlq", "replay", "--server", server, "--since", "last tuesday"});
    INFO(bad.output);
    CHECK(bad.code == 2);
    CHECK(bad.output.find("since") != std::string::npos);
    auto empty = run_cli({"dlq", "replay", "--server", server, "--reason", ""});
    CHECK(empty.code == 2);  // an empty filter is refused, never "everything"
    CHECK(run_cli({"dlq", "list", "--server", server, "--dry-run"}).code == 2);
    CHECK(seqs(dead_letters(weir)) == before);

    auto ids = run_cli({"dlq", "replay", "--server", server, "a1", "b1"});
    INFO(ids.output);
    CHECK(ids.code == 0);
    CHECK(ids.output.find("\"replayed\": 2") != std::string::npos);
    CHECK(wait_until([&] { return sink.ids() == std::set<std::string>{"a1", "b1"}; }, 20s, 50ms));
    auto mixed = run_cli(
        {"dlq", "replay", "--server", server, "--flow", "b", "--sink", "one", "--since", std::to_string(split)});
    INFO(mixed.output);
    CHECK(mixed.code == 0);
    CHECK(mixed.output.find("\"replayed\": 1") != std::string::npos);  // b3
    CHECK(wait_until([&] { return sink.ids().count("b3") == 1; }, 20s, 50ms));
    // Without filters: all the rest, as before.
    auto rest = run_cli({"dlq", "replay", "--server", server});
    INFO(rest.output);
    CHECK(rest.code == 0);
    CHECK(rest.output.find("\"replayed\": 3") != std::string::npos);  // a2, a3, b2
    CHECK(wait_until([&] { return sink.ids().count("a2") == 1; }, 20s, 50ms));
  }
}

TEST_CASE("a replay stops at its flow's backlog bound, answers what remains, and a repeat replays the rest",
          "[integration][dlq][replay][backpressure]") {
  NatsServer nats;
  SinkProcess sink({"--status", "400"});
  // 4 stream messages at most in a flow's backlog (ADR 0080).
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"c.yaml", http_flow("c", "/in/c", sink.url("/c"))}},
                    .config = "backlog: { max_events: 4 }\n"});
  weir.start();
  INFO(weir.describe());
  constexpr int kDead = 10;
  std::set<std::string> posted;
  for (int i = 0; i < kDead; ++i) {
    const std::string id = "c" + std::to_string(i);
    // The bound holds for ingress too: a 503 is tried again, as a sender would.
    REQUIRE(wait_until(
        [&] {
          return weir.post("/in/c", json{{"id", id}, {"n", i}}.dump(), {"Idempotency-Key: " + id}).status == 202;
        },
        20s, 50ms));
    posted.insert(id);
    REQUIRE(wait_until([&] { return dead_letters(weir).size() == posted.size(); }, 20s, 20ms));
  }
  // 503: retried, so what is replayed stays in the flow's stream (its backlog).
  sink.control({{"status", 503}});
  CHECK(would_replay(weir, json::object()) == kDead);
  json first = replay(weir, json::object());
  INFO(first.dump());
  // At most 4 (fewer while the last dead letter's own message is still being acked).
  const int64_t taken = first.value("replayed", int64_t{-1});
  CHECK(taken >= 1);
  CHECK(taken <= 4);
  CHECK(first.value("remaining", -1) == kDead - taken);
  CHECK(first.at("held").at("c").get<std::string>().find("flow backlog full (4 events") != std::string::npos);
  CHECK(dead_letters(weir).size() == static_cast<size_t>(kDead - taken));
  // Still full (the receiver refuses): at most what the stream had not yet taken goes in.
  json again = replay(weir, json::object());
  INFO(again.dump());
  CHECK(again.value("replayed", int64_t{-1}) <= 4 - taken);
  CHECK(again.value("remaining", int64_t{-1}) == kDead - taken - again.value("replayed", int64_t{0}));
  CHECK(again.value("remaining", -1) > 0);

  // The receiver recovers; the backlog drains; repeating the call replays the rest.
  sink.control({{"status", 204}});
  int64_t replayed = taken + again.value("replayed", int64_t{0});
  CHECK(wait_until(
      [&] {
        json r = replay(weir, json::object());
        replayed += r.value("replayed", int64_t{0});
        return r.value("remaining", -1) == 0 && dead_letters(weir).empty();
      },
      60s, 200ms));
  CHECK(replayed == kDead);
  CHECK(wait_until([&] { return missing(posted, sink.ids()).empty(); }, 60s, 100ms));
  CHECK(sink.stat("duplicates") == 0);
}
