#!/usr/bin/env bash
# The sanitizer jobs (ADR 0170), run by CTest as the tests sanitize_asan_ubsan and
# sanitize_tsan when the build is configured with -DWEIR_SANITIZER_TESTS=ON
# (WEIR_SANITIZERS=1 scripts/test.sh; CI does that). Each builds its own tree with g++:
#
#   scripts/sanitize.sh asan INTEGRATION_TESTS_BINARY
#     build-asan/: weir and the runtime, flows, connectors (the HTTP sink on both clients,
#     signatures, poll, timer; the MQTT codec, exec line splitting and event bodies of
#     weir-connectors-integration-tests, tag [codec] and the rest of its unit tests) and
#     cluster unit tests with ASan+UBSan; runs the
#     unit tests (leak checks on), then the integration tests of the data path against
#     that weir (WEIR_BINARY): tags [ingress] (JSON conformance, framing, replay, depth),
#     [depth], [delivery], [sink], [dlq], [faults] (kill -9, outages, the fault matrix but
#     not the 2-minute rotation), [backpressure]; not the [rss] tests (memory bounds do not
#     hold under ASan: its quarantine keeps up to 256 MiB of freed memory). The admin, config, tables, trace, deploy
#     and cluster start-up tests stay out: they exercise the control plane, and the whole
#     integration suite under ASan does not fit CI's 45 minutes next to the normal suite.
#   scripts/sanitize.sh asan-build | tsan-build
#     only the build of that tree (scripts/warm-up.sh builds them ahead of the tests).
#   scripts/sanitize.sh tsan
#     build-tsan/: the runtime unit tests (HTTP server, router, admin API with a fake
#     backend, config, log) and the Bus's pull consumer tests (weir-bus-tests: its own
#     pull requests on cnats' delivery pool, the sweeper's ticks, a server restart; ADR
#     0150) with TSan; runs them.
#
# Both build in the Debug configuration (asserts on) with line tables only (-g1, the
# project's default WEIR_DEBUG_LEVEL): ASan+UBSan at -Og, TSan at -O1. Measured on
# runtime/http/http_server.cc (ADR 0259): ASan+UBSan -O1 -g 109 s, -O1 -g1 72 s, -Og -g1 45 s;
# TSan -O1 -g 27 s, -O1 -g1 21 s (TSan stays at -O1: it is slow without optimisation).
# Warnings are not errors there (g++ warns falsely inside Boost under the sanitizers). A sanitizer report in a weir process the integration tests
# started goes to a file (ASAN_OPTIONS log_path) and fails the job even when the test
# itself passed. Each job prints its build time, wall and CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
kind=${1:?usage: scripts/sanitize.sh asan INTEGRATION_TESTS_BINARY | tsan}

# Sets CPU to the CPU seconds (user + system) of this shell's finished children so far.
# `times` must run in this shell, not in a $(…) subshell (whose children are not these).
children_cpu() {
  local f
  f=$(mktemp)
  times > "$f"
  CPU=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$f")
  rm -f "$f"
}

# Runs scripts/setup.sh for one sanitizer tree and prints how long the build took: wall
# time, and CPU time (on a machine shared with other work, CPU / 2 is what the build
# takes on 2 free cores).
build_tree() {
  local what=$1
  shift
  local start cpu0
  start=$(date +%s)
  children_cpu
  cpu0=$CPU
  mkdir -p "$BUILD_DIR"
  # One build at a time per tree (scripts/warm-up.sh may be building it ahead of CTest).
  (
    flock 8
    scripts/setup.sh "$@"
  ) 8> "$BUILD_DIR/.lock"
  children_cpu
  echo "sanitize: $what build took $(($(date +%s) - start)) s wall, $((CPU - cpu0)) s CPU" >&2
}

