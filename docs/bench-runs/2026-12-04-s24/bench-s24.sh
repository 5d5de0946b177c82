#!/bin/bash
# Session 24 quiet window: A/B of parse_json building its DOM with the quick scan (ADR 0271). REF=/tmp/refbuild:
# build/'s tools with 1f084ea's weir (the session's start, built alone in a worktree);
# main: build/. Alternating run by run; nothing else ran.
# Run from the repository root:  docs/bench-runs/2026-12-04-s24/bench-s24.sh
set -u
OUT=$(dirname "$0")
REF=${REF:-/tmp/refbuild}
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/window.txt"; }
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/window.txt"
for i in 1 2 3; do
  for v in ref main; do
    B=$REF; [ $v = main ] && B=build
    BUILD=$B bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > "$OUT/closed-$v-$i.json" 2>>"$OUT/bench.err"; note closed-$v-$i $?
  done
done
for i in 1 2 3; do
  for v in ref main; do
    B=$REF; [ $v = main ] && B=build
    BUILD=$B bench/paced.sh 1000 10 --no-cold-start > "$OUT/paced1k-$v-$i.json" 2>>"$OUT/bench.err"; note paced1k-$v-$i $?
  done
done
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/window.txt"
