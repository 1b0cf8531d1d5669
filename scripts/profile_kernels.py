"""Time each step of the GPU join pipeline at |R| = |S| = 2^27 with CUDA events (device check aid)."""

import sys

import cupy as cp

from gpujoin.cuda import primitives as prim
from gpujoin.cuda.join.phj import phj
from gpujoin.cuda.groupby.common import estimate_groups
from gpujoin.cuda.kernels import SCATTER_MINB
from gpujoin.cuda.runtime import event_time


def timed(label, fn, reps=5):
    print(f"{label:44} {event_time(fn, reps) * 1e3:8.3f} ms", flush=True)


n = 1 << 27
rng = cp.random.default_rng(0)
keys = rng.permutation(n).astype(cp.int32) if hasattr(rng, "permutation") else cp.random.permutation(n).astype(cp.int32)
vals = rng.integers(0, 1 << 30, n, dtype=cp.int32)
d8 = prim.Digits(bits=8)
# (through the primitives' launchers: their kernels' argument lists grow with the features)
timed("histogram (8 bits)", lambda: prim.radix_histogram(keys, [vals], d8))
sketch = cp.zeros(4096, cp.uint32)
timed("histogram (8 bits) + HyperLogLog sketch", lambda: prim.radix_histogram(keys, [vals], d8, sketch=sketch))
timed("HyperLogLog alone (estimate_groups)", lambda: estimate_groups(keys))
counts = prim.radix_histogram(keys, [vals], d8)
timed("exclusive scan of the counts", lambda: prim.exclusive_scan(counts))
timed("scan + scatter key+1 value (8 bits)", lambda: prim.radix_partition(keys, [vals], d8, bounds=False,
                                                                         counts=counts))
counts0 = prim.radix_histogram(keys, [], d8)
timed("scan + scatter key only (8 bits)", lambda: prim.radix_partition(keys, [], d8, bounds=False, counts=counts0))
kout, vout = cp.empty_like(keys), cp.empty_like(vals)
timed("copy key+value (floor)", lambda: (kout.__setitem__(slice(None), keys), vout.__setitem__(slice(None), vals)))
d16 = prim.Digits(bits=16)
best = {}
for minb in SCATTER_MINB:
    prim.SCATTER_MINB = minb
    timed(f"radix_partition 16 bits key+value, minb {minb}", lambda: prim.radix_partition(keys, [vals], d16))
    start, end = cp.cuda.Event(), cp.cuda.Event()
    phj(keys, keys, [vals], [vals], emit_keys=True)
    start.record()
    for _ in range(5):
        phj(keys, keys, [vals], [vals], emit_keys=True)
    end.record()
    end.synchronize()
    best[minb] = cp.cuda.get_elapsed_time(start, end) / 5
    print(f"{'phj-tr narrow 2^27 x 2^27, minb ' + str(minb):44} {best[minb]:8.3f} ms")
k2, _, _ = prim.radix_partition(keys, [vals], d16)
timed("partition_offsets 16 bits", lambda: prim.partition_offsets(k2, d16))
choice = min(best, key=best.get)
print(f"fastest scatter register budget: minb {choice}")
if len(sys.argv) > 1:
    open(sys.argv[1], "w").write(str(choice))
