"""Where auto's statistics spend their time (issue 17 item 3): each step of the join and
group-by statistics alone, wall time with the device synchronized, median of 15."""

import statistics
import time

import cupy as cp
import numpy as np

from gpujoin.bench.workloads import JoinWorkload, make_join
from gpujoin.plan import stats


def timed(label, fn, reps=15):
    fn()
    ts = []
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    print(f"{label:50} {statistics.median(ts) * 1e6:8.1f} us", flush=True)


r, s = make_join(JoinWorkload(log2_r=24, log2_s=24), cp)
bk, pk = r["k"], s["k"]
timed("empty sync", lambda: None)
timed("4096 strided sample to host", lambda: stats._to_host(stats._sample(bk, 4096)))
h = stats._to_host(stats._sample(bk, 4096))
timed("np.unique 4096", lambda: np.unique(h, return_counts=True))
for size in (1 << 16, 1 << 18, 1 << 20):
    timed(f"sort a strided sample of {size}", lambda: cp.sort(stats._sample(bk, size)))
b = cp.sort(stats._sample(bk, 1 << 20))
p = stats._sample(pk, 1 << 16)
timed("searchsorted 2^16 in 2^20", lambda: cp.searchsorted(b, p))
timed("match_ratio", lambda: stats.match_ratio(bk, pk))
from gpujoin.cuda.primitives import count_found, frequent_keys  # noqa: E402

timed("count_found 2^20 sample, 2^16 probe", lambda: count_found(stats._sample(bk, 1 << 20), p))
timed("frequent_keys 2^14 sample", lambda: frequent_keys(pk, 4 * pk.size / 2**14, 1 << 14, 4, 4096, 0.05))
timed("repeated_share", lambda: stats.repeated_share(bk))
timed("cp.unique 4096 on device", lambda: cp.unique(stats._sample(bk, 4096), return_counts=True))
