// bench_orders (bench/flows/bench_orders.yaml) on realistic ~300-byte events, one thread:
// parse → flow → serialize, against a hand-written C++ function that does the same
// work with the same JSON library (nlohmann-json), so the interpreter's overhead shows
// as a ratio. Also the parts on their own: the flow without parse/serialize, and parse
// plus serialize alone. Both implementations are checked to give byte-identical output
// before anything is measured.
//
//   build-flows/weir-bench-flows --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "flows/flow.h"
#include "flows/json_limits.h"

namespace {

using weir::flows::Json;

const std::string kDir = WEIR_BENCH_FLOWS_DIR;

// Events shaped like the load generator's (bench/tools/loadgen.cc, OrderFactory): 1 to 4
// items with qty 1..5 and prices 1.00..28.99, the amount their total, customers c0..c999
// (c900 and up are not in the table), about 300 bytes each. A pool, so that branches and
// sizes vary from event to event.
std::vector<std::string> make_events(size_t n) {
  std::mt19937_64 rng(42);
  auto cents = [](int64_t c) {
    std::string s = std::to_string(c / 100) + ".";
    s.push_back(static_cast<char>('0' + c % 100 / 10));
    s.push_back(static_cast<char>('0' + c % 10));
    return s;
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    Json items = Json::array();
    int64_t total = 0;
    int count = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < count; ++k) {
      int64_t qty = 1 + static_cast<int64_t>(rng() % 5);
      int64_t price = 100 + static_cast<int64_t>(rng() % 2800);
      total += qty * price;
      items.push_back(
          {{"sku", "sku-" + std::to_string(rng() % 100000)}, {"qty", std::to_string(qty)}, {"price", cents(price)}});
    }
    int64_t customer = static_cast<int64_t>(rng() % 1000);
    // Written in the generator's key order (Json would sort the keys).
    std::string body = "{\"id\":\"run-7f3a9c2e-" + std::to_string(i) +
                       "\",\"t\":" + std::to_string(1767225600000000LL + static_cast<int64_t>(i) * 997) +
                       ",\"customer_id\":\"c" + std::to_string(customer) + "\",\"email\":\"c" +
                       std::to_string(customer) + "@example.com\",\"amount\":\"" + cents(total) +
                       "\",\"currency\":\"EUR\",\"channel\":\"web\",\"ts\":\"2026-01-01T00:00:00Z\",\"items\":" +
                       items.dump() + "}";
    out.push_back(std::move(body));
  }
  return out;
}

// ---- the hand-written version ---------------------------------------------------------

struct Customers {
  std::unordered_map<std::string, std::string> tier;  // customer_id → tier
};

Customers load_customers() {
  std::ifstream in(kDir + "/customers.csv");
  Customers c;
  std::string line;
  std::getline(in, line);  // header: customer_id,name,tier,discount_pct,country
  while (std::getline(in, line)) {
    // The name may be quoted with a comma inside; the tier is the third field from the end.
    std::vector<std::string> f;
    std::string cur;
    bool quoted = false;
    for (char ch : line) {
      if (ch == '"') quoted = !quoted;
      else if (ch == ',' && !quoted) f.push_back(std::move(cur)), cur.clear();
      else cur.push_back(ch);
    }
    f.push_back(cur);
    if (f.size() == 5) c.tier[f[0]] = f[2];
  }
  return c;
}

double to_double(const Json& v) {
  const std::string& s = v.get_ref<const std::string&>();
  double d = 0;
  std::from_chars(s.data(), s.data() + s.size(), d);
  return d;
}

int64_t to_int(const Json& v) {
  const std::string& s = v.get_ref<const std::string&>();
  int64_t i = 0;
  std::from_chars(s.data(), s.data() + s.size(), i);
  return i;
}

// What bench_orders.yaml does, by hand. Returns false when the event is dropped.
bool handwritten(const std::string& body, const Customers& customers, std::string* sink, std::string* out_text) {
  Json in = Json::parse(body);
  Json out = Json::object();
  auto& o = out.get_ref<Json::object_t&>();
  auto it = customers.tier.find(in["customer_id"].get_ref<const std::string&>());
  o["tier"] = it == customers.tier.end() ? std::string("bronze") : it->second;
  o["amount_cents"] = static_cast<int64_t>(std::round(to_double(in["amount"]) * 100));
  o["id"] = std::move(in["id"]);
  o["t"] = std::move(in["t"]);
  o["customer_id"] = std::move(in["customer_id"]);
  o["currency"] = std::move(in["currency"]);
  Json lines = Json::array();
  double total = 0;
  for (auto& item : in["items"]) {
    int64_t qty = to_int(item["qty"]);
    double line = static_cast<double>(qty) * to_double(item["price"]);
    Json l = Json::object();
    l["sku"] = std::move(item["sku"]);
    l["qty"] = qty;
    l["total"] = line;
    lines.push_back(std::move(l));
    total += line;
  }
  o["lines"] = std::move(lines);
  total = std::round(total * 100) / 100;
  o["total"] = total;
  if (!(total > 0)) return false;
  *sink = total >= 100 ? "big" : "small";
  *out_text = out.dump();
  return true;
}

