// Lookups against a table of 100,000 rows: the same rows from a file (a static Table) and
// from NATS KV (a LiveTable: an immutable snapshot behind an atomic shared_ptr, pinned per
// event; docs/adr/0120). Each iteration is one event: a fresh EvalContext (as the flow
// stage makes per event) and `lookup(tiers, this.k)` through the interpreter, so the live
// table's per-event cost (the snapshot pin) is in the figure.
//
//   build/weir-bench-tables --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "flows/expr.h"
#include "flows/tables.h"

namespace {

using weir::flows::CompileError;
using weir::flows::CompileScope;
using weir::flows::EvalContext;
using weir::flows::Expression;
using weir::flows::Json;
using weir::flows::LiveTable;
using weir::flows::TableSet;
using weir::flows::TableSnapshot;

constexpr int kRows = 100000;

Json row(int i) {
  return {{"customer", "c" + std::to_string(i)}, {"tier", i % 3 ? "silver" : "gold"}, {"discount", i % 10}};
}

// Events whose key hits a row 9 times in 10.
std::vector<Json> events() {
  std::mt19937_64 rng(7);
  std::vector<Json> out;
  for (int i = 0; i < 4096; ++i) out.push_back({{"k", "c" + std::to_string(rng() % (kRows + kRows / 9))}});
  return out;
}

struct Fixture {
  TableSet file_set, kv_set;
  Expression file_expr, kv_expr;
  std::vector<Json> evs = events();

  Fixture() {
    auto& file = file_set.add("tiers");
    for (int i = 0; i < kRows; ++i) file.insert("c" + std::to_string(i), row(i));
    auto snapshot = std::make_shared<TableSnapshot>();
    snapshot->generation = 1;
    for (int i = 0; i < kRows; ++i)
      snapshot->rows.emplace("c" + std::to_string(i), std::make_shared<const Json>(row(i)));
    auto live = std::make_shared<LiveTable>("bench_tiers");
    live->publish(std::move(snapshot));
    kv_set.add("tiers").set_live(live);
    CompileError e;
    CompileScope fs{&file_set}, ks{&kv_set};
    if (!Expression::compile("lookup(tiers, this.k)", fs, &file_expr, &e) ||
        !Expression::compile("lookup(tiers, this.k)", ks, &kv_expr, &e)) {
      std::abort();
    }
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void run(benchmark::State& state, const Expression& expr, const TableSet& set) {
  auto& evs = fixture().evs;
  size_t i = 0, hits = 0;
  for (auto _ : state) {
    EvalContext ctx;  // one per event, as the flow stage makes
    ctx.tables = &set;
    ctx.self = &evs[i++ & 4095];
    Json scratch;
    const Json* v = expr.eval(ctx, scratch);
    hits += v != nullptr && !v->is_null();
    benchmark::DoNotOptimize(v);
  }
  state.counters["hit_ratio"] = static_cast<double>(hits) / static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations());
}

void BM_LookupFileTable(benchmark::State& state) { run(state, fixture().file_expr, fixture().file_set); }
void BM_LookupKvTable(benchmark::State& state) { run(state, fixture().kv_expr, fixture().kv_set); }

}  // namespace

BENCHMARK(BM_LookupFileTable);
BENCHMARK(BM_LookupKvTable);
BENCHMARK_MAIN();
