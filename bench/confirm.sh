#!/usr/bin/env bash
# The current figures of docs/bench.md, all in one quiet window on one build and the default
# config: closed loop and paced 1,000/s alternating (REPS times each), system calls and
# context switches per event, 1 and 50 flows, 64 connections with the delay bound, then the
# flow stage alone (REPS times).
#
#   bench/confirm.sh [OUT_DIR]        # default bench/out/confirm-<UTC date>
#
#   REPS=3      runs of the repeated scenarios (closed loop, paced 1,000/s, flow-only)
#   BUILD=dir   the build to measure (default build/; read by every script called here)
#
# Each run's JSON report goes to OUT_DIR/<name>.json (closed-N, paced1k-N, syscalls-1,
# multiflow-1, c64-1, flow-only-N), its progress to OUT_DIR/confirm.err; OUT_DIR/window.txt
# gets the start time and load average, each run's end time and exit code, and the end.
# About 9 minutes with REPS=3. Start it only when nothing else runs on the machine (no
# build, no test suite): see docs/bench.md "How to reproduce". Every load is bounded by its
# count and duration and stays on loopback (the called scripts start their own
# nats-server, weir, sink and load generator on free loopback ports and stop them by PID).
# Exit 1 when any run exited non-zero (an acked event lost, or a run invalid); the other
# runs still run.
set -euo pipefail
cd "$(dirname "$0")/.."

reps=${REPS:-3}
out=${1:-bench/out/confirm-$(date -u +%Y-%m-%d)}
mkdir -p "$out"
failed=0

note() { echo "$*" >> "$out/window.txt"; }
run() {  # run NAME COMMAND...: the report to OUT/NAME.json, the exit code to window.txt
  local name=$1 rc=0
  shift
  "$@" > "$out/$name.json" 2>> "$out/confirm.err" || rc=$?
  note "$(date -u +%H:%M:%S) $name rc=$rc"
  if [ "$rc" != 0 ]; then failed=1; fi
}

note "start $(date -u +%Y-%m-%dT%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$reps"); do
  run "closed-$i" bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3
  run "paced1k-$i" bench/paced.sh 1000 10 --no-cold-start
done
run syscalls-1 bench/syscalls.sh --seconds 8 --per-thread
run multiflow-1 bench/multi-flow.sh --counts 1,50 --seconds 5
run c64-1 bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }'
for i in $(seq 1 "$reps"); do
  run "flow-only-$i" bench/flow-only.sh --count 100000
done
note "end $(date -u +%Y-%m-%dT%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$failed"
