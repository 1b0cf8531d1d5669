"""Under mpirun: where the host's time goes in paper 001's job (``gpujoin.dist.join`` of the
random workload in GPU memory, 2^LOG2N rows a rank): warm runs, then one traced with
``sys.setprofile`` on every rank; rank 0 prints its calls of at least MIN_US microseconds that
start in the first UNTIL_MS milliseconds, nested, each as start + duration in ms after the job's
call, beside the shuffle's timeline marks (GPU times after its first histogram's launch) of that
run and of an untraced one.

    mpirun -n 2 python3 scripts/profile_job_host.py LOG2N [UNTIL_MS [MIN_US]]
"""
import sys
import time

import cupy as cp

from gpujoin.bench.dist import random_slice
from gpujoin.dist import Communicator
from gpujoin.dist.join import join

comm = Communicator.from_mpi()
n = 1 << int(sys.argv[1])
until, min_us = (float(sys.argv[2]) if sys.argv[2:] else 4.0), (float(sys.argv[3]) if sys.argv[3:] else 15.0)
build, probe, _ = random_slice(n, comm.rank, comm.size, xp=cp)
calls, stack = [], []


def tracer(frame, event, arg):
    now = time.perf_counter()
    if event in ("call", "c_call"):
        name = (f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_code.co_name}" if event == "call"
                else f"<{getattr(arg, '__qualname__', arg)}>")
        stack.append((name, now, len(stack)))
    elif event in ("return", "c_return", "c_exception") and stack:
        name, t0, depth = stack.pop()
        calls.append((t0, now - t0, depth, name))


def run(trace=False):
    comm.barrier()
    cp.cuda.Device().synchronize()
    stats = {}
    t0 = time.perf_counter()
    if trace:
        sys.setprofile(tracer)
    out = join(probe, build, on="k", comm=comm, shuffle="one-level", stats=stats)
    if trace:
        sys.setprofile(None)
    cp.cuda.Device().synchronize()
    return t0, time.perf_counter() - t0, stats, out


for _ in range(4):
    _, dt, stats, out = run()
    del out
if comm.rank == 0:
    print(f"untraced {dt * 1e3:.2f} ms; marks {stats.get('shuffle_timeline_ms')}")
t0, dt, stats, out = run(True)
if comm.rank == 0:
    print(f"traced {dt * 1e3:.2f} ms; marks {stats.get('shuffle_timeline_ms')}")
    for start, d, depth, name in sorted(calls):
        at = (start - t0) * 1e3
        if at <= until and d * 1e6 >= min_us:
            print(f"{at:8.3f} +{d * 1e3:7.3f} {'  ' * min(depth, 30)}{name}")
