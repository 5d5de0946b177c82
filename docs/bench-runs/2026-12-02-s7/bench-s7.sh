#!/bin/bash
# Session 7 quiet-window benchmarks. Reference binary: /tmp/weir-s7a (= ea8b579, session start).
cd /work/main; out=docs/bench-runs/2026-12-02-s7; mkdir -p $out
L=/work/bench-s7.log; E=/work/bench-s7.err
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
bench/cold_start.py --weir /tmp/weir-s7a --weir build/weir --runs 15 --timeline 9 > $out/cold-start.json 2>>$E
echo "cold rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L
chrt -f 10 bench/cold_start.py --weir /tmp/weir-s7a --weir build/weir --runs 15 --empty-runs 3 > $out/cold-start-chrt.json 2>>$E
echo "cold chrt rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L
bench/multi-flow.sh --counts 1,50 --seconds 5 > $out/multi-flow.json 2>>$E
echo "multi rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L
for i in 1 2 3; do
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-$i.json 2>>$E
  echo "run $i rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L
  bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-$i.json 2>>$E
  echo "paced $i rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L
done
bench/paced.sh 5000 10 --no-cold-start > $out/paced5k.json 2>>$E
echo "paced5k rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L
bench/run.sh 60 64 --no-cold-start --no-ceilings > $out/run-64c-60s.json 2>>$E
echo "64c rc=$? $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L
echo "end $(date -u +%T)" >> $L
