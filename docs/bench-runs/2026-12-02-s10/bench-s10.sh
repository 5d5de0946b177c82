#!/bin/bash
# Session 10 quiet-window benchmarks. Reference = 5944520 (the session's start with this
# session's build flags, before the HTTP sinks moved onto the sink loop): BUILD=/tmp/refbuild,
# the same build's tools with that commit's weir.
cd /work/main; out=docs/bench-runs/2026-12-02-s10; mkdir -p $out
L=/work/bench-s10.log; E=/work/bench-s10.err
REF=/tmp/refbuild
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L; }
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
bench/cold_start.py --weir $REF/weir --weir build/weir --runs 15 --timeline 9 > $out/cold-start.json 2>>$E; note cold $?
for i in 1 2 3; do
  BUILD=$REF bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-base-$i.json 2>>$E; note run-base-$i $?
  bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run-$i.json 2>>$E; note run-$i $?
  BUILD=$REF bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-base-$i.json 2>>$E; note paced-base-$i $?
  bench/paced.sh 1000 10 --no-cold-start > $out/paced1k-$i.json 2>>$E; note paced-$i $?
done
BUILD=$REF bench/syscalls.sh --seconds 8 > $out/syscalls-base.json 2>>$E; note sys-base $?
bench/syscalls.sh --seconds 8 > $out/syscalls.json 2>>$E; note sys $?
for b in base new; do
  if [ $b = base ]; then B=$REF; else B=build; fi
  (python3 docs/bench-runs/2026-12-02-s10/threads.py 1000 8 > $out/threads-$b.txt &)
  BUILD=$B bench/paced.sh 1000 16 --no-cold-start --no-ceilings > /dev/null 2>>$E; note threads-$b $?
done
bench/multi-flow.sh --counts 1,50 --seconds 5 > $out/multi-flow.json 2>>$E; note multi $?
BUILD=$REF bench/paced.sh 5000 10 --no-cold-start > $out/paced5k-base.json 2>>$E; note paced5k-base $?
bench/paced.sh 5000 10 --no-cold-start > $out/paced5k.json 2>>$E; note paced5k $?
bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }' > $out/run-64c-60s-delay250.json 2>>$E; note 64c $?
echo "end $(date -u +%T)" >> $L
