"""The host-resident streaming path: pinned buffers, chunks, and three CUDA streams.

Host data reaches the GPU in chunks through a reused pool of pinned (page-locked) buffers:
the host copies a chunk of a pageable array into a pinned staging buffer (several threads:
one core copies at about 10 GB/s, PCIe 5 moves 55), a DMA copy on the *copy-in* stream moves
it to the GPU, kernels run on the *compute* stream, and results go back on the *copy-out*
stream, so that the three overlap (paper 000 §3.2.4).  ``Streams(1)`` puts all three on one
stream, the baseline paper 000 measures against.

What is reusable here: :class:`Streams`, :func:`pinned_empty` (CuPy's pinned pool, which keeps
freed buffers for the next call), :class:`Uploader` (double-buffered staging of host chunks, or
DMA in place from page-locked ones), :class:`Downloader` (through pinned slots, or
``get_pinned`` straight into page-locked host arrays), :class:`HostArena` (page-locked host
memory kept registered between calls: the spill, GSM's sorted copies, join_where's compared
columns), :class:`PairColumns` / :class:`Pairs` (a GPU's matching pairs in page-locked segments,
read in place), :func:`download_async` and :class:`Keepalive` (device buffers stay alive until
the copies that read them are done).  The Triton join (``outofcore/triton.py``), the out-of-core group-by and
the multi-GPU joins of paper 000 move their data through them.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import mmap
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Threads that copy pageable host data into pinned buffers (GPUJOIN_COPY_THREADS).  On the
#: H200 machine (16 cores) 1 thread copied 10.8 GB/s, 8 threads 24, 16 threads 36
#: (scripts/profile_host_path.py).  One pool serves every GPU of the process.
COPY_THREADS = int(os.environ.get("GPUJOIN_COPY_THREADS", str(min(32, os.cpu_count() or 1))))
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(1, COPY_THREADS), thread_name_prefix="gpujoin-copy")
    return _pool


def parallel_map(fn, items: list) -> list:
    """``[fn(x) for x in items]`` on the process's host threads, for work that releases the GIL
    (NumPy's sorts, binary searches and copies); not from inside one of those threads."""
    return list(_executor().map(fn, items))


def parallel_imap(fn, items, ahead: int | None = None):
    """``fn(x)`` for each of ``items``, yielded in order, computed on the process's host threads
    with at most ``ahead`` (default: the threads) in flight, so that memory stays bounded; one
    by one on the calling thread when it is one of those threads (the pool would wait on itself)."""
    if threading.current_thread().name.startswith("gpujoin-copy"):
        yield from map(fn, items)
        return
    ex, pending = _executor(), collections.deque()
    it = iter(items)
    for x in it:
        pending.append(ex.submit(fn, x))
        if len(pending) >= (ahead or COPY_THREADS):
            break
    try:
        while pending:
            done = pending.popleft().result()
            for x in it:  # refill the window by one
                pending.append(ex.submit(fn, x))
                break
            yield done
    finally:  # a consumer that stops early: the rest still runs, its results are dropped
        for f in pending:
            f.cancel()


def parallel_copy(dst: np.ndarray, src: np.ndarray, min_piece: int = 1 << 22) -> None:
    """``dst[:] = src`` with several threads (NumPy releases the GIL while it copies)."""
    n = src.size
    pieces = max(1, min(COPY_THREADS, (n * src.itemsize) // min_piece))
    if pieces == 1:
        np.copyto(dst, src, casting="no")
        return
    bounds = np.linspace(0, n, pieces + 1).astype(np.int64)
    list(_executor().map(lambda i: np.copyto(dst[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]],
                                             casting="no"), range(pieces)))


def parallel_astype(src: np.ndarray, dtype, out: np.ndarray | None = None) -> np.ndarray:
    """``src.astype(dtype)`` (a safe cast, e.g. int32 to int64) with the work spread over threads,
    into ``out`` when given (e.g. page-locked memory), else ``src`` itself when it already has
    ``dtype``."""
    dtype = np.dtype(dtype)
    if out is None and src.dtype == dtype:
        return src
    out = np.empty(src.shape, dtype) if out is None else out
    n = src.size
    pieces = max(1, min(COPY_THREADS, (n * dtype.itemsize) >> 22))
    bounds = np.linspace(0, n, pieces + 1).astype(np.int64)
    list(_executor().map(lambda i: np.copyto(out[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]],
                                             casting="safe"), range(pieces)))
    return out


def concatenate(parts: list[np.ndarray], dtype) -> np.ndarray:
    """``np.concatenate(parts)`` with the copies spread over threads (one part: itself)."""
    if len(parts) == 1 and parts[0].dtype == np.dtype(dtype):
        return parts[0]
    out = np.empty(sum(p.size for p in parts), dtype)
    pos = 0
    for p in parts:
        parallel_copy(out[pos:pos + p.size], p.astype(dtype, copy=False))
        pos += p.size
    return out


class HostColumn:
    """One output column in host memory, written block by block at its end: values, and a
    validity mask made once the first null arrives; capacity grows by doubling (rare: it starts
    at the planner's guess of the output rows, and np.empty takes no memory until touched).
    The Triton and hybrid joins' output and the ring's pairs are written into them."""

    def __init__(self, dtype, capacity: int):
        self.values = np.empty(max(1, capacity), dtype)
        self.valid: np.ndarray | None = None
        self.n = 0

    def reserve(self, extra: int) -> None:
        need = self.n + extra
        if need > self.values.size:
            cap = max(need, 2 * self.values.size)
            grown = np.empty(cap, self.values.dtype)
            parallel_copy(grown[:self.n], self.values[:self.n])
            self.values = grown
            if self.valid is not None:
                v = np.ones(cap, bool)
                parallel_copy(v[:self.n], self.valid[:self.n])
                self.valid = v

    def nulls(self, lo: int, hi: int) -> None:
        if self.valid is None:
            self.valid = np.ones(self.values.size, bool)
        self.valid[lo:hi] = False

    def finish(self):
        return self.values[:self.n], (None if self.valid is None else self.valid[:self.n])


class Pairs:
    """Matching pairs of row numbers in host memory: ``segments``, a list of (left, right) int64
    (k,) arrays, which may lie in page-locked arenas that :meth:`close` hands back for reuse
    (read no segment after it).  A context manager that closes on exit."""

    def __init__(self, segments: list | None = None, arenas: list | None = None):
        self.segments = segments or []
        self._arenas = arenas or []

    def __len__(self) -> int:
        return sum(int(a.size) for a, _ in self.segments)

    @classmethod
    def merge(cls, parts: list["Pairs"]) -> "Pairs":
        """One Pairs owning the segments and arenas of ``parts`` (in order)."""
        return cls([s for p in parts for s in p.segments], [a for p in parts for a in p._arenas])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The pairs as two contiguous int64 arrays (copies, in segment order)."""
        return (concatenate([a for a, _ in self.segments], np.int64),
                concatenate([b for _, b in self.segments], np.int64))

    def close(self) -> None:
        for arena in self._arenas:
            arena.close()
        self._arenas, self.segments = [], []

    def __enter__(self) -> "Pairs":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PairColumns:
    """Pairs of row numbers (int64 device arrays, a block at a time) DMA'd straight into
    page-locked host segments (:class:`HostArena`, kept registered between calls), each block's
    copy on the copy-out stream overlapping the next block's work; a segment is added when one
    fills, after checking host memory.  The θ-joins on the GPU (one GPU, and each GPU of the
    ring) collect their pairs here.  Per-block ``cp.asnumpy`` into lists and a concatenation were
    7x slower; copies out of pinned slots into fresh pageable columns bounded the ring's match
    phase on the host's page faults, and slowed as GPUs were added (0.20 s on one H200, 0.28 on
    two, 2^24 x 2^24 rows, 151M pairs; issue 15)."""

    #: Pairs a segment holds (512 MiB of the two columns): the arenas are reused whole, so that
    #: segments of one size serve every call.
    SEGMENT_PAIRS = 1 << 25

    def __init__(self, downloader: Downloader, what: str):
        self.dl, self.what = downloader, what
        self._segs: list[list] = []  # [arena, left, right, filled]

    def add(self, a, b, bound: int) -> None:
        """Append block (``a``, ``b``) (device int64 (k,), written on the Downloader's compute
        stream); ``bound``: how many pairs may come, to size a new segment."""
        from .budget import check_host

        k = int(a.size)
        if not k:
            return
        seg = self._segs[-1] if self._segs else None
        if seg is None or seg[3] + k > seg[1].size:
            want = max(k, min(max(bound, 1), self.SEGMENT_PAIRS))
            done = sum(s[3] for s in self._segs)
            check_host(16 * want, f"{self.what}'s next {want:,} pairs (already {done:,})",
                       "add a condition that narrows the pairs")
            arena = HostArena(16 * want + 512)
            seg = [arena, arena.take(want, np.int64), arena.take(want, np.int64), 0]
            self._segs.append(seg)
        n = seg[3]
        self.dl.get_pinned([a, b], [seg[1][n:n + k], seg[2][n:n + k]])
        seg[3] += k

    def finish(self) -> Pairs:
        """The pairs, once every copy has landed (the caller closes them)."""
        self.dl.flush()
        segs, self._segs = self._segs, []
        return Pairs([(l[:n], r[:n]) for _, l, r, n in segs], [s[0] for s in segs])

    def close(self) -> None:
        """Hand the segments back unread (on an error)."""
        self.dl.flush()
        for s in self._segs:
            s[0].close()
        self._segs = []


class HostArena:
    """Page-locked host memory for the spill: a NumPy buffer registered in place with CUDA
    (cudaHostRegister pinned 28-31 GB/s of touched memory on the H200 machine, where
    cudaHostAlloc took 1.6 s for 4 GiB), handed out in 256-byte aligned pieces.

    Fresh memory is the slow part (the first touch of 26 GB of spill took about 4.5 s there), so
    a closed arena's buffer stays registered for the next one (:func:`acquire`), as CuPy's pools
    keep device and pinned memory; :func:`release_host_memory` gives it back.
    """

    _cache: list = []  # registered buffers of closed arenas, for the next acquire()
    _lock = threading.Lock()  # the GPUs of a multi-GPU join open arenas from their own threads

    def __init__(self, nbytes: int):
        self._buf, small = None, []
        with HostArena._lock:
            # the smallest cached buffer that is large enough, and not twice as large: a pair
            # segment of 512 MiB must not take the Triton join's 27 GB spill arena
            fits = [i for i, b in enumerate(HostArena._cache) if nbytes + 256 <= b.nbytes <= 2 * (nbytes + 256)]
            if fits:
                self._buf = HostArena._cache.pop(min(fits, key=lambda i: HostArena._cache[i].nbytes))
            else:  # smaller kept buffers are unpinned before more memory is pinned
                small = [b for b in HostArena._cache if b.nbytes < nbytes + 256]
                HostArena._cache[:] = [b for b in HostArena._cache if b.nbytes >= nbytes + 256]
        if self._buf is None:
            import cupy as cp

            _unpin(small)
            self._buf = np.empty(max(1, nbytes) + 256, np.uint8)
            cp.cuda.runtime.hostRegister(self._buf.ctypes.data, self._buf.nbytes, 1)  # portable: any GPU
        self._base = (-self._buf.ctypes.data) % 256
        self._pos = self._base

    @property
    def nbytes(self) -> int:
        return 0 if self._buf is None else self._buf.nbytes

    def take(self, n: int, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        end = self._pos + n * dtype.itemsize
        if end > self._buf.nbytes:
            raise ValueError("HostArena is full")
        out = self._buf[self._pos:end].view(dtype)
        self._pos = self._base + -(-(end - self._base) // 256) * 256
        return out

    def close(self) -> None:
        """Hand the buffer back for reuse (the pieces must no longer be read)."""
        if self._buf is not None:
            with HostArena._lock:
                HostArena._cache.append(self._buf)
                HostArena._cache.sort(key=lambda b: b.nbytes)
            self._buf = None


def release_host_memory() -> None:
    """Unregister and free the page-locked host buffers kept for reuse (``gpujoin.release_host_memory``):
    the out-of-core joins' spill, the θ-joins' compared columns and pair segments, GSM's sorted
    copies, and the free blocks of CuPy's pinned pool (the staging buffers).  They stay
    page-locked between calls so that the next join does not fault and pin them again (pinning
    fresh memory ran at about 6 GB/s on the H200 host); call this to hand them back to the
    operating system.  Nothing to do where CuPy was never loaded."""
    if "cupy" not in sys.modules:
        return
    with HostArena._lock:
        kept, HostArena._cache[:] = list(HostArena._cache), []
    _unpin(kept)


def _unpin(buffers: list[np.ndarray]) -> None:
    """Unregister page-locked ``buffers`` (HostArena's) and free the free blocks of CuPy's pinned
    pool (the staging buffers) before more memory is pinned or the job ends."""
    import cupy as cp

    for buf in buffers:
        cp.cuda.runtime.hostUnregister(buf.ctypes.data)
    cp.get_default_pinned_memory_pool().free_all_blocks()


atexit.register(lambda: HostArena._cache and release_host_memory())


def pinned_empty(n: int, dtype) -> np.ndarray:
    """An uninitialized NumPy array of ``n`` items in pinned host memory (from CuPy's pinned
    memory pool: freed buffers are kept for reuse, so repeated joins do not pin again)."""
    import cupy as cp

    dtype = np.dtype(dtype)
    mem = cp.cuda.alloc_pinned_memory(max(1, n * dtype.itemsize))
    return np.frombuffer(mem, dtype, n)


#: Each GPU's streams of finished pipelines, for the next: CuPy's pool keeps freed blocks per
#: stream, so a join on fresh streams found none of the last join's blocks, and near the
#: memory_limit cap it freed every cached block and called cudaMalloc again (each call
#: synchronizing the GPU: on four H200s about 100 ms at the start of the hybrid join's pass 1).
_idle_streams: dict[int, list] = {}
_idle_lock = threading.Lock()


def _give_back(device: int, streams: list) -> None:
    with _idle_lock:
        _idle_streams.setdefault(device, []).extend(streams)


class Streams:
    """The copy-in, compute and copy-out streams of the pipeline (``count`` 3), or one stream
    for all three (``count`` 1).  Non-blocking: CUDA's legacy default stream does not serialize
    them.  The CUDA streams are the current GPU's from a finished pipeline where there are
    some (handed back when this object is collected), so that the memory pool's blocks cached
    for them serve the next operation."""

    def __init__(self, count: int = 3):
        import weakref

        import cupy as cp

        if count not in (1, 3):
            raise ValueError(f"streams must be 1 or 3, got {count!r}")
        self.count = count
        device = cp.cuda.Device().id
        with _idle_lock:
            idle = _idle_streams.setdefault(device, [])
            made = idle[-count:] if len(idle) >= count else []  # as handed back: each keeps its role
            del idle[len(idle) - len(made):]
        made = made or [cp.cuda.Stream(non_blocking=True) for _ in range(count)]
        weakref.finalize(self, _give_back, device, list(made))
        self.copy_in, self.compute, self.copy_out = (made * 3)[:3] if count == 1 else made

    def synchronize(self) -> None:
        for s in {id(s): s for s in (self.copy_in, self.compute, self.copy_out)}.values():
            s.synchronize()


def record(stream):
    """An event recorded on ``stream`` now."""
    import cupy as cp

    ev = cp.cuda.Event(block=False, disable_timing=True)
    ev.record(stream)
    return ev


def is_pinned(a: np.ndarray) -> bool:
    """Whether NumPy array ``a`` lies in page-locked host memory that the current GPU's DMA can
    read in place (cudaHostAlloc'd, or cudaHostRegister'd as :func:`pinned_host` does); False
    for pageable memory and where CuPy was never loaded."""
    if "cupy" not in sys.modules or a.nbytes == 0:
        return False
    import cupy as cp

    try:
        attrs = cp.cuda.runtime.pointerGetAttributes(a.ctypes.data)
    except cp.cuda.runtime.CUDARuntimeError:  # older drivers raise for pageable memory
        return False
    return attrs.type == cp.cuda.runtime.memoryTypeHost


@contextlib.contextmanager
def pinned_host(*arrays: np.ndarray):
    """Page-lock the memory of C-contiguous NumPy ``arrays`` in place for the block
    (cudaHostRegister, portable to every GPU): the streaming joins (out of core, several GPUs)
    then DMA their chunks straight from them, with no copy into pinned staging buffers.

    ``with gpujoin.pinned_host(k1, v1, k2, v2): gpujoin.join(gpujoin.Table({"k": k1, "v": v1}),
    ..., memory_limit="16GB")``: NumPy-backed tables reach the GPU zero-copy.  Paper 000's inputs
    are in pinned memory; on pageable input the host's staging copy bounds pass 1 (two H100s,
    2^31 x 2^31 int32 tuples under 16 GB a GPU: 1.82 s pageable, 0.78 s pinned; BENCHMARKS.md).
    Registration costs about a second per 15-30 GB of touched memory; arrays already pinned are
    left as they are; every registration is undone when the block ends, also on an error.

    Raises
    ------
    ValueError
        An array is not C-contiguous (pin ``np.ascontiguousarray(a)``) or not a NumPy array.
    RuntimeError
        No usable GPU (CuPy and an NVIDIA GPU are needed to page-lock for it).
    """
    for i, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            raise ValueError(f"pinned_host: argument {i} is a {type(a).__name__}, not a NumPy array")
        if not a.flags.c_contiguous:
            raise ValueError(f"pinned_host: argument {i} (shape {a.shape}) is not C-contiguous; "
                             "pass np.ascontiguousarray(a)")
    from ..backend import cuda_available

    if not cuda_available():
        raise RuntimeError("pinned_host page-locks memory for a GPU's DMA; this machine has no usable GPU "
                           "(CuPy and an NVIDIA GPU are needed)")
    import cupy as cp

    done = []
    try:
        for lo, hi in page_ranges([(a.ctypes.data, a.nbytes) for a in arrays if a.nbytes and not is_pinned(a)]):
            cp.cuda.runtime.hostRegister(lo, hi - lo, 1)  # 1: portable, every GPU's DMA may read it
            done.append(lo)
        yield arrays
    finally:
        for lo in done:
            cp.cuda.runtime.hostUnregister(lo)


def page_ranges(spans: list[tuple[int, int]], page: int = mmap.PAGESIZE) -> list[tuple[int, int]]:
    """The whole pages under ``spans`` ((address, bytes)), overlapping or touching ones merged,
    in address order: CUDA pins whole pages, and refuses to register a page twice (two small
    arrays, or two rows of one array, may share one)."""
    out: list[list[int]] = []
    for lo, hi in sorted((a // page * page, -(-(a + n) // page) * page) for a, n in spans if n):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def h2d_async(dst, src: np.ndarray, stream) -> None:
    """DMA ``src`` (pinned host) into device array ``dst`` on ``stream``."""
    import cupy as cp

    if src.nbytes:
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.ctypes.data, src.nbytes,
                                    cp.cuda.runtime.memcpyHostToDevice, stream.ptr)


def d2d_async(dst, src, stream) -> None:
    """Copy device array ``src`` into ``dst`` on ``stream``; the two may be on different GPUs
    (unified addressing: the driver takes the peer link, or stages through the host without one)."""
    import cupy as cp

    if src.nbytes:
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                                    cp.cuda.runtime.memcpyDefault, stream.ptr)


class Downloader:
    """Device arrays to pageable host arrays through two reused pinned slots: the DMA of one
    segment (copy-out stream, at the link's rate) overlaps the host's copy of the previous one
    out of the other slot (a plain copy to pageable memory ran at 7-8 GB/s on the H200 machine).

    ``get(..., wait=False)`` returns once the copies are enqueued: a worker thread waits for each
    segment's DMA and copies it out of its slot, so the caller's next GPU work overlaps them
    (paper 000's copy-out stream); ``flush()`` waits for all of them.  The device arrays stay
    referenced until their DMA is done (the pool must not hand their memory to other work)."""

    def __init__(self, streams: Streams, slot_bytes: int = 64 << 20):
        import cupy as cp

        self.streams = streams
        self._slots = [pinned_empty(aligned(slot_bytes), np.uint8) for _ in range(2)]
        self._busy = [None, None]  # the worker's copy still reading each slot
        self._next = 0
        self._pending: list = []
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpujoin-download")
        self._device = cp.cuda.Device().id
        # device arrays of DMAs straight into page-locked memory: a few tasks' worth in flight
        # (GSM's merge rounds enqueue every task without waiting for one)
        self._direct = Keepalive(max_held=DIRECT_IN_FLIGHT)
        self.bytes = 0

    def _copy_out(self, event, slot, dst, keep) -> None:
        import cupy as cp

        with cp.cuda.Device(self._device):
            event.synchronize()
        parallel_copy(dst, slot)

    def get(self, arrays: list, outs: list[np.ndarray] | None = None, wait: bool = True) -> list[np.ndarray]:
        """Host copies of ``arrays`` (CuPy, written by work on the compute stream), into ``outs``
        (host arrays of the same sizes and dtypes) when given; with ``wait=False`` they are
        complete only after :meth:`flush`."""
        stream = self.streams.copy_out
        stream.wait_event(record(self.streams.compute))
        outs = [np.empty(a.shape, a.dtype) for a in arrays] if outs is None else outs
        size = self._slots[0].nbytes
        for a, out in zip(arrays, outs):
            if not a.nbytes:
                continue
            flat, dst = a.reshape(-1).view(np.uint8), out.reshape(-1).view(np.uint8)
            for lo in range(0, a.nbytes, size):
                s = self._next
                self._next ^= 1
                if self._busy[s] is not None:
                    self._busy[s].result()  # the slot's previous segment has left it
                src = flat[lo:lo + size]
                slot = self._slots[s][:src.nbytes]
                download_async(slot, src, stream)
                self._busy[s] = self._worker.submit(self._copy_out, record(stream), slot, dst[lo:lo + size], a)
                self._pending.append(self._busy[s])
        self.bytes += sum(a.nbytes for a in arrays)
        if wait:
            self.flush()
        return outs

    def get_pinned(self, arrays: list, outs: list[np.ndarray]) -> None:
        """DMA ``arrays`` (CuPy, written by work on the compute stream) straight into page-locked
        host arrays ``outs`` on the copy-out stream, no slot between: complete after
        :meth:`flush`."""
        stream = self.streams.copy_out
        stream.wait_event(record(self.streams.compute))
        for a, out in zip(arrays, outs):
            download_async(out, a, stream)
        self._direct.release_done()
        self._direct.hold(record(stream), list(arrays))
        self.bytes += sum(a.nbytes for a in arrays)

    def flush(self) -> None:
        """Wait until every enqueued copy has reached its host array (and raise its error)."""
        self._direct.drain()
        pending, self._pending = self._pending, []
        for f in pending:
            f.result()


_batch = {"api": None}  # how copy_batch batches: ("driver", fn, attrs, idx), ("runtime", rt, attrs) or False


def _driver_batch():
    """The driver's cuMemcpyBatchAsync (CUDA 13's signature, ``_v2``: no failure index) through
    ctypes, which takes the address arrays as they are: cuda-bindings' wrapper converts every
    address of its Python lists (~280 us for a pair's 64 copies on four H200s, each on the
    interpreter lock).  None where the driver lacks it."""
    import ctypes

    try:
        fn = ctypes.CDLL("libcuda.so.1").cuMemcpyBatchAsync_v2
    except (OSError, AttributeError):
        return None

    class Location(ctypes.Structure):  # CUmemLocation
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

    class Attributes(ctypes.Structure):  # CUmemcpyAttributes
        _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", Location), ("dstLocHint", Location),
                    ("flags", ctypes.c_uint)]

    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                           ctypes.c_void_p]
    fn.restype = ctypes.c_int
    attrs = Attributes(srcAccessOrder=1)  # CU_MEMCPY_SRC_ACCESS_ORDER_STREAM: sources read in stream order
    return ("driver", fn, attrs, (ctypes.c_size_t * 1)(0))


def _batch_api():
    if _batch["api"] is None:
        api = _driver_batch()
        if api is None:
            try:
                from cuda.bindings import runtime as rt

                attrs = rt.cudaMemcpyAttributes()
                attrs.srcAccessOrder = rt.cudaMemcpySrcAccessOrder.cudaMemcpySrcAccessOrderStream
                api = ("runtime", rt, attrs)
            except (ImportError, AttributeError):  # cuda-bindings older than CUDA 12.8's API, or none
                api = False
        _batch["api"] = api
    return _batch["api"]


def _batched(api, dsts: np.ndarray, srcs: np.ndarray, sizes: np.ndarray, stream):
    """One batch call over int64 arrays; the error, or None when it was enqueued."""
    import ctypes

    n = sizes.size
    if api[0] == "driver":
        _, fn, attrs, idx = api
        err = fn(dsts.ctypes.data, srcs.ctypes.data, sizes.ctypes.data, n, ctypes.byref(attrs), idx, 1, stream.ptr)
        return None if err == 0 else f"CUresult {err}"
    _, rt, attrs = api
    try:
        err = rt.cudaMemcpyBatchAsync(dsts.tolist(), srcs.tolist(), sizes.tolist(), n, [attrs], [0], 1, stream.ptr)
        err = err[0] if isinstance(err, tuple) else err
    except (TypeError, ValueError) as e:  # another cuda-bindings signature
        return e
    return None if err == rt.cudaError_t.cudaSuccess else err


def copy_batch(dsts, srcs, sizes, stream) -> None:
    """Copies ``sizes[i]`` bytes from address ``srcs[i]`` to ``dsts[i]`` (device, peer device or
    page-locked host: unified addressing) on ``stream``, in stream order, as one call
    (cuMemcpyBatchAsync, CUDA 12.8+) where the driver or cuda-bindings has it, else one
    cudaMemcpyAsync each.  The three are sequences or int64 arrays of equal length.
    Pass 2 of the hybrid join copies a partition's piece of every pass-1 chunk: on four H200s
    4,420 single copies a join took 100 ms of the GPUs' threads (CUDA and interpreter locks)."""
    import cupy as cp

    dsts, srcs, sizes = (np.ascontiguousarray(a, np.int64) for a in (dsts, srcs, sizes))
    if not sizes.size:
        return
    api = _batch_api() if sizes.size > 1 else False
    if api:
        err = _batched(api, dsts, srcs, sizes, stream)
        if err is None:
            return
        import warnings

        warnings.warn(f"the batched copy ({api[0]} API) failed ({err!r}); gpujoin copies one at a time from now on",
                      RuntimeWarning, stacklevel=2)
        _batch["api"] = False
    copy, default, sp = cp.cuda.runtime.memcpyAsync, cp.cuda.runtime.memcpyDefault, stream.ptr
    for d, src, n in zip(dsts.tolist(), srcs.tolist(), sizes.tolist()):
        copy(d, src, n, default, sp)


def download_async(dst: np.ndarray, src, stream) -> None:
    """DMA device array ``src`` into pinned host array ``dst`` on ``stream``."""
    import cupy as cp

    if src.nbytes:
        cp.cuda.runtime.memcpyAsync(dst.ctypes.data, src.data.ptr, src.nbytes,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)


#: Batches of device arrays that a Downloader's DMAs into page-locked memory may still read
#: before the host waits for the oldest (two GSM tasks' two downloads each).
DIRECT_IN_FLIGHT = 4


class Keepalive:
    """Device arrays that copies on other streams still read, released once their event has
    passed (CuPy's pool would otherwise hand the memory to the next allocation while a copy
    still reads it)."""

    def __init__(self, max_held: int | None = None):
        self._held: list[tuple[object, list]] = []
        self.max_held = max_held

    def hold(self, event, arrays: list) -> None:
        """Keep ``arrays`` until ``event`` has passed; past ``max_held`` batches the host waits
        for the oldest, so that a caller enqueuing faster than the GPU copies cannot hold an
        unbounded share of the GPU's memory (a memory_limit would otherwise fail mid-join)."""
        self._held.append((event, arrays))
        while self.max_held and len(self._held) > self.max_held:
            self._held.pop(0)[0].synchronize()

    def release_done(self) -> None:
        self._held = [(e, a) for e, a in self._held if not e.done]

    def drain(self) -> None:
        for e, _ in self._held:
            e.synchronize()
        self._held.clear()


def aligned(n: int) -> int:
    """``n`` bytes rounded up to 256 (CUDA's allocation alignment: full-speed DMA and loads)."""
    return -(-n // 256) * 256


class Uploader:
    """Host chunks to the GPU through two slots, each a pinned staging buffer and a device
    buffer: while one slot's DMA runs on the copy-in stream, the host fills the other.

    ``put(arrays)`` returns ``(device views, event, slot)``: the compute stream waits on
    ``event`` before it reads the views, and the caller hands back ``release(slot, event)``
    once it has enqueued the kernels that read them; the next DMA into that slot waits for
    that event on the GPU (the host does not block).  Fixed slots, not pool allocations: the
    pool may hand freed memory to another stream while a kernel still reads it.
    """

    def __init__(self, streams: Streams, slot_bytes: int):
        self.streams = streams
        self.slot_bytes = aligned(max(1, slot_bytes))
        # staging buffers at the first pageable chunk: page-locked input needs none (on four
        # H200s each join's eight cudaHostAlloc calls of 0.5 GB took up to 0.5 s each, holding
        # the driver lock that the other GPUs' cudaMalloc calls wait on)
        self._host = [None, None]
        self._dev = [None, None]  # allocated at first use: puts into ``dest`` need none
        self._copied = [None, None]   # DMA into the slot done (host may refill the staging)
        self._read = [None, None]     # compute done reading the slot's device buffer
        self._held = [None, None]     # the arrays the slot's DMA reads
        self._next = 0
        self.bytes = 0
        self.direct_bytes = 0  # bytes DMA'd straight from page-locked input (no staging copy)
        self.stage_s = 0.0  # host seconds spent copying into the staging slots
        self.wait_s = 0.0   # host seconds waiting for a slot's previous DMA

    @staticmethod
    def slot_size(arrays_bytes: int, columns: int) -> int:
        """Bytes of a slot that holds ``arrays_bytes`` in ``columns`` 256-byte aligned pieces."""
        return arrays_bytes + 256 * columns

    def put(self, arrays: list[np.ndarray], dest: list | None = None):
        """Stage ``arrays`` and DMA them into the slot's device buffer, or into the device arrays
        ``dest`` (one per array, same sizes) when given."""
        s = self._next
        self._next ^= 1
        need = sum(aligned(a.nbytes) for a in arrays)
        if need > self.slot_bytes:
            raise ValueError(f"a chunk of {need:,} bytes does not fit the {self.slot_bytes:,}-byte staging slot")
        if self._copied[s] is not None:
            t0 = time.perf_counter()
            self._copied[s].synchronize()  # the slot's previous DMA has left the staging buffer
            self.wait_s += time.perf_counter() - t0
        if dest is None and self._dev[s] is None:  # both slots at the first put, before any kernel reads one
            import cupy as cp

            with self.streams.compute:
                self._dev = [cp.empty(self.slot_bytes, cp.uint8) for _ in range(2)]
            # the pool may hand the copy-in stream memory that the compute stream's work still
            # reads: wait for that work on the GPU (a host sync here, at the second put, held
            # the second chunk's DMA until the first chunk's partition ended: 10 ms a relation
            # on each of four H200s)
            self.streams.copy_in.wait_event(record(self.streams.compute))
        pos, out, staged = 0, [], []
        t0 = time.perf_counter()
        for a in arrays:
            if a.flags.c_contiguous and is_pinned(a):  # page-locked input: the DMA reads it in place
                view = a
                self.direct_bytes += a.nbytes
            else:
                if self._host[s] is None:
                    self._host[s] = pinned_empty(self.slot_bytes, np.uint8)
                view = self._host[s][pos:pos + a.nbytes].view(a.dtype)
                parallel_copy(view, np.ascontiguousarray(a))
            staged.append(view)
            out.append(self._dev[s][pos:pos + a.nbytes].view(a.dtype) if dest is None else dest[len(out)])
            pos += aligned(a.nbytes)
        self.stage_s += time.perf_counter() - t0
        stream = self.streams.copy_in
        if self._read[s] is not None:
            stream.wait_event(self._read[s])
        for d, h in zip(out, staged):
            h2d_async(d, h, stream)
        ev = record(stream)
        self._copied[s] = ev
        self._held[s] = staged  # the caller's pinned arrays stay alive until the slot's next put
        self.bytes += sum(a.nbytes for a in arrays)
        return out, ev, s

    def release(self, slot: int, event) -> None:
        """The kernels that read ``slot`` are enqueued; ``event`` marks their end."""
        self._read[slot] = event

    def rows_to_device(self, cols: list[np.ndarray], lo: int, hi: int) -> list:
        """Rows [lo, hi) of host columns ``cols`` in fresh device arrays (allocated on the compute
        stream, which the copy-in stream waits for: the pool may reuse memory a kernel still
        reads), their DMA enqueued on the copy-in stream in slot-sized pieces."""
        import cupy as cp

        with self.streams.compute:
            out = [cp.empty(hi - lo, c.dtype) for c in cols]
        self.streams.copy_in.wait_event(record(self.streams.compute))
        for c, o in zip(cols, out):
            step = max(1, (self.slot_bytes - 256) // c.itemsize)  # rows may outgrow one staging slot
            for a in range(lo, hi, step):
                b = min(hi, a + step)
                self.put([c[a:b]], dest=[o[a - lo:b - lo]])
        return out
