"""Would auto's planner time hide behind PHJ-TR's first GPU work?  named PHJ-TR with a host
spin of D us before it starts, and after its build partition is launched, beside plain named
and auto (2^24 rows, 1 and 2 payloads)."""
import random, statistics, sys, time
import cupy as cp
import gpujoin
from gpujoin.bench.workloads import JoinWorkload, make_join
import gpujoin.cuda.join.phj as phj

D = float(sys.argv[1]) if len(sys.argv) > 1 else 90e-6
mode = {"v": None}
orig_rp, orig_phj = phj.radix_partition, phj._phj

def spin():
    t = time.perf_counter() + D
    while time.perf_counter() < t:
        pass

def rp(*a, **k):
    out = orig_rp(*a, **k)
    if mode["v"] == "after" and not mode.get("done"):
        mode["done"] = True
        spin()
    return out

def p(*a, **k):
    if mode["v"] == "before":
        spin()
    return orig_phj(*a, **k)

phj.radix_partition, phj._phj = rp, p
for lg in (24, 25):
  for pay in (1, 2):
    r, s = make_join(JoinWorkload(log2_r=lg, log2_s=lg, payloads=pay), cp)
    calls = {"named": (None, "phj-tr"), "auto": (None, "auto"), "before": ("before", "phj-tr"), "after": ("after", "phj-tr")}
    times = {k: [] for k in calls}
    for k, (m, a) in calls.items():
        mode["v"] = m; mode["done"] = False; gpujoin.join(s, r, "k", algorithm=a)
    for _ in range(3):
      for _ in range(60):
        order = list(calls); random.shuffle(order)
        for k in order:
            m, a = calls[k]; mode["v"] = m; mode["done"] = False
            cp.cuda.Device().synchronize(); t0 = time.perf_counter()
            gpujoin.join(s, r, "k", algorithm=a)
            cp.cuda.Device().synchronize(); times[k].append(time.perf_counter() - t0)
      med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
      print(f"2^{lg} {pay} payload(s), spin {D*1e6:.0f} us: " + "  ".join(f"{k} {v:.0f}" for k, v in med.items()), flush=True)
      times = {k: [] for k in calls}
