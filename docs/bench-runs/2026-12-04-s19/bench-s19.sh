#!/bin/bash
# Session 19: what one wake-up of a weir thread costs. bench/syscalls.sh (per-thread CPU and
# context switches per event, perf-counted system calls per thread) at 1,000, 2,000 and
# 4,000 events/s, alternating, ×3; nothing else running.
cd "$(dirname "$0")/../../.."
out=docs/bench-runs/2026-12-04-s19
for i in 1 2 3; do
  for r in 1000 2000 4000; do
    bench/syscalls.sh --rate $r --seconds 8 --no-strace --perf > $out/syscalls-$r-$i.json 2>>$out/bench.err
    echo "syscalls-$r-$i rc=$?" >> $out/runs.txt
  done
done
