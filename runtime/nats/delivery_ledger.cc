#include "runtime/nats/delivery_ledger.h"

#include <algorithm>

namespace weir {

uint64_t DeliveryLedger::hand(uint64_t seq, uint64_t counted, uint64_t first_cap) {
  counted = std::max<uint64_t>(counted, 1);
  MutexLock lock(mu_);
  auto [it, added] = last_.try_emplace(seq, 0);
  if (!added) {
    // Never below 1; a fresh copy (JetStream's count 1) keeps 1.
    counted = std::min(counted, it->second + 1);
    it->second = counted;
    return counted;
  }
  counted = std::max<uint64_t>(std::min(counted, first_cap), 1);
  it->second = counted;
  // The lowest sequence is the oldest message: most likely one whose ack was lost.
  if (last_.size() > capacity_) {
    pushed_out_ = std::max(pushed_out_, last_.begin()->first);
    last_.erase(last_.begin());
  }
  return counted;
}

void DeliveryLedger::forget(uint64_t seq) {
  MutexLock lock(mu_);
  // A message delivered more than once keeps its count: if the ack is lost with its
  // connection, the message comes back with JetStream's count as raised as before.
  if (auto it = last_.find(seq); it != last_.end() && it->second <= 1) last_.erase(it);
}

bool DeliveryLedger::forgot(uint64_t seq) const {
  MutexLock lock(mu_);
  return seq <= pushed_out_;
}

size_t DeliveryLedger::size() const {
  MutexLock lock(mu_);
  return last_.size();
}

}  // namespace weir
