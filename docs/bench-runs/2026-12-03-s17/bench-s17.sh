#!/bin/bash
# Session 17 quiet-window check: the data path did not change this session (77f11c9 touches
# start-up only), so this re-measures session 16's headline scenarios on main's binary to
# show they still hold on this machine today. Nothing else ran.
cd /work/main; out=docs/bench-runs/2026-12-03-s17; mkdir -p $out
L=/work/bench-s17.log; E=/work/bench-s17.err
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L; }
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
for i in 1 2 3; do
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-$i.json 2>>$E; note run-$i $?
  bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-$i.json 2>>$E; note paced1k-$i $?
done
echo "end $(date -u +%T)" >> $L
