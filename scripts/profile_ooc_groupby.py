"""One out-of-core group-by partition's in-core aggregation: HGB against PGB-TR, with and
without a GPU memory cap (why the out-of-core group-by's auto takes PGB-TR for many groups)."""
import sys
import time

import cupy as cp

from gpujoin.cuda.groupby import AggInput, run
from gpujoin.outofcore.budget import gpu_memory_cap

n, g = 1 << int(sys.argv[1] if len(sys.argv) > 1 else 23), 1 << int(sys.argv[2] if len(sys.argv) > 2 else 19)
keys = cp.random.randint(0, g, n, dtype=cp.int64).astype(cp.int32)
vals = cp.random.randint(-1000, 1000, n, dtype=cp.int64)
rows = cp.arange(n, dtype=cp.int32)
inputs = [AggInput(rows, None, ("min",)), AggInput(None, None, ("count",)), AggInput(vals, None, ("count", "sum", "min", "max"))]
for cap in (None, 2 << 30):
    for algo in ("hgb", "pgb-tr"):
        with gpu_memory_cap(cap):
            run(algo, keys, inputs, groups_estimate=g)
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            out = run(algo, keys, inputs, groups_estimate=g)
            cp.cuda.Device().synchronize()
            print(f"{algo:7} cap={cap}: {(time.perf_counter() - t0) * 1e3:8.1f} ms, {out.num_groups} groups")
