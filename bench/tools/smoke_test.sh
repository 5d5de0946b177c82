#!/usr/bin/env bash
# Smoke test of the bench tools, run by CTest (label "bench"): weir-loadgen -> weir-sink must
# account for every event exactly (sent = acked = sink unique, no duplicates, the same ids on
# both sides), the sink's test features must answer as documented, and weir-jsbench must
# complete a small publish/consume/hop against a throwaway nats-server.
#   bench/tools/smoke_test.sh BUILD_DIR
# Needs curl and jq. Every process it starts is killed by PID on exit, temp files removed.
set -euo pipefail
BUILD=${1:?usage: smoke_test.sh BUILD_DIR}
SINK=$BUILD/weir-sink LOADGEN=$BUILD/weir-loadgen JSBENCH=$BUILD/weir-jsbench
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # expect NAME ACTUAL WANTED
  [ "$2" == "$3" ] || fail "$1: got '$2', want '$3'"
  echo "ok: $1 = $3"
}
wait_for_line() {  # wait_for_line FILE: until FILE has a line (deadline 10 s)
  for _ in $(seq 200); do [ -s "$1" ] && return 0; sleep 0.05; done
  fail "no output in $1"
}

"$SINK" --listen 127.0.0.1:0 >"$TMP/sink.out" 2>"$TMP/sink.err" &
PIDS+=($!)
wait_for_line "$TMP/sink.out"
ADDR=$(jq -r .listen "$TMP/sink.out")
S="http://$ADDR"

# 1. Closed loop: exact accounting.
"$LOADGEN" --url "$S/in/orders" --max-requests 3000 --concurrency 8 --warmup 0.2s \
  --acked-ids "$TMP/acked.txt" --run-id smoke --quiet >"$TMP/lg.json"
STATS=$(curl -sf "$S/stats")
expect "loadgen total sent" "$(jq .total.sent "$TMP/lg.json")" 3000
expect "loadgen total acked" "$(jq .total.acked "$TMP/lg.json")" 3000
expect "sink received" "$(jq .received <<<"$STATS")" 3000
expect "sink unique" "$(jq .unique <<<"$STATS")" 3000
expect "sink duplicates" "$(jq .duplicates <<<"$STATS")" 0
expect "sink unparsed" "$(jq .unparsed <<<"$STATS")" 0
expect "sink by_path" "$(jq -c .by_path <<<"$STATS")" '{"/in/orders":3000}'
expect "sink e2e count" "$(jq .e2e_ms.count <<<"$STATS")" 3000
curl -sf "$S/ids" | jq -r '.[]' | sort >"$TMP/sink_ids.txt"
sort "$TMP/acked.txt" >"$TMP/acked_sorted.txt"
cmp -s "$TMP/sink_ids.txt" "$TMP/acked_sorted.txt" || fail "acked ids differ from sink ids"
echo "ok: acked ids = sink ids"
expect "recorded requests" "$(curl -sf "$S/requests?limit=5" | jq length)" 5
expect "recorded content type" \
  "$(curl -sf "$S/requests?limit=1" | jq -r '.[0].headers["Content-Type"]')" application/json
[ "$(curl -sf "$S/timeline" | jq '[.[].count] | add')" == 3000 ] || fail "timeline count"
echo "ok: timeline adds up"

# 2. Test features: fail-first with Retry-After, re-sends with the same / another key.
curl -sf -X POST "$S/reset" >/dev/null
curl -sf -X POST "$S/control" -d '{"fail_first":2,"retry_after":7}' >/dev/null
CODE=$(curl -s -o /dev/null -D "$TMP/h1" -w '%{http_code}' -X POST "$S/in/x" \
  -H 'Idempotency-Key: k1' -d '{"id":"e1"}')
expect "fail-first status" "$CODE" 503
grep -qi '^Retry-After: 7' "$TMP/h1" || fail "no Retry-After on 503"
echo "ok: Retry-After present"
curl -s -o /dev/null -X POST "$S/in/x" -H 'Idempotency-Key: k1' -d '{"id":"e1"}'
expect "after fail-first" "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$S/in/x" \
  -H 'Idempotency-Key: k1' -d '{"id":"e1"}')" 204
curl -s -o /dev/null -X POST "$S/in/x" -H 'Idempotency-Key: k1' -d '{"id":"e1"}'
curl -s -o /dev/null -X POST "$S/in/x" -H 'Idempotency-Key: k2' -d '{"id":"e1"}'
curl -s -o /dev/null -X POST "$S/in/x" -d 'not json'
STATS=$(curl -sf "$S/stats")
expect "rejected" "$(jq .rejected <<<"$STATS")" 2
expect "received" "$(jq .received <<<"$STATS")" 4
expect "unique" "$(jq .unique <<<"$STATS")" 1
expect "duplicates" "$(jq .duplicates <<<"$STATS")" 2
expect "resends_with_same_key" "$(jq .resends_with_same_key <<<"$STATS")" 1
expect "resends_with_other_key" "$(jq .resends_with_other_key <<<"$STATS")" 1
expect "unparsed" "$(jq .unparsed <<<"$STATS")" 1
expect "bad control" "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$S/control" \
  -d '{"status":"x"}')" 400
curl -sf -X POST "$S/control" -d '{"status":400,"retry_after":-1}' >/dev/null
expect "status 400" "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$S/in/x" -d '{}')" 400

# 2b. Warm-up deliveries (t before e2e_from_us) are delivered and counted, not in e2e_ms.
curl -sf -X POST "$S/reset" >/dev/null
NOW_US=$(( $(date +%s) * 1000000 ))
curl -sf -X POST "$S/control" -d "{\"status\":204,\"e2e_from_us\":$NOW_US}" >/dev/null
for i in 1 2 3; do
  curl -sf -o /dev/null -X POST "$S/in/w" -d "{\"id\":\"w$i\",\"t\":$(( NOW_US - 500000 ))}"
