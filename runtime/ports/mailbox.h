// Mailbox: how a source thread that polls file descriptors (exec, mqtt) learns that its
// JetStream writes completed. Publish callbacks run on bus threads and may outlive the
// source (hold the Mailbox by shared_ptr): they only append to the list and wake the
// source's thread through an eventfd, which that thread polls beside its own fds.
// Thread-safe; `take` and `drain_fd` belong to the source's thread.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

template <typename T>
class Mailbox {
 public:
  struct Completion {
    std::shared_ptr<T> item;
    Status status;
  };

  Mailbox() : event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Mailbox() {
    if (event_fd_ >= 0) ::close(event_fd_);
  }
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // < 0 when the eventfd could not be created (the source refuses to start).
  int event_fd() const { return event_fd_; }

  void post(std::shared_ptr<T> item, Status s) {
    bool first;
    {
      MutexLock lock(mu_);
      first = completions_.empty();
      completions_.push_back({std::move(item), std::move(s)});
    }
    // One wake-up per batch: until the thread takes the list, later completions ride along.
    if (first) wake();
  }
  void wake() const {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(event_fd_, &one, sizeof one);
  }
  void drain_fd() const {
    uint64_t v;
    [[maybe_unused]] ssize_t r = ::read(event_fd_, &v, sizeof v);
  }
  std::vector<Completion> take() {
    MutexLock lock(mu_);
    return std::exchange(completions_, {});
  }

 private:
  Mutex mu_;
  std::vector<Completion> completions_ GUARDED_BY(mu_);
  const int event_fd_;
};

// When a failed JetStream write is tried again: 100 ms after the first failure, doubling
// up to 5 s (the write keeps its event id, so a write that did land is deduplicated).
inline std::chrono::milliseconds write_retry_delay(int attempts) {
  const int shift = std::clamp(attempts, 0, 6);
  return std::min(std::chrono::milliseconds(100) * (1 << shift), std::chrono::milliseconds(5000));
}

}  // namespace weir
