#!/bin/bash
# Session 22: paced 5,000/s on main (e0b1862) with the harness that leaves the warm-up out of
# the sink's e2e percentiles (7e508c7). Run from the repository root, nothing else running.
set -u
OUT=$(dirname "$0")
for i in 1 2 3; do
  bench/paced.sh 5000 10 --no-cold-start > "$OUT/paced5k-main-$i.json" 2>>"$OUT/bench.err"
  echo "paced5k-main-$i rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/window.txt"
done
