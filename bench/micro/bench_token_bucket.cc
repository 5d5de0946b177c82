// What the HTTP sink's `rate:` costs per delivery (docs/adr/0296-per-instance-rate-limits.md):
// a take that finds a token (the bucket below its limit), a take refused at the limit with
// the sink's look at when the next token is due, and the same take with the clock read
// (std::chrono::steady_clock::now(), as the sink's loop reads it once per turn).
//
//   build/weir-bench-token-bucket --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <chrono>

#include "runtime/base/token_bucket.h"

namespace {

using weir::TokenBucket;

// A token there every time: the clock moves on by one interval per take.
void BM_TakeGranted(benchmark::State& state) {
  TokenBucket bucket(2000);
  auto now = TokenBucket::TimePoint(std::chrono::hours(1000));
  const auto step = bucket.interval();
  for (auto _ : state) {
    benchmark::DoNotOptimize(bucket.try_take(now));
    now += step;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TakeGranted);

// At the limit: refused, then when the next one is due (what the sink does on a refusal).
void BM_TakeRefused(benchmark::State& state) {
  TokenBucket bucket(2000);
  const auto now = TokenBucket::TimePoint(std::chrono::hours(1000));
  while (bucket.try_take(now)) {
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(bucket.try_take(now));
    benchmark::DoNotOptimize(bucket.next_token(now));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TakeRefused);

// A take with the clock read, granted or not (the clock moves on its own).
void BM_TakeWithClock(benchmark::State& state) {
  TokenBucket bucket(1e6);
  for (auto _ : state) benchmark::DoNotOptimize(bucket.try_take(std::chrono::steady_clock::now()));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TakeWithClock);

}  // namespace

BENCHMARK_MAIN();
