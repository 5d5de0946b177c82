#!/usr/bin/env bash
# Measures the ceilings of the bench tools themselves, the figures in docs/bench-tools.md:
#   1. HTTP: weir-loadgen -> weir-sink directly (closed loop), RUNS runs;
#   2. JetStream: weir-jsbench publish / consume / hop on a throwaway nats-server, RUNS runs.
#   bench/tools/ceilings.sh [BUILD_DIR] [RUNS] [HTTP_SECONDS] [CONCURRENCY] [JS_COUNT]
# Defaults: build-bench 3 10 32 200000. Prints one JSON object per run on stderr and a summary
# object (median, min, max per figure) on stdout. Every process it starts is killed by PID.
# PRIO="chrt -f 10" (root) runs the tools and nats-server at real-time priority: on a machine
# shared with compile jobs it measures the tools rather than the scheduler (docs/bench-tools.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-bench}
RUNS=${2:-3}
SECONDS_HTTP=${3:-10}
CONC=${4:-32}
JS_COUNT=${5:-200000}
export PRIO=${PRIO:-}
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{print ($14+$15)/hz}' "/proc/$1/stat"; }
loadavg() { cut -d' ' -f1 /proc/loadavg; }

: >"$TMP/runs.jsonl"
for i in $(seq "$RUNS"); do
  $PRIO "$BUILD/weir-sink" --listen 127.0.0.1:0 --reserve $(((SECONDS_HTTP + 2) * 80000)) \
    >"$TMP/sink.out" &
  SINK=$!
  PIDS+=($SINK)
  for _ in $(seq 200); do [ -s "$TMP/sink.out" ] && break; sleep 0.05; done
  ADDR=$(jq -r .listen "$TMP/sink.out")
  la=$(loadavg)
  c0=$(cpu_s $SINK)
  $PRIO /usr/bin/time -f "%U %S" -o "$TMP/lg.time" "$BUILD/weir-loadgen" --url "http://$ADDR/in/orders" \
    --duration "${SECONDS_HTTP}s" --warmup 2s --concurrency "$CONC" --quiet >"$TMP/lg.json"
  c1=$(cpu_s $SINK)
  curl -sf "http://$ADDR/stats" >"$TMP/stats.json"
  kill $SINK; wait $SINK || true
  python3 - "$c0" "$c1" "$(cat "$TMP/lg.time")" "$la" "$TMP" >>"$TMP/runs.jsonl" <<'PY'
import json, sys
c0, c1, lg_time, la, tmp = sys.argv[1:6]
u, s = map(float, lg_time.split())
lg = json.load(open(tmp + "/lg.json")); st = json.load(open(tmp + "/stats.json"))
n = lg["total"]["acked"]
print(json.dumps({"figure": "http_loadgen_to_sink", "ingest_per_s": lg["ingest_per_s"],
  "sent": lg["total"]["sent"], "acked": n, "sink_unique": st["unique"],
  "sink_duplicates": st["duplicates"], "errors": lg["errors"],
  "ingest_ms_p50": lg["ingest_ms"]["p50"], "ingest_ms_p99": lg["ingest_ms"]["p99"],
  "e2e_ms_p50": st["e2e_ms"]["p50"], "e2e_ms_p99": st["e2e_ms"]["p99"],
  "sink_cpu_us_per_req": round((float(c1) - float(c0)) * 1e6 / max(n, 1), 2),
  "loadgen_cpu_us_per_req": round((u + s) * 1e6 / max(n, 1), 2), "loadavg_before": float(la)}))
PY
  tail -1 "$TMP/runs.jsonl" >&2
done

mkdir -p "$TMP/nats"
$PRIO nats-server -js -sd "$TMP/nats/store" -a 127.0.0.1 -p -1 --ports_file_dir "$TMP/nats" \
  >"$TMP/nats/log" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do compgen -G "$TMP/nats/*.ports" >/dev/null && break; sleep 0.05; done
NATS=$(jq -r '.nats[0]' "$TMP"/nats/*.ports)
for mode in publish consume hop; do
  for i in $(seq "$RUNS"); do
    la=$(loadavg)
    $PRIO "$BUILD/weir-jsbench" $mode --nats "$NATS" --count "$JS_COUNT" |
      jq -c --arg la "$la" '{figure: ("jetstream_" + .mode), rate, ok, seconds, loadavg_before: ($la|tonumber)}' \
      >>"$TMP/runs.jsonl"
    tail -1 "$TMP/runs.jsonl" >&2
  done
done

python3 - "$TMP/runs.jsonl" <<'PY'
import json, statistics, sys, platform, os
runs = [json.loads(l) for l in open(sys.argv[1])]
out = {"machine": platform.processor() or platform.machine(), "nproc": os.cpu_count(),
       "prio": os.environ.get("PRIO", ""), "figures": {}}
try:
    out["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except StopIteration:
    pass
def summary(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}
for fig in dict.fromkeys(r["figure"] for r in runs):
    rs = [r for r in runs if r["figure"] == fig]
    key = "ingest_per_s" if fig.startswith("http") else "rate"
    f = {"rate_per_s": summary([r[key] for r in rs]), "loadavg_before": [r["loadavg_before"] for r in rs]}
    if fig.startswith("http"):
        for k in ("sink_cpu_us_per_req", "loadgen_cpu_us_per_req", "ingest_ms_p99", "e2e_ms_p99"):
            f[k] = summary([r[k] for r in rs])
        f["exact"] = all(r["sent"] == r["acked"] == r["sink_unique"] and r["sink_duplicates"] == 0 for r in rs)
    else:
        f["ok"] = all(r["ok"] for r in rs)
    out["figures"][fig] = f
print(json.dumps(out))
PY
