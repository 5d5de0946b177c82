#!/bin/bash
cd /work/main
for i in 1 2 3 4; do
  for v in old first; do
    if [ $v = first ]; then export WEIR_SINKS_FIRST=1; else unset WEIR_SINKS_FIRST; fi
    bench/run.sh 15 32 --no-cold-start --no-ceilings > /tmp/ol/sf-$v-$i.json 2>>/tmp/ol/err
    python3 -c "import json;d=json.load(open('/tmp/ol/sf-$v-$i.json'));print('$v $i',d['delivered_per_s'],d['weir_cpu_us_per_event'],d['nats_cpu_us_per_event'],d['e2e_ms']['p50'],d['e2e_ms']['p99'],d['lost'],d['valid'],d['delivery_loops'])"
  done
done
