"""auto's cost over the algorithm it chooses, for GPU joins at 2^24 rows a side (issue 17 item
3): resolve_gpu_join alone, and the join through ``execute_join`` with ``algorithm="auto"`` and
with the chosen algorithm named, one and two payload columns, in random-order rounds (median).
``--samples 16,17,18``: resolve_gpu_join and the auto join with the match ratio's build and
probe samples of 2^b keys each (stats.DEVICE_BUILD_SAMPLE / DEVICE_PROBE_SAMPLE), and the ratio
each measures at 30% and 10% of probe keys matching."""

import random
import statistics
import sys
import time

import cupy as cp

from gpujoin.bench.workloads import JoinWorkload, make_join
from gpujoin.plan import stats
from gpujoin.plan.auto import resolve_gpu_join
from gpujoin.plan.join import execute_join
from profile_planner_host import random_rounds  # (scripts/ is the script's directory)


def main(rounds: int = 100) -> None:
    cases = []
    for p in (1, 2):
        r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=p), cp)
        pay_r, pay_s = [r[f"r{i}"] for i in range(p)], [s[f"s{i}"] for i in range(p)]
        algo = resolve_gpu_join(r["k"], s["k"], pay_r, pay_s).algorithm
        cases += [(f"{p} payload(s): resolve_gpu_join", lambda r=r, s=s, a=pay_r, b=pay_s: resolve_gpu_join(r["k"], s["k"], a, b)),
                  (f"{p} payload(s): join, auto", lambda r=r, s=s: execute_join(s, r, "k", algorithm="auto")),
                  (f"{p} payload(s): join, {algo}", lambda r=r, s=s, a=algo: execute_join(s, r, "k", algorithm=a))]
    random_rounds(cases, rounds, 45)


def sample_sizes(bits: list[int], rounds: int = 60) -> None:
    for ratio in (0.3, 0.1):
        r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=2, match_ratio=ratio), cp)
        pay_r, pay_s = [r["r0"], r["r1"]], [s["s0"], s["s1"]]
        times = {b: [] for b in bits}
        got = {}
        for _ in range(rounds):
            random.shuffle(bits)
            for b in bits:
                stats.DEVICE_BUILD_SAMPLE = stats.DEVICE_PROBE_SAMPLE = 1 << b
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                c = resolve_gpu_join(r["k"], s["k"], pay_r, pay_s)
                cp.cuda.Device().synchronize()
                times[b].append(time.perf_counter() - t0)
                got[b] = c.estimate.match_ratio
        for b in sorted(bits):
            print(f"match ratio {ratio}: samples 2^{b}: resolve_gpu_join {statistics.median(times[b]) * 1e3:.3f} ms, "
                  f"measured ratio {got[b]:.4f}", flush=True)


if __name__ == "__main__":
    if "--samples" in sys.argv:
        sample_sizes([int(b) for b in sys.argv[sys.argv.index("--samples") + 1].split(",")])
    else:
        main()
