// Order (docs/architecture.md, guarantee 5): within one flow version and one source,
// events reach a sink in the order JetStream stored them while the flow stage keeps two
// batches in flight.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

TEST_CASE("events posted one after another reach a one-connection sink in the order they were stored",
          "[integration][delivery]") {
  NatsServer nats;
  SinkProcess sink({"--record", "5000"});
  // A step, so every event is parsed, run and re-encoded by the flow stage; one sink
  // connection, so the sink stage delivers in its fetch order.
  std::string flow =
      "flow: seq\nfrom: { http: { path: /in/seq } }\nsteps:\n  - set: { seen: true }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/out") + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s, max_connections: 1 } } }\n";
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"seq.yaml", flow}}});
  weir.start();
  INFO(weir.describe());

  constexpr int kEvents = 1500;
  for (int i = 0; i < kEvents; ++i) {
    // Each 202 comes after the PubAck: the next event is stored after this one.
    REQUIRE(weir.post("/in/seq", json{{"id", "s" + std::to_string(i)}, {"n", i}}.dump()).status == 202);
  }
  REQUIRE(wait_until([&] { return sink.stat("unique") >= kEvents; }, 30s, 100ms));
  std::vector<int> arrived;
  for (const auto& r : sink.requests(kEvents + 100)) arrived.push_back(body_of(r).value("n", -1));
  REQUIRE(arrived.size() == static_cast<size_t>(kEvents));
  int out_of_order = 0;
  for (int i = 0; i < kEvents; ++i) {
    if (arrived[static_cast<size_t>(i)] != i) ++out_of_order;
  }
  CHECK(out_of_order == 0);
  CHECK(sink.stat("duplicates") == 0);
}

// order_by (docs/adr/0310-per-key-order.md): with random 503s and eight connections, the
// events of one key reach the receiver one at a time in the order they were stored (an
// event's retries come before any attempt of its key's next event, which goes only after
// the previous one got its 2xx), while other keys keep going during a key's retry wait.
TEST_CASE("order_by delivers each key in stream order through retries while other keys go on",
          "[integration][order-by]") {
  NatsServer nats;
  SinkProcess sink({"--fail-percent", "20", "--fail-status", "503", "--delay-ms", "5", "--record", "20000"});
  const std::string flow =
      "flow: keyed\nfrom: { http: { path: /in/keyed } }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/out") +
      "\", order_by: \"this.customer\", max_connections: 8, retries: 20, "
      "retry: {backoff: [50ms]}, timeout: 2s } } }\n";
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"keyed.yaml", flow}}});
  weir.start();
  INFO(weir.describe());

  constexpr int kKeys = 40;
  constexpr int kEvents = 1000;
  for (int i = 0; i < kEvents; ++i) {
    const json event{{"id", "k" + std::to_string(i)}, {"customer", "c" + std::to_string(i % kKeys)}, {"n", i}};
    REQUIRE(weir.post("/in/keyed", event.dump()).status == 202);  // stored in this order
  }
  REQUIRE(wait_until([&] { return sink.stat("unique") >= kEvents; }, 60s, 100ms));

  // The receiver records every attempt in the order it arrived, with the answer it gave.
  struct Attempt {
    int n;
    bool ok;
  };
  std::map<std::string, std::vector<Attempt>> by_key;
  std::vector<std::string> arrival_keys;
  const json recorded = sink.requests(20000);
  for (const auto& r : recorded) {
    const json body = body_of(r);
    const std::string key = body.value("customer", "");
    const int status = r.value("status", 0);
    by_key[key].push_back({body.value("n", -1), status >= 200 && status < 300});
    arrival_keys.push_back(key);
  }
  REQUIRE(static_cast<int>(recorded.size()) > kEvents);  // some were retried
  REQUIRE(by_key.size() == static_cast<size_t>(kKeys));
  int out_of_order = 0;
  for (const auto& [key, attempts] : by_key) {
    INFO("key " << key);
    int expect = attempts.front().n;
    CHECK(expect < kKeys);  // the key's first event
    bool done = false;      // `expect` got its 2xx
    for (const Attempt& a : attempts) {
      if (a.n == expect && !done) {
        done = a.ok;
        continue;
      }
      // Anything else must be the key's next event, after the previous one's 2xx.
      if (!done || a.n != expect + kKeys) {
        ++out_of_order;
        continue;
      }
      expect = a.n;
      done = a.ok;
    }
    CHECK(done);
    CHECK(expect + kKeys >= kEvents);  // its last event
  }
  CHECK(out_of_order == 0);

  // A failed attempt's retry waits ~50 ms: other keys' deliveries arrive in between.
  int interleaved = 0;
  int failed = 0;
  std::map<std::string, size_t> last_failure;  // key → index of its unanswered failure
  for (size_t i = 0; i < recorded.size(); ++i) {
    const std::string& key = arrival_keys[i];
    const int status = recorded[i].value("status", 0);
    if (auto it = last_failure.find(key); it != last_failure.end()) {
      if (i - it->second > 1) ++interleaved;
      last_failure.erase(it);
    }
    if (status < 200 || status >= 300) {
      ++failed;
      last_failure[key] = i;
    }
  }
  INFO("failed attempts " << failed << ", other keys' attempts between a failure and its retry " << interleaved);
  CHECK(failed > 0);
  CHECK(interleaved * 2 > failed);
  CHECK(sink.stat("duplicates") == 0);
}
