#!/bin/bash
# Session 23 second quiet window (the final code): A/B of the HTTP sink's clients (ADR 0270) with one weir binary
# (main 43978ef): "curl" runs with WEIR_HTTP_SINK_CLIENT=curl (the sink as before this
# session), "weir" without it (weir's own HTTP/1.1 client). Alternating run by run; nothing
# else ran. Run from the repository root:  docs/bench-runs/2026-12-04-s23b/bench-s23b.sh
set -u
OUT=$(dirname "$0")
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/window.txt"; }
client() { if [ "$1" = curl ]; then export WEIR_HTTP_SINK_CLIENT=curl; else unset WEIR_HTTP_SINK_CLIENT; fi; }
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/window.txt"
for i in 1 2 3; do
  for v in curl weir; do
    client $v
    bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > "$OUT/closed-$v-$i.json" 2>>"$OUT/bench.err"; note closed-$v-$i $?
  done
done
for i in 1 2 3; do
  for v in curl weir; do
    client $v
    bench/paced.sh 1000 10 --no-cold-start > "$OUT/paced1k-$v-$i.json" 2>>"$OUT/bench.err"; note paced1k-$v-$i $?
  done
done
for i in 1 2 3; do
  for v in curl weir; do
    client $v
    bench/paced.sh 5000 10 --no-cold-start > "$OUT/paced5k-$v-$i.json" 2>>"$OUT/bench.err"; note paced5k-$v-$i $?
  done
done
for v in curl weir; do
  client $v
  bench/run.sh 60 64 --no-cold-start --ceiling-seconds 3 > "$OUT/closed64-$v.json" 2>>"$OUT/bench.err"; note closed64-$v $?
done
for v in curl weir; do
  client $v
  bench/syscalls.sh --rate 500 --seconds 8 --per-thread > "$OUT/syscalls-$v.json" 2>>"$OUT/bench.err"; note syscalls-$v $?
done
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/window.txt"
