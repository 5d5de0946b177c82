#!/usr/bin/env python3
"""weir cluster benchmarks, behind bench/cluster.sh and bench/cluster-gaps.sh.

scale: for 1, 2, 3 ... instances (`weir run --cluster bench`) on one throwaway nats-server, the
       bench_orders flow under weir-loadgen spread over the instances' ingress ports (one
       loadgen per instance, the connections split between them); delivered/s per instance
       count, exact lost/duplicate accounting from ids, and each instance's share of the flow
       stage (from /metrics). All instances share one machine: this reports scaling, it does
       not promise it.
gaps:  a 200 ms timer flow on 2 (or more) instances; kill -9 the lease holder K times and
       SIGTERM it K times (restarting it as the standby after each); at the sink, the time from
       each event to the first tick under the new lease (crash failover, graceful handoff),
       the gap between ticks around it, and duplicate ticks.

One JSON object on stdout, progress on stderr. Every process is started and stopped by its
PID (harness.Procs); each run is bounded in time. Exit 1 when an acked event is lost (scale)
or a tick fired twice or never resumed (gaps).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from harness import Procs, Stack, exit_on_sigterm, free_port, http_get, log, machine, nats_env, reset_sink, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def summary(values):
    if not values:
        return None
    return {"median": round(statistics.median(values), 1), "max": round(max(values), 1),
            "min": round(min(values), 1), "runs": [round(v, 1) for v in values]}


def now_ms():
    return time.time() * 1000.0


class Cluster(Stack):
    """A throwaway nats-server, a weir-sink and weir instances joined to one cluster."""

    def __init__(self, build, tmp, flows_dir, cluster_name):
        self.build, self.tmp, self.flows_dir, self.cluster_name = build, tmp, flows_dir, cluster_name
        self.procs = Procs()
        self.weirs = []  # dicts: proc, http, admin, argv, log

    def sink_get(self, path):
        return json.loads(http_get(self.sink_port, path, 10)[1])

    def add_weir(self):
        i = len(self.weirs)
        hp, ap = free_port(), free_port()
        argv = [self.tool("weir"), "run", "--flows", self.flows_dir, "--nats", self.nats_url, "--cluster",
                self.cluster_name, "--http", f"127.0.0.1:{hp}", "--admin", f"127.0.0.1:{ap}",
                "--data-dir", os.path.join(self.tmp, f"weir-data-{i}")]
        w = {"i": i, "http": hp, "admin": ap, "argv": argv, "log": os.path.join(self.tmp, f"weir-{i}.log")}
        self.weirs.append(w)
        self.spawn(w)
        return w

    def spawn(self, w):
        env = dict(os.environ)
        env["SINK_URL"] = f"http://127.0.0.1:{self.sink_port}"
        logf = open(w["log"], "a")
        w["proc"] = self.procs.start(w["argv"], env=env, stdout=logf, stderr=logf)

    def wait_ready(self, w, timeout=30):
        def ready():
            if w["proc"].poll() is not None:
                return True
            try:
                return http_get(w["admin"], "/readyz", 0.5)[0] == 200
            except OSError:
                return False

        if not wait_for(ready, timeout, poll=0.01) or w["proc"].poll() is not None:
            sys.exit(f"bench: weir {w['i']} did not become ready; log: " + open(w["log"]).read()[-2000:])

    def admin_json(self, w, path):
        try:
            status, body = http_get(w["admin"], path, 1.0)
            return json.loads(body) if status == 200 else None
        except (OSError, ValueError):
            return None

    def close(self):
        self.procs.stop_all()


# ---------------------------------------------------------------------------- scale

def stage_acked(c, w, stage):
    try:
        status, body = http_get(w["admin"], "/metrics", 2.0)
    except OSError:
        return None
    if status != 200:
        return None
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith("weir_events_acked_total{") and f'stage="{stage}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def scale_run(a, n, build):
    tmp = tempfile.mkdtemp(prefix=f"weir-cluster-{n}-")
    flows_dir = os.path.join(tmp, "flows")
    shutil.copytree(os.path.join(ROOT, "bench", "flows"), flows_dir)
    c = Cluster(build, tmp, flows_dir, "bench")
    try:
        c.start_nats()
        c.start_sink()
        for _ in range(n):
            c.add_weir()
        for w in c.weirs:
            c.wait_ready(w)
        reset_sink(c.sink_port, a.warmup)
        per = max(1, a.concurrency // n)
        log(f"{n} instance(s): {a.seconds}s closed loop, {per} connections per instance")
        loadgens = []
        for w in c.weirs:
            ids = os.path.join(tmp, f"acked-{w['i']}.ids")
            argv = [c.tool("weir-loadgen"), "--url", f"http://127.0.0.1:{w['http']}/in/orders",
                    "--duration", f"{a.seconds}s", "--warmup", a.warmup, "--concurrency", str(per),
                    "--acked-ids", ids, "--run-id", f"n{n}i{w['i']}", "--seed", str(w["i"] + 1), "--quiet"]
            loadgens.append((ids, c.procs.start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
        results = []
        for ids, p in loadgens:
            try:
                out, err = p.communicate(timeout=a.seconds + 120)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            if p.returncode != 0:
                sys.exit("bench: weir-loadgen failed: " + err.decode(errors="replace")[-2000:])
            results.append(json.loads(out))
        load_end = time.monotonic()
        acked = set()
        for ids, _ in loadgens:
            acked |= set(l.strip() for l in open(ids) if l.strip())
        drained = wait_for(lambda: c.sink_get("/stats")["unique"] >= len(acked), a.drain, poll=0.1)
        drain_s = time.monotonic() - load_end
        stats = c.sink_get("/stats")
        delivered_ids = set(c.sink_get("/ids"))
        timeline = c.sink_get("/timeline")
        shares = [stage_acked(c, w, "flow") for w in c.weirs]
        window = [b["count"] for b in timeline][1:-1] if len(timeline) > 2 else [b["count"] for b in timeline]
        errors = {}
        for r in results:
            for k, v in r.get("errors", {}).items():
                errors[k] = errors.get(k, 0) + v
        return {
            "instances": n,
            "connections_per_instance": per,
            "sent": sum(r["total"]["sent"] for r in results),
            "acked": len(acked),
            "delivered": stats["unique"],
            "lost": len(acked - delivered_ids),
            "duplicates": stats["duplicates"],
            "errors": errors,
            "ingest_per_s": round(sum(r["ingest_per_s"] for r in results), 1),
            "delivered_per_s": round(statistics.median(window), 1) if window else 0,
            # Over the sink's whole span, first to last arrival (drain included).
            "delivered_avg_per_s": round(stats["unique"] / max((stats["last_us"] - stats["first_us"]) / 1e6, 1e-3), 1)
            if stats.get("first_us") and stats.get("last_us") else 0,
            "e2e_ms": {k: stats["e2e_ms"].get(k) for k in ("p50", "p99", "max")},
            "flow_stage_acked_per_instance": shares,
            "drain_s": round(drain_s, 2),
            "drained": drained,
        }
    finally:
        c.close()
        shutil.rmtree(tmp, ignore_errors=True)


def scale(a):
    build = os.path.abspath(a.build)
    result = {"scenario": "cluster-scale", "machine": machine(), "nproc": os.cpu_count(),
              "nats_gomaxprocs": nats_env()[1], "seconds": a.seconds, "concurrency": a.concurrency,
              "flow": "bench_orders", "nats": "one nats-server, R1", "loadavg_before": os.getloadavg()[0], "runs": []}
    for n in a.instances:
        r = scale_run(a, n, build)
        log(f"{n} instance(s): delivered {r['delivered_per_s']}/s, lost {r['lost']}")
        result["runs"].append(r)
    base = result["runs"][0]["delivered_per_s"] or 1
    result["delivered_per_s"] = {str(r["instances"]): r["delivered_per_s"] for r in result["runs"]}
    result["vs_first"] = {str(r["instances"]): round(r["delivered_per_s"] / base, 3) for r in result["runs"]}
    result["lost"] = sum(r["lost"] for r in result["runs"])
    result["loadavg_after"] = os.getloadavg()[0]
    return result


# ----------------------------------------------------------------------------- gaps

TIMER_FLOW = """flow: ticks
from: {{ timer: {{ every: {every} }} }}
to:
  out: {{ http: {{ url: "${{SINK_URL}}/ticks", timeout: 2s }} }}
