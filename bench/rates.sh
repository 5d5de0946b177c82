#!/usr/bin/env bash
# End-to-end latency against the paced rate (docs/bench.md "Latency against the paced rate"):
# bench/paced.sh at each rate, upward then downward, so a drift of the machine during the
# window shows as a difference between the two passes. Beside each run, the whole machine's
# busy share (user + nice + system + irq + softirq of /proc/stat) once a second.
#
#   bench/rates.sh [OUT_DIR]          # default bench/out/rates-<UTC date>
#
#   RATES="2000 3000 4000 5000"   the rates of the upward pass (the downward pass reverses them)
#   SECONDS_PER_RUN=10            the paced load of each run
#   BUILD=dir                     the build to measure (default build/)
#
# Output: OUT_DIR/paced<RATE>-<PASS>.json (bench/paced.sh's report), OUT_DIR/busy-<RATE>-<PASS>.txt
# ("epoch busy_fraction" a line), progress in OUT_DIR/rates.err; OUT_DIR/window.txt gets the
# start (time, load average), each run's end time and exit code, and the end. About six
# minutes with the defaults. Start it only when nothing else runs on the machine (docs/bench.md
# "How to reproduce"). Loads are bounded by rate and duration, on loopback only. Exit 1 when
# any run exited non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

rates=${RATES:-2000 3000 4000 5000}
seconds=${SECONDS_PER_RUN:-10}
out=${1:-bench/out/rates-$(date -u +%Y-%m-%d)}
mkdir -p "$out"
failed=0
sampler=

sample() {  # sample FILE: one "epoch busy_fraction" line a second until killed
  local prev_total=0 prev_idle=0 u n s i w irq sirq st total idle
  while :; do
    read -r _ u n s i w irq sirq st _ < /proc/stat
    total=$((u + n + s + i + w + irq + sirq + st))
    idle=$((i + w))
    if [ "$prev_total" -gt 0 ] && [ "$total" -gt "$prev_total" ]; then
      echo "$(date +%s) $(awk -v t=$((total - prev_total)) -v d=$((idle - prev_idle)) 'BEGIN { printf "%.3f", 1 - d / t }')"
    fi
    prev_total=$total
    prev_idle=$idle
    sleep 1
  done > "$1"
}
stop_sampler() {
  if [ -n "$sampler" ]; then
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    sampler=
  fi
}
trap stop_sampler EXIT

note() { echo "$*" >> "$out/window.txt"; }
note "start $(date -u +%Y-%m-%dT%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
reversed=$(echo "$rates" | tr ' ' '\n' | grep -v '^$' | tac | tr '\n' ' ')
for pass in 1 2; do
  if [ "$pass" = 1 ]; then list=$rates; else list=$reversed; fi
  for r in $list; do
    sample "$out/busy-$r-$pass.txt" &
    sampler=$!
    rc=0
    bench/paced.sh "$r" "$seconds" --no-cold-start > "$out/paced$r-$pass.json" 2>> "$out/rates.err" || rc=$?
    note "$(date -u +%H:%M:%S) paced$r-$pass rc=$rc"
    if [ "$rc" != 0 ]; then failed=1; fi
    stop_sampler
  done
done
note "end $(date -u +%Y-%m-%dT%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$failed"
