#!/usr/bin/env bash
# Session-4 benchmark sweep: before (BEFORE=build of the session's start, be16db0) and after
# (AFTER=build, default build/), alternating, one quiet window. Raw JSON in $OUT.
cd "$(dirname "$0")/.."
B0=${BEFORE:?BEFORE=build dir of the older commit}
B1=${AFTER:-build}
out=${OUT:-bench/out/sweep4}; mkdir -p "$out"
stamp() { echo "$1 $(date -u +%T) la $(cut -d' ' -f1 /proc/loadavg)" >> "$out/times.txt"; }
stamp start
for i in 1 2 3; do
  for tag in base new; do
    b=$B0; [ $tag = new ] && b=$B1
    BUILD=$b bench/run.sh 15 32 --ceiling-seconds 3 > "$out/run-$tag-$i.json" 2> "$out/run-$tag-$i.err"
    stamp "run $tag $i"
  done
done
for i in 1 2; do
  for tag in base new; do
    b=$B0; [ $tag = new ] && b=$B1
    BUILD=$b bench/paced.sh 1000 10 --no-cold-start --ceiling-seconds 3 > "$out/paced1k-$tag-$i.json" 2> "$out/paced1k-$tag-$i.err"
    stamp "paced1k $tag $i"
  done
done
BUILD=$B1 bench/paced.sh 5000 10 --no-cold-start --ceiling-seconds 3 > "$out/paced5k-new.json" 2> "$out/paced5k-new.err"
stamp paced5k
BUILD=$B1 bench/run.sh 60 64 --no-cold-start --ceiling-seconds 3 --weir-config 'backlog: { max_delay: 200ms }' \
  > "$out/run64-delay-new.json" 2> "$out/run64-delay-new.err"
stamp run64-delay
for tag in base new; do
  b=$B0; [ $tag = new ] && b=$B1
  BUILD=$b bench/multi-flow.sh --counts 1,50 --seconds 5 > "$out/multi-$tag.json" 2> "$out/multi-$tag.err"
  BUILD=$b bench/syscalls.sh --seconds 8 > "$out/syscalls-$tag.json" 2> "$out/syscalls-$tag.err"
  stamp "multi+syscalls $tag"
done
stamp end
