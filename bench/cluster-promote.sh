#!/usr/bin/env bash
# Promote under load (docs/adr/0042-version-registry.md):
#   bench/cluster-promote.sh [rounds] [rate_per_instance]   (defaults 3 and 500)
# A throwaway nats-server, weir-sink, two `weir run --cluster bench` instances with flow
# `orders` (v1 stamps {"v":1, "h":now()}), weir-loadgen at RATE/s into each instance. Then
# `weir deploy` of v2 (stamps "v":2) and ROUNDS × (promote v2, rollback to v1) under load,
# one second apart. Prints one JSON object on stdout (progress on stderr):
#   convergence_ms      promote request → the last instance runs the new version
#   first_new_emit_ms   promote request → first output of the new version at the sink
#   first_new_handled_ms promote request → first event handled by the new version
#   interleaved         outputs of the old version handled after the first of the new one
#                       (per switch, from the handling stamps; must be 0)
#   lost                acked events never delivered (must be 0)
# Exit 1 when interleaved > 0 or lost > 0. BUILD=dir selects the build (default build/).
# Every process is stopped by its PID; the run is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
export WEIR_BENCH_ROUNDS=${1:-3}
export WEIR_BENCH_RATE=${2:-500}
export WEIR_BENCH_BUILD=${BUILD:-build}
exec python3 - <<'PY'
import json, os, statistics, subprocess, sys, tempfile, time, shutil
sys.path.insert(0, "bench")
from harness import Procs, exit_on_sigterm, free_port, http_get, http_request, log, machine, wait_for  # noqa: E402

ROUNDS = int(os.environ["WEIR_BENCH_ROUNDS"])
RATE = int(os.environ["WEIR_BENCH_RATE"])
BUILD = os.path.abspath(os.environ["WEIR_BENCH_BUILD"])
GOAL_MS = 100
SETTLE_S = 1.0   # load between switches


def tool(name):
    path = os.path.join(BUILD, name)
    if not os.access(path, os.X_OK):
        sys.exit(f"bench: {path} is missing; build first")
    return path


def flow(version, sink_port):
    # Same `from` and `to` in every version: a live switch replaces the steps only.
    return ("flow: orders\n"
            "from: { http: { path: /in/orders } }\n"
            "steps:\n"
            f"  - set: {{ v: {version}, h: \"now()\" }}\n"
            "to:\n"
            f"  out: {{ http: {{ url: \"http://127.0.0.1:{sink_port}/orders\", retries: 8, timeout: 2s }} }}\n")


def admin(port, method, path, body=b"", timeout=10.0):
    return http_request(port, method, path, body, timeout, content_type="application/json")


def wall_ms():
    return int(time.time() * 1000)


def summary(values):
    if not values:
        return None
    return {"median": round(statistics.median(values), 1), "max": round(max(values), 1),
            "min": round(min(values), 1), "runs": [round(v, 1) for v in values]}


def main():
    exit_on_sigterm()
    procs = Procs()
    tmp = tempfile.mkdtemp(prefix="weir-promote-")
    try:
        return run(procs, tmp)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)


