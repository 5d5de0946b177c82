// OwnNaks: per input (by stream sequence), how many of its redeliveries this process caused
// itself by naking it after a transient publish failure (publish_failure_is_transient in
// runtime/nats/bus.h: JetStream not answering during a leader election or an outage). The poison
// rule (docs/adr/0081-poison-events.md) subtracts them from the delivery count
// JetStream keeps, so a healthy event is not dead-lettered after a few elections; what is
// left counts what the rule is for: deliveries that crashed or wedged the process (AckWait
// redeliveries) and definite refusals (a full stream). docs/adr/0225-poison-own-naks.md.
//
// Process-local on purpose: after a restart the memory is gone and every earlier delivery
// counts, which is what the rule wants (a crash is a counted failure). In a cluster, a
// redelivery that reaches another instance counts there too. Bounded: past `capacity`
// inputs, new ones are not remembered (they count as before) until entries are forgotten.
//
// Thread-safe: recorded from the stage's completion threads, read on its pool thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "runtime/base/thread_annotations.h"

namespace weir {

class OwnNaks {
 public:
  static constexpr size_t kDefaultCapacity = 65536;
  explicit OwnNaks(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // The input at `seq` was naked after transient failures only: one more redelivery of ours.
  void record(uint64_t seq) {
    MutexLock lock(mu_);
    auto it = n_.find(seq);
    if (it != n_.end()) {
      ++it->second;
    } else if (n_.size() < capacity_) {
      n_.emplace(seq, 1);
      size_.store(n_.size(), std::memory_order_release);
    }
  }
  // The input was acked or terminated: it will not come back. Called for every acked
  // input: without a lock while nothing is remembered (the usual case). An entry recorded
  // on another thread and missed here lingers (its sequence never comes back) until the
  // capacity is reached, which only stops new entries: the rule then counts as before.
  void forget(uint64_t seq) {
    if (size_.load(std::memory_order_acquire) == 0) return;
    MutexLock lock(mu_);
    n_.erase(seq);
    size_.store(n_.size(), std::memory_order_release);
  }
  uint64_t count(uint64_t seq) const {
    if (size_.load(std::memory_order_acquire) == 0) return 0;
    MutexLock lock(mu_);
    auto it = n_.find(seq);
    return it == n_.end() ? 0 : it->second;
  }
  size_t size() const {
    MutexLock lock(mu_);
    return n_.size();
  }

 private:
  mutable Mutex mu_;
  std::unordered_map<uint64_t, uint64_t> n_ GUARDED_BY(mu_);
  std::atomic<size_t> size_{0};  // n_.size(), read without the lock
  size_t capacity_;
};

}  // namespace weir
