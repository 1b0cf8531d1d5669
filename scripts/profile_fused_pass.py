"""The radix shuffle's fused pass against PHJ's plain one on one GPU (device check aid): 2^LOG2N
int64 keys with an int64 payload (paper 001's random workload), a 9-bit unstable pass, its
histogram and its scatter timed apart, into plain device buffers: the plain digit (the unseeded
hash), the fused one (destination rank of 2 and 8 top bits: two hashes a key), and the fused one
read from the histogram's stored digits (``digit_cache``).  CUDA events, median of 5, the
variants taking turns for ROUNDS rounds.

    PYTHONPATH=src python3 scripts/profile_fused_pass.py [LOG2N=27]
"""

import sys

import cupy as cp

from gpujoin.cuda import primitives as prim
from gpujoin.cuda.runtime import event_time

log2n = int(sys.argv[1]) if len(sys.argv) > 1 else 27
n = 1 << log2n
keys = cp.random.default_rng(0).integers(-(1 << 62), 1 << 62, n, dtype=cp.int64)
vals = cp.arange(n, dtype=cp.int64)
ko, vo = cp.empty_like(keys), cp.empty_like(vals)
cache = cp.empty(n, cp.uint16)
variants = {
    "plain": (prim.Digits(bits=9, shift=8), None),
    "fused": (prim.Digits(bits=9, shift=9, use_hash=prim.FUSED_HASH, base=2 | 8 << 32), None),
    "fused, stored digits": (prim.Digits(bits=9, shift=9, use_hash=prim.FUSED_HASH, base=2 | 8 << 32), cache),
}
ROUNDS = 3
times = {v: {"histogram": [], "scatter": []} for v in variants}
for _ in range(ROUNDS):
    for name, (digits, c) in variants.items():
        counts = prim.radix_histogram(keys, [vals], digits, stable=False, digit_cache=c)
        offs = prim.exclusive_scan(counts)
        times[name]["histogram"].append(event_time(
            lambda d=digits, c=c: prim.radix_histogram(keys, [vals], d, stable=False, digit_cache=c), 5) * 1e3)
        times[name]["scatter"].append(event_time(
            lambda d=digits, o=offs, c=c: prim.scatter_placed(keys, [vals], d, o, ko, [vo], digit_cache=c), 5) * 1e3)
print(f"2^{log2n} int64 pairs, a 9-bit unstable pass (median of {ROUNDS} rounds of medians of 5)")
for name, t in times.items():
    print(f"  {name:22} histogram {sorted(t['histogram'])[ROUNDS // 2]:6.3f} ms   "
          f"scatter {sorted(t['scatter'])[ROUNDS // 2]:6.3f} ms", flush=True)
