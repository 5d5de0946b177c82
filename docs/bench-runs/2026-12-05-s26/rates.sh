#!/usr/bin/env bash
# Session 26: e2e latency against the paced rate, to show what bounds the 5,000/s p99.
# Default layout (delivery_loops auto = 1 on this 2-vCPU host). Rates alternate upward
# then downward so a drift of the host shows as a difference between the two passes.
# Beside each run, the whole machine's busy share (user+nice+system+irq+softirq of
# /proc/stat) sampled every second to busy-<rate>-<pass>.txt.
# Run from the repository root: docs/bench-runs/2026-12-05-s26/rates.sh
set -u
out=docs/bench-runs/2026-12-05-s26
sample() {  # sample FILE: one "epoch busy_fraction" line per second until killed
  local prev_total=0 prev_idle=0
  while :; do
    read -r _ u n s i w irq sirq st _ < /proc/stat
    total=$((u + n + s + i + w + irq + sirq + st)); idle=$((i + w))
    if [ "$prev_total" -gt 0 ]; then
      echo "$(date +%s) $(awk -v t=$((total - prev_total)) -v d=$((idle - prev_idle)) 'BEGIN{printf "%.3f", 1 - d / t}')"
    fi
    prev_total=$total; prev_idle=$idle
    sleep 1
  done > "$1"
}
for pass in 1 2; do
  if [ "$pass" = 1 ]; then rates="2000 3000 4000 5000"; else rates="5000 4000 3000 2000"; fi
  for r in $rates; do
    sample "$out/busy-$r-$pass.txt" & sp=$!
    bench/paced.sh "$r" 10 --no-cold-start > "$out/paced$r-$pass.json" 2>> "$out/bench.err"
    echo "rate $r pass $pass rc=$?" >> "$out/bench.err"
    kill "$sp"; wait "$sp" 2>/dev/null
  done
done
