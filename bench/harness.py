#!/usr/bin/env python3
"""weir's end-to-end benchmark harness, behind bench/run.sh and bench/paced.sh.

One run: a throwaway nats-server (own port, own store), weir on bench/flows/bench_orders.yaml,
weir-sink, weir-loadgen; cold start (median of 5), idle and peak RSS, the measured window,
a drain, exact lost/duplicate accounting from ids, and -- in the same run -- the ceilings:
loadgen -> sink directly (HTTP), raw JetStream publish, consume and hop (weir-jsbench), and
the pipeline ceiling 1 / (1/http + 1/publish + 1/hop + 1/consume + 1/http).

Prints one JSON object on stdout, progress on stderr, writes an SVG of delivered rate and
latency over time next to the JSON in bench/out/. Every process it starts is stopped by its
PID; every load is bounded in time.

The run judges itself: "valid" is false, with every reason in "invalid_reasons", when the
load generator saw errors other than backpressure 503s (those are counted in
"rejected_503"), the sink did not get every acknowledged id within --drain, a ceiling could
not be measured, a cold start failed, or nothing was acknowledged. Loss is always the set
difference of acknowledged and delivered ids. A paced run is compared with a paced
reference (the load generator straight into the sink at the same rate), never with the
closed-loop ceilings. Exit 1 when lost > 0 or the run is not valid.
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import charts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(*a):
    print("bench:", *a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_request(port, method, path, body=b"", timeout=5.0, content_type=None):
    """Minimal HTTP/1.0 request on loopback: (status, body). The answer is read to EOF and
    joined once (/requests and /ids answers run to tens of MB)."""
    head = f"{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n"
    if content_type:
        head += f"Content-Type: {content_type}\r\n"
    if body or method in ("POST", "PUT"):
        head += f"Content-Length: {len(body)}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall((head + "\r\n").encode() + body)
        chunks = []
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    status_line, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
    return int(status_line.split(b" ")[1]), rest


def http_get(port, path, timeout=2.0):
    return http_request(port, "GET", path, timeout=timeout)


def http_post(port, path, body=b"", timeout=5.0):
    return http_request(port, "POST", path, body, timeout)


def duration_seconds(text):
    """weir-loadgen's durations ('2s', '500ms', '2m', '1h', '100us', a bare number of seconds)
    -> seconds."""
    m = re.fullmatch(r"([0-9.]+)(us|ms|s|m|h)?", str(text).strip())
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]


def reset_sink(port, warmup):
    """Clears weir-sink's counters for a new load and leaves the load's warm-up out of its
    latency percentiles, as the load generator leaves it out of its own: deliveries whose `t`
    falls before now + `warmup` are counted, not measured (weir-sink's `e2e_from_us`; taken
    before the load generator starts, so at most its start-up time of warm-up events counts)."""
    http_post(port, "/reset")
    cutoff_us = int((time.time() + duration_seconds(warmup)) * 1e6)
    http_post(port, "/control", json.dumps({"e2e_from_us": cutoff_us}).encode())


def wait_for(cond, timeout, poll=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(poll)
    return cond()


class Procs:
    """Processes this run started; stopped by PID, always."""

    def __init__(self):
        self.procs = []

    def start(self, argv, env=None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
        p = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
        self.procs.append(p)
        return p

    def stop(self, p, timeout=10):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_all(self):
        for p in reversed(self.procs):
            self.stop(p)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def machine():
    model = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return model


def nats_env():
    """The environment for a bench's nats-server and the GOMAXPROCS it gets: what weir's
    embedded server gets (ADR 0265) — GOMAXPROCS from the environment if set, else half the
    CPUs this process may run on, at least one. NATS_GOMAXPROCS=N overrides that for the
    bench; NATS_GOMAXPROCS=go leaves it to Go (all CPUs), the setting before ADR 0265."""
    env = dict(os.environ)
    choice = env.pop("NATS_GOMAXPROCS", "")
    if choice == "go":
        env.pop("GOMAXPROCS", None)
        return env, "go"
    if choice:
        env["GOMAXPROCS"] = choice
    elif "GOMAXPROCS" not in env:
        env["GOMAXPROCS"] = str(max(1, len(os.sched_getaffinity(0)) // 2))
    return env, env["GOMAXPROCS"]


def exit_on_sigterm():
    """SIGTERM (a CTest timeout, a kill by PID) unwinds like an exception, so every `finally`
    stops the processes this run started instead of leaving them behind."""
    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)


class Stack:
    """The pieces every bench script starts: a throwaway nats-server (JetStream, its store
    under `tmp`, loopback, a free port and monitoring port) and a weir-sink. Subclasses set
    `build` (a build dir), `tmp` and `procs`."""

    def tool(self, name):
        path = os.path.join(self.build, name)
        if not os.access(path, os.X_OK):
            sys.exit(f"bench: {path} is missing; build first (scripts/setup.sh)")
        return path

    def start_nats(self):
        ports = os.path.join(self.tmp, "nats-ports")
        os.makedirs(ports, exist_ok=True)
        self.nats_mon = free_port()
        env, self.nats_gomaxprocs = nats_env()
        self.nats = self.procs.start(["nats-server", "-js", "-sd", os.path.join(self.tmp, "js"), "-a", "127.0.0.1",
                                      "-p", "-1", "-m", str(self.nats_mon), "--ports_file_dir", ports,
                                      "-l", os.path.join(self.tmp, "nats.log")], env=env)
        pf = os.path.join(ports, f"nats-server_{self.nats.pid}.ports")
        if not wait_for(lambda: os.path.exists(pf) and os.path.getsize(pf) > 0, 10):
            sys.exit("bench: nats-server did not start")
        time.sleep(0.05)  # the ports file is written before it is complete
        self.nats_url = json.load(open(pf))["nats"][0]

    def start_sink(self, record=10):
        out = open(os.path.join(self.tmp, "sink.out"), "w+")
        self.sink = self.procs.start([self.tool("weir-sink"), "--listen", "127.0.0.1:0", "--record", str(record)],
                                     stdout=out)
        if not wait_for(lambda: os.path.getsize(out.name) > 0, 10):
            sys.exit("bench: weir-sink did not start")
        self.sink_port = int(json.loads(open(out.name).readline())["listen"].rsplit(":", 1)[1])


class Bench(Stack):
    def __init__(self, args):
        exit_on_sigterm()
        self.a = args
        self.build = os.path.abspath(args.build)
        self.tmp = tempfile.mkdtemp(prefix="weir-bench-")
        self.procs = Procs()

    def jsz(self):
        """nats-server's monitoring view of every stream and consumer: {stream: {"state": ...,
        "consumers": {name: consumer info}}}."""
        _, body = http_get(self.nats_mon, "/jsz?accounts=true&streams=true&consumers=true", 5)
        out = {}
        for acc in json.loads(body).get("account_details") or []:
            for st in acc.get("stream_detail") or []:
                out[st["name"]] = {"state": st.get("state", {}),
                                   "consumers": {c["name"]: c for c in st.get("consumer_detail") or []}}
        return out

    def sink_stats(self):
        return json.loads(http_get(self.sink_port, "/stats")[1])

    def weir_argv(self, http_port, admin_port, flows_dir):
        argv = [self.tool("weir"), "run", "--flows", flows_dir, "--nats", self.nats_url,
                "--http", f"127.0.0.1:{http_port}", "--admin", f"127.0.0.1:{admin_port}",
                "--data-dir", os.path.join(self.tmp, "weir-data")]
        config = getattr(getattr(self, "a", None), "weir_config", None)
        if config:
            # --weir-config 'backlog: { max_delay: 250ms }': a weir.yaml for this run.
            path = os.path.join(self.tmp, "weir.yaml")
            with open(path, "w") as f:
                f.write(config + "\n")
            argv += ["--config", path]
        return argv

    def weir_env(self):
        env = dict(os.environ)
        env["SINK_URL"] = f"http://127.0.0.1:{self.sink_port}"
        return env

    # An order the bench flow accepts (202) and then drops (no items: total 0), so cold-start
    # probes never reach the sink and never mix with a measured window's ids.
    COLD_PROBE = b'{"id":"cold-probe","t":0,"customer_id":"c1","amount":"0","currency":"EUR","ts":"2026-01-01T00:00:00Z","items":[]}'

    def cold_start_ms(self, flows_dir, runs=5, path="/in/orders"):
        """Spawn -> /healthz 200 and spawn -> first 202 on `path`, with NATS already up;
        median of `runs` starts that find their streams in place. On a NATS that has never
        seen these flows, one more start comes first and is reported alone ("empty_nats":
        it creates the streams and consumers). "failed" counts the starts that never
        answered (they are not in the median; the run is then invalid)."""
        def one():
            hp, ap = free_port(), free_port()
            t0 = time.monotonic()
            p = self.procs.start(self.weir_argv(hp, ap, flows_dir), env=self.weir_env())

            def healthy():
                try:
                    return http_get(ap, "/healthz", 0.5)[0] == 200
                except OSError:
                    return False

            def accepted():
                try:
                    return http_request(hp, "POST", path, self.COLD_PROBE, 0.5, "application/json")[0] == 202
                except OSError:
                    return False

            ok = wait_for(healthy, 10, poll=0.0005)
            t1 = time.monotonic()
            ok202 = ok and wait_for(accepted, 10, poll=0.0005)
            t2 = time.monotonic()
            self.procs.stop(p)
            return ((t1 - t0) * 1000 if ok else None), ((t2 - t0) * 1000 if ok202 else None)

        def summary(times):
            if not times:
                return {"median": None, "runs": [], "failed": runs}
            return {"median": round(statistics.median(times), 2), "min": round(min(times), 2),
                    "max": round(max(times), 2), "runs": [round(t, 2) for t in times], "failed": runs - len(times)}

        empty = None
        try:
            fresh = not any(st.startswith("weir") for st in self.jsz())
        except (OSError, ValueError, AttributeError):
            fresh = False
        if fresh:
            h, f = one()
            empty = {"healthz_ms": None if h is None else round(h, 2), "first_202_ms": None if f is None else round(f, 2)}
        healthz, first = [], []
        for _ in range(runs):
            h, f = one()
            if h is not None:
                healthz.append(h)
            if f is not None:
                first.append(f)
        out = summary(healthz)
        out["first_202"] = summary(first)
        out["empty_nats"] = empty
        return out

    def start_weir(self, flows_dir):
        self.http_port, self.admin_port = free_port(), free_port()
        self.weir_log = open(os.path.join(self.tmp, "weir.log"), "w")
        self.weir = self.procs.start(self.weir_argv(self.http_port, self.admin_port, flows_dir), env=self.weir_env(),
                                     stdout=self.weir_log, stderr=self.weir_log)

        def ready():
            try:
                return http_get(self.admin_port, "/readyz", 0.5)[0] == 200
            except OSError:
                return False

        if not wait_for(ready, 30, poll=0.01):
            sys.exit("bench: weir did not become ready; log: " + open(self.weir_log.name).read()[-2000:])

    def delivery_loops(self):
        """The flow/sink loop layout weir logged at start (ADR 0272): 1 or 2; None when not logged."""
        m = re.search(r"delivery loops loops=(\d)", open(self.weir_log.name).read())
        return int(m.group(1)) if m else None

    def loadgen(self, port, path, seconds, concurrency=None, rate=None, warmup="2s", acked_ids=None):
        argv = [self.tool("weir-loadgen"), "--url", f"http://127.0.0.1:{port}{path}", "--duration", f"{seconds}s",
                "--warmup", warmup, "--quiet"]
        if concurrency:
            argv += ["--concurrency", str(concurrency)]
        if rate:
            argv += ["--rate", str(rate)]
        if acked_ids:
            argv += ["--acked-ids", acked_ids]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
        if out.returncode != 0:
            sys.exit("bench: weir-loadgen failed: " + out.stderr[-2000:])
        return json.loads(out.stdout)

    def jsbench(self, mode, count):
        out = subprocess.run([self.tool("weir-jsbench"), mode, "--nats", self.nats_url, "--count", str(count)],
                             capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            log(f"weir-jsbench {mode} failed: {out.stderr[-500:]}")
            return None
        return json.loads(out.stdout).get("rate")

    def ceilings(self):
        http_post(self.sink_port, "/reset")
        direct = self.loadgen(self.sink_port, "/ceiling", self.a.ceiling_seconds, concurrency=self.a.concurrency,
                              warmup="1s")
        http_post(self.sink_port, "/reset")
        c = {"http_per_s": direct["ingest_per_s"]}
        for mode in ("publish", "consume", "hop"):
            c[f"jetstream_{mode}_per_s"] = self.jsbench(mode, self.a.js_count)
        parts = [c["http_per_s"], c["jetstream_publish_per_s"], c["jetstream_hop_per_s"],
                 c["jetstream_consume_per_s"], c["http_per_s"]]
        if all(parts):
            c["pipeline_per_s"] = round(1.0 / sum(1.0 / x for x in parts), 1)
        c["failed"] = [k for k in ("http_per_s", "jetstream_publish_per_s", "jetstream_consume_per_s",
                                   "jetstream_hop_per_s") if not c.get(k)]
        return c

    def paced_reference(self, rate):
        """The load generator straight into the sink at `rate`: the latency and delivery a
        paced run is judged against (a closed-loop ceiling says nothing about a paced run)."""
        reset_sink(self.sink_port, "1s")
        lg = self.loadgen(self.sink_port, "/reference", self.a.ceiling_seconds, concurrency=max(self.a.concurrency, 64),
                          rate=rate, warmup="1s")
        stats = self.sink_stats()
        http_post(self.sink_port, "/reset")
        return {"rate": rate, "ingest_per_s": lg["ingest_per_s"], "errors": lg.get("errors", {}),
                "e2e_ms": {k: stats["e2e_ms"].get(k) for k in ("p50", "p90", "p99", "max")}}

    def jetstream_pipeline_reference(self, rate):
        """nats-server's CPU per event for a weir event's three JetStream legs at `rate`, made
        by the least traffic a client can make (`weir-jsbench pipeline`: four messages in and
        four out per event, push consumers, no pull requests): what the server costs at this
        rate whoever its client is, the floor under weir's nats-server figure."""
        seconds = max(3.0, float(self.a.ceiling_seconds))
        cpu0 = cpu_seconds(self.nats.pid)
        out = subprocess.run([self.tool("weir-jsbench"), "pipeline", "--nats", self.nats_url, "--rate", str(rate),
                              "--seconds", str(seconds)], capture_output=True, text=True, timeout=seconds + 120)
        cpu1 = cpu_seconds(self.nats.pid)
        try:
            r = json.loads(out.stdout)
        except ValueError:
            r = {"ok": False, "error": out.stderr[-500:]}
        ref = {"rate": rate, "seconds": seconds, "ok": out.returncode == 0 and r.get("ok", False),
               "received": r.get("received")}
        if ref["ok"] and r.get("received"):
            ref["nats_cpu_us_per_event"] = round((cpu1 - cpu0) * 1e6 / r["received"], 1)
        elif r.get("error"):
            ref["error"] = r["error"]
        return ref

    # ---- the run ------------------------------------------------------------------
    def run(self):
        a = self.a
        flows_dir = os.path.join(self.tmp, "flows")
        shutil.copytree(os.path.join(ROOT, "bench", "flows"), flows_dir)
        log(f"tmp {self.tmp}")
        self.start_nats()
        self.start_sink()
        result = {"scenario": "paced" if a.rate else "closed-loop", "machine": machine(), "nproc": os.cpu_count(),
                  "nats_gomaxprocs": self.nats_gomaxprocs, "seconds": a.seconds, "loadavg_before": os.getloadavg()[0]}
        if a.rate:
            result["rate"] = a.rate
        else:
            result["concurrency"] = a.concurrency
        if getattr(a, "weir_config", ""):
            result["weir_config"] = a.weir_config
        invalid = []
        result["cold_start_ms"] = None
        if not a.no_cold_start:
            result["cold_start_ms"] = self.cold_start_ms(flows_dir)
            log(f"cold start {result['cold_start_ms']}")
            if result["cold_start_ms"]["failed"]:
                invalid.append(f"{result['cold_start_ms']['failed']} of 5 cold starts never answered /healthz")
            if result["cold_start_ms"]["first_202"]["failed"]:
                invalid.append(f"{result['cold_start_ms']['first_202']['failed']} of 5 cold starts never answered 202")
        self.start_weir(flows_dir)
        result["delivery_loops"] = self.delivery_loops()
        time.sleep(1.0)
        rss_idle = rss_mb(self.weir.pid)
        weir_bin = self.tool("weir")
        stripped = os.path.join(self.tmp, "weir.stripped")
        subprocess.run(["strip", "-o", stripped, weir_bin], check=False)
        result["binary_mb"] = round(os.path.getsize(stripped) / 1e6, 2) if os.path.exists(stripped) else None

        log(f"load: {a.seconds}s " + (f"at {a.rate}/s" if a.rate else f"closed loop, {a.concurrency} connections"))
        m = self.measure(self.http_port, "/in/orders", a.seconds, concurrency=a.concurrency, rate=a.rate,
                         cpu_pids={"weir": self.weir.pid, "nats": self.nats.pid})
        timeline = m.pop("timeline")
        rss_peak = rss_mb(self.weir.pid, "VmHWM")
        self.procs.stop(self.weir)
        invalid += m.pop("invalid_reasons")
        result.update(m)
        result["rss_mb"] = {"idle": round(rss_idle, 2), "peak": round(rss_peak, 2)}
        if not a.no_ceilings:
            log("ceilings: loadgen -> sink, jetstream publish/consume/hop")
            c = self.ceilings()
            result["ceilings"] = c
            if c["failed"]:
                invalid.append(f"ceiling measurement failed: {', '.join(c['failed'])}")
            r = {}
            if a.rate:
                # Paced: against the offered rate and a paced reference, not a closed-loop ceiling.
                log(f"paced reference: loadgen -> sink at {a.rate}/s")
                ref = self.paced_reference(a.rate)
                result["paced_reference"] = ref
                if ref["errors"]:
                    invalid.append(f"paced reference load errors: {ref['errors']}")
                log(f"jetstream reference: weir-jsbench pipeline at {a.rate}/s")
                js_ref = self.jetstream_pipeline_reference(a.rate)
                result["jetstream_reference"] = js_ref
                if not js_ref["ok"]:
                    invalid.append(f"jetstream pipeline reference failed: {js_ref.get('error', 'events missing')}")
                elif result.get("nats_cpu_us_per_event") and js_ref.get("nats_cpu_us_per_event"):
                    r["nats_cpu_vs_jetstream_pipeline"] = round(
                        result["nats_cpu_us_per_event"] / js_ref["nats_cpu_us_per_event"], 3)
                r["delivered_vs_offered"] = round(result["delivered_per_s"] / a.rate, 3)
                for q in ("p50", "p99"):
                    mine, theirs = result["e2e_ms"].get(q), ref["e2e_ms"].get(q)
                    if mine is not None and theirs:
                        r[f"e2e_{q}_vs_direct"] = round(mine / theirs, 3)
            else:
                if c.get("pipeline_per_s"):
                    r["delivered_vs_pipeline"] = round(result["delivered_per_s"] / c["pipeline_per_s"], 3)
                if c.get("http_per_s"):
                    r["ingest_vs_http"] = round(result["ingest_per_s"] / c["http_per_s"], 3)
            result["ratios"] = r
        if not result["acked"]:
            invalid.append("nothing was acknowledged")
        result["valid"] = not invalid
        result["invalid_reasons"] = invalid
        result["loadavg_after"] = os.getloadavg()[0]
        result["picture"] = self.picture(timeline, result)
        return result

    def measure(self, port, path, seconds, concurrency=None, rate=None, cpu_pids=None, warmup=None, label=""):
        """One load on http://127.0.0.1:<port><path> into the sink: the loadgen's figures, the
        sink's, exact loss from ids, CPU µs per delivered event of each of `cpu_pids`, and the
        sink's per-second timeline (key "timeline")."""
        acked_file = os.path.join(self.tmp, f"acked{label}.ids")
        warmup = warmup or self.a.warmup
        reset_sink(self.sink_port, warmup)
        cpu_pids = cpu_pids or {}
        cpu0 = {k: cpu_seconds(p) for k, p in cpu_pids.items()}
        lg = self.loadgen(port, path, seconds, concurrency=concurrency, rate=rate,
                          warmup=warmup, acked_ids=acked_file)
        load_end = time.monotonic()
        acked = set(l.strip() for l in open(acked_file) if l.strip())

        def delivered_all():
            return self.sink_stats()["unique"] >= len(acked)

        # The count first (cheap), then the ids: the sink may count events that were stored
        # but not acknowledged, so only the id sets decide.
        wait_for(delivered_all, self.a.drain, poll=0.1)
        ids = set(json.loads(http_get(self.sink_port, "/ids", 10)[1]))
        while acked - ids and time.monotonic() < load_end + self.a.drain:
            time.sleep(1.0)
            ids = set(json.loads(http_get(self.sink_port, "/ids", 10)[1]))
        drained = not (acked - ids)
        drain_s = time.monotonic() - load_end
        cpu1 = {k: cpu_seconds(p) for k, p in cpu_pids.items()}
        stats = self.sink_stats()
        timeline = json.loads(http_get(self.sink_port, "/timeline", 10)[1])
        delivered = stats["unique"]
        # Delivered rate: the median of the sink's whole seconds (the first and the last one
        # are partial).
        window = [b["count"] for b in timeline][1:-1] if len(timeline) > 2 else [b["count"] for b in timeline]
        errors = lg.get("errors", {}) or {}
        # 503 is weir's backpressure answer: allowed, counted, not a load error.
        load_errors = {k: v for k, v in errors.items() if k != "503"}
        invalid = []
        if load_errors:
            invalid.append(f"load errors{' ' + label if label else ''}: {load_errors}")
        if not drained:
            invalid.append(f"not drained{' ' + label if label else ''}: {len(acked - ids)} acknowledged ids "
                           f"not delivered {self.a.drain}s after the load")
        m = {
            "sent": lg["total"]["sent"], "acked": lg["total"]["acked"], "delivered": delivered,
            "lost": len(acked - ids), "duplicates": stats["duplicates"], "errors": errors,
            "rejected_503": errors.get("503", 0), "invalid_reasons": invalid,
            "ingest_per_s": lg["ingest_per_s"],
            "delivered_per_s": round(statistics.median(window), 1) if window else 0,
            "drain_s": round(drain_s, 2), "drained": drained,
            "e2e_ms": {k: stats["e2e_ms"].get(k) for k in ("p50", "p90", "p99", "p999", "max")},
            "e2e_warmup_left_out": stats["e2e_ms"].get("warmup"),
            "ingest_ms": {k: lg["ingest_ms"].get(k) for k in ("p50", "p90", "p99", "max")},
            "timeline": timeline,
        }
        for k in cpu_pids:
            m[f"{k}_cpu_us_per_event"] = round((cpu1[k] - cpu0[k]) * 1e6 / max(delivered, 1), 1)
        return m

    def picture(self, timeline, result, prefix="run"):
        series, lat = charts.sink_timeline_series(timeline)
        what = f"{result['scenario']}" + (f" at {result['rate']}/s" if result.get("rate") else "")
        return charts.write(prefix, charts.timeline_svg(f"weir {what}: delivered/s and end-to-end latency",
                                                        series, lat))

    def close(self):
        self.procs.stop_all()
        if getattr(self.a, "keep", False):
            log(f"kept {self.tmp} (weir.log, the flows, the NATS store)")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rate", type=float, default=0)
    p.add_argument("--warmup", default="2s")
    p.add_argument("--drain", type=float, default=60)
    p.add_argument("--ceiling-seconds", type=float, default=5)
    p.add_argument("--js-count", type=int, default=100000)
    p.add_argument("--no-ceilings", action="store_true")
    p.add_argument("--no-cold-start", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the run's temporary folder (weir.log) for a post-mortem")
    p.add_argument("--weir-config", default="", help="weir.yaml text for the run, e.g. 'backlog: { max_delay: 250ms }'")
    a = p.parse_args()
    if a.rate:
        a.concurrency = max(a.concurrency, 64)
    b = Bench(a)
    try:
        result = b.run()
    finally:
        b.close()
    print(json.dumps(result))
    status = 0
    if result["lost"] > 0:
        log(f"LOST {result['lost']} acknowledged events")
        status = 1
    if not result["valid"]:
        log("INVALID RUN: " + "; ".join(result["invalid_reasons"]))
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
