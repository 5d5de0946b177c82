#!/usr/bin/env python3
"""The receiver-outage drill as a benchmark (bench/outage.sh; what it measures: ADR 0294, 0295).

One run: a throwaway nats-server, a weir-sink receiver on a fixed loopback port, weir with one
flow (http-in `/in/outage`, no steps, one http sink `out` to the receiver with nothing but its
url: every sink setting at its default) and weir-loadgen posting at `--rate` (open loop,
unique ids, `--acked-ids`) for before + outage + after seconds. After `--before` seconds the
receiver is killed (SIGKILL by PID: its port refuses connections); `--outage` seconds later a
new weir-sink listens on the same port. Meanwhile GET /sinks and GET /metrics are polled every
half second: the circuit's state over time and the sink stage's failed attempts
(`weir_events_errors_total{stage="sink:out"}`), which while the receiver is away are the
requests weir made to it.

The cut: the first receiver is told to hold its answers (`delay_ms`), its ids are read, then it
is killed. A delivery it counted but never answered is re-sent by weir after recovery and is
counted as a duplicate (delivered to both receivers), never as lost; without the hold, a
delivery answered between the read and the kill would look lost.

Reported (one JSON object on stdout, also written to --out; progress on stderr): the outage,
the rate, events acked (202) and refused by ingress, failed attempts from the cut to the
recovery (until the circuit opened, and while it was open: the probes), the circuit's state
timeline and transitions, time from recovery to the first delivery (the probe that found the
receiver up), to the last delivery of the backlog (events posted before recovery) and to the
last delivery of all; dead letters (GET /dlq), lost (acked ids never delivered, the union of
both receivers' ids), duplicates. Exit 0 when lost = 0 and dead letters = 0, 1 otherwise or
when the drill could not run, 2 on a usage error. Every process it starts is stopped by PID;
the temporary folder is removed (--keep keeps it, with weir.log).
"""
import argparse
import http.client
import json
import math
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

import charts
import harness
from harness import ROOT, http_get, http_post, log, wait_for

FLOW = "outage"
SINK = "out"
STAGE = f"sink:{SINK}"


def fixed_port():
    """A free loopback port below the kernel's ephemeral range, so that while the receiver is
    away no outgoing connection (weir's own to it included) is given its number; the ephemeral
    range's first port is the fallback's bound."""
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(min(20000, low - 1000), low)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    return harness.free_port()


def metric(text, name, flow=FLOW, stage=STAGE):
    """A per-stage series' value from GET /metrics text; None when absent."""
    key = f'{name}{{flow="{flow}",stage="{stage}"}} '
    for line in text.splitlines():
        if line.startswith(key):
            return float(line[len(key):].split()[0])
    return None


def git_commit():
    try:
        sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "") if sha else None
    except (OSError, subprocess.SubprocessError):
        return None


