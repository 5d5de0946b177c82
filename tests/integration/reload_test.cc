// SIGHUP re-reads the flows dir (docs/operations.md "Reloading (SIGHUP)"; ADR 0306),
// through the real weir binary, a nats-server and weir-sink: a flow added, changed and
// removed in the directory is picked up (seen through /status, /flows and delivery); a
// directory with an invalid file is refused whole with the file's error logged, and the
// running flows keep delivering — events posted across both reloads are all delivered.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::wait_until;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

// An http flow whose one step sets `v`.
std::string flow_v(const std::string& name, const std::string& sink_url, int v) {
  return "flow: " + name + "\nfrom: { http: { path: /in/" + name + " } }\nsteps:\n  - set: { v: " + std::to_string(v) +
         " }\nto: { out: { http: { url: \"" + sink_url + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } } }\n";
}

std::set<std::string> flow_names(const WeirProcess& weir) {
  std::set<std::string> names;
  const json status = json::parse(weir.admin("GET", "/status").body);
  for (const auto& f : status["flows"]) names.insert(f.value("name", ""));
  return names;
}

// The `v` the sink got with the event `id` (-1 while not delivered).
int delivered_v(const SinkProcess& sink, const std::string& id) {
  for (const auto& req : sink.requests(100000)) {
    json b = body_of(req);
    if (b.is_object() && b.value("id", "") == id) return b.value("v", 0);
  }
  return -1;
}

// SIGHUP, then waits for its outcome line (the n-th "reload done" or "reload failed").
bool reload(WeirProcess& weir, const std::string& outcome) {
  const size_t before = count(weir.log(), outcome);
  weir.process().signal(SIGHUP);
  return wait_until([&] { return count(weir.log(), outcome) > before; }, 20s, 20ms);
}

}  // namespace

TEST_CASE("reload: SIGHUP picks up added, changed and removed flows and refuses an invalid file with lost 0",
          "[integration][reload]") {
  weir::testing::NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"a.yaml", flow_v("a", sink.url("/a"), 1)}, {"b.yaml", flow_v("b", sink.url("/b"), 1)}}});
  weir.start();
  INFO(weir.describe());
  REQUIRE(flow_names(weir) == std::set<std::string>{"a", "b"});

  // Events into flow a all along, across both reloads.
  Posters posters(weir.ingress_url("/in/a"), 2, std::chrono::microseconds(2000));
  REQUIRE(wait_until([&] { return posters.acked() > 20; }, 10s, 10ms));

  // Added c, changed a (its step), removed b.
  weir::testing::write_file(weir.flow_path("c.yaml"), flow_v("c", sink.url("/c"), 1));
  weir::testing::write_file(weir.flow_path("a.yaml"), flow_v("a", sink.url("/a"), 2));
  std::filesystem::remove(weir.flow_path("b.yaml"));
  REQUIRE(reload(weir, "reload done"));
  CHECK(contains(weir.log(), "flows=\"added 1, changed 1, removed 1\""));
  CHECK(contains(weir.log(), "flow removed flow=b by=reload"));
  CHECK(contains(weir.log(), "flow started flow=c"));
  CHECK(flow_names(weir) == std::set<std::string>{"a", "c"});
  CHECK(weir.post("/in/b", R"({"id": "b-after"})").status == 404);
  REQUIRE(weir.post("/in/c", R"({"id": "c1"})").status == 202);
  REQUIRE(weir.post("/in/a", R"({"id": "a-v2"})").status == 202);
  CHECK(wait_until([&] { return delivered_v(sink, "c1") == 1 && delivered_v(sink, "a-v2") == 2; }, 10s, 20ms));
  CHECK(json::parse(weir.admin("GET", "/flows/a").body)["active_version"] == 2);

  // An invalid file beside a changed one: refused whole, the error names file:line:col.
  weir::testing::write_file(weir.flow_path("d.yaml"), "flow: d\nfrom: { http: { path: /in/d } }\nto: [\n");
  weir::testing::write_file(weir.flow_path("a.yaml"), flow_v("a", sink.url("/a"), 3));
  REQUIRE(reload(weir, "reload failed"));
  CHECK(contains(weir.log(), weir.flow_path("d.yaml") + ":"));
  CHECK(weir.post("/in/d", R"({"id": "d1"})").status == 404);
  REQUIRE(weir.post("/in/a", R"({"id": "a-still-v2"})").status == 202);
  CHECK(wait_until([&] { return delivered_v(sink, "a-still-v2") == 2; }, 10s, 20ms));
  CHECK(json::parse(weir.admin("GET", "/flows/a").body)["active_version"] == 2);
  auto metrics = weir.admin("GET", "/metrics");
  CHECK(contains(metrics.body, "weir_reloads_total{result=\"ok\"} 1"));
  CHECK(contains(metrics.body, "weir_reloads_total{result=\"failed\"} 1"));

  // Lost 0: every event acknowledged on flow a across the reloads reached the sink.
  const size_t at_stop = posters.acked();
  REQUIRE(wait_until([&] { return posters.acked() > at_stop + 20; }, 10s, 10ms));
  posters.stop();
  const auto acked = posters.acked_ids();
  REQUIRE(acked.size() > 40);
  std::set<std::string> missing;
  REQUIRE(wait_until(
      [&] {
        auto got = sink.ids();
        missing.clear();
        for (const auto& id : acked)
          if (!got.count(id)) missing.insert(id);
        return missing.empty();
      },
      20s, 50ms));
  CHECK(missing.empty());
  CHECK(weir.terminate() == 0);
}
