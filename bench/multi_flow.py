#!/usr/bin/env python3
"""Many flows in one weir (bench/multi-flow.sh): 1, 10 and 50 copies of bench_orders at once.

Per count N: a throwaway nats-server and weir-sink, weir with N copies of bench_orders
(`bench_orders_<k>`, path /in/orders_<k>, the same table and steps), RSS idle once ready,
then the load for --seconds: one weir-loadgen whose connections take the N flows' paths in
turn (--loadgens one, the default: the same client at every count), or N at once, one per
flow (--loadgens per-flow; run ids f<k> so ids never collide); drain; aggregate ingest and delivered rate, exact loss (union of the acked ids
minus the sink's ids), RSS peak, and RSS per flow (total / N, and the marginal
(RSS(N) - RSS(1)) / (N - 1)); CPU per delivered event of weir and of nats-server, and the
machine's idle share during the load, so a stall (everyone waiting, the CPUs idle) shows in
the report itself.

Connections (--connections): "spread" gives each flow C/N connections, at least 1, so 50
flows with C = 32 run 50 connections; "constant" splits exactly C over the N flows (some
get one more than others; C must be at least N), so every count runs the same total. Each
run says which mode and how many connections it used.

One JSON object on stdout, progress on stderr, an SVG per count in bench/out/. Exit 1 when
an acked event was lost.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import charts
import harness
from harness import ROOT, http_get, http_post, log, wait_for


def write_flows(dst, n):
    os.makedirs(dst)
    src = open(os.path.join(ROOT, "bench", "flows", "bench_orders.yaml")).read()
    with open(os.path.join(ROOT, "bench", "flows", "customers.csv")) as f:
        csv = f.read()
    with open(os.path.join(dst, "customers.csv"), "w") as f:
        f.write(csv)
    for k in range(1, n + 1):
        text = re.sub(r"^flow: bench_orders$", f"flow: bench_orders_{k}", src, flags=re.M)
        text = text.replace("path: /in/orders }", f"path: /in/orders_{k} }}")
        with open(os.path.join(dst, f"bench_orders_{k}.yaml"), "w") as f:
            f.write(text)


def run_count(a, n):
    b = harness.Bench(a)
    try:
        flows_dir = os.path.join(b.tmp, "flows")
        write_flows(flows_dir, n)
        b.start_nats()
        b.start_sink()
        t0 = time.monotonic()
        b.start_weir(flows_dir)
        ready_s = time.monotonic() - t0
        time.sleep(1.0)
        rss_idle = harness.rss_mb(b.weir.pid)
        conns = connections(a, n)
        http_post(b.sink_port, "/reset")
        cpu0 = harness.cpu_seconds(b.weir.pid)
        nats0 = harness.cpu_seconds(b.nats.pid)
        idle0 = machine_ticks()
        varz0 = nats_varz(b)
        kids0 = children_cpu()
        gens = 1 if a.loadgens == "one" else n
        log(f"{n} flows: {gens} loadgens, {sum(conns)} connections ({a.connections}) for {a.seconds}s")
        procs, files = [], []
        urls = [f"http://127.0.0.1:{b.http_port}/in/orders_{k}" for k in range(1, n + 1)]
        for g in range(1, gens + 1):
            ids = os.path.join(b.tmp, f"acked{g}.ids")
            out = tempfile.TemporaryFile(mode="w+", dir=b.tmp)
            # One process: connection k posts to flow (k mod n), which gives each flow the
            # connections connections() planned for it.
            mine = urls if gens == 1 else [urls[g - 1]]
            argv = [b.tool("weir-loadgen")]
            for u in mine:
                argv += ["--url", u]
            argv += ["--duration", f"{a.seconds}s", "--warmup", a.warmup,
                     "--concurrency", str(sum(conns) if gens == 1 else conns[g - 1]),
                     "--acked-ids", ids, "--run-id", f"f{g}", "--seed", str(g), "--quiet"]
            if a.rate > 0:  # open loop: the flows together get --rate events/s, shared by the generators
                argv += ["--rate", str(a.rate / gens)]
            procs.append(b.procs.start(argv, stdout=out))
            files.append((ids, out))
        deadline = time.monotonic() + a.seconds + 180
        for pr in procs:
            try:
                pr.wait(max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                b.procs.stop(pr)
        reports = []
        for _, out in files:
            out.seek(0)
            try:
                reports.append(json.loads(out.read()))
            except ValueError:
                reports.append(None)
        acked = set()
        for ids, _ in files:
            if os.path.exists(ids):
                acked.update(l.strip() for l in open(ids) if l.strip())
        load_end = time.monotonic()
        idle1 = machine_ticks()
        kids1 = children_cpu()
        drained = wait_for(lambda: b.sink_stats()["unique"] >= len(acked), a.drain, poll=0.1)
        drain_s = time.monotonic() - load_end
        cpu1 = harness.cpu_seconds(b.weir.pid)
        nats1 = harness.cpu_seconds(b.nats.pid)
        varz1 = nats_varz(b)
        stats = b.sink_stats()
        got = set(json.loads(http_get(b.sink_port, "/ids", 30)[1]))
        timeline = json.loads(http_get(b.sink_port, "/timeline", 10)[1])
        rss_peak = harness.rss_mb(b.weir.pid, "VmHWM")
        threads = thread_count(b.weir.pid)
        b.procs.stop(b.weir)
        ok_reports = [r for r in reports if r]
        window = [x["count"] for x in timeline][1:-1] if len(timeline) > 2 else [x["count"] for x in timeline]
        errors = {}
        for r in ok_reports:
            for k, v in (r.get("errors") or {}).items():
                errors[k] = errors.get(k, 0) + v
        res = {
            "flows": n, "connections_mode": a.connections, "connections": sum(conns), "loadgens": gens,
            "connections_per_flow": [min(conns), max(conns)], "loadgens_reported": len(ok_reports),
            "ready_s": round(ready_s, 2),
            "sent": sum(r["total"]["sent"] for r in ok_reports), "acked": len(acked),
            "delivered": stats["unique"], "lost": len(acked - got), "duplicates": stats["duplicates"],
            "errors": errors, "ingest_per_s": round(sum(r["ingest_per_s"] for r in ok_reports), 1),
            "delivered_per_s": round(statistics.median(window), 1) if window else 0,
            "drained": drained, "drain_s": round(drain_s, 2),
            "e2e_ms": {k: stats["e2e_ms"].get(k) for k in ("p50", "p90", "p99", "max")},
            "rss_mb": {"idle": round(rss_idle, 2), "peak": round(rss_peak, 2),
                       "idle_per_flow": round(rss_idle / n, 2), "peak_per_flow": round(rss_peak / n, 2)},
            "weir_cpu_us_per_event": round((cpu1 - cpu0) * 1e6 / max(stats["unique"], 1), 1),
            "nats_cpu_us_per_event": round((nats1 - nats0) * 1e6 / max(stats["unique"], 1), 1),
            "loadgen_cpu_us_per_event": round((kids1 - kids0) * 1e6 / max(stats["unique"], 1), 1),
            "nats_msgs_per_event": {k: round((varz1[k] - varz0[k]) / max(stats["unique"], 1), 2)
                                    for k in ("in_msgs", "out_msgs")} if varz0 and varz1 else None,
            "machine_idle_share": idle_share(idle0, idle1),
            "threads": threads,
        }
        series, lat = charts.sink_timeline_series(timeline)
        res["picture"] = charts.write(f"multi-flow-{n}", charts.timeline_svg(
            f"weir, {n} flows at once: delivered/s (all flows) and end-to-end latency", series, lat))
        return res
    finally:
        b.close()


def connections(a, n):
    """Connections per flow for N flows, as --connections says."""
    if a.connections == "spread":
        return [max(1, a.concurrency // n)] * n
    if a.concurrency < n:
        sys.exit(f"multi-flow: --connections constant needs --concurrency >= the largest count ({n})")
    return [a.concurrency // n + (1 if k < a.concurrency % n else 0) for k in range(n)]


def machine_ticks():
    """(idle + iowait, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    return cpu[3] + cpu[4], sum(cpu[:8])


def idle_share(t0, t1):
    total = t1[1] - t0[1]
    return round((t1[0] - t0[0]) / total, 3) if total > 0 else None


def nats_varz(b):
    """nats-server's message counters (its monitoring /varz), None when it does not answer."""
    try:
        status, body = http_get(b.nats_mon, "/varz", 5)
        v = json.loads(body) if status == 200 else None
        return {k: v[k] for k in ("in_msgs", "out_msgs")} if v else None
    except (OSError, ValueError, KeyError):
        return None


def children_cpu():
    """CPU seconds of this script's reaped children (the load generators, once waited for)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def thread_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    p.add_argument("--counts", default="1,10,50", help="flow counts, comma-separated")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--concurrency", type=int, default=32, help="connections in total (C), over the flows")
    p.add_argument("--connections", choices=("spread", "constant"), default="spread",
                   help="spread: C/N per flow, at least 1; constant: exactly C in total at every count")
    p.add_argument("--loadgens", choices=("one", "per-flow"), default="one",
                   help="one: a single weir-loadgen drives every flow (the same client at every count); "
                        "per-flow: one process per flow")
    p.add_argument("--rate", type=float, default=0,
                   help="open loop: events per second over all flows (0: closed loop, the default)")
    p.add_argument("--warmup", default="2s")
    p.add_argument("--drain", type=float, default=60)
    a = p.parse_args()
    counts = [int(x) for x in a.counts.split(",") if x.strip()]
    result = {"scenario": "multi-flow", "machine": harness.machine(), "nproc": os.cpu_count(),
              "nats_gomaxprocs": harness.nats_env()[1],
              "seconds": a.seconds, "concurrency": a.concurrency, "connections_mode": a.connections, "loadgens_mode": a.loadgens, "rate": a.rate, "loadavg_before": os.getloadavg()[0], "runs": []}
    for n in counts:
        r = run_count(a, n)
        log(f"{n} flows: ingest {r['ingest_per_s']}/s delivered {r['delivered_per_s']}/s lost {r['lost']} "
            f"rss idle {r['rss_mb']['idle']} MB peak {r['rss_mb']['peak']} MB; CPU per event weir "
            f"{r['weir_cpu_us_per_event']} us, nats-server {r['nats_cpu_us_per_event']} us, "
            f"load generators {r['loadgen_cpu_us_per_event']} us; NATS messages per event {r['nats_msgs_per_event']}; "
            f"machine idle {r['machine_idle_share']}")
        result["runs"].append(r)
    one = next((r for r in result["runs"] if r["flows"] == 1), None)
    if one:
        for r in result["runs"]:
            if r["flows"] > 1:
                r["rss_mb"]["idle_marginal_per_flow"] = round((r["rss_mb"]["idle"] - one["rss_mb"]["idle"])
                                                              / (r["flows"] - 1), 3)
    fifty = next((r for r in result["runs"] if r["flows"] == 50), None)
    if fifty:
        # The goal (50 flows in <= 40 MB), reported as measured, not asserted.
        result["goals"] = {"50 flows rss idle <= 40 MB": fifty["rss_mb"]["idle"] <= 40,
                           "50 flows rss peak <= 40 MB": fifty["rss_mb"]["peak"] <= 40}
    result["lost"] = sum(r["lost"] for r in result["runs"])
    result["loadavg_after"] = os.getloadavg()[0]
    print(json.dumps(result))
    return 1 if result["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
