"""NCCL buffer registration and symmetric windows for the device shuffle's buffers (issue 16).

Between processes on one host, NCCL's point-to-point transport moves a message through a FIFO
buffer in the receiver's memory, which the receiver's kernel then copies to the user's buffer:
each byte is read and written twice more on the GPUs, beside the radix passes that run with the
messages (on two H200s a chunk's pass took 3.4 ms beside them against 2.2 alone,
docs/BENCHMARKS.md).  Since NCCL 2.23 ("general buffer registration"), buffers allocated by
``ncclMemAlloc`` (CUDA VMM memory that peers can map) and registered by ``ncclCommRegister`` are
sent from and received into directly, with fewer of NCCL's blocks.

``GPUJOIN_NCCL_REGISTER=1``, the same on every rank (NCCL requires that every rank pass registered
buffers where one does), makes :func:`empty` return such buffers; ``dist.radix_shuffle`` takes the
send and receive buffers of a table that goes by send/recv from it (two H200s, 2^28 rows a rank:
the job 35.4 ms against 36.5).  A registration maps the block into every peer, so blocks are not
freed but kept by the communicator and reused for a request they hold (:class:`Pool`).  Off by
default: an ncclMemAlloc that fails on one rank leaves the others waiting in the shuffle's
collectives.  NCCL is reached through ctypes (CuPy's binding has no registration calls), in the
library CuPy loaded.

Copy-engine exchanges (NCCL 2.28; on by default where they apply: ``Communicator.nccl``,
:func:`copy_engine_wanted`).  On one host, a communicator made under NCCL's zero-CTA policy runs
``ncclAlltoAll`` and ``ncclAllGather`` between buffers in symmetric windows (``ncclMemAlloc``
blocks registered by ``ncclCommWindowRegister``, at the same offsets on every rank) on the GPUs'
copy engines, with no NCCL kernel on the SMs beside the radix passes: on two H200s a 9-bit pass
over 2^27 int64 pairs took 2.69 ms beside a 1 GiB-a-peer copy-engine all-to-all, 3.03 beside
NCCL's send/recv kernels and 2.35 alone, and the job 34.4 ms against 36.6 (docs/BENCHMARKS.md).
:func:`windows` takes such blocks (a collective, one allgather for a table's columns);
:func:`alltoall` and :func:`allgather` (in place: no copy of a rank's own block) post the
calls.  GPUJOIN_NCCL_CE=0 keeps NCCL's default policy and the send/recv path.

Reusable: :func:`empty` for any buffer that NCCL messages leave or land in; :func:`windows`,
:func:`alltoall` and :func:`allgather` for exchanges of equal blocks on one host.
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
    ``lib`` (the NCCL library's ctypes handle, or a stand-in with the same calls), as a buffer
    (``ncclCommRegister``) or, with ``window``, a symmetric window (``ncclCommWindowRegister``,
    a collective); :meth:`give` returns a block once nothing refers to it."""

    def __init__(self, lib, comm_ptr: int, window: bool = False, sync=None, trim=None):
        self.lib, self.comm, self.window, self.free, self.made, self.count = lib, comm_ptr, window, {}, 0, 0
        self.sync = sync or (lambda: None)  # (waits for the GPU's work before a window is freed)
        self.trim = trim or (lambda: None)  # (frees CuPy's cached blocks, which ncclMemAlloc cannot take)

    def free_bytes(self) -> int:
        return sum(k * len(blocks) for k, blocks in self.free.items())

    def take(self, nbytes: int, common=None) -> tuple[int, int, int, int]:
        """(device address, registration handle, size, number: the pool's count of
        registrations before it) of a block of at least ``nbytes``: :meth:`take_many` of one."""
        return self.take_many([nbytes], common)[0]

    def take_many(self, nbytes: list[int], common=None) -> list[tuple[int, int, int, int]]:
        """:meth:`take`'s block for each of ``nbytes``, in order.

        ``common`` (for windows, which every rank registers together and NCCL finds at a peer by
        their order): a function of this rank's list of block numbers that returns the numbers
        in every rank's list (an allgather), called once for the whole list where the blocks
        free on every rank hold it (a table's columns: one allgather, not one a column); then
        every rank reuses the same blocks, or every rank registers a new one; where an
        allocation fails on some rank, every rank frees the blocks free on all of them (none
        holds this request: a job whose tables grow keeps its smaller windows until then) and
        CuPy's cached blocks, and tries once more; a second failure raises MemoryError on all,
        and a failed registration RuntimeError on all.

        Raises
        ------
        RuntimeError
            ncclMemAlloc or the registration failed (their message named).
        MemoryError
            With ``common``: ncclMemAlloc failed on some rank.
        """
        everyone = None if common is None else set(
            common(sorted(b[3] for blocks in self.free.values() for b in blocks)))
        out = []
        for n in nbytes:
            size = rounded(n)
            fits = [b for k, blocks in self.free.items() if size <= k <= 2 * size for b in blocks
                    if everyone is None or b[3] in everyone]
            if fits:  # (the smallest that holds it, the first made: sizes follow the data)
                block = min(fits, key=lambda b: (b[2], b[3]))
                self.free[block[2]].remove(block)
                out.append(block)
            else:
                out.append(self._allocate(size, common))
        return out

    def _allocate(self, size: int, common) -> tuple[int, int, int, int]:
        """A new block of ``size`` bytes, allocated and registered (every rank alike with
        ``common``, as :meth:`take_many` says)."""
        ptr, handle = ctypes.c_void_p(), ctypes.c_void_p()
        for last in (False, True):
            rc = self.lib.ncclMemAlloc(ctypes.byref(ptr), ctypes.c_size_t(size))
            if common is None or common([-1] if rc == 0 else []):  # (-1: no block's number)
                break
            if rc == 0:
                self.lib.ncclMemFree(ptr)
            if not last:
                self._release(common)
                self.trim()
            else:
                raise MemoryError(f"ncclMemAlloc of {size / 2**30:.2f} GiB for the shuffle's copy-engine buffers "
                                  f"failed on a rank: use more ranks, or GPUJOIN_NCCL_CE=0")
        hint = "set GPUJOIN_NCCL_CE=0" if self.window else "unset GPUJOIN_NCCL_REGISTER"
        _check(self.lib, rc, f"ncclMemAlloc({size})", hint)
        if self.window:
            rc = self.lib.ncclCommWindowRegister(ctypes.c_void_p(self.comm), ptr, ctypes.c_size_t(size),
                                                 ctypes.byref(handle), WIN_COLL_SYMMETRIC)
        else:
            rc = self.lib.ncclCommRegister(ctypes.c_void_p(self.comm), ptr, ctypes.c_size_t(size),
                                           ctypes.byref(handle))
        if common is not None and not common([-1] if rc == 0 else []) and rc == 0:
            raise RuntimeError(f"ncclCommWindowRegister({size}) failed on another rank; {hint} to shuffle through "
                               f"NCCL's own buffers")
        if rc:
            self.lib.ncclMemFree(ptr)
            _check(self.lib, rc, f"ncclCommWindowRegister({size})" if self.window else f"ncclCommRegister({size})",
                   hint)
        self.made += size
        self.count += 1
        return ptr.value, handle.value, size, self.count - 1

    def give(self, block: tuple[int, int, int, int]) -> None:
        self.free.setdefault(block[2], []).append(block)

    def _release(self, common) -> bool:
        """Deregister and free the windows free on every rank (``common`` as in :meth:`take`),
        in the order of their numbers, once the GPU's work that may read them is done; whether
        there were any (the same answer on every rank)."""
        mine = {b[3]: b for blocks in self.free.values() for b in blocks}
        gone = [mine[n] for n in sorted(common(sorted(mine)))]
        if gone:
            self.sync()
        for block in gone:
            self.free[block[2]].remove(block)
            self.lib.ncclCommWindowDeregister(ctypes.c_void_p(self.comm), ctypes.c_void_p(block[1]))
            self.lib.ncclMemFree(ctypes.c_void_p(block[0]))
            self.made -= block[2]
        return bool(gone)


