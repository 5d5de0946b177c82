// A failing sink — retries keep the Idempotency-Key and deliver everything; a rejecting
// sink dead-letters with the reason and /dlq/replay brings the events back
// (docs/connectors.md, the http sink; docs/admin-api.md, Dead letters).
#include <catch2/catch.hpp>
#include <iostream>
#include <map>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {
int64_t ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

// A receiver failing 40 % of requests at random: failures in a row are short, so the sink
// stays closed (ADR 0294) and each failed event is retried on its schedule (ADR 0295).
TEST_CASE("a sink answering 503 to 40 % of requests still gets everything, same keys", "[integration][sink]") {
  NatsServer nats;
  // At most 3 refusals per event: its retries then take at most 0.2 + 0.4 + 0.8 s, and a
  // circuit opened by 5 refusals in a row closes within three probes (1 + 2 + 4 s), so the
  // wait below has a bound. Unbounded, 40 % refuses one of 200 events 8 times in a row in
  // about one run of eight, and its 9th attempt is due 51 s after its first.
  SinkProcess sink({"--fail-percent", "40", "--fail-at-most", "3", "--fail-status", "503", "--record", "5000"});
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                           "retries: 12, " WEIR_TEST_RETRY ", timeout: 2s, max_connections: 8")}}});
  weir.start();
  INFO(weir.describe());

  constexpr int kEvents = 200;
  std::set<std::string> acked;
  for (int i = 0; i < kEvents; ++i) {
    std::string id = "e" + std::to_string(i);
    auto r = weir.post("/in/orders", json{{"id", id}, {"n", i}}.dump());
    REQUIRE(r.status == 202);
    acked.insert(id);
  }
  std::vector<std::string> lost;
  bool all = wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        return lost.empty();
      },
      45s, 100ms);
  json stats = sink.stats();
  INFO("sink stats: " << stats.dump());
  CHECK(all);
  CHECK(lost.empty());
  const int64_t rejected = stats.value("random_failures", int64_t{0});
  CHECK(rejected > 0);
  CHECK(stats.value("unique", 0) == kEvents);
  CHECK(stats.at("resends_with_other_key").get<int64_t>() == 0);  // at(): a missing key fails
  // weir-sink counts re-sends among accepted deliveries only; the rejected attempts are
  // in its request log: every attempt at an event carries that event's one key.
  json attempts = sink.requests(5000);
  REQUIRE(static_cast<int64_t>(attempts.size()) == rejected + kEvents);  // nothing else
  std::map<std::string, std::set<std::string>> keys_by_id;
  std::map<std::string, int> attempts_by_id;
  for (const auto& a : attempts) {
    std::string id = body_of(a).value("id", "");
    keys_by_id[id].insert(header_of(a, "Idempotency-Key"));
    ++attempts_by_id[id];
  }
  CHECK(keys_by_id.size() == kEvents);
  int resent = 0;
  for (const auto& [id, keys] : keys_by_id) {
    INFO("event " << id);
    CHECK(keys.size() == 1);
    CHECK_FALSE(keys.begin()->empty());
    if (attempts_by_id[id] > 1) ++resent;
  }
  CHECK(resent > 0);
  std::cout << "sink 503 at 40 %: " << rejected << " refused, " << resent << " of " << kEvents
            << " events re-sent, all with their first key\n";
  // Retried, not dead-lettered.
  auto dlq = weir.admin("GET", "/dlq");
  REQUIRE(dlq.status == 200);
  CHECK(json::parse(dlq.body).empty());
}

