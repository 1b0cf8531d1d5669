"""Time one 8-bit radix partition pass of 2^LOG2N (4-byte key, 4-byte value) pairs, and the copy
of the same bytes (its floor), with CUDA events; `once` runs each step once (for ncu)."""

import sys

import cupy as cp

from gpujoin.cuda import primitives as prim
from gpujoin.cuda.runtime import event_time

log2n = int(sys.argv[1]) if len(sys.argv) > 1 else 27
once = "once" in sys.argv
n = 1 << log2n
keys = cp.random.permutation(n).astype(cp.int32)
vals = cp.arange(n, dtype=cp.int32)
kout, vout = cp.empty_like(keys), cp.empty_like(vals)
steps = {
    "copy key+value (floor)": lambda: (kout.__setitem__(slice(None), keys), vout.__setitem__(slice(None), vals)),
    "radix_partition 8 bits key+value": lambda: prim.radix_partition(keys, [vals], prim.Digits(bits=8), bounds=False),
    "radix_partition 8 bits key+2 values": lambda: prim.radix_partition(keys, [vals, vals], prim.Digits(bits=8),
                                                                         bounds=False),
    "radix_partition 16 bits key+value": lambda: prim.radix_partition(keys, [vals], prim.Digits(bits=16),
                                                                       bounds=False),
}
for label, fn in steps.items():
    if once:
        fn()
        cp.cuda.Device().synchronize()
    else:
        print(f"{label:40} {event_time(fn, 5) * 1e3:8.3f} ms", flush=True)
