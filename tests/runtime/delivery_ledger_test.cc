// DeliveryLedger (runtime/nats/delivery_ledger.h, docs/adr/0292-deliveries-weir-was-handed.md):
// a delivery counts at most one more than the last one the consumer was handed, an ack or
// term forgets a message delivered once (one delivered more often is kept for a lost ack),
// and the ledger stays within its capacity.
#include <catch2/catch.hpp>

#include "runtime/nats/delivery_ledger.h"

using weir::DeliveryLedger;

TEST_CASE("a delivery counts at most one more than the last one handed over", "[ledger]") {
  DeliveryLedger ledger;
  CHECK(ledger.hand(7, 1) == 1);
  // JetStream raised its count twice but handed it over once more: the second delivery.
  CHECK(ledger.hand(7, 3) == 2);
  CHECK(ledger.hand(7, 4) == 3);
  // A count below the ledger's (deliveries known not to count) is taken as it is.
  CHECK(ledger.hand(7, 2) == 2);
  // Another message is counted on its own.
  CHECK(ledger.hand(8, 1) == 1);
  CHECK(ledger.size() == 2);
}

TEST_CASE("a message first handed over with a high count keeps it: deliveries before this process count", "[ledger]") {
  // A delivery that crashed the previous process is not forgotten (the poison rule, ADR 0081).
  DeliveryLedger ledger;
  CHECK(ledger.hand(3, 5) == 5);
  CHECK(ledger.hand(3, 9) == 6);
  CHECK(ledger.hand(4, 0) == 1);  // never below the delivery in hand
}

TEST_CASE("an acked message delivered once is forgotten and one delivered more often is kept", "[ledger]") {
  DeliveryLedger ledger;
  CHECK(ledger.hand(1, 1) == 1);
  CHECK(ledger.hand(2, 1) == 1);
  CHECK(ledger.hand(2, 3) == 2);
  ledger.forget(1);
  ledger.forget(2);
  ledger.forget(99);  // never handed over: nothing happens
  CHECK(ledger.size() == 1);
  // Its ack lost, message 1 comes back: counted by JetStream's count again.
  CHECK(ledger.hand(1, 2) == 2);
  // Message 2's JetStream count was raised without deliveries before: still capped.
  CHECK(ledger.hand(2, 6) == 3);
}

TEST_CASE("a message not handed over before is capped by what could have failed elsewhere", "[ledger]") {
  DeliveryLedger ledger;
  // Stored 3 s ago with a 1.5 s AckWait (ADR 0297): at most 3 deliveries before this one's
  // process.
  CHECK(ledger.hand(1, 93, 3) == 3);
  CHECK(ledger.hand(1, 94) == 4);  // known now: one more per delivery handed over
  CHECK(ledger.hand(2, 2, 3) == 2);
  CHECK(ledger.hand(3, 5, 0) == 1);  // never below the delivery in hand
}

TEST_CASE("past its capacity the ledger forgets the lowest sequence", "[ledger]") {
  DeliveryLedger ledger(3);
  for (uint64_t seq = 10; seq < 14; ++seq) CHECK(ledger.hand(seq, 1) == 1);
  CHECK(ledger.size() == 3);
  CHECK(ledger.hand(10, 5) == 5);  // forgotten: JetStream's count alone
  CHECK(ledger.hand(13, 5) == 2);  // remembered
}

TEST_CASE("the ledger says which sequences its capacity may have pushed out", "[ledger]") {
  // A sequence at or below the highest one pushed out may have been handed over before
  // (docs/adr/0319-first-delivery-of-a-message-stored-while-running.md).
  DeliveryLedger ledger(2);
  CHECK_FALSE(ledger.forgot(1));
  ledger.hand(5, 1);
  ledger.hand(6, 1);
  CHECK_FALSE(ledger.forgot(5));
  ledger.hand(7, 1);  // pushes 5 out
  CHECK(ledger.forgot(5));
  CHECK(ledger.forgot(3));
  CHECK_FALSE(ledger.forgot(6));
  CHECK_FALSE(ledger.forgot(8));
  ledger.forget(6);  // acked: gone, but not pushed out
  CHECK_FALSE(ledger.forgot(6));
}
