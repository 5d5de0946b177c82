// `weir validate` and `weir test` as library functions, so the main binary (app/main.cc)
// and the tests run exactly the same code.
//
// Both read files and write to the given streams only; no global state.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace weir::flows {

// Loads every file; prints each problem to `err` as "file:line:column: message" (all of
// them, not only the first) and one "ok" line per valid file to `out`.
// Returns 0 when every file is valid, 2 otherwise (also for no files).
int validate_command(const std::vector<std::string>& files, std::ostream& out, std::ostream& err);

// Runs the test cases of each flow (its `tests:`, or the cases of `cases_file` when that
// is not empty: a list of cases, or a mapping with `tests:`; a case with `flow: NAME`
// runs only against that flow). Prints each case, then "N passed, N failed".
// Returns 0 when all pass, 1 on any failure, 2 when a file does not load.
int test_command(const std::vector<std::string>& files, const std::string& cases_file, std::ostream& out);

}  // namespace weir::flows
