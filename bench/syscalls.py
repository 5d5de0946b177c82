#!/usr/bin/env python3
"""Per-event system calls and context switches (bench/syscalls.sh).

bench_orders at a paced rate (default 1,000/s) through weir, twice on one stack:
  1. context switches: voluntary + involuntary of every thread of weir and of nats-server
     (/proc/PID/task/*/status) before and after the load, divided by the events delivered;
     also weir's thread count and threads by name;
  2. system calls: `strace -c -f -p` attached to weir for the same load (strace slows the
     process, so the rate is kept low and this pass's latency is not reported), calls per
     delivered event by syscall.
  3. (--per-thread) the same again with `strace -ff` (one log per thread), counted per weir
     thread by name; `epoll_wait(0)` (a zero timeout: Asio polling the reactor between
     handlers, one per posted handler) apart from blocking `epoll_wait`.
  4. (--perf) the same again with `perf stat -e raw_syscalls:sys_enter` counting each weir
     thread: calls per event by thread, at the full --rate (perf counts in the kernel and
     hardly slows the threads; strace's counts shift with the slowdown it causes).
The first pass also gives, per weir thread (by name), the CPU (user and system µs) and
the voluntary and involuntary context switches per delivered event (/proc/PID/task/TID/
stat and status): at a low rate most of a thread's cost is its wake-ups, and comparing two
rates shows how much each wake-up costs (docs/bench.md "Where the time goes").
One JSON object on stdout. BUILD=dir selects the build (default build/).
"""
import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench, ROOT, log, machine, nats_env  # noqa: E402


def ctx_switches(costs):
    """thread_costs() → {"voluntary": n, "involuntary": n} summed over the threads."""
    out = collections.Counter()
    for c in costs.values():
        out["voluntary"] += c["voluntary"]
        out["involuntary"] += c["involuntary"]
    return out


def thread_names(pid):
    """{tid: name} of `pid`'s threads now."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        except FileNotFoundError:
            pass
    return out


def threads(pid):
    """{name: how many threads of `pid` have it}."""
    return dict(collections.Counter(thread_names(pid).values()))


def parse_strace_c(text):
    """strace -c's table → {syscall: calls}."""
    calls = {}
    for line in text.splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
        if m and m.group(2) != "total":
            calls[m.group(2)] = int(m.group(1))
    return calls


def thread_costs(pid):
    """{thread name: Counter(user_s, sys_s, voluntary, involuntary)} summed over the threads
    of `pid` that share a name."""
    tick = os.sysconf("SC_CLK_TCK")
    out = collections.defaultdict(collections.Counter)
    for tid, name in thread_names(pid).items():
        base = f"/proc/{pid}/task/{tid}"
        try:
            # comm may hold spaces or parentheses: the fields start after the last ')'.
            fields = open(f"{base}/stat").read().rsplit(")", 1)[1].split()
            status = open(f"{base}/status").read().splitlines()
        except (FileNotFoundError, ProcessLookupError):
            continue   # a thread that ended meanwhile
        c = out[name]
        c["user_s"] += int(fields[11]) / tick   # utime: field 14 of stat, 12th after ')'
        c["sys_s"] += int(fields[12]) / tick    # stime: field 15
        for line in status:
            if line.startswith("voluntary_ctxt_switches"):
                c["voluntary"] += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                c["involuntary"] += int(line.split()[1])
    return out


def per_thread_costs(before, after, events):
    """thread_costs() before and after a load → {name: per-event figures}, busiest first;
    threads that spent under 1 µs per event left out."""
    out = {}
    for name in after:
        d = collections.Counter(after[name])
        d.subtract(before.get(name, {}))
        user, sys_ = d["user_s"] * 1e6 / events, d["sys_s"] * 1e6 / events
        if user + sys_ < 1:
            continue
        out[name] = {"user_us": round(user, 1), "sys_us": round(sys_, 1),
                     "voluntary": round(d["voluntary"] / events, 2), "involuntary": round(d["involuntary"] / events, 2)}
    return dict(sorted(out.items(), key=lambda kv: -(kv[1]["user_us"] + kv[1]["sys_us"])))


