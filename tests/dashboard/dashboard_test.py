#!/usr/bin/env python3
"""The dashboard in a real browser (docs/dashboard.md).

Starts nats-server, weir-sinks and weir (admin token on) on free loopback ports,
posts a small bounded load, and drives headless Chromium through Selenium:
- the page asks for the token; a wrong one is refused, the right one opens the page;
- the numbers move while the load runs, and once it stops the totals the page shows
  equal what GET /metrics says;
- a dead letter is opened in the dead-letter browser and replayed from the page, and
  the receiver gets it;
- the sinks' circuits (docs/adr/0294-sink-circuit-breaker.md): a sink whose receiver is
  down (nothing listens on its port yet) shows open, down since when, and its next probe;
  a healthy one shows closed; Pause on the page makes GET /sinks say paused and the page
  show it, the receiver started meanwhile gets nothing; Resume closes it and the events
  that waited reach the receiver;
- a fan-out's sinks (docs/adr/0299-fan-out.md) are a row each: the one whose receiver is
  up closed with every event delivered, the one whose port nobody listens on open;
- sink health (docs/adr/0313-sink-health-from-recent-results.md): open sinks show down;
  the fan-out's receiver killed, events that fail on it make its row failing or down
  within 5 s;
- hostile content (a flow name at its length limit, dead letters whose reason and event
  carry <img onerror> and <script>) is shown as text: no element made of it, nothing run,
  no alert.
Checks are explicit (check()), not `assert`: they run under python3 -O too.
Screenshots of the views go to --screenshots (docs/img/ when refreshed by hand).

Usage: dashboard_test.py --weir BIN --sink BIN [--screenshots DIR]
Exit 0 when every check passed; every child is stopped by PID at the end.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

TOKEN = "dash-7e41-secret"
# Hostile content, shown as text or not at all: a flow name at its length limit
# (^[a-z][a-z0-9_-]{0,62}$), and dead letters whose reason and event carry HTML that
# would run if the page ever put it in as markup (docs/dashboard.md: textContent only).
HOSTILE_FLOW = ("hostile-" + "x" * 63)[:63]
IMG_REASON = "<img src=x onerror=window.__pwned=1>"   # quoted by the reason: at most 40 characters
SCRIPT_REASON = "<script>window.__pwned=3</script>"
IMG_BODY = '<img src=x onerror="window.__pwned=1">'
SCRIPT_BODY = "<script>window.__pwned=2;alert(2)</script>"
LOAD_PER_S = 50           # events/s posted to the orders flow while the load runs
LOAD_SECONDS = 12
OUTAGE_EVENTS = 6         # retryable failures in a row open a sink at 5 (ADR 0294)


def check(cond, what):
    """An assertion that always runs (Python drops `assert` under -O / PYTHONOPTIMIZE)."""
    if not cond:
        raise AssertionError("check failed: " + what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond, timeout, what, poll=0.1):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except Exception:  # a condition that cannot be read yet is not met yet
            pass
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(poll)


def request(method, url, body=None, token=None, headers=None, timeout=5):
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text, name, labels):
    """The value of the sample `name{...}` whose labels contain every item of `labels`."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        series, value = line.rsplit(" ", 1)
        if all(l in series for l in labels):
            return float(value)
    return None


class Stack:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def spawn(self, argv, log, env=None, stdout=None):
        f = open(os.path.join(self.tmp, log), "wb")
        p = subprocess.Popen(argv, stdout=stdout or f, stderr=f, env=env)
        self.procs.append(p)
        return p

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def log(self, name):
        with open(os.path.join(self.tmp, name), "rb") as f:
            return f.read().decode(errors="replace")[-4000:]


