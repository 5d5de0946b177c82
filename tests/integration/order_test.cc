// Order (docs/architecture.md, guarantee 5): within one flow version and one source,
// events reach a sink in the order JetStream stored them while the flow stage keeps two
// batches in flight.
#include <catch2/catch.hpp>

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
