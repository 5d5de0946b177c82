// A paced load through http-in and what the tests of receivers' outages read back from
// weir and its receivers (outage_test.cc, fanout_test.cc).
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "tests/support/harness.h"

namespace weir::itest {

// Posts {"id": "<prefix><n>", "n": n, "t": <µs since the epoch>} to `path` at `per_second`
// until stop() (or `limit` events), each answered before the next; keeps the acknowledged
// ids. `t` feeds the receiver's end-to-end latency (weir-sink's `e2e_ms`).
class PacedPoster {
 public:
  PacedPoster(WeirProcess& weir, std::string path, std::string prefix, int per_second, int limit)
      : thread_([this, &weir, path = std::move(path), prefix = std::move(prefix), per_second, limit] {
          using Clock = std::chrono::steady_clock;
          const auto every = std::chrono::microseconds(1'000'000 / per_second);
          auto next = Clock::now();
          for (int n = 0; n < limit && !stop_.load(); ++n) {
            std::string id = prefix + std::to_string(n);
            const int64_t t = std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
            auto r = weir.post(path, json{{"id", id}, {"n", n}, {"t", t}}.dump());
            {
              std::lock_guard lock(mu_);
              if (r.status == 202) acked_.insert(id);
              else ++refused_;
            }
            next += every;
            std::this_thread::sleep_until(next);  // the load's pace, not a wait for a condition
          }
          done_ = true;
        }) {}
  ~PacedPoster() { stop(); }
  PacedPoster(const PacedPoster&) = delete;
  PacedPoster& operator=(const PacedPoster&) = delete;
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  bool done() const { return done_.load(); }
  std::set<std::string> acked() const {
    std::lock_guard lock(mu_);
    return acked_;
  }
  int refused() const {
    std::lock_guard lock(mu_);
    return refused_;
  }

 private:
  mutable std::mutex mu_;
  std::set<std::string> acked_;
  int refused_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// A counter or gauge of a stage (the sink `out` by default) of flow `flow` from GET /metrics
// (-1: absent).
inline int64_t sink_metric(WeirProcess& weir, const std::string& name, const std::string& flow,
                           const std::string& stage = "sink:out") {
  auto r = weir.admin("GET", "/metrics");
  if (r.status != 200) return -1;
  const std::string key = name + "{flow=\"" + flow + "\",stage=\"" + stage + "\"} ";
  const size_t at = r.body.find(key);
  if (at == std::string::npos) return -1;
  return std::atoll(r.body.c_str() + at + key.size());
}

// A sink of `flow` as GET /sinks shows it (null when absent).
inline json sink_view(WeirProcess& weir, const std::string& flow, const std::string& sink = "out") {
  auto r = weir.admin("GET", "/sinks");
  if (r.status != 200) return json();
  auto all = json::parse(r.body, nullptr, false);
  if (!all.is_array()) return json();
  for (const auto& s : all) {
    if (s.value("flow", "") == flow && s.value("sink", "") == sink) return s;
  }
  return json();
}

inline size_t dead_letters(WeirProcess& weir) {
  auto r = weir.admin("GET", "/dlq");
  REQUIRE(r.status == 200);
  return json::parse(r.body).size();
}

// Event ids delivered (each once), and how many deliveries were repeats.
struct Seen {
  std::set<std::string> ids;
  int64_t duplicates = 0;
  void add(const SinkProcess& p) {
    for (const auto& id : p.ids()) {
      if (!ids.insert(id).second) ++duplicates;
    }
    duplicates += p.stat("duplicates");
  }
};

}  // namespace weir::itest
