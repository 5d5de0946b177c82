// Failover within 2 s (guarantee 9, docs/adr/0297-two-second-failover.md): an
// acked event in flight on an instance that dies (kill -9) is delivered by a peer of its
// cluster within 2 s, at the sink stage and at the flow stage; while an instance lives,
// what it holds past AckWait (1.5 s) is kept alive with in-progress acks, so a slow
// receiver and a slow flow get every event exactly once.
//
// The receiver is a ScriptedHttpServer that stamps every request's arrival on the test's
// steady clock, so a delivery's time after the kill is measured, not inferred.
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "tests/integration/jetstream.h"
#include "tests/support/harness.h"
#include "tests/support/scripted_http_server.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::ScriptedHttpServer;
using weir::testing::ScriptedReply;
using weir::testing::ScriptedRequest;
using weir::testing::wait_until;
using Clock = std::chrono::steady_clock;

namespace {

const std::vector<std::string> kCluster{"--cluster", "c1"};

// The guarantee, and what a measured delivery may exceed it by: the survivor's loop turn,
// its pull and the HTTP request on loopback take milliseconds; a 2-core machine shared with
// a build can delay a thread that long again. The ADR's figure is the measured worst case.
constexpr auto kFailover = 2000ms;
constexpr auto kSchedulingMargin = 500ms;

// Every delivery's arrival, by the event id in its JSON body; answers by `hold`'s verdict:
// held requests are answered only after `held_for`, the others at once with 204.
class Receiver {
 public:
  explicit Receiver(std::chrono::milliseconds held_for = 120s)
      : held_for_(held_for), server_([this](const ScriptedRequest& r) { return answer(r); }) {}

  std::string url() const { return server_.url("/out"); }
  void hold(bool on) { hold_ = on; }

  std::map<std::string, std::vector<Clock::time_point>> arrivals() const {
    std::lock_guard lock(mu_);
    return arrivals_;
  }
  size_t ids() const {
    std::lock_guard lock(mu_);
    return arrivals_.size();
  }
  size_t requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  ScriptedReply answer(const ScriptedRequest& r) {
    std::string id;
    try {
      id = json::parse(r.body).value("id", "");
    } catch (const std::exception&) {
      id = "(not json)";
    }
    {
      std::lock_guard lock(mu_);
      arrivals_[id].push_back(Clock::now());
      ++requests_;
    }
    ScriptedReply reply = ScriptedReply::with_status(204);
    if (hold_.load()) reply.delay = held_for_;
    return reply;
  }

