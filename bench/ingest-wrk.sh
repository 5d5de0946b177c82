#!/usr/bin/env bash
# The walking skeleton's benchmark: wrk with C connections POSTing ~300-byte
# JSON events to weir's http-in, a pass-through flow (steps: []) into weir-sink — beside,
# in the same run, wrk against weir-sink alone (the HTTP ceiling) and a raw JetStream
# async-publish rate (weir-jsbench publish), as ratios. Each repetition measures the
# three one after the other on the same throwaway nats-server; medians and ranges over
# the repetitions. One JSON object on stdout, progress on stderr.
#
# Loss is the set difference of the ids wrk saw acknowledged (202 {"id"}) and the ids the
# sink received. A repetition is invalid ("valid": false, "invalid_reasons") when wrk had
# connect/write/timeout errors, more read errors than connections (one cut answer per
# connection at the end is expected), answers other than 2xx or 503 (backpressure, counted),
# the sink did not get every acked id within 60 s, or a ceiling failed. Exit 1 when an
# acked event was not delivered or a repetition is invalid.
#
#   bench/ingest-wrk.sh [seconds=10] [connections=32] [repetitions=3]
#   BUILD=build-x bench/ingest-wrk.sh 5 32 1
#   TLS=1 bench/ingest-wrk.sh 10 32 3     # http-in over TLS (ADR 0305), keep-alive as ever
# With TLS=1 weir's http-in takes a certificate made here by openssl (P-256, self-signed)
# and wrk posts over https (one handshake per connection, then keep-alive); the sink and
# the HTTP ceiling stay plain. The JSON says "tls": true.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
conns=${2:-32}
reps=${3:-3}
build=${BUILD:-build}
for tool in weir weir-sink weir-jsbench; do
  [ -x "$build/$tool" ] || { echo "ingest-wrk: $build/$tool missing (scripts/setup.sh builds it)" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "ingest-wrk: wrk missing (apt-get install wrk)" >&2; exit 2; }
command -v nats-server >/dev/null || { echo "ingest-wrk: nats-server missing" >&2; exit 2; }
tls=${TLS:-0}
if [ "$tls" = 1 ]; then
  command -v openssl >/dev/null || { echo "ingest-wrk: openssl missing" >&2; exit 2; }
fi

