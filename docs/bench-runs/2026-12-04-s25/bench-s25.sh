#!/bin/bash
# Session 25 (ADR 0272): one delivery loop (delivery_loops auto = 1 on this 2-vCPU host,
# "one") against two ("two": --weir-config 'delivery_loops: 2'), the same weir binary,
# alternating run by run (the order switching each pair); nothing else running.
cd "$(dirname "$0")/../../.."
out=docs/bench-runs/2026-12-04-s25
date -u +"start %H:%M:%S load $(cut -d' ' -f1 /proc/loadavg)" >> $out/window.txt
cfg() { [ "$1" = two ] && echo "delivery_loops: 2" || echo ""; }
run() { # layout kind i
  local c; c=$(cfg "$1")
  case $2 in
    closed) bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 ${c:+--weir-config "$c"} ;;
    paced1k) bench/paced.sh 1000 10 --no-cold-start ${c:+--weir-config "$c"} ;;
    paced5k) bench/paced.sh 5000 10 --no-cold-start ${c:+--weir-config "$c"} ;;
    syscalls) bench/syscalls.sh --seconds 8 --per-thread ${c:+--weir-config "$c"} ;;
  esac > $out/$2-$1-$3.json 2>>$out/bench.err
  echo "$(date -u +%H:%M:%S) $2-$1-$3 rc=$?" >> $out/window.txt
}
for i in 1 2 3 4 5; do
  if [ $((i % 2)) = 1 ]; then a=two; b=one; else a=one; b=two; fi
  run $a closed $i; run $b closed $i
  if [ $i -le 3 ]; then run $b paced1k $i; run $a paced1k $i; run $a paced5k $i; run $b paced5k $i; fi
done
run two syscalls 1; run one syscalls 1
bench/multi-flow.sh --counts 1,50 --seconds 5 > $out/multiflow-one-1.json 2>>$out/bench.err
echo "$(date -u +%H:%M:%S) multiflow-one-1 rc=$?" >> $out/window.txt
date -u +"end %H:%M:%S" >> $out/window.txt
