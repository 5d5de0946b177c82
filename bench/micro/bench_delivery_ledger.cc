// What the DeliveryLedger costs per delivery (docs/adr/0292-deliveries-weir-was-handed.md):
// a message handed over and acked (the usual case: one insert, one erase) with a window's
// worth of other messages in hand, and a redelivery (a lookup and an update).
//
//   build/weir-bench-delivery-ledger --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>

#include "runtime/nats/delivery_ledger.h"

namespace {

// Sequences in hand at once: a flow stage's window (2 x 256) or a sink's (2 x 8).
void BM_HandAndAck(benchmark::State& state) {
  const auto in_hand = static_cast<uint64_t>(state.range(0));
  weir::DeliveryLedger ledger;
  uint64_t seq = 1;
  for (; seq <= in_hand; ++seq) ledger.hand(seq, 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(ledger.hand(seq, 1));
    ledger.forget(seq - in_hand);
    ++seq;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HandAndAck)->Arg(16)->Arg(512);

// A redelivery: the count capped by the one before.
void BM_Redelivery(benchmark::State& state) {
  weir::DeliveryLedger ledger;
  for (uint64_t seq = 1; seq <= 512; ++seq) ledger.hand(seq, 1);
  uint64_t seq = 0, count = 1;
  for (auto _ : state) {
    seq = seq % 512 + 1;
    benchmark::DoNotOptimize(ledger.hand(seq, ++count));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Redelivery);

}  // namespace

BENCHMARK_MAIN();
