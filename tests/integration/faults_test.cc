// Nothing acked is lost under kill -9 of weir and under a nats-server outage
// (docs/architecture.md, guarantees 1, 3 and 4; /readyz; the 503 "JetStream unavailable").
#include <catch2/catch.hpp>
#include <iostream>
#include <thread>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::http_request;
using weir::testing::NatsServer;
using weir::testing::wait_until;

TEST_CASE("kill -9 of weir twice under load loses no acknowledged event", "[integration][faults]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}}});
  weir.start();

  Posters posters(weir.ingress_url("/in/orders"), 8);
  for (int round = 1; round <= 2; ++round) {
    INFO("round " << round << ": " << weir.describe());
    REQUIRE(more_acks(posters, 300, 20s));
    weir.kill9();
    weir.spawn();
    REQUIRE(weir.wait_ready(30s));
  }
  REQUIRE(more_acks(posters, 300, 20s));
  posters.stop();

  std::set<std::string> acked = posters.acked_ids();
  INFO(weir.describe());
  std::vector<std::string> lost;
  bool all = wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        return lost.empty();
      },
      30s, 200ms);
  CHECK(all);
  CHECK(lost.empty());
  if (!lost.empty()) FAIL_CHECK("lost " << lost.size() << " acked events, first: " << lost.front());

  auto counts = posters.status_counts();
  json stats = sink.stats();
  std::cout << "kill -9 x2: acked " << acked.size() << ", not acked " << posters.failed() << ", sink received "
            << stats.value("received", 0) << ", unique " << stats.value("unique", 0) << ", duplicates "
            << stats.value("duplicates", 0) << " (resends same key " << stats.value("resends_with_same_key", 0)
            << ", other key " << stats.value("resends_with_other_key", 0) << ")\n";
  for (auto [status, n] : counts) std::cout << "  HTTP " << status << ": " << n << "\n";
  CHECK(posters.key_mismatches() == 0);
  // A re-send after a crash must carry the same Idempotency-Key.
  CHECK(stats.at("resends_with_other_key").get<int64_t>() == 0);  // at(): a missing key fails
  // Nothing but 202 or "no answer / 503" is acceptable while weir dies and restarts.
  for (auto [status, n] : counts) {
    INFO("HTTP " << status << " x" << n);
    CHECK((status == 202 || status == 0 || status == 503));
  }
}

TEST_CASE("a 3 s nats-server outage answers 503 with Retry-After and loses nothing acked", "[integration][faults]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}}});
  weir.start();

  Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(2000));
  REQUIRE(more_acks(posters, 300, 20s));

  nats.stop();
  auto down_at = std::chrono::steady_clock::now();
  // /readyz turns 503 (with a reason) while NATS is unreachable.
  HttpReply ready;
  bool not_ready = wait_until(
      [&] {
        ready = http_request("GET", weir.admin_url("/readyz"), "", {}, 500ms);
        return ready.status == 503;
      },
      2500ms, 20ms);
  CHECK(not_ready);
  CHECK_FALSE(ready.body.empty());
  // The outage itself is the scenario: nats-server stays down for 3 s.
  std::this_thread::sleep_until(down_at + 3s);
  HttpReply ready_late = http_request("GET", weir.admin_url("/readyz"), "", {}, 500ms);
  CHECK(ready_late.status == 503);
  auto up_at = std::chrono::steady_clock::now();
  nats.start();

  // The stages re-request at the reconnect (ADR 0150), so readiness comes back within
  // seconds; the bound is generous for a loaded machine, and a miss says what is not ready.
  HttpReply ready_again;
  std::string last_reason;
  bool recovered = wait_until(
      [&] {
        ready_again = http_request("GET", weir.admin_url("/readyz"), "", {}, 500ms);
        if (ready_again.status != 200) last_reason = ready_again.body;
        return ready_again.status == 200;
      },
      20s, 50ms);
  std::cout << "nats outage: ready again "
            << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - up_at).count()
            << " ms after nats-server was started; last not ready: " << last_reason << "\n";
  INFO("/readyz: " << ready_again.status << " " << ready_again.body);
  CHECK(recovered);
  INFO(weir.describe());
  REQUIRE(more_acks(posters, 300, 45s));
  posters.stop();

  // Every answer to a request sent after nats-server had exited and answered before it
  // was started again: 503 with Retry-After, never 2xx (nothing can be stored then).
  size_t during = 0, bad = 0, with_503 = 0;
  std::map<int, size_t> bad_statuses;
  for (const auto& r : posters.records()) {
    if (r.sent < down_at || r.answered >= up_at) continue;
    ++during;
    if (r.status == 503 && r.has_retry_after) {
      ++with_503;
    } else {
      ++bad;
      ++bad_statuses[r.status * 10 + (r.has_retry_after ? 1 : 0)];
    }
  }
  std::cout << "nats outage: " << during << " answers during the outage, " << with_503 << " were 503+Retry-After\n";
  for (auto [code, n] : bad_statuses) {
    INFO("answered during the outage: HTTP " << code / 10 << (code % 10 ? " with" : " without") << " Retry-After x"
                                             << n);
    CHECK(code / 10 / 100 != 2);  // never 2xx
    CHECK(code / 10 == 503);
  }
  CHECK(during > 0);
  CHECK(bad == 0);

  std::set<std::string> acked = posters.acked_ids();
  std::vector<std::string> lost;
  bool all = wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        return lost.empty();
      },
      30s, 200ms);
  CHECK(all);
  if (!lost.empty()) FAIL_CHECK("lost " << lost.size() << " of " << acked.size() << " acked, first: " << lost.front());
  json stats = sink.stats();
  std::cout << "nats outage: acked " << acked.size() << ", sink unique " << stats.value("unique", 0) << ", duplicates "
            << stats.value("duplicates", 0) << "\n";
}
