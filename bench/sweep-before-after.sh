#!/usr/bin/env bash
# Session-3 benchmark sweep: before (base build at 0b8d892) and after (main), alternating.
cd "$(dirname "$0")/.."
B0=${BEFORE:?BEFORE=build dir of the older commit}
B1=${AFTER:-build}
out=${OUT:-bench/out/sweep}; mkdir -p $out
echo "start $(date -u +%T) la $(cut -d' ' -f1 /proc/loadavg)" > $out/times.txt
for i in 1 2 3; do
  for tag in base new; do
    b=$B0; [ $tag = new ] && b=$B1
    BUILD=$b bench/run.sh 15 32 --ceiling-seconds 3 > $out/run-$tag-$i.json 2> $out/run-$tag-$i.err
    echo "run $tag $i $(date -u +%T) la $(cut -d' ' -f1 /proc/loadavg)" >> $out/times.txt
  done
done
for i in 1 2; do
  for tag in base new; do
    b=$B0; [ $tag = new ] && b=$B1
    BUILD=$b bench/paced.sh 1000 10 --no-cold-start --ceiling-seconds 3 > $out/paced1k-$tag-$i.json 2> $out/paced1k-$tag-$i.err
    echo "paced1k $tag $i $(date -u +%T) la $(cut -d' ' -f1 /proc/loadavg)" >> $out/times.txt
  done
done
BUILD=$B1 bench/paced.sh 5000 10 --no-cold-start --ceiling-seconds 3 > $out/paced5k-new.json 2> $out/paced5k-new.err
echo "paced5k $(date -u +%T)" >> $out/times.txt
BUILD=$B1 bench/run.sh 30 64 --no-cold-start --ceiling-seconds 3 > $out/run64-new.json 2> $out/run64-new.err
echo "run64 $(date -u +%T)" >> $out/times.txt
BUILD=$B1 bench/multi-flow.sh --counts 1,50 --seconds 5 > $out/multi-new.json 2> $out/multi-new.err
BUILD=$B0 bench/multi-flow.sh --counts 1,50 --seconds 5 > $out/multi-base.json 2> $out/multi-base.err
echo "multi $(date -u +%T)" >> $out/times.txt
$B1/weir-bench-tables --benchmark_repetitions=3 --benchmark_report_aggregates_only=true > $out/tables.txt 2>&1
BUILD=$B1 bench/table-latency.sh --rounds 20 > $out/table-latency.json 2> $out/table-latency.err
echo "end $(date -u +%T) la $(cut -d' ' -f1 /proc/loadavg)" >> $out/times.txt
