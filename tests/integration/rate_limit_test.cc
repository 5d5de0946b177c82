// An HTTP sink's `rate:` (docs/connectors.md, docs/adr/0296-per-instance-rate-limits.md):
// a real receiver measures the arrival rate while the bucket, not ingest, paces — every
// event is stored before the measured run starts — and events that wait for the limit
// are neither retried as failures nor dead-lettered. The bucket alone, on a hand-driven
// clock: tests/runtime/token_bucket_test.cc.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

constexpr int kConnections = 16;
// What the first weir may have held when it was killed: the sink stage's window (twice
// max_connections) and the first burst.
constexpr size_t kHeld = 2 * kConnections + 2;

std::string rate_flow(const SinkProcess& sink, const std::string& rate) {
  return http_flow("paced", "/in/paced", sink.url("/out"),
                   "timeout: 5s, max_connections: " + std::to_string(kConnections) + ", rate: " + rate);
}

// Stores `events` events with the sink held at 1/h, then starts weir again at `rate` and
// measures the receiver's arrival rate from the end of the first burst (the default
// burst: 100 ms of the rate, at least 2) to the last arrival of the steady run. The
// deliveries the first weir held when it was killed come back after AckWait; they pass the
// same bucket, so wherever they land they do not change the rate, and the window stops
// before the run's last `kHeld` arrivals so that it never waits for them.
double measure(double rate, const std::string& rate_text, size_t events) {
  NatsServer nats;
  SinkProcess sink({"--record", std::to_string(events + 1000)});
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"paced.yaml", rate_flow(sink, "1/h")}}});
  weir.start();
  INFO(weir.describe());

  std::set<std::string> acked;
  {
    Posters posters(weir.ingress_url("/in/paced"), 4, std::chrono::microseconds(0));
    REQUIRE(wait_until([&] { return posters.acked() >= events; }, 60s, 10ms));
    posters.stop();
    acked = posters.acked_ids();
  }
  // Every input run by the flow stage: the outputs wait in the sink's stream.
  REQUIRE(wait_until(
      [&] { return stage_counter(weir, "weir_events_acked_total", "flow") >= static_cast<double>(acked.size()); }, 60s,
      50ms));
  CHECK(sink.stat("received") <= 2);  // 1/h: the first burst only
  weir.kill9();
  const std::set<std::string> delivered_before = sink.ids();
  sink.reset();
  // A second weir on the same NATS, the same flow at `rate`: it finds every event stored.
  WeirProcess paced({.nats_url = nats.url(), .flows = {{"paced.yaml", rate_flow(sink, rate_text)}}});
  paced.start();

  // Paced: deliveries wait in the sink's queue for their tokens.
  CHECK(wait_until([&] { return stage_counter(paced, "weir_sink_queued", "sink:out") > 0; }, 10s, 50ms));
  const size_t steady = acked.size() - kHeld;
  const auto budget = std::chrono::milliseconds(static_cast<int64_t>(1000.0 * acked.size() / rate)) + 30s;
  if (!wait_until([&] { return sink.stat("received") >= static_cast<int64_t>(steady); }, budget, 50ms)) {
    FAIL("the receiver got " << sink.stat("received") << " of " << steady << "; sink stats " << sink.stats().dump()
                             << "\n"
                             << paced.describe());
  }
  json requests = sink.requests(static_cast<int>(acked.size()) + 1000);
  std::vector<int64_t> arrivals;
  for (const auto& r : requests) arrivals.push_back(r.at("arrival_us").get<int64_t>());
  std::sort(arrivals.begin(), arrivals.end());
  REQUIRE(arrivals.size() >= steady);
  const size_t first = std::max<size_t>(2, static_cast<size_t>(std::ceil(rate * 0.1)));
  const size_t last = steady - 1;
  REQUIRE(last > first + 50);
  const double seconds = static_cast<double>(arrivals[last] - arrivals[first]) / 1e6;
  const double measured = static_cast<double>(last - first) / seconds;
  std::cout << "rate " << rate_text << ": " << measured << "/s measured at the receiver over " << (last - first)
            << " arrivals in " << seconds << " s (" << acked.size() << " events stored first)\n";

  // Waiting is not failing: everything arrives, nothing is retried or dead-lettered.
  std::vector<std::string> lost;
  CHECK(wait_until(
      [&] {
        std::set<std::string> delivered = sink.ids();
        delivered.insert(delivered_before.begin(), delivered_before.end());
        lost = missing(acked, delivered);
        return lost.empty();
      },
      30s, 200ms));
  CHECK(lost.empty());
  CHECK(stage_counter(paced, "weir_events_errors_total", "sink:out") == 0);
  auto dlq = paced.admin("GET", "/dlq");
  REQUIRE(dlq.status == 200);
  CHECK(json::parse(dlq.body).empty());
  return measured;
}

}  // namespace

// Tagged [sink]: the sanitizer job (scripts/sanitize.sh) runs it against its ASan build.
TEST_CASE("rate 50/s: the receiver sees 50/s within 5 %, nothing retried or dead-lettered",
          "[integration][rate][sink]") {
  const double measured = measure(50, "50/s", 150);
  CHECK(measured == Approx(50).epsilon(0.05));
}

// Not [sink]: an ASan build of weir is not asked for 2000 deliveries a second.
TEST_CASE("rate 2000/s: the receiver sees 2000/s within 5 %, nothing retried or dead-lettered", "[integration][rate]") {
  const double measured = measure(2000, "2000/s", 6000);
  CHECK(measured == Approx(2000).epsilon(0.05));
}

TEST_CASE("weir validate: a bad rate is a file:line error, exit 2", "[integration][rate]") {
  weir::testing::TempDir dir;
  const std::string file = dir.path() + "/bad.yaml";
  std::ofstream(file) << "flow: bad\nfrom: { http: { path: /in } }\nto:\n  out:\n    http:\n"
                         "      url: http://127.0.0.1:1/x\n      rate: 10/day\n";
  CliResult r = run_cli({"validate", file});
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find(file + ":7:13: to.out.http.rate has an unknown unit \"/day\"") != std::string::npos);
}
