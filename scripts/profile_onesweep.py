"""CUB's one-sweep sort (onesweep.py) against partition.cu's stable passes, on one GPU: keys and
one carried column, rows and bits as SMJ and SGB sort them, beside the copy of the same bytes
(each pass reads and writes every byte once), CUDA events, median of 5.  Checks each result
against the other route's.  Usage: python3 scripts/profile_onesweep.py [LOG2N ...]"""

import sys

import cupy as cp
import numpy as np

from gpujoin.cuda import onesweep, primitives as prim
from gpujoin.cuda.runtime import event_time


def both(keys, cols, lo, bits):
    out = {}
    for flag in (True, False):
        prim.ONESWEEP = flag
        out[flag] = event_time(lambda: prim.radix_sort(keys, cols, lo, bits), 5)
    prim.ONESWEEP = True
    a = prim.radix_sort(keys, cols, lo, bits)
    prim.ONESWEEP = False
    b = prim.radix_sort(keys, cols, lo, bits)
    prim.ONESWEEP = True
    same = bool((a[0] == b[0]).all()) and all(bool((x == y).all()) for x, y in zip(a[1], b[1]))
    return out[True], out[False], same


for log2n in [int(a) for a in sys.argv[1:]] or [27, 28]:
    n = 1 << log2n
    rng = cp.random.default_rng(log2n)
    for kdt, vdt, bits in [(cp.int32, cp.int32, log2n), (cp.int32, cp.int32, 32), (cp.int32, None, log2n),
                           (cp.int64, cp.int64, log2n), (cp.int64, cp.int32, log2n)]:
        if bits == 32:  # the whole int32 range (4 passes either way)
            keys = rng.integers(-(1 << 31), (1 << 31) - 1, n, dtype=cp.int64).astype(kdt)
            lo = int(keys.min())
            bits = (int(keys.max()) - lo).bit_length()
        else:
            keys, lo = rng.integers(0, 1 << bits, n, dtype=cp.int64).astype(kdt), 0
        cols = [] if vdt is None else [cp.arange(n, dtype=vdt)]
        t1, t0, same = both(keys, cols, lo, bits)
        nbytes = keys.nbytes + sum(c.nbytes for c in cols)
        dst = [cp.empty_like(a) for a in [keys] + cols]
        copy = event_time(lambda: [cp.cuda.runtime.memcpyAsync(d.data.ptr, a.data.ptr, a.nbytes, 3, 0)
                                   for d, a in zip(dst, [keys] + cols)], 5)
        passes = -(-bits // 8)
        print(f"2^{log2n} {np.dtype(kdt).name} key, {'no value' if vdt is None else np.dtype(vdt).name + ' value'}, "
              f"{bits} bits ({passes} passes): onesweep {t1 * 1e3:.2f} ms, stable passes {t0 * 1e3:.2f} ms "
              f"({t0 / t1:.2f}x); copy of the bytes {copy * 1e3:.3f} ms, passes x copy {passes * copy * 1e3:.2f} ms "
              f"({2 * nbytes * passes / t1 / 1e9:.0f} GB/s moved); same rows: {same}", flush=True)
        cp.get_default_memory_pool().free_all_blocks()
try:
    import torch  # CUB's sort as PyTorch builds it (int64 indices), for reference

    n = 1 << 27
    x = torch.randint(0, 1 << 27, (n,), dtype=torch.int32, device="cuda")
    print("torch.sort stable 2^27 int32 (int64 indices)",
          round(event_time(lambda: torch.sort(x, stable=True), 5) * 1e3, 2), "ms")
except ImportError:
    pass
print("onesweep tile (int, unsigned int, unsigned int):", onesweep._tile(("int", "unsigned int", "unsigned int"), 0))
