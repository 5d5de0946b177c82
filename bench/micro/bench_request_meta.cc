// What writing http-in's request metadata costs per request (docs/adr/0312-request-metadata.md):
// flows::write_request_meta, which http-in uses, against building the same object with
// nlohmann::json and dumping it (the text is the same: tests/flows/request_meta_test.cc).
// The headers are those of a GitHub delivery and of the benchmark's load generator.
//
//   build/weir-bench-request-meta --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flows/request_meta.h"

namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

const Pairs& headers(int64_t which) {
  static const Pairs kLoadgen = {{"content-type", "application/json"}, {"user-agent", "weir-loadgen/1"}};
  static const Pairs kGithub = {{"content-type", "application/json"},
                                {"user-agent", "GitHub-Hookshot/5a1b2c3"},
                                {"x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"},
                                {"x-github-event", "push"},
                                {"x-github-hook-id", "292430182"},
                                {"x-github-hook-installation-target-id", "79929171"},
                                {"x-github-hook-installation-target-type", "repository"}};
  return which == 0 ? kLoadgen : kGithub;
}

void BM_WriteRequestMeta(benchmark::State& state) {
  const Pairs& h = headers(state.range(0));
  for (auto _ : state) {
    std::vector<weir::flows::MetaHeader> stored;
    for (const auto& [k, v] : h) stored.push_back({k, v});
    benchmark::DoNotOptimize(weir::flows::write_request_meta("POST", "/in/orders", "{}", std::move(stored)));
  }
}
BENCHMARK(BM_WriteRequestMeta)->Arg(0)->Arg(1);

void BM_NlohmannRequestMeta(benchmark::State& state) {
  const Pairs& h = headers(state.range(0));
  for (auto _ : state) {
    nlohmann::json stored = nlohmann::json::object();
    for (const auto& [k, v] : h) stored[k] = v;
    nlohmann::json meta = {{"method", "POST"},
                           {"path", "/in/orders"},
                           {"query", nlohmann::json::object()},
                           {"headers", std::move(stored)}};
    benchmark::DoNotOptimize(meta.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace));
  }
}
BENCHMARK(BM_NlohmannRequestMeta)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
