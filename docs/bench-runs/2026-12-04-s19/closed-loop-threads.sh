#!/bin/bash
# Session 19: CPU and context switches of weir-io / weir-flows / weir-sinks over 5 s of a
# closed-loop run (bench/run.sh 15 32), from /proc/PID/task/TID/stat and status.
cd "$(dirname "$0")/../../.."
(bench/run.sh 15 32 --no-cold-start --no-ceilings > /tmp/cl.json 2>/tmp/cl.err &)
for i in $(seq 1 100); do P=$(pgrep -x weir | head -1); [ -n "$P" ] && grep -q "load:" /tmp/cl.err 2>/dev/null && break; sleep 0.2; done
sleep 5
snap() { for t in /proc/$P/task/*; do n=$(cat $t/comm); s=($(cut -d' ' -f14,15 $t/stat)); v=$(grep -E '^(voluntary|nonvoluntary)_ctxt' $t/status | awk '{print $2}' | tr '\n' ' '); echo "$n ${s[0]} ${s[1]} $v"; done | sort; }
snap > /tmp/cl-a; sleep 5; snap > /tmp/cl-b
paste /tmp/cl-a /tmp/cl-b | awk '{printf "%-14s user %6.0f ms  sys %6.0f ms  vcs %7d nvcs %7d\n",$1,($7-$2)*10,($8-$3)*10,($9-$4),($10-$5)}' | grep -E "weir-(io|flows|sinks)"
while pgrep -f "bench/harness.py\|run.sh 15 32" >/dev/null; do sleep 1; done
python3 -c "import json;d=json.load(open('/tmp/cl.json'));print('weir',d['weir_cpu_us_per_event'],'nats',d['nats_cpu_us_per_event'],'lost',d['lost'])"
