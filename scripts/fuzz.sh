#!/usr/bin/env bash
# Fuzzes the flows/ library (flow loader, expressions, the bounded JSON parse of event
# bodies), the HTTP request path (raw bytes through the real server on loopback) and the
# webhook signature verifiers and the MQTT codec (broker bytes through the mqtt source's
# decoder): builds the libFuzzer targets with clang, ASan and UBSan in
# build-fuzz/ (or $FUZZ_BUILD_DIR), then runs each target for SECONDS (default 30) on a copy of its seed corpus
# (<folder>/fuzz/corpus/<target>/; the corpus in the repo is not modified). Inputs are
# up to 8 KiB for the flow and expression targets, 64 KiB for the MQTT codec and 2 MiB where
# the input is a body. Exits
# non-zero when a target crashes, leaks, hangs or trips a sanitizer; the input that did
# it is kept in build-fuzz/fuzz-artifacts/, with the target's log.
#   scripts/fuzz.sh          # 30 s per target
#   scripts/fuzz.sh 300      # longer
#   scripts/fuzz.sh build    # only build the targets (scripts/warm-up.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
build=${FUZZ_BUILD_DIR:-build-fuzz}
targets=(${FUZZ_TARGETS:-flow_loader expr json_ingress http_request signature mqtt_codec})
declare -A corpus=([flow_loader]=flows/fuzz [expr]=flows/fuzz [json_ingress]=flows/fuzz [http_request]=runtime/fuzz [signature]=connectors/http/fuzz [mqtt_codec]=connectors/mqtt/fuzz)
declare -A max_len=([flow_loader]=8192 [expr]=8192 [json_ingress]=2097152 [http_request]=2097152 [signature]=2097152 [mqtt_codec]=65536)
declare -A timeout=([flow_loader]=10 [expr]=10 [json_ingress]=10 [http_request]=60 [signature]=10 [mqtt_codec]=10)  # http: a socket round trip

mkdir -p "$build"
(
  # One build at a time per tree (scripts/warm-up.sh may be building it ahead of CTest).
  flock 8
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DWEIR_FUZZ=ON -DWEIR_SANITIZE=ON -DWEIR_TESTS=ON -DWEIR_BENCH=OFF >&2
  cmake --build "$build" -j2 --target "${targets[@]/#/weir-fuzz-}" >&2
) 8> "$build/.lock"
[ "$seconds" = build ] && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/fuzz-artifacts"
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  cp -r "${corpus[$t]}/corpus/$t/." "$work/$t/"
  echo "fuzz: $t for ${seconds}s" >&2
  if ! "$build/weir-fuzz-$t" "$work/$t" -max_total_time="$seconds" -timeout="${timeout[$t]}" -rss_limit_mb=2048 \
      -max_len="${max_len[$t]}" -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" 2> "$work/$t.log"; then
    failed=1
    # The whole log is kept beside the input that did it: ctest keeps a test's output only
    # until its next run (a re-run to check for a flake overwrites it).
    log="$build/fuzz-artifacts/$t-$(date -u +%Y%m%dT%H%M%SZ).log"
    cp "$work/$t.log" "$log"
    echo "fuzz: $t FAILED; its log: $log; last lines:" >&2
    tail -n 60 "$work/$t.log" >&2
  else
    grep -E "^stat::number_of_executed_units|^#[0-9]+ +DONE" "$work/$t.log" | tail -n 2 >&2 || true
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: failures; reproduce with $build/weir-fuzz-<target> $build/fuzz-artifacts/<file>" >&2
  exit 1
fi
echo "fuzz: ok (${#targets[@]} targets, ${seconds}s each)" >&2
