#!/usr/bin/env bash
# MQTT loopback benchmark: bench/broker-mqtt.sh [N] (default 5000).
#
# Starts, on free loopback ports, a throwaway mosquitto, a throwaway nats-server and weir
# with one flow: mqtt source (rt/in, QoS 1) -> map -> mqtt sink (rt/out, QoS 1). Then
# weir-mqtt-rt publishes N QoS 1 messages and receives them twice in the same run:
#   ceiling: client -> mosquitto -> client (ceiling/rt), the broker alone;
#   weir:    client -> mosquitto -> weir -> JetStream -> flow -> weir -> mosquitto -> client.
# Prints one JSON object on stdout (progress on stderr): scenario, machine, nproc, count,
# weir {rt_per_s, latency_ms {p50 p90 p99 p999 max mean}, acked, unique, lost, duplicates,
# seconds}, ceiling {same}, ratio (weir rt_per_s / ceiling rt_per_s), weir_rss_mb.
# Exit 1 when a run lost messages, 2 when something could not start.
#
# BUILD=dir selects the build holding weir and weir-mqtt-rt (default build/).
# WINDOW=n sets the client's unconfirmed publishes (default 256).
# INFLIGHT=n sets mosquitto's max_inflight_messages, the QoS 1 messages it sends a client
# before that client's PUBACKs (default 20, mosquitto's own default).
# Every process is started here and stopped by its PID; the temp dir is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5000}
BUILD=${BUILD:-build}
WINDOW=${WINDOW:-256}
INFLIGHT=${INFLIGHT:-20}
WEIR=$BUILD/weir
RT=$BUILD/weir-mqtt-rt
for bin in "$WEIR" "$RT"; do
  [[ -x $bin ]] || { echo "broker-mqtt.sh: $bin not built (cmake --build $BUILD --target weir weir-mqtt-rt)" >&2; exit 2; }
done
command -v mosquitto >/dev/null || { echo "broker-mqtt.sh: mosquitto not installed" >&2; exit 2; }
command -v nats-server >/dev/null || { echo "broker-mqtt.sh: nats-server not installed" >&2; exit 2; }

tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_for() {  # wait_for SECONDS CMD...: polls CMD every 50 ms
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || return 1
    sleep 0.05
  done
}
log() { echo "broker-mqtt.sh: $*" >&2; }

mq_port=$(free_port); nats_port=$(free_port); mon_port=$(free_port); http_port=$(free_port); admin_port=$(free_port)

# mosquitto: defaults except an unbounded queue (its default of 1000 queued QoS 1 messages
# per client drops the rest) and TCP_NODELAY; no persistence (both paths use the same broker).
cat > "$tmp/mosquitto.conf" <<EOF
listener $mq_port 127.0.0.1
allow_anonymous true
set_tcp_nodelay true
max_inflight_messages $INFLIGHT
max_queued_messages 0
persistence false
log_dest stderr
log_type error
log_type warning
EOF
mosquitto -c "$tmp/mosquitto.conf" 2> "$tmp/mosquitto.log" &
pids+=($!)
nats-server -js -sd "$tmp/nats" -a 127.0.0.1 -p "$nats_port" -m "$mon_port" > "$tmp/nats.log" 2>&1 &
pids+=($!)
wait_for 15 bash -c "exec 3<>/dev/tcp/127.0.0.1/$mq_port" || { log "mosquitto did not start"; cat "$tmp/mosquitto.log" >&2; exit 2; }
wait_for 15 curl -sf "http://127.0.0.1:$mon_port/healthz?js-enabled-only=true" || { log "nats-server did not start"; exit 2; }

mkdir -p "$tmp/flows"
cat > "$tmp/flows/rt.yaml" <<EOF
flow: mqtt_rt
from: { mqtt: { broker: "tcp://127.0.0.1:$mq_port", topic: rt/in, qos: 1 } }
steps:
  - map: { seq: this.payload.seq, t: this.payload.t, run: this.payload.run }
to:
  out: { mqtt: { broker: "tcp://127.0.0.1:$mq_port", topic: rt/out, qos: 1 } }
EOF
"$WEIR" run --nats "nats://127.0.0.1:$nats_port" --flows "$tmp/flows" --data-dir "$tmp/data" \
  --http "127.0.0.1:$http_port" --admin "127.0.0.1:$admin_port" > "$tmp/weir.out" 2> "$tmp/weir.log" &
weir_pid=$!
pids+=($weir_pid)
wait_for 30 curl -sf "http://127.0.0.1:$admin_port/readyz" || { log "weir did not become ready"; tail -20 "$tmp/weir.log" >&2; exit 2; }
wait_for 15 grep -q "mqtt source subscribed" "$tmp/weir.log" || { log "weir's mqtt source did not subscribe"; tail -20 "$tmp/weir.log" >&2; exit 2; }

broker="tcp://127.0.0.1:$mq_port"
log "ceiling: $N round trips through mosquitto alone"
ceiling=$("$RT" --broker "$broker" --count "$N" --window "$WINDOW" --pub-topic ceiling/rt --client-id ceil --quiet) || true
log "weir: $N round trips through weir"
weir=$("$RT" --broker "$broker" --count "$N" --window "$WINDOW" --pub-topic rt/in --sub-topic rt/out --client-id weir --quiet) || true
[[ -n $ceiling && -n $weir ]] || { log "a run produced no report"; tail -20 "$tmp/weir.log" >&2; exit 2; }
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$weir_pid/status" 2>/dev/null || echo 0)

machine="$(uname -sm), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
jq -n --argjson ceiling "$ceiling" --argjson weir "$weir" --arg machine "$machine" --argjson nproc "$(nproc)" \
  --argjson n "$N" --argjson window "$WINDOW" --argjson inflight "$INFLIGHT" --argjson rss_kb "${rss_kb:-0}" '{
    scenario: "broker-mqtt", machine: $machine, nproc: $nproc, count: $n, window: $window, broker_max_inflight: $inflight,
    weir: $weir, ceiling: $ceiling,
    ratio: (if $ceiling.rt_per_s > 0 then ($weir.rt_per_s / $ceiling.rt_per_s * 1000 | round / 1000) else null end),
    weir_rss_mb: ($rss_kb / 1024 | round)
  }'
lost=$(jq -n --argjson a "$ceiling" --argjson b "$weir" '$a.lost + $b.lost')
[[ $lost -eq 0 ]] || { log "lost $lost messages"; exit 1; }
