#!/usr/bin/env python3
"""Where weir's idle memory and threads go (docs/bench.md "Lean process").

Starts a throwaway nats-server (external to weir: `--nats`), then weir with either one small
flow (http-in → http sink, `--flows 1`) or N copies of bench/flows/bench_orders.yaml
(`--flows N`, N > 1, as bench/multi_flow.py writes them; `--plain`: N copies of the small flow), waits until it is ready, lets it
settle, and reports as JSON:
  - rss_mb / pss_mb / anon_mb: /proc/PID/smaps_rollup;
  - libraries: resident MB per mapped file (/proc/PID/smaps, summed over its mappings),
    plus "[heap]", "[anon]" and "[stack]";
  - threads: how many of each name (/proc/PID/task/*/comm);
  - binary_mb and stripped_mb of the weir binary;
  - timeline: the start-up steps weir logs at debug level (ms since the first line).
Nothing is sent to weir unless `--deliver` (one event, to see the HTTP client loaded). Figures on a shared machine vary with
what else runs, RSS much less than times.

  bench/lean.py --build build --flows 1
  bench/lean.py --weir /tmp/weir-before --build build --flows 50
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import multi_flow  # noqa: E402

SINGLE_FLOW = """flow: lean
from: { http: { path: /in/lean } }
steps: []
to:
  out: { http: { url: "${SINK_URL:-http://127.0.0.1:9}/lean" } }
