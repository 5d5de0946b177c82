#!/usr/bin/env bash
# Installs what is missing, builds, and runs weir on examples/flows/ with the embedded
# NATS (a nats-server it starts itself, store under ./weir-data). A counting demo sink
# (build/weir-sink) listens on 127.0.0.1:9090 so the example flows deliver somewhere:
# see what arrived with `curl -s 127.0.0.1:9090/stats`. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh weir weir-sink   # the tests build with scripts/test.sh

SINK_PID=""
cleanup() { [ -n "$SINK_PID" ] && kill "$SINK_PID" 2>/dev/null || true; }
trap cleanup EXIT

if [ -x build/weir-sink ] && ! (exec 3<>/dev/tcp/127.0.0.1/9090) 2>/dev/null; then
  build/weir-sink --listen 127.0.0.1:9090 >/dev/null &
  SINK_PID=$!
fi
export SINK_URL=${SINK_URL:-http://127.0.0.1:9090}
cat <<MSG

weir is starting on examples/flows/ (embedded NATS under ./weir-data).
Try, in another terminal:
  curl -si -X POST http://127.0.0.1:8080/in/hook -H 'Content-Type: application/json' -d '{"id":"e1","hello":"world"}'
  curl -s http://127.0.0.1:8081/metrics | grep weir_events
  curl -s http://127.0.0.1:9090/stats        # what the demo sink received
MSG
build/weir run --flows examples/flows --data-dir ./weir-data --http 127.0.0.1:8080 --admin 127.0.0.1:8081
