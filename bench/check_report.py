#!/usr/bin/env python3
"""Smoke check of the benchmark harness (CTest bench_run_smoke): runs a benchmark command for
a few seconds and checks its report, so the harness never rots. Not a performance gate.

  check_report.py -- bench/run.sh 3 8 --no-cold-start --ceiling-seconds 1 --js-count 2000
  check_report.py FILE.json

Checks: exactly one JSON object on stdout; the report's keys (bench/README.md, "run.sh and
paced.sh") and the nats-server's GOMAXPROCS (`nats_gomaxprocs`, ADR 0265); the run's own verdict
("valid": true, else its "invalid_reasons"); acked > 0; lost == 0; delivered >= acked; the
command's exit status 0. Pictures go to a temporary BENCH_OUT_DIR,
removed afterwards. Exit 0 when every check passes, 1 otherwise (the reasons on stderr).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

KEYS = ["scenario", "machine", "nproc", "seconds", "sent", "acked", "delivered", "lost", "duplicates", "errors",
        "ingest_per_s", "delivered_per_s", "e2e_ms", "ingest_ms", "cold_start_ms", "rss_mb", "binary_mb",
        "ceilings", "ratios"]


def check(report):
    bad = []
    missing = [k for k in KEYS if k not in report]
    if missing:
        bad.append(f"missing keys: {missing}")
    # Not in KEYS, but a figure of nats-server's is only comparable with its setting
    # (ADR 0265).
    if "nats_gomaxprocs" not in report:
        bad.append("nats_gomaxprocs missing")
    # Likewise weir's CPU per event with its flow/sink loop layout (ADR 0272).
    if report.get("delivery_loops") not in (1, 2):
        bad.append("delivery_loops missing (weir's 'delivery loops' start line not found)")
    if "concurrency" not in report and "rate" not in report:
        bad.append("neither concurrency nor rate")
    for k in ("p50", "p90", "p99", "p999", "max"):
        if k not in (report.get("e2e_ms") or {}):
            bad.append(f"e2e_ms.{k} missing")
    for k in ("idle", "peak"):
        if not isinstance((report.get("rss_mb") or {}).get(k), (int, float)):
            bad.append(f"rss_mb.{k} missing")
    if report.get("valid") is not True:
        reasons = report.get("invalid_reasons") or ["the report has no \"valid\" verdict"]
        bad.append("the run is not valid: " + "; ".join(reasons))
    if not report.get("acked", 0) > 0:
        bad.append(f"acked = {report.get('acked')}, nothing went through")
    if report.get("lost") != 0:
        bad.append(f"lost = {report.get('lost')}")
    if report.get("delivered", 0) < report.get("acked", 0):
        bad.append(f"delivered {report.get('delivered')} < acked {report.get('acked')}")
    return bad


def main(argv):
    if argv and argv[0] == "--":
        out_dir = tempfile.mkdtemp(prefix="weir-bench-smoke-")
        try:
            env = dict(os.environ, BENCH_OUT_DIR=out_dir)
            p = subprocess.Popen(argv[1:], stdout=subprocess.PIPE, env=env, text=True)
            try:
                text, _ = p.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                # SIGTERM first: the harness then stops what it started (by PID).
                p.terminate()
                text, _ = p.communicate(timeout=60)
                print("FAIL: the benchmark did not finish within 300 s", file=sys.stderr)
            status = p.returncode
            pictures = os.listdir(out_dir)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
    elif len(argv) == 1:
        text, status, pictures = open(argv[0]).read(), 0, None
    else:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        report = json.loads(text)
    except ValueError as e:
        print(f"FAIL: stdout is not one JSON object ({e}): {text[:500]!r}", file=sys.stderr)
        return 1
    bad = check(report)
    if status != 0:
        bad.append(f"exit status {status}")
    if pictures is not None and not any(p.endswith(".svg") for p in pictures):
        bad.append("no SVG written")
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    if not bad:
        print(f"ok: acked {report['acked']}, delivered {report['delivered']}, lost 0, "
              f"delivered/s {report['delivered_per_s']} (a smoke run, not a figure)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
