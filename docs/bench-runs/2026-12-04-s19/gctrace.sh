#!/bin/bash
# nats-server's garbage collections under weir-jsbench pipeline at 5,000/s for 5 s
# (session 19, ~01:56 UTC, nothing else running): cycles and their CPU in gc.log.
B=${BUILD:-$(dirname "$0")/../../../build}; T=$(mktemp -d)
GOMAXPROCS=1 GODEBUG=gctrace=1 nats-server -js -sd $T/js -a 127.0.0.1 -p 14999 > $T/out.log 2> $T/gc.log & NP=$!
sleep 1
$B/weir-jsbench pipeline --nats nats://127.0.0.1:14999 --rate 5000 --seconds 5 | head -c 200; echo
echo "gc cycles: $(grep -c '^gc ' $T/gc.log)"; tail -3 $T/gc.log
echo "nats-server utime stime (ticks): $(cut -d' ' -f14,15 /proc/$NP/stat)"
kill $NP; wait $NP 2>/dev/null; rm -rf $T
