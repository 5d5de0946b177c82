// Byte-bounded pulls (docs/adr/0276-byte-bounded-pulls.md): a backlog of big events stored
// while weir was down is delivered, each once with its body intact, without nats-server
// closing weir's delivery connection as a slow consumer (its 64 MiB per-client pending
// limit) and without healthy events dead-lettered as poison after such kicks.
#include <catch2/catch.hpp>

#include <cstdint>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/jetstream.h"
#include "tests/integration/checked_bodies.h"
#include "tests/support/harness.h"
#include "tests/support/scripted_http_server.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::ScriptedHttpServer;
using weir::testing::ScriptedReply;
using weir::testing::ScriptedRequest;
using weir::testing::wait_until;

namespace {

struct Received {
  std::mutex mu;
  std::map<std::string, int> deliveries;  // by id
  int corrupt = 0;
};

void drain_backlog(int events, size_t pad_size) {
  NatsServer nats;
  Received got;
  ScriptedHttpServer receiver([&](const ScriptedRequest& r) {
    json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    std::lock_guard lock(got.mu);
    if (j.is_object() && j.contains("id") && j.contains("sum") && j.contains("pad") && j["pad"].is_string() &&
        j["sum"] == std::to_string(fnv1a(j["pad"].get<std::string>()))) {
      ++got.deliveries[j["id"].get<std::string>()];
    } else {
      ++got.corrupt;
    }
    return ScriptedReply::with_status(200);
  });
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"big.yaml", http_flow("big", "/in/big", receiver.url("/out"), "timeout: 10s")}},
                .config = "http: { max_body: 1MiB }\n"};
  WeirProcess weir(o);
  weir.start();  // creates the streams and consumers
  INFO(weir.describe());
  REQUIRE(weir.terminate() == 0);

  std::vector<std::pair<std::string, std::string>> backlog;
  for (int i = 0; i < events; ++i) {
    std::string id = "big-" + std::to_string(i);
    std::string pad = pad_for(i, pad_size);
    backlog.emplace_back(id, json{{"id", id}, {"sum", std::to_string(fnv1a(pad))}, {"pad", pad}}.dump());
  }
  js_publish_all(nats.url(), "weir.big.in", backlog);
  backlog.clear();
  REQUIRE(js_stream_state(nats.url(), "weir_big").messages == events);

  const auto t0 = std::chrono::steady_clock::now();
  weir.spawn();
  REQUIRE(weir.wait_ready(30s));
  auto delivered = [&] {
    std::lock_guard lock(got.mu);
    return static_cast<int>(got.deliveries.size());
  };
  const bool all = wait_until([&] { return delivered() == events; }, 100s, 200ms);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  auto dead = json::parse(weir.admin("GET", "/dlq").body);
  const std::string server_log = nats.read_log();
  size_t kicks = 0;
  for (size_t at = server_log.find("Slow Consumer"); at != std::string::npos;
       at = server_log.find("Slow Consumer", at + 1)) {
    ++kicks;
  }
  int twice = 0, corrupt = 0;
  {
    std::lock_guard lock(got.mu);
    for (const auto& [id, n] : got.deliveries) twice += n > 1 ? 1 : 0;
    corrupt = got.corrupt;
  }
  std::cout << "big backlog: " << events << " x " << pad_size << " B: delivered " << delivered() << " in "
            << took.count() << " ms, dead-lettered " << dead.size() << ", delivered more than once " << twice
            << ", corrupt " << corrupt << ", slow-consumer lines " << kicks << "\n";
  CHECK(all);
  CHECK(delivered() == events);
  CHECK(corrupt == 0);
  CHECK(twice == 0);
  CHECK(dead.empty());
  CHECK(kicks == 0);
  REQUIRE(weir.terminate() == 0);
}

}  // namespace

TEST_CASE("a backlog of 3000 x 64 KB events is delivered once each, intact, with no slow-consumer kick",
          "[integration][backpressure][big-backlog]") {
  drain_backlog(3000, 64 << 10);
}

TEST_CASE("a backlog of 300 x 900 KB events is delivered once each, intact, with no slow-consumer kick",
          "[integration][backpressure][big-backlog]") {
  drain_backlog(300, 900 << 10);
}

// nats-server 2.9.10 counts a redelivery it could not send: when the waiting pull requests
// have fewer bytes left than the message (it answers 409 Message Size Exceeds MaxBytes),
// the message leaves the redelivery queue with its delivery count raised and is only
// tried again after AckWait (fixed upstream in 2.11). With byte-bounded pulls (ADR 0276)
// that happens to big events that are retried: JetStream's count climbs past the attempts
// the receiver saw. weir counts the deliveries it was handed (docs/adr/0292-deliveries-
// weir-was-handed.md): a receiver that fails each event's first two attempts, with
// retries: 2, gets every event on its third attempt and nothing is dead-lettered.
TEST_CASE("big events retried by their sink are counted by the attempts made, not by JetStream's count",
          "[integration][backpressure][big-backlog][redelivery-count]") {
  constexpr int kEvents = 60;
  constexpr size_t kPad = 900 << 10;
  NatsServer nats;
  std::mutex mu;
  std::map<std::string, int> attempts;  // by id, every request the receiver got
  int corrupt = 0;
  ScriptedHttpServer receiver([&](const ScriptedRequest& r) {
    json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    std::lock_guard lock(mu);
    if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) {
      ++corrupt;
      return ScriptedReply::with_status(200);
    }
    const int n = ++attempts[j["id"].get<std::string>()];
    return ScriptedReply::with_status(n <= 2 ? 503 : 200);
  });
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"big.yaml", http_flow("big", "/in/big", receiver.url("/out"),
                                                 "retries: 2, " WEIR_TEST_RETRY ", timeout: 2s, max_connections: 16")}},
                .config = "http: { max_body: 1MiB }\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.terminate() == 0);
  std::vector<std::pair<std::string, std::string>> backlog;
  for (int i = 0; i < kEvents; ++i) {
    std::string id = "retried-" + std::to_string(i);
    std::string pad = pad_for(i, kPad);
    backlog.emplace_back(id, json{{"id", id}, {"sum", std::to_string(fnv1a(pad))}, {"pad", pad}}.dump());
  }
  js_publish_all(nats.url(), "weir.big.in", backlog);
  backlog.clear();
  weir.spawn();
  REQUIRE(weir.wait_ready(30s));
  auto settled = [&] {
    std::lock_guard lock(mu);
    int done = 0;
    for (const auto& [id, n] : attempts) done += n >= 3 ? 1 : 0;
    return done;
  };
  auto dead_count = [&] {
    json dead = json::parse(weir.admin("GET", "/dlq?limit=1000").body, nullptr, false);
    return dead.is_array() ? static_cast<int>(dead.size()) : -1;
  };
  wait_until([&] { return settled() + dead_count() >= kEvents; }, 100s, 200ms);
  json dead = json::parse(weir.admin("GET", "/dlq?limit=1000").body, nullptr, false);
  REQUIRE(dead.is_array());
  for (size_t i = 0; i < dead.size() && i < 5; ++i) {
    std::cout << "  dead letter: " << dead[i].value("stage", "?") << " deliveries " << dead[i].value("deliveries", 0)
              << ": " << dead[i].value("reason", "?") << "\n";
  }
  std::cout << "retried big events: " << kEvents << " x " << kPad << " B: delivered on the third attempt " << settled()
            << ", dead-lettered " << dead.size() << "\n";
  CHECK(corrupt == 0);
  CHECK(settled() == kEvents);
  CHECK(dead.empty());
  REQUIRE(weir.terminate() == 0);
}