class _Owner:
    """Holds a block while an array over it lives; gives it back to its pool after."""

    def __init__(self, pool: Pool, block: tuple[int, int, int, int]):
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
    return _array(_pool(comm, "_registered", False), n, dtype)


def windows(comm, shapes: list[tuple[int, object]]) -> list:
    """A CuPy array of ``n`` items of ``dtype`` (uninitialized) for each ``(n, dtype)`` of
    ``shapes``, each in a symmetric window of the NCCL communicator of ``comm``
    (``dist.Communicator``), for :func:`alltoall` and :func:`allgather`.  A collective: every
    rank asks for the same shapes in the same order, and every rank takes the same windows (NCCL
    finds a peer's buffer through the window of the same registration); one allgather for all of
    them where windows free on every rank hold them.

    Raises
    ------
    MemoryError
        ncclMemAlloc failed on some rank (raised on every rank).
    RuntimeError
        The NCCL library lacks the calls (before 2.27) or a registration failed.
    """
    import numpy as np

    def common(numbers: list) -> list:
        return sorted(set.intersection(*(set(n) for n in comm.allgather(numbers))))

    pool = _pool(comm, "_windows", True)
    dtypes = [np.dtype(d) for _, d in shapes]
    blocks = pool.take_many([n * d.itemsize for (n, _), d in zip(shapes, dtypes)], common)
    return [_over(pool, b, n, d) for b, (n, _), d in zip(blocks, shapes, dtypes)]


