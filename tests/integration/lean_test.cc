// ADR 0161: libcurl (and the ~20 libraries Debian's libcurl pulls in) is loaded
// when weir first needs it, not at exec; an HTTP sink then delivers as before. Checked on
// the real weir binary through /proc/PID/maps and /proc/PID/task/*/comm.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <string>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::threads_named;
using weir::testing::wait_until;

namespace {

bool maps_contain(pid_t pid, const std::string& needle) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("libcurl is loaded at the first delivery, not at start, and runs on the sink loop", "[integration][lean]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"lean.yaml", http_flow("lean", "/in/lean", sink.url("/out"))}}});
  weir.start();
  const pid_t pid = weir.process().pid();
  INFO(weir.describe());

  // Ready, with an HTTP sink started, and nothing sent yet.
  CHECK_FALSE(maps_contain(pid, "libcurl.so"));
  CHECK_FALSE(maps_contain(pid, "libgnutls"));
  CHECK(threads_named(pid, "weir-http") == 0);

  for (int i = 0; i < 3; ++i) {
    // weir-sink counts distinct events by the body's "id".
    const std::string body = R"({"id":"lean-)" + std::to_string(i) + R"("})";
    REQUIRE(weir.post("/in/lean", body, {"Content-Type: application/json"}).status == 202);
  }
  REQUIRE(wait_until([&] { return sink.stat("received") >= 3; }, 30s, 20ms));
  CHECK(sink.stat("unique") == 3);
  CHECK(maps_contain(pid, "libcurl.so"));
  // The requests went out from the sink loop, where the sink stage read them (ADR 0260):
  // no HTTP thread of its own. With one delivery loop (ADR 0272) that is weir-delivery.
  const int loops = delivery_loops_logged(weir.log());
  REQUIRE(loops != 0);
  CHECK(threads_named(pid, loops == 1 ? "weir-delivery" : "weir-sinks") == 1);
  CHECK(threads_named(pid, "weir-http") == 0);
}

// ADR 0263: the weir binary is linked with mimalloc (except under the sanitizers), and its
// malloc is the one the process uses: `weir version` reports the allocator that served a
// probe block, and a running weir has the library mapped.
TEST_CASE("weir's malloc is mimalloc's, except in the sanitizer builds", "[integration][lean]") {
  const std::string expected = WEIR_EXPECT_ALLOCATOR;
  CliResult v = run_cli({"version"});
  INFO(v.output);
  REQUIRE(v.code == 0);
  CHECK(v.output.find("allocator: " + expected) != std::string::npos);

  // And a weir on it takes events in and delivers them (libcurl, OpenSSL and cnats allocate
  // from it too).
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"alloc.yaml", http_flow("alloc", "/in/alloc", sink.url("/out"))}}});
  weir.start();
  INFO(weir.describe());
  CHECK(maps_contain(weir.process().pid(), "libmimalloc") == (expected == "mimalloc"));
  for (int i = 0; i < 20; ++i) {
    const std::string body = R"({"id":"alloc-)" + std::to_string(i) + R"("})";
    REQUIRE(weir.post("/in/alloc", body, {"Content-Type: application/json"}).status == 202);
  }
  REQUIRE(wait_until([&] { return sink.stat("received") >= 20; }, 30s, 20ms));
  CHECK(sink.stat("unique") == 20);
}

