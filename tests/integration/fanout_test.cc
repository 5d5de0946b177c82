// Fan-out (docs/adr/0299-fan-out.md, docs/flow-language.md "Routing"): a `to:` list
// delivers each event to every sink it names, each through its own consumer, retries,
// circuit and dead letters, so one receiver's outage never delays another; a dead
// letter's replay goes back to the sink it died at only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <optional>

#include "tests/integration/paced_load.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;
using Clock = std::chrono::steady_clock;

namespace {

// A flow whose every event goes to both `erp` and `audit`.
std::string fanout_flow(const std::string& erp_url, const std::string& audit_url, const std::string& sink_extra) {
  return "flow: orders\n"
         "from: { http: { path: /in/orders } }\n"
         "steps:\n"
         "  - set: { fanned: true }\n"
         "  - branch:\n"
         "      - { to: [erp, audit] }\n"
         "to:\n"
         "  erp: { http: { url: \"" +
         erp_url + "\"" + sink_extra + " } }\n  audit: { http: { url: \"" + audit_url + "\"" + sink_extra + " } }\n";
}

double e2e_ms(const SinkProcess& s, const char* quantile) { return s.stats().at("e2e_ms").at(quantile).get<double>(); }

bool has_all(const std::set<std::string>& seen, const std::set<std::string>& want) {
  return std::includes(seen.begin(), seen.end(), want.begin(), want.end());
}

}  // namespace

TEST_CASE("fan-out: every event reaches each sink, dead letters and their replay stay with their sink",
          "[integration][fanout]") {
  NatsServer nats;
  SinkProcess erp;
  SinkProcess audit({"--status", "400"});  // 400: not retryable, each delivery dies at once
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"orders.yaml", fanout_flow(erp.url("/erp"), audit.url("/audit"), "")}}});
  weir.start();
  INFO(weir.describe());

  std::set<std::string> posted;
  for (int n = 0; n < 40; ++n) {
    const std::string id = "f" + std::to_string(n);
    auto r = weir.post("/in/orders", json{{"id", id}, {"n", n}}.dump(), {"Idempotency-Key: " + id});
    REQUIRE(r.status == 202);
    posted.insert(id);
  }
  REQUIRE(wait_until([&] { return erp.ids() == posted; }, 30s, 50ms));
  REQUIRE(wait_until([&] { return dead_letters(weir) == posted.size(); }, 30s, 50ms));
  auto dlq = weir.admin("GET", "/dlq?limit=1000");
  REQUIRE(dlq.status == 200);
  for (const auto& d : json::parse(dlq.body)) {
    INFO(d.dump());
    CHECK(d.value("stage", "") == "sink:audit");
  }
  // Each output is the flow's result, with the sink's own key.
  for (const auto& req : erp.requests(5)) {
    INFO(req.dump());
    CHECK(json::parse(req.at("body").get<std::string>()).value("fanned", false));
  }
  CHECK(erp.stat("duplicates") == 0);
  const int64_t erp_received = erp.stat("received");

  // The replay goes to audit, where they died: erp sees nothing again.
  audit.control({{"status", 204}});
  auto r = weir.admin("POST", "/dlq/replay", json{{"sink", "audit"}}.dump());
  INFO(r.body);
  REQUIRE(r.status == 200);
  CHECK(json::parse(r.body).value("replayed", 0) == static_cast<int>(posted.size()));
  REQUIRE(wait_until([&] { return audit.ids() == posted; }, 30s, 50ms));
  REQUIRE(wait_until(
      [&] {
        return sink_metric(weir, "weir_events_acked_total", "orders", "sink:audit") >=
               static_cast<int64_t>(posted.size());
      },
      10s, 50ms));
  CHECK(erp.stat("received") == erp_received);
  CHECK(erp.stat("duplicates") == 0);
  CHECK(sink_metric(weir, "weir_events_acked_total", "orders", "sink:erp") == static_cast<int64_t>(posted.size()));
}