def pooled_bytes(comm) -> int:
    """Bytes of ``comm``'s registered blocks free in its pools (GPU memory that CuPy's pool and
    the driver's free count do not show, but a shuffle can take)."""
    return sum(p.free_bytes() for p in (comm.__dict__.get("_registered"), comm.__dict__.get("_windows")) if p)


def _pool(comm, name: str, win: bool) -> Pool:
    pool = comm.__dict__.get(name)
    if pool is None:
        import cupy as cp

        pool = comm.__dict__[name] = Pool(_library(), comm.nccl().comm, win, cp.cuda.Device().synchronize,
                                          cp.get_default_memory_pool().free_all_blocks)
    return pool


def _array(pool: Pool, n: int, dtype):
    import numpy as np

    dtype = np.dtype(dtype)
    return _over(pool, pool.take(n * dtype.itemsize), n, dtype)


def _over(pool: Pool, block: tuple[int, int, int, int], n: int, dtype):
    """A CuPy array of ``n`` items of ``dtype`` over ``block``, which goes back to ``pool`` with it."""
    import cupy as cp

    mem = cp.cuda.UnownedMemory(block[0], block[2], _Owner(pool, block))
    return cp.ndarray((n,), dtype, cp.cuda.MemoryPointer(mem, 0))


#: ncclCommWindowRegister's flag for windows at the same offsets on every rank.
WIN_COLL_SYMMETRIC = 1
#: NCCL's zero-CTA policy (NCCL_CTA_POLICY), under which ncclAlltoAll between symmetric windows
#: of one host runs on the copy engines.
CTA_POLICY_ZERO = 2
#: ncclUint8, the byte type the all-to-all moves.
_UINT8 = 1


def copy_engine_wanted(one_host: bool) -> bool:
    """Whether a communicator about to be made should take NCCL's zero-CTA policy for
    :func:`alltoall` on the copy engines: its ranks share one host, GPUJOIN_NCCL_CE is not 0,
    NCCL_CTA_POLICY is unset (or already the zero policy), and the NCCL library CuPy loaded
    (2.28 or later) has ncclAlltoAll and ncclCommWindowRegister."""
    given = os.environ.get("NCCL_CTA_POLICY")
    if not one_host or os.environ.get("GPUJOIN_NCCL_CE", "1") == "0" or given not in (None, str(CTA_POLICY_ZERO)):
        return False
    try:
        from cupy.cuda import nccl

        if nccl.get_version() < 22800:
            return False
        lib = _library()
    except Exception:  # (no NCCL where CuPy runs: the caller has no NCCL communicator either)
        return False
    return all(hasattr(lib, name) for name in ("ncclAlltoAll", "ncclCommWindowRegister", "ncclCommWindowDeregister"))


def allgather(comm, send: int, recv: int, nbytes: int, stream: int) -> None:
    """``ncclAllGather`` of ``nbytes`` bytes a rank: ``send`` (device address) to block r of
    ``recv`` at every rank (this rank r's block too: in place where ``send`` is that block, which
    the copy engines then leave as it is), both in :func:`windows` blocks at the same offsets on
    every rank, on ``stream`` (a CUDA stream handle).

    Raises
    ------
    RuntimeError
        NCCL refused the call (its message named).
    """
    _exchange("ncclAllGather", comm, send, recv, nbytes, stream)


def alltoall(comm, send: int, recv: int, nbytes: int, stream: int) -> None:
    """``ncclAlltoAll`` of ``nbytes`` bytes a rank: block j of ``send`` (device address) to rank
    j, rank j's block into block j of ``recv`` (both in :func:`windows` blocks, at the same
    offsets on every rank), on ``stream`` (a CUDA stream handle).

    Raises
    ------
    RuntimeError
        NCCL refused the call (its message named).
    """
    _exchange("ncclAlltoAll", comm, send, recv, nbytes, stream)


def _exchange(name: str, comm, send: int, recv: int, nbytes: int, stream: int) -> None:
    lib = _library()
    rc = getattr(lib, name)(ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_size_t(nbytes), _UINT8,
                            ctypes.c_void_p(comm.nccl().comm), ctypes.c_void_p(stream))
    _check(lib, rc, f"{name}({nbytes} bytes a rank)", "set GPUJOIN_NCCL_CE=0")


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
        if hasattr(lib, "ncclCommWindowRegister"):
            lib.ncclCommWindowRegister.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                                   ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
            lib.ncclCommWindowDeregister.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclAllGather.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p]
        if hasattr(lib, "ncclAlltoAll"):
            lib.ncclAlltoAll.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                         ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        _LIB = lib
    return _LIB


def _check(lib, rc: int, what: str, hint: str = "unset GPUJOIN_NCCL_REGISTER") -> None:
    if rc:
        raise RuntimeError(f"{what} failed: NCCL error {rc} ({lib.ncclGetErrorString(rc).decode(errors='replace')}); "
                           f"{hint} to shuffle through NCCL's own buffers")
