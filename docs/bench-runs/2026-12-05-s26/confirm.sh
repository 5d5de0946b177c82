#!/bin/bash
# Session 26: the issue-10 figures re-measured on the final binary, default config
# (delivery_loops auto = 1 here), nothing else running. Run from the repository root.
out=docs/bench-runs/2026-12-05-s26
date -u +"start %H:%M:%S load $(cut -d' ' -f1 /proc/loadavg)" >> $out/window.txt
r() { local name=$1; shift; "$@" > $out/$name.json 2>>$out/confirm.err; echo "$(date -u +%H:%M:%S) $name rc=$?" >> $out/window.txt; }
for i in 1 2 3; do
  r closed-$i bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3
  r paced1k-$i bench/paced.sh 1000 10 --no-cold-start
done
r syscalls-1 bench/syscalls.sh --seconds 8 --per-thread
r multiflow-1 bench/multi-flow.sh --counts 1,50 --seconds 5
r c64-1 bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }'
date -u +"end %H:%M:%S" >> $out/window.txt