def perf_per_thread(b, a, names):
    """The load at --rate with `perf stat -e raw_syscalls:sys_enter` counting each weir thread
    on its own → (measure, {thread name: calls})."""
    counters = []
    for tid, name in names.items():
        out = os.path.join(b.tmp, f"perf-{tid}.txt")
        counters.append((name, out, subprocess.Popen(
            ["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-t", tid, "-o", out],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    time.sleep(1.0)   # counting before the load starts
    m = b.measure(b.http_port, "/in/orders", a.seconds, concurrency=64, rate=a.rate, warmup=a.warmup, label="perf")
    calls = collections.Counter()
    for name, out, proc in counters:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        # A thread that never ran in the window (weir-signals, say) reads "<not counted>".
        for line in open(out, errors="replace") if os.path.exists(out) else []:
            parts = line.split(",")
            if len(parts) > 2 and "sys_enter" in parts[2] and parts[0].strip().isdigit():
                calls[name] += int(parts[0])
    if not calls.get("weir-io"):
        sys.exit("bench/syscalls.sh: perf stat counted no system call of weir-io under load "
                 "(is the raw_syscalls:sys_enter tracepoint available? try `perf list raw_syscalls`)")
    return m, calls


def per_thread_calls(directory, names):
    """strace -ff logs (prefix `t`) → {thread name: {syscall: calls}}, epoll_wait(0) apart."""
    out = collections.defaultdict(collections.Counter)
    for f in os.listdir(directory):
        tid = f.rsplit(".", 1)[-1]
        name = names.get(tid, "tid-" + tid)
        for line in open(os.path.join(directory, f), errors="replace"):
            m = re.match(r"(\w+)\((.*)", line)
            if not m:
                continue
            call, rest = m.groups()
            if call == "epoll_wait" and re.search(r", 0\) += ", rest):
                call = "epoll_wait(0)"
            out[name][call] += 1
    return out


def traced(b, a, strace_args, label):
    """The load at --strace-rate with `strace <strace_args> -p <weir>` attached; the measure."""
    st = subprocess.Popen(["strace", "-q", *strace_args, "-p", str(b.weir.pid)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)   # attached to every thread before the load starts
    m = b.measure(b.http_port, "/in/orders", a.seconds, concurrency=64, rate=a.strace_rate,
                  warmup=a.warmup, label=label)
    st.send_signal(signal.SIGINT)
    st.wait(timeout=30)
    return m


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--strace-rate", type=float, default=500)
    p.add_argument("--no-strace", action="store_true")
    p.add_argument("--per-thread", action="store_true", help="a third pass: calls per weir thread (strace -ff)")
    p.add_argument("--perf", action="store_true",
                   help="a fourth pass: calls per weir thread at --rate (perf stat raw_syscalls:sys_enter)")
    p.add_argument("--drain", type=float, default=60)
    p.add_argument("--warmup", default="1s")
    p.add_argument("--weir-config", default="")
    a = p.parse_args()
    a.ceiling_seconds = 3
    for tool, wanted, package in (("strace", not a.no_strace or a.per_thread, "strace"),
                                  ("perf", a.perf, "linux-perf")):
        if wanted and shutil.which(tool) is None:
            sys.exit(f"bench/syscalls.sh: {tool} is not installed (apt-get install {package})")
    b = Bench(a)
    result = {"scenario": f"paced {a.rate:g}/s, bench_orders", "machine": machine(),
              "nats_gomaxprocs": nats_env()[1], "seconds": a.seconds,
              "loadavg_before": os.getloadavg()[0]}
    try:
        flows = os.path.join(b.tmp, "flows")
        shutil.copytree(os.path.join(ROOT, "bench", "flows"), flows)
        b.start_nats()
        b.start_sink()
        b.start_weir(flows)
        weir, nats = b.weir.pid, b.nats.pid
        result["threads_idle"] = threads(weir)
        t0, n0 = thread_costs(weir), ctx_switches(thread_costs(nats))
        w0 = ctx_switches(t0)
        m = b.measure(b.http_port, "/in/orders", a.seconds, concurrency=64, rate=a.rate,
                      cpu_pids={"weir": weir, "nats": nats}, warmup=a.warmup, label="ctx")
        t1, n1 = thread_costs(weir), ctx_switches(thread_costs(nats))
        w1 = ctx_switches(t1)
        ev = max(m["delivered"], 1)
        result["delivered"] = m["delivered"]
        result["lost"] = m["lost"]
        result["e2e_ms"] = m["e2e_ms"]
        result["cpu_us_per_event"] = {"weir": m["weir_cpu_us_per_event"], "nats": m["nats_cpu_us_per_event"]}
        result["ctx_switches_per_event"] = {
            "weir": {k: round((w1[k] - w0[k]) / ev, 2) for k in ("voluntary", "involuntary")},
            "nats": {k: round((n1[k] - n0[k]) / ev, 2) for k in ("voluntary", "involuntary")},
        }
        result["per_thread_per_event"] = per_thread_costs(t0, t1, ev)
        result["threads_loaded"] = threads(weir)
        if not a.no_strace:
            out = os.path.join(b.tmp, "strace.txt")
            m2 = traced(b, a, ["-c", "-f", "-o", out], "strace")
            calls = parse_strace_c(open(out).read())
            ev2 = max(m2["delivered"], 1)
            per = {k: round(v / ev2, 2) for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v / ev2 >= 0.05}
            result["strace"] = {"rate": a.strace_rate, "delivered": m2["delivered"], "lost": m2["lost"],
                                "syscalls_per_event": per, "total_per_event": round(sum(calls.values()) / ev2, 2)}
        if a.per_thread:
            d = os.path.join(b.tmp, "strace-ff")
            os.makedirs(d)
            names = thread_names(weir)
            m3 = traced(b, a, ["-ff", "-o", os.path.join(d, "t")], "strace-ff")
            ev3 = max(m3["delivered"], 1)
            by = per_thread_calls(d, names)
            per_thread = {}
            for name, calls in sorted(by.items(), key=lambda kv: -sum(kv[1].values())):
                total = sum(calls.values()) / ev3
                if total < 0.05:
                    continue
                per_thread[name] = {"total": round(total, 2),
                                    **{k: round(v / ev3, 2) for k, v in sorted(calls.items()) if v / ev3 >= 0.05}}
            result["strace_per_thread"] = {"rate": a.strace_rate, "delivered": m3["delivered"], "lost": m3["lost"],
                                           "syscalls_per_event": per_thread}
        if a.perf:
            m4, calls = perf_per_thread(b, a, thread_names(weir))
            ev4 = max(m4["delivered"], 1)
            result["perf_per_thread"] = {
                "rate": a.rate, "delivered": m4["delivered"], "lost": m4["lost"],
                "syscalls_per_event": {k: round(v / ev4, 2) for k, v in calls.most_common() if v / ev4 >= 0.05}}
        result["loadavg_after"] = os.getloadavg()[0]
    finally:
        b.close()
    import json
    print(json.dumps(result))
    lost = (result.get("lost", 0) + result.get("strace", {}).get("lost", 0) +
            result.get("strace_per_thread", {}).get("lost", 0) + result.get("perf_per_thread", {}).get("lost", 0))
    if lost:
        log(f"LOST {lost}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
