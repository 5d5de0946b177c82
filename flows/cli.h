// `weir validate` and `weir test` as library functions, so the main binary (app/main.cc)
// and the tests run exactly the same code.
//
// Both read files and write to the given streams only; no global state.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace weir::flows {

// Loads every file (a directory: its *.yaml, *.yml and *.json, as `weir run --flows DIR`
// reads it); prints each problem to `err` as "file:line:column: message" (all of them, not
// only the first), one "ok" line per valid file to `out`, and to `err` a warning for each
// secret variable a valid flow names that is unset (`weir run` would refuse to start).
// Returns 0 when every file is valid, 2 otherwise (also for no files).
int validate_command(const std::vector<std::string>& paths, std::ostream& out, std::ostream& err);

// Runs the test cases of each flow (its `tests:`, or the cases of `cases_file` when that
// is not empty: a list of cases, or a mapping with `tests:`; a case with `flow: NAME`
// runs only against that flow; one that expects an event at a sink the flow does not have
// is an error). Directories as for validate_command. Prints each case, then "N passed, N
// failed". Returns 0 when all pass, 1 on any failure, 2 when a file or case does not load.
int test_command(const std::vector<std::string>& paths, const std::string& cases_file, std::ostream& out);

}  // namespace weir::flows
