#!/usr/bin/env python3
"""Per-key order's cost (bench/order-by.sh; ADR 0310).

One run per mode and repeat: a throwaway nats-server, a weir-sink that answers every request
after --delay-ms, weir with one flow (http-in, no steps, one http sink with max_connections 8
and, in the keyed modes, `order_by: "this.customer"`). The sink is paused through the admin
API, --events events are posted (customer = n mod keys, so each key's events are spread over
the stream as with real traffic), the sink is resumed and the time until the receiver has
every event is the delivery time: delivered rate = events / that time.

Modes: `none` (no order_by: the reference of the same window), `1000 keys`, `4 keys` (fewer
keys than connections: at most 4 in flight). The receiver records every request, so order
is checked too: per key, the events arrive in the order they were posted.

One JSON object on stdout: per mode the median (min-max) delivered rate over the repeats
and its ratio to `none`. Exit 1 when an event was missing or out of order.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import time

import harness
from harness import http_get, http_post, log, wait_for

MODES = [("none", 0), ("1000 keys", 1000), ("4 keys", 4)]


def flow_text(keys):
    order = ', order_by: "this.customer"' if keys else ""
    return ("flow: keyed\nfrom: { http: { path: /in/keyed } }\n"
            "to: { out: { http: { url: \"${SINK_URL}/out\", max_connections: 8" + order + " } } }\n")


def post_all(port, events, keys):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for n in range(events):
            customer = f"c{n % keys}" if keys else f"c{n}"
            body = json.dumps({"id": f"e{n}", "customer": customer, "n": n})
            c.request("POST", "/in/keyed", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            if r.status != 202:
                sys.exit(f"bench: event {n} answered {r.status}")
    finally:
        c.close()


def one(a, keys):
    b = harness.Bench(a)
    try:
        flows = os.path.join(b.tmp, "flows")
        os.makedirs(flows)
        with open(os.path.join(flows, "keyed.yaml"), "w") as f:
            f.write(flow_text(keys))
        b.start_nats()
        b.start_sink(record=a.events + 10)
        http_post(b.sink_port, "/control", json.dumps({"delay_ms": a.delay_ms}).encode())
        b.start_weir(flows)
        status, body = http_post(b.admin_port, "/sinks/keyed/out/pause")
        if status != 200:
            sys.exit(f"bench: pause answered {status}: {body}")
        post_all(b.http_port, a.events, keys)
        t0 = time.monotonic()
        http_post(b.admin_port, "/sinks/keyed/out/resume")
        if not wait_for(lambda: b.sink_stats().get("unique", 0) >= a.events, a.timeout, poll=0.01):
            sys.exit(f"bench: {b.sink_stats().get('unique', 0)} of {a.events} delivered in {a.timeout}s")
        seconds = time.monotonic() - t0
        records = json.loads(http_get(b.sink_port, f"/requests?limit={a.events + 10}", 10)[1])
        last = {}
        out_of_order = 0
        for r in records:
            e = json.loads(r["body"])
            k = e["customer"]
            if keys and last.get(k, -1) > e["n"]:
                out_of_order += 1
            last[k] = max(last.get(k, -1), e["n"])
        return {"seconds": seconds, "rate": a.events / seconds, "out_of_order": out_of_order}
    finally:
        b.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(harness.ROOT, "build")))
    p.add_argument("--events", type=int, default=10000)
    p.add_argument("--delay-ms", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    runs = {name: [] for name, _ in MODES}
    for r in range(a.repeats):
        for name, keys in MODES:  # interleaved: each repeat measures every mode in one window
            x = one(a, keys)
            log(f"repeat {r + 1}: {name}: {x['rate']:.0f}/s ({x['seconds']:.2f} s), out of order {x['out_of_order']}")
            runs[name].append(x)
    ref = statistics.median(x["rate"] for x in runs["none"])
    result = {"events": a.events, "delay_ms": a.delay_ms, "max_connections": 8, "repeats": a.repeats, "modes": {}}
    bad = 0
    for name, _ in MODES:
        rates = [x["rate"] for x in runs[name]]
        bad += sum(x["out_of_order"] for x in runs[name])
        result["modes"][name] = {"rate_median": round(statistics.median(rates)), "rate_min": round(min(rates)),
                                 "rate_max": round(max(rates)),
                                 "ratio_to_none": round(statistics.median(rates) / ref, 3),
                                 "out_of_order": sum(x["out_of_order"] for x in runs[name])}
    print(json.dumps(result))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