  std::chrono::milliseconds held_for_;
  std::atomic<bool> hold_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::vector<Clock::time_point>> arrivals_;
  size_t requests_ = 0;
  ScriptedHttpServer server_;  // last: stopped before the state its script writes
};

void require_ready(WeirProcess& weir) {
  if (!weir.wait_ready()) FAIL(weir.describe());
}

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// The affected events' deliveries after `kill`: each one's first arrival after it.
struct AfterKill {
  size_t affected = 0;
  double worst_ms = 0, best_ms = 1e9;
  std::string worst_id;
};
AfterKill after_kill(const std::map<std::string, std::vector<Clock::time_point>>& arrivals, Clock::time_point kill,
                     const std::set<std::string>& affected) {
  AfterKill out;
  for (const auto& id : affected) {
    auto it = arrivals.find(id);
    if (it == arrivals.end()) continue;
    for (Clock::time_point t : it->second) {
      if (t < kill) continue;
      ++out.affected;
      const double ms = ms_between(kill, t);
      if (ms > out.worst_ms) out.worst_ms = ms, out.worst_id = id;
      out.best_ms = std::min(out.best_ms, ms);
      break;
    }
  }
  return out;
}

// A flow that runs slowly while now() is before the event's `slow_until` (ms since the
// epoch): `n` × `n` multiplications in the expression language, in the arm of a ?: that is
// evaluated only then (docs/flow-language.md). Afterwards the same event runs in
// microseconds.
std::string slow_flow(const std::string& sink_url) {
  return "flow: orders\n"
         "from: { http: { path: /in/orders } }\n"
         "steps:\n"
         "  - set: { spin: \"now() < this.slow_until ? this.xs.map(a => this.xs.map(b => a * b).sum()).sum() : 0\" }\n"
         "to: { out: { http: { url: \"" +
         sink_url + "\", retries: 8, timeout: 30s } } }\n";
}

int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json slow_event(const std::string& id, int64_t slow_until, int n) {
  json xs = json::array();
  for (int i = 0; i < n; ++i) xs.push_back(i % 97);
  return json{{"id", id}, {"slow_until", slow_until}, {"xs", xs}};
}

// Posts `count` slow events `prefix`0… to `weir` from 8 clients at once (so they reach its
// stage as a few bursts, whole batches); every one must be answered 202.
void post_all(const WeirProcess& weir, const std::string& prefix, int count, int64_t slow_until, int n) {
  std::vector<std::thread> posters;
  std::atomic<int> refused{0};
  for (int t = 0; t < 8; ++t) {
    posters.emplace_back([&, t] {
      for (int i = t; i < count; i += 8) {
        if (weir.post("/in/orders", slow_event(prefix + std::to_string(i), slow_until, n).dump()).status != 202)
          ++refused;
      }
    });
  }
  for (auto& p : posters) p.join();
  REQUIRE(refused == 0);
}

// How many elements make one event's slow run take about `target` on this machine: timed
// through `weir test` (the same interpreter) less the time of a run with one element (the
// process), so a faster or slower machine holds the batch about as long.
int elements_for(std::chrono::milliseconds target) {
  weir::testing::TempDir dir;
  const auto timed = [&](int n) {
    std::ofstream(dir.path() + "/f.yaml")
        << "flow: probe\nfrom: { http: { path: /p } }\nsteps:\n"
           "  - set: { spin: \"this.xs.map(a => this.xs.map(b => a * b).sum()).sum()\" }\n"
           "to: { out: { http: { url: \"http://127.0.0.1:9/x\" } } }\n"
           "tests:\n  - name: t\n    input: { xs: "
        << slow_event("p", 0, n)["xs"].dump() << " }\n    expect: { out: [ { } ] }\n";
    const auto t0 = Clock::now();
    run_cli({"test", dir.path() + "/f.yaml"});
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double process = timed(1);
  const double want = std::chrono::duration<double>(target).count();
  int n = 200;
  for (int round = 0; round < 6; ++round, n *= 2) {
    const double took = timed(n) - process;
    if (took >= want / 2) return std::max(50, static_cast<int>(n * std::sqrt(want / took)));
  }
  return n;
}

}  // namespace

TEST_CASE("kill -9 of an instance holding sink deliveries: its peer delivers them within 2 s",
          "[integration][cluster][failover]") {
  NatsServer nats;
  Receiver receiver;
  receiver.hold(true);  // A's deliveries are held by the receiver until A is gone
  const std::string flow = http_flow("orders", "/in/orders", receiver.url(), "retries: 8, timeout: 60s");
  WeirProcess a({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}, .args = kCluster});
  a.spawn();
  require_ready(a);

  // Fewer than the sink's 8 connections: every event is on the wire from A at once.
  constexpr int kEvents = 6;
  std::set<std::string> ids;
  for (int i = 0; i < kEvents; ++i) {
    const std::string id = "held-" + std::to_string(i);
    REQUIRE(a.post("/in/orders", json{{"id", id}}.dump()).status == 202);
    ids.insert(id);
  }
  REQUIRE(wait_until([&] { return receiver.ids() == ids.size(); }, 20s, 5ms));
  const Clock::time_point handed = Clock::now();