TEST_CASE("a sink answering 400 dead-letters with the reason, replay delivers once it accepts",
          "[integration][sink][dlq]") {
  NatsServer nats;
  SinkProcess sink({"--status", "400"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());

  constexpr int kEvents = 20;
  std::map<std::string, json> posted;          // body id → event
  std::map<std::string, std::string> weir_id;  // body id → event id from the 202
  for (int i = 0; i < kEvents; ++i) {
    std::string id = "dead-" + std::to_string(i);
    json event = {{"id", id}, {"n", i}, {"kind", "rejected-by-sink"}};
    auto r = weir.post("/in/orders", event.dump());
    REQUIRE(r.status == 202);
    posted[id] = event;
    weir_id[id] = id_from_reply(r);
  }

  json dead;
  bool all_dead = wait_until(
      [&] {
        auto r = weir.admin("GET", "/dlq");
        if (r.status != 200) return false;
        dead = json::parse(r.body);
        return dead.is_array() && dead.size() >= kEvents;
      },
      30s, 100ms);
  INFO("dlq: " << dead.dump().substr(0, 2000));
  REQUIRE(all_dead);
  CHECK(dead.size() == kEvents);
  // A 400 is not retried: each event was sent once (any 4xx but 408 and 429 dead-letters at once).
  CHECK(sink.stat("rejected") == kEvents);
  CHECK(sink.stat("received") == 0);

  std::set<std::string> dead_event_ids;
  for (const auto& d : dead) {
    CHECK(d.value("flow", "") == "orders");
    CHECK_FALSE(d.value("stage", "").empty());
    CHECK(d.contains("version"));
    CHECK(d.contains("at"));
    std::string reason = d.value("reason", "");
    CHECK_FALSE(reason.empty());
    CHECK(reason.find("400") != std::string::npos);
    REQUIRE(d.contains("deliveries"));
    CHECK(d["deliveries"].is_number_integer());
    CHECK(d["deliveries"].get<int64_t>() >= 1);
    CHECK(d.contains("id"));
    REQUIRE(d.contains("event"));
    json event = d["event"].is_string() ? json::parse(d["event"].get<std::string>()) : d["event"];
    // The dead letter carries the event itself; find which one by its body.
    bool known = false;
    for (const auto& [id, body] : posted) {
      if (body == event) {
        known = true;
        dead_event_ids.insert(id);
      }
    }
    CHECK(known);
  }
  CHECK(dead_event_ids.size() == kEvents);

  sink.reset();
  sink.control({{"status", 204}, {"fail_first", 0}});
  const auto replay_at = std::chrono::steady_clock::now();
  auto replay = weir.admin("POST", "/dlq/replay", "{}");
  INFO("replay: " << replay.status << " " << replay.body);
  CHECK(replay.status / 100 == 2);

  std::set<std::string> ids;
  for (const auto& [id, body] : posted) ids.insert(id);
  std::vector<std::string> lost;
  bool delivered = wait_until(
      [&] {
        lost = missing(ids, sink.ids());
        return lost.empty();
      },
      30s, 100ms);
  CHECK(delivered);
  CHECK(lost.empty());
  CHECK(sink.stat("unique") == kEvents);
  // Replayed events keep their event id: the same Idempotency-Key as the first attempt.
  for (const auto& req : sink.requests(1000)) {
    std::string id = body_of(req).value("id", "");
    INFO("replayed " << id);
    REQUIRE(weir_id.count(id) == 1);
    CHECK(header_of(req, "Idempotency-Key") == weir_id[id]);
  }

  bool empty = wait_until(
      [&] {
        auto r = weir.admin("GET", "/dlq");
        return r.status == 200 && json::parse(r.body).empty();
      },
      15s, 100ms);
  CHECK(empty);
  // Replay delivers once: no second copy shows up.
  CHECK(sink.stat("duplicates") == 0);
  std::cout << "sink 400: " << dead.size() << " of " << kEvents << " dead-lettered, " << sink.stat("unique")
            << " delivered by the replay in " << ms_since(replay_at) << " ms (DLQ empty by then), lost " << lost.size()
            << ", duplicates " << sink.stat("duplicates") << "\n";
}

namespace {

// Posts n events {"id": prefix<i>} to path; returns body id → event id from the 202.
std::map<std::string, std::string> post_events(const WeirProcess& weir, const std::string& path,
                                               const std::string& prefix, int n) {
  std::map<std::string, std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string id = prefix + std::to_string(i);
    auto r = weir.post(path, json{{"id", id}, {"n", i}}.dump());
    REQUIRE(r.status == 202);
    out[id] = id_from_reply(r);
  }
  return out;
}

std::set<std::string> keys(const std::map<std::string, std::string>& m) {
  std::set<std::string> out;
  for (const auto& [k, v] : m) out.insert(k);
  return out;
}

json dlq(const WeirProcess& weir) {
  auto r = weir.admin("GET", "/dlq");
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

// Attempts per body id in the sink's request log, in arrival order.
std::map<std::string, std::vector<json>> attempts_by_id(const SinkProcess& sink) {
  std::map<std::string, std::vector<json>> out;
  for (const auto& a : sink.requests(1000)) out[body_of(a).value("id", "")].push_back(a);
  return out;
}

}  // namespace

// `retries: N` caps an event's attempts (ADR 0295). One event: its three failures in a
// row stay under the five that would open the sink (ADR 0294).
TEST_CASE("past the sink's retries an event is dead-lettered with the status and delivery count",
          "[integration][sink][dlq]") {
  NatsServer nats;
  SinkProcess sink({"--status", "503", "--record", "100"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 2, " WEIR_TEST_RETRY ", timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());
  auto posted = post_events(weir, "/in/orders", "x", 1);

  json dead;
  REQUIRE(wait_until(
      [&] {
        dead = dlq(weir);
        return !dead.empty();
      },
      30s, 100ms));
  INFO("dlq: " << dead.dump().substr(0, 1500));
  CHECK(dead.size() == 1);
  for (const auto& d : dead) {
    CHECK(d.value("flow", "") == "orders");
    CHECK(d.value("reason", "").find("503") != std::string::npos);
    CHECK(d.value("reason", "").find("gave up after 3 attempts (retries 2)") != std::string::npos);
    // retries: 2 → the first attempt and two retries.
    CHECK(d.value("deliveries", 0) == 3);
  }
  CHECK(sink.stat("rejected") == 3);
  for (const auto& [id, attempts] : attempts_by_id(sink)) {
    INFO("event " << id);
    CHECK(attempts.size() == 3);
    for (const auto& a : attempts) CHECK(header_of(a, "Idempotency-Key") == posted[id]);
  }
}

TEST_CASE("429 honours Retry-After and 408 is retried, neither dead-letters", "[integration][sink]") {
  NatsServer nats;
  SECTION("429 with Retry-After: 2") {
    SinkProcess sink({"--fail-first", "3", "--fail-status", "429", "--retry-after", "2"});
    WeirProcess weir({.nats_url = nats.url(),
                      .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                          "retries: 5, " WEIR_TEST_RETRY ", timeout: 2s")}}});
    weir.start();
    INFO(weir.describe());
    auto posted = post_events(weir, "/in/orders", "r", 3);
    REQUIRE(wait_until([&] { return missing(keys(posted), sink.ids()).empty(); }, 30s, 100ms));
    CHECK(sink.stat("rejected") == 3);
    CHECK(dlq(weir).empty());
    // A 429 with Retry-After pauses the whole sink (ADR 0294): after the first one, no
    // request (of any event) for 2 s but those already on the wire with it.
    json all = sink.requests(1000);
    REQUIRE(!all.empty());
    CHECK(all[0].value("status", 0) == 429);
    const int64_t first_429 = all[0].value("arrival_us", int64_t{0});
    for (const auto& a : all) {
      const int64_t after = a.value("arrival_us", int64_t{0}) - first_429;
      INFO("a request " << after / 1000 << " ms after the first 429");
      CHECK((after < 100000 || after >= 1900000));  // not before Retry-After, give or take a clock tick
    }
    for (const auto& [id, attempts] : attempts_by_id(sink)) {
      INFO("event " << id);
      for (const auto& a : attempts) CHECK(header_of(a, "Idempotency-Key") == posted[id]);
    }
  }
  SECTION("408") {
    SinkProcess sink({"--fail-first", "5", "--fail-status", "408"});
    WeirProcess weir({.nats_url = nats.url(),
                      .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                          "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}}});
    weir.start();
    INFO(weir.describe());
    auto posted = post_events(weir, "/in/orders", "t", 5);
    REQUIRE(wait_until([&] { return missing(keys(posted), sink.ids()).empty(); }, 30s, 100ms));
    CHECK(sink.stat("rejected") == 5);
    CHECK(dlq(weir).empty());
  }
}

TEST_CASE("a sink slower than the timeout is retried with the same key", "[integration][sink]") {
  NatsServer nats;
  SinkProcess sink({"--delay-ms", "1500"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 20, " WEIR_TEST_RETRY ", timeout: 300ms")}}});
  weir.start();
  INFO(weir.describe());
  auto posted = post_events(weir, "/in/orders", "s", 5);
  // The sink counts a late answer as received: the timed-out attempt and its re-send
  // both arrive, and the re-send must carry the same key. Five timeouts in a row open the
  // sink (ADR 0294): the re-sends are its probes, one at a time.
  REQUIRE(wait_until([&] { return sink.stat("resends_with_same_key") >= 1; }, 30s, 100ms));
  sink.control({{"delay_ms", 0}});
  const auto fast_at = std::chrono::steady_clock::now();
  // The next probe finds it fast (the probe interval doubles: at most ~20 s here).
  CHECK(wait_until([&] { return missing(keys(posted), sink.ids()).empty(); }, 60s, 100ms));
  const int64_t recovered_ms = ms_since(fast_at);
  CHECK(sink.stat("resends_with_other_key") == 0);
  CHECK(wait_until([&] { return dlq(weir).empty(); }, 5s, 100ms));
  std::cout << "sink slower than timeout: " << posted.size() << " events, lost "
            << missing(keys(posted), sink.ids()).size() << ", duplicates " << sink.stat("duplicates") << " (same key "
            << sink.stat("resends_with_same_key") << ", other key " << sink.stat("resends_with_other_key")
            << "), all delivered " << recovered_ms << " ms after the sink answered in time\n";
}

// A sink consumer's AckWait is 1.5 s (kSinkAckWait, docs/adr/0297-two-second-failover.md);
// deliveries the stage holds longer are kept alive with in-progress acks
// (docs/adr/0293-in-progress-acks.md). Two events, one connection, a receiver that takes
// 6 s: the second waits 6 s in the stage, then takes 6 s. Without the in-progress acks
// JetStream redelivers both after AckWait and the receiver gets them twice.
TEST_CASE("a delivery held longer than the sink's AckWait is kept alive, not sent twice", "[integration][sink]") {
  NatsServer nats;
  SinkProcess sink({"--delay-ms", "6000"});
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                           "retries: 2, " WEIR_TEST_RETRY ", timeout: 10s, max_connections: 1")}}});
  weir.start();
  INFO(weir.describe());
  const auto t0 = std::chrono::steady_clock::now();
  auto posted = post_events(weir, "/in/orders", "held", 2);
  // Both answered (the second ~12 s in): a redelivery of the second, due at ~1.5 s, would
  // have been sent by then, right after it.
  CHECK(wait_until([&] { return stage_counter(weir, "weir_events_acked_total", "sink:out") == 2; }, 30s, 100ms));
  const int64_t took_ms = ms_since(t0);
  CHECK(wait_until([&] { return sink.stat("duplicates") > 0; }, 2s, 100ms) == false);
  std::cout << "held past AckWait: 2 events delivered in " << took_ms << " ms, duplicates " << sink.stat("duplicates")
            << "\n";
  CHECK(sink.stat("duplicates") == 0);
  CHECK(dlq(weir).empty());
}

