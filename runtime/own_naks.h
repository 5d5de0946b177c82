// OwnNaks: per input (by stream sequence), how many of its redeliveries this process caused
// itself by naking it after a transient publish failure (publish_failure_is_transient in
// runtime/bus.h: JetStream not answering during a leader election or an outage). The poison
// rule (spec §1.6, docs/adr/0081-poison-events.md) subtracts them from the delivery count
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

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "runtime/thread_annotations.h"

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
    }
  }
  // The input was acked or terminated: it will not come back.
  void forget(uint64_t seq) {
    MutexLock lock(mu_);
    n_.erase(seq);
  }
  uint64_t count(uint64_t seq) const {
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
  size_t capacity_;
};

}  // namespace weir