def start_sink(stack, binary, name, extra, listen="127.0.0.1:0"):
    p = stack.spawn([binary, "--listen", listen] + extra, name + ".log", stdout=subprocess.PIPE)
    line = p.stdout.readline().decode()
    return "http://" + json.loads(line)["listen"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--screenshots", default="")
    ap.add_argument("--chart-samples", type=int, default=0,
                    help="for the docs' pictures: keep the load on until the chart shows N seconds")
    args = ap.parse_args()
    load_seconds = max(LOAD_SECONDS, args.chart_samples + 15)

    tmp = tempfile.mkdtemp(prefix="weir-dashboard-")
    stack = Stack(tmp)
    driver = None
    try:
        # ---- the stack ----------------------------------------------------------------
        nats_port = free_port()
        stack.spawn(["nats-server", "-js", "-sd", os.path.join(tmp, "js"), "-a", "127.0.0.1",
                     "-p", str(nats_port)], "nats.log")
        wait_until(lambda: socket.create_connection(("127.0.0.1", nats_port), 0.2).close() is None, 10,
                   "nats-server")
        good_sink = start_sink(stack, args.sink, "sink-good", [])
        flaky_sink = start_sink(stack, args.sink, "sink-flaky", ["--status", "500"])

        # The outage flow's receiver: nothing listens on this port until the test starts a
        # weir-sink there, so every delivery is refused and the sink's circuit opens.
        outage_port = free_port()
        outage_url = "http://127.0.0.1:%d" % outage_port

        flows = os.path.join(tmp, "flows")
        os.makedirs(flows)
        with open(os.path.join(flows, "outage.yaml"), "w") as f:
            f.write("flow: outage\nfrom: { http: { path: /in/outage } }\n"
                    "to:\n  out: { http: { url: \"%s/outage\", timeout: 2s } }\n" % outage_url)
        with open(os.path.join(flows, "orders.yaml"), "w") as f:
            f.write("flow: orders\nfrom: { http: { path: /in/orders } }\n"
                    "steps:\n  - set: { total: number(this.n) * 2 }\n"
                    "to:\n  out: { http: { url: \"%s/orders\", retries: 8, timeout: 2s } }\n" % good_sink)
        with open(os.path.join(flows, "flaky.yaml"), "w") as f:
            f.write("flow: flaky\nfrom: { http: { path: /in/flaky } }\n"
                    "to:\n  out: { http: { url: \"%s/flaky\", retries: 0, timeout: 2s } }\n" % flaky_sink)
        # A fan-out: each event to a receiver (erp) and to a port nobody listens on (audit).
        fan_sink = start_sink(stack, args.sink, "sink-fan", [])
        fan_proc = stack.procs[-1]
        with open(os.path.join(flows, "fanned.yaml"), "w") as f:
            f.write("flow: fanned\nfrom: { http: { path: /in/fanned } }\n"
                    "steps:\n  - branch:\n      - { to: [erp, audit] }\n"
                    "to:\n  erp: { http: { url: \"%s/erp\", timeout: 2s } }\n"
                    "  audit: { http: { url: \"http://127.0.0.1:%d/audit\", timeout: 2s } }\n"
                    % (fan_sink, free_port()))
        # number() of a string that is no number is a flow error: a dead letter whose
        # reason quotes the string.
        with open(os.path.join(flows, "hostile.yaml"), "w") as f:
            f.write("flow: %s\nfrom: { http: { path: /in/hostile } }\n"
                    "steps:\n  - set: { n: number(this.v) }\n"
                    "to:\n  out: { http: { url: \"%s/hostile\", retries: 8, timeout: 2s } }\n"
                    % (HOSTILE_FLOW, good_sink))
        http_port, admin_port = free_port(), free_port()
        with open(os.path.join(tmp, "weir.yaml"), "w") as f:
            f.write("admin: { token_env: DASH_TOKEN }\n")
        env = dict(os.environ, DASH_TOKEN=TOKEN)
        weir = stack.spawn([args.weir, "run", "--config", os.path.join(tmp, "weir.yaml"), "--flows", flows,
                            "--nats", "nats://127.0.0.1:%d" % nats_port, "--data-dir", os.path.join(tmp, "data"),
                            "--http", "127.0.0.1:%d" % http_port, "--admin", "127.0.0.1:%d" % admin_port],
                           "weir.log", env=env)
        admin = "http://127.0.0.1:%d" % admin_port
        ingress = "http://127.0.0.1:%d" % http_port
        wait_until(lambda: request("GET", admin + "/readyz")[0] == 200, 30, "weir ready")

        # ---- a bounded load, in the background ----------------------------------------
        posted = []
        stop_load = threading.Event()

        def load():
            conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
            n = 0
            end = time.monotonic() + load_seconds
            while not stop_load.is_set() and time.monotonic() < end:
                body = json.dumps({"id": "ord-%d" % n, "n": n})
                conn.request("POST", "/in/orders", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                if r.status == 202:
                    posted.append(n)
                n += 1
                time.sleep(1.0 / LOAD_PER_S)
            conn.close()

        loader = threading.Thread(target=load, daemon=True)
        loader.start()

        # The outage flow's events: refused by a receiver that is not there, they open its
        # sink and wait in JetStream.
        outage_ids = ["out-%d" % i for i in range(OUTAGE_EVENTS)]
        for id_ in outage_ids:
            code, _ = request("POST", ingress + "/in/outage", json.dumps({"id": id_}),
                              headers={"Content-Type": "application/json", "Idempotency-Key": id_})
            check(code == 202, "POST /in/outage answered %s" % code)

        fan_ids = ["fan-%d" % i for i in range(OUTAGE_EVENTS)]
        for id_ in fan_ids:
            code, _ = request("POST", ingress + "/in/fanned", json.dumps({"id": id_}),
                              headers={"Content-Type": "application/json", "Idempotency-Key": id_})
            check(code == 202, "POST /in/fanned answered %s" % code)

        # Dead letters: the flaky receiver answers 500 and the sink has no retries.
        for i in range(3):
            code, _ = request("POST", ingress + "/in/flaky", json.dumps({"id": "flaky-%d" % i}),
                              headers={"Content-Type": "application/json", "Idempotency-Key": "flaky-%d" % i})
            check(code == 202, "POST /in/flaky answered %s" % code)
        wait_until(lambda: len(json.loads(request("GET", admin + "/dlq?flow=flaky", token=TOKEN)[1])) == 3, 20,
                   "3 dead letters")
        for id_, v in (("evil-img", IMG_REASON), ("evil-script", SCRIPT_REASON)):
            code, _ = request("POST", ingress + "/in/hostile",
                              json.dumps({"id": id_, "v": v, "note": IMG_BODY + SCRIPT_BODY}),
                              headers={"Content-Type": "application/json", "Idempotency-Key": id_})
            check(code == 202, "POST /in/hostile answered %s" % code)
        wait_until(lambda: len(json.loads(request("GET", admin + "/dlq?flow=" + HOSTILE_FLOW, token=TOKEN)[1])) == 2,
                   20, "2 hostile dead letters")
        hostile = json.loads(request("GET", admin + "/dlq?flow=" + HOSTILE_FLOW, token=TOKEN)[1])
        check(any(IMG_REASON in d["reason"] for d in hostile) and any(SCRIPT_REASON in d["reason"] for d in hostile),
              "the hostile dead letters' reasons quote the markup: %r" % [d["reason"] for d in hostile])

        # ---- the browser ----------------------------------------------------------------
        opts = webdriver.ChromeOptions()
        opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1100", "--user-data-dir=" + os.path.join(tmp, "chrome")]:
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                                  options=opts)
        # The page re-renders its tables every second: an element found a moment ago may be
        # gone (stale). Waits ignore that and look again; reads and clicks go through
        # settled(), which retries a step that met a re-render.
        wait = WebDriverWait(driver, 20, poll_frequency=0.1,
                             ignored_exceptions=[StaleElementReferenceException, ValueError])

        def settled(step):
            result = []

            def attempt(_):
                try:
                    result.append(step())
                    return True
                except StaleElementReferenceException:
                    return False
            wait.until(attempt)
            return result[0]
        shots = args.screenshots
        if shots:
            os.makedirs(shots, exist_ok=True)

        def shot(name):
            if shots:
                driver.save_screenshot(os.path.join(shots, name))

        driver.get(admin + "/")
        # The token prompt; a wrong token is refused, the right one opens the page.
        wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
        shot("dashboard-token.png")
        driver.find_element(By.ID, "token").send_keys("wrong-token")
        driver.find_element(By.ID, "login-button").click()
        wait.until(lambda d: "refused" in d.find_element(By.ID, "login-error").text)
        check(not driver.find_element(By.ID, "main").is_displayed(), "the page opened with a wrong token")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login-button").click()
        wait.until(lambda d: d.find_element(By.ID, "main").is_displayed())
        # Kept for the tab: a reload does not ask again.
        driver.refresh()
        wait.until(lambda d: d.find_element(By.ID, "main").is_displayed())
        check(not driver.find_element(By.ID, "login").is_displayed(), "a reload asked for the token again")

        # The numbers move while the load runs.
        def cell(flow, key, table="flows"):
            return driver.find_element(By.CSS_SELECTOR,
                                       '#%s tr[data-flow="%s"] td[data-k="%s"]' % (table, flow, key)).text

        def moving():
            try:
                return float(cell("orders", "in")) > 0 and float(cell("orders", "out")) > 0
            except ValueError:
                return False
        wait.until(lambda d: moving())
        first = settled(lambda: int(driver.find_element(By.CSS_SELECTOR, '#flows tr[data-flow="orders"]')
                                    .get_attribute("data-delivered")))
        wait.until(lambda d: int(d.find_element(By.CSS_SELECTOR, '#flows tr[data-flow="orders"]').get_attribute(
            "data-delivered")) > first)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#chart polyline")) == 4)
        shot("dashboard-flows.png")
        # The sink table names the flaky sink's last error (from its dead letters).
        wait.until(lambda d: "HTTP 500" in cell("flaky", "last_error", "sinks"))

        # Circuits. The outage sink is open: down since when, and when the next probe goes.
        def sinks_api():
            code, body = request("GET", admin + "/sinks", token=TOKEN)
            check(code == 200, "GET /sinks answered %s: %s" % (code, body[:200]))
            return {(x["flow"], x["sink"]): x for x in json.loads(body)}

        def sink_cell(flow, key):
            return driver.find_element(By.CSS_SELECTOR,
                                       '#sinks tr[data-flow="%s"][data-sink="out"] td[data-k="%s"]' % (flow, key)).text

        wait_until(lambda: sinks_api()[("outage", "out")]["state"] == "open", 20, "the outage sink open")
        wait.until(lambda d: sink_cell("outage", "circuit") == "open" and
                   re.search(r"receiver down since .+ \(\d+ s\), next probe in \d+ s",
                             sink_cell("outage", "circuit_detail")))
        down = sinks_api()[("outage", "out")]
        check(down["since"] is not None and (down["next_probe"] is not None or down["probing"]) and
              down["last_error"], "GET /sinks: the open sink's since, next probe and last error: %r" % down)
        check(settled(lambda: sink_cell("outage", "last_error")) != "", "the open sink's last error shown")
        check(settled(lambda: sink_cell("orders", "circuit")) == "closed", "the healthy sink shown closed")
        check(sinks_api()[("orders", "out")]["state"] == "closed", "GET /sinks: the healthy sink closed")
        # A fan-out's sinks are a row each: erp delivered every event, audit waits for its receiver.
        def fan_cell(sink, key):
            return driver.find_element(By.CSS_SELECTOR, '#sinks tr[data-flow="fanned"][data-sink="%s"] '
                                       'td[data-k="%s"]' % (sink, key)).text
        wait_until(lambda: set(json.loads(request("GET", fan_sink + "/ids")[1])) == set(fan_ids), 20,
                   "the fan-out's erp receiver to have every event")
        wait_until(lambda: sinks_api()[("fanned", "audit")]["state"] == "open", 20, "the fan-out's audit sink open")
        check(sinks_api()[("fanned", "erp")]["state"] == "closed", "GET /sinks: the fan-out's erp sink closed")
        wait.until(lambda d: fan_cell("audit", "circuit") == "open" and fan_cell("erp", "circuit") == "closed")
        settled(lambda: driver.execute_script("arguments[0].scrollIntoView()", driver.find_element(By.ID, "sinks")))
        shot("dashboard-sinks.png")
        driver.execute_script("window.scrollTo(0, 0)")
        # Health (docs/adr/0313-sink-health-from-recent-results.md): an open sink is down; a
        # sink whose receiver is killed is shown not healthy within a few seconds of the
        # events that fail on it.
        wait.until(lambda d: fan_cell("audit", "health") == "down" and sink_cell("outage", "health") == "down")
        check(settled(lambda: fan_cell("erp", "health")) == "healthy", "the fan-out's erp sink shown healthy")
        fan_proc.send_signal(signal.SIGKILL)
        fan_proc.wait(timeout=10)
        killed_at = time.monotonic()
        for id_ in ["after-kill-%d" % i for i in range(3)]:
            code, _ = request("POST", ingress + "/in/fanned", json.dumps({"id": id_}),
                              headers={"Content-Type": "application/json", "Idempotency-Key": id_})
            check(code == 202, "POST /in/fanned answered %s" % code)
        WebDriverWait(driver, 5, poll_frequency=0.1, ignored_exceptions=[StaleElementReferenceException]).until(
            lambda d: fan_cell("erp", "health") in ("failing", "down"))
        td = settled(lambda: driver.find_element(
            By.CSS_SELECTOR, '#sinks tr[data-flow="fanned"][data-sink="erp"] td[data-k="health"]'))
        check(settled(lambda: td.get_attribute("class")) == "bad", "a failing sink's health is shown as bad")
        print("dashboard: killed receiver shown %s after %.1f s" %
              (fan_cell("erp", "health"), time.monotonic() - killed_at))
        # Pause from the page: the API says paused, the row says paused and offers Resume.
        def press(flow, label):
            button = driver.find_element(By.CSS_SELECTOR,
                                         '#sinks tr[data-flow="%s"][data-sink="out"] td[data-k="action"] button' % flow)
            check(button.text == label, "the %s sink's button says %r, not %r" % (flow, button.text, label))
            button.click()
        settled(lambda: press("outage", "Pause"))
        wait_until(lambda: sinks_api()[("outage", "out")]["state"] == "paused", 10, "GET /sinks: outage paused")
        wait.until(lambda d: sink_cell("outage", "circuit") == "paused" and
                   "paused by hand" in sink_cell("outage", "circuit_detail") and
                   "paused outage / out" in d.find_element(By.ID, "sinks-action").text)
        check(settled(lambda: driver.find_element(
            By.CSS_SELECTOR, '#sinks tr[data-flow="outage"] td[data-k="action"] button').text) == "Resume",
            "a paused sink offers Resume")
        # The receiver comes up while the sink is paused: nothing reaches it until Resume.
        outage_sink = start_sink(stack, args.sink, "sink-outage", [], listen="127.0.0.1:%d" % outage_port)
        check(outage_sink == outage_url, "the outage receiver listens on %s, not %s" % (outage_url, outage_sink))
        check(sinks_api()[("outage", "out")]["state"] == "paused", "GET /sinks: still paused")
        check(json.loads(request("GET", outage_sink + "/ids")[1]) == [], "a paused sink delivered")
        settled(lambda: press("outage", "Resume"))
        wait_until(lambda: sinks_api()[("outage", "out")]["state"] == "closed", 10, "GET /sinks: outage closed")
        wait.until(lambda d: sink_cell("outage", "circuit") == "closed")
        wait_until(lambda: set(json.loads(request("GET", outage_sink + "/ids")[1])) == set(outage_ids), 20,
                   "the events that waited delivered after Resume")

        # Dead letters: filter by flow, open one, replay it from the page.
        select = driver.find_element(By.ID, "dlq-flow")
        wait.until(lambda d: any(o.get_attribute("value") == "flaky" for o in
                                 select.find_elements(By.TAG_NAME, "option")))
        settled(lambda: select.find_element(By.CSS_SELECTOR, 'option[value="flaky"]').click())
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#dlq tbody tr")) == 3)
        check(settled(lambda: all(r.find_elements(By.TAG_NAME, "td")[2].text == "flaky"
                                  for r in driver.find_elements(By.CSS_SELECTOR, "#dlq tbody tr"))),
              "the flow filter shows only flaky's dead letters")
        settled(lambda: driver.find_element(By.CSS_SELECTOR, '#dlq tbody tr[data-id="flaky-1"]')
                .find_elements(By.TAG_NAME, "td")[1].click())
        wait.until(lambda d: d.find_element(By.ID, "dlq-detail").is_displayed())
        check(driver.find_element(By.ID, "detail-id").text == "flaky-1", "the detail names flaky-1")
        check("flaky-1" in driver.find_element(By.ID, "detail-event").text, "the detail shows the event")
        check("HTTP 500" in driver.find_element(By.ID, "detail-fields").text, "the detail shows the reason")
        shot("dashboard-dead-letter.png")
        request("POST", flaky_sink + "/control", json.dumps({"status": 200}),
                headers={"Content-Type": "application/json"})
        driver.find_element(By.ID, "detail-replay").click()
        wait.until(lambda d: "replayed 1" in d.find_element(By.ID, "dlq-action").text)
        wait_until(lambda: "flaky-1" in json.loads(request("GET", flaky_sink + "/ids")[1]), 20,
                   "the replayed dead letter delivered")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#dlq tbody tr")) == 2)
        # A selection: the other two, replayed at once.
        driver.find_element(By.ID, "dlq-all").click()
        driver.find_element(By.ID, "dlq-replay-selected").click()
        wait.until(lambda d: "replayed 2" in d.find_element(By.ID, "dlq-action").text)
        wait_until(lambda: {"flaky-0", "flaky-2"} <= set(json.loads(request("GET", flaky_sink + "/ids")[1])), 20,
                   "the replayed selection delivered")

        # Hostile content: the flow name at its length limit, reasons and an event with
        # markup. All of it shows as text; nothing of it runs or becomes an element.
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#flows tr[data-flow="%s"]' % HOSTILE_FLOW)) == 1)
        check(settled(lambda: cell(HOSTILE_FLOW, "name")) == HOSTILE_FLOW, "the long flow name shown whole")
        check(settled(lambda: sink_cell(HOSTILE_FLOW, "flow")) == HOSTILE_FLOW, "the long flow name shown whole "
              "in the sinks")
        wait.until(lambda d: any(o.get_attribute("value") == HOSTILE_FLOW for o in
                                 select.find_elements(By.TAG_NAME, "option")))
        settled(lambda: select.find_element(By.CSS_SELECTOR, 'option[value="%s"]' % HOSTILE_FLOW).click())
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#dlq tbody tr")) == 2)
        reasons = settled(lambda: [r.find_elements(By.TAG_NAME, "td")[7].text
                                   for r in driver.find_elements(By.CSS_SELECTOR, "#dlq tbody tr")])
        check(any(IMG_REASON in r for r in reasons), "the <img> reason shown as text: %r" % reasons)
        check(any(SCRIPT_REASON in r for r in reasons), "the <script> reason shown as text: %r" % reasons)
        settled(lambda: driver.find_element(By.CSS_SELECTOR, '#dlq tbody tr[data-id="evil-img"]')
                .find_elements(By.TAG_NAME, "td")[1].click())
        wait.until(lambda d: d.find_element(By.ID, "detail-id").text == "evil-img")
        event_text = driver.find_element(By.ID, "detail-event").text
        check(IMG_BODY.replace('"', '\\"') in event_text and SCRIPT_BODY in event_text,
              "the event's markup shown as text: %r" % event_text[:500])
        check(IMG_REASON in driver.find_element(By.ID, "detail-fields").text, "the detail's reason shown as text")
        check(driver.find_element(By.ID, "detail-fields").find_elements(By.CSS_SELECTOR, "img, script") == [] and
              driver.find_element(By.ID, "detail-event").find_elements(By.CSS_SELECTOR, "img, script") == [] and
              driver.find_elements(By.CSS_SELECTOR, "#dlq img, #dlq script, #flows img, #flows script, "
                                                    "#sinks img, #sinks script") == [],
              "no element made of the hostile text")
        shot("dashboard-hostile.png")
        # Give an onerror a moment to fire, had an <img src=x> been made (an image error
        # comes asynchronously), then look for its mark.
        driver.execute_async_script("setTimeout(arguments[arguments.length - 1], 500)")
        pwned = driver.execute_script("return typeof window.__pwned")
        check(pwned == "undefined", "hostile markup ran (window.__pwned is %s)" % pwned)
        try:
            text = driver.switch_to.alert.text
            raise AssertionError("check failed: an alert opened: %r" % text)
        except NoAlertPresentException:
            pass

        if args.chart_samples:
            wait_until(lambda: len(driver.find_element(By.CSS_SELECTOR, "#chart polyline.in").get_attribute(
                "points").split()) >= args.chart_samples, args.chart_samples + 30, "the chart to fill")
            driver.execute_script("window.scrollTo(0, 0)")
            shot("dashboard-flows.png")
        # Load over: once delivery settles, the page's totals equal /metrics.
        stop_load.set()
        loader.join()
        wait_until(lambda: len(set(json.loads(request("GET", good_sink + "/ids")[1]))) >= len(posted), 30,
                   "every posted order delivered")

        def totals_match():
            text = request("GET", admin + "/metrics", token=TOKEN)[1]
            want_delivered = metric(text, "weir_events_acked_total", ['flow="orders"', 'stage="sink:out"'])
            want_stored = metric(text, "weir_events_acked_total", ['flow="orders"', 'stage="ingress"'])
            def page():
                row = driver.find_element(By.CSS_SELECTOR, '#flows tr[data-flow="orders"]')
                return int(row.get_attribute("data-delivered")), int(row.get_attribute("data-stored"))
            delivered, stored = settled(page)
            return (want_delivered == len(posted) and want_stored == len(posted) and
                    delivered == want_delivered and stored == want_stored)
        wait_until(totals_match, 15, "the page's totals to equal /metrics")
        # After the load the rates fall to 0.
        wait.until(lambda d: float(cell("orders", "in")) == 0)
        shot("dashboard-idle.png")
        print("dashboard test: %d orders posted and delivered, 3 dead letters replayed from the page, "
              "a sink seen open, paused and resumed from the page with its %d waiting events delivered, "
              "a fan-out's two sinks shown apart" % (len(posted), len(outage_ids)))

        driver.quit()
        driver = None
        weir.send_signal(signal.SIGTERM)
        code = weir.wait(timeout=30)
        check(code == 0, "weir exited %s" % code)
        return 0
    except Exception as e:
        print("dashboard test FAILED: %r" % e, file=sys.stderr)
        traceback.print_exc()
        for name in ("weir.log", "nats.log"):
            try:
                print("---- " + name + "\n" + stack.log(name), file=sys.stderr)
            except OSError:
                pass
        if driver is not None:
            try:
                print("---- page text\n" + driver.find_element(By.TAG_NAME, "body").text[:3000], file=sys.stderr)
            except Exception:
                pass
        return 1
    finally:
        if driver is not None:
            driver.quit()
        stack.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
