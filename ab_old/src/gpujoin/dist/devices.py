"""The GPUs of one host: which ones an operation uses (``gpus=``), peer access between them, and
one host thread per GPU (paper 000 §3: a CPU thread drives each GPU, with its own streams and
pinned buffers).

Reusable by every multi-GPU algorithm (``hybrid``, ``nested_loop``): :func:`resolve_gpus`,
:func:`enable_peer_access`, :func:`on_each`.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
from concurrent.futures import ThreadPoolExecutor


def device_count() -> int:
    from ..cuda.runtime import device_count as count

    return count()


def resolve_gpus(gpus, what: str = "gpus") -> list[int] | None:
    """The device ids ``gpus`` names: None (the planner decides), a count n (devices 0..n-1) or
    a list of distinct ids.

    Raises
    ------
    TypeError
        Not None, an int or a sequence of ints.
    ValueError
        A count below 1, an id repeated, or more GPUs / an id past what this host has.
    """
    if gpus is None:
        return None
    have = device_count()
    if isinstance(gpus, bool) or not isinstance(gpus, (int, list, tuple, range)):
        raise TypeError(f"{what} must be a number of GPUs or a list of device ids, got {type(gpus).__name__}")
    if isinstance(gpus, int):
        if gpus < 1:
            raise ValueError(f"{what}={gpus} asks for no GPU; give at least 1 (or device='cpu')")
        if gpus > have:
            raise ValueError(f"{what}={gpus} asks for more GPUs than this host has ({have})")
        return list(range(gpus))
    ids = list(gpus)
    if not ids or not all(isinstance(g, int) and not isinstance(g, bool) for g in ids):
        raise TypeError(f"{what} must list device ids (ints), got {gpus!r}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{what}={ids} names a GPU twice; list each device id once")
    bad = [g for g in ids if not 0 <= g < have]
    if bad:
        raise ValueError(f"{what}={ids}: no device {bad[0]} on this host (it has {have}: ids 0..{have - 1})")
    return ids


def enable_peer_access(ids: list[int]) -> dict[tuple[int, int], bool]:
    """Let each GPU of ``ids`` read and write the others' memory directly (NVLink or PCIe peer
    to peer); returns which ordered pairs can.  Pairs that cannot still copy, staged through the
    host by the driver."""
    import cupy as cp

    rt = cp.cuda.runtime
    ok = {}
    for a in dict.fromkeys(ids):
        for b in dict.fromkeys(ids):
            if a == b:
                continue
            ok[a, b] = bool(rt.deviceCanAccessPeer(a, b))
            if ok[a, b]:
                with cp.cuda.Device(a):
                    try:
                        rt.deviceEnablePeerAccess(b)
                    except rt.CUDARuntimeError as e:  # already enabled by an earlier call
                        if "PeerAccessAlreadyEnabled" not in str(e):
                            raise
    return ok


#: The interpreter's switch interval while several GPUs' threads run (Python's default is 5 ms):
#: a thread back from a CUDA synchronization waits for the interpreter lock while the others
#: launch kernels, up to an interval each time; on four H200s the hybrid join's pass 2 took
#: 0.41-0.43 s at 5 ms and 0.37-0.39 s at 1 ms (scripts/profile_hybrid.py switch).
SWITCH_INTERVAL_S = 1e-3
_switch = {"holders": 0, "before": None}
_switch_lock = threading.Lock()


@contextlib.contextmanager
def short_switch_interval():
    """``sys.setswitchinterval(SWITCH_INTERVAL_S)`` (when shorter) while the block runs; the
    interval in force before comes back when the last of nested or concurrent holders leaves."""
    with _switch_lock:
        if _switch["holders"] == 0:
            _switch["before"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch["before"], SWITCH_INTERVAL_S))
        _switch["holders"] += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch["holders"] -= 1
            if _switch["holders"] == 0:
                sys.setswitchinterval(_switch["before"])


def on_each(ids: list[int], fn) -> list:
    """``fn(i)`` for every worker i, each in its own host thread with GPU ``ids[i]`` current
    (ids may repeat: several workers on one GPU, as the tests run on a machine of one GPU).
    Returns the results in order; the first error raised is raised here once every worker
    has stopped, so no thread keeps using memory the caller frees (a worker's
    ``BrokenBarrierError`` only when no other error caused it)."""
    import cupy as cp

    def run(i):
        with cp.cuda.Device(ids[i]):
            return fn(i)

    if len(ids) == 1:
        return [run(0)]
    with short_switch_interval(), ThreadPoolExecutor(max_workers=len(ids), thread_name_prefix="gpujoin-gpu") as pool:
        # each thread its own copy of the context: the progress reporter reaches the workers
        futures = [pool.submit(contextvars.copy_context().run, run, i) for i in range(len(ids))]
        errors = [f.exception() for f in futures]
    errors = sorted((e for e in errors if e is not None), key=lambda e: isinstance(e, threading.BrokenBarrierError))
    if errors:
        raise errors[0]
    return [f.result() for f in futures]


def two_passes(gpus: list[int], first, between, second, memory_limit: int | None = None) -> list:
    """The shape of the multi-GPU streaming algorithms: ``first(g)`` (pass 1) on every GPU, then,
    once all have finished, ``between(results)`` once (the plan of pass 2 over every GPU's
    output), then ``second(g, plan)`` (pass 2) on every GPU; each GPU's pool held to
    ``memory_limit``.  Returns ``second``'s results.  A GPU that fails in pass 1 releases the
    others (they stop with BrokenBarrierError; its error is the one raised).  What ``first``
    holds (spill memory) is the caller's to free, also when this raises."""
    from ..outofcore.budget import gpu_memory_cap

    barrier = threading.Barrier(len(gpus))
    lock = threading.Lock()
    firsts: list = [None] * len(gpus)
    plan: list = []

    def work(g):
        with gpu_memory_cap(memory_limit):
            try:
                firsts[g] = first(g)
                barrier.wait()  # pass 2 reads what every GPU made in pass 1
            except BaseException:
                barrier.abort()
                raise
            with lock:
                if not plan:
                    plan.append(between(firsts))
            return second(g, plan[0])

    return on_each(gpus, work)
