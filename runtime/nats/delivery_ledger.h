#pragma once
// How many times this process was handed each message it has not finished with
// (docs/adr/0292-deliveries-weir-was-handed.md). nats-server 2.9.10 raises a message's
// delivery count when it takes a redelivery off its queue but has no pull request that
// can carry it (one whose bytes left are too few: 409 Message Size Exceeds MaxBytes; or
// one whose client is gone), and sends it only after AckWait: JetStream's count then
// climbs without a delivery. A delivery counts toward an event's limits only when weir
// was handed it.

#include <cstddef>
#include <cstdint>
#include <map>

#include "runtime/base/thread_annotations.h"

namespace weir {

class DeliveryLedger {
 public:
  // `capacity`: the messages remembered; past it the lowest stream sequence is forgotten
  // (its next delivery is counted by JetStream's count alone, as without a ledger).
  explicit DeliveryLedger(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // A delivery of stream sequence `seq` is handed over; `counted` is JetStream's delivery
  // count less the deliveries known not to count. Returns the count to use: at most one
  // more than the last delivery of `seq` this ledger saw, never more than `counted`; for a
  // message the ledger does not know, at most `first_cap`.
  uint64_t hand(uint64_t seq, uint64_t counted, uint64_t first_cap = UINT64_MAX);
  // `seq` was acked or terminated: no delivery of it is expected unless the ack is lost.
  // Forgotten when it was delivered once; a message delivered more than once is kept (until
  // the capacity pushes it out): after a lost ack its next delivery is still counted from
  // the ledger's count, not from JetStream's.
  void forget(uint64_t seq);
  size_t size() const;
  // Whether `seq` may have been handed over and then pushed out by the capacity: it is not
  // above the highest sequence pushed out so far.
  bool forgot(uint64_t seq) const;

  static constexpr size_t kDefaultCapacity = 16384;

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  std::map<uint64_t, uint64_t> last_ GUARDED_BY(mu_);  // stream sequence → count used last
  uint64_t pushed_out_ GUARDED_BY(mu_) = 0;            // the highest sequence the capacity pushed out
};

}  // namespace weir
