"""PHJ's radix passes at 2^27-2^29 rows a side (one GPU): 8-bit passes (17 bits: 8 + 8 + 1)
against 9-bit unstable passes (9 + 8), and fewer radix bits (fuller partitions, two 8-bit
passes).  Paper 001's random workload (unique int64 build keys, 30% of probe rows matching,
int64 row ids), as ``gpujoin.join`` runs it and as phj() alone (partition and match phases);
variants take turns, min of RUNS.
Usage: python3 scripts/profile_phj_passes.py [LOG2,LOG2,...=27,28,29] [RUNS=3]"""

import sys
import time

import cupy as cp

import gpujoin
from gpujoin.bench.dist import random_slice
from gpujoin.cuda import kernels
from gpujoin.cuda.join.phj import phj
from gpujoin.cuda.primitives import hash_partition_bits


def timed(fn):
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    out = fn()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - t0, out


def main():
    logs = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [27, 28, 29]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for lg in logs:
        build, probe, hits = random_slice(1 << lg, 0, 1, xp=cp)
        bits = hash_partition_bits(1 << lg, 2048)
        variants = {f"9-bit passes, {bits} bits": (9, None), f"8-bit passes, {bits} bits": (8, None),
                    f"8-bit passes, {bits - 1} bits": (8, bits - 1)}
        best: dict[str, dict[str, float]] = {v: {} for v in variants}
        for _ in range(runs):
            for name, (pass_bits, radix_bits) in variants.items():
                kernels.UNSTABLE_PASS_BITS = pass_bits
                if radix_bits is None:
                    t, out = timed(lambda: gpujoin.join(probe, build, "k", device="cuda"))
                    assert out.num_rows == hits, (name, out.num_rows, hits)
                    del out
                    best[name]["join"] = min(best[name].get("join", 1e9), t)
                t, out = timed(lambda: phj(build["k"], probe["k"], [build["build_id"]], [probe["probe_id"]],
                                           radix_bits=radix_bits))
                assert out.n_pairs == hits, (name, out.n_pairs, hits)
                for phase, s in list(out.phases.items()) + [("phj", t)]:
                    best[name][phase] = min(best[name].get(phase, 1e9), s)
                del out
                cp.get_default_memory_pool().free_all_blocks()
        kernels.UNSTABLE_PASS_BITS = 9
        print(f"2^{lg} rows a side ({hits:,} matches), min of {runs}:", flush=True)
        for name, ph in best.items():
            print(f"  {name:26s} " + "  ".join(f"{k} {v * 1e3:.1f} ms" for k, v in ph.items()), flush=True)
        build = probe = None  # (freed before the next size)
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