"""


def sink_ticks(c):
    """Every tick delivery the sink recorded: (tick ms, fence, arrival ms)."""
    out = []
    for req in c.sink_get("/requests?limit=100000"):
        try:
            body = json.loads(req.get("body") or "null")
        except ValueError:
            continue
        if isinstance(body, dict) and "tick" in body:
            out.append((int(body["tick"]), int(body.get("fence", 0)), req["arrival_us"] / 1000.0))
    return out


def holder_of(c):
    holders = []
    for w in c.weirs:
        if w["proc"].poll() is not None:
            continue
        st = c.admin_json(w, "/status")
        leases = ((st or {}).get("members") or {}).get("leases") or []
        if any(l.get("key") == "source.ticks" and l.get("held_here") for l in leases):
            holders.append(w)
    return holders


def gaps(a):
    build = os.path.abspath(a.build)
    tmp = tempfile.mkdtemp(prefix="weir-cluster-gaps-")
    flows_dir = os.path.join(tmp, "flows")
    os.makedirs(flows_dir)
    with open(os.path.join(flows_dir, "ticks.yaml"), "w") as f:
        f.write(TIMER_FLOW.format(every=f"{a.every_ms}ms"))
    c = Cluster(build, tmp, flows_dir, "gaps")
    events = []
    try:
        c.start_nats()
        c.start_sink(record=100000)
        for _ in range(a.instances):
            c.add_weir()
        for w in c.weirs:
            c.wait_ready(w)
        if not wait_for(lambda: len(holder_of(c)) == 1 and len(sink_ticks(c)) >= 3, 15, poll=0.05):
            sys.exit("bench: no single lease holder ticking within 15 s")
        plan = []  # alternating, so both kinds see the same conditions
        for i in range(max(a.kills, a.terms)):
            plan += (["kill"] if i < a.kills else []) + (["term"] if i < a.terms else [])
        for k, kind in enumerate(plan):
            holders = holder_of(c)
            if len(holders) != 1:
                sys.exit(f"bench: expected one holder before event {k}, found {len(holders)}")
            victim = holders[0]
            before = sink_ticks(c)
            old_fence = max(t[1] for t in before)
            t_event = now_ms()
            if kind == "kill":
                victim["proc"].kill()
            else:
                victim["proc"].terminate()
            victim["proc"].wait(timeout=30)
            exit_code = victim["proc"].returncode

            def resumed():
                return any(t[1] != old_fence and t[0] >= t_event - a.every_ms for t in sink_ticks(c))

            ok = wait_for(resumed, 15, poll=0.01)
            ticks = sink_ticks(c)
            new = [t for t in ticks if t[1] != old_fence and t[0] >= t_event - a.every_ms]
            old = [t for t in ticks if t[1] == old_fence]
            ev = {"kind": kind, "exit": exit_code, "resumed": ok}
            if ok:
                first = min(new)
                last_old = max(t[0] for t in old) if old else None
                ev.update({"to_next_tick_ms": round(first[0] - t_event, 1),
                           "to_arrival_ms": round(min(t[2] for t in new if t[0] == first[0]) - t_event, 1),
                           "gap_ms": (first[0] - last_old) if last_old is not None else None,
                           "missed_ticks": ((first[0] - last_old) // a.every_ms - 1) if last_old is not None else None})
            log(f"event {k + 1}/{len(plan)} {kind}: {ev}")
            events.append(ev)
            # The victim comes back as the standby, so every event starts with two instances.
            c.spawn(victim)
            c.wait_ready(victim)
            time.sleep(a.settle)  # the standby's campaign loop and watch settle before the next event
        ticks = sink_ticks(c)
        stats = c.sink_get("/stats")
    finally:
        c.close()
        shutil.rmtree(tmp, ignore_errors=True)

    fences_of = {}
    for tick, fence, _ in ticks:
        fences_of.setdefault(tick, set()).add(fence)
    fired_twice = sum(1 for f in fences_of.values() if len(f) > 1)
    interleaved, highest = 0, 0
    for tick in sorted(fences_of):
        for fence in fences_of[tick]:
            if fence < highest:
                interleaved += 1
            highest = max(highest, fence)
    kills = [e for e in events if e["kind"] == "kill" and e["resumed"]]
    terms = [e for e in events if e["kind"] == "term" and e["resumed"]]
    result = {
        "scenario": "cluster-gaps", "machine": machine(), "nproc": os.cpu_count(), "nats_gomaxprocs": nats_env()[1],
        "instances": a.instances,
        "every_ms": a.every_ms, "lease_ttl": "default (1s)", "kills": a.kills, "terms": a.terms,
        "crash_failover_ms": summary([e["to_next_tick_ms"] for e in kills]),
        "crash_gap_ms": summary([e["gap_ms"] for e in kills if e["gap_ms"] is not None]),
        "handoff_ms": summary([e["to_next_tick_ms"] for e in terms]),
        "handoff_gap_ms": summary([e["gap_ms"] for e in terms if e["gap_ms"] is not None]),
        "never_resumed": sum(1 for e in events if not e["resumed"]),
        "term_exit_codes": sorted(set(e["exit"] for e in events if e["kind"] == "term")),
        "ticks": len(fences_of),
        "duplicate_ticks": fired_twice + interleaved,
        "sink_resends": stats.get("duplicates", 0),
        "goals": {"crash_failover_ms": 1500, "handoff_ms": 250, "duplicate_ticks": 0},
        "events": events,
    }
    cf, ho = result["crash_failover_ms"], result["handoff_ms"]
    result["goals_met"] = {"crash_failover_ms": bool(cf and cf["max"] <= 1500),
                           "handoff_ms": bool(ho and ho["max"] <= 250),
                           "duplicate_ticks": result["duplicate_ticks"] == 0}
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scale")
    s.add_argument("--seconds", type=float, default=20)
    s.add_argument("--concurrency", type=int, default=32, help="connections in total, split over the instances")
    s.add_argument("--instances", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 3])
    s.add_argument("--warmup", default="2s")
    s.add_argument("--drain", type=float, default=60)
    g = sub.add_parser("gaps")
    g.add_argument("--instances", type=int, default=2)
    g.add_argument("--kills", type=int, default=5)
    g.add_argument("--terms", type=int, default=5)
    g.add_argument("--every-ms", type=int, default=200)
    g.add_argument("--settle", type=float, default=1.5, help="seconds after the victim is back before the next event")
    a = p.parse_args()
    exit_on_sigterm()
    if a.cmd == "scale":
        result = scale(a)
        print(json.dumps(result))
        if result["lost"] > 0:
            log(f"LOST {result['lost']} acknowledged events")
            return 1
        return 0
    result = gaps(a)
    print(json.dumps(result))
    if result["duplicate_ticks"] > 0 or result["never_resumed"] > 0:
        log(f"duplicate ticks {result['duplicate_ticks']}, never resumed {result['never_resumed']}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
