// Two minutes of faults in rotation under steady load —
// sink failures, resets and timeouts, kill -9 and SIGTERM of nats-server, SIGSTOP/SIGCONT
// and kill -9 of weir — lose no acknowledged event, and weir's resident memory and open
// descriptors stay flat across the rounds. Run it alone with
//   build/weir-integration-tests "[rotating]"     (WEIR_ROTATION_SECONDS=N: another length)
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <thread>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::http_request;
using weir::testing::NatsServer;
using weir::testing::proc_usage;
using weir::testing::ProcUsage;
using weir::testing::wait_until;

namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  int round = 0;
  std::string fault;
  pid_t pid = 0;
  ProcUsage usage;
  int64_t recovery_ms = 0;
};

bool ready(const WeirProcess& weir) {
  return http_request("GET", weir.admin_url("/readyz"), "", {}, 500ms).status == 200;
}

// The body id of every dead letter (GET /dlq, every page) → its stage, deliveries and reason.
std::map<std::string, std::string> dead_letter_ids(const WeirProcess& weir) {
  std::map<std::string, std::string> out;
  std::string after;
  for (int page = 0; page < 1000; ++page) {
    HttpReply r = weir.admin("GET", "/dlq?limit=1000" + after);
    if (r.status != 200) throw std::runtime_error("GET /dlq answered " + std::to_string(r.status) + ": " + r.body);
    for (const auto& d : json::parse(r.body)) {
      const json& event = d.contains("event") ? d["event"] : json::object();
      std::string id = event.is_object() ? event.value("id", "") : "";
      out[id] = d.value("stage", "") + ", " + std::to_string(d.value("deliveries", 0)) +
                " deliveries: " + d.value("reason", "");
    }
    if (r.header("x-more") != "true") break;
    after = "&after_seq=" + r.header("x-next-after-seq");
  }
  return out;
}

// What explains a stuck sink consumer beside jetstream_state(): where the server's delivery
// and ack floor stand and when it last delivered or saw an ack (a consumer that delivers
// but never sees acks vs one that stopped delivering), and weir's own view (its sink stage
// metrics; the consumer's bookkeeping is in weir's log as "consumer holds messages …",
// "consumer starved …" (ADR 0235) or "pull request unanswered" warnings). The flow stream
// is a work queue: an acked message is deleted, so ack-pending entries above the ack floor
// may point at messages no longer stored — nats-server 2.9.10 then starves new messages
// (ADR 0235), which weir's starvation watch should have undone within ~25 s.
std::string stuck_sink_details(int monitor_port, const WeirProcess& weir) {
  std::string out;
  HttpReply r = http_request(
      "GET", "http://127.0.0.1:" + std::to_string(monitor_port) + "/jsz?accounts=true&streams=true&consumers=true", "",
      {}, 2s);
  try {
    for (const auto& account : json::parse(r.body).value("account_details", json::array())) {
      for (const auto& s : account.value("stream_detail", json::array())) {
        out += "  stream " + s.value("name", "") + ": first seq " +
               std::to_string(s.value("state", json::object()).value("first_seq", 0)) + ", deleted " +
               std::to_string(s.value("state", json::object()).value("num_deleted", 0)) + "\n";
        for (const auto& c : s.value("consumer_detail", json::array())) {
          const json& d = c.value("delivered", json::object());
          const json& a = c.value("ack_floor", json::object());
          out += "  consumer " + c.value("name", "") + ": delivered stream seq " +
                 std::to_string(d.value("stream_seq", 0)) + " (last active " + d.value("last_active", "?") +
                 "), ack floor stream seq " + std::to_string(a.value("stream_seq", 0)) + " (last active " +
                 a.value("last_active", "?") + ")\n";
        }
      }
    }
  } catch (const std::exception& e) {
    out += std::string("  unreadable /jsz: ") + e.what() + "\n";
  }
  HttpReply m = weir.admin("GET", "/metrics");
  std::istringstream lines(m.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("sink:") != std::string::npos && line.find("_bucket") == std::string::npos) out += "  " + line + "\n";
  }
  return out;
}

// Where each of weir's threads is (gdb, when installed): a delivery-pool thread or the
// HTTP client loop blocked in a call would show here. Only printed on a failure.
std::string thread_stacks(pid_t pid) {
  const std::string cmd = "command -v gdb >/dev/null && timeout 30 gdb -p " + std::to_string(pid) +
                          " -batch -nx -ex 'thread apply all bt 10' 2>/dev/null | grep -E '^(Thread|#)'";
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && out.size() < 60000) out.append(buf, n);
    pclose(f);
  }
  return out.empty() ? "(no stacks: gdb missing or not permitted)\n" : out;
}

}  // namespace

