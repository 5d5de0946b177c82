#!/bin/bash
# Session 13 quiet-window benchmarks. Reference = 2fa20b0 (the session's start):
# BUILD=/tmp/refbuild, the same build's tools with that commit's weir. Alternating.
cd /work/main; out=docs/bench-runs/2026-12-03-s13; mkdir -p $out
L=/work/bench-s13.log; E=/work/bench-s13.err
REF=/tmp/refbuild
note() { echo "$1 rc=$2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L; }
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $L
# 64 connections, 60 s, backlog.max_delay 250ms: the delay bound's floor (2,048 -> 512).
for i in 1 2 3; do
  BUILD=$REF bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }' > $out/run-64c-base-$i.json 2>>$E; note 64c-base-$i $?
  bench/run.sh 60 64 --no-cold-start --no-ceilings --weir-config 'backlog: { max_delay: 250ms }' > $out/run-64c-$i.json 2>>$E; note 64c-$i $?
done
# The raw hop with B in a stream of its own (as bench/flow-only.sh measures it) and with B
# as a second subject of A's stream (weir's layout), alternating, one throwaway nats-server.
tmp=$(mktemp -d); nats-server -js -sd $tmp/js -a 127.0.0.1 -p -1 --ports_file_dir $tmp > $tmp/log 2>&1 &
NP=$!
for _ in $(seq 200); do compgen -G "$tmp/*.ports" >/dev/null && break; sleep 0.05; done
NATS=$(jq -r '.nats[0]' $tmp/*.ports)
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$NP/stat; }
: > $out/hop-layout.jsonl
for i in 1 2 3 4 5; do
  for layout in two one; do
    flag=""; [ $layout = one ] && flag=--one-stream
    c0=$(cpu); r=$(build/weir-jsbench hop --nats $NATS --count 100000 $flag); rc=$?; c1=$(cpu)
    echo "$r" | jq -c --arg l $layout --argjson i $i --argjson cpu $(( (c1-c0) * 1000000 / tick )) \
      '{layout:$l, run:$i, rate, ok, out_stream_msgs, nats_cpu_us_per_msg_incl_prefill: ($cpu/100000)}' >> $out/hop-layout.jsonl
    note hop-$layout-$i $rc
  done
done
kill $NP; wait $NP 2>/dev/null; rm -rf $tmp
# The other scenarios once on main (their code paths did not change this session).
bench/flow-only.sh > $out/flow-only.json 2>>$E; note flow-only $?
bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3 > $out/run.json 2>>$E; note run $?
bench/paced.sh 1000 10 --no-cold-start > $out/paced1k.json 2>>$E; note paced1k $?
echo "end $(date -u +%T)" >> $L
