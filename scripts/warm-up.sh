#!/usr/bin/env bash
# The CPU-heavy part of the suite's slowest tests, done ahead of them while the integration
# tests run (those mostly wait on timers and sockets, and run one at a time): the sanitizer
# trees' builds (with WEIR_SANITIZERS=1), clang-tidy's per-file stamps, the thread-safety
# check's ccache entries and the fuzz targets' build. scripts/test.sh starts it in the
# background at the lowest CPU priority (nice 19), so the integration tests' processes get
# the CPU whenever they want it; CTest runs the tests that own this work last (COST -100 in
# tests/CMakeLists.txt and tests/lint/CMakeLists.txt), and each takes the same per-tree lock,
# so a test either finds its work done or waits for it, never does it twice.
# A failure here is only logged (BUILD_DIR/warm-up.log): the test that owns the work runs
# it again and fails with its own message.
#   scripts/warm-up.sh BUILD_DIR
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: scripts/warm-up.sh BUILD_DIR}
cd "$root"
step() {
  local start=$(date +%s)
  echo "warm-up: $*"
  "$@" > /dev/null 2>&1 || echo "warm-up: $* failed (its test runs it again)"
  echo "warm-up: $1 took $(($(date +%s) - start)) s"
}
if grep -qx "WEIR_SANITIZER_TESTS:BOOL=ON" "$build/CMakeCache.txt" 2> /dev/null; then
  step scripts/sanitize.sh asan-build
  step scripts/sanitize.sh tsan-build
fi
step scripts/check-tidy.sh "$build"
step scripts/check-thread-safety.sh
step scripts/fuzz.sh build
