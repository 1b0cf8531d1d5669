"""SMJ-TR and -UR at 2^27 a side (paper 003's narrow workload: R a shuffled dense key, S uniform
into it, 4-byte payloads) on one GPU: phases (min of 4), PHJ-TR beside them, the stable radix
sort by key bits against the copy of the same bytes, and the match phase's steps (CUDA events).
With ``--8``: 8-byte keys over 58 bits and one 8-byte payload a side (paper 003's 8-byte
workload, as ``gpujoin bench join --key-bytes 8 --payload-bytes 8`` makes it).
Usage: python3 scripts/profile_smj.py [--8]"""

import sys
import time

import cupy as cp

from gpujoin.cuda.join.smj import smj
from gpujoin.cuda.join.phj import phj
from gpujoin.cuda import primitives as prim
from gpujoin.cuda.runtime import event_time

n = 1 << 27
wide = "--8" in sys.argv
kdt = cp.int64 if wide else cp.int32
rk = cp.random.RandomState(3).permutation(n).astype(kdt)
sk = cp.random.default_rng(3).integers(0, n, n, dtype=kdt)
rp, sp = cp.arange(n, dtype=kdt), cp.arange(n, dtype=kdt)
if wide:  # the full width: 8-byte keys that are not 4-byte keys in disguise
    rk, sk = rk * (1 << 31) + 7, sk * (1 << 31) + 7
bits = 58 if wide else 27
joins = {"smj-tr": lambda: smj(rk, sk, [rp], [sp], method="tr"),
         "smj-ur": lambda: smj(rk, sk, [rp], [sp], method="ur"),
         "phj-tr": lambda: phj(rk, sk, [rp], [sp])}
for name, fn in joins.items():
    best = {}
    for _ in range(4):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        out = fn()
        cp.cuda.Device().synchronize()
        t = time.perf_counter() - t0
        for k, v in list(out.phases.items()) + [("total", t)]:
            best[k] = min(best.get(k, 1e9), v)
        del out
    print(name, {k: round(v * 1e3, 2) for k, v in best.items()}, flush=True)
print(f"radix_sort {bits} bits key+value", round(event_time(lambda: prim.radix_sort(rk, [rp], 0, bits), 5) * 1e3, 2), "ms")
if wide:
    lo = int(min(rk.min(), sk.min()))
    print(f"radix_sort from the smallest key ({(int(max(rk.max(), sk.max())) - lo).bit_length()} bits)",
          round(event_time(lambda: prim.radix_sort(rk, [rp], lo, 58), 5) * 1e3, 2), "ms")
    print("copy key+value", round(event_time(lambda: (rk.copy(), rp.copy()), 5) * 1e3, 2), "ms")
    sys.exit(0)
print("radix_sort 24 bits key+value", round(event_time(lambda: prim.radix_sort(rk, [rp], 0, 24), 5) * 1e3, 2), "ms")
print("radix_sort 16 bits key+value", round(event_time(lambda: prim.radix_sort(rk, [rp], 0, 16), 5) * 1e3, 2), "ms")
print("copy key+value", round(event_time(lambda: (rk.copy(), rp.copy()), 5) * 1e3, 2), "ms")

# the match phase's steps on the sorted sides
from gpujoin.cuda.join import smj as smj_mod  # noqa: E402

sbk, (sbp,) = prim.radix_sort(rk, [rp], 0, 27)
spk, (spp,) = prim.radix_sort(sk, [sp], 0, 27)
r = smj_mod.merge_ranges(sbk, spk)
out_b, out_p = cp.empty(r.total, cp.int32), cp.empty(r.total, cp.int32)
steps = {
    "merge_bounds lower": lambda: prim.merge_bounds(sbk, spk, upper=False),
    "merge_bounds upper": lambda: prim.merge_bounds(sbk, spk, upper=True),
    "merge_bounds lower and counts": lambda: prim.merge_bounds(sbk, spk, upper=False, counts=True),
    "merge_bounds lower and offsets": lambda: prim.merge_bounds(sbk, spk, upper=False, offsets=True),
    "merge_bounds lower and counts, then their scan": lambda: prim.exclusive_scan(
        prim.merge_bounds(sbk, spk, upper=False, counts=True)[1]),
    "exclusive_scan of 2^27 int64": lambda: prim.exclusive_scan(r.lower),
    "merge_ranges (lower bounds and offsets)": lambda: smj_mod.merge_ranges(sbk, spk),
    "expand (2 payloads)": lambda: smj_mod.expand(r, sbp, spp, out_b, out_p, None),
    "key_range": lambda: smj_mod.key_range(rk, sk),
}
for label, fn in steps.items():
    print(f"{label:40} {event_time(fn, 5) * 1e3:8.3f} ms", flush=True)
