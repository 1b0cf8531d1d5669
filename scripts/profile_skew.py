"""Run one GPU join or group-by of a bench workload a few times (for nsys: where the time of a
skewed input goes, kernel by kernel).  Usage:
  profile_skew.py join ALGO FIELD=VALUE ...      (JoinWorkload fields, e.g. log2_r=27 zipf=2)
  profile_skew.py group-by ALGO FIELD=VALUE ...  (GroupByWorkload fields)
"""

import sys
import time

import cupy as cp

import gpujoin
from gpujoin.bench.workloads import GroupByWorkload, JoinWorkload, make_groupby, make_join
from gpujoin.cuda.table import DeviceTable

what, algo, *fields = sys.argv[1:]
kind = JoinWorkload if what == "join" else GroupByWorkload
defaults = kind().describe()
w = kind(**{k: type(defaults[k])(v) for k, v in (f.split("=") for f in fields)})
reps = 3
if what == "join":
    r, s = make_join(w, cp)
    left, right = DeviceTable(s), DeviceTable(r)
    run = lambda: gpujoin.join(left, right, on="k", algorithm=algo, device="cuda")  # noqa: E731
else:
    t = DeviceTable(make_groupby(w, cp))

    def run():
        gb = gpujoin.group_by(t, "k", algorithm=algo, device="cuda")
        out = gb.agg(**{f"max_{c}": (c, "max") for c in t.column_names if c != "k"})
        print("  phases ms:", {k: round(v * 1e3, 3) for k, v in gb.stats.phases.items()}, gb.stats.params)
        return out
for i in range(reps):
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    out = run()
    cp.cuda.Device().synchronize()
    print(f"{what} {algo} {w.describe()} run {i}: {(time.perf_counter() - t0) * 1e3:.2f} ms, {out.num_rows:,} rows",
          flush=True)
    del out
