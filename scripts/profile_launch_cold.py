"""The join planner's steps on the host as a loop of joins meets them (issue 17 item 3): each
step timed alone right after a 2^24-row PHJ-TR join (the CPU's caches cold, as in an auto
join), median over random-order rounds; beside them the ways a launch of sample_counts' struct
argument could be made (CuPy's RawKernel with a NumPy struct, the driver's cuLaunchKernel with
a kept parameter buffer) on a kernel that does nothing."""

import random
import statistics
import struct
import time

import cupy as cp
import numpy as np

from gpujoin.bench.workloads import JoinWorkload, make_join
from gpujoin.cuda import primitives as prim
from gpujoin.plan import stats
from gpujoin.plan.auto import choose_join, launch_gpu_join_plan, resolve_gpu_join
from gpujoin.plan.calibrate import device_model
from gpujoin.plan.join import execute_join

NOP = r"""
struct Args { unsigned long long w[21]; };
extern "C" __global__ void nop_struct(const Args a) {
    if (threadIdx.x == 0 && a.w[0] == 12345) *(unsigned long long*)a.w[1] = a.w[2];
}
"""


def _read(got) -> None:
    """Wait for what a timed step launched: its samples' words (PendingSamples, or the planner's
    reader that a launch returns)."""
    if isinstance(got, prim.PendingSamples):
        got.result()
    elif callable(got):
        got()


def _imports():
    from gpujoin.cuda.primitives import launch_key_samples
    return launch_key_samples


