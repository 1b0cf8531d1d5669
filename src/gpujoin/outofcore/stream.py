"""The host-resident streaming path: pinned buffers, chunks, and three CUDA streams.

Host data reaches the GPU in chunks through a reused pool of pinned (page-locked) buffers:
the host copies a chunk of a pageable array into a pinned staging buffer (several threads:
one core copies at about 10 GB/s, PCIe 5 moves 55), a DMA copy on the *copy-in* stream moves
it to the GPU, kernels run on the *compute* stream, and results go back on the *copy-out*
stream, so that the three overlap (paper 000 §3.2.4).  ``Streams(1)`` puts all three on one
stream, the baseline paper 000 measures against.

What is reusable here: :class:`Streams`, :func:`pinned_empty` (CuPy's pinned pool, which keeps
freed buffers for the next call), :class:`Uploader` (double-buffered staging of host chunks),
:func:`download_async` and :class:`Keepalive` (device buffers stay alive until the copies that
read them are done).  The Triton join (``outofcore/triton.py``), the out-of-core group-by and
the multi-GPU joins of paper 000 move their data through them.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Threads that copy pageable host data into pinned buffers (GPUJOIN_COPY_THREADS).
COPY_THREADS = int(os.environ.get("GPUJOIN_COPY_THREADS", str(min(8, os.cpu_count() or 1))))
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(1, COPY_THREADS), thread_name_prefix="gpujoin-copy")
    return _pool


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


def pinned_empty(n: int, dtype) -> np.ndarray:
    """An uninitialized NumPy array of ``n`` items in pinned host memory (from CuPy's pinned
    memory pool: freed buffers are kept for reuse, so repeated joins do not pin again)."""
    import cupy as cp

    dtype = np.dtype(dtype)
    mem = cp.cuda.alloc_pinned_memory(max(1, n * dtype.itemsize))
    return np.frombuffer(mem, dtype, n)


class Streams:
    """The copy-in, compute and copy-out streams of the pipeline (``count`` 3), or one stream
    for all three (``count`` 1).  Non-blocking: CUDA's legacy default stream does not serialize
    them."""

    def __init__(self, count: int = 3):
        import cupy as cp

        if count not in (1, 3):
            raise ValueError(f"streams must be 1 or 3, got {count!r}")
        self.count = count
        made = [cp.cuda.Stream(non_blocking=True) for _ in range(count)]
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


def h2d_async(dst, src: np.ndarray, stream) -> None:
    """DMA ``src`` (pinned host) into device array ``dst`` on ``stream``."""
    import cupy as cp

    if src.nbytes:
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.ctypes.data, src.nbytes,
                                    cp.cuda.runtime.memcpyHostToDevice, stream.ptr)


def d2d_async(dst, src, stream) -> None:
    import cupy as cp

    if src.nbytes:
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                                    cp.cuda.runtime.memcpyDeviceToDevice, stream.ptr)


def download_async(dst: np.ndarray, src, stream) -> None:
    """DMA device array ``src`` into pinned host array ``dst`` on ``stream``."""
    import cupy as cp

    if src.nbytes:
        cp.cuda.runtime.memcpyAsync(dst.ctypes.data, src.data.ptr, src.nbytes,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)


class Keepalive:
    """Device arrays that copies on other streams still read, released once their event has
    passed (CuPy's pool would otherwise hand the memory to the next allocation while a copy
    still reads it)."""

    def __init__(self):
        self._held: list[tuple[object, list]] = []

    def hold(self, event, arrays: list) -> None:
        self._held.append((event, arrays))

    def release_done(self) -> None:
        self._held = [(e, a) for e, a in self._held if not e.done]

    def drain(self) -> None:
        for e, _ in self._held:
            e.synchronize()
        self._held.clear()


def _aligned(n: int) -> int:
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
        import cupy as cp

        self.streams = streams
        self.slot_bytes = _aligned(max(1, slot_bytes))
        self._host = [pinned_empty(self.slot_bytes, np.uint8) for _ in range(2)]
        with streams.compute:
            self._dev = [cp.empty(self.slot_bytes, cp.uint8) for _ in range(2)]
        streams.compute.synchronize()
        self._copied = [None, None]   # DMA into the slot done (host may refill the staging)
        self._read = [None, None]     # compute done reading the slot's device buffer
        self._next = 0
        self.bytes = 0

    @staticmethod
    def slot_size(arrays_bytes: int, columns: int) -> int:
        """Bytes of a slot that holds ``arrays_bytes`` in ``columns`` 256-byte aligned pieces."""
        return arrays_bytes + 256 * columns

    def put(self, arrays: list[np.ndarray]):
        s = self._next
        self._next ^= 1
        need = sum(_aligned(a.nbytes) for a in arrays)
        if need > self.slot_bytes:
            raise ValueError(f"a chunk of {need:,} bytes does not fit the {self.slot_bytes:,}-byte staging slot")
        if self._copied[s] is not None:
            self._copied[s].synchronize()  # the slot's previous DMA has left the staging buffer
        pos, out, staged = 0, [], []
        for a in arrays:
            view = self._host[s][pos:pos + a.nbytes].view(a.dtype)
            parallel_copy(view, np.ascontiguousarray(a))
            staged.append(view)
            out.append(self._dev[s][pos:pos + a.nbytes].view(a.dtype))
            pos += _aligned(a.nbytes)
        stream = self.streams.copy_in
        if self._read[s] is not None:
            stream.wait_event(self._read[s])
        for d, h in zip(out, staged):
            h2d_async(d, h, stream)
        ev = record(stream)
        self._copied[s] = ev
        self.bytes += sum(a.nbytes for a in arrays)
        return out, ev, s

    def release(self, slot: int, event) -> None:
        """The kernels that read ``slot`` are enqueued; ``event`` marks their end."""
        self._read[slot] = event
