#!/bin/bash
# Session 22, 12:55 UTC (one pair each, not a quiet-window figure): bench_orders' two HTTP
# sinks at max_connections 16 against the default 8, the flow file edited for the run and
# restored after. Closed loop, no ceilings. Run from the repository root.
set -u
OUT=$(dirname "$0")
cp bench/flows/bench_orders.yaml /tmp/bo.orig
for i in 1 2; do
  for v in 8 16; do
    if [ $v = 16 ]; then
      sed -e 's|/big" } }|/big", max_connections: 16 } }|' -e 's|/small" } }|/small", max_connections: 16 } }|' \
        /tmp/bo.orig > bench/flows/bench_orders.yaml
    else
      cp /tmp/bo.orig bench/flows/bench_orders.yaml
    fi
    bench/run.sh 15 32 --no-cold-start --no-ceilings > "$OUT/maxconn$v-$i.json" 2>/dev/null
  done
done
cp /tmp/bo.orig bench/flows/bench_orders.yaml
# vmstat-closed-loop.txt: `vmstat 1 25` beside one `bench/run.sh 15 32 --no-cold-start --no-ceilings` (12:52).
