// The fault matrix, each fault through weir's documented surface
// (real weir binary, real nats-server, real weir-sink on loopback), each checked by event
// id: every acknowledged (2xx) id reaches the sink, duplicates are counted and must carry
// the first key. kill -9 of nats-server (single node, and the stream leader of an R3
// cluster); weir frozen past AckWait with a peer on the same NATS; sinks that fail 10 % at
// random, answer slower than their timeout (weir's RSS sampled) or reset mid-answer;
// JetStream's disk full (a tmpfs store); a rotating-fault run ([rotating], 2 min) with
// weir's RSS and descriptor count sampled. Every test prints its figures (docs/reliability.md).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

#include "tests/support/nats_cluster.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::cluster::testing::NatsCluster;
using weir::testing::http_request;
using weir::testing::NatsServer;
using weir::testing::proc_usage;
using weir::testing::ProcUsage;
using weir::testing::Tmpfs;
using weir::testing::wait_until;

namespace {

using Clock = std::chrono::steady_clock;

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Waits until every acked id reached the sink; fails naming what is missing.
// `context`, when given, adds what explains a loss (JetStream's state, the instances' logs).
void check_all_delivered(const std::set<std::string>& acked, const SinkProcess& sink, std::chrono::seconds timeout,
                         const std::string& what, const std::function<std::string()>& context = {}) {
  std::vector<std::string> lost = wait_delivered(acked, sink, timeout);
  CHECK(lost.empty());
  if (!lost.empty())
    FAIL_CHECK(what << ": lost " << lost.size() << " of " << acked.size() << " acked, first: " << lost.front()
                    << (context ? "\n" + context() : std::string()));
}

// One figures line per test, as docs/reliability.md quotes them.
void print_figures(const std::string& what, const std::set<std::string>& acked, const std::vector<Posters*>& posters,
                   const SinkProcess& sink, const std::string& extra = "") {
  json stats = sink.stats();
  size_t failed = 0;
  for (const Posters* p : posters) failed += p->failed();
  std::cout << what << ": acked " << acked.size() << ", not acked " << failed << ", lost "
            << missing(acked, sink.ids()).size() << ", sink unique " << stats.value("unique", 0) << ", duplicates "
            << stats.value("duplicates", 0) << " (same key " << stats.value("resends_with_same_key", 0)
            << ", other key " << stats.value("resends_with_other_key", 0) << ")" << extra << "\n";
  for (auto [status, n] : status_counts(posters)) std::cout << "  HTTP " << status << ": " << n << "\n";
}

// Only "stored" (202) or "not stored, try again" (503, or no answer while weir or its
// connection is down): never an answer that hides whether the event was stored.
void check_statuses(const std::vector<Posters*>& posters) {
  for (auto [status, n] : status_counts(posters)) {
    INFO("HTTP " << status << " x" << n);
    CHECK((status == 202 || status == 503 || status == 0));
  }
  size_t mismatches = 0;
  for (const Posters* p : posters) mismatches += p->key_mismatches();
  CHECK(mismatches == 0);
}

bool ready(const WeirProcess& weir) {
  return http_request("GET", weir.admin_url("/readyz"), "", {}, 500ms).status == 200;
}

// Dead letters of this instance; the first one's stage, reason and delivery count are
// printed, so a failed `== 0` says why they died.
size_t dead_letters(const WeirProcess& weir) {
  HttpReply r = weir.admin("GET", "/dlq");
  if (r.status != 200) throw std::runtime_error("GET /dlq answered " + std::to_string(r.status) + ": " + r.body);
  json list = json::parse(r.body);
  if (!list.empty()) {
    const json& d = list.front();
    std::cout << "  dead letters: " << list.size() << ", first: stage " << d.value("stage", "") << ", deliveries "
              << d.value("deliveries", 0) << ", reason " << d.value("reason", "") << "\n";
  }
  return list.size();
}

std::string mib(int64_t kb) { return std::to_string(kb / 1024) + "." + std::to_string(kb % 1024 * 10 / 1024) + " MiB"; }

const std::vector<std::string> kCluster{"--cluster", "c1"};

// A sink gets at most min(retries + 1, max_deliver) attempts (docs/guarantees.md "Dead letters"); the
// sink fault tests raise max_deliver so that the sink's own retries are what they test.
const std::string kSinkRetriesGovern = "max_deliver: 1000\n";

}  // namespace