  // The survivor joins while A holds them; from now on the receiver answers at once.
  WeirProcess b({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}, .args = kCluster});
  b.spawn();
  require_ready(b);
  receiver.hold(false);
  // A holds them past twice AckWait before it dies: kept alive by in-progress acks, none is
  // redelivered to B meanwhile. The condition is elapsed time itself.
  std::this_thread::sleep_until(handed + 3500ms);
  CHECK(receiver.requests() == ids.size());
  CHECK(stage_counter(b, "weir_events_received_total", "sink:out") == 0);

  const Clock::time_point killed = Clock::now();
  a.kill9();
  INFO(b.describe());
  const bool all = wait_until(
      [&] {
        auto arr = receiver.arrivals();
        return std::all_of(ids.begin(), ids.end(), [&](const std::string& id) { return arr[id].size() >= 2; });
      },
      30s, 2ms);
  CHECK(all);
  const auto arrivals = receiver.arrivals();
  const AfterKill k = after_kill(arrivals, killed, ids);
  std::cout << "sink-stage failover: " << k.affected << " of " << ids.size()
            << " held deliveries delivered by the survivor, " << k.best_ms << " to " << k.worst_ms
            << " ms after kill -9 (worst " << k.worst_id << "), held " << ms_between(handed, killed)
            << " ms by A before it died\n";
  CHECK(k.affected == ids.size());
  CHECK(k.worst_ms <= std::chrono::duration<double, std::milli>(kFailover + kSchedulingMargin).count());
  // Exactly A's attempt and B's: no other re-send.
  for (const auto& [id, times] : arrivals) CHECK(times.size() == 2);
}

TEST_CASE("kill -9 of an instance holding a flow batch: its peer delivers the batch within 2 s",
          "[integration][cluster][failover]") {
  NatsServer nats;
  Receiver receiver;
  const int n = elements_for(40ms);
  const std::string flow = slow_flow(receiver.url());
  WeirProcess a({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}, .args = kCluster});
  a.spawn();
  require_ready(a);
  // A fast event first: A's stage leaves its careful start (ADR 0081) and measures a run
  // time of microseconds, so it asks for whole batches.
  REQUIRE(a.post("/in/orders", slow_event("warm", 0, n).dump()).status == 202);
  REQUIRE(wait_until([&] { return receiver.ids() == 1; }, 20s, 5ms));
  // A's pace now, on this machine as loaded as it is: 20 slow events, timed at the receiver.
  constexpr int kPace = 20;
  post_all(a, "pace-", kPace, epoch_ms() + 3'600'000, n);
  REQUIRE(wait_until([&] { return receiver.ids() == 1 + kPace; }, 30s, 5ms));
  std::vector<Clock::time_point> paced;
  for (const auto& [id, times] : receiver.arrivals())
    if (id.rfind("pace-", 0) == 0) paced.push_back(times.front());
  std::sort(paced.begin(), paced.end());
  const double per_event_ms = ms_between(paced.front(), paced.back()) / (kPace - 1);

  // A takes the whole burst in its window (the survivor is not running yet) and runs it
  // one event per ~40 ms (short loop turns: one input blocks the delivery loop, and its
  // in-progress acks, that long — longer on a loaded machine). The kill comes 900 ms before `slow_until`: what A held
  // reaches the survivor after AckWait less the time since A's last in-progress ack (≥ ~1 s), when the events run in
  // microseconds, so what is measured is the failover, not run time.
  // As many as A runs in 8.1 s at that pace: ~3 s' worth left in hand at the kill (5.1 s).
  const int kEvents = std::clamp(static_cast<int>(8100 / std::max(per_event_ms, 1.0)), 60, 1000);
  const auto posted = Clock::now();
  const int64_t slow_until = epoch_ms() + 6000;
  std::set<std::string> ids;
  for (int i = 0; i < kEvents; ++i) ids.insert("batch-" + std::to_string(i));
  post_all(a, "batch-", kEvents, slow_until, n);
  REQUIRE(wait_until([&] { return stage_counter(a, "weir_events_received_total", "flow") >= kEvents + kPace + 1; }, 10s,
                     5ms));
  WeirProcess b({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}, .args = kCluster});
  b.spawn();
  require_ready(b);
  std::this_thread::sleep_until(posted + 5100ms);  // the condition is elapsed time itself
  // A held its batch ~5 s, past AckWait three times over: kept alive, none of it went to B.
  const double b_flow_before = stage_counter(b, "weir_events_received_total", "flow");
  const double a_in_flight = stage_counter(a, "weir_events_in_flight", "flow");
  const Clock::time_point killed = Clock::now();
  a.kill9();
  std::set<std::string> affected;
  {
    auto before = receiver.arrivals();
    for (const auto& id : ids)
      if (before.count(id) == 0) affected.insert(id);
  }
  INFO(b.describe());
  const bool all = wait_until([&] { return receiver.ids() == ids.size() + kPace + 1; }, 30s, 2ms);
  CHECK(all);
  const auto arrivals = receiver.arrivals();
  const AfterKill k = after_kill(arrivals, killed, affected);
  std::cout << "flow-stage failover: " << n << " elements per event, " << per_event_ms << " ms each on A; A held "
            << a_in_flight << " in its flow stage and had delivered " << ids.size() - affected.size() << " of "
            << ids.size() << " at kill -9; the survivor delivered the other " << k.affected << " " << k.best_ms
            << " to " << k.worst_ms << " ms after it (worst " << k.worst_id << ")\n";
  CHECK(!affected.empty());  // A died holding part of its batch, else nothing was tested
  CHECK(b_flow_before == 0);
  CHECK(k.affected == affected.size());
  CHECK(k.worst_ms <= std::chrono::duration<double, std::milli>(kFailover + kSchedulingMargin).count());
  // Once each, but for what A's sink had sent and not yet acked when it died: re-sent by
  // the survivor (guarantee 4).
  size_t resent = 0;
  for (const auto& [id, times] : arrivals) {
    if (times.size() > 1 && times.front() < killed) ++resent;
    else CHECK(times.size() == 1);
  }
  std::cout << "flow-stage failover: " << resent << " sent by A before the kill and re-sent by the survivor\n";
  CHECK(resent <= 8);  // at most A's sink connections' worth
}

