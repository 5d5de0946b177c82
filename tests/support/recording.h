// Test doubles for sources: an Ingest that records what it is given (and acks at once),
// and a Source that publishes a numbered event every few milliseconds.
//
// Thread-safe: sources publish from their own threads while tests read.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <string>
#include <thread>
#include <vector>

#include "runtime/ports/source.h"
#include "runtime/base/thread_annotations.h"

namespace weir::cluster::testing {

struct Recorded {
  IngestEvent event;
  std::chrono::steady_clock::time_point at;

  std::string header(const std::string& name) const {
    for (const auto& [k, v] : event.headers) {
      if (k == name) return v;
    }
    return "";
  }
};

class RecordingIngest final : public Ingest {
 public:
  void publish(IngestEvent event, std::chrono::milliseconds,
               std::function<void(const Status&, const std::string&)> done) override {
    std::string id = event.id;
    {
      MutexLock lock(mu_);
      events_.push_back(Recorded{std::move(event), std::chrono::steady_clock::now()});
    }
    done(Status::ok(), id);
  }
  bool ready() const override { return true; }

  std::vector<Recorded> events() const {
    MutexLock lock(mu_);
    return events_;
  }
  size_t size() const {
    MutexLock lock(mu_);
    return events_.size();
  }

 private:
  mutable Mutex mu_;
  std::vector<Recorded> events_ GUARDED_BY(mu_);
};

// Publishes "<name>-<n>" every `period` while started; counts starts, stops and refusals.
class PulseSource final : public Source {
 public:
  struct Stats {
    std::atomic<int> running{0};  // started and not stopped, across all instances sharing it
    std::atomic<int> starts{0};
    std::atomic<int> refused{0};  // publishes the ingest refused (lease not held)
    std::atomic<bool> fail_start{false};
    Mutex mu;
    SourceContext last_context GUARDED_BY(mu);  // what the last start was given
  };

  PulseSource(std::string name, Stats& stats, std::chrono::milliseconds period = std::chrono::milliseconds(5))
      : name_(std::move(name)), stats_(stats), period_(period) {}
  ~PulseSource() override { stop(); }

  Status start(SourceContext& context) override {
    if (stats_.fail_start.load()) return Status::unavailable("pulse: told to fail");
    context_ = context;
    {
      MutexLock lock(stats_.mu);
      stats_.last_context = context;
    }
    stats_.starts++;
    stats_.running++;
    started_ = true;
    thread_ = std::thread([this] { run(); });
    return Status::ok();
  }
  void stop() override {
    if (!started_) return;
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    started_ = false;
    stats_.running--;
  }
  bool singleton() const override { return true; }
  SourceContext& context() { return context_; }

 private:
  void run() {
    UniqueLock lock(mu_);
    int n = 0;
    while (!stopping_) {
      lock.unlock();
      IngestEvent e;
      e.id = name_ + "-" + std::to_string(n++);
      e.body = "{}";
      context_.ingest->publish(std::move(e), std::chrono::milliseconds(1000),
                               [&stats = stats_](const Status& s, const std::string&) {
                                 if (!s) stats.refused++;
                               });
      lock.lock();
      lock.wait_for(cv_, period_, [this]() REQUIRES(mu_) { return stopping_; });
    }
  }

  std::string name_;
  Stats& stats_;
  std::chrono::milliseconds period_;
  SourceContext context_;
  std::thread thread_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool started_ = false;
};

}  // namespace weir::cluster::testing