def main(rounds: int = 100) -> None:
    r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=1), cp)
    bk, pk = r["k"], s["k"]
    nop = cp.RawKernel(NOP, "nop_struct")
    dt = np.dtype([("w", np.uint64, 21)])
    held = np.zeros((), dt)
    tup = (1,) * 17 + (2,) * 8
    packer = struct.Struct("<" + "Q" * 21)
    buf = np.zeros(21, np.uint64)
    scalar = buf.view(dt)[0]  # a view: packing into buf changes what the next launch passes
    size = stats.planner_sample(1 << 24, stats.DEVICE_BUILD_SAMPLE)
    dev = device_model()
    est = stats.JoinEstimate(bk.size, pk.size, 4, [4], [4], None, None)
    cases = {
        "nothing": lambda: None,
        "cp.empty(2^17 int32), freed": lambda: cp.empty(1 << 17, cp.int32),
        "np.array(25 fields, SAMPLE_ARGS)[()]": lambda: np.array(tup, prim.SAMPLE_ARGS)[()],
        "struct pack_into a kept buffer": lambda: packer.pack_into(buf, 0, *((7,) * 21)),
        "CuPy launch, a new struct": lambda: nop((1,), (32,), (np.zeros((), dt)[()],)),
        "CuPy launch, a kept struct view": lambda: nop((1,), (32,), (scalar,)),
        "_scratch()": prim._scratch,
        "_strided(build keys)": lambda: prim._strided(bk, prim.SUMMARY_MAX, bk.dtype),
        "device_model()": device_model,
        "choose_join(est)": lambda: choose_join(est, dev),
        "launch_key_samples, summaries": lambda: prim.launch_key_samples([bk, pk], stats.SKEW_SAMPLE),
        "launch_key_samples, multiplicity 2^16": lambda: prim.launch_key_samples(
            [bk, pk], stats.SKEW_SAMPLE, (size, 0)),
        "device_join_samples, multiplicity (with the wait)": lambda: stats.device_join_samples(bk, pk, False, True),
        "resolve_gpu_join, 1 payload": lambda: resolve_gpu_join(bk, pk, [r["r0"]], [s["s0"]]),
        "launch_gpu_join_plan, 1 payload (launch only)": lambda: launch_gpu_join_plan(bk, pk, [4], [4]),
        "launch_join_samples, multiplicity": lambda: stats.launch_join_samples(bk, pk, False, True),
        "hasattr(keys, __cuda_array_interface__)": lambda: hasattr(bk, "__cuda_array_interface__"),
        "isinstance(keys, cp.ndarray)": lambda: isinstance(bk, cp.ndarray),
        "JoinEstimate(...)": lambda: stats.JoinEstimate(int(bk.size), int(pk.size), bk.dtype.itemsize, [4], [4],
                                                        None, None),
        "keys.flags.c_contiguous": lambda: bk.flags.c_contiguous,
        "cp.cuda.get_current_stream()": cp.cuda.get_current_stream,
        "a function-level relative import": lambda: _imports() and None,  # (not called by _read)
    }
    kept = np.array([buf.ctypes.data], np.uint64)  # (the driver's void*[1] of the struct's buffer)

    def cupy_driver():  # as primitives._launch launches sample_counts
        cp.cuda.driver.launchKernel(nop.kernel.ptr, 1, 1, 1, 32, 1, 1, 0, cp.cuda.get_current_stream().ptr,
                                    kept.ctypes.data, 0)
    cupy_driver()
    cases["CuPy's driver.launchKernel, kept parameters"] = cupy_driver
    cases["CuPy's driver.launchKernel twice"] = lambda: (cupy_driver(), cupy_driver()) and None
    try:
        from cuda.bindings import driver

        func = driver.CUfunction(nop.kernel.ptr)
        params = np.array([buf.ctypes.data], np.uint64)

        def drive():
            driver.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, driver.CUstream(cp.cuda.get_current_stream().ptr),
                                  params.ctypes.data, 0)
        drive()
        cases["driver cuLaunchKernel, kept parameters"] = drive
    except Exception as e:  # noqa: BLE001
        print(f"no driver launch: {e!r}")
    del held
    times = {k: [] for k in cases}
    labels = list(cases)
    for _ in range(rounds):
        random.shuffle(labels)
        for k in labels:
            execute_join(s, r, "k", algorithm="phj-tr")
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            got = cases[k]()
            t1 = time.perf_counter()
            _read(got)
            cp.cuda.Device().synchronize()
            times[k].append(t1 - t0)
    for k in cases:
        print(f"{k:52} cold {statistics.median(times[k]) * 1e6:7.1f} us", flush=True)
    for k in cases:  # warm: back to back
        fn = cases[k]
        _read(fn())
        t = []
        for _ in range(200):
            t0 = time.perf_counter()
            got = fn()
            t.append(time.perf_counter() - t0)
            _read(got)
        print(f"{k:52} warm {statistics.median(t) * 1e6:7.1f} us", flush=True)


def gpu_cold(rounds: int = 60) -> None:
    """The samples' launch right after a join: its GPU time (events on either side of the
    launch) and the host's time from the launch's return to the words' arrival (spinning on
    them), by what it samples, beside a kernel that does nothing."""
    r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=1), cp)
    bk, pk = r["k"], s["k"]
    nop = cp.RawKernel(NOP, "nop_struct")
    arg = np.zeros((), np.dtype([("w", np.uint64, 21)]))[()]
    cases = {"nop kernel": None, "summaries": False, "multiplicity 2^14": (1 << 14, 0),
             "multiplicity 2^16": (1 << 16, 0), "match 2^16": (1 << 16, 1 << 16)}
    for cold in (True, False):
        got = {k: ([], []) for k in cases}
        for _ in range(rounds):
            for k, m in cases.items():
                if cold:
                    execute_join(s, r, "k", algorithm="phj-tr")
                cp.cuda.Device().synchronize()
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                if m is None:
                    nop((1,), (32,), (arg,))
                    pending = None
                else:
                    pending = prim.launch_key_samples([bk, pk], stats.SKEW_SAMPLE, m or None)
                t1 = time.perf_counter()
                e1.record()
                if pending is not None:
                    host = pending.scratch.host
                    while host[15] != pending.seq:
                        pass
                t2 = time.perf_counter()
                if pending is not None:
                    pending.result()
                e1.synchronize()
                got[k][0].append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
                got[k][1].append((t2 - t1) * 1e6)
        for k, (g, h) in got.items():
            print(f"{'after a join' if cold else 'back to back':13} {k:20} GPU {statistics.median(g):6.1f} us, "
                  f"launch's return to the words {statistics.median(h):6.1f} us", flush=True)


