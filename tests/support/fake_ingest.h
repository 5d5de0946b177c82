// FakeIngest: an Ingest that records every publish and completes it as the test says —
// at once (ok, or a failure for the first N), or never until the test calls complete_all().
// A reject (dead letter) is recorded apart and completed alike, never failed.
// Thread-safe: sources publish from their own threads; tests read from theirs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/ports/source.h"
#include "runtime/base/thread_annotations.h"

namespace weir::ctest {

class FakeIngest final : public weir::Ingest {
 public:
  enum class Mode { kAck, kHold };
  explicit FakeIngest(Mode mode = Mode::kAck, int fail_first = 0) : mode_(mode), fail_left_(fail_first) {}

  void publish(weir::IngestEvent event, std::chrono::milliseconds,
               std::function<void(const weir::Status&, const std::string&)> done) override {
    UniqueLock lock(mu_);
    events_.push_back(event);
    if (fail_left_ > 0) {
      --fail_left_;
      ++failed_;
      lock.unlock();
      done(weir::Status::unavailable("fake: JetStream down"), event.id);
      return;
    }
    if (mode_ == Mode::kHold) {
      held_.push_back({event.id, std::move(done)});
      return;
    }
    ++acked_;
    lock.unlock();
    done(weir::Status::ok(), event.id);
  }
  bool ready() const override { return true; }
  void reject(weir::IngestEvent event, std::string reason, std::chrono::milliseconds,
              std::function<void(const weir::Status&, const std::string&)> done) override {
    UniqueLock lock(mu_);
    rejected_.emplace_back(event, reason);
    if (mode_ == Mode::kHold) {
      held_.push_back({event.id, std::move(done)});
      return;
    }
    lock.unlock();
    done(weir::Status::ok(), event.id);
  }
  std::vector<std::pair<weir::IngestEvent, std::string>> rejected() const {
    MutexLock lock(mu_);
    return rejected_;
  }

  // Completes every held publish with ok.
  void complete_all() {
    std::vector<Held> held;
    {
      MutexLock lock(mu_);
      held.swap(held_);
      acked_ += static_cast<int>(held.size());
    }
    for (auto& h : held) h.done(weir::Status::ok(), h.id);
  }

  std::vector<weir::IngestEvent> events() const {
    MutexLock lock(mu_);
    return events_;
  }
  size_t count() const {
    MutexLock lock(mu_);
    return events_.size();
  }
  int acked() const {
    MutexLock lock(mu_);
    return acked_;
  }
  int failed() const {
    MutexLock lock(mu_);
    return failed_;
  }

 private:
  struct Held {
    std::string id;
    std::function<void(const weir::Status&, const std::string&)> done;
  };
  mutable Mutex mu_;
  const Mode mode_;
  int fail_left_ GUARDED_BY(mu_);
  int failed_ GUARDED_BY(mu_) = 0;
  int acked_ GUARDED_BY(mu_) = 0;
  std::vector<weir::IngestEvent> events_ GUARDED_BY(mu_);
  std::vector<std::pair<weir::IngestEvent, std::string>> rejected_ GUARDED_BY(mu_);
  std::vector<Held> held_ GUARDED_BY(mu_);
};

}  // namespace weir::ctest
