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
// redelivery that reaches another instance counts there too.
//
// Kept after the input is acked: an ack lost with a dropped connection brings the input
// back with JetStream's count still raised by every nak of ours, and the rule must still
// subtract them. Forgotten at the ack, they were not: in 2 of ~14 runs of the cut-connections
// test (connections living ~60 ms, outputs' PubAcks lost with them) inputs were dead-lettered
// as "failed 165–256 deliveries" at one delivery, a jump only a forgotten count explains
// (docs/adr/0292-deliveries-weir-was-handed.md). Bounded: past `capacity` inputs the lowest
// stream sequence, the oldest input, is forgotten.
//
// Thread-safe: recorded from the stage's completion threads, read on its pool thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>

#include "runtime/base/thread_annotations.h"

namespace weir {

class OwnNaks {
 public:
  static constexpr size_t kDefaultCapacity = 65536;
  explicit OwnNaks(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // The input at `seq` was naked after transient failures only: one more redelivery of ours.
  void record(uint64_t seq) {
    MutexLock lock(mu_);
    auto [it, added] = n_.try_emplace(seq, 0);
    ++it->second;
    if (added && n_.size() > capacity_) n_.erase(n_.begin());
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
  std::map<uint64_t, uint64_t> n_ GUARDED_BY(mu_);  // stream sequence → naks of ours
  std::atomic<size_t> size_{0};                     // n_.size(), read without the lock
  size_t capacity_;
};

}  // namespace weir