def trace() -> None:
    """One launch of each kind right after a join, compiled with -DGPUJOIN_SAMPLE_TRACE: each
    block's start, end of its stage's wait and end (us from the first block's start), by stage
    (0 the summaries, 1 the table's fill, 2 the inserts, 3 the probes): first start, last start,
    last past the wait, last end."""
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['x', '--trace-child']; exec(open('scripts/profile_launch_cold.py').read())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    for block in out.split("CASE ")[1:]:
        name, *lines = block.split("END")[0].strip().split("\n")
        rows = [tuple(int(x) for x in ln.split()[1:]) for ln in lines if ln.startswith("TRACE")]
        if not rows:
            print(name, "no trace")
            continue
        for ln in lines:  # the summary blocks' phases (ns from their start): init, thread 0's keys in, all in, end
            if ln.startswith("PHASES"):
                w = ln.split()
                print(f"{name:20} summary block {w[1]}: table cleared {w[2]} ns, every key loaded {w[7]}, thread 0's "
                      f"keys in {w[3]}, every key in {w[4]}, counted and written {w[5]}; SM clock "
                      f"{int(w[6]) / int(w[5]) * 1e3:.0f} MHz")
        base = min(r[2] for r in rows)
        for stage in sorted({r[0] for r in rows}):
            st = [r for r in rows if r[0] == stage]
            print(f"{name:20} stage {stage}: {len(st):3} blocks, first start {min(r[2] for r in st) - base:7.0f} ns, "
                  f"last start {max(r[2] for r in st) - base:7.0f}, last past the wait {max(r[3] for r in st) - base:7.0f}, "
                  f"last end {max(r[4] for r in st) - base:7.0f}")


def trace_child() -> None:
    import ctypes

    from gpujoin.cuda import kernels

    kernels.OPTIONS += ("-DGPUJOIN_SAMPLE_TRACE",)
    libc = ctypes.CDLL(None)  # the kernel's printf goes through C's stdout: flushed at each case's end
    r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=1), cp)
    cases = (("summaries", None, True), ("multiplicity 2^16", (1 << 16, 0), True),
             ("match 2^16", (1 << 16, 1 << 16), True), ("summaries, no join before", None, False),
             ("match, no join before", (1 << 16, 1 << 16), False))
    # (and the summaries of 4,096 contiguous keys just copied, in L2: the inserts without the loads' DRAM)
    near = [r["k"][:stats.SKEW_SAMPLE].copy(), s["k"][:stats.SKEW_SAMPLE].copy()]
    cases += (("summaries, 4,096 keys in L2", None, True),)
    for name, m, join in cases:
        keys = near if "in L2" in name else [r["k"], s["k"]]
        for rep in range(3):  # (the last one printed: compiled and warm, after a join when `join`)
            if join or rep == 0:
                execute_join(s, r, "k", algorithm="phj-tr")
            if keys is near:
                near = [k.copy() for k in near]
                keys = near
            cp.cuda.Device().synchronize()
            if rep == 2:
                print(f"CASE {name}", flush=True)
            prim.launch_key_samples(keys, stats.SKEW_SAMPLE, m).result()
            cp.cuda.Device().synchronize()
            libc.fflush(None)
            if rep == 2:
                print("END", flush=True)


if __name__ == "__main__":
    import sys

    if "--trace-child" in sys.argv:
        trace_child()
    elif "--trace" in sys.argv:
        trace()
    elif "--gpu" in sys.argv:
        gpu_cold()
    else:
        main()
