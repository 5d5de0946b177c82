#!/usr/bin/env python3
"""What a bus layout costs nats-server per event, for N flows (bench/layouts.sh).

For each flow count and layout: a throwaway nats-server (the GOMAXPROCS weir's embedded one
gets, harness.nats_env), then `weir-jsbench pipeline --flows N --layout L` at a fixed rate:
an event's three JetStream legs (ingest publish with PubAck, a flow consumer that publishes
to one of the flow's `--sinks` outputs in turn and acks, a consumer per sink that acks),
events spread over the flows in turn. Layouts:
- `streams`: a stream per flow, a consumer per flow and per sink (what weir runs);
- `shared-stream`: one stream, the same consumers;
- `shared-in`: one stream, one consumer of all flows' inputs, one per flow and sink;
- `split-in`: a stream and a consumer for all flows' inputs, a stream per flow for its
  outputs with a consumer per sink;
- `shared-consumers`: one stream, one consumer of all inputs and one of all outputs.
`--consumers pull` reads each consumer with pull requests as weir does (two of `--batch`
messages outstanding); `--burst K` publishes K events back to back per pacing step, as
weir's HTTP clients bunch up. Reports nats-server's CPU per event, median of --repeats,
per layout and count (docs/adr/0318-many-flows-cost.md, docs/adr/0322-a-model-of-the-bus.md).

One JSON object on stdout, progress on stderr. Exit 1 when a run failed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading

import harness
from harness import ROOT, log


def one_run(a, n, layout):
    b = harness.Bench(a)
    try:
        b.start_nats()
        # The server's CPU between weir-jsbench's "load starts" and "load ends" marks: the
        # set-up and removal of N streams are not the layout's cost per event.
        p = subprocess.Popen([b.tool("weir-jsbench"), "pipeline", "--nats", b.nats_url, "--flows", str(n),
                              "--layout", layout, "--rate", str(a.rate), "--seconds", str(a.seconds),
                              "--consumers", a.consumers, "--batch", str(a.batch), "--burst", str(a.burst), "--sinks", str(a.sinks)] + (["--ack-after-puback"] if a.ack_after_puback else []),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cpu0 = cpu1 = None
        err = []
        timer = threading.Timer(a.seconds + 120, p.kill)  # bounded whatever the server does
        timer.start()
        try:
            for line in p.stderr:
                err.append(line)
                if "load starts" in line:
                    cpu0 = harness.cpu_seconds(b.nats.pid)
                elif "load ends" in line:
                    cpu1 = harness.cpu_seconds(b.nats.pid)
            stdout = p.stdout.read()
            p.wait()
        finally:
            timer.cancel()
        try:
            out = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out = {"ok": False, "error": "".join(err).strip()[-300:]}
        if cpu0 is None or cpu1 is None:
            out = {"ok": False, "error": "no load marks: " + "".join(err).strip()[-300:]}
            cpu0 = cpu1 = 0
        received = out.get("received", 0) or 0
        return {"ok": bool(out.get("ok")), "received": received, "rate": out.get("rate"),
                "nats_cpu_us_per_event": round((cpu1 - cpu0) * 1e6 / max(received, 1), 1),
                "error": out.get("error")}
    finally:
        b.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    p.add_argument("--counts", default="1,10,50", help="flow counts, comma-separated")
    p.add_argument("--layouts", default="streams,shared-stream,shared-in,split-in,shared-consumers")
    p.add_argument("--rate", type=float, default=5000, help="events per second, all flows together")
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--consumers", default="push", choices=["push", "pull"],
                   help="push consumers, or pull requests the way weir sends them")
    p.add_argument("--batch", type=int, default=64, help="--consumers pull: messages per request")
    p.add_argument("--ack-after-puback", action="store_true",
                   help="the flow leg acks an input once its output's PubAck is in, as weir's stage does")
    p.add_argument("--sinks", type=int, default=1, help="sinks per flow, each output to one in turn")
    p.add_argument("--burst", type=int, default=1,
                   help="events published back to back per pacing step (weir's HTTP clients bunch up)")
    a = p.parse_args()
    counts = [int(x) for x in a.counts.split(",") if x.strip()]
    layouts = [x for x in a.layouts.split(",") if x.strip()]
    result = {"scenario": "layouts", "machine": harness.machine(), "nproc": os.cpu_count(),
              "nats_gomaxprocs": harness.nats_env()[1], "rate": a.rate, "seconds": a.seconds,
              "repeats": a.repeats, "consumers": a.consumers, "batch": a.batch, "burst": a.burst, "sinks": a.sinks, "ack_after_puback": a.ack_after_puback, "loadavg_before": os.getloadavg()[0], "runs": []}
    failed = False
    for _ in range(a.repeats):  # repeats outermost: every layout sees the same stretch of noise
        for n in counts:
            for layout in layouts:
                r = one_run(a, n, layout)
                r.update({"flows": n, "layout": layout})
                failed |= not r["ok"]
                log(f"{n} flows, {layout}: {r['nats_cpu_us_per_event']} us per event, ok {r['ok']}")
                result["runs"].append(r)
    summary = {}
    for n in counts:
        for layout in layouts:
            v = [r["nats_cpu_us_per_event"] for r in result["runs"] if r["flows"] == n and r["layout"] == layout]
            summary[f"{n} {layout}"] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
    result["nats_cpu_us_per_event"] = summary
    result["loadavg_after"] = os.getloadavg()[0]
    print(json.dumps(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