def run(procs, tmp):
    # nats-server on a free port
    ports_dir = os.path.join(tmp, "nats-ports")
    os.makedirs(ports_dir)
    nats = procs.start(["nats-server", "-js", "-sd", os.path.join(tmp, "js"), "-a", "127.0.0.1", "-p", "-1",
                        "--ports_file_dir", ports_dir])
    pf = os.path.join(ports_dir, f"nats-server_{nats.pid}.ports")
    if not wait_for(lambda: os.path.exists(pf) and os.path.getsize(pf) > 0, 10):
        sys.exit("bench: nats-server did not start")
    time.sleep(0.05)
    nats_url = json.load(open(pf))["nats"][0]

    total_s = 2 + ROUNDS * 2 * (SETTLE_S + 0.5) + 2
    out = open(os.path.join(tmp, "sink.out"), "w+")
    record = int(RATE * 2 * (total_s + 5))
    procs.start([tool("weir-sink"), "--listen", "127.0.0.1:0", "--record", str(record)], stdout=out)
    if not wait_for(lambda: os.path.getsize(out.name) > 0, 10):
        sys.exit("bench: weir-sink did not start")
    sink_port = int(json.loads(open(out.name).readline())["listen"].rsplit(":", 1)[1])

    weirs = []
    for i in range(2):
        d = os.path.join(tmp, f"w{i}")
        os.makedirs(os.path.join(d, "flows"))
        with open(os.path.join(d, "flows", "orders.yaml"), "w") as f:
            f.write(flow(1, sink_port))
        hp, ap = free_port(), free_port()
        logf = open(os.path.join(d, "weir.log"), "w")
        p = procs.start([tool("weir"), "run", "--flows", os.path.join(d, "flows"), "--nats", nats_url,
                         "--http", f"127.0.0.1:{hp}", "--admin", f"127.0.0.1:{ap}", "--data-dir",
                         os.path.join(d, "data"), "--cluster", "bench"], stdout=logf, stderr=logf)
        weirs.append({"proc": p, "http": hp, "admin": ap, "log": logf.name})
    for w in weirs:
        def ready(w=w):
            try:
                return http_get(w["admin"], "/readyz", 0.5)[0] == 200
            except OSError:
                return False
        if not wait_for(ready, 30, poll=0.01):
            sys.exit("bench: weir did not become ready; log: " + open(w["log"]).read()[-2000:])
    log(f"2 instances ready; load {RATE}/s into each for {total_s:.0f} s")

    loads = []
    for i, w in enumerate(weirs):
        ids = os.path.join(tmp, f"acked{i}.txt")
        lp = procs.start([tool("weir-loadgen"), "--url", f"http://127.0.0.1:{w['http']}/in/orders", "--duration",
                          f"{total_s:.0f}s", "--warmup", "0s", "--rate", str(RATE), "--concurrency", "16",
                          "--quiet", "--acked-ids", ids], stdout=subprocess.DEVNULL)
        loads.append((lp, ids))

    v2 = os.path.join(tmp, "orders.yaml")
    with open(v2, "w") as f:
        f.write(flow(2, sink_port))
    time.sleep(2)
    dep = subprocess.run([tool("weir"), "deploy", v2, "--server", f"http://127.0.0.1:{weirs[0]['admin']}"],
                         capture_output=True, text=True)
    if dep.returncode != 0:
        sys.exit("bench: weir deploy failed: " + dep.stdout + dep.stderr)

    switches = []   # {old, new, start, answered, converged, barrier_ms}
    for r in range(ROUNDS):
        for old, new in ((1, 2), (2, 1)):
            via = weirs[(len(switches)) % 2]
            time.sleep(SETTLE_S)
            t0 = wall_ms()
            if new == 2:
                code, body = admin(via["admin"], "POST", "/flows/orders/promote", b'{"version": 2}')
            else:
                code, body = admin(via["admin"], "POST", "/flows/orders/rollback")
            t1 = wall_ms()
            if code != 200:
                sys.exit(f"bench: switch to v{new} answered {code}: {body[:300]!r}")
            reply = json.loads(body)
            conv = [None, None]

            def switched():
                for i, w in enumerate(weirs):
                    st, b = http_get(w["admin"], "/flows/orders", 2)
                    j = json.loads(b) if st == 200 else {}
                    if j.get("running_version") != new:
                        return False
                    conv[i] = j.get("running_since_ms", 0)
                return True
            if not wait_for(switched, 10, poll=0.002):
                sys.exit(f"bench: instances did not converge on v{new}")
            switches.append({"old": old, "new": new, "start": t0, "answered": t1, "converged": max(conv),
                             "barrier_ms": reply.get("barrier_ms")})
            log(f"switch {len(switches)}: v{old} -> v{new} converged in {max(conv) - t0} ms")

    for lp, _ in loads:
        lp.wait(timeout=total_s + 60)
    acked = set()
    for _, ids in loads:
        with open(ids) as f:
            acked.update(line.strip() for line in f if line.strip())

    def delivered_ids():
        st, b = http_get(sink_port, "/ids", 10)
        return set(json.loads(b)) if st == 200 else set()
    wait_for(lambda: not (acked - delivered_ids()), 30, poll=0.2)
    lost = len(acked - delivered_ids())

    st, body = http_get(sink_port, f"/requests?limit={record}", 30)
    outputs = []   # (h, v, arrival_us)
    for req in json.loads(body):
        if req.get("status", 500) >= 300:
            continue
        try:
            b = json.loads(req.get("body", ""))
        except ValueError:
            continue
        if isinstance(b, dict) and "v" in b and "h" in b:
            outputs.append((int(b["h"]), int(b["v"]), int(req.get("arrival_us", 0))))

    # Per switch k, the window (converged[k-1], start[k+1]) holds exactly one transition,
    # old -> new; an old output handled after the first new one is interleaved.
    interleaved = 0
    conv_ms, emit_ms, handled_ms = [], [], []
    for k, s in enumerate(switches):
        lo = switches[k - 1]["converged"] if k > 0 else -1
        hi = switches[k + 1]["start"] if k + 1 < len(switches) else 1 << 62
        window = [o for o in outputs if lo < o[0] < hi]
        new = [o for o in window if o[1] == s["new"]]
        if not new:
            continue
        first_new = min(o[0] for o in new)
        interleaved += sum(1 for o in window if o[1] == s["old"] and o[0] > first_new)
        conv_ms.append(s["converged"] - s["start"])
        handled_ms.append(first_new - s["start"])
        emit_ms.append(min(o[2] for o in new) / 1000.0 - s["start"])

    report = {
        "scenario": "cluster-promote",
        "machine": machine(),
        "nproc": os.cpu_count(),
        "instances": 2,
        "rate_per_instance": RATE,
        "switches": len(switches),
        "convergence_ms": summary(conv_ms),
        "first_new_handled_ms": summary(handled_ms),
        "first_new_emit_ms": summary(emit_ms),
        "barrier_ms": summary([s["barrier_ms"] for s in switches if s["barrier_ms"] is not None]),
        "promote_answer_ms": summary([s["answered"] - s["start"] for s in switches]),
        "interleaved": interleaved,
        "lost": lost,
        "acked": len(acked),
        "outputs": len(outputs),
        "goal_convergence_ms": GOAL_MS,
        "goal_met": bool(conv_ms) and max(conv_ms) <= GOAL_MS,
    }
    print(json.dumps(report))
    return 1 if interleaved or lost or not conv_ms else 0


sys.exit(main())
PY
