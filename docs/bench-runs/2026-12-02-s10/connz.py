# NATS protocol messages per event on each of weir's connections (nats-server /connz before and after a
# paced load): python3 docs/bench-runs/2026-12-02-s10/connz.py [BUILD] [RATE]. Counts, not timings.

import sys, os, json, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'bench'))
import harness
from harness import Bench, http_get, free_port
class A: pass
a = A(); a.build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(harness.ROOT, 'build'); a.weir_config = None
rate = float(sys.argv[2]) if len(sys.argv) > 2 else 500; secs = 6
b = Bench(a)
try:
    b.start_nats(); b.start_sink()
    b.start_weir(os.path.join(harness.ROOT, 'bench', 'flows'))
    def conns():
        _, body = http_get(b.nats_mon, '/connz?limit=100', 5)
        return {c.get('name') or str(c['cid']): c for c in json.loads(body)['connections']}
    def varz():
        return json.loads(http_get(b.nats_mon, '/varz', 5)[1])
    b.loadgen(b.http_port, '/in/orders', 2, rate=rate, warmup='0s')
    time.sleep(1)
    c0, v0 = conns(), varz(); s0 = b.sink_stats()
    r = b.loadgen(b.http_port, '/in/orders', secs, rate=rate, warmup='0s')
    harness.wait_for(lambda: b.sink_stats().get('received', 0) - s0.get('received', 0) >= r.get('acked', 0), 30)
    time.sleep(0.5)
    c1, v1 = conns(), varz(); s1 = b.sink_stats()
    n = s1.get('received', 0) - s0.get('received', 0)
    print('events delivered', n, 'acked', r.get('acked'))
    for k in sorted(c1):
        x, y = c0.get(k, {}), c1[k]
        print(f"{k:28s} in_msgs/ev {(y['in_msgs']-x.get('in_msgs',0))/n:6.2f} out_msgs/ev {(y['out_msgs']-x.get('out_msgs',0))/n:6.2f}  in_bytes/ev {(y['in_bytes']-x.get('in_bytes',0))/n:7.0f} out_bytes/ev {(y['out_bytes']-x.get('out_bytes',0))/n:7.0f}")
    print('server in_msgs/ev', (v1['in_msgs']-v0['in_msgs'])/n, 'out_msgs/ev', (v1['out_msgs']-v0['out_msgs'])/n)
finally:
    b.close()
