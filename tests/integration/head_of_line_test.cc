// One expensive flow does not stall another on the shared flow loop
// (docs/adr/0288-flow-batches-in-slices.md): while a flow whose step costs milliseconds per
// event works through a backlog of 200 events, events of a pass-through flow posted after
// that backlog are delivered long before it ends, with delivery_loops 1 and 2. The test
// asserts the order (robust on a loaded machine) and prints the latencies.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/jetstream.h"
#include "tests/support/harness.h"
#include "tests/support/scripted_http_server.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::ScriptedHttpServer;
using weir::testing::ScriptedReply;
using weir::testing::ScriptedRequest;
using weir::testing::wait_until;
using Clock = std::chrono::steady_clock;

namespace {

struct Arrivals {
  std::mutex mu;
  std::map<std::string, Clock::time_point> at;  // by id, the first arrival
  size_t count(const std::string& prefix) {
    std::lock_guard lock(mu);
    return static_cast<size_t>(
        std::count_if(at.begin(), at.end(), [&](const auto& e) { return e.first.rfind(prefix, 0) == 0; }));
  }
};

constexpr int kSlow = 200;

void run_head_of_line(int loops) {
  NatsServer nats;
  Arrivals got;
  ScriptedHttpServer receiver([&](const ScriptedRequest& r) {
    json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("id") && j["id"].is_string()) {
      std::lock_guard lock(got.mu);
      got.at.emplace(j["id"].get<std::string>(), Clock::now());
    }
    return ScriptedReply::with_status(200);
  });
  // About ten milliseconds of expression work per event: three passes over 40,000 numbers.
  const std::string slow =
      "flow: slow\nfrom: {http: {path: /in/slow}}\nsteps:\n"
      "  - set: { total: \"this.xs.map(x => x * 3 + 1).filter(x => x > 5).sum()\", xs: null }\n"
      "to:\n  out: {http: {url: \"" +
      receiver.url("/out/slow") + "\"}}\n";
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"slow.yaml", slow}, {"fast.yaml", http_flow("fast", "/in/fast", receiver.url("/out/fast"))}},
                .config = "http: { max_body: 1MiB }\ndelivery_loops: " + std::to_string(loops) + "\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());

  json xs = json::array();
  for (int i = 0; i < 40000; ++i) xs.push_back(i);
  std::vector<std::pair<std::string, std::string>> backlog;
  for (int i = 0; i < kSlow; ++i) {
    const std::string id = "slow-" + std::to_string(i);
    backlog.emplace_back(id, json{{"id", id}, {"xs", xs}}.dump());
  }
  // The backlog stored at once, straight into the slow flow's stream (as a burst of
  // webhooks would be); the pass-through flow's events come after it.
  const auto t0 = Clock::now();
  js_publish_all(nats.url(), "weir.slow.in", backlog);
  std::map<std::string, Clock::time_point> sent;
  for (int i = 0; i < 20; ++i) {
    const std::string id = "fast-" + std::to_string(i);
    sent[id] = Clock::now();
    REQUIRE(weir.post("/in/fast", json{{"id", id}}.dump()).status == 202);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a paced sender
  }
  REQUIRE(wait_until([&] { return got.count("fast-") == 20 && got.count("slow-") == static_cast<size_t>(kSlow); }, 120s,
                     10ms));

  std::vector<double> fast_ms;
  Clock::time_point last_slow{}, first_slow = Clock::time_point::max();
  {
    std::lock_guard lock(got.mu);
    for (const auto& [id, at] : got.at) {
      if (id.rfind("slow-", 0) == 0) {
        last_slow = std::max(last_slow, at);
        first_slow = std::min(first_slow, at);
      } else {
        fast_ms.push_back(std::chrono::duration<double, std::milli>(at - sent[id]).count());
      }
    }
  }
  std::sort(fast_ms.begin(), fast_ms.end());
  const double slow_span_ms = std::chrono::duration<double, std::milli>(last_slow - t0).count();
  const Clock::time_point last_fast_sent = sent["fast-19"];
  const double fast_done_before_slow_ms = std::chrono::duration<double, std::milli>(last_slow - last_fast_sent).count();
  std::cout << "head of line, delivery_loops " << loops << ": " << kSlow << " slow events delivered within "
            << slow_span_ms << " ms of their storing; pass-through e2e (20 events) p50 " << fast_ms[fast_ms.size() / 2]
            << " ms, max " << fast_ms.back() << " ms; the slow flow ended " << fast_done_before_slow_ms
            << " ms after the last pass-through event was sent\n";
  // The slow flow was still working when the pass-through events went in…
  REQUIRE(last_slow > last_fast_sent);
  // …and none of them waited for it: each was delivered well within the slow flow's
  // remaining work (before the slice change, one waited for the whole backlog).
  CHECK(fast_ms.back() < fast_done_before_slow_ms / 2);
  REQUIRE(weir.terminate() == 0);
}

}  // namespace

TEST_CASE("an expensive flow does not hold up a pass-through flow on the shared loop (delivery_loops 1)",
          "[integration][head-of-line]") {
  run_head_of_line(1);
}

TEST_CASE("an expensive flow does not hold up a pass-through flow on the flows loop (delivery_loops 2)",
          "[integration][head-of-line]") {
  run_head_of_line(2);
}
