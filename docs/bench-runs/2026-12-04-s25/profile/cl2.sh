#!/bin/bash
cd /work/main
(bench/run.sh 16 32 --no-cold-start --no-ceilings > /tmp/prof/cl2.json 2>/tmp/prof/cl2.err &)
for i in $(seq 1 100); do P=$(pgrep -f 'build/weir run' | head -1); [ -n "$P" ] && grep -q "load:" /tmp/prof/cl2.err 2>/dev/null && break; sleep 0.2; done
sleep 4
for t in /proc/$P/task/*; do n=$(cat $t/comm); case $n in weir-io|weir-sinks|weir-flows) perf trace -s -t $(basename $t) -o /tmp/prof/tr-$n -- sleep 4 & ;; esac; done
wait
