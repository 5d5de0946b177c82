// The flow consumer's AckWait is
// short and the stage keeps a batch waiting for its PubAcks alive; on SIGTERM with publishes stuck in a frozen
// nats-server, the clients waiting for them get a 503 with Retry-After saying the event
// may still be stored — before the flows are torn down — and weir exits 0.
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "tests/support/harness.h"
#include "tests/integration/jetstream.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

double metric(const WeirProcess& weir, const std::string& name, const std::string& labels = "") {
  auto r = weir.admin("GET", "/metrics");
  for (const auto& [key, sample] : parse_metrics(r.body)) {
    if (key == name && sample.first == labels) return sample.second;
  }
  return -1;
}

// Process state letter from /proc/<pid>/stat ('T' when stopped).
char proc_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

// SIGSTOP for the length of a scope: the server keeps its sockets but answers nothing.
struct Frozen {
  pid_t pid;
  explicit Frozen(pid_t p) : pid(p) {
    ::kill(pid, SIGSTOP);
    // Stopping is asynchronous: wait until it took effect before relying on it.
    if (!wait_until([&] { return proc_state(pid) == 'T'; }, 5s, 1ms)) {
      throw std::runtime_error("nats-server did not stop");
    }
  }
  ~Frozen() { ::kill(pid, SIGCONT); }
};

}  // namespace

TEST_CASE("SIGTERM with publishes stuck in a frozen NATS answers them 503 and exits 0", "[integration][faults]") {
  NatsServer nats;
  SinkProcess sink;
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                    "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}},
                .config = "http: { ack_timeout: 30s }\ndrain_timeout: 1s\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/orders", json{{"id", "warm-1"}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("warm-1") == 1; }, 20s, 50ms));

  // A batch waits up to one publish timeout (5 s) for its PubAcks, kept alive by
  // in-progress acks meanwhile; AckWait is how long a peer waits for a dead instance's
  // batch (docs/adr/0297-two-second-failover.md).
  CHECK(js_consumer_config(nats.url(), "weir_orders", "orders").ack_wait == std::chrono::milliseconds(1500));
  CHECK(js_consumer_config(nats.url(), "weir_orders", "orders-to-out").ack_wait == std::chrono::milliseconds(1500));
  CHECK(metric(weir, "weir_ack_failures_total", "flow=\"orders\",stage=\"flow\"") == 0);

  std::vector<HttpReply> replies(3);
  std::vector<std::thread> clients;
  std::optional<int> code;
  int64_t exit_ms = -1;
  {
    Frozen frozen(nats.pid());
    for (size_t i = 0; i < replies.size(); ++i) {
      clients.emplace_back([&, i] {
        replies[i] = weir.post("/in/orders", json{{"id", "stuck-" + std::to_string(i)}}.dump(), {}, 20s);
      });
    }
    // Written to the socket, waiting for PubAcks that cannot come (cnats notices the dead
    // server only after two missed pings, ~4 s).
    CHECK(wait_until([&] { return metric(weir, "weir_ingress_pending_publishes") == 3; }, 3s, 20ms));
    const auto term_at = std::chrono::steady_clock::now();
    code = weir.terminate(20s);
    exit_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - term_at).count();
    for (auto& t : clients) t.join();
  }
  CHECK(code == std::optional<int>(0));
  std::cout << "SIGTERM with 3 publishes stuck in a frozen NATS: exit " << (code ? *code : -1) << " after " << exit_ms
            << " ms (drain_timeout 1s), answers";
  for (const auto& r : replies) std::cout << " " << r.status;
  std::cout << "\n";
  for (const auto& r : replies) {
    INFO("answer: " << r.status << " " << r.body);
    CHECK(r.status == 503);
    CHECK_FALSE(r.header("retry-after").empty());
    CHECK(r.body.find("may still be stored") != std::string::npos);
  }
}

TEST_CASE("a publish nats-server never acknowledges is answered 503 once, after ack_timeout", "[integration][faults]") {
  NatsServer nats;
  SinkProcess sink;
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                    "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}},
                .config = "http: { ack_timeout: 1s }\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/orders", json{{"id", "warm-1"}}.dump()).status == 202);

  HttpReply r;
  {
    Frozen frozen(nats.pid());
    // The deadline sweeper wakes on a coarse tick; the timeout still fires, once.
    r = weir.post("/in/orders", json{{"id", "late-1"}}.dump(), {}, 10s);
    CHECK(metric(weir, "weir_ingress_pending_publishes") == 0);
  }
  INFO("answer: " << r.status << " " << r.body);
  CHECK(r.status == 503);
  CHECK_FALSE(r.header("retry-after").empty());
  CHECK(r.body.find("did not acknowledge in time") != std::string::npos);
  CHECK(r.body.find("may still be stored") != std::string::npos);
  // Once thawed, the write that was sent is stored after all (the 503 said it might be),
  // and its late PubAck finds nothing to complete a second time.
  CHECK(wait_until([&] { return sink.ids().count("late-1") == 1; }, 20s, 50ms));
  REQUIRE(weir.post("/in/orders", json{{"id", "after-1"}}.dump()).status == 202);
  CHECK(wait_until([&] { return sink.ids().count("after-1") == 1; }, 20s, 50ms));
  CHECK(weir.running());
}

