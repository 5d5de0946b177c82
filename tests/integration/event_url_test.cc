// Per-event URLs of the HTTP sink (docs/connectors.md `to.<name>.http.url`,
// docs/adr/0317-per-event-urls.md) through real processes: each event is delivered to the
// path it computes, or to a whole URL on an allowed origin; a URL on any other host is
// dead-lettered at once with a reason that names its origin only, and that host is never
// called.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "tests/integration/paced_load.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

TEST_CASE("per-event url: each event reaches its path, an allowed origin, never a host outside them",
          "[integration][event-url]") {
  NatsServer nats;
  SinkProcess erp({"--record", "100"});
  SinkProcess partner({"--record", "100"});
  SinkProcess stranger({"--record", "100"});
  const std::string base = erp.url("");
  const std::string flow =
      "flow: orders\n"
      "from: { http: { path: /in/orders } }\n"
      "to:\n"
      "  erp: { http: { timeout: 2s, url: { base: \"" +
      base + "\", allow: [\"" + partner.url("") +
      "\"],\n"
      "    expr: \"this.callback ?? ('/customers/' + url_encode(this.customer) + "
      "'/orders?n=' + string(this.n))\" } } }\n";
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}});
  weir.start();
  INFO(weir.describe());

  const std::vector<json> events = {
      {{"customer", "c1"}, {"n", 1}},
      {{"customer", "c 2/\u00e4"}, {"n", 2}},
      {{"customer", "c1"}, {"n", 3}},
      {{"callback", partner.url("/hooks/42?sig=x")}},
      {{"callback", stranger.url("/steal?token=abc")}},
      {{"callback", "/" + std::string(9000, 'a')}},  // beyond the 8192 bytes a URL may have
  };
  std::vector<std::string> ids;
  for (const json& e : events) {
    auto r = weir.post("/in/orders", e.dump());
    REQUIRE(r.status == 202);
    ids.push_back(id_from_reply(r));
  }
  REQUIRE(wait_until([&] { return erp.stat("received") >= 3 && partner.stat("received") >= 1; }, 20s, 50ms));
  REQUIRE(wait_until([&] { return dead_letters(weir) >= 2; }, 20s, 50ms));

  std::multiset<std::string> erp_targets;
  for (const json& r : erp.requests(100)) erp_targets.insert(r.value("target", ""));
  CHECK(erp_targets == std::multiset<std::string>{"/customers/c1/orders?n=1", "/customers/c%202%2F%C3%A4/orders?n=2",
                                                  "/customers/c1/orders?n=3"});
  const json hooks = partner.requests(100);
  REQUIRE(hooks.size() == 1);
  CHECK(hooks[0].value("target", "") == "/hooks/42?sig=x");
  CHECK(stranger.requests(100).empty());

  auto dlq = weir.admin("GET", "/dlq");
  REQUIRE(dlq.status == 200);
  const json dead = json::parse(dlq.body);
  INFO("dlq: " << dead.dump());
  REQUIRE(dead.size() == 2);
  std::map<std::string, json> dead_by_id;
  for (const json& d : dead) dead_by_id[d.value("id", "")] = d;
  REQUIRE(dead_by_id.count(ids[4]) == 1);
  REQUIRE(dead_by_id.count(ids[5]) == 1);
  CHECK(dead_by_id[ids[5]]["deliveries"] == 1);
  CHECK(dead_by_id[ids[5]].value("reason", "").find("gave 9001 bytes, more than the 8192 a URL may have here") !=
        std::string::npos);
  CHECK(dead_by_id[ids[4]]["deliveries"] == 1);  // dead at once, not retried
  const std::string reason = dead_by_id[ids[4]].value("reason", "");
  CHECK(reason.find("gave a URL on " + stranger.url("") + ", which is neither the sink's url.base nor in url.allow") !=
        std::string::npos);
  CHECK(reason.find("token=abc") == std::string::npos);  // the computed URL itself is never quoted
  CHECK(weir.log().find("token=abc") == std::string::npos);
}
