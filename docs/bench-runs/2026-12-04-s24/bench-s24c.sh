#!/bin/bash
# Session 24, window 2: the final code (main 200f179: parse_json's quick DOM and dump_safe,
# ADR 0271) against the session's start 1f084ea (REF=/tmp/refbuild, build/'s tools). Four
# closed-loop pairs and three paced pairs, the order within a pair switching each time.
# Run from the repository root:  docs/bench-runs/2026-12-04-s24/bench-s24c.sh
set -u
OUT=$(dirname "$0")/final
mkdir -p "$OUT"
REF=${REF:-/tmp/refbuild}
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/window.txt"; }
order() { if [ $(($1 % 2)) = 1 ]; then echo "ref main"; else echo "main ref"; fi; }
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/window.txt"
for i in 1 2 3 4; do
  for v in $(order $i); do
    B=$REF; [ $v = main ] && B=build
    BUILD=$B bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > "$OUT/closed-$v-$i.json" 2>>"$OUT/bench.err"; note closed-$v-$i $?
  done
done
for i in 1 2 3; do
  for v in $(order $i); do
    B=$REF; [ $v = main ] && B=build
    BUILD=$B bench/paced.sh 1000 10 --no-cold-start > "$OUT/paced1k-$v-$i.json" 2>>"$OUT/bench.err"; note paced1k-$v-$i $?
  done
done
for i in 1 2 3; do
  build/weir-bench-flows --benchmark_filter='Json|ParseSerializeOnly' --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true > "$OUT/micro-$i.txt" 2>&1
done
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/window.txt"
