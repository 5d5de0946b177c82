// The cost of body checksums (docs/adr/0286-body-checksums.md): the CRC-32C of an event's
// body (the CPU's instruction, and Boost.CRC's table as the fallback), and a publish's
// message built with and without its Weir-Sum header plus the check on receipt, at 1 KB,
// 64 KB and 900 KB bodies.
//
//   build/weir-bench-body-sum --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <nats/nats.h>

#include <random>
#include <string>

#include "runtime/base/crc32c.h"
#include "runtime/nats/body_sum.h"
#include "runtime/nats/bus.h"
#include "runtime/nats/nats_msg.h"

namespace {

std::string body(int64_t n) {
  std::mt19937 rng(7);
  std::string s(static_cast<size_t>(n), 'x');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

// The headers a flow output carries (runtime/flow/stage.cc emit_output).
const weir::Headers& headers() {
  static const weir::Headers h = {{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                                  {weir::layout::kHeaderId, "01HZX3J8Q4T2V9K7M5N6P8R0S1"},
                                  {weir::layout::kHeaderMsgId, "01HZX3J8Q4T2V9K7M5N6P8R0S1#erp"},
                                  {weir::layout::kHeaderVersion, "3"},
                                  {weir::layout::kHeaderIngestUs, "1764950400000000"}};
  return h;
}

void BM_Crc32c(benchmark::State& state) {
  const std::string b = body(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(weir::crc32c(b));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Crc32c)->Arg(1024)->Arg(65536)->Arg(921600);

void BM_Crc32cPortable(benchmark::State& state) {
  const std::string b = body(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(weir::crc32c_portable(b));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Crc32cPortable)->Arg(1024)->Arg(65536)->Arg(921600);

// A publish's message as before: created, five headers set.
void BM_PlainMsg(benchmark::State& state) {
  const std::string b = body(state.range(0));
  for (auto _ : state) {
    natsMsg* m = nullptr;
    natsStatus s = natsMsg_Create(&m, "weir.orders.to.erp", "_INBOX.x.1", b.data(), static_cast<int>(b.size()));
    for (const auto& [k, v] : headers()) {
      if (s == NATS_OK) s = natsMsgHeader_Set(m, k.c_str(), v.c_str());
    }
    benchmark::DoNotOptimize(s);
    weir::free_nats_msg(m);
  }
}
BENCHMARK(BM_PlainMsg)->Arg(1024)->Arg(65536)->Arg(921600);

// The same with its Weir-Sum, then checked as a consumer checks it.
void BM_StampedMsgAndCheck(benchmark::State& state) {
  const std::string b = body(state.range(0));
  for (auto _ : state) {
    natsMsg* m = nullptr;
    natsStatus s = weir::make_stamped_msg(&m, "weir.orders.to.erp", "_INBOX.x.1", b, headers());
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(weir::check_body_sum(m));
    weir::free_nats_msg(m);
  }
}
BENCHMARK(BM_StampedMsgAndCheck)->Arg(1024)->Arg(65536)->Arg(921600);

}  // namespace

BENCHMARK_MAIN();
