#!/bin/bash
# GOGC=400 for the bench's nats-server against Go's default, alternating, 2 pairs
# (session 19, 01:53–01:55 UTC, nothing else running). Prints one line per run.
cd "$(dirname "$0")/../../.."
out=${OUT:-/tmp/gogc}; mkdir -p $out
for i in 1 2; do for g in def 400; do
  if [ $g = def ]; then unset GOGC; else export GOGC=$g; fi
  bench/paced.sh 1000 10 --no-cold-start > $out/p-$g-$i.json 2>/dev/null
  bench/run.sh 15 32 --no-cold-start --no-ceilings > $out/c-$g-$i.json 2>/dev/null
done; done
for f in $out/*.json; do python3 -c "import json;d=json.load(open('$f'));print('$f',d['weir_cpu_us_per_event'],d['nats_cpu_us_per_event'],d['e2e_ms']['p99'],d['lost'])"; done
