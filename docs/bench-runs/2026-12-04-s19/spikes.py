import sys, os, json, shutil, argparse
# Session 19: every delivery of a paced run recorded by weir-sink --record; prints p50/p99 and
# the spells over 5 ms (start, length, peak). Usage: python3 spikes.py RATE SECONDS (BUILD=dir).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../../bench'))
from harness import Bench, ROOT, http_get
rate=float(sys.argv[1]); secs=float(sys.argv[2])
a=argparse.Namespace(build=os.environ.get('BUILD','/work/main/build'), drain=30, warmup='1s', ceiling_seconds=3, weir_config='')
b=Bench(a)
try:
    flows=os.path.join(b.tmp,'flows'); shutil.copytree(os.path.join(ROOT,'bench','flows'),flows)
    b.start_nats(); b.start_sink(record=int(rate*(secs+2))); b.start_weir(flows)
    m=b.measure(b.http_port,'/in/orders',secs,concurrency=64,rate=rate)
    reqs=json.loads(http_get(b.sink_port,f'/requests?limit={int(rate*(secs+2))}',30)[1])
finally:
    b.close()
pts=[]
for r in reqs:
    try: t=json.loads(r['body'])['t']
    except Exception: continue
    pts.append((t, (r['arrival_us']-t)/1000))
pts.sort(); t0=pts[0][0]
print('n',len(pts),'p50',sorted(p[1] for p in pts)[len(pts)//2],'p99',sorted(p[1] for p in pts)[int(len(pts)*.99)])
# spike episodes: send times where latency > 5 ms, grouped
eps=[]; 
for t,l in pts:
    if l>5:
        if eps and t-eps[-1][1] < 50000: eps[-1][1]=t; eps[-1][2]=max(eps[-1][2],l); eps[-1][3]+=1
        else: eps.append([t,t,l,1])
for e in eps: print('at %.3fs len %.1fms max %.1fms n %d'%((e[0]-t0)/1e6,(e[1]-e[0])/1000,e[2],e[3]))
rest=sorted(l for t,l in pts if t-t0>=1e6)
print('excluding first second: n',len(rest),'p50',rest[len(rest)//2],'p99',rest[int(len(rest)*.99)],'p999',rest[int(len(rest)*.999)])
