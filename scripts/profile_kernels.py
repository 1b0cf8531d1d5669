"""Time each step of the GPU join pipeline at |R| = |S| = 2^27 with CUDA events (device check aid)."""

import sys

import cupy as cp
import numpy as np

from gpujoin.cuda import primitives as prim
from gpujoin.cuda.join.phj import phj
from gpujoin.cuda.groupby.common import estimate_groups
from gpujoin.cuda.kernels import SCATTER_MINB, scatter_name
from gpujoin.cuda.runtime import device_properties, event_time, kernel


def timed(label, fn, reps=5):
    print(f"{label:44} {event_time(fn, reps) * 1e3:8.3f} ms", flush=True)


n = 1 << 27
rng = cp.random.default_rng(0)
keys = rng.permutation(n).astype(cp.int32) if hasattr(rng, "permutation") else cp.random.permutation(n).astype(cp.int32)
vals = rng.integers(0, 1 << 30, n, dtype=cp.int32)
nblocks = (n + prim.PART_TILE - 1) // prim.PART_TILE
counts = cp.empty(256 * nblocks, cp.int32)
hist = kernel("partition.cu", "radix_histogram<i32, 16>")
args = (keys, np.int64(n), np.int32(1), np.int64(0), np.int32(0), np.int32(8), counts, np.int32(nblocks), np.uint64(0))
hgrid = min(nblocks, device_properties(0)["sms"] * 8)
timed("histogram (8 bits)", lambda: hist((hgrid,), (256,), args))
sketch = cp.zeros(4096, cp.uint32)
timed("histogram (8 bits) + HyperLogLog sketch",
      lambda: hist((hgrid,), (256,), args[:-1] + (sketch,), shared_mem=16384))
timed("HyperLogLog alone (estimate_groups)", lambda: estimate_groups(keys))
timed("cumsum int32->int64 of counts", lambda: cp.cumsum(counts, dtype=cp.int64))
offs = cp.cumsum(counts, dtype=cp.int64) - counts
kout, vout = cp.empty_like(keys), cp.empty_like(vals)
vin_p = cp.asarray([vals.data.ptr], dtype=cp.uint64)
vout_p = cp.asarray([vout.data.ptr], dtype=cp.uint64)
sargs = (keys, kout, np.int64(n), np.int32(1), np.int64(0), np.int32(0), np.int32(8), offs, np.int32(nblocks),
         vin_p, vout_p, np.int32(1), np.int32(1))
sargs0 = sargs[:-2] + (np.int32(0), np.int32(1))
sc = kernel("partition.cu", scatter_name("i32", "u32"))  # radix_scatter_unstable: profile_scatter.py
timed("scatter key+1 value (8 bits)", lambda: sc((nblocks,), (256,), sargs))
timed("scatter key only (8 bits)", lambda: sc((nblocks,), (256,), sargs0))
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
