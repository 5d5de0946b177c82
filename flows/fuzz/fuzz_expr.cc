// libFuzzer target: the expression compiler and interpreter. The input's first line is
// an expression, the rest a JSON event (a fixed event when it does not parse).
// Invariants beyond "no crash, no sanitizer report": a failed compile or evaluation has
// a message; a result holds no NaN or infinity; and, since the event and the
// expression are valid UTF-8, the result serialises as strict JSON (valid UTF-8).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "flows/expr.h"
#include "flows/tables.h"

namespace {

using weir::flows::Json;

bool finite_everywhere(const Json& j) {
  if (j.is_number_float()) return std::isfinite(j.get<double>());
  if (j.is_array() || j.is_object()) {
    for (const auto& v : j) {
      if (!finite_everywhere(v)) return false;
    }
  }
  return true;
}

const weir::flows::TableSet& tables() {
  static const weir::flows::TableSet set = [] {
    weir::flows::TableSet t;
    auto& tiers = t.add("tiers");
    tiers.insert("c1", Json::parse(R"({"id": "c1", "tier": "gold", "n": 10})"));
    tiers.insert("7", Json::parse(R"({"id": 7, "tier": "silver", "n": 2.5})"));
    return t;
  }();
  return set;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  size_t nl = input.find('\n');
  std::string text = input.substr(0, nl);
  Json event;
  if (nl != std::string::npos) event = Json::parse(input.substr(nl + 1), nullptr, false);
  if (nl == std::string::npos || event.is_discarded()) {
    event = Json::parse(R"({"id": "o1", "n": 7, "f": 2.5, "s": "h\u00e9llo", "t": true, "nil": null,
      "arr": [1, 2, 3], "items": [{"sku": "a", "qty": "2", "price": "10.50"}, {"sku": "b", "qty": 1, "price": 3}],
      "big": 9223372036854775807, "neg": -9223372036854775808, "huge": 18446744073709551615,
      "ts": "2026-01-01T00:00:00Z", "obj": {"a": {"b": [true, false]}}})");
  }
  weir::flows::CompileScope scope;
  scope.tables = &tables();
  weir::flows::Expression e;
  weir::flows::CompileError ce;
  if (!weir::flows::Expression::compile(text, scope, &e, &ce)) {
    if (ce.message.empty() || ce.offset > text.size()) __builtin_trap();
    return 0;
  }
  Json out;
  std::string err;
  if (!e.evaluate(event, &tables(), &out, &err)) {
    if (err.empty()) __builtin_trap();
    return 0;
  }
  if (!finite_everywhere(out)) __builtin_trap();
  (void)out.dump();  // throws (and so aborts the fuzzer) on invalid UTF-8
  return 0;
}
