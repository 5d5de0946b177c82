#!/bin/bash
# Session 20 quiet window: A/B of the HTTP sink's resend on a dead kept-alive connection
# (ADR 0267), which touches only the failure path. REF=/tmp/refbuild: build/'s tools with
# b1989fb's weir (the session's start); main: build/. Alternating run by run; nothing else ran.
cd /work/main; out=docs/bench-runs/2026-12-04-s20; mkdir -p $out
REF=${REF:-/tmp/refbuild}
L=$out/runs.txt; E=$out/bench.err
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L; }
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
for i in 1 2 3; do
  for v in ref main; do
    B=$REF; [ $v = main ] && B=build
    BUILD=$B bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-$v-$i.json 2>>$E; note paced1k-$v-$i $?
    BUILD=$B bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-$v-$i.json 2>>$E; note run-$v-$i $?
  done
done
echo "end $(date -u +%T)" >> $L
