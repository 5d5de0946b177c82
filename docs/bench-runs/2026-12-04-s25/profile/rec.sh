#!/bin/bash
cd /work/main
(bench/run.sh 20 32 --no-cold-start --no-ceilings > /tmp/prof/rec.json 2>/tmp/prof/rec.err &)
for i in $(seq 1 100); do P=$(pgrep -f 'build/weir run' | head -1); [ -n "$P" ] && grep -q "load:" /tmp/prof/rec.err 2>/dev/null && break; sleep 0.2; done
sleep 4
perf record -F 999 --call-graph dwarf,16384 -p $P -o /tmp/prof/perf.data -- sleep 6 2>/dev/null
