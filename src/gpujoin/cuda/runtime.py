"""CUDA runtime of gpujoin: device discovery, the memory budget, and kernel loading.

Kernels are CUDA C++ files in ``gpujoin/cuda/kernels``, compiled on first use through
``cupy.RawModule`` (NVRTC) for the running GPU's architecture, with every template instance
named up front; CuPy caches the binaries on disk.  Memory comes from CuPy's default pool
(``cudaMalloc`` underneath), so repeated joins reuse their buffers.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

from .kernels import NAME_EXPRESSIONS, options, source


def _cupy():
    import cupy  # noqa: PLC0415  (optional dependency)

    return cupy


def device_count() -> int:
    """Number of CUDA devices CuPy can use (0 without CuPy, a driver or a GPU)."""
    try:
        return int(_cupy().cuda.runtime.getDeviceCount())
    except Exception:
        return 0


@functools.lru_cache(maxsize=None)
def device_properties(device: int = 0) -> dict:
    """Name, compute capability, SM count, shared memory per block (opt-in) and L2 bytes (read
    once a device: cudaGetDeviceProperties took about 60 us on an H200 host, and every kernel
    lookup asks for the architecture; uncached it was most of the planner's statistics cost)."""
    cp = _cupy()
    p = cp.cuda.runtime.getDeviceProperties(device)
    name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
    return {"name": name, "cc": (p["major"], p["minor"]), "sms": p["multiProcessorCount"],
            "smem_optin": p.get("sharedMemPerBlockOptin", 49152), "l2_bytes": p["l2CacheSize"]}


def arch() -> str:
    major, minor = device_properties(_cupy().cuda.Device().id)["cc"]
    return f"sm_{major}{minor}"


@functools.lru_cache(maxsize=None)
def _module(file: str, device_arch: str):
    cp = _cupy()
    return cp.RawModule(code=source(file), options=(*options(file), f"--gpu-architecture={device_arch}"),
                        name_expressions=NAME_EXPRESSIONS[file])


def kernel(file: str, name: str):
    """The compiled kernel ``name`` (a name expression listed in NAME_EXPRESSIONS[file]) for the
    current device."""
    return _function(file, name, _cupy().cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _function(file: str, name: str, device: int):
    # one lookup a kernel and device: the planner's statistics launch a few kernels between
    # syncs, where each CuPy call's host time counts
    return _module(file, arch()).get_function(name)


def resident_grid(fn, threads: int, smem: int) -> int:
    """Blocks of kernel ``fn`` that all the current device's SMs hold at once, at ``threads`` a
    block and ``smem`` bytes of dynamic shared memory (the driver's occupancy; ``fn``'s
    max_dynamic_shared_size_bytes set first): the grid of a kernel whose blocks take their work
    from a counter until none is left."""
    return _resident_grid(fn, threads, smem, _cupy().cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _resident_grid(fn, threads: int, smem: int, device: int) -> int:
    handle = getattr(fn, "kernel", fn).ptr  # (a RawKernel's CUfunction: its Function's)
    per_sm = _cupy().cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(handle, threads, smem)
    return max(1, int(per_sm)) * int(device_properties(device)["sms"])


def free_bytes() -> int:
    """Device memory a join can still take: free on the device plus free in CuPy's pool, and
    no more than the pool's cap leaves (``memory_limit``: outofcore.budget.gpu_memory_cap)."""
    cp = _cupy()
    free, _total = cp.cuda.runtime.memGetInfo()
    pool = cp.get_default_memory_pool()
    have = int(free) + int(pool.free_bytes())
    limit = int(pool.get_limit())
    return min(have, max(0, limit - int(pool.used_bytes()))) if limit else have


def fits(need: int) -> bool:
    """``need`` bytes fit on the device (free_bytes), asking the driver only when CuPy's pool
    does not already hold them free (cudaMemGetInfo took about 10 us on an H100 host, a fifth
    of the planner's statistics at 2^24 rows)."""
    return need <= _cupy().get_default_memory_pool().free_bytes() or need <= free_bytes()


def check_memory(need: int, what: str) -> None:
    """Raise MemoryError, naming the budget, when ``need`` bytes cannot fit on the device.

    The check runs before any allocation, so nothing is half-built when it fails.
    """
    if fits(need):
        return
    have = free_bytes()
    if need > have:
        raise MemoryError(
            f"{what} needs about {need / 2**30:.2f} GiB of GPU memory but {have / 2**30:.2f} GiB is "
            f"free on {device_properties(_cupy().cuda.Device().id)['name']} (within memory_limit, if "
            f"set); use smaller inputs, a larger memory_limit, device='cpu', or free GPU memory")


class PeakMemory:
    """The peak of GPU memory in use (CuPy's default pool) while the block runs, in bytes:
    ``with PeakMemory() as m: ...; m.peak, m.start, m.end``.  Every allocation goes through a
    Python wrapper meanwhile: for measuring runs, not timed ones."""

    def __enter__(self) -> PeakMemory:
        cp = _cupy()
        pool = cp.get_default_memory_pool()
        self.start = self.peak = pool.used_bytes()

        def malloc(n):
            mem = pool.malloc(n)
            self.peak = max(self.peak, pool.used_bytes())
            return mem

        cp.cuda.set_allocator(malloc)
        self._pool = pool
        return self

    def __exit__(self, *exc) -> None:
        _cupy().cuda.set_allocator(self._pool.malloc)
        self.end = self._pool.used_bytes()


def out_of_memory(exc: Exception, what: str) -> MemoryError:
    """A MemoryError with the budget, for a CuPy allocation that failed mid-way."""
    return MemoryError(f"{what} ran out of GPU memory ({exc}); {free_bytes() / 2**30:.2f} GiB free "
                       f"now; use smaller inputs or device='cpu'")


def ptr(a):
    """A kernel argument for an optional array: the array, or a null pointer (CuPy passes None
    as 0xffffffff, not NULL)."""
    import numpy as np  # noqa: PLC0415

    return np.uint64(0) if a is None else a


_untimed = contextvars.ContextVar("gpujoin_untimed_phases", default=False)


@contextlib.contextmanager
def untimed_phases():
    """In-core operations run inside the block time no phases: no event at each phase, and
    empty ``phases``.  The streaming joins' pass 2 runs an in-core join a partition pair and
    reads none of their phases (when the timer still synchronized at each phase, on four GPUs
    each synchronization made the GPU's host thread wait for the interpreter lock once more)."""
    token = _untimed.set(True)
    try:
        yield
    finally:
        _untimed.reset(token)


class PhaseTimer:
    """Time of an operation's phases (seconds) on the current stream, from CUDA events recorded
    at each mark and read when ``phases`` is (which waits for the last mark's event): the GPU
    time from the timer's making, or the mark before, to the mark.  No synchronization at the
    marks (each had left the GPU idle while the host woke and launched the next phase's
    kernels: 0.2-0.4 ms of a 28 ms distributed job on two H200s).  Only the current stream:
    copies that the out-of-core pipeline runs beside it go on.  No events and no phases inside
    :func:`untimed_phases`."""

    def __init__(self):
        self._phases: dict[str, float] = {}
        self._marks: list = []
        self._on = not _untimed.get()
        self._last = _cupy().cuda.get_current_stream().record() if self._on else None

    def mark(self, phase: str) -> None:
        if self._on:
            self._marks.append((phase, _cupy().cuda.get_current_stream().record()))

    @property
    def phases(self) -> dict[str, float]:
        """{phase: seconds}, the marks so far read (waiting for the last one's event)."""
        if self._marks:
            cp = _cupy()
            self._marks[-1][1].synchronize()
            for phase, ev in self._marks:
                self._phases[phase] = self._phases.get(phase, 0.0) + cp.cuda.get_elapsed_time(self._last, ev) / 1e3
                self._last = ev
            self._marks = []
        return self._phases


def event_time(fn, reps: int = 5, stream=None, warmup: bool = True) -> float:
    """Median seconds of ``fn()`` over ``reps`` runs (after a warm-up run unless ``warmup`` is
    False), timed with CUDA events on ``stream`` (default: the current stream)."""
    import numpy as np  # noqa: PLC0415

    cp = _cupy()
    if warmup:
        fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps):
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return float(np.median(times))
