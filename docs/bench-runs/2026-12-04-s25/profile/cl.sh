#!/bin/bash
# closed-loop: per-thread syscalls (perf stat) + cpu + ctx switches over 6 s
cd /work/main
(bench/run.sh 20 32 --no-cold-start --no-ceilings > /tmp/prof/cl.json 2>/tmp/prof/cl.err &)
for i in $(seq 1 100); do P=$(pgrep -f 'build/weir run' | head -1); [ -n "$P" ] && grep -q "load:" /tmp/prof/cl.err 2>/dev/null && break; sleep 0.2; done
sleep 4
snap() { for t in /proc/$P/task/*; do n=$(cat $t/comm); s=($(cut -d' ' -f14,15 $t/stat)); v=$(grep -E '^(voluntary|nonvoluntary)_ctxt' $t/status | awk '{print $2}' | tr '\n' ' '); echo "$n ${s[0]} ${s[1]} $v"; done | sort; }
TIDS=""; for t in /proc/$P/task/*; do n=$(cat $t/comm); case $n in weir-io|weir-flows|weir-sinks) TIDS="$TIDS $(basename $t):$n";; esac; done
snap > /tmp/prof/a
for x in $TIDS; do tid=${x%%:*}; perf stat -e raw_syscalls:sys_enter -t $tid -x, -o /tmp/prof/sc-${x##*:} -- sleep 6 & done
wait
snap > /tmp/prof/b
paste /tmp/prof/a /tmp/prof/b | awk '{printf "%-14s user %6.0f ms  sys %6.0f ms  vcs %7d nvcs %7d\n",$1,($7-$2)*10,($8-$3)*10,($9-$4),($10-$5)}' | grep -E "weir-(io|flows|sinks)"
for f in /tmp/prof/sc-*; do echo "$f $(grep sys_enter $f | cut -d, -f1)"; done
while pgrep -f "run.sh 20 32" >/dev/null; do sleep 1; done
python3 -c "import json;d=json.load(open('/tmp/prof/cl.json'));print({k:d.get(k) for k in ['weir_cpu_us_per_event','nats_cpu_us_per_event','lost','delivered_per_s','e2e_p50_ms','e2e_p99_ms']})"
