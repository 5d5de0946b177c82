#!/usr/bin/env bash
# The drop-in monitoring of docs/monitoring/ checked: `promtool check rules` and `promtool
# test rules` (each alert fires on the series that should raise it, and only then), the
# Grafana dashboard parses as JSON, and every weir_* metric the dashboard and the rules
# name is one a running weir exports: weir (this build) is started with the embedded
# nats-server and a flow with an HTTP sink, and its GET /metrics scraped.
#   tests/monitoring/check_monitoring.sh BUILD_DIR SOURCE_DIR     # CTest `monitoring`
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
mon="$src/docs/monitoring"

for tool in promtool python3 nats-server; do
  command -v "$tool" >/dev/null || { echo "monitoring: $tool not found (scripts/setup.sh installs it)"; exit 1; }
done
[ -x "$build/weir" ] || { echo "monitoring: $build/weir not built"; exit 1; }

promtool check rules "$mon/weir-alerts.yml"
(cd "$mon" && promtool test rules weir-alerts.test.yml)

python3 - "$build/weir" "$mon" <<'PY'
import json, os, re, shutil, signal, subprocess, sys, tempfile, time, urllib.request

weir, mon = sys.argv[1:]
dashboard = json.load(open(os.path.join(mon, "weir-dashboard.json")))  # raises on bad JSON

def exprs(node):
    """Every PromQL string of the dashboard: targets' expr and the variables' queries."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "definition") and isinstance(v, str):
                yield v
            elif k == "query" and isinstance(v, str) and node.get("type") == "query":
                yield v
            else:
                yield from exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from exprs(v)

name_re = re.compile(r"\bweir_[a-z0-9_]+")
used = {}
for e in exprs(dashboard):
    for n in name_re.findall(e):
        used.setdefault(n, set()).add("weir-dashboard.json")
rules_text = open(os.path.join(mon, "weir-alerts.yml")).read()
for line in rules_text.splitlines():  # the expressions: every line but comments and annotations
    code = line.split("#")[0]
    if code.strip().startswith(("summary:", "description:")):
        continue
    for n in name_re.findall(code):
        used.setdefault(n, set()).add("weir-alerts.yml")
if len(used) < 10:
    sys.exit(f"monitoring: only {len(used)} metric names found in the dashboard and rules: {sorted(used)}")

work = tempfile.mkdtemp(prefix="weir-monitoring.")
proc = None
try:
    os.makedirs(os.path.join(work, "flows"))
    with open(os.path.join(work, "flows", "orders.yaml"), "w") as f:
        f.write("flow: orders\nfrom: { http: { path: /in/orders } }\n"
                "to:\n  out: { http: { url: \"http://127.0.0.1:9/out\", timeout: 1s } }\n")
    log = open(os.path.join(work, "weir.log"), "w")
    proc = subprocess.Popen([weir, "run", "--flows", work + "/flows", "--data-dir", work + "/data",
                             "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0"],
                            stdout=log, stderr=subprocess.STDOUT)
    admin, deadline, text = None, time.time() + 60, ""
    while time.time() < deadline and proc.poll() is None:
        text = open(os.path.join(work, "weir.log")).read()
        m = re.search(r"admin=(127\.0\.0\.1:\d+)", text)
        if m and "weir ready" in text:
            admin = m.group(1)
            break
        time.sleep(0.05)
    if admin is None:
        sys.exit("monitoring: weir did not become ready:\n" + text[-3000:])
    # The backlog gauges are set at the backlog's first refresh (every 200 ms).
    deadline = time.time() + 10
    while True:
        metrics = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
        if re.search(r'^weir_flow_backlog_max_events\{flow="orders",stage="ingress"\} [1-9]', metrics, re.M) or time.time() > deadline:
            break
        time.sleep(0.05)
finally:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    shutil.rmtree(work, ignore_errors=True)

exported = set()
for m in re.finditer(r"^# TYPE (\S+) (\S+)$", metrics, re.M):
    exported.add(m.group(1))
    if m.group(2) == "histogram":
        exported.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
missing = {n: sorted(w) for n, w in used.items() if n not in exported}
if missing:
    sys.exit(f"monitoring: named but not exported by weir: {missing}")
checks = {"weir_nats_connected 1": r"^weir_nats_connected 1$",
          "weir_flow_backlog_max_events 100000": r'^weir_flow_backlog_max_events\{flow="orders",stage="ingress"\} 100000$',
          "weir_sink_state of sink:out": r'^weir_sink_state\{flow="orders",stage="sink:out"\} 0$'}
for what, pattern in checks.items():
    if not re.search(pattern, metrics, re.M):
        sys.exit(f"monitoring: the scrape lacks {what}:\n{metrics}")
print(f"monitoring: {len(used)} metric names in the dashboard and rules, all exported by weir "
      f"({len(exported)} names in its /metrics)")
PY
