#!/bin/bash
# Session 21 quiet window: backlog.ingress_nice at its default (10) against 0 (the
# behaviour before ADR 0268), same binary, alternating run by run.
# Run from the repository root with nothing else running:
#   docs/bench-runs/2026-12-04-s21/bench-s21.sh
set -u
OUT=$(dirname "$0")
REF='backlog: { ingress_nice: 0 }'
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" > "$OUT/window.txt"
for i in 1 2 3; do
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > "$OUT/closed-nice10-$i.json" 2>/dev/null
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 --weir-config "$REF" > "$OUT/closed-nice0-$i.json" 2>/dev/null
done
for i in 1 2 3; do
  bench/paced.sh 1000 10 --no-cold-start > "$OUT/paced1k-nice10-$i.json" 2>/dev/null
  bench/paced.sh 1000 10 --no-cold-start --weir-config "$REF" > "$OUT/paced1k-nice0-$i.json" 2>/dev/null
done
for i in 1 2 3; do
  bench/paced.sh 5000 10 --no-cold-start > "$OUT/paced5k-nice10-$i.json" 2>/dev/null
  bench/paced.sh 5000 10 --no-cold-start --weir-config "$REF" > "$OUT/paced5k-nice0-$i.json" 2>/dev/null
done
for i in 1 2; do
  bench/run.sh 60 64 --no-cold-start --no-ceilings > "$OUT/c64-nice10-$i.json" 2>/dev/null
  bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config "$REF" > "$OUT/c64-nice0-$i.json" 2>/dev/null
done
bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }' \
  > "$OUT/c64-nice10-delay250.json" 2>/dev/null
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/window.txt"
