// libFuzzer target: the flow file loader (YAML and JSON, schema, expressions, tables
// given inline) and, for files that load, their own test cases run through the flow.
// Invariants beyond "no crash, no sanitizer report": a file either loads or has
// diagnostics, and every diagnostic has a message.
#include <cstddef>
#include <cstdint>
#include <string>

#include "flows/flow.h"
#include "flows/testing.h"

namespace {

weir::flows::LoadOptions options() {
  weir::flows::LoadOptions o;
  o.env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "SET") return std::string("value");
    return std::nullopt;
  };
  o.allow_table_files = false;  // stay off the file system
  return o;
}

void check(const weir::flows::LoadResult& r) {
  if ((r.flow == nullptr) == r.diagnostics.empty()) __builtin_trap();
  for (const auto& d : r.diagnostics) {
    if (d.message.empty()) __builtin_trap();
  }
  if (!r.flow) return;
  size_t index = 0;
  for (const auto& c : r.flow->tests()) {
    (void)weir::flows::run_test_case(*r.flow, c, index++);
    if (index > 16) break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const weir::flows::LoadOptions kOptions = options();
  std::string text(reinterpret_cast<const char*>(data), size);
  check(weir::flows::load_flow_text(text, "fuzz.yaml", kOptions));
  check(weir::flows::load_flow_text(text, "fuzz.json", kOptions));
  return 0;
}
