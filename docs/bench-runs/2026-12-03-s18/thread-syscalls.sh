#!/bin/bash
# System calls per thread of weir (perf stat raw_syscalls:sys_enter, 6 s from 4 s into
# bench/paced.sh 1000 12): one line "label io sinks flows" (calls per event at 1,000/s)
B=${1:-/work/main/build}; L=${2:-run}
cd "$(dirname "$0")/../../.."
(BUILD=$B bench/paced.sh 1000 12 --no-cold-start > /tmp/ss-$L.json 2>/tmp/ss.err &)
sleep 4
P=$(pgrep -x weir | head -1)
for t in /proc/$P/task/*; do n=$(cat $t/comm); case $n in weir-sinks|weir-io|weir-flows) perf stat -e raw_syscalls:sys_enter -t $(basename $t) -x, -o /tmp/ss-$n.txt -- sleep 6 & ;; esac; done; wait
out="$L"
for n in weir-io weir-sinks weir-flows; do c=$(grep sys_enter /tmp/ss-$n.txt | cut -d, -f1); out="$out $n=$(python3 -c "print(round($c/6000,2))")"; done
sleep 4
echo "$out"