TEST_CASE("a sink that resets connections, then is down, then comes up gets every event", "[integration][sink]") {
  NatsServer nats;
  int port = weir::testing::free_port();
  weir::testing::ResettingListener broken(port);
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"orders.yaml", http_flow("orders", "/in/orders", "http://127.0.0.1:" + std::to_string(port) + "/out",
                                           "retries: 100, " WEIR_TEST_RETRY ", timeout: 1s")}}});
  weir.start();
  INFO(weir.describe());
  std::map<std::string, std::string> posted;
  for (int i = 0; i < 20; ++i) {
    std::string id = "d" + std::to_string(i);
    auto r = weir.post("/in/orders", json{{"id", id}}.dump());
    REQUIRE(r.status == 202);
    posted[id] = id_from_reply(r);
  }
  // weir tries, the connections are reset: connection errors are retried, and five in a
  // row open the sink (ADR 0294), which then probes one event at a time.
  REQUIRE(wait_until([&] { return broken.accepted() >= 5; }, 20s, 20ms));
  const int64_t resets = broken.accepted();
  broken.close();  // now nothing listens: connection refused
  SinkProcess sink({}, port);
  const auto up_at = std::chrono::steady_clock::now();
  std::vector<std::string> lost;
  CHECK(wait_until(
      [&] {
        lost = missing(keys(posted), sink.ids());
        return lost.empty();
      },
      30s, 100ms));
  const int64_t recovered_ms = ms_since(up_at);
  CHECK(lost.empty());
  CHECK(dlq(weir).empty());
  for (const auto& [id, attempts] : attempts_by_id(sink)) {
    for (const auto& a : attempts) CHECK(header_of(a, "Idempotency-Key") == posted[id]);
  }
  std::cout << "sink resets, down, up: " << posted.size() << " events, " << resets << " connections reset, lost "
            << lost.size() << ", duplicates " << sink.stat("duplicates") << ", all delivered " << recovered_ms
            << " ms after the sink came up\n";
}

