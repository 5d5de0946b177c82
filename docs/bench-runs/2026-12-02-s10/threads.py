# Per-thread CPU and context switches of the running `weir run` process, per event:
#   threads.py RATE SECONDS  (started beside a paced run at RATE; waits for weir, skips 4 s,
#   then reads /proc/<pid>/task/*/stat and status SECONDS apart). One line per thread name.
import os,sys,time,subprocess,collections
def find():
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                c=open(f'/proc/{p}/cmdline','rb').read().split(b'\0')
                if c and c[0].endswith(b'/weir') and b'run' in c: return int(p)
            except Exception: pass
def snap(pid):
    r=collections.defaultdict(lambda:[0,0,0,0])
    for t in os.listdir(f'/proc/{pid}/task'):
        try:
            st=open(f'/proc/{pid}/task/{t}/stat').read()
            name=open(f'/proc/{pid}/task/{t}/comm').read().strip()
            f=st.rsplit(')',1)[1].split()
            ut,stt=int(f[11]),int(f[12])
            s=open(f'/proc/{pid}/task/{t}/status').read()
            v=int(s.split('voluntary_ctxt_switches:')[1].split()[0]); iv=int(s.split('nonvoluntary_ctxt_switches:')[1].split()[0])
            x=r[name]; x[0]+=ut; x[1]+=stt; x[2]+=v; x[3]+=iv
        except Exception: pass
    return r
rate=float(sys.argv[1]); dur=float(sys.argv[2])
pid=None
while not pid: time.sleep(0.2); pid=find()
time.sleep(4)
a=snap(pid); time.sleep(dur); b=snap(pid)
ev=rate*dur; hz=os.sysconf('SC_CLK_TCK')
tot=0
for k in sorted(b):
    x=[b[k][i]-a.get(k,[0]*4)[i] for i in range(4)]
    cpu=(x[0]+x[1])/hz*1e6/ev; tot+=cpu
    print(f"{k:20s} user {x[0]/hz*1e6/ev:6.1f} sys {x[1]/hz*1e6/ev:6.1f} us/ev  vol {x[2]/ev:5.2f} invol {x[3]/ev:5.2f}")
print('total',round(tot,1))