TEST_CASE("two minutes of rotating faults lose nothing acked and keep weir's memory and descriptors flat",
          "[integration][faults][rotating][rss]") {
  const char* env = std::getenv("WEIR_ROTATION_SECONDS");
  const auto length = std::chrono::seconds(env ? std::atoi(env) : 120);
  NatsServer nats;
  SinkProcess sink({"--reserve", "100000"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 50, " WEIR_TEST_RETRY ", timeout: 1s")}},
                    // A sink gets min(retries + 1, max_deliver) attempts: let its 50 retries govern.
                    .config = "max_deliver: 1000\n"});
  weir.start();
  Posters posters(weir.ingress_url("/in/orders"), 4, std::chrono::microseconds(2000));
  auto more_acks = [&](size_t n, std::chrono::milliseconds timeout) {
    size_t target = posters.acked() + n;
    return wait_until([&] { return posters.acked() >= target; }, timeout, 5ms);
  };
  REQUIRE(more_acks(300, 20s));

  // Each fault in turn; weir's own kill -9 once, early (round 2), so that one weir
  // process lives through all the other rounds and its memory and descriptors can be
  // compared across them. A sink fault or a freeze is held for a few seconds: the held
  // fault is the scenario (as the 3 s outage of faults_test).
  const std::vector<std::string> faults{"sink fails 30 %",  "nats-server kill -9", "weir SIGSTOP 3 s",
                                        "sink resets 20 %", "nats-server SIGTERM", "sink slower than timeout"};
  std::vector<Sample> samples;
  auto began = Clock::now();
  int round = 0;
  size_t cycle = 0;
  while (Clock::now() - began < length) {
    const std::string fault = round == 2 ? "weir kill -9" : faults[cycle++ % faults.size()];
    INFO("round " << round << ": " << fault << "\n" << weir.describe());
    auto t0 = Clock::now();
    if (fault == "sink fails 30 %" || fault == "sink resets 20 %" || fault == "sink slower than timeout") {
      const json on = fault == "sink fails 30 %"    ? json{{"fail_percent", 30}}
                      : fault == "sink resets 20 %" ? json{{"reset_percent", 20}}
                                                    : json{{"delay_ms", 1500}};  // the flow's timeout is 1 s
      sink.control(on);
      CHECK(more_acks(100, 30s));  // ingress goes on meanwhile
      std::this_thread::sleep_until(t0 + 4s);
      sink.control({{"fail_percent", 0}, {"reset_percent", 0}, {"delay_ms", 0}});
    } else if (fault == "nats-server kill -9") {
      nats.kill();
      nats.start();
    } else if (fault == "nats-server SIGTERM") {
      nats.stop();
      nats.start();
    } else if (fault == "weir SIGSTOP 3 s") {
      weir.process().signal(SIGSTOP);
      std::this_thread::sleep_for(3s);
      weir.process().signal(SIGCONT);
    } else if (fault == "weir kill -9") {
      weir.kill9();
      weir.spawn();
    }
    // Recovered: ready, and acknowledging again.
    CHECK(wait_until([&] { return ready(weir); }, 45s, 20ms));
    CHECK(more_acks(100, 45s));
    int64_t recovery_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    samples.push_back({round, fault, weir.process().pid(), proc_usage(weir.process().pid()), recovery_ms});
    ++round;
  }
  posters.stop();

  std::set<std::string> acked = posters.acked_ids();
  std::vector<std::string> lost;
  // An acked event that is in the dead-letter stream is not lost, but it was
  // not delivered: counted and printed apart. Lost = neither delivered nor dead-lettered.
  std::map<std::string, std::string> dead;
  std::vector<std::string> dead_lettered, really_lost;
  wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        if (!lost.empty()) dead = dead_letter_ids(weir);
        dead_lettered.clear();
        really_lost.clear();
        for (const auto& id : lost) (dead.count(id) ? dead_lettered : really_lost).push_back(id);
        return really_lost.empty();
      },
      90s, 500ms);
  if (lost.empty()) dead = dead_letter_ids(weir);
  CHECK(really_lost.empty());
  if (!really_lost.empty()) {
    // Stuck in the stream (pending, ack pending) or never stored: JetStream's view and weir's log say which.
    const std::string log = weir.log();
    FAIL_CHECK("lost " << really_lost.size() << " of " << acked.size() << " acked, first: " << really_lost.front()
                       << ", last: " << really_lost.back() << "\nJetStream now:\n"
                       << jetstream_state(nats.monitor_port()) << stuck_sink_details(nats.monitor_port(), weir)
                       << "weir log (end):\n"
                       << log.substr(log.size() > 8000 ? log.size() - 8000 : 0) << "weir threads:\n"
                       << thread_stacks(weir.process().pid()));
  }
  CHECK(dead_lettered.empty());  // max_deliver is raised: nothing should run out of attempts
  if (!dead_lettered.empty()) {
    std::cout << "  " << dead_lettered.size() << " acked events dead-lettered instead of delivered, first "
              << dead_lettered.front() << ": " << dead[dead_lettered.front()] << "\n";
  }

  json stats = sink.stats();
  // ADR 0235: how often a consumer starved by pending entries without messages (left by a
  // nats-server kill -9) was created again — the cause of the losses before that fix.
  std::vector<std::string> starved;  // those warnings, printed below
  {
    const std::string log = weir.log();
    for (size_t at = log.find("consumer starved"); at != std::string::npos; at = log.find("consumer starved", at + 1)) {
      const size_t begin = log.rfind('\n', at), end = log.find('\n', at);
      starved.push_back(log.substr(begin == std::string::npos ? 0 : begin + 1,
                                   end == std::string::npos ? std::string::npos : end - begin - 1));
    }
  }
  std::cout << "rotating faults, " << round << " rounds in "
            << std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - began).count() << " s: acked "
            << acked.size() << ", not acked " << posters.failed() << ", lost " << really_lost.size()
            << ", dead-lettered " << dead.size() << " (" << dead_lettered.size()
            << " of them not delivered), sink unique " << stats.value("unique", 0) << ", duplicates "
            << stats.value("duplicates", 0) << " (same key " << stats.value("resends_with_same_key", 0)
            << ", other key " << stats.value("resends_with_other_key", 0) << "), starved consumers created again "
            << starved.size() << "\n";
  for (const auto& line : starved) std::cout << "  " << line << "\n";
  for (const Sample& s : samples) {
    std::cout << "  round " << s.round << " " << s.fault << ": back in " << s.recovery_ms << " ms; weir pid " << s.pid
              << " RSS " << s.usage.rss_kb << " kB, fds " << s.usage.fds << "\n";
  }
  for (auto [status, n] : posters.status_counts()) std::cout << "  HTTP " << status << ": " << n << "\n";

  CHECK(stats.at("resends_with_other_key").get<int64_t>() == 0);
  CHECK(posters.key_mismatches() == 0);
  for (auto [status, n] : posters.status_counts()) {
    INFO("HTTP " << status << " x" << n);
    CHECK((status == 202 || status == 503 || status == 0));
  }
  // Flat: within the weir process that lived through the rounds after the kill -9, the
  // last sample against the first. Each round reconnects NATS or re-opens sink
  // connections; a descriptor or buffer leaked per round adds up over the ~20 rounds.
  // Bounds: +8 descriptors (the sink pool's 8 connections may be open or closed at a
  // sample; a leaked NATS connection or socket per round would pass it in 9 rounds) and
  // +16 MiB of RSS (weir holds ~17 MiB; allocator arenas and caches settle within a few
  // MiB; a leaked sink request per delivery or a buffer per reconnect would pass it).
  std::map<pid_t, std::vector<const Sample*>> by_pid;
  for (const Sample& s : samples) by_pid[s.pid].push_back(&s);
  size_t compared = 0;
  for (const auto& [pid, list] : by_pid) {
    if (list.size() < 3) continue;
    ++compared;
    const ProcUsage& first = list.front()->usage;
    const ProcUsage& last = list.back()->usage;
    INFO("weir pid " << pid << ": rounds " << list.front()->round << ".." << list.back()->round << ", RSS "
                     << first.rss_kb << " → " << last.rss_kb << " kB, fds " << first.fds << " → " << last.fds);
    CHECK(first.rss_kb > 0);
    CHECK(last.fds <= first.fds + 8);
    CHECK(last.rss_kb <= first.rss_kb + 16 * 1024);
  }
  CHECK(compared > 0);
}