class Drill(harness.Bench):
    def __init__(self, args):
        super().__init__(args)
        self.receiver_port = fixed_port()
        self.poll = []          # [{at (wall s), state, failures, transitions, errors}]
        self.poll_stop = threading.Event()
        self.poll_error = None

    # ---- pieces -------------------------------------------------------------------
    def start_receiver(self, name, record):
        """weir-sink on the drill's fixed port; its stdout names the port it listens on."""
        out = open(os.path.join(self.tmp, f"{name}.out"), "w+")
        err = open(os.path.join(self.tmp, f"{name}.err"), "w+")
        p = self.procs.start([self.tool("weir-sink"), "--listen", f"127.0.0.1:{self.receiver_port}",
                              "--record", str(record), "--reserve", str(record)], stdout=out, stderr=err)
        if not wait_for(lambda: os.path.getsize(out.name) > 0 or p.poll() is not None, 10):
            sys.exit(f"outage: weir-sink ({name}) did not start on port {self.receiver_port}")
        if p.poll() is not None:
            sys.exit(f"outage: weir-sink ({name}) exited {p.returncode} on port {self.receiver_port}: "
                     + open(err.name).read().strip())
        return p

    def receiver_stats(self):
        return json.loads(http_get(self.receiver_port, "/stats", 10)[1])

    def receiver_ids(self):
        return json.loads(http_get(self.receiver_port, "/ids", 30)[1])

    def admin_json(self, path, timeout=5):
        status, body = http_get(self.admin_port, path, timeout)
        if status != 200:
            raise OSError(f"GET {path}: HTTP {status}")
        return json.loads(body)

    def sink_view(self):
        for s in self.admin_json("/sinks"):
            if s.get("flow") == FLOW and s.get("sink") == SINK:
                return s
        return None

    def errors_total(self):
        _, body = http_get(self.admin_port, "/metrics", 5)
        v = metric(body.decode(), "weir_events_errors_total")
        return int(v) if v is not None else None

    def sample(self):
        view = self.sink_view() or {}
        return {"at": time.time(), "state": view.get("state"), "failures": view.get("consecutive_failures"),
                "transitions": view.get("transitions"), "probing": view.get("probing"),
                "errors": self.errors_total()}

    def poller(self):
        """GET /sinks and /metrics every half second until stopped."""
        while not self.poll_stop.is_set():
            try:
                self.poll.append(self.sample())
            except (OSError, ValueError) as e:
                self.poll_error = str(e)
            self.poll_stop.wait(0.5)

    def dead_letters(self):
        """Every dead letter of the flow, following GET /dlq's pages (docs/admin-api.md)."""
        count, after = 0, None
        for _ in range(10000):
            path = f"/dlq?flow={FLOW}&limit=1000" + (f"&after_seq={after}" if after is not None else "")
            c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=30)
            try:
                c.request("GET", path)
                r = c.getresponse()
                body = r.read()
                if r.status != 200:
                    raise OSError(f"GET {path}: HTTP {r.status} {body[:200]!r}")
                page = json.loads(body)
                count += len(page)
                if r.getheader("X-More", "false") != "true" or not page:
                    return count
                after = r.getheader("X-Next-After-Seq") or page[-1].get("seq")
            finally:
                c.close()
        return count

    # ---- the drill -----------------------------------------------------------------
    def run(self):
        a = self.a
        load_s = a.before + a.outage + a.after
        expected = int(math.ceil(a.rate * load_s))
        record = min(expected * 2 + 1000, 500000)
        flows_dir = os.path.join(self.tmp, "flows")
        os.makedirs(flows_dir)
        sink_url = f"http://127.0.0.1:{self.receiver_port}/{SINK}"
        with open(os.path.join(flows_dir, f"{FLOW}.yaml"), "w") as f:
            f.write(f"# bench/outage.py: pass-through into one http sink, every sink setting at its default\n"
                    f"flow: {FLOW}\nfrom:\n  http: {{ path: /in/{FLOW} }}\nsteps: []\n"
                    f"to:\n  {SINK}: {{ http: {{ url: \"{sink_url}\" }} }}\n")
        log(f"tmp {self.tmp}; receiver port {self.receiver_port}")
        result = {"scenario": "receiver-outage", "command": a.command, "machine": harness.machine(),
                  "nproc": os.cpu_count(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "commit": git_commit(), "loadavg_before": os.getloadavg()[0],
                  "outage_s_requested": a.outage, "rate": a.rate, "before_s": a.before, "after_s": a.after,
                  "after_timeout_s": a.after_timeout, "sink": {"url": sink_url, "settings": "defaults"}}
        self.start_nats()
        result["nats_gomaxprocs"] = self.nats_gomaxprocs
        first = self.start_receiver("receiver1", 10)
        self.sink_port = self.receiver_port
        self.start_weir(flows_dir)
        result["delivery_loops"] = self.delivery_loops()
        if self.sink_view() is None:
            sys.exit(f"outage: GET /sinks does not list {FLOW}/{SINK}")

        acked_file = os.path.join(self.tmp, "acked.ids")
        lg_out = open(os.path.join(self.tmp, "loadgen.json"), "w+")
        lg_err = open(os.path.join(self.tmp, "loadgen.err"), "w+")
        argv = [self.tool("weir-loadgen"), "--url", f"http://127.0.0.1:{self.http_port}/in/{FLOW}",
                "--rate", str(a.rate), "--duration", f"{load_s}s", "--warmup", "0s", "--max-requests", str(expected),
                "--concurrency", "64", "--acked-ids", acked_file, "--run-id", "outage", "--quiet"]
        poll_thread = threading.Thread(target=self.poller, daemon=True)
        poll_thread.start()
        log(f"posting {a.rate}/s for {load_s:g}s: {a.before:g}s before, {a.outage:g}s outage, {a.after:g}s after")
        t_load = time.time()
        loadgen = self.procs.start(argv, stdout=lg_out, stderr=lg_err)

        time.sleep(max(0.0, t_load + a.before - time.time()))
        if loadgen.poll() is not None:
            sys.exit(f"outage: weir-loadgen exited {loadgen.returncode} early: " + open(lg_err.name).read()[-1000:])
        before_stats = self.receiver_stats()
        if not before_stats.get("unique"):
            sys.exit(f"outage: nothing was delivered in the {a.before:g}s before the outage; weir.log: "
                     + open(self.weir_log.name).read()[-1500:])
        errors_at_down = self.errors_total()
        # The cut: hold answers, read the ids, kill. Anything counted but unanswered is re-sent later.
        http_post(self.receiver_port, "/control", json.dumps({"delay_ms": 600000}).encode())
        ids1 = self.receiver_ids()
        stats1 = self.receiver_stats()
        timeline1 = json.loads(http_get(self.receiver_port, "/timeline", 10)[1])
        first.kill()
        first.wait()
        t_down = time.time()
        log(f"receiver down at +{t_down - t_load:.1f}s ({len(ids1)} ids delivered before); "
            f"back in {a.outage:g}s")

        while time.time() < t_down + a.outage:
            time.sleep(min(1.0, max(0.0, t_down + a.outage - time.time())))
            if loadgen.poll() is not None and time.time() < t_down + a.outage - 1:
                sys.exit(f"outage: weir-loadgen exited {loadgen.returncode} during the outage: "
                         + open(lg_err.name).read()[-1000:])
        view_at_up = self.sink_view()
        errors_at_up = self.errors_total()
        second = self.start_receiver("receiver2", record)
        t_up = time.time()
        log(f"receiver up again at +{t_up - t_load:.1f}s; circuit {view_at_up.get('state') if view_at_up else None}")

        deadline = t_up + a.after_timeout
        try:
            loadgen.wait(max(1.0, t_load + load_s + 60 - time.time()))
        except subprocess.TimeoutExpired:
            self.procs.stop(loadgen)
            sys.exit("outage: weir-loadgen did not finish 60 s after its duration")
        lg_out.seek(0)
        try:
            lg = json.loads(lg_out.read())
        except ValueError:
            sys.exit("outage: weir-loadgen printed no report: " + open(lg_err.name).read()[-1000:])
        acked = set(l.strip() for l in open(acked_file) if l.strip())
        ids1_set = set(ids1)

        def missing():
            return acked - ids1_set - set(self.receiver_ids())

        log(f"load done: {len(acked)} acked; waiting up to {max(0, deadline - time.time()):.0f}s more for delivery")
        lost = missing()
        while lost and time.time() < deadline:
            time.sleep(1.0)
            lost = missing()
        t_end = time.time()
        time.sleep(1.0)  # a last poll of the circuit after the drain
        self.poll_stop.set()
        poll_thread.join(10)

        stats2 = self.receiver_stats()
        requests2 = json.loads(http_get(self.receiver_port, f"/requests?limit={record}", 60)[1])
        view_end = self.sink_view()
        errors_end = self.errors_total()
        dlq = self.dead_letters()
        rss_peak = harness.rss_mb(self.weir.pid, "VmHWM")
        self.procs.stop(self.weir)
        self.procs.stop(second)

        # First arrival at the second receiver per id, and each id's intended send time `t`.
        first_arrival, sent_us = {}, {}
        for r in requests2:
            if not 200 <= r.get("status", 0) < 300:
                continue
            try:
                body = json.loads(r.get("body") or "")
            except ValueError:
                continue
            i = body.get("id") if isinstance(body, dict) else None
            if i is None:
                continue
            i = str(i)
            if i not in first_arrival:
                first_arrival[i] = r["arrival_us"] / 1e6
                sent_us[i] = body.get("t")
        recorded_all = len(requests2) >= stats2.get("received", 0) + stats2.get("rejected", 0)
        backlog = [i for i, t in sent_us.items() if i in acked and t is not None and t / 1e6 < t_up]
        both = ids1_set & set(first_arrival)

        def diff(x, y):
            return None if x is None or y is None else x - y

        def rel(x, base):
            return None if x is None else round(x - base, 3)

        # The circuit over time, relative to the cut.
        timeline, last = [], None
        for s in self.poll:
            key = (s["state"], s["errors"])
            if key != last:
                timeline.append({"at_s": round(s["at"] - t_down, 2), "state": s["state"],
                                 "failed_attempts": diff(s["errors"], errors_at_down),
                                 "consecutive_failures": s["failures"], "transitions": s["transitions"]})
                last = key
        opened = next((s for s in self.poll if s["at"] >= t_down and s["state"] == "open"), None)
        closed_again = next((s for s in self.poll if s["at"] >= t_up and s["state"] == "closed"), None)
        opened_errors = opened["errors"] if opened else None

        first_after_up = min(first_arrival.values()) if first_arrival else None
        errors = lg.get("errors", {}) or {}
        result.update({
            "outage_s": round(t_up - t_down, 2),
            "ingress": {"sent": lg["total"]["sent"], "acked": len(acked), "refused": sum(errors.values()),
                        "errors": errors, "ingest_ms": {k: lg["ingest_ms"].get(k) for k in ("p50", "p99", "max")}},
            "failed_attempts_while_down": diff(errors_at_up, errors_at_down),
            "failed_attempts_until_open": diff(opened_errors, errors_at_down),
            "failed_attempts_while_open": diff(errors_at_up, opened_errors),
            "open_after_s": rel(opened["at"], t_down) if opened else None,
            "circuit_at_up": {k: view_at_up.get(k) for k in ("state", "consecutive_failures", "transitions",
                                                             "next_probe", "last_error")} if view_at_up else None,
            "next_probe_after_up_s": (round(view_at_up["next_probe"] / 1000 - t_up, 3)
                                      if view_at_up and view_at_up.get("next_probe") else None),
            "first_delivery_after_up_s": rel(first_after_up, t_up),
            "closed_after_up_s": rel(closed_again["at"], t_up) if closed_again else None,
            "backlog_events": len(backlog),
            "backlog_drained_after_up_s": rel(max((first_arrival[i] for i in backlog), default=None), t_up),
            "backlog_drained_after_first_delivery_s":
                rel(max(first_arrival[i] for i in backlog), first_after_up) if backlog else None,
            "all_delivered_after_up_s":
                None if lost else rel(max((first_arrival[i] for i in acked if i in first_arrival), default=None), t_up),
            "longest_wait_s": round(max((first_arrival[i] - sent_us[i] / 1e6 for i in backlog), default=0), 3),
            "drain_exact": recorded_all,
            "delivered": {"receiver1": len(ids1), "receiver2": len(first_arrival),
                          "union": len(ids1_set | set(first_arrival))},
            "dead_letters": dlq,
            "lost": len(lost),
            "lost_ids_first": sorted(lost)[:10],
            "duplicates": {"total": stats1.get("duplicates", 0) + stats2.get("duplicates", 0) + len(both),
                           "within_receiver1": stats1.get("duplicates", 0),
                           "within_receiver2": stats2.get("duplicates", 0),
                           "delivered_to_both": len(both)},
            "receiver2_rejected": stats2.get("rejected", 0),
            "circuit_end": {k: view_end.get(k) for k in ("state", "transitions", "open_seconds")} if view_end else None,
            "failed_attempts_total": diff(errors_end, errors_at_down),
            "circuit_timeline": timeline,
            "poll_error": self.poll_error,
            "weir_rss_peak_mb": round(rss_peak, 2),
            "seconds_waited_for_delivery": round(t_end - t_up, 1),
            "loadavg_after": os.getloadavg()[0],
        })
        if not recorded_all:
            result["drain_note"] = (f"receiver 2 recorded the last {record} deliveries of more: the drain times "
                                    f"are from those")
        result["picture"] = self.picture_outage(timeline1, stats1, first_arrival, t_load, t_down, t_up)
        return result

    def picture_outage(self, timeline1, stats1, first_arrival, t_load, t_down, t_up):
        """Deliveries per second over the run (both receivers) and failed attempts per second."""
        per_s = {}
        base = (stats1.get("first_us") or 0) / 1e6
        for b in timeline1 if base else []:
            s = int(base + b["sec"] - t_load)
            per_s[s] = per_s.get(s, 0) + b["count"]
        for t in first_arrival.values():
            s = int(t - t_load)
            per_s[s] = per_s.get(s, 0) + 1
        attempts, prev = {}, None
        for p in self.poll:
            if p["errors"] is None:
                continue
            if prev is not None:
                s = int(p["at"] - t_load)
                attempts[s] = attempts.get(s, 0) + p["errors"] - prev
            prev = p["errors"]
        series = {"delivered/s": sorted(per_s.items()), "failed attempts/s": sorted(attempts.items())}
        title = (f"receiver down {t_up - t_down:.0f}s at {self.a.rate:g}/s (down at {t_down - t_load:.0f}s): "
                 f"deliveries and failed attempts per second")
        return charts.write("outage", charts.timeline_svg(title, series))


def main():
    p = argparse.ArgumentParser(prog="bench/outage.sh", description=__doc__.split("\n")[0])
    p.add_argument("--outage", type=float, default=600, help="seconds the receiver is away (default 600)")
    p.add_argument("--rate", type=float, default=20, help="events posted per second (default 20)")
    p.add_argument("--before", type=float, default=10, help="seconds of normal delivery before the outage (default 10)")
    p.add_argument("--after", type=float, default=10, help="seconds of posting after the receiver is back (default 10)")
    p.add_argument("--after-timeout", type=float, default=None,
                   help="seconds after the receiver is back within which every acked event must arrive "
                        "(default 180: above the longest probe interval, 60 s plus a fifth, and the drain)")
    p.add_argument("--out", default=None, help="folder for the JSON report (default $BENCH_OUT_DIR or bench/out)")
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (weir.log) for a post-mortem")
    a = p.parse_args()
    if a.after_timeout is None:
        a.after_timeout = 180.0
    for name in ("outage", "rate", "before"):
        if getattr(a, name) <= 0:
            p.error(f"--{name} must be > 0")
    if a.after < 0 or a.after_timeout <= 0:
        p.error("--after must be >= 0 and --after-timeout > 0")
    if a.rate > 5000:
        p.error("--rate above 5000/s is not an outage drill (every delivery is recorded)")
    if a.after_timeout < a.after:
        p.error("--after-timeout must be at least --after")
    a.command = "bench/outage.sh " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    a.weir_config = ""
    out_dir = a.out or os.environ.get("BENCH_OUT_DIR") or os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    os.environ["BENCH_OUT_DIR"] = out_dir  # the SVG goes beside the report (charts.write)
    d = Drill(a)
    try:
        result = d.run()
    finally:
        d.close()
    path = os.path.join(out_dir, time.strftime("outage-%Y%m%d-%H%M%S.json", time.gmtime()))
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    result["report"] = path
    print(json.dumps(result))
    r = result

    def f(v, unit="s"):
        return "-" if v is None else f"{v}{unit}"

    log(f"outage {r['outage_s']}s at {r['rate']:g}/s: acked {r['ingress']['acked']}, refused {r['ingress']['refused']}; "
        f"failed attempts while down {f(r['failed_attempts_while_down'], '')} "
        f"(until open {f(r['failed_attempts_until_open'], '')}, while open {f(r['failed_attempts_while_open'], '')}); "
        f"open after {f(r['open_after_s'])}; after recovery: first delivery {f(r['first_delivery_after_up_s'])}, "
        f"backlog of {r['backlog_events']} delivered {f(r['backlog_drained_after_up_s'])}; "
        f"dead letters {r['dead_letters']}, lost {r['lost']}, duplicates {r['duplicates']['total']}; report {path}")
    status = 0
    if r["lost"]:
        log(f"LOST {r['lost']} acknowledged events, not delivered {r['after_timeout_s']:g}s after recovery "
            f"(first: {', '.join(r['lost_ids_first'])})")
        status = 1
    if r["dead_letters"]:
        log(f"{r['dead_letters']} DEAD LETTERS")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