# Catch2 2.13 exits 0 when a filter matches nothing: every run below passes -w NoTests, and
# require_tests fails first when any one alternative of a filter (a,b,...) matches no test,
# so a renamed tag cannot quietly drop part of a sanitizer run.
require_tests() {  # require_tests BINARY FILTER
  local bin=$1 alt n
  local -a alts
  IFS=, read -r -a alts <<< "$2"
  for alt in "${alts[@]}"; do
    n=$("$bin" --list-test-names-only "$alt" | grep -c . || true)
    if ((n == 0)); then
      echo "sanitize: '$alt' matches no test of $bin" >&2
      exit 1
    fi
  done
}

case "$kind" in
  asan | asan-build)
    [ "$kind" = asan ] && tests_binary=${2:?scripts/sanitize.sh asan needs the weir-integration-tests binary}
    build=${ASAN_BUILD_DIR:-build-asan}
    BUILD_DIR=$build BUILD_TYPE=Debug CXXFLAGS="-Og" \
      CMAKE_ARGS="-DWEIR_SANITIZE=ON -DWEIR_WERROR=OFF -DWEIR_BENCH=OFF" \
      build_tree "ASan+UBSan" weir weir-runtime-tests weir-flows-tests weir-connectors-tests weir-cluster-tests \
      weir-connectors-integration-tests
    [ "$kind" = asan-build ] && exit 0
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    # The MQTT codec reads what a broker sends: its unit tests run here too (the [codec]
    # alternative makes require_tests fail if they ever leave the binary's unit tests).
    require_tests "$build/weir-connectors-integration-tests" "[codec]"
    for t in weir-runtime-tests weir-flows-tests weir-connectors-tests weir-cluster-tests \
      weir-connectors-integration-tests; do
      echo "sanitize: $t under ASan+UBSan" >&2
      require_tests "$build/$t" "~[integration]"
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 "$build/$t" -w NoTests "~[integration]"
    done
    # The HTTP sink's tests once more on the libcurl client (as CTest runs them).
    echo "sanitize: weir-connectors-tests [http_sink] on the curl client under ASan+UBSan" >&2
    require_tests "$build/weir-connectors-tests" "[http_sink]"
    WEIR_HTTP_SINK_CLIENT=curl ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 "$build/weir-connectors-tests" -w NoTests "[http_sink]"
    reports=$(mktemp -d)
    trap 'rm -rf "$reports"' EXIT
    case "$build" in /*) export WEIR_BINARY=$build/weir ;; *) export WEIR_BINARY=$root/$build/weir ;; esac
    # Leak checks are off for weir: the tests kill it on purpose (kill -9).
    export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:log_path=$reports/asan
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan
    echo "sanitize: the data-path integration tests against $WEIR_BINARY" >&2
    status=0
    # ~[rss]: memory bounds do not hold under ASan (its quarantine keeps freed memory).
    filter="[ingress]~[known-bug],[depth],[delivery],[sink]~[known-bug]~[rss],[dlq],[faults]~[rotating]~[known-bug]~[rss],[backpressure]"
    require_tests "$tests_binary" "$filter"
    "$tests_binary" -w NoTests "$filter" || status=$?
    if compgen -G "$reports/*" > /dev/null; then
      echo "sanitize: sanitizer reports from weir processes:" >&2
      cat "$reports"/* >&2
      status=1
    fi
    exit $status
    ;;
  tsan | tsan-build)
    build=${TSAN_BUILD_DIR:-build-tsan}
    BUILD_DIR=$build BUILD_TYPE=Debug CXXFLAGS="-O1 -fsanitize=thread" LDFLAGS="-fsanitize=thread" \
      CMAKE_ARGS="-DWEIR_WERROR=OFF -DWEIR_BENCH=OFF" \
      build_tree "TSan" weir-runtime-tests weir-bus-tests
    [ "$kind" = tsan-build ] && exit 0
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    for t in weir-runtime-tests weir-bus-tests; do
      echo "sanitize: $t under TSan" >&2
      "$build/$t" -w NoTests
    done
    ;;
  *)
    echo "scripts/sanitize.sh: unknown job '$kind' (asan, tsan, asan-build or tsan-build)" >&2
    exit 2
    ;;
esac
