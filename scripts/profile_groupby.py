"""Time the GPU group-by kernels on 2^26 rows (MAX of two int32 columns) with CUDA events, and
optionally run each algorithm once for ncu (device check aid)."""

import sys

import cupy as cp

from gpujoin.cuda.groupby import AggInput, run
from gpujoin.cuda.groupby.hgb import HashTable, aggregate
from gpujoin.cuda.runtime import event_time


n = 1 << int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 26
once = len(sys.argv) > 2 and sys.argv[2] == "once"  # each kernel once, for ncu


def timed(label, fn, reps=5):
    if not once:
        print(f"{label:44} {event_time(fn, reps) * 1e3:8.3f} ms", flush=True)
    elif "stage 2 (" in label or "pgb" in label:
        fn()


rng = cp.random.default_rng(0)
vals = [rng.integers(0, 1 << 30, n, dtype=cp.int32) for _ in range(2)]
inputs = [AggInput(v, None, ("max",)) for v in vals]
for lg in (4, 12, 14, 16, 20):
    keys = rng.integers(0, 1 << lg, n, dtype=cp.int32)
    table = HashTable(keys)
    timed(f"g=2^{lg} read keys+values (cupy sum)", lambda: [keys.sum(), vals[0].sum(), vals[1].sum()])
    timed(f"g=2^{lg} hgb stage 1 (HashTable)", lambda: HashTable(keys, estimate=1 << lg))
    timed(f"g=2^{lg} hgb stage 2 (aggregate)", lambda: aggregate(table, keys, inputs))
    timed(f"g=2^{lg} hgb stage 2, one column", lambda: aggregate(table, keys, inputs[:1]))
    for algo in ("hgb", "pgb-tr"):
        timed(f"g=2^{lg} {algo}", lambda: run(algo, keys, inputs))
