// Must show: a failing sink — retries keep the Idempotency-Key and deliver
// everything; a rejecting sink dead-letters with the reason and /dlq/replay brings
// the events back (spec §1.3, §1.4, §3 http sink, §4 dead letters, §5 /dlq).
#include <catch2/catch.hpp>
#include <iostream>
#include <map>

#include "tests/integration/harness.h"

using namespace weir::itest;
using weir::testing::wait_until;
using weir::testing::NatsServer;

TEST_CASE("a sink answering 503 to its first 300 requests still gets everything, same keys",
          "[integration][sink]") {
  NatsServer nats;
  SinkProcess sink({"--fail-first", "300", "--fail-status", "503"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 12, timeout: 2s, max_connections: 8")}}});
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
  CHECK(stats.value("rejected", 0) == 300);
  CHECK(stats.value("unique", 0) == kEvents);
  CHECK(stats.value("resends_with_other_key", 0) == 0);
  // weir-sink counts re-sends among accepted deliveries only; the rejected attempts are
  // in its request log: every attempt at an event carries that event's one key.
  json attempts = sink.requests(1000);
  REQUIRE(attempts.size() == 500);  // 300 rejected + 200 accepted, nothing else
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
  std::cout << "sink 503 x300: " << resent << " of " << kEvents << " events re-sent, all with their first key\n";
  // Retried, not dead-lettered.
  auto dlq = weir.admin("GET", "/dlq");
  REQUIRE(dlq.status == 200);
  CHECK(json::parse(dlq.body).empty());
}

TEST_CASE("a sink answering 400 dead-letters with the reason; replay delivers once it accepts",
          "[integration][sink][dlq]") {
  NatsServer nats;
  SinkProcess sink({"--status", "400"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 8, timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());

  constexpr int kEvents = 20;
  std::map<std::string, json> posted;        // body id → event
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
  // A 400 is not retried: each event was sent once (spec: other 4xx dead-letter at once).
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
}
