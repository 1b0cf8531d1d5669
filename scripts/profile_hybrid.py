"""Where the hybrid join's pass 2 goes on several GPUs (issue 15): the SUM join of 2^n x 2^n
int32 tuples in page-locked host memory on 1 GPU and on every GPU, then on every GPU with the
GPUs' pass 2 taken one at a time (a lock around each worker's pass 2): if that is as fast a
GPU, the GPUs' joins do not run side by side (a host-side lock: the GIL, the driver's).

    python3 scripts/profile_hybrid.py [log2_n=28] [inner=phj-tr] [runs=3] [MODE[,MODE...]]

MODE: sides (default), cprofile (the host's own time in one GPU's pass 2 of 16 partitions),
warm (the GPUs' pools never emptied between or inside runs), async (cudaMallocAsync pools),
nopeer (peer access off), threads (cProfile of every GPU's pass 2 side by side; SERIAL=1: one
at a time), switch (the GIL's switch interval shortened), timeline (one run on every GPU under
CUPTI: each GPU's copy engines and SMs busy or idle in each pass; COLD=1: pools emptied first).
nsys: profile with ``-t cuda`` only (with osrt its importer failed on the H100 pair).
"""

import os
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cupti  # noqa: E402

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


def thread_profile():
    """The host's own time in every GPU's pass 2 side by side (one cProfile over the worker
    threads from the first pass 2's start to the last one's end, second run; Python 3.12's
    profiler sees every thread): what each partition pair costs the interpreter, whose lock the
    GPUs' threads share."""
    import cProfile
    import pstats

    g = device_count()
    prof, orig, lock, inside = cProfile.Profile(), TritonJoin.pass2, threading.Lock(), [0]
    serial = threading.Lock()  # SERIAL=1: one GPU's pass 2 at a time: the host time of a pair alone

    def profiled(self, *a, **k):
        with lock:
            inside[0] += 1
            if inside[0] == 1:
                prof.enable()
        try:
            if os.environ.get("SERIAL"):
                with serial:
                    return orig(self, *a, **k)
            return orig(self, *a, **k)
        finally:
            with lock:
                inside[0] -= 1
                if inside[0] == 0:
                    prof.disable()

    pl = plan_placement([n, n], [8, 8], budget, gpus=g, force_out_of_core=True)
    stream_join([rk, rp], [sk, sp], "inner", pl, list(range(g)), algorithm=inner, memory_limit=budget, aggregate="sum")
    TritonJoin.pass2 = profiled
    res = stream_join([rk, rp], [sk, sp], "inner", pl, list(range(g)), algorithm=inner, memory_limit=budget,
                      aggregate="sum")
    TritonJoin.pass2 = orig
    print(f"x{g} pass 2 under cProfile, {1 << pl.bits} partitions:",
          {k: round(v, 4) for k, v in res.stats["phases"].items()})
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(35)
    st.sort_stats("cumulative").print_stats(50)


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


