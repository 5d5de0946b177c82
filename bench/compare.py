#!/usr/bin/env python3
"""weir beside Node-RED on the same scenario (bench/compare.sh): same load generator, same
sink, same machine, same session.

weir runs bench/flows/bench_orders.yaml on a throwaway nats-server (every event persisted at
every hop); Node-RED runs the flow of bench/nodered.py (the same lookup, conversions, loop and
branch in function/switch/change nodes; http in answers 202 at once, nothing persisted; http
request with keep-alive to the same weir-sink). Before measuring, a few events go through
both and the bodies the sink records must be equal (per id: the same path and the same JSON).

Per system: cold start (spawn -> GET /healthz 200), RSS idle and peak, a closed-loop run
(ingest, delivered, end-to-end p50/p99, CPU per delivered event) and a paced run at --rate
(1,000/s: e2e p50/p99 from the intended send time). One JSON object on stdout with the
side-by-side table and weir/Node-RED ratios, the table also on stderr; SVGs in bench/out/:
delivered rate and latency over time for the closed and the paced run (both systems), and
a bar chart of the table. Exit 1 when the outputs differ or weir lost an acked event.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import charts
import harness
import nodered
from harness import ROOT, http_get, http_post, http_request, log, wait_for

# The flow's own test inputs (bench_orders.yaml), beside loadgen events: a gold customer's
# big order, a small one, the 100.00 boundary, an unknown customer.
EDGE_EVENTS = [
    {"id": "cmp-o1", "t": 1767225600000000, "customer_id": "c10", "amount": "250.00", "currency": "EUR",
     "ts": "2026-01-01T00:00:00Z", "items": [{"sku": "sku-1", "qty": "2", "price": "100"},
                                              {"sku": "sku-2", "qty": "1", "price": "50.00"}]},
    {"id": "cmp-o2", "t": 1, "customer_id": "c3", "amount": "21.00", "currency": "EUR", "ts": "2026-01-01T00:00:00Z",
     "items": [{"sku": "sku-9", "qty": "2", "price": "10.50"}]},
    {"id": "cmp-o3", "t": 2, "customer_id": "c1", "amount": "100.00", "currency": "EUR", "ts": "2026-01-01T00:00:00Z",
     "items": [{"sku": "a", "qty": "3", "price": "33.33"}, {"sku": "b", "qty": "1", "price": "0.01"}]},
    {"id": "cmp-o4", "t": 3, "customer_id": "c950", "amount": "9.99", "currency": "USD", "ts": "2026-01-01T00:00:00Z",
     "items": [{"sku": "x", "qty": "1", "price": "9.99"}]},
]


def post_json(port, path, body, timeout=10.0):
    return http_request(port, "POST", path, body, timeout, content_type="application/json")[0]


def healthy(port):
    try:
        return http_get(port, "/healthz", 0.5)[0] == 200
    except OSError:
        return False


class NodeRed:
    def __init__(self, b, sink_url):
        self.b, self.sink_url = b, sink_url
        self.user_dir = os.path.join(b.tmp, "node-red")
        self.proc = None

    def start(self):
        self.port = harness.free_port()
        nodered.write_user_dir(self.user_dir, self.port, self.sink_url)
        self.log = open(os.path.join(self.b.tmp, "node-red.log"), "w")
        t0 = time.monotonic()
        self.proc = self.b.procs.start(nodered.argv(self.user_dir), stdout=self.log, stderr=self.log)
        if not wait_for(lambda: healthy(self.port), 120, poll=0.002):
            sys.exit("bench: node-red did not answer /healthz; log: " + open(self.log.name).read()[-2000:])
        return (time.monotonic() - t0) * 1000

    def stop(self):
        if self.proc:
            self.b.procs.stop(self.proc)
            self.proc = None


def sink_bodies(b, n):
    """{id: (path, parsed body)} of the last n deliveries the sink recorded."""
    reqs = json.loads(http_get(b.sink_port, f"/requests?limit={n}", 10)[1])
    out = {}
    for r in reqs:
        try:
            body = json.loads(r["body"])
        except ValueError:
            body = r["body"]
        out[str(body.get("id") if isinstance(body, dict) else None)] = (r["path"], body)
    return out


def same(x, y):
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        return abs(x - y) <= 1e-9 * max(1.0, abs(x))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(same(p, q) for p, q in zip(x, y))
    return x == y


def outputs_of(b, port, events):
    http_post(b.sink_port, "/reset")
    codes = [post_json(port, "/in/orders", e) for e in events]
    wait_for(lambda: b.sink_stats()["unique"] >= len(events), 30, poll=0.05)
    return codes, sink_bodies(b, len(events) + 10)


def check_outputs(b, weir_port, nr_port, n_loadgen):
    """Same inputs through both; the sink's recorded bodies must match per id."""
    http_post(b.sink_port, "/reset")
    out = subprocess.run([b.tool("weir-loadgen"), "--url", f"http://127.0.0.1:{b.sink_port}/capture",
                          "--max-requests", str(n_loadgen), "--warmup", "0s", "--concurrency", "1", "--quiet",
                          "--run-id", "cmp"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        sys.exit("bench: weir-loadgen (capture) failed: " + out.stderr[-1000:])
    captured = [r["body"].encode() for r in json.loads(http_get(b.sink_port, f"/requests?limit={n_loadgen}", 10)[1])]
    events = captured + [json.dumps(e).encode() for e in EDGE_EVENTS]
    wc, w = outputs_of(b, weir_port, events)
    nc, n = outputs_of(b, nr_port, events)
    http_post(b.sink_port, "/reset")
    diffs = []
    for eid in sorted(set(w) | set(n)):
        if eid not in w or eid not in n or w[eid][0] != n[eid][0] or not same(w[eid][1], n[eid][1]):
            diffs.append({"id": eid, "weir": w.get(eid), "node_red": n.get(eid)})
    return {"events": len(events), "weir_status": sorted(set(wc)), "node_red_status": sorted(set(nc)),
            "weir_delivered": len(w), "node_red_delivered": len(n), "equal": not diffs and len(w) == len(events),
            "differences": diffs[:3]}


def dir_size_mb(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total / 1e6


def run_system(b, name, port, pids, main_pid, a):
    """Closed and paced runs against one started system; RSS peak after both."""
    out = {}
    for mode in ("closed", "paced"):
        log(f"{name}: {mode} " + (f"{a.seconds}s, {a.concurrency} connections" if mode == "closed"
                                  else f"{a.paced_seconds}s at {a.rate}/s"))
        m = b.measure(port, "/in/orders", a.seconds if mode == "closed" else a.paced_seconds,
                      concurrency=a.concurrency if mode == "closed" else max(a.concurrency, 64),
                      rate=a.rate if mode == "paced" else None, cpu_pids=pids, label=f"-{name}-{mode}")
        m["cpu_us_per_event"] = round(sum(m[f"{k}_cpu_us_per_event"] for k in pids), 1)
        log(f"{name} {mode}: ingest {m['ingest_per_s']}/s delivered {m['delivered_per_s']}/s "
            f"e2e p50 {m['e2e_ms']['p50']} p99 {m['e2e_ms']['p99']} ms lost {m['lost']} drained {m['drained']}")
        out[mode] = m
    out["rss_peak_mb"] = round(harness.rss_mb(main_pid, "VmHWM"), 2)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    p.add_argument("--seconds", type=float, default=20, help="closed-loop run")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--paced-seconds", type=float, default=20)
    p.add_argument("--cold-runs", type=int, default=3)
    p.add_argument("--check-events", type=int, default=20, help="loadgen events in the output check")
    p.add_argument("--warmup", default="2s")
    p.add_argument("--drain", type=float, default=60)
    a = p.parse_args()
    nodered.ensure_installed(log)
    b = harness.Bench(a)
    try:
        result = run(b, a)
    finally:
        b.close()
    print(json.dumps(result))
    if not result.get("valid", True):
        log("INVALID RUN: " + "; ".join(result["invalid_reasons"]))
    return 0 if result["outputs_equal"] and result.get("valid", True) and result["weir"]["closed"]["lost"] == 0 \
        and result["weir"]["paced"]["lost"] == 0 else 1


def run(b, a):
    flows_dir = os.path.join(b.tmp, "flows")
    shutil.copytree(os.path.join(ROOT, "bench", "flows"), flows_dir)
    b.start_nats()
    b.start_sink(record=200)
    sink_url = f"http://127.0.0.1:{b.sink_port}"
    result = {"scenario": "compare", "machine": harness.machine(), "nproc": os.cpu_count(),
              "nats_gomaxprocs": b.nats_gomaxprocs,
              "node_red_version": nodered.installed_version(), "node_version": subprocess.run(
                  ["node", "--version"], capture_output=True, text=True).stdout.strip(),
              "seconds": a.seconds, "concurrency": a.concurrency, "rate": a.rate, "paced_seconds": a.paced_seconds,
              "loadavg_before": os.getloadavg()[0]}

    log("cold starts")
    weir_cold = b.cold_start_ms(flows_dir, runs=a.cold_runs)
    nr = NodeRed(b, sink_url)
    nr_cold = []
    for _ in range(a.cold_runs):
        nr_cold.append(nr.start())
        nr.stop()

    log("output check: the same events through both")
    b.start_weir(flows_dir)
    nr_start_ms = nr.start()
    nr_cold.append(nr_start_ms)
    check = check_outputs(b, b.http_port, nr.port, a.check_events)
    result["output_check"] = check
    result["outputs_equal"] = check["equal"]
    if not check["equal"]:
        log("OUTPUTS DIFFER: " + json.dumps(check["differences"])[:2000])
        return result
    nr.stop()
    time.sleep(1.0)
    weir_idle = harness.rss_mb(b.weir.pid)
    nats_idle = harness.rss_mb(b.nats.pid)
    weir = run_system(b, "weir", b.http_port, {"weir": b.weir.pid, "nats": b.nats.pid}, b.weir.pid, a)
    weir["nats_rss_peak_mb"] = round(harness.rss_mb(b.nats.pid, "VmHWM"), 2)
    b.procs.stop(b.weir)

    nr.start()
    time.sleep(1.0)
    nr_idle = harness.rss_mb(nr.proc.pid)
    node = run_system(b, "node-red", nr.port, {"node": nr.proc.pid}, nr.proc.pid, a)
    nr.stop()

    stripped = os.path.join(b.tmp, "weir.stripped")
    subprocess.run(["strip", "-o", stripped, b.tool("weir")], check=False)
    weir_mb = os.path.getsize(stripped) / 1e6 if os.path.exists(stripped) else None
    nats_mb = os.path.getsize(shutil.which("nats-server")) / 1e6
    node_bin_mb = os.path.getsize(os.path.realpath(shutil.which("node"))) / 1e6
    nr_mb = nodered.install_size_mb()

    weir.update({"cold_start_ms": weir_cold, "rss_idle_mb": round(weir_idle, 2), "nats_rss_idle_mb": round(nats_idle, 2),
                 "install_mb": {"weir_stripped": round(weir_mb, 2) if weir_mb else None,
                                "nats_server": round(nats_mb, 2)}})
    node.update({"cold_start_ms": {"median": round(statistics.median(nr_cold), 1), "runs": [round(x, 1) for x in nr_cold]},
                 "rss_idle_mb": round(nr_idle, 2),
                 "install_mb": {"node_modules": nr_mb, "node_binary": round(node_bin_mb, 2)}})
    result["weir"], result["node_red"] = weir, node
    # weir's runs judge the comparison (harness.measure); Node-RED not draining or losing
    # events is a result to report, not a broken run.
    invalid = [r for mode in ("closed", "paced") for r in weir[mode].pop("invalid_reasons", [])]
    for mode in ("closed", "paced"):
        node[mode].pop("invalid_reasons", None)
    if weir_cold and weir_cold.get("failed"):
        invalid.append(f"{weir_cold['failed']} weir cold starts never answered /healthz")
    result["valid"], result["invalid_reasons"] = not invalid, invalid
    table = side_by_side(weir, node)
    result["table"] = table
    result["ratios"] = {row["metric"]: row["ratio"] for row in table}
    rt = result["ratios"]

    def goal(v, ok):
        return None if v is None else ok(v)

    # The goals, reported as measured, not asserted.
    result["goals"] = {
        "delivered >= 12x node-red": goal(rt["delivered/s (closed)"], lambda v: v >= 12),
        "paced p99 <= 1/10 of node-red": goal(rt["e2e p99 ms (paced)"], lambda v: v <= 0.1),
        "cpu per delivered event <= 1/10 of node-red": goal(rt["CPU us/event (closed)"], lambda v: v <= 0.1),
    }
    result["loadavg_after"] = os.getloadavg()[0]
    print_table(table)
    result["pictures"] = pictures(weir, node, table, a)
    return result


def side_by_side(w, n):
    """Rows: metric, weir, node_red, ratio weir/node-red, better (which way is better)."""
    def e2e(sys_, mode, q):
        return sys_[mode]["e2e_ms"].get(q)

    winst = (w["install_mb"]["weir_stripped"] or 0) + w["install_mb"]["nats_server"]
    ninst = n["install_mb"]["node_modules"] + n["install_mb"]["node_binary"]
    rows = [
        ("ingest/s (closed)", w["closed"]["ingest_per_s"], n["closed"]["ingest_per_s"], "higher"),
        ("delivered/s (closed)", w["closed"]["delivered_per_s"], n["closed"]["delivered_per_s"], "higher"),
        ("e2e p50 ms (closed)", e2e(w, "closed", "p50"), e2e(n, "closed", "p50"), "lower"),
        ("e2e p99 ms (closed)", e2e(w, "closed", "p99"), e2e(n, "closed", "p99"), "lower"),
        ("e2e p50 ms (paced)", e2e(w, "paced", "p50"), e2e(n, "paced", "p50"), "lower"),
        ("e2e p99 ms (paced)", e2e(w, "paced", "p99"), e2e(n, "paced", "p99"), "lower"),
        ("CPU us/event (closed)", w["closed"]["cpu_us_per_event"], n["closed"]["cpu_us_per_event"], "lower"),
        ("CPU us/event (paced)", w["paced"]["cpu_us_per_event"], n["paced"]["cpu_us_per_event"], "lower"),
        ("RSS idle MB (+nats)", round(w["rss_idle_mb"] + w["nats_rss_idle_mb"], 2), n["rss_idle_mb"], "lower"),
        ("RSS peak MB (+nats)", round(w["rss_peak_mb"] + w["nats_rss_peak_mb"], 2), n["rss_peak_mb"], "lower"),
        ("RSS idle MB (weir alone)", w["rss_idle_mb"], n["rss_idle_mb"], "lower"),
        ("cold start ms", w["cold_start_ms"]["median"] if w["cold_start_ms"] else None,
         n["cold_start_ms"]["median"], "lower"),
        ("install MB (+nats / +node)", round(winst, 2), round(ninst, 2), "lower"),
        ("lost (closed+paced)", w["closed"]["lost"] + w["paced"]["lost"], n["closed"]["lost"] + n["paced"]["lost"],
         "lower"),
    ]
    out = []
    for metric, wv, nv, better in rows:
        ratio = round(wv / nv, 3) if isinstance(wv, (int, float)) and nv else None
        out.append({"metric": metric, "weir": wv, "node_red": nv, "ratio": ratio, "better": better})
    return out


def print_table(table):
    log(f"{'':28} {'weir':>12} {'node-red':>12} {'weir/node-red':>14}")
    for r in table:
        f = lambda v: "-" if v is None else (f"{v:,.1f}" if isinstance(v, float) else f"{v:,}")
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3g}"
        log(f"{r['metric']:28} {f(r['weir']):>12} {f(r['node_red']):>12} {ratio:>14}  ({r['better']} is better)")


def pictures(w, n, table, a):
    out = []
    for mode, what in (("closed", f"closed loop, {a.concurrency} connections"), ("paced", f"paced at {a.rate:g}/s")):
        series = {"weir delivered/s": [(x["sec"], x["count"]) for x in w[mode]["timeline"]],
                  "node-red delivered/s": [(x["sec"], x["count"]) for x in n[mode]["timeline"]]}
        lat = {"weir e2e p99 ms": [(x["sec"], x.get("p99_ms")) for x in w[mode]["timeline"]],
               "node-red e2e p99 ms": [(x["sec"], x.get("p99_ms")) for x in n[mode]["timeline"]]}
        out.append(charts.write(f"compare-{mode}", charts.timeline_svg(
            f"weir vs Node-RED, {what}: delivered/s and e2e p99", series, lat)))
        for s in (w, n):
            s[mode].pop("timeline", None)
    groups = [(r["metric"], {"weir": r["weir"], "node-red": r["node_red"]}) for r in table
              if not r["metric"].startswith("lost")]
    out.append(charts.write("compare-bars", charts.bars_svg("weir vs Node-RED, same machine, same load",
                                                            groups, ["weir", "node-red"])))
    return out


if __name__ == "__main__":
    sys.exit(main())
