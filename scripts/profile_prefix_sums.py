"""Pass 1's prefix sums on the GPU against the CPU (issue 14 item 2; paper 004 §5.3 found the CPU
better): the partition histogram of a chunk of keys and its exclusive scan, the work that sizes
each chunk's partitions before the scatter.

GPU: radix_histogram (the seeded murmur3 digits of outofcore.partition.hash_digits) and a scan
over the chunk already in GPU memory, as pass 1 runs them (device time, cupyx).  CPU: the same
count over the chunk in pageable host memory, where a user's data is, with Numba on 1 and on
every core (a murmur3 finalizer of the key and a histogram of its top bits a thread, then the
sum and the scan).  Printed beside the chunk's PCIe time at the pinned copy rate measured here.

    PYTHONPATH=src python3 scripts/profile_prefix_sums.py
"""

import os
import statistics
import time

import cupy as cp
import numba
import numpy as np
from cupyx.profiler import benchmark
from numba import njit, prange

from gpujoin.cpu.kernels import fmix64
from gpujoin.cuda.primitives import radix_histogram
from gpujoin.outofcore.partition import hash_digits


@njit(parallel=True, cache=True)
def cpu_prefix_sums(keys, bits, threads):
    n = keys.size
    hist = np.zeros((threads, 1 << bits), np.int64)
    step = (n + threads - 1) // threads
    shift = np.uint64(64 - bits)
    for t in prange(threads):
        for i in range(t * step, min(n, (t + 1) * step)):
            hist[t, fmix64(np.uint64(keys[i]) ^ np.uint64(0x9E3779B97F4A7C15)) >> shift] += 1
    total = hist.sum(axis=0)
    out = np.zeros(total.size + 1, np.int64)
    out[1:] = np.cumsum(total)
    return out


def wall(fn, reps=7):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    cores = os.cpu_count()
    pinned = cp.cuda.alloc_pinned_memory(1 << 28)
    dev = cp.empty(1 << 28, cp.uint8)
    h2d = (1 << 28) / wall(lambda: (dev.data.copy_from_host_async(pinned.ptr, 1 << 28),
                                    cp.cuda.Device().synchronize()))
    print(f"{cores} cores, Numba {numba.__version__}; pinned host-to-device {h2d / 1e9:.1f} GB/s")
    print(f"{'rows':>6} {'bits':>4} {'GPU hist+scan':>14} {'CPU 1 thread':>13} {'CPU all cores':>14} "
          f"{'chunk over PCIe (16 B rows)':>28}")
    for lg in (24, 26):
        host = np.random.default_rng(lg).integers(0, 1 << 40, 1 << lg, dtype=np.int64)
        keys = cp.asarray(host)
        for bits in (5, 6, 8):
            digits = hash_digits(bits)

            def gpu():
                counts = radix_histogram(keys, [keys], digits, stable=False)
                cp.cumsum(counts)

            g = statistics.median(benchmark(gpu, n_repeat=20, n_warmup=2).gpu_times[0])
            c1 = wall(lambda: cpu_prefix_sums(host, bits, 1), reps=3)
            call = wall(lambda: cpu_prefix_sums(host, bits, cores))
            print(f"  2^{lg} {bits:>4} {g * 1e3:11.3f} ms {c1 * 1e3:10.2f} ms {call * 1e3:11.2f} ms "
                  f"{host.size * 16 / h2d * 1e3:25.2f} ms", flush=True)


if __name__ == "__main__":
    main()
