"""What the planner's capped HGB build costs (issue 17 item 3), step by step, at 2^28 rows."""
import statistics
import time

import cupy as cp
from cupyx.profiler import benchmark

from gpujoin.bench.workloads import GroupByWorkload, make_groupby
from gpujoin.cuda.groupby.hgb import HashTable
from gpujoin.plan import stats



def timed(label, fn, reps=7):
    """Wall time (device synchronized) and the device's own time (cupyx.profiler.benchmark)."""
    fn()
    ts = []
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    gpu = benchmark(fn, n_repeat=reps, n_warmup=1).gpu_times[0]
    print(f"{label:50} {statistics.median(ts) * 1e3:8.3f} ms wall {statistics.median(gpu) * 1e3:8.3f} ms GPU", flush=True)

for lg, z in ((16, 0.0), (12, 2.0), (24, 0.0)):
    k = make_groupby(GroupByWorkload(log2_rows=28, log2_groups=lg, zipf=z), cp)["k"]
    tag = f"g=2^{lg} z={z}"
    timed(f"{tag}: sample", lambda: stats.sample(k))
    for cap in (28160, 450560):
        timed(f"{tag}: HashTable.at_most({cap})", lambda: HashTable.at_most(k, cap))
    timed(f"{tag}: cp.full(65536)", lambda: cp.full(65536, -1, cp.int32))