TEST_CASE("kill -9 of nats-server under load, restarted on the same store and port, loses no acked event",
          "[integration][faults][matrix]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}}});
  weir.start();
  Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(1000));
  std::vector<Posters*> all{&posters};
  REQUIRE(more_acks(all, 300, 20s));

  nats.kill();  // SIGKILL: no goodbye to clients, no flush, no leader hand-over
  auto down_at = Clock::now();
  CHECK(wait_until([&] { return !ready(weir); }, 5s, 20ms));
  int64_t noticed_ms = ms_since(down_at);
  nats.start();  // same store dir and ports; returns once /healthz answers
  auto up_at = Clock::now();
  CHECK(wait_until([&] { return ready(weir); }, 45s, 20ms));
  int64_t ready_ms = ms_since(up_at);
  size_t acked_before = posters.acked();
  CHECK(more_acks(all, 1, 45s));
  int64_t first_ack_ms = ms_since(up_at);
  INFO(weir.describe());
  REQUIRE(more_acks(all, 300, 45s));
  posters.stop();
  REQUIRE(posters.acked() > acked_before);

  std::set<std::string> acked = acked_ids(all);
  check_all_delivered(acked, sink, 30s, "nats-server kill -9");
  print_figures("nats-server kill -9", acked, all, sink,
                "; /readyz 503 after " + std::to_string(noticed_ms) + " ms, 200 again " + std::to_string(ready_ms) +
                    " ms after the restart, first 202 after " + std::to_string(first_ack_ms) + " ms");
  check_statuses(all);
  CHECK(sink.stat("resends_with_other_key") == 0);
}

// Was [known-bug] (ADR 0170): delivery stopped after the kill in about half the runs under
// load (a leftover `outstanding` count in the PullConsumer kept its window shut); fixed,
// 15 of 15 since. A failure prints JetStream's consumer state, weir's metrics and log.
TEST_CASE("kill -9 of the R3 stream leader under load loses no acked event", "[integration][faults][matrix][r3]") {
  NatsCluster nats;
  SinkProcess sink;
  const std::string flow = http_flow("orders", "/in/orders", sink.url("/out"),
                                     "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s");
  WeirProcess weir({.nats_url = nats.urls(),
                    .flows = {{"orders.yaml", flow}},
                    // The default max_deliver (5): the flow stage's naks after failed
                    // publishes during the election do not count (ADR 0225); at 5 they
                    // once dead-lettered a healthy event (ASan run, 2026-12-01).
                    .config = "nats: { replicas: 3 }\n",
                    .args = kCluster});
  weir.start();
  std::string leader;
  REQUIRE(wait_until(
      [&] {
        leader = stream_leader(nats.monitor_port(0), "weirc_c1__orders");
        return !leader.empty();
      },
      10s, 50ms));
  const size_t victim = nats.index_of(leader);
  const size_t other = victim == 0 ? 1 : 0;

  Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(1000));
  std::vector<Posters*> all{&posters};
  REQUIRE(more_acks(all, 500, 20s));
  nats.kill(victim);
  auto killed_at = Clock::now();
  std::string new_leader;
  // The election is nats-server's (its raft, on a loaded 2-CPU host it has taken 13 s, and
  // once over 20 s with a leader by 36 s); this test's claim is what weir does meanwhile.
  // The bound only stops an election that never ends.
  CHECK(wait_until(
      [&] {
        new_leader = stream_leader(nats.monitor_port(other), "weirc_c1__orders");
        return !new_leader.empty() && new_leader != leader;
      },
      60s, 20ms));
  int64_t election_ms = ms_since(killed_at);
  size_t acked_at_kill = posters.acked();
  // Ingress goes on through the new leader while the old one is dead.
  CHECK(more_acks(all, 500, 30s));
  int64_t resumed_ms = ms_since(killed_at);
  nats.start(victim);
  CHECK(more_acks(all, 500, 30s));
  posters.stop();
  REQUIRE(posters.acked() > acked_at_kill);

  std::set<std::string> acked = acked_ids(all);
  check_all_delivered(acked, sink, 30s, "R3 leader kill -9");
  if (!missing(acked, sink.ids()).empty()) {
    // Seen once in a full suite on a machine at load 15 (election 13 s): delivery stopped
    // after the kill. What the consumers and weir's stages were doing, for the next time.
    const std::string log = weir.log();
    FAIL_CHECK("JetStream now:\n"
               << jetstream_state(nats.monitor_port(other)) << "weir /metrics:\n"
               << weir.admin("GET", "/metrics").body << "weir log (tail):\n"
               << log.substr(log.size() > 30000 ? log.size() - 30000 : 0));
  }
  print_figures("R3 stream leader " + leader + " kill -9", acked, all, sink,
                "; new leader " + new_leader + " after " + std::to_string(election_ms) + " ms, 500 more acked " +
                    std::to_string(resumed_ms) + " ms after the kill");
  check_statuses(all);
  CHECK(sink.stat("resends_with_other_key") == 0);
  CHECK(dead_letters(weir) == 0);  // at the default max_deliver: the election's naks do not count
}