TEST_CASE("a receiver and a flow slower than AckWait get every event exactly once", "[integration][failover]") {
  NatsServer nats;
  // Every answer takes 2 s (past the sink's 1.5 s AckWait) and every event runs ~40 ms in
  // the flow: a stage that measured fast events before (the warm-up) takes a burst in
  // whole batches, held for seconds (past the flow's AckWait) until it has measured the
  // slow ones (ADR 0262), and the sink's 8 connections keep the later deliveries queued for
  // rounds of 2 s. A redelivery at either stage would show in its received count (and
  // the sink's at the receiver).
  Receiver receiver(2000ms);
  const int n = elements_for(40ms);
  const std::string flow = slow_flow(receiver.url());
  WeirProcess a({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}, .args = kCluster});
  WeirProcess b({.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}, .args = kCluster});
  a.spawn();
  b.spawn();
  require_ready(a);
  require_ready(b);

  constexpr int kWarm = 8;
  for (int i = 0; i < kWarm; ++i) {
    WeirProcess& to = i % 2 == 0 ? a : b;
    REQUIRE(to.post("/in/orders", slow_event("warm-" + std::to_string(i), 0, n).dump()).status == 202);
  }
  REQUIRE(wait_until([&] { return receiver.ids() == kWarm; }, 20s, 5ms));
  std::cout << "slow path warm-up: flow stages ran " << stage_counter(a, "weir_events_received_total", "flow")
            << " and " << stage_counter(b, "weir_events_received_total", "flow") << " fast events\n";
  receiver.hold(true);

  constexpr int kEvents = 100;
  const int64_t slow_until = epoch_ms() + 3'600'000;
  std::set<std::string> ids;
  {
    std::vector<std::thread> posters;
    std::atomic<int> refused{0};
    for (int t = 0; t < 4; ++t) {
      posters.emplace_back([&, t] {
        for (int i = t; i < kEvents; i += 4) {
          WeirProcess& to = i % 2 == 0 ? a : b;
          const std::string id = "slow-" + std::to_string(i);
          if (to.post("/in/orders", slow_event(id, slow_until, n).dump()).status != 202) ++refused;
        }
      });
    }
    for (auto& p : posters) p.join();
    REQUIRE(refused == 0);
    for (int i = 0; i < kEvents; ++i) ids.insert("slow-" + std::to_string(i));
  }
  INFO(a.describe());
  INFO(b.describe());
  const auto total = [&](const char* name, const char* stage) {
    return stage_counter(a, name, stage) + stage_counter(b, name, stage);
  };
  const auto started = Clock::now();
  REQUIRE(wait_until([&] { return total("weir_events_acked_total", "sink:out") >= kEvents + kWarm; }, 60s, 20ms));
  const auto arrivals = receiver.arrivals();
  size_t twice = 0;
  for (const auto& [id, times] : arrivals) twice += times.size() > 1 ? 1 : 0;
  const double flow_received = total("weir_events_received_total", "flow");
  const double sink_received = total("weir_events_received_total", "sink:out");
  std::cout << "slow path: " << kEvents << " events of " << n << " elements, delivered in "
            << ms_between(started, Clock::now()) << " ms; flow stages received " << flow_received << ", acked "
            << total("weir_events_acked_total", "flow") << "; sink stages received " << sink_received << ", acked "
            << total("weir_events_acked_total", "sink:out") << "; the receiver got " << receiver.requests()
            << " requests for " << arrivals.size() << " ids, " << twice << " more than once; sink errors "
            << total("weir_events_errors_total", "sink:out") << ", consumers recreated "
            << total("weir_consumer_recreated_total", "sink:out") << "+"
            << total("weir_consumer_recreated_total", "flow") << ", ack failures "
            << total("weir_ack_failures_total", "sink:out") << "\n";
  for (const auto& [id, times] : arrivals) {
    if (times.size() < 2) continue;
    std::cout << "  " << id << " arrived at";
    for (auto t : times) std::cout << " " << ms_between(started, t);
    std::cout << " ms\n";
  }
  CHECK(arrivals.size() == ids.size() + kWarm);
  CHECK(twice == 0);
  CHECK(receiver.requests() == ids.size() + kWarm);
  // Each stage was handed each event once: no redelivery at the flow stage either (the
  // outputs' deduplication would hide one from the receiver).
  CHECK(flow_received == kEvents + kWarm);
  CHECK(sink_received == kEvents + kWarm);
}