TEST_CASE("past backlog.max_pending events waiting for a PubAck, ingress answers 503 at once",
          "[integration][backpressure]") {
  NatsServer nats;
  SinkProcess sink;
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                    "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}},
                .config = "http: { ack_timeout: 10s }\nbacklog: { max_pending: 2 }\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/orders", json{{"id", "warm-1"}}.dump()).status == 202);

  std::vector<HttpReply> waiting(2);
  std::vector<std::thread> clients;
  HttpReply third;
  {
    Frozen frozen(nats.pid());
    for (size_t i = 0; i < waiting.size(); ++i) {
      clients.emplace_back([&, i] {
        waiting[i] = weir.post("/in/orders", json{{"id", "wait-" + std::to_string(i)}}.dump(), {}, 20s);
      });
    }
    REQUIRE(wait_until([&] { return metric(weir, "weir_ingress_pending_publishes") == 2; }, 3s, 20ms));
    // The cap is reached: refused without waiting for anything.
    third = weir.post("/in/orders", json{{"id", "third-1"}}.dump(), {}, 5s);
    CHECK(metric(weir, "weir_ingress_rejected_total", "flow=\"orders\",stage=\"ingress\"") == 1);
  }
  for (auto& t : clients) t.join();
  INFO("third: " << third.status << " " << third.body);
  CHECK(third.status == 503);
  CHECK_FALSE(third.header("retry-after").empty());
  CHECK(third.body.find("too many events waiting to be stored") != std::string::npos);
  // The two that waited are stored once NATS is back (their PubAcks come within ack_timeout).
  for (const auto& r : waiting) CHECK(r.status == 202);
  CHECK(wait_until([&] { return sink.ids().count("wait-0") && sink.ids().count("wait-1"); }, 20s, 50ms));
  CHECK_FALSE(sink.ids().count("third-1"));
}

// Weir closing its own NATS connections (SIGTERM) is no fault, so it logs
// one info line per connection, no "nats disconnected" warning; a server lost while weir
// runs still is a warning.
TEST_CASE("SIGTERM logs the NATS connections closed as info, and a lost server as a warning",
          "[integration][shutdown]") {
  NatsServer nats;
  SinkProcess sink;
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}}};
  {
    WeirProcess weir(o);
    weir.start();
    INFO(weir.describe());
    REQUIRE(weir.post("/in/orders", json{{"id", "one"}}.dump()).status == 202);
    REQUIRE(wait_until([&] { return sink.ids().count("one") == 1; }, 20s, 50ms));
    CHECK(weir.terminate() == std::optional<int>(0));
    const std::string log = weir.log();
    INFO(log);
    CHECK(log.find(" info nats connection closed") != std::string::npos);
    CHECK(log.find("nats disconnected") == std::string::npos);
    CHECK(log.find("not recorded by cnats") == std::string::npos);
  }
  {
    WeirProcess weir(o);
    weir.start();
    INFO(weir.describe());
    nats.kill();
    CHECK(wait_until([&] { return weir.log().find(" warn nats disconnected") != std::string::npos; }, 20s, 50ms));
    CHECK(weir.log().find("nats connection closed") == std::string::npos);
    nats.start();
    CHECK(wait_until([&] { return weir.admin("GET", "/readyz").status == 200; }, 30s, 50ms));
    CHECK(weir.terminate() == std::optional<int>(0));
  }
}

// A frozen nats-server (SIGSTOP: it accepts bytes into its socket buffer and reads none)
// while a flow delivers to a core NATS sink and to an HTTP sink: SIGTERM still ends weir
// within drain_timeout plus a margin, exit 0; nothing on a loop thread may block on the
// server for longer.
TEST_CASE("SIGTERM while nats-server is frozen and a NATS-sink flow runs exits within drain_timeout",
          "[integration][faults]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string relay = "flow: relay\nfrom: {http: {path: /in/relay}}\nto:\n  bus: {nats: {subject: out.relay}}\n";
  WeirOptions o{.nats_url = nats.url(),
                .flows = {{"relay.yaml", relay},
                          {"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"), "timeout: 2s")}},
                .config = "drain_timeout: 2s\n"};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  // Big events keep the delivery connection's buffers busy when the server stops reading.
  const std::string pad(60000, 'p');
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 2; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; !stop.load(); ++i) {
        auto r = weir.post(c == 0 ? "/in/relay" : "/in/orders",
                           json{{"id", "e" + std::to_string(c) + "-" + std::to_string(i)}, {"pad", pad}}.dump(), {},
                           3s);
        if (r.status == 202) ++accepted;
      }
    });
  }
  REQUIRE(wait_until([&] { return accepted.load() >= 200; }, 30s, 20ms));
  std::optional<int> code;
  int64_t exit_ms = -1;
  {
    Frozen frozen(nats.pid());
    // Long enough for every connection's buffers to fill against the frozen server.
    std::this_thread::sleep_for(3s);  // the condition is the server having been frozen a while
    const auto term_at = std::chrono::steady_clock::now();
    code = weir.terminate(30s);
    exit_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - term_at).count();
    stop = true;
    for (auto& t : clients) t.join();
  }
  std::cout << "SIGTERM with nats-server frozen, NATS and HTTP sinks busy: exit " << (code ? *code : -1) << " after "
            << exit_ms << " ms (drain_timeout 2s), " << accepted.load() << " events accepted before\n";
  const std::string log_after = weir.log();
  INFO(log_after);
  CHECK(code == std::optional<int>(0));
  // drain_timeout, then the teardown: one backlog request (1 s at most) and one connect
  // attempt of a loop connection being rebuilt (its 2 s timeout) at most, not one per flow
  // or per retry; plus 1 s for the process's own exit on a loaded 2-CPU machine or under
  // ASan (both maxima together measured 5.04-5.09 s), far below one wait per flow or retry.
  CHECK(exit_ms < 2000 + 3000 + 1000);
}