TEST_CASE("POST /dlq/replay by flow and by ids replays exactly those", "[integration][dlq]") {
  NatsServer nats;
  SinkProcess sink({"--status", "400"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"a.yaml", http_flow("a", "/in/a", sink.url("/a"))},
                              {"b.yaml", http_flow("b", "/in/b", sink.url("/b"))}}});
  weir.start();
  INFO(weir.describe());
  auto a = post_events(weir, "/in/a", "a", 3);
  auto b = post_events(weir, "/in/b", "b", 3);
  json dead;
  REQUIRE(wait_until(
      [&] {
        dead = dlq(weir);
        return dead.size() >= 6;
      },
      30s, 100ms));
  CHECK(dead.size() == 6);
  sink.reset();
  sink.control({{"status", 204}});

  auto replay_a = weir.admin("POST", "/dlq/replay", R"({"flow":"a"})");
  CHECK(replay_a.status / 100 == 2);
  CHECK(wait_until([&] { return missing(keys(a), sink.ids()).empty(); }, 20s, 100ms));
  CHECK(wait_until([&] { return dlq(weir).size() == 3; }, 10s, 100ms));
  for (const auto& d : dlq(weir)) CHECK(d.value("flow", "") == "b");
  CHECK(sink.stat("unique") == 3);

  json one = dlq(weir).at(0);
  auto replay_one = weir.admin("POST", "/dlq/replay", json{{"ids", {one.at("id")}}}.dump());
  CHECK(replay_one.status / 100 == 2);
  CHECK(wait_until([&] { return sink.stat("unique") == 4; }, 20s, 100ms));
  CHECK(wait_until([&] { return dlq(weir).size() == 2; }, 10s, 100ms));
  for (const auto& d : dlq(weir)) CHECK(d.at("id") != one.at("id"));

  auto replay_rest = weir.admin("POST", "/dlq/replay", "");
  CHECK(replay_rest.status / 100 == 2);
  std::set<std::string> all = keys(a);
  for (const auto& k : keys(b)) all.insert(k);
  CHECK(wait_until([&] { return missing(all, sink.ids()).empty(); }, 20s, 100ms));
  CHECK(wait_until([&] { return dlq(weir).empty(); }, 10s, 100ms));
  CHECK(sink.stat("unique") == 6);
  CHECK(sink.stat("duplicates") == 0);
}
