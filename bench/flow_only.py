#!/usr/bin/env python3
"""weir's flow hop alone (bench/flow-only.sh): the flow stage of bench_orders over its input
stream, against the raw JetStream hop (weir-jsbench hop) on the same nats-server.

Pre-filled (default): weir runs once so it creates its stream and consumers, stops; N events
shaped by weir-loadgen (captured through weir-sink, so they are the bodies run.sh sends) are
written into `weir.bench_orders.in` with the headers weir's http ingest writes; weir starts
again and the flow stage works the backlog off. Live (--publishers P): weir runs while P
processes publish into `weir.bench_orders.in` as fast as JetStream acks them, for --seconds.

What is counted: the inputs the flow consumer `bench_orders` has acknowledged (from
nats-server's /jsz, polled every 50 ms). Publish before ack (an input is acked only after its
outputs' PubAcks) means an acked input's output is stored, and the out-subjects' message count
at the end is checked against it. The
sinks point at a weir-sink that holds every request (delay), so each sink stage keeps at
most its pool's few requests in flight and costs nothing while the flow is measured
(docs/adr/0051-bench-scripts.md).

One JSON object on stdout, progress on stderr, an SVG in bench/out/. Exit 1 when the counts
do not add up.
"""
import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time

import charts
import harness
import natsclient
from harness import ROOT, http_get, http_post, log, wait_for

FLOW = "bench_orders"
IN_SUBJECT = f"weir.{FLOW}.in"
STREAM = f"weir_{FLOW}"