TEST_CASE("durables an older weir left with longer AckWaits get 1.5 s at start", "[integration][failover]") {
  NatsServer nats;
  Receiver receiver;
  const std::string flow = http_flow("orders", "/in/orders", receiver.url());
  WeirOptions o{.nats_url = nats.url(), .flows = {{"orders.yaml", flow}}};
  {
    WeirProcess first(o);
    first.start();
    REQUIRE(first.terminate() == 0);
  }
  // What the durables carried before (ADR 0082's flow AckWait, ADR 0293's sink AckWait).
  js_set_consumer_ack_wait(nats.url(), "weir_orders", "orders", 12s);
  js_set_consumer_ack_wait(nats.url(), "weir_orders", "orders-to-out", 5s);
  REQUIRE(js_consumer_config(nats.url(), "weir_orders", "orders").ack_wait == 12s);
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  CHECK(js_consumer_config(nats.url(), "weir_orders", "orders").ack_wait == 1500ms);
  CHECK(js_consumer_config(nats.url(), "weir_orders", "orders-to-out").ack_wait == 1500ms);
  REQUIRE(weir.post("/in/orders", json{{"id", "after"}}.dump()).status == 202);
  CHECK(wait_until([&] { return receiver.ids() == 1; }, 20s, 5ms));
}
