"""Would a rank's local join go faster as B joins of hash buckets (issue 16's 1.8x)?  One GPU:
paper 001's random workload as one rank of two receives it (2^LOG2 build rows of unique int64
keys, 2^LOG2 probe rows, 30% matching, int64 row ids), joined whole and as B buckets of the keys'
hash, each bucket's join timed alone (the sum is what a pipeline of buckets would pay), min of 3;
the whole job's join on one GPU (2^(LOG2+1) a side) beside it.
Usage: python3 scripts/profile_bucket_join.py [LOG2=28] [B,B,...=4,8,16,32]"""

import sys
import time

import cupy as cp

import gpujoin
from gpujoin.bench.dist import random_slice
from gpujoin.cuda.table import DeviceTable


def timed(fn, runs=3):
    best = None
    for _ in range(runs):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        out = fn()
        cp.cuda.Device().synchronize()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
        del out
    return best


def buckets(t: DeviceTable, b: int) -> list[DeviceTable]:
    h = (t["k"].view(cp.uint64) * cp.uint64(0x9E3779B97F4A7C15)) >> cp.uint64(64 - b.bit_length() + 1)
    order = cp.argsort(h, kind="stable")
    counts = cp.bincount(h.astype(cp.int64), minlength=b).get()
    cols = {n: t[n][order] for n in t.column_names}
    out, lo = [], 0
    for c in counts:
        out.append(DeviceTable({n: v[lo:lo + int(c)] for n, v in cols.items()}))
        lo += int(c)
    return out


def main():
    log2 = int(sys.argv[1]) if len(sys.argv) > 1 else 28
    bs = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [4, 8, 16, 32]
    build, probe, hits = random_slice(1 << (log2 + 1), 0, 1, xp=cp)  # the whole job, one GPU
    t = timed(lambda: gpujoin.join(probe, build, "k", device="cuda"))
    print(f"one GPU, 2^{log2 + 1} a side: {t * 1e3:.1f} ms", flush=True)
    del build, probe
    cp.get_default_memory_pool().free_all_blocks()
    build, probe, hits = random_slice(1 << log2, 0, 1, xp=cp)
    out = gpujoin.join(probe, build, "k", device="cuda")
    assert out.num_rows == hits, (out.num_rows, hits)
    del out
    whole = timed(lambda: gpujoin.join(probe, build, "k", device="cuda"))
    print(f"local join, 2^{log2} a side, whole: {whole * 1e3:.1f} ms", flush=True)
    for b in bs:
        pb, bb = buckets(probe, b), buckets(build, b)
        rows = sum(gpujoin.join(p, q, "k", device="cuda").num_rows for p, q in zip(pb, bb))
        assert rows == hits, (rows, hits)
        each = [timed(lambda p=p, q=q: gpujoin.join(p, q, "k", device="cuda")) for p, q in zip(pb, bb)]
        print(f"  {b} buckets: sum {sum(each) * 1e3:.1f} ms (each {min(each) * 1e3:.2f}-{max(each) * 1e3:.2f}); "
              f"{sum(each) / whole:.2f} of whole", flush=True)
        del pb, bb
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
