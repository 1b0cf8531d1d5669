"""What re-coding costs a DeviceTable join on string keys whose two dictionaries differ
(cuda.table.unify_dictionaries): the same join with the two tables' strings encoded together
(one dictionary) and each on its own, at 2^log2 rows a side over 2^log2_distinct strings (the
probe side's keys drawn from the build side's), medians of ``runs``; and unify_dictionaries
alone, with the bytes it must move (the dictionaries' strings on the host, the codes' gather on
the GPU).

    PYTHONPATH=src python3 scripts/profile_string_recode.py [log2 [log2_distinct [runs]]]
"""

import statistics
import sys

import cupy as cp
import numpy as np
import pyarrow as pa

import gpujoin
from gpujoin.bench.runner import _timed
from gpujoin.cuda.table import DeviceTable, unify_dictionaries


def timed(fn, runs: int) -> float:
    """Median seconds of ``fn``, the device synchronized after each run (the bench's runner)."""
    return statistics.median(_timed(lambda: (fn(), cp.cuda.Device().synchronize()), runs)[0])


def main() -> None:
    log2 = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    log2_distinct = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    n, d = 1 << log2, 1 << log2_distinct
    rng = np.random.default_rng(1)
    words = pa.array([f"customer#{i:09d}" for i in range(d)])
    bi, pi = rng.integers(0, d, n), rng.integers(0, d, n)
    build = pa.table({"k": words.take(pa.array(bi)), "b": np.arange(n)})
    probe = pa.table({"k": words.take(pa.array(pi)), "p": np.arange(n)})
    own = [DeviceTable.from_arrow(build), DeviceTable.from_arrow(probe)]  # each side's dictionary
    # one dictionary for the two sides: the words themselves, the draws their codes
    shared = [DeviceTable({"k": cp.asarray(idx.astype(np.int32)), c: cp.arange(n)}, types={"k": pa.string()},
                          dictionaries={"k": words}) for idx, c in ((bi, "b"), (pi, "p"))]
    assert not own[0].dictionaries["k"].equals(own[1].dictionaries["k"])
    rows = gpujoin.join(own[1], own[0], "k").num_rows
    assert rows == gpujoin.join(shared[1], shared[0], "k").num_rows
    t_shared = timed(lambda: gpujoin.join(shared[1], shared[0], "k"), runs)
    t_own = timed(lambda: gpujoin.join(own[1], own[0], "k"), runs)
    t_unify = timed(lambda: unify_dictionaries(own, [[(0, "k"), (1, "k")]]), runs)
    dict_bytes = sum(t.dictionaries["k"].nbytes for t in own)
    print(f"2^{log2} rows a side, 2^{log2_distinct} strings ({dict_bytes / 1e6:.1f} MB of dictionaries), "
          f"{rows:,} output rows")
    print(f"  one dictionary:        {t_shared * 1e3:8.2f} ms")
    print(f"  a dictionary a side:   {t_own * 1e3:8.2f} ms  (+{(t_own - t_shared) * 1e3:.2f} ms, "
          f"{t_own / t_shared:.3f}x)")
    print(f"  unify_dictionaries:    {t_unify * 1e3:8.2f} ms  (the union of {dict_bytes / 1e6:.1f} MB of strings, "
          f"then one gather of {n * 8 / 1e6:.0f} MB of codes read and written)")
    if "--arrow" not in sys.argv:  # the host's hash beside it (cuda.strings' fallback)
        import gpujoin.cuda.strings as gs

        gs.GPU_UNION_MIN, keep = 1 << 62, gs.GPU_UNION_MIN
        t_host = timed(lambda: unify_dictionaries(own, [[(0, "k"), (1, "k")]]), runs)
        gs.GPU_UNION_MIN = keep
        print(f"  ... by Arrow's hash:   {t_host * 1e3:8.2f} ms  ({t_host / t_unify:.1f}x the GPU's)")


if __name__ == "__main__":
    main()
