#!/usr/bin/env python3
"""Cold start of two (or more) weir binaries, interleaved in one time window.

Starts one throwaway nats-server and a weir-sink, lets each binary create its streams once,
then starts each binary `--runs` times in turn (A B A B …, the order swapped every round, so
load that comes and goes falls on both) with NATS running and the streams in place, and
measures what bench/harness.py's `cold_start_ms` measures: spawn → `/healthz` 200 and
spawn → first 202 on `/in/orders` (bench/flows/bench_orders.yaml; a probe order the flow
drops). `--empty-runs K`: K more starts of each binary, each on a fresh nats-server (the first
start, which creates the streams, KV bucket and consumers). `--timeline`: one more start of
N with `log: {level: debug}`: the median ms since exec of each "start-up: …" line.

Prints JSON: per binary the median, min, max and every run; for each later binary its
medians as a ratio of the first's (`ratio_vs_first`), and the load average before and after.
On a shared machine absolute times mean little; the ratios from one window are the figures.

  bench/cold_start.py --weir /tmp/weir-before --weir build/weir --runs 9
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class ColdStart(harness.Bench):
    def __init__(self, args):
        super().__init__(args)
        self.binary = None
        self.debug = False

    def weir_argv(self, http_port, admin_port, flows_dir):
        argv = super().weir_argv(http_port, admin_port, flows_dir)
        argv[0] = self.binary
        if self.debug:
            path = os.path.join(self.tmp, "weir-debug.yaml")
            with open(path, "w") as f:
                f.write("log: { level: debug }\n")
            argv += ["--config", path]
        return argv


def summary(times):
    if not times:
        return {"median": None, "runs": []}
    return {"median": round(statistics.median(times), 2), "min": round(min(times), 2), "max": round(max(times), 2),
            "runs": [round(t, 2) for t in times]}


def timeline(b, flows_dir):
    """One start with debug logging: [(ms, step)] from its "start-up: …" lines."""
    b.debug = True
    try:
        hp, ap = harness.free_port(), harness.free_port()
        log_path = os.path.join(b.tmp, "timeline.log")
        with open(log_path, "w") as logf:
            p = b.procs.start(b.weir_argv(hp, ap, flows_dir), env=b.weir_env(), stdout=logf, stderr=logf)

            def accepted():
                try:
                    return harness.http_request(hp, "POST", "/in/orders", b.COLD_PROBE, 0.5, "application/json")[0] == 202
                except OSError:
                    return False

            harness.wait_for(accepted, 10, poll=0.0005)

            def ready():
                try:
                    return harness.http_get(ap, "/readyz", 0.5)[0] == 200
                except OSError:
                    return False

            harness.wait_for(ready, 10, poll=0.005)
            b.procs.stop(p)
        out = []
        for line in open(log_path, errors="replace"):
            m = re.search(r"start-up: (.*?) ms=([0-9.]+)", line)
            if m:
                out.append([float(m.group(2)), m.group(1)])
        return out
    finally:
        b.debug = False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(harness.ROOT, "build")),
                    help="build dir for weir-sink (and weir when --weir is not given)")
    ap.add_argument("--weir", action="append", help="a weir binary (repeat: the first is the reference)")
    ap.add_argument("--runs", type=int, default=9, help="starts of each binary with the streams in place")
    ap.add_argument("--empty-runs", type=int, default=0, help="starts of each binary on a fresh nats-server")
    ap.add_argument("--timeline", type=int, default=0, metavar="N",
                    help="N more starts of each with debug logging: the median ms of each start-up step")
    a = ap.parse_args()
    a.weir_config = ""
    binaries = [os.path.abspath(w) for w in (a.weir or [os.path.join(a.build, "weir")])]

    b = ColdStart(a)
    result = {"loadavg_before": os.getloadavg(), "binaries": binaries, "runs": a.runs}
    try:
        flows_dir = os.path.join(b.tmp, "flows")
        shutil.copytree(os.path.join(harness.ROOT, "bench", "flows"), flows_dir)
        b.start_nats()
        b.start_sink()
        # Every binary once first: the streams, bucket and consumers exist from here on.
        for w in binaries:
            b.binary = w
            b.cold_start_ms(flows_dir, runs=1)
        per = {w: {"healthz": [], "first_202": [], "failed": 0} for w in binaries}
        for i in range(a.runs):
            order = binaries if i % 2 == 0 else list(reversed(binaries))
            for w in order:
                b.binary = w
                r = b.cold_start_ms(flows_dir, runs=1)
                if r["median"] is None or r["first_202"]["median"] is None:
                    per[w]["failed"] += 1
                    continue
                per[w]["healthz"].append(r["median"])
                per[w]["first_202"].append(r["first_202"]["median"])
        out = {}
        for w in binaries:
            out[w] = {"healthz_ms": summary(per[w]["healthz"]), "first_202_ms": summary(per[w]["first_202"]),
                      "failed": per[w]["failed"]}
        if a.empty_runs:
            empty = {w: {"healthz": [], "first_202": []} for w in binaries}
            nats = b.nats
            for i in range(a.empty_runs):
                order = binaries if i % 2 == 0 else list(reversed(binaries))
                for w in order:
                    # A fresh nats-server (own store) for each: nothing of weir's exists there.
                    b.procs.stop(nats)
                    shutil.rmtree(os.path.join(b.tmp, "js"), ignore_errors=True)
                    b.start_nats()
                    nats = b.nats
                    b.binary = w
                    r = b.cold_start_ms(flows_dir, runs=0)
                    e = r.get("empty_nats") or {}
                    if e.get("healthz_ms") is not None:
                        empty[w]["healthz"].append(e["healthz_ms"])
                    if e.get("first_202_ms") is not None:
                        empty[w]["first_202"].append(e["first_202_ms"])
            for w in binaries:
                out[w]["empty_nats"] = {"healthz_ms": summary(empty[w]["healthz"]),
                                        "first_202_ms": summary(empty[w]["first_202"])}
        if a.timeline:
            steps = {w: {} for w in binaries}
            for i in range(a.timeline):
                for w in (binaries if i % 2 == 0 else list(reversed(binaries))):
                    b.binary = w
                    for ms, step in timeline(b, flows_dir):
                        steps[w].setdefault(step, []).append(ms)
            for w in binaries:
                out[w]["timeline_median_ms"] = [[round(statistics.median(v), 2), k] for k, v in
                                                sorted(steps[w].items(), key=lambda kv: statistics.median(kv[1]))]
        ref = out[binaries[0]]
        for w in binaries[1:]:
            ratios = {}
            for k in ("healthz_ms", "first_202_ms"):
                if ref[k]["median"] and out[w][k]["median"]:
                    ratios[k] = round(out[w][k]["median"] / ref[k]["median"], 3)
            out[w]["ratio_vs_first"] = ratios
        result["results"] = out
        result["loadavg_after"] = os.getloadavg()
    finally:
        b.close()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
