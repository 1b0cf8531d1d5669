"""Issue 16, an experiment: after the radix shuffle a rank of two holds 2^28 rows a side in 2^8
partitions of about 2^20 rows (the top 8 bits of PHJ's digit), and PHJ then runs one more 9-bit
pass over both tables and its shared-memory joins (15.9 ms at 839df0b).  Would 256 joins of one
partition each, a non-partitioned hash join (NPHJ) whose table of 2^20 rows stays in the L2
cache, be faster?  Times gpujoin's NPHJ and PHJ-TR on paper 001's random workload (unique int64
build keys, 30% of probe rows matching, int64 row ids) at 2^LOG2 rows a side, min of RUNS, and
scales each to the rank's 2^28 rows (x 2^(28 - LOG2) joins).

    PYTHONPATH=src python3 scripts/profile_l2_partitions.py [LOG2 ...] [--runs 5]
"""

import sys
import time

import cupy as cp

import gpujoin
from gpujoin.bench.dist import random_slice

RANK_LOG2 = 28


def best_ms(fn, runs: int) -> float:
    fn()  # (kernels compiled, pools filled)
    best = float("inf")
    for _ in range(runs):
        cp.cuda.get_current_stream().synchronize()
        t = time.perf_counter()
        fn()
        cp.cuda.get_current_stream().synchronize()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main():
    argv = sys.argv[1:]
    runs = 5
    if "--runs" in argv:
        i = argv.index("--runs")
        runs, argv = int(argv[i + 1]), argv[:i] + argv[i + 2:]
    logs = [int(a) for a in argv] or [18, 19, 20, 21, RANK_LOG2]
    print(f"{'rows a side':>12} {'algorithm':>9} {'ms':>9} {'x joins to 2^28':>16}")
    for log2 in logs:
        build, probe, hits = random_slice(1 << log2, 0, 1, xp=cp)
        for algorithm in ("nphj", "phj-tr"):
            out = gpujoin.join(probe, build, "k", algorithm=algorithm)
            assert out.num_rows == hits, (out.num_rows, hits)
            ms = best_ms(lambda p=probe, b=build, a=algorithm: gpujoin.join(p, b, "k", algorithm=a), runs)
            print(f"{'2^' + str(log2):>12} {algorithm:>9} {ms:9.3f} {ms * 2 ** (RANK_LOG2 - log2):16.2f}", flush=True)
        del build, probe
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
