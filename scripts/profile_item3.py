"""Issue 17 item 3 as a user meets it: ``algorithm="auto"`` beside the algorithm it chooses,
named, through ``gpujoin.join`` (paper 001's random workload, unique build keys, 1 and 2 payload
columns) and ``gpujoin.group_by`` (two MAX columns, g = 2^4 and 2^16) on CuPy arrays, at each
``log2`` rows given (default 24 25 26); ``--reps`` repetitions of ``--rounds`` random-order rounds,
each printing the medians, auto over named and auto minus named.

    PYTHONPATH=src python3 scripts/profile_item3.py [24 26] [--reps 3] [--rounds 60]
"""

import random
import statistics
import sys
import time

import cupy as cp

import gpujoin
from gpujoin.bench.workloads import GroupByWorkload, JoinWorkload, make_groupby, make_join
from gpujoin.cuda.groupby.common import AggInput
from gpujoin.plan.auto import resolve_gpu_group_by, resolve_gpu_join


def _arg(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def pairs(log2: int) -> list:
    """(label, auto's call, the named choice's call) for each workload at 2^log2 rows."""
    out = []
    for p in (1, 2):
        r, s = make_join(JoinWorkload(log2_r=log2, log2_s=log2, payloads=p), cp)
        algo = resolve_gpu_join(r["k"], s["k"], [r[f"r{i}"] for i in range(p)],
                                [s[f"s{i}"] for i in range(p)]).algorithm
        out.append((f"2^{log2} join, {p} payload(s), {algo}",
                    lambda r=r, s=s: gpujoin.join(s, r, "k", algorithm="auto"),
                    lambda r=r, s=s, a=algo: gpujoin.join(s, r, "k", algorithm=a)))
    for lg in (4, 16):
        t = make_groupby(GroupByWorkload(log2_rows=log2, log2_groups=lg), cp)
        aggs = dict(m0=("v0", "max"), m1=("v1", "max"))
        algo = resolve_gpu_group_by(t["k"], [AggInput(t["v0"], None, ("max",)),
                                             AggInput(t["v1"], None, ("max",))]).algorithm
        out.append((f"2^{log2} group-by g=2^{lg}, {algo}",
                    lambda t=t: gpujoin.group_by(t, "k", algorithm="auto").agg(**aggs),
                    lambda t=t, a=algo: gpujoin.group_by(t, "k", algorithm=a).agg(**aggs)))
    return out


def rounds(cases: list, n: int) -> None:
    calls = [(label, which, fn) for label, auto, named in cases for which, fn in (("auto", auto), ("named", named))]
    times = {(label, which): [] for label, which, _ in calls}
    for _, _, fn in calls:
        fn()
    for _ in range(n):
        random.shuffle(calls)
        for label, which, fn in calls:
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            fn()
            cp.cuda.Device().synchronize()
            times[label, which].append(time.perf_counter() - t0)
    for label, _, _ in cases:
        a, b = statistics.median(times[label, "auto"]), statistics.median(times[label, "named"])
        q = statistics.quantiles(times[label, "named"], n=4)
        print(f"  {label:40} auto {a * 1e3:7.3f}  named {b * 1e3:7.3f} ms (quartiles {q[0] * 1e3:.3f}-"
              f"{q[2] * 1e3:.3f})  auto/named {a / b:.3f}  (+{(a - b) * 1e6:.0f} us)", flush=True)


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:] if a.isdigit() and not sys.argv[sys.argv.index(a) - 1].startswith("--")]
    reps, n = _arg("--reps", 3), _arg("--rounds", 60)
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), flush=True)
    for log2 in sizes or [24, 25, 26]:
        cases = pairs(log2)
        for rep in range(reps):
            print(f"2^{log2} rows, repetition {rep + 1} ({n} rounds, median)", flush=True)
            rounds(cases, n)
        del cases
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
