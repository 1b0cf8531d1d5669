"""NCCL user-buffer registration for the device shuffle's buffers (issue 16, an experiment).

Between processes on one host, NCCL's point-to-point transport moves a message through a FIFO
buffer in the receiver's memory, which the receiver's kernel then copies to the user's buffer:
each byte is read and written twice more on the GPUs, beside the radix passes that run with the
messages (on two H200s a chunk's pass took 3.4 ms beside them against 2.2 alone,
docs/BENCHMARKS.md).  Since NCCL 2.23 ("general buffer registration"), buffers allocated by
``ncclMemAlloc`` (CUDA VMM memory that peers can map) and registered by ``ncclCommRegister`` are
sent from and received into directly, with fewer of NCCL's blocks.

``GPUJOIN_NCCL_REGISTER=1``, the same on every rank (NCCL requires that every rank pass registered
buffers where one does), makes :func:`empty` return such buffers; ``dist.radix_shuffle`` takes its
send and receive buffers from it.  A registration maps the block into every peer, so blocks are
not freed but kept by the communicator and reused for a request they hold (:class:`Pool`):
memory that the shuffle's free-memory check and CuPy's pool do not see while the communicator
lives.  Not for production yet: an ncclMemAlloc that fails on one rank leaves the others waiting
in the shuffle's collectives.  NCCL is reached through ctypes (CuPy's binding has no
registration calls), in the library CuPy loaded.

Reusable: :func:`empty` for any buffer that NCCL messages leave or land in.
"""

from __future__ import annotations

import ctypes
import os

#: Allocation granularity asked of ncclMemAlloc's sizes (the VMM granularity of current GPUs).
GRANULE = 2 << 20


def enabled() -> bool:
    """Whether GPUJOIN_NCCL_REGISTER=1: the shuffle's buffers come from :func:`empty`."""
    return os.environ.get("GPUJOIN_NCCL_REGISTER", "0") == "1"


def rounded(nbytes: int) -> int:
    """``nbytes`` (at least 1) rounded up to a whole number of :data:`GRANULE`."""
    return -(-max(1, nbytes) // GRANULE) * GRANULE


class Pool:
    """Registered blocks of one communicator (``comm_ptr``: its ``ncclComm_t``), by rounded
    size: :meth:`take` reuses the smallest free block that holds the request (at most twice its
    size) or allocates and registers one through
    ``lib`` (the NCCL library's ctypes handle, or a stand-in with the same calls);
    :meth:`give` returns a block once nothing refers to it."""

    def __init__(self, lib, comm_ptr: int):
        self.lib, self.comm, self.free, self.made = lib, comm_ptr, {}, 0

    def take(self, nbytes: int) -> tuple[int, int, int]:
        """(device address, registration handle, size) of a block of at least ``nbytes``.

        Raises
        ------
        RuntimeError
            ncclMemAlloc or ncclCommRegister failed (their message named).
        """
        size = rounded(nbytes)
        fits = [k for k, blocks in self.free.items() if blocks and size <= k <= 2 * size]
        if fits:  # (the smallest free block that holds it: sizes follow the data, rank by rank)
            return self.free[min(fits)].pop()
        ptr, handle = ctypes.c_void_p(), ctypes.c_void_p()
        _check(self.lib, self.lib.ncclMemAlloc(ctypes.byref(ptr), ctypes.c_size_t(size)), f"ncclMemAlloc({size})")
        rc = self.lib.ncclCommRegister(ctypes.c_void_p(self.comm), ptr, ctypes.c_size_t(size), ctypes.byref(handle))
        if rc:
            self.lib.ncclMemFree(ptr)
            _check(self.lib, rc, f"ncclCommRegister({size})")
        self.made += size
        return ptr.value, handle.value, size

    def give(self, block: tuple[int, int, int]) -> None:
        self.free.setdefault(block[2], []).append(block)


class _Owner:
    """Holds a block while an array over it lives; gives it back to its pool after."""

    def __init__(self, pool: Pool, block: tuple[int, int, int]):
        self.pool, self.block = pool, block

    def __del__(self):
        self.pool.give(self.block)


def empty(comm, n: int, dtype):
    """A CuPy array of ``n`` items of ``dtype`` (uninitialized) in a block registered with the
    NCCL communicator of ``comm`` (``dist.Communicator``, whose pool it is: blocks live as long
    as it), for NCCL's sends and receives.  A block comes back to the pool when the arrays over
    it are gone, and is reused in stream order on the current stream (the shuffle's).

    Raises
    ------
    RuntimeError
        The NCCL library lacks the calls (before 2.19) or one failed.
    """
    import cupy as cp
    import numpy as np

    pool = comm.__dict__.get("_registered")
    if pool is None:
        pool = comm.__dict__["_registered"] = Pool(_library(), comm.nccl().comm)
    dtype = np.dtype(dtype)
    block = pool.take(n * dtype.itemsize)
    mem = cp.cuda.UnownedMemory(block[0], block[2], _Owner(pool, block))
    return cp.ndarray((n,), dtype, cp.cuda.MemoryPointer(mem, 0))


_LIB = None


def _library():
    """The NCCL library CuPy loaded (its path from this process's mappings), with the
    registration calls' prototypes."""
    global _LIB
    if _LIB is None:
        import importlib

        importlib.import_module("cupy.cuda.nccl")  # (loads libnccl)
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "libnccl.so" in line})
        where = paths[0] if paths else "libnccl.so.2"
        lib = ctypes.CDLL(where)
        for name in ("ncclMemAlloc", "ncclMemFree", "ncclCommRegister"):
            if not hasattr(lib, name):
                raise RuntimeError(f"GPUJOIN_NCCL_REGISTER=1: the NCCL library ({where}) has no {name} (NCCL 2.19 "
                                   f"or later has it); unset GPUJOIN_NCCL_REGISTER")
        lib.ncclMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.ncclMemFree.argtypes = [ctypes.c_void_p]
        lib.ncclCommRegister.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                         ctypes.POINTER(ctypes.c_void_p)]
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        _LIB = lib
    return _LIB


def _check(lib, rc: int, what: str) -> None:
    if rc:
        raise RuntimeError(f"{what} failed: NCCL error {rc} ({lib.ncclGetErrorString(rc).decode(errors='replace')}); "
                           f"unset GPUJOIN_NCCL_REGISTER to shuffle through NCCL's own buffers")
