#!/bin/bash
# Session 14 quiet-window benchmarks. Reference = 8ae7cb4 (the session's start: glibc
# malloc): BUILD=/tmp/refbuild, the same build's tools with that commit's weir. main links
# mimalloc (ADR 0263). Alternating run by run.
cd /work/main; out=docs/bench-runs/2026-12-03-s14; mkdir -p $out
L=/work/bench-s14.log; E=/work/bench-s14.err
REF=/tmp/refbuild
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L; }
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
for i in 1 2 3 4 5; do
  BUILD=$REF bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-base-$i.json 2>>$E; note run-base-$i $?
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-$i.json 2>>$E; note run-$i $?
done
for i in 1 2 3; do
  BUILD=$REF bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-base-$i.json 2>>$E; note paced1k-base-$i $?
  bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-$i.json 2>>$E; note paced1k-$i $?
done
for i in 1 2 3; do
  BUILD=$REF bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-base-$i.json 2>>$E; note paced5k-base-$i $?
  bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-$i.json 2>>$E; note paced5k-$i $?
done
for i in 1 2 3; do
  BUILD=$REF bench/flow-only.sh > $out/flow-only-base-$i.json 2>>$E; note flow-only-base-$i $?
  bench/flow-only.sh > $out/flow-only-$i.json 2>>$E; note flow-only-$i $?
done
for i in 1 2 3; do
  BUILD=$REF bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }' > $out/run-64c-base-$i.json 2>>$E; note 64c-base-$i $?
  bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }' > $out/run-64c-$i.json 2>>$E; note 64c-$i $?
done
BUILD=$REF bench/multi-flow.sh --counts 1,50 --seconds 5 > $out/multi-flow-base.json 2>>$E; note multi-base $?
bench/multi-flow.sh --counts 1,50 --seconds 5 > $out/multi-flow.json 2>>$E; note multi $?
BUILD=$REF bench/syscalls.sh --seconds 8 --per-thread > $out/syscalls-base.json 2>>$E; note syscalls-base $?
bench/syscalls.sh --seconds 8 --per-thread > $out/syscalls.json 2>>$E; note syscalls $?
bench/cold_start.py --weir $REF/weir --weir build/weir --runs 15 --timeline 9 > $out/cold-start.json 2>>$E; note cold $?
echo "end $(date -u +%T)" >> $L