TEST_CASE("weir frozen (SIGSTOP) past AckWait: its peer takes over, late work is deduplicated, nothing lost",
          "[integration][faults][matrix][cluster]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string flow = http_flow("orders", "/in/orders", sink.url("/out"),
                                     "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s");
  WeirProcess a({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}, .args = kCluster});
  WeirProcess b({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}, .args = kCluster});
  a.spawn();
  b.spawn();
  if (!a.wait_ready()) FAIL(a.describe());
  if (!b.wait_ready()) FAIL(b.describe());

  Posters to_a(a.ingress_url("/in/orders"), 2, std::chrono::microseconds(1000));
  Posters to_b(b.ingress_url("/in/orders"), 2, std::chrono::microseconds(1000));
  std::vector<Posters*> all{&to_a, &to_b};
  REQUIRE(more_acks(all, 600, 20s));

  b.process().signal(SIGSTOP);
  auto stopped_at = Clock::now();
  // Clients of the frozen instance keep trying (their requests time out): when it
  // wakes, it answers and publishes what it read before and during the freeze.
  std::set<std::string> acked_before = acked_ids(all);
  const auto state = [&] {
    return "JetStream:\n" + jetstream_state(nats.monitor_port()) + "a: " + a.describe() + "\nb: " + b.describe();
  };
  // The freeze lasts well past the flow consumer's AckWait (1.5 s, ADR 0297; 12 s when this
  // test was written, ADR 0082): a frozen instance sends no in-progress acks, so the
  // survivor must get b's unacknowledged batches redelivered.
  std::this_thread::sleep_until(stopped_at + 13s);
  check_all_delivered(acked_before, sink, 30s, "acked before the freeze, delivered while b is frozen", state);
  int64_t taken_over_ms = ms_since(stopped_at);
  if (!more_acks({&to_a}, 200, 20s)) FAIL_CHECK("a took no 200 more while b was frozen\n" << state());
  b.process().signal(SIGCONT);
  auto resumed_at = Clock::now();
  if (!wait_until([&] { return ready(b); }, 30s, 20ms)) FAIL_CHECK("b not ready 30 s after SIGCONT\n" << state());
  if (!more_acks({&to_b}, 100, 30s)) FAIL_CHECK("b took no 100 more after SIGCONT\n" << state());
  int64_t b_back_ms = ms_since(resumed_at);
  to_a.stop();
  to_b.stop();

  std::set<std::string> acked = acked_ids(all);
  check_all_delivered(acked, sink, 30s, "SIGSTOP past AckWait", state);
  print_figures("weir SIGSTOP 13 s then SIGCONT (2 instances)", acked, all, sink,
                "; everything acked before the freeze delivered " + std::to_string(taken_over_ms) +
                    " ms after it; the frozen one acked again " + std::to_string(b_back_ms) + " ms after SIGCONT");
  check_statuses(all);
  CHECK(sink.stat("resends_with_other_key") == 0);
  CHECK(a.running());
  CHECK(b.running());
}

