#!/usr/bin/env bash
# Installs what is missing, builds (warnings are errors), and runs the whole suite with
# CTest: unit tests, the integration suite (it starts its own nats-server, mosquitto and
# HTTP sinks on free loopback ports), a short fuzz run and a short bench/run.sh smoke
# run. Integration tests are RUN_SERIAL (they time failovers); unit tests run two at a
# time. The last lines are CTest's summary.
#
# WEIR_SANITIZERS=1 (.ci/run sets it; ADR 0170) adds the sanitizer jobs to the suite as the
# CTest tests sanitize_asan_ubsan and sanitize_tsan (scripts/sanitize.sh: an ASan+UBSan
# build of weir and the unit tests, the unit tests and the data-path integration tests
# against that weir; a TSan build of the runtime unit tests and the Bus's pull consumer
# tests). They build their own trees
# (build-asan/, build-tsan/) and run one at a time, so the summary stays CTest's.
#
# With no arguments (the whole suite) scripts/warm-up.sh builds the sanitizer, fuzz and lint
# trees in the background at nice 19 while the integration tests run; CTest runs the tests
# that use those trees last. With arguments (`scripts/test.sh -L integration`) it does not.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${WEIR_SANITIZERS:-0}" = 1 ]; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DWEIR_SANITIZER_TESTS=ON"
else
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DWEIR_SANITIZER_TESTS=OFF"
fi
scripts/setup.sh
root=$(pwd)
cd "${BUILD_DIR:-build}"
if (($# == 0)); then
  # The whole suite: the heavy work of its slowest tests runs meanwhile, at nice 19
  # (scripts/warm-up.sh; its log is warm-up.log here). Its own process group, ended here.
  setsid nice -n 19 "$root/scripts/warm-up.sh" "$(pwd)" > warm-up.log 2>&1 &
  warm=$!
  trap 'kill -- -"$warm" 2> /dev/null || true' EXIT
fi
# --no-tests=error: a build that registered no test (WEIR_TESTS=OFF in a cached tree) fails.
status=0
ctest --output-on-failure --timeout 900 -j2 --no-tests=error "$@" || status=$?
exit $status