"""


def smaps_by_file(pid):
    """Resident KiB per mapped file (anonymous mappings as [anon], [heap], [stack])."""
    out = collections.Counter()
    name = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                name = head[5] if len(head) > 5 else "[anon]"
                if name.startswith("[stack"):
                    name = "[stack]"
            elif head and head[0] == "Rss:":
                out[os.path.basename(name) if name.startswith("/") else name] += int(head[1])
    return out


def mappings_of(pid, lib):
    """Each mapping of the file whose name contains `lib`: its permissions, size, resident and
    private dirty KiB (text is r-x; relocated data and RELRO pages are private dirty)."""
    out, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                cur = None
                if len(head) > 5 and lib in os.path.basename(head[5]):
                    cur = {"perms": head[1], "size_kb": 0, "rss_kb": 0, "private_dirty_kb": 0}
                    out.append(cur)
            elif cur is not None and head and head[0] in ("Size:", "Rss:", "Private_Dirty:"):
                cur[{"Size:": "size_kb", "Rss:": "rss_kb", "Private_Dirty:": "private_dirty_kb"}[head[0]]] = int(head[1])
    return out


def rollup(pid):
    vals = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            head = line.split()
            if len(head) >= 2 and head[0].endswith(":") and head[1].isdigit():
                vals[head[0][:-1]] = int(head[1])
    return vals


def threads(pid):
    names = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names[f.read().strip()] += 1
        except OSError:
            pass
    return dict(sorted(names.items(), key=lambda kv: (-kv[1], kv[0])))


def stripped_mb(path):
    tmp = tempfile.mktemp(prefix="weir-stripped-")
    try:
        subprocess.run(["strip", "-o", tmp, path], check=True)
        return round(os.path.getsize(tmp) / 1e6, 2)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def timeline(log_path):
    """(ms since the first log line, message) for each line of the start-up."""
    out, t0 = [], None
    pat = re.compile(r"^\d{4}-\d\d-\d\dT(\d\d):(\d\d):(\d\d\.\d+)Z (\w+) (.*)$")
    for line in open(log_path, errors="replace"):
        m = pat.match(line.strip())
        if not m:
            continue
        t = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        t0 = t if t0 is None else t0
        out.append([round((t - t0) * 1000, 1), m.group(4), m.group(5)[:160]])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build dir (nats-server from PATH, weir from here)")
    ap.add_argument("--weir", help="weir binary to measure (default: BUILD/weir)")
    ap.add_argument("--flows", type=int, default=1, help="1: http-in → http sink; N > 1: N bench_orders copies")
    ap.add_argument("--plain", action="store_true", help="N copies of the one-sink flow instead of bench_orders")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds idle before sampling")
    ap.add_argument("--top", type=int, default=14, help="libraries listed")
    ap.add_argument("--detail", action="append", default=[], metavar="LIB",
                    help="also list each mapping of LIB (e.g. libcrypto): permissions, resident, private dirty")
    ap.add_argument("--deliver", action="store_true",
                    help="POST one event to the (first) flow before sampling: the figures after the "
                         "first delivery has loaded the HTTP client (its sink refuses: port 9)")
    a = ap.parse_args()

    harness.exit_on_sigterm()
    st = harness.Stack()
    st.build = os.path.abspath(a.build)
    st.tmp = tempfile.mkdtemp(prefix="weir-lean-")
    st.procs = harness.Procs()
    weir = os.path.abspath(a.weir) if a.weir else st.tool("weir")
    try:
        flows_dir = os.path.join(st.tmp, "flows")
        if a.flows == 1 or a.plain:
            os.makedirs(flows_dir)
            for k in range(1, a.flows + 1):
                with open(os.path.join(flows_dir, f"lean_{k}.yaml"), "w") as f:
                    f.write(SINGLE_FLOW.replace("flow: lean", f"flow: lean_{k}").replace("/in/lean", f"/in/lean_{k}"))
        else:
            multi_flow.write_flows(flows_dir, a.flows)
        conf = os.path.join(st.tmp, "weir.yaml")
        with open(conf, "w") as f:
            f.write("log: { level: debug }\n")
        st.start_nats()
        hp, adm = harness.free_port(), harness.free_port()
        log_path = os.path.join(st.tmp, "weir.log")
        with open(log_path, "w") as logf:
            p = st.procs.start([weir, "run", "--config", conf, "--flows", flows_dir, "--nats", st.nats_url,
                                "--http", f"127.0.0.1:{hp}", "--admin", f"127.0.0.1:{adm}",
                                "--data-dir", os.path.join(st.tmp, "weir-data")],
                               env=dict(os.environ, SINK_URL="http://127.0.0.1:9"), stdout=logf, stderr=logf)

        def ready():
            try:
                return harness.http_get(adm, "/readyz", 0.5)[0] == 200
            except OSError:
                return False

        if not harness.wait_for(ready, 60, poll=0.01):
            sys.exit("lean: weir did not become ready; log: " + open(log_path).read()[-2000:])
        if a.deliver:
            path = "/in/lean_1" if (a.plain or a.flows == 1) else "/in/orders_1"
            body = b'{"id":"lean-1","customer_id":"c1","amount":"5","items":[{"sku":"a","qty":"1","price":"5"}]}'
            status, _ = harness.http_request(hp, "POST", path, body, 5, "application/json")
            if status != 202:
                sys.exit(f"lean: POST {path} answered {status}")
        time.sleep(a.settle)
        libs = smaps_by_file(p.pid)
        r = rollup(p.pid)
        report = {
            "weir": weir,
            "flows": a.flows,
            "delivered_one": a.deliver,
            "binary_mb": round(os.path.getsize(weir) / 1e6, 2),
            "stripped_mb": stripped_mb(weir),
            "rss_mb": round(r.get("Rss", 0) / 1024, 2),
            "pss_mb": round(r.get("Pss", 0) / 1024, 2),
            "anon_mb": round(r.get("Anonymous", 0) / 1024, 2),
            "threads_total": sum(threads(p.pid).values()),
            "threads": threads(p.pid),
            "libraries_mb": {k: round(v / 1024, 2) for k, v in libs.most_common(a.top)},
            "timeline": timeline(log_path),
        }
        for lib in a.detail:
            report.setdefault("mappings", {})[lib] = mappings_of(p.pid, lib)
        print(json.dumps(report, indent=1))
    finally:
        st.procs.stop_all()
        shutil.rmtree(st.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