TEST_CASE("a sink failing 10 % of deliveries at random gets every event, re-sends carry their first key",
          "[integration][faults][matrix][sink]") {
  NatsServer nats;
  SinkProcess sink({"--fail-percent", "10", "--fail-status", "503"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}},
                    .config = kSinkRetriesGovern});
  weir.start();
  Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(1000));
  std::vector<Posters*> all{&posters};
  REQUIRE(more_acks(all, 2000, 30s));
  posters.stop();
  std::set<std::string> acked = acked_ids(all);
  auto settle = Clock::now();
  check_all_delivered(acked, sink, 60s, "10 % random failures");
  print_figures("sink failing 10 % at random", acked, all, sink,
                "; random failures " + std::to_string(sink.stat("random_failures")) + ", all delivered " +
                    std::to_string(ms_since(settle)) + " ms after the last ack");
  CHECK(sink.stat("random_failures") > 0);
  CHECK(sink.stat("resends_with_other_key") == 0);
  CHECK(dead_letters(weir) == 0);  // 9 attempts at 10 %: a dead letter would be a 1e-9 event
  check_statuses(all);
  for (auto [status, n] : posters.status_counts()) CHECK(status == 202);
}

TEST_CASE("a sink that resets the connection half-way through its answer gets every event",
          "[integration][faults][matrix][sink]") {
  NatsServer nats;
  SinkProcess sink({"--reset-percent", "20"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s")}},
                    .config = kSinkRetriesGovern});
  weir.start();
  Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(1000));
  std::vector<Posters*> all{&posters};
  REQUIRE(more_acks(all, 1000, 30s));
  posters.stop();
  std::set<std::string> acked = acked_ids(all);
  auto settle = Clock::now();
  check_all_delivered(acked, sink, 60s, "20 % resets mid-answer");
  print_figures("sink resetting 20 % mid-answer", acked, all, sink,
                "; resets " + std::to_string(sink.stat("resets")) + ", all delivered " +
                    std::to_string(ms_since(settle)) + " ms after the last ack");
  CHECK(sink.stat("resets") > 0);
  CHECK(sink.stat("resends_with_other_key") == 0);
  CHECK(dead_letters(weir) == 0);
  check_statuses(all);
}

// [rss]: the memory bound does not hold under ASan (its quarantine keeps freed memory, up to
// 256 MiB), so scripts/sanitize.sh leaves the [rss] tests out.
TEST_CASE("a sink slower than its timeout: retried with the same key, weir's memory stays bounded",
          "[integration][faults][matrix][sink][rss]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                           "retries: 100, " WEIR_TEST_RETRY ", timeout: 500ms, max_connections: 8")}},
       .config = kSinkRetriesGovern});
  weir.start();
  Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(1000));
  std::vector<Posters*> all{&posters};
  REQUIRE(more_acks(all, 500, 20s));
  const int64_t warm_kb = proc_usage(weir.process().pid()).rss_kb;

  // Every answer now comes after 2 s, four times the sink's timeout: each delivery times
  // out, the events pile up in JetStream (not in weir), ingress goes on.
  sink.control({{"delay_ms", 2000}});
  std::vector<ProcUsage> samples;
  auto slow_at = Clock::now();
  // Sampled every 500 ms over 20 s of a slow sink (the wait's condition is the sampling).
  wait_until(
      [&] {
        samples.push_back(proc_usage(weir.process().pid()));
        return false;
      },
      20s, 500ms);
  const size_t acked_while_slow = posters.acked();
  sink.control({{"delay_ms", 0}});
  CHECK(more_acks(all, 200, 20s));
  posters.stop();
  std::set<std::string> acked = acked_ids(all);
  check_all_delivered(acked, sink, 90s, "slow sink");

  int64_t max_kb = 0, fds_max = 0;
  for (const ProcUsage& u : samples) {
    max_kb = std::max(max_kb, u.rss_kb);
    fds_max = std::max<int64_t>(fds_max, u.fds);
  }
  print_figures("sink slower than its timeout (2 s vs 500 ms) for " + std::to_string(ms_since(slow_at) / 1000) + " s",
                acked, all, sink,
                "; weir RSS " + mib(warm_kb) + " warm, at most " + mib(max_kb) +
                    " while the sink was slow, fds at most " + std::to_string(fds_max) + "; " +
                    std::to_string(acked_while_slow) + " acked by the end of it");
  CHECK(sink.stat("resends_with_same_key") > 0);
  CHECK(sink.stat("resends_with_other_key") == 0);
  // Bounded: at most max_connections (8) requests are in flight, the backlog waits in
  // JetStream. A pool that kept timed-out requests or their buffers would grow with every
  // timeout (~40 of them a second here); 64 MiB over the warm figure is far above what 8
  // in-flight 300-byte events and the stage's bounded batches need, and far below 20 s of
  // leaked retries at ingress rate.
  CHECK(max_kb > 0);
  CHECK(max_kb <= warm_kb + 64 * 1024);
  CHECK(dead_letters(weir) == 0);  // max_deliver is raised: the sink's 100 retries govern
  check_statuses(all);
}