def timeline():
    """One join on every GPU recorded by CUPTI (PyTorch's profiler sees CuPy's kernels and
    copies): for each GPU and pass, each kind of copy's bytes and busy time, the kernels' busy
    time, and the idle stretches of the pass's bound (H2D in pass 1, kernels in pass 2); then
    the whole host's H2D rate in 20 ms bins.  Each pass's start is marked on every GPU by a
    one-thread kernel, so the passes are told apart on the device clock.  COLD=1: the pools
    emptied first."""
    g = device_count()
    marks = {w: cp.ElementwiseKernel("", "raw int32 x", "x[i] = 1", f"gpujoin_{w}_mark") for w in ("pass1", "pass2")}
    flags = {}

    def marked(name, fn):
        def call(self, *a, **k):
            d = cp.cuda.Device().id
            if d not in flags:
                flags[d] = cp.zeros(1, cp.int32)
            with self.streams.compute:
                marks[name](flags[d], size=1)
            return fn(self, *a, **k)
        return call

    orig = TritonJoin.pass1, TritonJoin.pass2
    TritonJoin.pass1, TritonJoin.pass2 = marked("pass1", orig[0]), marked("pass2", orig[1])
    pl = plan_placement([n, n], [8, 8], budget, gpus=g, force_out_of_core=True)
    join = lambda: stream_join([rk, rp], [sk, sp], "inner", pl, list(range(g)), algorithm=inner,  # noqa: E731
                               memory_limit=budget, aggregate="sum")
    join()  # warm-up: pools, pinned arenas, compiled kernels
    for d in range(g):
        cp.cuda.Device(d).synchronize()
        if os.environ.get("COLD"):  # as the bench runs it: every GPU's pool emptied between runs
            with cp.cuda.Device(d):
                cp.get_default_memory_pool().free_all_blocks()
    t0 = time.perf_counter()
    res, ev, api, _ = cupti.record(join)
    wall = time.perf_counter() - t0
    TritonJoin.pass1, TritonJoin.pass2 = orig
    assert res.total == want
    print(f"timeline x{g}: {wall:.3f} s wall, phases {({k: round(v, 4) for k, v in res.stats['phases'].items()})}, "
          f"{len(ev)} device events", flush=True)

    starts = {}
    for e in ev:
        if "_mark" in e["name"]:
            starts.setdefault((e["args"]["device"], e["name"].split("_")[1]), e["ts"])
    origin = min(starts.values())
    h2d_bins: dict = {}
    for d in range(g):
        mine = [e for e in ev if e["args"].get("device") == d and "_mark" not in e["name"]]
        end = max(e["ts"] + e["dur"] for e in mine)
        for p, lo, hi in (("pass 1", starts[d, "pass1"], starts[d, "pass2"]), ("pass 2", starts[d, "pass2"], end)):
            inside = [e for e in mine if lo <= e["ts"] < hi]
            parts = []
            for k in ("HtoD", "DtoH", "PtoP", "DtoD", "kernel"):
                iv = [(e["ts"], e["ts"] + e["dur"]) for e in inside if cupti.kind(e) == k]
                if not iv:
                    continue
                nbytes = sum(e["args"].get("bytes", 0) for e in inside if cupti.kind(e) == k)
                busy = cupti.union(iv)
                rate = f" {nbytes / 1e9:.2f} GB, {nbytes / busy / 1e3:.0f} GB/s busy" if nbytes else ""
                parts.append(f"{k} {len(iv)} x {busy / 1e3:.1f} ms{rate}")
            print(f"  GPU {d} {p} {(lo - origin) / 1e3:.1f}+{(hi - lo) / 1e3:.1f} ms: " + "; ".join(parts), flush=True)
            for bound in ("HtoD",) if p == "pass 1" else ("HtoD", "kernel"):
                idle = sorted(cupti.gaps([(e["ts"], e["ts"] + e["dur"]) for e in inside if cupti.kind(e) == bound],
                                         lo, hi), key=lambda x: -x[1])
                print(f"    {bound} idle {sum(x[1] for x in idle) / 1e3:.1f} ms in {len(idle)} stretches; longest (at "
                      "ms: length): " + ", ".join(f"{(a - origin) / 1e3:.1f}: {b / 1e3:.2f}" for a, b in idle[:8]),
                      flush=True)
            if p == "pass 2":  # the pipeline's shape: bursts of copies in and of kernels (gaps under 0.3 ms merged)
                for k in ("HtoD", "kernel"):
                    bursts = cupti.merged([(e["ts"], e["ts"] + e["dur"] + 300) for e in inside if cupti.kind(e) == k])
                    print(f"    {k} bursts (start+length ms): " + " ".join(
                        f"{(a - origin) / 1e3:.1f}+{(b - a - 300) / 1e3:.1f}" for a, b in bursts[:40]), flush=True)
        for e in mine:
            if cupti.kind(e) == "HtoD":  # bytes spread over the 20 ms bins the copy spans
                a, b, nb = e["ts"] - origin, e["ts"] + e["dur"] - origin, e["args"].get("bytes", 0)
                for i in range(int(a // 20e3), int(b // 20e3) + 1):
                    over = min(b, (i + 1) * 20e3) - max(a, i * 20e3)
                    h2d_bins[i] = h2d_bins.get(i, 0) + nb * over / max(e["dur"], 1e-3)
    # the CUDA calls of every GPU's thread, by pass (the host side of the bubbles above)
    second = min(v for (d, w), v in starts.items() if w == "pass2")
    for p, inside in (("pass 1", lambda e: e["ts"] < second), ("pass 2", lambda e: e["ts"] >= second)):
        calls: dict = {}
        for e in api:
            if e["ts"] >= origin and inside(e):
                c = calls.setdefault(e["name"], [0, 0.0, 0.0])
                c[0] += 1
                c[1] += e["dur"] / 1e3
                c[2] = max(c[2], e["dur"] / 1e3)
        top = sorted(calls.items(), key=lambda x: -x[1][1])[:10]
        print(f"  CUDA calls in {p} (all threads; count, ms, longest ms): "
              + ", ".join(f"{k} {c[0]} {c[1]:.1f} {c[2]:.2f}" for k, c in top), flush=True)
    print("  host to all GPUs, GB/s a 20 ms bin: " + " ".join(f"{h2d_bins.get(i, 0) / 20e-3 / 1e9:.0f}"
                                                               for i in range(max(h2d_bins) + 1)), flush=True)


modes = {"cprofile": host_time, "warm": warm_pools, "sides": sides, "async": async_pools, "nopeer": no_peers,
         "switch": switch_interval, "timeline": timeline, "threads": thread_profile}
with pinned_host(rk, rp, sk, sp):
    for mode in (sys.argv[4] if len(sys.argv) > 4 else "sides").split(","):
        modes[mode]()
