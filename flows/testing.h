// Flow test cases (`tests:` in a flow file, or a --cases file): validation of their
// shape at load, and running them against a loaded Flow for `weir test`.
//
// A case is {name, input, expect} where expect is `dropped`, `error`, or a mapping
// sink → expected events (a list, or one object), compared as a subset: every key
// the case gives must be in the output with an equal value (numbers by value, so
// 200 matches 200.0); keys the case leaves out are ignored; arrays match element by
// element and must have the same length.
//
// Pure functions over their arguments; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "flows/flow.h"
#include "flows/source_tree.h"

namespace weir::flows {

struct CaseResult {
  std::string name;
  bool passed = false;
  std::string detail;  // why it failed (empty when it passed)
};

// Checks the shape of a list of cases. `sinks` empty: sink names are not checked.
// `cases_file`: cases may carry `flow:` to target one of several flows.
std::vector<Diagnostic> check_test_cases(const SrcNode& list, const std::string& file,
                                         const std::vector<std::string>& sinks, bool cases_file = false);

// Runs one case (a JSON object as produced from `tests:`), `index` names it when it has
// no name.
CaseResult run_test_case(const Flow& flow, const Json& test_case, size_t index);

// Subset match as described above. On a mismatch `*where` names the first difference.
bool subset_match(const Json& expected, const Json& actual, std::string* where);

}  // namespace weir::flows
