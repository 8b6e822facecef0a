"""Per-thread CPU use of a running process: every INTERVAL seconds until it exits, one line of its
busiest threads (name: % of one core), from /proc/PID/task/*/stat, and each GPU's utilization
(nvidia-smi's: the share of its last sample period in which a kernel ran), SM clock (MHz) and
power (W). A thread at 100 % may be spinning in a wait for the GPU; the GPU column tells which
of the two bounds the run, and a busy GPU below its top clock may be held by its power limit.

    python3 threads.py PID INTERVAL
"""
import os, subprocess, sys, time
pid, interval = int(sys.argv[1]), float(sys.argv[2])
tick = os.sysconf('SC_CLK_TCK')
def snap():
    out = {}
    try:
        for t in os.listdir(f'/proc/{pid}/task'):
            try:
                s = open(f'/proc/{pid}/task/{t}/stat').read()
                comm = s[s.index('(')+1:s.rindex(')')]
                f = s[s.rindex(')')+2:].split()
                out[t] = (comm, int(f[11]) + int(f[12]))
            except OSError:
                pass
    except OSError:
        return None
    return out
def gpus():
    try:
        out = subprocess.run(['nvidia-smi', '--query-gpu=utilization.gpu,clocks.sm,power.draw',
                              '--format=csv,noheader,nounits'],
                             capture_output=True, text=True, timeout=5).stdout.splitlines()
        gpu = [line.replace(' ', '').split(',') for line in out]
        return ('gpu% ' + ','.join(g[0] for g in gpu) + '  MHz ' + ','.join(g[1] for g in gpu)
                + '  W ' + ','.join(g[2].split('.')[0] for g in gpu))
    except (OSError, subprocess.SubprocessError, IndexError):
        return ''
prev, t0 = snap(), time.time()
while prev is not None:
    time.sleep(interval)
    cur = snap()
    if cur is None: break
    rows = sorted(((cur[t][1] - prev.get(t, (0, 0))[1]) / tick / interval * 100, cur[t][0]) for t in cur)[::-1][:5]
    print(f"{time.time()-t0:5.0f}s " + "  ".join(f"{n}:{p:.0f}%" for p, n in rows if p >= 3) + "  " + gpus(), flush=True)
    prev = cur
