"""n_unique on the GPU (cuda.groupby.distinct) beside max of the same column, on a DeviceTable
of 2^log2 rows, 2^16 groups, values over 2^20 distinct integers (medians of ``runs``), and the
sort's parts: the lexsort of the (key, value) pairs, then the counts.

    PYTHONPATH=src python3 scripts/profile_n_unique.py [24 26] [--runs 5]
"""

import statistics
import sys

import cupy as cp

import gpujoin
from gpujoin.bench.runner import _timed
from gpujoin.cuda.groupby.distinct import count_distinct


def timed(fn, runs: int) -> float:
    """Median seconds of ``fn``, the device synchronized after each run (the bench's runner)."""
    return statistics.median(_timed(lambda: (fn(), cp.cuda.Device().synchronize()), runs)[0])


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    logs = [int(a) for i, a in enumerate(sys.argv[1:], 1) if a.isdigit() and sys.argv[i - 1] != "--runs"]
    for log2 in logs or [24, 26]:
        n = 1 << log2
        rng = cp.random.default_rng(3)
        t = {"k": rng.integers(0, 1 << 16, n, dtype=cp.int64), "v": rng.integers(0, 1 << 20, n, dtype=cp.int64)}
        t_max = timed(lambda: gpujoin.group_by(t, "k").agg(m=("v", "max")), runs)
        t_u = timed(lambda: gpujoin.group_by(t, "k").agg(u=("v", "n_unique")), runs)
        gk = cp.unique(t["k"])
        t_sort = timed(lambda: cp.lexsort(cp.stack([t["v"], t["k"]])), runs)
        t_cd = timed(lambda: count_distinct(t["k"], t["v"], None, gk), runs)
        print(f"2^{log2} rows, 2^16 groups: max {t_max * 1e3:.2f} ms ({n / t_max / 1e9:.2f} G rows/s), "
              f"n_unique {t_u * 1e3:.2f} ms ({n / t_u / 1e9:.2f} G rows/s); count_distinct {t_cd * 1e3:.2f} ms, "
              f"of which the lexsort {t_sort * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
