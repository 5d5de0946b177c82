#!/bin/bash
# Session 9 quiet-window benchmarks. Reference = the session's start (dc08c7a): binary
# /tmp/weir-base, and BUILD=/tmp/refbuild (the same build's tools with that weir).
cd /work/main; out=docs/bench-runs/2026-12-02-s9; mkdir -p $out
L=/work/bench-s9.log; E=/work/bench-s9.err
REF=/tmp/refbuild
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L; }
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
bench/cold_start.py --weir /tmp/weir-base --weir build/weir --runs 15 --timeline 9 > $out/cold-start.json 2>>$E; note cold $?
chrt -f 10 bench/cold_start.py --weir /tmp/weir-base --weir build/weir --runs 15 --empty-runs 3 > $out/cold-start-chrt.json 2>>$E; note coldchrt $?
for i in 1 2 3; do
  BUILD=$REF bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-base-$i.json 2>>$E; note run-base-$i $?
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-$i.json 2>>$E; note run-$i $?
  BUILD=$REF bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-base-$i.json 2>>$E; note paced-base-$i $?
  bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-$i.json 2>>$E; note paced-$i $?
done
BUILD=$REF bench/syscalls.sh --seconds 8 > $out/syscalls-base.json 2>>$E; note sys-base $?
bench/syscalls.sh --seconds 8 > $out/syscalls.json 2>>$E; note sys $?
bench/multi-flow.sh --counts 1,50 --seconds 5 > $out/multi-flow.json 2>>$E; note multi $?
BUILD=$REF bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-base.json 2>>$E; note paced5k-base $?
bench/paced.sh 5000 10 --no-cold-start > $out/paced5k.json 2>>$E; note paced5k $?
bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }' > $out/run-64c-60s-delay250.json 2>>$E; note 64c $?
echo "end $(date -u +%T)" >> $L
