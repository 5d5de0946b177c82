#!/bin/bash
# Session 24, second half of the quiet window: three more pairs of each, main first in each
# pair this time (bench-s24.sh ran the reference first), so an order effect shows.
# Run from the repository root:  docs/bench-runs/2026-12-04-s24/bench-s24b.sh
set -u
OUT=$(dirname "$0")
REF=${REF:-/tmp/refbuild}
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/window.txt"; }
for i in 4 5 6; do
  for v in main ref; do
    B=$REF; [ $v = main ] && B=build
    BUILD=$B bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > "$OUT/closed-$v-$i.json" 2>>"$OUT/bench.err"; note closed-$v-$i $?
  done
done
for i in 4 5 6; do
  for v in main ref; do
    B=$REF; [ $v = main ] && B=build
    BUILD=$B bench/paced.sh 1000 10 --no-cold-start > "$OUT/paced1k-$v-$i.json" 2>>"$OUT/bench.err"; note paced1k-$v-$i $?
  done
done
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/window.txt"