TEST_CASE("fan-out with one receiver down 30 s: the other gets every event on time, the down one all after",
          "[integration][outage][fanout]") {
  NatsServer nats;
  SinkProcess erp;
  std::optional<SinkProcess> audit(std::in_place);
  const int audit_port = audit->port();
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", fanout_flow(erp.url("/erp"), audit->url("/audit"), ", timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());

  // The reference: 10 s at 25 events/s with both receivers up.
  std::set<std::string> reference_ids;
  {
    PacedPoster poster(weir, "/in/orders", "r", 25, 250);
    REQUIRE(wait_until([&] { return poster.done(); }, 30s, 50ms));
    reference_ids = poster.acked();
  }
  REQUIRE(reference_ids.size() == 250);
  REQUIRE(
      wait_until([&] { return has_all(erp.ids(), reference_ids) && has_all(audit->ids(), reference_ids); }, 30s, 50ms));
  const double reference_p90 = e2e_ms(erp, "p90");
  const double reference_p99 = e2e_ms(erp, "p99");
  Seen at_erp, at_audit;
  at_erp.add(erp);
  at_audit.add(*audit);
  erp.reset();  // the outage's latencies, alone

  // audit's port closes for 30 s, at the same pace.
  audit.reset();
  const auto down_at = Clock::now();
  std::set<std::string> outage_ids;
  {
    PacedPoster poster(weir, "/in/orders", "o", 25, 750);
    REQUIRE(wait_until([&] { return poster.done(); }, 60s, 50ms));
    outage_ids = poster.acked();
    CHECK(poster.refused() == 0);
  }
  // erp had each of them meanwhile: no wait for audit's circuit or retries.
  REQUIRE(wait_until([&] { return has_all(erp.ids(), outage_ids); }, 10s, 20ms));
  const double outage_p90 = e2e_ms(erp, "p90");
  const double outage_p99 = e2e_ms(erp, "p99");
  const double outage_max = e2e_ms(erp, "max");
  const double down_for = std::chrono::duration<double>(Clock::now() - down_at).count();
  CHECK(sink_view(weir, "orders", "audit").value("state", "") == "open");
  CHECK(sink_view(weir, "orders", "erp").value("state", "") == "closed");
  at_erp.add(erp);

  audit.emplace(std::vector<std::string>{}, audit_port);
  const auto back_at = Clock::now();
  // The next probe finds it (up to 60 s + jitter after the last one, ADR 0294).
  REQUIRE(wait_until([&] { return has_all(audit->ids(), outage_ids); }, 90s, 100ms));
  const double drained_after = std::chrono::duration<double>(Clock::now() - back_at).count();
  at_audit.add(*audit);

  std::set<std::string> all = reference_ids;
  all.insert(outage_ids.begin(), outage_ids.end());
  CHECK(at_erp.ids == all);
  CHECK(at_audit.ids == all);
  CHECK(dead_letters(weir) == 0);
  std::cout << "fan-out outage: " << all.size() << " events; erp e2e p90/p99 " << reference_p90 << "/" << reference_p99
            << " ms before, " << outage_p90 << "/" << outage_p99 << " ms (max " << outage_max << " ms) during audit's "
            << down_for << " s outage; audit all delivered " << drained_after
            << " s after it came back; duplicates erp " << at_erp.duplicates << ", audit " << at_audit.duplicates
            << ", lost 0\n";
  // On time: erp's latencies during the outage are the reference's, within the machine's
  // noise. Were erp held by audit's retries or circuit, most of its events would wait (the
  // circuit opens within a second and stays open 30 s), so p90 shows it; p99 is reported,
  // not asserted: 1 % of 750 events is 8, so one stall of about a second anywhere on the
  // path (once in a full CI run: p99 758 ms) moves it while the coupling it guards against
  // would not hide in 8 events.
  CHECK(outage_p90 <= std::max(2 * reference_p90, reference_p90 + 25.0));
  CHECK(at_erp.duplicates == 0);
}