work=$(mktemp -d /tmp/weir-ingest-wrk.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
log() { echo "ingest-wrk: $*" >&2; }

# Waits (bounded) for a file to have a first line; prints it.
first_line() {
  for _ in $(seq 1 500); do
    if [ -s "$1" ]; then head -1 "$1"; return 0; fi
    sleep 0.01
  done
  echo "ingest-wrk: nothing in $1" >&2; return 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

mkdir -p "$work/js" "$work/ports" "$work/flows"
nats-server -js -sd "$work/js" -a 127.0.0.1 -p -1 --ports_file_dir "$work/ports" -l "$work/nats.log" &
pids+=($!)
nats_pid=$!
for _ in $(seq 1 500); do ls "$work/ports/"*.ports >/dev/null 2>&1 && break; sleep 0.01; done
nats_url=$(python3 -c 'import json,glob; print(json.load(open(glob.glob("'"$work"'/ports/*.ports")[0]))["nats"][0])')
log "nats-server $nats_url (pid $nats_pid)"

"$build/weir-sink" --listen 127.0.0.1:0 --reserve 4000000 > "$work/sink.out" &
pids+=($!)
sink_port=$(first_line "$work/sink.out" | sed -E 's/.*:([0-9]+)".*/\1/')
sink="http://127.0.0.1:$sink_port"

cat > "$work/flows/pass.yaml" <<EOF
flow: pass
from: { http: { path: /in/pass } }
steps: []
to:
  out: { http: { url: "$sink/pass", max_connections: 32 } }
EOF
http_port=$(free_port)
admin_port=$(free_port)
scheme=http
config_args=()
if [ "$tls" = 1 ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=localhost \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$work/tls.key" -out "$work/tls.pem" 2>/dev/null
  printf 'http: { tls: { cert_file: %s, key_file: %s } }\n' "$work/tls.pem" "$work/tls.key" > "$work/weir.yaml"
  config_args=(--config "$work/weir.yaml")
  scheme=https
fi
"$build/weir" run "${config_args[@]}" --nats "$nats_url" --flows "$work/flows" --data-dir "$work/data" \
  --http "127.0.0.1:$http_port" --admin "127.0.0.1:$admin_port" > "$work/weir.log" 2>&1 &
pids+=($!)
weir_pid=$!
for _ in $(seq 1 1000); do
  curl -sf "http://127.0.0.1:$admin_port/readyz" >/dev/null 2>&1 && break
  sleep 0.01
done
curl -sf "http://127.0.0.1:$admin_port/readyz" >/dev/null || { log "weir not ready"; cat "$work/weir.log" >&2; exit 1; }
log "weir pid $weir_pid on $scheme://127.0.0.1:$http_port"

wrk_json() { grep '^WRKJSON ' | sed 's/^WRKJSON //'; }
sink_stat() { curl -s "$sink/stats" | jq -r "$1"; }

results="[]"
lost_total=0
for rep in $(seq 1 "$reps"); do
  # 1. The HTTP ceiling: wrk straight at the sink.
  curl -s -X POST "$sink/reset" >/dev/null
  wrk_sink=$(wrk -t2 -c"$conns" -d"${seconds}s" -s bench/wrk/post.lua "$sink/direct" | wrk_json)
  log "rep $rep: wrk → sink $(echo "$wrk_sink" | jq -c '{requests, duration_us}')"

  # 2. Raw JetStream async publish on the same server ({} when it failed: judged below).
  js=$("$build/weir-jsbench" publish --nats "$nats_url" --count 200000 --size 300 2>/dev/null) || js='{}'
  [ -n "$js" ] || js='{}'
  log "rep $rep: jetstream publish $(echo "$js" | jq -c '{rate, ok}')"

  # 3. weir: wrk → http-in → JetStream → flow stage → sink stage → weir-sink.
  curl -s -X POST "$sink/reset" >/dev/null
  cpu0=$(cpu_ticks "$weir_pid")
  WRK_ID_PREFIX="r$rep-" WRK_ACKED_IDS="$work/acked.ids" wrk -t2 -c"$conns" -d"${seconds}s" -s bench/wrk/post.lua \
    "$scheme://127.0.0.1:$http_port/in/pass" > "$work/wrk.out"
  wrk_weir=$(wrk_json < "$work/wrk.out")
  sort -u "$work/acked.ids" > "$work/acked.sorted"
  acked=$(wc -l < "$work/acked.sorted")
  # Delivery finishes after the last 202: wait for the count, then compare the ids
  # (bounded: 60 s after the load).
  deadline=$((SECONDS + 60))
  while [ "$(sink_stat .unique)" -lt "$acked" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  while :; do
    curl -s "$sink/ids" | jq -r '.[]' | sort > "$work/delivered.sorted"
    lost=$(comm -23 "$work/acked.sorted" "$work/delivered.sorted" | wc -l)
    [ "$lost" -eq 0 ] || [ "$SECONDS" -ge "$deadline" ] && break
    sleep 1
  done
  drained=$([ "$lost" -eq 0 ] && echo true || echo false)
  cpu1=$(cpu_ticks "$weir_pid")
  stats=$(curl -s "$sink/stats")
  lost_total=$((lost_total + lost))
  run=$(jq -n --argjson s "$wrk_sink" --argjson js "$js" --argjson w "$wrk_weir" --argjson st "$stats" \
    --argjson acked "$acked" --argjson lost "$lost" --argjson drained "$drained" --argjson cpu "$((cpu1 - cpu0))" \
    --argjson conns "$conns" --argjson hz "$(getconf CLK_TCK)" '
    ($s.requests / ($s.duration_us / 1e6)) as $http
    | ($acked / ($w.duration_us / 1e6)) as $ingest
    | ($st.unique / ((($st.last_us - $st.first_us) / 1e6) | if . > 0 then . else 1 end)) as $delivered
    | ($w.statuses | to_entries | map(select((.key | startswith("2") | not) and .key != "503")) | from_entries)
        as $bad_statuses
    | ([if ($w.connect + $w.write + $w.timeout) > 0 then
          "wrk errors: connect \($w.connect), write \($w.write), timeout \($w.timeout)" else empty end,
        if $w.read > $conns then "wrk read errors \($w.read) > \($conns) connections" else empty end,
        if ($bad_statuses | length) > 0 then "answers other than 2xx/503: \($bad_statuses)" else empty end,
        if $drained | not then "not drained: \($lost) acked ids not delivered 60 s after the load" else empty end,
        if ($js.rate // 0) <= 0 then "jetstream publish ceiling failed" else empty end,
        if $s.non2xx > 0 or ($s.connect + $s.write + $s.timeout) > 0 then "http ceiling run had errors" else empty end,
        if $acked == 0 then "nothing was acknowledged" else empty end]) as $invalid
    | {http_ceiling_per_s: $http, js_publish_per_s: $js.rate,
       ingest_per_s: $ingest, delivered_per_s: $delivered,
       sent: $w.requests, acked: $acked, delivered: $st.unique, lost: $lost, duplicates: $st.duplicates,
       rejected_503: ($w.statuses["503"] // 0), drained: $drained,
       valid: ($invalid | length == 0), invalid_reasons: $invalid,
       ingest_ms: {p50: ($w.p50_us / 1000), p90: ($w.p90_us / 1000), p99: ($w.p99_us / 1000), max: ($w.max_us / 1000)},
       weir_cpu_us_per_event: (if $st.unique > 0 then ($cpu / $hz * 1e6 / $st.unique) else null end),
       ratios: {ingest_over_http: ($ingest / $http), delivered_over_http: ($delivered / $http),
                ingest_over_js_publish: (if ($js.rate // 0) > 0 then $ingest / $js.rate else null end)}}')
  log "rep $rep: $(echo "$run" | jq -c '{ingest_per_s, delivered_per_s, lost, valid, invalid_reasons, ratios}')"
  results=$(echo "$results" | jq --argjson r "$run" '. + [$r]')
done

rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$weir_pid/status")
echo "$results" | jq --arg conns "$conns" --arg secs "$seconds" --argjson rss "$rss_kb" --argjson tls "$([ "$tls" = 1 ] && echo true || echo false)" \
  --arg machine "$(uname -m) $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)" '
  def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def agg(f): [.[] | f] as $v | {median: ($v | med), min: ($v | min), max: ($v | max)};
  {scenario: "wrk -t2 -c\($conns) -d\($secs)s POST ~300 B JSON → weir http-in → pass-through flow → http sink → weir-sink",
   machine: $machine, repetitions: length, tls: $tls,
   ingest_per_s: agg(.ingest_per_s), delivered_per_s: agg(.delivered_per_s),
   http_ceiling_per_s: agg(.http_ceiling_per_s), js_publish_per_s: agg(.js_publish_per_s),
   ratio_ingest_over_http: agg(.ratios.ingest_over_http), ratio_delivered_over_http: agg(.ratios.delivered_over_http),
   ratio_ingest_over_js_publish: agg(.ratios.ingest_over_js_publish),
   ingest_p99_ms: agg(.ingest_ms.p99), weir_cpu_us_per_event: agg(.weir_cpu_us_per_event),
   weir_rss_peak_mb: ($rss / 1024), lost: ([.[] | .lost] | add), duplicates: ([.[] | .duplicates] | add),
   rejected_503: ([.[] | .rejected_503] | add),
   valid: (all(.[]; .valid)), invalid_reasons: [.[] | .invalid_reasons[]],
   runs: .}'
[ "$lost_total" -eq 0 ] || { log "LOST $lost_total acknowledged events"; exit 1; }
if [ "$(echo "$results" | jq 'all(.[]; .valid)')" != true ]; then
  log "INVALID RUN: $(echo "$results" | jq -c '[.[] | .invalid_reasons[]]')"
  exit 1
fi
