#!/bin/bash
# Session 15, second quiet window: the final code (held acks with at most 8 held, ADR 0264)
# against the session's start 7d8c502 (BUILD=/tmp/refbuild), paced runs only, alternating.
cd /work/main; out=docs/bench-runs/2026-12-03-s15/final; mkdir -p $out
L=/work/bench-s15b.log; E=/work/bench-s15b.err
REF=/tmp/refbuild
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L; }
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
for i in 1 2 3; do
  BUILD=$REF bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-base-$i.json 2>>$E; note paced5k-base-$i $?
  bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-$i.json 2>>$E; note paced5k-$i $?
done
for i in 1 2 3; do
  BUILD=$REF bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-base-$i.json 2>>$E; note paced1k-base-$i $?
  bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-$i.json 2>>$E; note paced1k-$i $?
done
for i in 1 2; do
  BUILD=$REF bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-base-$i.json 2>>$E; note run-base-$i $?
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-$i.json 2>>$E; note run-$i $?
done
echo "end $(date -u +%T)" >> $L