// ---- fixtures -------------------------------------------------------------------------

struct Fixture {
  std::shared_ptr<const weir::flows::Flow> flow;
  Customers customers;
  std::vector<std::string> events = make_events(256);
  size_t bytes = 0;

  Fixture() {
    // WEIR_BENCH_FLOW: another flow file doing the same work (to compare ways of writing it).
    const char* other = std::getenv("WEIR_BENCH_FLOW");
    auto r = weir::flows::load_flow_file(other && *other ? other : kDir + "/bench_orders.yaml");
    if (!r.flow) {
      for (const auto& d : r.diagnostics) std::fprintf(stderr, "%s\n", d.str().c_str());
      std::abort();
    }
    flow = r.flow;
    customers = load_customers();
    for (const auto& e : events) bytes += e.size();
    // Both versions must agree byte for byte, or the comparison means nothing.
    for (const auto& e : events) {
      auto o = flow->run(Json::parse(e));
      std::string sink, text;
      bool emitted = handwritten(e, customers, &sink, &text);
      bool ok = emitted ? (o.kind == weir::flows::Outcome::Kind::kEmit && o.sink == sink && o.event.dump() == text)
                        : o.kind == weir::flows::Outcome::Kind::kDropped;
      if (!ok) {
        std::fprintf(stderr, "mismatch on %s\nflow: %s %s\nhand: %s %s\n", e.c_str(), o.sink.c_str(),
                     o.event.dump().c_str(), sink.c_str(), text.c_str());
        std::abort();
      }
    }
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

void report(benchmark::State& state, const Fixture& f) {
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(f.bytes / f.events.size()));
}

// parse → flow → serialize: what the runtime's flow stage does per event.
void BM_Flow_ParseRunSerialize(benchmark::State& state) {
  const Fixture& f = fixture();
  size_t i = 0;
  for (auto _ : state) {
    const std::string& body = f.events[i++ % f.events.size()];
    weir::flows::Outcome o = f.flow->run(Json::parse(body));
    std::string out = o.event.dump();
    benchmark::DoNotOptimize(out);
    benchmark::DoNotOptimize(o.sink);
  }
  report(state, f);
}
BENCHMARK(BM_Flow_ParseRunSerialize);

// The same work written by hand with nlohmann-json.
void BM_HandWritten_ParseRunSerialize(benchmark::State& state) {
  const Fixture& f = fixture();
  size_t i = 0;
  std::string sink, text;
  for (auto _ : state) {
    const std::string& body = f.events[i++ % f.events.size()];
    bool emitted = handwritten(body, f.customers, &sink, &text);
    benchmark::DoNotOptimize(emitted);
    benchmark::DoNotOptimize(text);
  }
  report(state, f);
}
BENCHMARK(BM_HandWritten_ParseRunSerialize);

// The flow alone, on already parsed events. run() takes its event by value, so each run
// starts from a copy: BM_CopyParsedEvent is that copy alone, to subtract.
void BM_Flow_RunOnly(benchmark::State& state) {
  const Fixture& f = fixture();
  std::vector<Json> parsed;
  for (const auto& e : f.events) parsed.push_back(Json::parse(e));
  size_t i = 0;
  for (auto _ : state) {
    weir::flows::Outcome o = f.flow->run(parsed[i++ % parsed.size()]);
    benchmark::DoNotOptimize(o);
  }
  report(state, f);
}
BENCHMARK(BM_Flow_RunOnly);

void BM_CopyParsedEvent(benchmark::State& state) {
  const Fixture& f = fixture();
  std::vector<Json> parsed;
  for (const auto& e : f.events) parsed.push_back(Json::parse(e));
  size_t i = 0;
  for (auto _ : state) {
    Json copy = parsed[i++ % parsed.size()];
    benchmark::DoNotOptimize(copy);
  }
  report(state, f);
}
BENCHMARK(BM_CopyParsedEvent);

// Parse and serialize alone: the floor both versions stand on.
void BM_ParseSerializeOnly(benchmark::State& state) {
  const Fixture& f = fixture();
  size_t i = 0;
  for (auto _ : state) {
    Json ev = Json::parse(f.events[i++ % f.events.size()]);
    std::string out = ev.dump();
    benchmark::DoNotOptimize(out);
  }
  report(state, f);
}
BENCHMARK(BM_ParseSerializeOnly);

// The ingress check of every JSON body (http-in, and a flow with no steps): check_json's
// quick scan against nlohmann's SAX pass without a DOM, which it asks only when the scan
// cannot say yes (flows/json_limits.h).
void BM_Json_Check(benchmark::State& state, bool (*check)(std::string_view, int)) {
  const Fixture& f = fixture();
  size_t i = 0;
  for (auto _ : state) {
    bool ok = check(f.events[i++ % f.events.size()], weir::flows::kDefaultMaxDepth);
    if (!ok) state.SkipWithError("a bench event was refused");
    benchmark::DoNotOptimize(ok);
  }
  report(state, f);
}
bool nlohmann_check(std::string_view text, int max_depth) {
  return weir::flows::detail::nlohmann_check_json(text, max_depth);
}
BENCHMARK_CAPTURE(BM_Json_Check, Quick, &weir::flows::detail::quick_check_json);
BENCHMARK_CAPTURE(BM_Json_Check, Nlohmann, &nlohmann_check);

// The flow stage's parse of every input event: parse_json, whose quick scan builds the DOM
// (ADR 0271), against nlohmann's DOM parser with the same depth limit, which it asks only
// when the scan cannot say yes.
void BM_Json_Parse(benchmark::State& state, std::optional<Json> (*parse)(std::string_view, int)) {
  const Fixture& f = fixture();
  size_t i = 0;
  for (auto _ : state) {
    std::optional<Json> ev = parse(f.events[i++ % f.events.size()], weir::flows::kDefaultMaxDepth);
    if (!ev) state.SkipWithError("a bench event was refused");
    benchmark::DoNotOptimize(ev);
  }
  report(state, f);
}
std::optional<Json> quick_parse(std::string_view text, int max_depth) {
  return weir::flows::parse_json(text, max_depth);
}
std::optional<Json> nlohmann_parse(std::string_view text, int max_depth) {
  return weir::flows::detail::nlohmann_parse_json(text, max_depth);
}
BENCHMARK_CAPTURE(BM_Json_Parse, Quick, &quick_parse);
BENCHMARK_CAPTURE(BM_Json_Parse, Nlohmann, &nlohmann_parse);

// The flow stage's serialisation of every output: flows::write_json (ADR 0271) against
// nlohmann's dump with the replace handler, which writes the same bytes.
void BM_Json_Dump(benchmark::State& state, std::string (*dump)(const Json&)) {
  const Fixture& f = fixture();
  std::vector<Json> parsed;
  for (const auto& e : f.events) parsed.push_back(Json::parse(e));
  size_t i = 0;
  for (auto _ : state) {
    std::string out = dump(parsed[i++ % parsed.size()]);
    benchmark::DoNotOptimize(out);
  }
  report(state, f);
}
std::string nlohmann_dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
BENCHMARK_CAPTURE(BM_Json_Dump, Weir, &weir::flows::write_json);
BENCHMARK_CAPTURE(BM_Json_Dump, Nlohmann, &nlohmann_dump);

// Both versions side by side: chunks of 32 events alternate between them (in turn
// first), each timed on the thread's CPU clock, so that both see the same machine
// state. On a shared, noisy machine this ratio is steadier than one computed from two
// separate benchmarks.
int64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void BM_Ratio_FlowOverHandWritten(benchmark::State& state) {
  const Fixture& f = fixture();
  constexpr size_t kChunk = 32;
  int64_t flow_ns = 0, hand_ns = 0;
  size_t i = 0, events = 0;
  bool flow_first = true;
  std::string sink, text;
  auto run_flow = [&](size_t base) {
    for (size_t k = 0; k < kChunk; ++k) {
      weir::flows::Outcome o = f.flow->run(Json::parse(f.events[(base + k) % f.events.size()]));
      std::string out = o.event.dump();
      benchmark::DoNotOptimize(out);
    }
  };
  auto run_hand = [&](size_t base) {
    for (size_t k = 0; k < kChunk; ++k) {
      bool emitted = handwritten(f.events[(base + k) % f.events.size()], f.customers, &sink, &text);
      benchmark::DoNotOptimize(emitted);
      benchmark::DoNotOptimize(text);
    }
  };
  for (auto _ : state) {
    int64_t t0 = thread_cpu_ns();
    if (flow_first) run_flow(i);
    else run_hand(i);
    int64_t t1 = thread_cpu_ns();
    if (flow_first) run_hand(i);
    else run_flow(i);
    int64_t t2 = thread_cpu_ns();
    (flow_first ? flow_ns : hand_ns) += t1 - t0;
    (flow_first ? hand_ns : flow_ns) += t2 - t1;
    flow_first = !flow_first;
    i += kChunk;
    events += kChunk;
  }
  state.counters["ratio"] = static_cast<double>(flow_ns) / static_cast<double>(hand_ns);
  state.counters["flow_events_per_s"] = static_cast<double>(events) * 1e9 / static_cast<double>(flow_ns);
  state.counters["hand_events_per_s"] = static_cast<double>(events) * 1e9 / static_cast<double>(hand_ns);
}
BENCHMARK(BM_Ratio_FlowOverHandWritten);

}  // namespace

BENCHMARK_MAIN();
