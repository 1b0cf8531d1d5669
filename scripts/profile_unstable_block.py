"""The unstable radix pass's block (kernels.UNSTABLE_BLOCK, GPUJOIN_UNSTABLE_BLOCK): 512 threads of
16 rows or 1024 of 8, the same 8192-row tile and shared memory, twice the warps an SM with 1024.
Times, at 2^LOG2 rows of an int64 key and an int64 payload (paper 001's random workload), the
9-bit pass's histogram and scatter (the digits of PHJ, and the radix shuffle's rank + top 8 bits,
``use_hash`` 3), a whole 17-bit partition (9 + 8), and PHJ-TR's join of two such tables; CUDA
events, median of RUNS.  Run once a block, each in its own process (the name is read at import):

    GPUJOIN_UNSTABLE_BLOCK=1024 PYTHONPATH=src python3 scripts/profile_unstable_block.py [LOG2=28] [RUNS=5]"""

import sys

import cupy as cp

import gpujoin
from gpujoin.bench.dist import random_slice
from gpujoin.cuda import kernels
from gpujoin.cuda.primitives import Digits, radix_histogram, radix_partition, scatter_placed, exclusive_scan
from gpujoin.cuda.runtime import event_time

log2 = int(sys.argv[1]) if len(sys.argv) > 1 else 28
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
build, probe, hits = random_slice(1 << log2, 0, 1, xp=cp)
k, v = build["k"], build[build.column_names[1]]
gb = 2 * (k.nbytes + v.nbytes) / 1e9  # a pass reads and writes both columns
out_k, out_v = cp.empty_like(k), cp.empty_like(v)
res = {}
for name, digits in (("phj 9 bits", Digits(bits=9, shift=8)), ("shuffle 1+8", Digits(bits=9, shift=9, use_hash=3,
                                                                                         base=2 | 8 << 32))):
    counts = radix_histogram(k, [v], digits, stable=False)
    res[f"{name} histogram"] = event_time(lambda: radix_histogram(k, [v], digits, stable=False), runs)
    offs = exclusive_scan(counts)
    res[f"{name} scatter"] = event_time(lambda: scatter_placed(k, [v], digits, offs, out_k, [out_v]), runs)
res["partition 17 bits (9 + 8)"] = event_time(lambda: radix_partition(k, [v], Digits(bits=17), stable=False), runs)
out = gpujoin.join(probe, build, "k", algorithm="phj-tr")
assert out.num_rows == hits, (out.num_rows, hits)
res["phj-tr join"] = event_time(lambda: gpujoin.join(probe, build, "k", algorithm="phj-tr"), runs)
print(f"block {kernels.unstable_block('i64', 'u64')}, 2^{log2} rows:", flush=True)
for name, s in res.items():
    rate = f"{gb / s / 1e3:5.2f} TB/s" if "scatter" in name else ""
    print(f"  {name:<28} {s * 1e3:8.3f} ms {rate}", flush=True)
