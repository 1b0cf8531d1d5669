"""Time radix partition passes of 2^LOG2N (key, value) pairs of KEY_BYTES bytes each (4 or 8)
against the copy of the same bytes (their floor), with CUDA events: 8 bits (one pass), 16 bits
(8 + 8) and 17 bits (9 + 8 unstable, 8 + 8 + 1 at GPUJOIN_UNSTABLE_PASS_BITS=8), unstable as
PHJ runs them, and each pass's histogram and scatter alone; `once` runs the 17-bit partition
once (for ncu).  With `stable`, SMJ's stable LSD sort instead: 8 bits (one stable pass), the
27-bit sort (8 + 8 + 8 + 3) of keys 0..2^27 shuffled, each stable pass's histogram and scatter;
`once` then runs the 27-bit sort once.
Usage: python3 scripts/profile_partition.py [LOG2N=27] [KEY_BYTES=4] [stable] [once]"""

import sys

import cupy as cp

from gpujoin.cuda import primitives as prim
from gpujoin.cuda.runtime import event_time

args = [a for a in sys.argv[1:] if a not in ("once", "stable")]
stable = "stable" in sys.argv
log2n = int(args[0]) if args else 27
width = int(args[1]) if len(args) > 1 else 4
once = "once" in sys.argv
n = 1 << log2n
kt, vt = (cp.int32, cp.uint32) if width == 4 else (cp.int64, cp.uint64)
keys = cp.random.permutation(n).astype(kt)
vals = cp.arange(n, dtype=vt)
kout, vout = cp.empty_like(keys), cp.empty_like(vals)


def part(bits):
    return lambda: prim.radix_partition(keys, [vals], prim.Digits(bits=bits), stable=False)


steps = {
    "copy key+value (floor)": lambda: (kout.__setitem__(slice(None), keys), vout.__setitem__(slice(None), vals)),
    "read key (histogram floor)": lambda: keys.sum(),
    "histogram 8 bits": lambda: prim.radix_histogram(keys, [vals], prim.Digits(bits=8), stable=False),
    "histogram 9 bits": lambda: prim.radix_histogram(keys, [vals], prim.Digits(bits=9), stable=False),
    "radix_partition 8 bits": part(8),
    "radix_partition 9 bits": part(9),
    "radix_partition 16 bits": part(16),
    "radix_partition 17 bits": part(17),
}
if stable:
    def sort(bits):
        return lambda: prim.radix_sort(keys, [vals], 0, bits)

    steps = {
        "copy key+value (floor)": steps["copy key+value (floor)"],
        "read key (histogram floor)": steps["read key (histogram floor)"],
        "stable histogram 8 bits": lambda: prim.radix_histogram(keys, [vals], prim.Digits(bits=8, use_hash=False)),
        "stable sort 8 bits (one pass)": sort(8),
        "stable sort 16 bits": sort(16),
        f"stable sort {log2n} bits": sort(log2n),
    }
    part = sort
gb = n * 2 * width * 2 / 1e9  # one pass: the pairs read and written
print(f"2^{log2n} pairs of {width}-byte key and value: a pass reads and writes {gb:.2f} GB", flush=True)
if once:
    part(log2n if stable else 17)()
    cp.cuda.Device().synchronize()
else:
    for label, fn in steps.items():
        t = event_time(fn, 5)
        print(f"{label:32} {t * 1e3:8.3f} ms  ({gb / t / 1e3:.2f} TB/s of a pass's bytes)", flush=True)