def capture_events(b, n):
    """n loadgen bodies, recorded by the sink (the same generator and seed as run.sh)."""
    http_post(b.sink_port, "/reset")
    out = subprocess.run([b.tool("weir-loadgen"), "--url", f"http://127.0.0.1:{b.sink_port}/capture",
                          "--max-requests", str(n), "--warmup", "0s", "--concurrency", "8", "--quiet"],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit("bench: weir-loadgen (capture) failed: " + out.stderr[-1000:])
    reqs = json.loads(http_get(b.sink_port, f"/requests?limit={n}", 60)[1])
    http_post(b.sink_port, "/reset")
    bodies = [r["body"].encode() for r in reqs]
    if len(bodies) != n:
        sys.exit(f"bench: captured {len(bodies)} events, wanted {n}")
    return bodies


def flow_progress(b):
    """(inputs processed so far, inputs pending, stream messages) of the flow consumer."""
    st = b.jsz().get(STREAM)
    if not st:
        return 0, 0, 0
    c = st["consumers"].get(FLOW, {})
    # Consumer sequence, not stream sequence: the stream interleaves inputs and outputs.
    acked = c.get("ack_floor", {}).get("consumer_seq", 0)
    return acked, c.get("num_pending", 0) + c.get("num_ack_pending", 0), st["state"].get("messages", 0)


class Poller:
    """Samples the flow consumer's ack floor every `period` s until `done(sample)`, or the
    deadline; keeps (monotonic time, acked inputs, pending, stream messages)."""

    def __init__(self, b, period=0.05):
        self.b, self.period, self.samples = b, period, []

    def run(self, done, deadline):
        while time.monotonic() < deadline:
            s = (time.monotonic(),) + flow_progress(self.b)
            self.samples.append(s)
            if done(s):
                return True
            time.sleep(self.period)
        return False

    def per_second(self, t0):
        """Inputs acked in each whole second after t0, and the backlog at its end."""
        out, sec, last_acked = [], 1, None
        for t, acked, pending, _ in self.samples:
            if last_acked is None:
                last_acked = acked
            while t >= t0 + sec:
                out.append((sec, acked - last_acked, pending))
                last_acked, sec = acked, sec + 1
        return out


def prefill(b, bodies, tag):
    pub = natsclient.Publisher(b.nats_url)
    try:
        frames = natsclient.event_frames(pub, IN_SUBJECT, bodies, tag)
        pub.publish_all(frames)
        if pub.failed:
            sys.exit(f"bench: {pub.failed} publishes into {IN_SUBJECT} failed: {pub.errors}")
        return pub.acked
    finally:
        pub.close()


def publisher_proc(url, bodies, tag, seconds, q):
    """One live publisher: rounds over `bodies` with fresh ids until `seconds` are up."""
    end = time.monotonic() + seconds
    pub = natsclient.Publisher(url)
    rounds = 0
    try:
        while time.monotonic() < end:
            frames = natsclient.event_frames(pub, IN_SUBJECT, bodies, f"{tag}r{rounds}-")
            pub.publish_all(frames, window=512, stop=lambda: time.monotonic() >= end)
            rounds += 1
        q.put({"acked": pub.acked, "failed": pub.failed, "errors": pub.errors})
    except Exception as e:  # reported, not raised: the parent counts what arrived
        q.put({"acked": pub.acked, "failed": pub.failed, "errors": [str(e)]})
    finally:
        pub.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    p.add_argument("--count", type=int, default=100000, help="pre-filled events (and the hop's count)")
    p.add_argument("--publishers", type=int, default=0, help="live form: N parallel publishers")
    p.add_argument("--seconds", type=float, default=10, help="live form: how long they publish")
    p.add_argument("--timeout", type=float, default=300, help="bound on the flow's work-off")
    p.add_argument("--no-ceilings", action="store_true")
    p.add_argument("--warmup", default="0s")
    p.add_argument("--drain", type=float, default=60)
    a = p.parse_args()
    b = harness.Bench(a)
    try:
        result = run(b, a)
    finally:
        b.close()
    print(json.dumps(result))
    return 0 if result["ok"] else 1


def run(b, a):
    flows_dir = os.path.join(b.tmp, "flows")
    shutil.copytree(os.path.join(ROOT, "bench", "flows"), flows_dir)
    b.start_nats()
    live = a.publishers > 0
    n_capture = min(a.count, 20000) if live else a.count
    b.start_sink(record=n_capture)
    log(f"capturing {n_capture} loadgen events")
    bodies = capture_events(b, n_capture)
    # Not counted: every delivery waits 10 minutes, so each sink stage holds one pool's worth.
    http_post(b.sink_port, "/control", b'{"delay_ms": 600000}')
    result = {"scenario": "flow-only live" if live else "flow-only pre-filled", "machine": harness.machine(),
              "nproc": os.cpu_count(), "nats_gomaxprocs": b.nats_gomaxprocs, "loadavg_before": os.getloadavg()[0]}

    log("weir once, to create its stream and consumers")
    b.start_weir(flows_dir)
    b.procs.stop(b.weir)
    if live:
        b.start_weir(flows_dir)
        result.update(run_live(b, a, bodies))
    else:
        t0 = time.monotonic()
        filled = prefill(b, bodies, "pf-")
        log(f"pre-filled {filled} events into {IN_SUBJECT} in {time.monotonic() - t0:.1f}s")
        acked0, pending0, msgs0 = flow_progress(b)
        if pending0 != a.count:
            sys.exit(f"bench: the flow consumer has {pending0} pending, wanted {a.count}")
        poller = Poller(b)
        # The state before weir starts is the first sample: weir begins working the backlog
        # before start_weir() returns, so the first sample taken after it may already show
        # progress, and the span must start from a sample without any (a run whose first
        # sample had progress reported 0/s and passed).
        poller.samples.append((time.monotonic(), acked0, pending0, msgs0))
        nats_cpu0 = harness.cpu_seconds(b.nats.pid)
        b.start_weir(flows_dir)
        done = poller.run(lambda s: s[2] == 0, time.monotonic() + a.timeout)
        cpu = harness.cpu_seconds(b.weir.pid)
        nats_cpu = harness.cpu_seconds(b.nats.pid) - nats_cpu0
        first = next((s for s in poller.samples if s[1] > acked0), None)
        last = poller.samples[-1]
        _, _, msgs = flow_progress(b)
        emitted = msgs  # the inputs are gone (work queue), the outputs wait for the held sinks
        rss_peak = harness.rss_mb(b.weir.pid, "VmHWM")
        b.procs.stop(b.weir)
        # Rate from the first sample that saw progress to the last: the run between them.
        prev = poller.samples[poller.samples.index(first) - 1] if first else None
        span = (last[0] - prev[0]) if first and prev else 0
        rate = (last[1] - acked0) / span if span > 0 else 0
        secs = poller.per_second(prev[0] if prev else last[0])
        full = [n for _, n, _ in secs[:-1]] or [n for _, n, _ in secs]
        result.update({
            "count": a.count, "processed": last[1] - acked0, "emitted": emitted, "drained": done,
            "seconds": round(span, 2), "flow_per_s": round(rate, 1),
            "flow_per_s_median_second": round(statistics.median(full), 1) if full else 0,
            "rss_mb_peak": round(rss_peak, 2),
            # weir's whole CPU since its start (the start is a few ms) over the inputs.
            "weir_cpu_us_per_event": round(cpu * 1e6 / max(last[1] - acked0, 1), 1),
            # nats-server's over the same span (and weir's start, and the 50 ms /jsz polls).
            "nats_cpu_us_per_event": round(nats_cpu * 1e6 / max(last[1] - acked0, 1), 1),
            "ok": done and emitted == a.count and rate > 0,
        })
        result["picture"] = charts.write("flow-only", charts.timeline_svg(
            f"weir flow hop, {a.count} pre-filled events: inputs done/s (backlog dashed)",
            {"flow inputs acked/s": [(s, n) for s, n, _ in secs]},
            {"backlog (msgs)": [(s, pend) for s, _, pend in secs]}, right_label="backlog, messages"))
    b.procs.stop(b.weir)
    if not a.no_ceilings:
        log(f"raw hop: weir-jsbench hop --count {a.count}")
        hop_cpu0 = harness.cpu_seconds(b.nats.pid)
        hop = b.jsbench("hop", a.count)
        hop_cpu = harness.cpu_seconds(b.nats.pid) - hop_cpu0
        result["ceilings"] = {"jetstream_hop_per_s": hop}
        if hop:
            # Its pre-fill included: an upper bound of the hop's own cost.
            result["ceilings"]["jetstream_hop_nats_cpu_us_per_event_max"] = round(hop_cpu * 1e6 / a.count, 1)
            result["ratios"] = {"flow_vs_hop": round(result["flow_per_s"] / hop, 3)}
            if not live:
                # The goal, reported as measured, not asserted.
                result["goals"] = {"flow_vs_hop >= 0.6": result["ratios"]["flow_vs_hop"] >= 0.6}
    result["loadavg_after"] = os.getloadavg()[0]
    return result


def run_live(b, a, bodies):
    acked0, _, _ = flow_progress(b)
    q = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=publisher_proc, args=(b.nats_url, bodies, f"lp{k}-", a.seconds, q))
             for k in range(a.publishers)]
    log(f"{a.publishers} publishers for {a.seconds}s into {IN_SUBJECT}")
    cpu0 = harness.cpu_seconds(b.weir.pid)
    t0 = time.monotonic()
    for pr in procs:
        pr.start()
    poller = Poller(b)
    poller.run(lambda s: s[0] >= t0 + a.seconds, t0 + a.seconds + 5)
    reports = [q.get(timeout=60) for _ in procs]
    for pr in procs:
        pr.join(30)
        if pr.is_alive():
            pr.kill()
    published = sum(r["acked"] for r in reports)
    t_pub = time.monotonic() - t0
    at_window_end = [s for s in poller.samples if s[0] <= t0 + a.seconds][-1]
    # The backlog left when publishing stops is worked off, bounded; the rate counts the
    # window only.
    poller.run(lambda s: s[2] == 0, time.monotonic() + a.timeout)
    cpu1 = harness.cpu_seconds(b.weir.pid)
    last = poller.samples[-1]
    _, _, emitted = flow_progress(b)
    rss_peak = harness.rss_mb(b.weir.pid, "VmHWM")
    secs = poller.per_second(t0)
    full = [n for s, n, _ in secs if s <= a.seconds]
    in_window = at_window_end[1] - acked0
    return {
        "publishers": a.publishers, "seconds": a.seconds, "published": published,
        "publish_failed": sum(r["failed"] for r in reports),
        "publish_errors": [e for r in reports for e in r["errors"]][:5],
        "publish_per_s": round(published / t_pub, 1),
        "processed": last[1] - acked0, "emitted": emitted, "drained": last[2] == 0,
        "flow_per_s": round(in_window / (at_window_end[0] - t0), 1),
        "flow_per_s_median_second": round(statistics.median(full), 1) if full else 0,
        "backlog_at_end_of_publishing": at_window_end[2],
        "rss_mb_peak": round(rss_peak, 2),
        "weir_cpu_us_per_event": round((cpu1 - cpu0) * 1e6 / max(last[1] - acked0, 1), 1),
        "ok": last[2] == 0 and emitted == published and published > 0,
        "picture": charts.write("flow-only-live", charts.timeline_svg(
            f"weir flow hop, {a.publishers} live publishers: inputs done/s (backlog dashed)",
            {"flow inputs acked/s": [(s, n) for s, n, _ in secs]},
            {"backlog (msgs)": [(s, pend) for s, _, pend in secs]}, right_label="backlog, messages")),
    }


if __name__ == "__main__":
    sys.exit(main())
