"""Why the planner's Python runs 3-6 times slower after a join than back to back (issue 17 item
3): one step timed right after each of several waits of about 1.5 ms, the time of a PHJ-TR join
at 2^24 rows on an H200: a device synchronize behind a GPU kernel (as a user's loop of joins),
a Python spin, time.sleep, and nothing (warm).  ``--flags spin|yield|blocking`` sets the CUDA
context's scheduling (cudaSetDeviceFlags) before anything else touches the GPU.

    PYTHONPATH=src python3 scripts/profile_cold_host.py [--flags spin]
"""

import statistics
import sys
import time

import cupy as cp

FLAGS = {"spin": 1, "yield": 2, "blocking": 4}
if "--flags" in sys.argv:
    cp.cuda.runtime.setDeviceFlags(FLAGS[sys.argv[sys.argv.index("--flags") + 1]])

from gpujoin.bench.workloads import JoinWorkload, make_join  # noqa: E402
from gpujoin.plan.auto import choose_join, resolve_gpu_join  # noqa: E402
from gpujoin.plan.calibrate import device_model  # noqa: E402

SLEEP = cp.RawKernel(r"""extern "C" __global__ void busy(long long ns) {
    long long t0 = clock64(); while (clock64() - t0 < ns * 2) {} }""", "busy")  # (about 2 cycles a ns)


def main(reps: int = 200) -> None:
    r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=1), cp)
    bk, pk, pay_r, pay_s = r["k"], s["k"], [r["r0"]], [s["s0"]]
    est = resolve_gpu_join(bk, pk, pay_r, pay_s).estimate
    dev = device_model()
    steps = {"choose_join": lambda: choose_join(est, dev),
             "resolve_gpu_join": lambda: resolve_gpu_join(bk, pk, pay_r, pay_s)}

    def gpu_wait():
        SLEEP((1,), (1,), (cp.int64(1_500_000),))
        cp.cuda.Device().synchronize()

    def spin():
        t = time.perf_counter()
        while time.perf_counter() - t < 1.5e-3:
            pass
    waits = {"after a 1.5 ms kernel and a device sync": gpu_wait, "after a 1.5 ms Python spin": spin,
             "after time.sleep(1.5 ms)": lambda: time.sleep(1.5e-3), "back to back": lambda: None}
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "flags", cp.cuda.runtime.getDeviceFlags()
          if hasattr(cp.cuda.runtime, "getDeviceFlags") else "?", flush=True)
    for name, step in steps.items():
        for wname, wait in waits.items():
            times = []
            for _ in range(reps):
                wait()
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            print(f"{name:18} {wname:42} median {statistics.median(times) * 1e6:7.1f} us", flush=True)


if __name__ == "__main__":
    main()