done
curl -sf -o /dev/null -X POST "$S/in/w" -d "{\"id\":\"m1\",\"t\":$NOW_US}"
STATS=$(curl -sf "$S/stats")
expect "warm-up: unique" "$(jq .unique <<<"$STATS")" 4
expect "warm-up: e2e count" "$(jq .e2e_ms.count <<<"$STATS")" 1
expect "warm-up: left out" "$(jq .e2e_ms.warmup <<<"$STATS")" 3
expect "warm-up: timeline" "$(curl -sf "$S/timeline" | jq '[.[].count] | add')" 4
expect "bad e2e_from_us" "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$S/control" \
  -d '{"e2e_from_us":-1}')" 400
curl -sf -X POST "$S/control" -d '{"e2e_from_us":0}' >/dev/null

# 3. Open loop: paced, every event acked and delivered once.
curl -sf -X POST "$S/reset" >/dev/null
curl -sf -X POST "$S/control" -d '{"status":204}' >/dev/null
"$LOADGEN" --url "$S/in/paced" --rate 2000 --duration 1s --concurrency 8 --quiet >"$TMP/lg2.json"
expect "open loop mode" "$(jq -r .mode "$TMP/lg2.json")" open
expect "open loop acked" "$(jq .acked "$TMP/lg2.json")" 2000
expect "open loop sink unique" "$(curl -sf "$S/stats" | jq .unique)" 2000

# 3b. Several URLs: the connections take them in turn (4 connections, 2 paths: 2 each).
curl -sf -X POST "$S/reset" >/dev/null
"$LOADGEN" --url "$S/in/a" --url "$S/in/b" --max-requests 400 --concurrency 4 --quiet >"$TMP/lg3.json"
expect "two urls acked" "$(jq .total.acked "$TMP/lg3.json")" 400
BY=$(curl -sf "$S/stats" | jq -c '.by_path | keys')
expect "two urls: both paths" "$BY" '["/in/a","/in/b"]'
expect "two urls: other port refused" "$("$LOADGEN" --url "$S/in/a" --url "http://127.0.0.1:1/in/b" \
  --max-requests 1 --quiet >/dev/null 2>&1; echo $?)" 2

# 3c. fail_percent with fail_at_most: each id refused at most that many times.
curl -sf -X POST "$S/reset" >/dev/null
curl -sf -X POST "$S/control" -d '{"fail_percent":100,"fail_at_most":2,"fail_status":503}' >/dev/null
CODES=""
for _ in 1 2 3 4; do
  CODES+="$(curl -s -o /dev/null -w '%{http_code}' -X POST "$S/in/f" -d '{"id":"once"}') "
done
expect "fail_at_most answers" "$CODES" "503 503 204 204 "
expect "fail_at_most random_failures" "$(curl -sf "$S/stats" | jq .random_failures)" 2
curl -sf -X POST "$S/control" -d '{"fail_percent":0,"fail_at_most":0}' >/dev/null

# 4. weir-jsbench against a throwaway nats-server (skipped without nats-server).
if command -v nats-server >/dev/null; then
  mkdir -p "$TMP/nats"
  nats-server -js -sd "$TMP/nats/store" -a 127.0.0.1 -p -1 --ports_file_dir "$TMP/nats" \
    >"$TMP/nats/log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 200); do compgen -G "$TMP/nats/*.ports" >/dev/null && break; sleep 0.05; done
  NATS=$(jq -r '.nats[0]' "$TMP"/nats/*.ports)
  for mode in publish consume hop; do
    "$JSBENCH" $mode --nats "$NATS" --count 2000 >"$TMP/js.json" || fail "jsbench $mode: $(cat "$TMP/js.json")"
    expect "jsbench $mode ok" "$(jq .ok "$TMP/js.json")" true
  done
  "$JSBENCH" hop --one-stream --nats "$NATS" --count 2000 >"$TMP/js.json" || fail "jsbench hop --one-stream: $(cat "$TMP/js.json")"
  expect "jsbench hop --one-stream ok" "$(jq .ok "$TMP/js.json")" true
  expect "jsbench hop --one-stream outputs" "$(jq .out_stream_msgs "$TMP/js.json")" 2000
  "$JSBENCH" pipeline --nats "$NATS" --rate 500 --seconds 1 >"$TMP/js.json" || fail "jsbench pipeline: $(cat "$TMP/js.json")"
  expect "jsbench pipeline ok" "$(jq .ok "$TMP/js.json")" true
  expect "jsbench pipeline received" "$(jq .received "$TMP/js.json")" 500
  # Consumers of 3 flows with 2 sinks each, per layout: one per flow and sink unless shared.
  for spec in streams:9 shared-stream:9 shared-in:7 split-in:7 shared-consumers:2; do
    layout=${spec%%:*}
    for kind in push pull; do
      "$JSBENCH" pipeline --nats "$NATS" --flows 3 --sinks 2 --layout "$layout" --consumers $kind --burst 10 \
        --rate 300 --seconds 1 >"$TMP/js.json" 2>/dev/null ||
        fail "jsbench pipeline --flows 3 --layout $layout --consumers $kind: $(cat "$TMP/js.json")"
      expect "jsbench pipeline $layout $kind ok" "$(jq .ok "$TMP/js.json")" true
      expect "jsbench pipeline $layout $kind received" "$(jq .received "$TMP/js.json")" 300
      expect "jsbench pipeline $layout $kind consumers" "$(jq .consumers "$TMP/js.json")" "${spec##*:}"
    done
  done
else
  fail "nats-server is not installed (scripts/setup.sh installs it): weir-jsbench was not checked"
fi
echo "PASS"
