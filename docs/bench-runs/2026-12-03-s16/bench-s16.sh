#!/bin/bash
# Session 16 quiet-window benchmarks: nats-server's GOMAXPROCS (ADR 0265). The same weir
# binary (main at the session's end) in every run; only the bench's nats-server differs:
# reference NATS_GOMAXPROCS=go (Go's default: all CPUs, as before ADR 0265) against the
# default (half the CPUs, 1 here: what weir's embedded server now gets). Alternating run by
# run. Not repeated (weir's own process does not change): 50 flows, cold start.
cd /work/main; out=docs/bench-runs/2026-12-03-s16; mkdir -p $out
L=/work/bench-s16.log; E=/work/bench-s16.err
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L; }
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
for i in 1 2 3; do
  NATS_GOMAXPROCS=go bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-base-$i.json 2>>$E; note paced1k-base-$i $?
  bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-$i.json 2>>$E; note paced1k-$i $?
done
for i in 1 2 3; do
  NATS_GOMAXPROCS=go bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-base-$i.json 2>>$E; note run-base-$i $?
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-$i.json 2>>$E; note run-$i $?
done
for i in 1 2 3; do
  NATS_GOMAXPROCS=go bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-base-$i.json 2>>$E; note paced5k-base-$i $?
  bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-$i.json 2>>$E; note paced5k-$i $?
done
for i in 1 2; do
  NATS_GOMAXPROCS=go bench/flow-only.sh > $out/flow-only-base-$i.json 2>>$E; note flow-only-base-$i $?
  bench/flow-only.sh > $out/flow-only-$i.json 2>>$E; note flow-only-$i $?
done
NATS_GOMAXPROCS=go bench/syscalls.sh --seconds 8 --per-thread > $out/syscalls-base.json 2>>$E; note syscalls-base $?
bench/syscalls.sh --seconds 8 --per-thread > $out/syscalls.json 2>>$E; note syscalls $?
NATS_GOMAXPROCS=go bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }' > $out/run-64c-base-1.json 2>>$E; note 64c-base-1 $?
bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }' > $out/run-64c-1.json 2>>$E; note 64c-1 $?
echo "end $(date -u +%T)" >> $L
