#!/usr/bin/env python3
"""How soon a running flow sees a change to a live KV table: one weir, a flow
that looks every event up in a KV table, events posted at a steady rate; then `rounds`
times: PUT /tables/tiers/c1 with a new value and measure
  - put_applied_ms: the PUT's own round trip (weir answers once this instance reads the
    change: the time to visible on that instance),
  - first_seen_ms: from sending the PUT to the sink's arrival of the first output that
    carries the new value (includes one trip through the pipeline).
One JSON object on stdout (medians and p99 over the rounds), progress on stderr.

  bench/table-latency.sh [--rounds 20] [--rate 500]
"""
import argparse
import http.client
import json
import os
import statistics
import threading
import time

from harness import Bench, free_port, http_get, log, machine, wait_for

FLOW = """flow: tl
from: { http: { path: /in/tl } }
tables:
  tiers: { kv: tiers, key: customer }
steps:
  - lookup: { table: tiers, key: this.customer, as: row, default: { v: -1 } }
  - map: { id: this.id, v: this.row.v }
to:
  out: { http: { url: "${SINK_URL}/out", max_connections: 4 } }
"""


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.environ.get("BUILD", os.path.join(os.path.dirname(__file__), "..", "build")))
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--rate", type=float, default=500)
    a = p.parse_args()
    a.seconds = 0
    b = Bench(a)
    try:
        b.start_nats()
        b.start_sink(record=5000)
        flows = os.path.join(b.tmp, "flows")
        os.makedirs(flows)
        open(os.path.join(flows, "tl.yaml"), "w").write(FLOW)
        b.start_weir(flows)
        admin = http.client.HTTPConnection("127.0.0.1", b.admin_port, timeout=10)

        def put(v):
            body = json.dumps({"customer": "c1", "v": v})
            admin.request("PUT", "/tables/tiers/c1", body, {"Content-Type": "application/json"})
            r = admin.getresponse()
            r.read()
            if r.status != 200:
                raise SystemExit(f"bench: PUT /tables answered {r.status}")

        put(0)
        stop = threading.Event()
        sent = [0]

        def poster():
            c = http.client.HTTPConnection("127.0.0.1", b.http_port, timeout=10)
            period = 1.0 / a.rate
            nxt = time.monotonic()
            while not stop.is_set():
                n = sent[0]
                c.request("POST", "/in/tl", json.dumps({"id": f"e{n}", "customer": "c1"}),
                          {"Content-Type": "application/json"})
                c.getresponse().read()
                sent[0] += 1
                nxt += period
                time.sleep(max(0.0, nxt - time.monotonic()))

        t = threading.Thread(target=poster, daemon=True)
        t.start()
        wait_for(lambda: sent[0] > a.rate, 10)
        applied, seen = [], []
        for r in range(1, a.rounds + 1):
            t0 = time.time()
            put(r)
            applied.append((time.time() - t0) * 1000)

            def first_arrival():
                _, body = http_get(b.sink_port, "/requests?limit=5000", 5)
                times = [q["arrival_us"] for q in json.loads(body) if json.loads(q["body"]).get("v") == r]
                return min(times) if times else None

            if not wait_for(lambda: first_arrival() is not None, 10, poll=0.05):
                raise SystemExit(f"bench: round {r}: no output with the new value within 10 s")
            seen.append((first_arrival() / 1e6 - t0) * 1000)
            log(f"round {r}: applied {applied[-1]:.1f} ms, first output {seen[-1]:.1f} ms")
            time.sleep(0.2)
        stop.set()
        t.join(5)
        out = {"scenario": "table-latency", "machine": machine(), "rounds": a.rounds, "rate": a.rate,
               "put_applied_ms": {"p50": round(statistics.median(applied), 2), "p99": round(percentile(applied, 0.99), 2),
                                  "max": round(max(applied), 2)},
               "first_seen_ms": {"p50": round(statistics.median(seen), 2), "p99": round(percentile(seen, 0.99), 2),
                                 "max": round(max(seen), 2)},
               "load_average": os.getloadavg()[0]}
        print(json.dumps(out, indent=2))
    finally:
        b.close()


if __name__ == "__main__":
    main()
