"""n_unique on the GPU (cuda.groupby.distinct) beside max of the same column, on a DeviceTable
of 2^log2 rows, 2^16 groups, values over 2^20 distinct integers (medians of ``runs``), and the
sort's parts: the lexsort of the (key, value) pairs, then the counts.  With ``--host LIMIT``: a
host (Arrow) table of the same columns grouped on the GPU in core and out of core under
``memory_limit=LIMIT`` (n_unique a partition at a time), max beside n_unique each way.

    PYTHONPATH=src python3 scripts/profile_n_unique.py [24 26] [--runs 5] [--host 256MB]
"""

import statistics
import sys

import cupy as cp
import pyarrow as pa

import gpujoin
from gpujoin.bench.runner import _timed
from gpujoin.cuda.groupby.distinct import count_distinct


def timed(fn, runs: int) -> float:
    """Median seconds of ``fn``, the device synchronized after each run (the bench's runner)."""
    return statistics.median(_timed(lambda: (fn(), cp.cuda.Device().synchronize()), runs)[0])


def host(h: pa.Table, limit: str, runs: int) -> None:
    """Host table ``h`` grouped on the GPU in core and under ``memory_limit=limit`` (no other
    array in GPU memory: the cap counts every allocation of CuPy's pool)."""
    n = h.num_rows
    for label, kw in (("in core", {}), (f"out of core, memory_limit={limit}", {"memory_limit": limit})):
        g = gpujoin.group_by(h, "k", device="cuda", **kw)
        g.agg(u=("v", "n_unique"))
        where = g.stats.params.get("placement")
        t_max = timed(lambda: gpujoin.group_by(h, "k", device="cuda", **kw).agg(m=("v", "max")), runs)
        t_u = timed(lambda: gpujoin.group_by(h, "k", device="cuda", **kw).agg(u=("v", "n_unique")), runs)
        print(f"  host table, {label} ({where}): max {t_max * 1e3:.1f} ms ({n / t_max / 1e9:.2f} G rows/s), "
              f"n_unique {t_u * 1e3:.1f} ms ({n / t_u / 1e9:.2f} G rows/s)", flush=True)


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    limit = sys.argv[sys.argv.index("--host") + 1] if "--host" in sys.argv else None
    logs = [int(a) for i, a in enumerate(sys.argv[1:], 1) if a.isdigit() and sys.argv[i - 1] not in ("--runs", "--host")]
    for log2 in logs or [24, 26]:
        n = 1 << log2
        rng = cp.random.default_rng(3)
        t = {"k": rng.integers(0, 1 << 16, n, dtype=cp.int64), "v": rng.integers(0, 1 << 20, n, dtype=cp.int64)}
        if limit is not None:
            print(f"2^{log2} rows, 2^16 groups:", flush=True)
            h = pa.table({k: cp.asnumpy(v) for k, v in t.items()})
            del t
            cp.get_default_memory_pool().free_all_blocks()
            host(h, limit, runs)
            continue
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
