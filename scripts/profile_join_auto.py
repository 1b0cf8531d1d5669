"""auto's cost over the algorithm it chooses, for GPU joins at 2^24 rows a side (issue 17 item
3): resolve_gpu_join alone, and the join through ``execute_join`` with ``algorithm="auto"`` and
with the chosen algorithm named, one and two payload columns, in random-order rounds (median)."""

import random
import statistics
import time

import cupy as cp

from gpujoin.bench.workloads import JoinWorkload, make_join
from gpujoin.plan.auto import resolve_gpu_join
from gpujoin.plan.join import execute_join


def main(rounds: int = 100) -> None:
    cases = []
    for p in (1, 2):
        r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=p), cp)
        pay_r, pay_s = [r[f"r{i}"] for i in range(p)], [s[f"s{i}"] for i in range(p)]
        algo = resolve_gpu_join(r["k"], s["k"], pay_r, pay_s).algorithm
        cases += [(f"{p} payload(s): resolve_gpu_join", lambda r=r, s=s, a=pay_r, b=pay_s: resolve_gpu_join(r["k"], s["k"], a, b)),
                  (f"{p} payload(s): join, auto", lambda r=r, s=s: execute_join(s, r, "k", algorithm="auto")),
                  (f"{p} payload(s): join, {algo}", lambda r=r, s=s, a=algo: execute_join(s, r, "k", algorithm=a))]
    times = {label: [] for label, _ in cases}
    for _, fn in cases:
        fn()
    for _ in range(rounds):
        random.shuffle(cases)
        for label, fn in cases:
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            fn()
            cp.cuda.Device().synchronize()
            times[label].append(time.perf_counter() - t0)
    for label in sorted(times):
        q = statistics.quantiles(times[label], n=4)
        print(f"{label:45} {statistics.median(times[label]) * 1e3:8.3f} ms (quartiles {q[0] * 1e3:.3f}-{q[2] * 1e3:.3f})",
              flush=True)


if __name__ == "__main__":
    main()