// Found by this test on the old stages (2 of 5 runs): weir aborted with glibc's "corrupted
// size vs. prev_size" right after nats-server was restarted while its ingress connection
// flapped. With the stages on the delivery pool (ADR 0150) it passed 12 of 12 runs on a
// loaded machine, so it is back in the suite; it needs root for the tmpfs.
TEST_CASE("JetStream's disk full: 503 and never 2xx while it is, nothing acked is lost, recovers when space returns",
          "[integration][faults][matrix][disk]") {
  REQUIRE(::geteuid() == 0);  // mounting the small tmpfs store needs root (CI and scripts/test.sh run as root)
  Tmpfs disk(24 << 20);
  NatsServer nats(disk.path() + "/store");
  SinkProcess sink;
  // The sink refuses for as long as the disk is full (20 s and more on a slow or sanitized
  // weir): at the default max_deliver 5 events were dead-lettered, not lost (ASan job).
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 50, " WEIR_TEST_RETRY ", timeout: 2s")}},
                    .config = kSinkRetriesGovern});
  weir.start();
  Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(1000));
  std::vector<Posters*> all{&posters};
  REQUIRE(more_acks(all, 200, 20s));

  // The sink refuses, so events stay stored; a filler takes all but ~1 MiB of the disk
  // (after start: nats-server sizes JetStream's storage from the free space it sees then).
  sink.control({{"status", 503}});
  const std::string filler = disk.path() + "/filler";
  {
    std::ofstream out(filler, std::ios::binary);
    std::string block(1 << 20, 'f');
    int64_t blocks = disk.free_bytes() / (1 << 20) - 1;
    for (int64_t i = 0; i < blocks; ++i) out.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  INFO(weir.describe());
  // Disk full: ingress refuses; wait for a run of refusals.
  size_t failed_before = posters.failed();
  REQUIRE(wait_until([&] { return posters.failed() >= failed_before + 100; }, 60s, 20ms));
  auto full_at = Clock::now();
  const int64_t free_when_full = disk.free_bytes();
  HttpReply during = weir.post("/in/orders", R"({"id": "probe-full"})", {"Content-Type: application/json"});
  CHECK(during.status == 503);
  CHECK_FALSE(during.header("retry-after").empty());

  // Space returns: the filler goes, the sink accepts again.
  std::filesystem::remove(filler);
  sink.control({{"status", 204}});
  auto freed_at = Clock::now();
  // nats-server 2.9.10 does not recover from ENOSPC by itself: its JetStream stays wedged
  // (/jsz does not answer, every publish times out) until it is restarted. Give it 10 s,
  // then restart it on the same store, as an operator would.
  bool by_itself = wait_until([&] { return ready(weir) && more_acks(all, 1, 500ms); }, 10s, 100ms);
  if (!by_itself) {
    nats.kill();
    nats.start();
  }
  CHECK(more_acks(all, 200, 45s));
  int64_t recovered_ms = ms_since(freed_at);
  posters.stop();

  // Never 2xx for an event that was not stored: every 2xx id is delivered.
  std::set<std::string> acked = acked_ids(all);
  check_all_delivered(acked, sink, 60s, "disk full");
  if (!missing(acked, sink.ids()).empty()) {
    FAIL_CHECK("JetStream now:\n" << jetstream_state(nats.monitor_port()) << "weir log:\n" << weir.log());
  }
  size_t refused_while_full = 0;
  for (const auto& r : posters.records()) {
    if (r.sent >= full_at && r.answered < freed_at && r.status != 202) ++refused_while_full;
  }
  print_figures("JetStream disk full (24 MiB tmpfs)", acked, all, sink,
                "; " + std::to_string(free_when_full) + " bytes free when full, " + std::to_string(refused_while_full) +
                    " refused while full; " + (by_itself ? "recovered by itself" : "nats-server restarted after 10 s") +
                    ", 200 more acked " + std::to_string(recovered_ms) + " ms after space returned");
  check_statuses(all);
  CHECK(sink.stat("resends_with_other_key") == 0);
}
