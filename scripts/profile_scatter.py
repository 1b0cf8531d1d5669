"""Compare the radix scatter's stable and unstable rankings and register budgets on the workloads
that use it: 8-bit passes of 2^LOG2N 4-byte keys with one and two 4-byte values and a 16-bit
partition (all asking for unstable passes), PGB-TR at g = 2^16 and 2^24 (MAX of two int32
columns) and the narrow PHJ-TR (both unstable: MSD); stable=1 forces every pass stable (LSD);
CUDA events, median of 5
(device check aid): python3 scripts/profile_scatter.py [LOG2N=28] [stable,minb ...]."""

import sys

import cupy as cp

from gpujoin.cuda import primitives as prim
from gpujoin.cuda.groupby import AggInput, run
from gpujoin.cuda.join.phj import phj
from gpujoin.cuda.runtime import event_time

log2n = int(sys.argv[1]) if len(sys.argv) > 1 else 28
variants = ([tuple(int(x) for x in a.split(",")) for a in sys.argv[2:]]
            or [(1, 1), (0, 1)])
n = 1 << log2n
rng = cp.random.default_rng(0)
keys = cp.random.permutation(n).astype(cp.int32)
vals = cp.arange(n, dtype=cp.int32)
gkeys = rng.integers(0, 1 << 16, n, dtype=cp.int32)
gkeys24 = rng.integers(0, 1 << 24, n, dtype=cp.int32)
inputs = [AggInput(rng.integers(0, 1 << 30, n, dtype=cp.int32), None, ("max",)) for _ in range(2)]
half = 1 << (log2n - 1)
steps = {
    "8 bits key+value": lambda: prim.radix_partition(keys, [vals], prim.Digits(bits=8), bounds=False,
                                                     stable=False),
    "8 bits key+2 values": lambda: prim.radix_partition(keys, [vals, vals], prim.Digits(bits=8), bounds=False,
                                                        stable=False),
    "16 bits key+value (2^27)": lambda: prim.radix_partition(keys[:half], [vals[:half]], prim.Digits(bits=16),
                                                             bounds=False, stable=False),
    "pgb-tr g=2^16": lambda: run("pgb-tr", gkeys, inputs),
    "pgb-tr g=2^24": lambda: run("pgb-tr", gkeys24, inputs),
    "phj-tr narrow 2^27": lambda: phj(keys[:half], keys[half:], [vals[:half]], [vals[half:]], emit_keys=True),
}
ROUNDS = 3  # the variants take turns, so that a drift of the clocks does not favour one
times = {v: {k: [] for k in steps} for v in variants}
for _ in range(ROUNDS):
    for v in variants:
        prim.FORCE_STABLE = bool(v[0])
        prim.SCATTER_MINB = v[1]
        for k, fn in steps.items():
            times[v][k].append(event_time(fn, 5) * 1e3)
print(f"{'stable, minb':22}" + "".join(f"{k:>26}" for k in steps) + f"   (median of {ROUNDS} rounds of medians of 5)")
for v in variants:
    print(f"{str(v):22}" + "".join(f"{sorted(t)[len(t) // 2]:23.3f} ms" for t in times[v].values()), flush=True)
