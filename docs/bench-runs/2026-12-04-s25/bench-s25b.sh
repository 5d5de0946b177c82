#!/bin/bash
# Session 25, second window, on the final code (sinks drained first on the shared loop):
# one delivery loop (default on this host) against two (--weir-config 'delivery_loops: 2'),
# alternating, the order switching each pair; nothing else running.
cd "$(dirname "$0")/../../.."
out=docs/bench-runs/2026-12-04-s25/final
mkdir -p $out
date -u +"start %H:%M:%S load $(cut -d' ' -f1 /proc/loadavg)" >> $out/window.txt
run() { # layout kind i
  local c=""; [ "$1" = two ] && c="delivery_loops: 2"
  case $2 in
    closed) bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 ${c:+--weir-config "$c"} ;;
    paced1k) bench/paced.sh 1000 10 --no-cold-start ${c:+--weir-config "$c"} ;;
    paced5k) bench/paced.sh 5000 10 --no-cold-start ${c:+--weir-config "$c"} ;;
  esac > $out/$2-$1-$3.json 2>>$out/bench.err
  echo "$(date -u +%H:%M:%S) $2-$1-$3 rc=$?" >> $out/window.txt
}
for i in 1 2 3; do
  if [ $((i % 2)) = 1 ]; then a=two; b=one; else a=one; b=two; fi
  run $a closed $i; run $b closed $i
  if [ $i -le 2 ]; then run $b paced5k $i; run $a paced5k $i; run $a paced1k $i; run $b paced1k $i; fi
done
date -u +"end %H:%M:%S" >> $out/window.txt