// A fixed, small set of threads for any number of flows. 50 flows, each
// having delivered one event (so every lazily started loop runs): at most 16 threads.
TEST_CASE("fifty flows run on at most sixteen threads", "[integration][lean]") {
  NatsServer nats;
  SinkProcess sink;
  WeirOptions options{.nats_url = nats.url()};
  constexpr int kFlows = 50;
  for (int i = 0; i < kFlows; ++i) {
    const std::string name = "many" + std::to_string(i);
    options.flows[name + ".yaml"] = http_flow(name, "/in/" + name, sink.url("/out"));
  }
  WeirProcess weir(std::move(options));
  weir.start();
  const pid_t pid = weir.process().pid();
  INFO(weir.describe());
  std::set<std::string> acked;
  for (int i = 0; i < kFlows; ++i) {
    const std::string name = "many" + std::to_string(i);
    REQUIRE(weir.post("/in/" + name, R"({"id":")" + name + R"("})", {"Content-Type: application/json"}).status == 202);
    acked.insert(name);
  }
  std::vector<std::string> lost;
  const bool all = wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        return lost.empty();
      },
      60s, 20ms);
  INFO("first of the " << lost.size() << " lost: " << (lost.empty() ? "" : lost.front()));
  REQUIRE(all);  // every flow delivered its event: lost 0
  const auto names = weir::testing::thread_names(pid);
  int total = 0;
  std::string listing;
  for (const auto& [name, n] : names) {
    total += n;
    listing += name + "=" + std::to_string(n) + " ";
  }
  INFO("threads: " << listing);
  CHECK(names.count("weir-http") == 0);  // HTTP requests are sent from the sink loop
  const int loops = delivery_loops_logged(weir.log());
  REQUIRE(loops != 0);
  if (loops == 1) {
    CHECK(names.count("weir-delivery") == 1);
  } else {
    CHECK(names.count("weir-sinks") == 1);
    CHECK(names.count("weir-flows") == 1);
  }
  CHECK(total <= 16);
}

// ADR 0272: `delivery_loops: 1` runs every flow and sink stage on one loop thread with one
// NATS connection ("weir-delivery"); 2 gives each kind its own ("weir-flows" and
// "weir-sinks", connections "weir-flows" and "weir-sinks"). Both deliver every event once,
// through two flows each with an HTTP sink, and say at start which they run.
TEST_CASE("delivery_loops: one shared loop or one for flows and one for sinks, by threads and connections",
          "[integration][lean]") {
  const int loops = GENERATE(1, 2);
  INFO("delivery_loops: " << loops);
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"a.yaml", http_flow("loopa", "/in/a", sink.url("/out"))},
                              {"b.yaml", http_flow("loopb", "/in/b", sink.url("/out"))}},
                    .config = "delivery_loops: " + std::to_string(loops) + "\n"});
  weir.start();
  INFO(weir.describe());
  CHECK(delivery_loops_logged(weir.log()) == loops);
  constexpr int kEach = 20;
  for (int i = 0; i < kEach; ++i) {
    for (const char* path : {"a", "b"}) {
      const std::string id = std::string("loops-") + path + "-" + std::to_string(i);
      REQUIRE(weir.post(std::string("/in/") + path, R"({"id":")" + id + R"("})", {"Content-Type: application/json"})
                  .status == 202);
    }
  }
  REQUIRE(wait_until([&] { return sink.stat("unique") >= 2 * kEach; }, 30s, 20ms));
  CHECK(sink.stat("unique") == 2 * kEach);

  const auto names = weir::testing::thread_names(weir.process().pid());
  std::string listing;
  for (const auto& [name, n] : names) listing += name + "=" + std::to_string(n) + " ";
  INFO("threads: " << listing);
  CHECK(names.count("weir-delivery") == (loops == 1 ? 1U : 0U));
  CHECK(names.count("weir-flows") == (loops == 2 ? 1U : 0U));
  CHECK(names.count("weir-sinks") == (loops == 2 ? 1U : 0U));

  weir::testing::HttpClient mon;
  auto connz = mon.request("GET", "http://127.0.0.1:" + std::to_string(nats.monitor_port()) + "/connz");
  REQUIRE(connz.status == 200);
  std::set<std::string> conns;
  const json connz_json = json::parse(connz.body);
  for (const auto& c : connz_json["connections"]) conns.insert(c.value("name", ""));
  INFO(connz.body);
  CHECK(conns.count("weir-delivery") == (loops == 1 ? 1U : 0U));
  CHECK(conns.count("weir-flows") == (loops == 2 ? 1U : 0U));
  CHECK(conns.count("weir-sinks") == (loops == 2 ? 1U : 0U));
  CHECK(conns.count("weir-ingress") == 1);
}
