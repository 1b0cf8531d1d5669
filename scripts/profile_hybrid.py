"""Where the hybrid join's pass 2 goes on several GPUs (issue 15): the SUM join of 2^n x 2^n
int32 tuples in page-locked host memory on 1 GPU and on every GPU, then on every GPU with the
GPUs' pass 2 taken one at a time (a lock around each worker's pass 2): if that is as fast a
GPU, the GPUs' joins do not run side by side (a host-side lock: the GIL, the driver's).

    python3 scripts/profile_hybrid.py [log2_n=28] [inner=phj-tr] [runs=3] [sides|cprofile|warm|async|nopeer|switch]

(cprofile: the host's own time in one GPU's pass 2 of 16 partitions; warm: the GPUs' pools
never emptied between or inside runs; async: cudaMallocAsync pools; nopeer: peer access off;
switch: the GIL's switch interval shortened.)
nsys: profile with ``-t cuda`` only (with osrt its importer failed on the H100 pair).
"""

import sys
import threading
import time

import cupy as cp
import numpy as np

from gpujoin.bench.out_of_core import make_relations
from gpujoin.dist.devices import device_count
from gpujoin.outofcore.stream import pinned_host
from gpujoin.outofcore.triton import TritonJoin
from gpujoin.plan.placement import plan_placement
from gpujoin.plan.streaming import stream_join

log2_n = int(sys.argv[1]) if len(sys.argv) > 1 else 28
inner = sys.argv[2] if len(sys.argv) > 2 else "phj-tr"
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
n = 1 << log2_n
rk, rp, sk, sp = make_relations(log2_n, 42, item_bytes=4)
want = int(sp.sum(dtype=np.int64))
budget = 16 << 30


def run(d, label):
    pl = plan_placement([n, n], [8, 8], budget, gpus=d, force_out_of_core=True)
    for r in range(runs + 1):
        t0 = time.perf_counter()
        res = stream_join([rk, rp], [sk, sp], "inner", pl, list(range(d)), algorithm=inner, memory_limit=budget,
                          aggregate="sum")
        dt = time.perf_counter() - t0
        assert res.total == want
        if r:
            per = [round(g["phases"]["pass2"], 4) for g in res.stats.get("per_gpu") or []]
            print(f"{label} x{d}: {dt:.3f} s phases {({k: round(v, 4) for k, v in res.stats['phases'].items()})} "
                  f"per-GPU pass 2 {per}", flush=True)


def sides():
    """Concurrent pass 2s, then one at a time, then under the CUDA profiler's capture range."""
    g = device_count()
    run(1, "concurrent")
    run(g, "concurrent")
    lock = threading.Lock()
    orig = TritonJoin.pass2

    def serial(self, *a, **k):
        with lock:
            return orig(self, *a, **k)

    TritonJoin.pass2 = serial
    run(g, "one GPU's pass 2 at a time")
    TritonJoin.pass2 = orig
    cp.cuda.profiler.start()
    run(g, "profiled")
    cp.cuda.profiler.stop()


def host_time():
    """The host's own time in one GPU's pass 2 of 16 partitions (cProfile, second run)."""
    import cProfile
    import pstats

    pl = plan_placement([n, n], [8, 8], budget, bits=4, force_out_of_core=True)
    for r in range(2):
        prof = cProfile.Profile()
        prof.enable()
        res = stream_join([rk, rp], [sk, sp], "inner", pl, [0], algorithm=inner, memory_limit=budget,
                          aggregate="sum")
        prof.disable()
    print("16 partitions on one GPU:", {k: round(v, 4) for k, v in res.stats["phases"].items()})
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    pstats.Stats(prof).sort_stats("cumulative").print_stats(45)


def warm_pools():
    """As sides(), the pools never emptied (CuPy's free_all_blocks a no-op): cudaMalloc and
    cudaFree out of the joins."""
    class Kept:
        def __init__(self, pool):
            self.pool = pool

        def free_all_blocks(self):
            pass

        def __getattr__(self, name):
            return getattr(self.pool, name)

    real = cp.get_default_memory_pool
    kept = {}
    cp.get_default_memory_pool = lambda: kept.setdefault(cp.cuda.Device().id, Kept(real()))
    g = device_count()
    run(1, "warm pools")
    run(g, "warm pools")


def async_pools():
    """As sides(), each GPU allocating from CUDA's stream-ordered pool (cudaMallocAsync: no
    device-wide synchronization in cudaFree, no driver lock shared with the other GPU's thread);
    memory_limit is not enforced by that pool."""
    g = device_count()
    for d in range(g):
        with cp.cuda.Device(d):
            cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    run(1, "async pools")
    run(g, "async pools")


def no_peers():
    """As sides(), peer access left off: the other GPU's cached pieces come through host memory
    (slower), but no allocation is mapped into the other GPU's address space."""
    import gpujoin.dist.hybrid as hybrid

    hybrid.enable_peer_access = lambda gpus: None
    g = device_count()
    run(g, "no peer access")


def switch_interval():
    """Every GPU at Python's default GIL switch interval (5 ms), then at 1 ms, 0.1 ms and 0.02 ms: a
    thread back from a CUDA sync waits for the interpreter lock while the others launch kernels,
    up to an interval each time (the convoy effect); if pass 2 shortens as the interval does,
    the GPUs' threads queue on the GIL."""
    g = device_count()
    default = sys.getswitchinterval()
    try:
        for interval in (default, 1e-3, 1e-4, 2e-5):
            sys.setswitchinterval(interval)
            run(g, f"switch interval {interval * 1e3:g} ms")
    finally:
        sys.setswitchinterval(default)


mode = sys.argv[4] if len(sys.argv) > 4 else "sides"
with pinned_host(rk, rp, sk, sp):
    {"cprofile": host_time, "warm": warm_pools, "sides": sides, "async": async_pools, "nopeer": no_peers,
     "switch": switch_interval}[mode]()
