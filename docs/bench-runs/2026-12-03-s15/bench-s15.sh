#!/bin/bash
# Session 15 quiet-window benchmarks. Reference = 7d8c502 (the session's start: acks
# written at once): BUILD=/tmp/refbuild, the same build's tools with that commit's weir.
# main holds the consumer loops' acks for their next write (ADR 0264). Alternating run by
# run. Not repeated here (the change does not touch them; session 14's window holds):
# 64 connections 60 s, 50 flows, cold start.
cd /work/main; out=docs/bench-runs/2026-12-03-s15; mkdir -p $out
L=/work/bench-s15.log; E=/work/bench-s15.err
REF=/tmp/refbuild
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L; }
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
for i in 1 2 3; do
  BUILD=$REF bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-base-$i.json 2>>$E; note paced1k-base-$i $?
  bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-$i.json 2>>$E; note paced1k-$i $?
done
for i in 1 2 3; do
  BUILD=$REF bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-base-$i.json 2>>$E; note run-base-$i $?
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-$i.json 2>>$E; note run-$i $?
done
for i in 1 2 3; do
  BUILD=$REF bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-base-$i.json 2>>$E; note paced5k-base-$i $?
  bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-$i.json 2>>$E; note paced5k-$i $?
done
for i in 1 2 3; do
  BUILD=$REF bench/flow-only.sh > $out/flow-only-base-$i.json 2>>$E; note flow-only-base-$i $?
  bench/flow-only.sh > $out/flow-only-$i.json 2>>$E; note flow-only-$i $?
done
BUILD=$REF bench/syscalls.sh --seconds 8 --per-thread > $out/syscalls-base.json 2>>$E; note syscalls-base $?
bench/syscalls.sh --seconds 8 --per-thread > $out/syscalls.json 2>>$E; note syscalls $?
echo "end $(date -u +%T)" >> $L
