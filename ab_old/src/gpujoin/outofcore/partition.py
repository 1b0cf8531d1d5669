"""Pass 1 of the out-of-core algorithms: host columns radix-partitioned on the GPU, chunk by
chunk, into the hybrid cache (paper 004 §5.3).

Each chunk of a relation streams in (``stream.Uploader``), is partitioned on the top ``bits``
bits of the murmur3 hash of its key with gpujoin's radix partition (histogram, scan,
shared-memory staged scatter: one tile of rows is ranked in shared memory and written out in
coalesced runs, the role of paper 004's Shared partitioner), and then either stays in GPU memory
(the cache) or is copied back to pinned host memory (the spill), chunks of the two kinds
interleaved in proportion to the cache's share (``plan.placement.cached_chunks``).  Every chunk
keeps its own partition offsets: the paper's "chunked" prefix sum, so no global
synchronization and no second pass over the input.

Adaptation to PCIe (the paper's GPU wrote CPU memory over cache-coherent NVLink 2.0): a GPU
cannot store to pageable host memory over PCIe, and SM stores to mapped pinned memory move in
at most 128-byte transactions, so here a whole partitioned chunk is the "second buffer level in
GPU memory" of the Hierarchical partitioner, flushed to pinned memory by one DMA per column on
its own stream (the copy engine, 55 GB/s, overlapped with the next chunk's partitioning).  The
cache/spill layout is per chunk, not per 2 MiB page.  Pass 1 hashes with a seed of its own, so
the in-core algorithms of pass 2 find their hash bits uniform in each partition.

Reusable: :func:`partition_pass` and :class:`PartitionedRelation` serve the Triton join, the
out-of-core group-by and, per GPU, the multi-GPU hybrid join of paper 000.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import progress
from .stream import HostArena, Keepalive, Streams, Uploader, aligned, download_async, record


@dataclass
class Piece:
    """One chunk after pass 1: its columns (key first) ordered by partition, in GPU memory
    (``cached``: of GPU ``device``) or pinned host memory, and its partition offsets (int64
    (2**bits + 1,))."""

    columns: list
    offsets: np.ndarray
    cached: bool
    device: int = 0
    _addresses: list | None = field(default=None, repr=False)

    def addresses(self) -> list[int]:
        """Each column's first byte's address (device, or page-locked host), taken once: pass 2
        copies a piece's slice of every partition by address, not through array slices."""
        if self._addresses is None:
            self._addresses = [c.data.ptr if self.cached else c.ctypes.data for c in self.columns]
        return self._addresses


@dataclass
class PartitionedRelation:
    """A relation after pass 1: pieces whose partition p together hold every row whose key
    hashes to p.  ``dtypes``: of the columns, key first."""

    bits: int
    dtypes: list
    pieces: list[Piece] = field(default_factory=list)
    arena: object = None
    _tab: object = field(default=None, repr=False)  # _table()'s arrays and the piece count they cover

    def close(self) -> None:
        """Unregister the spill's page-locked memory (the pieces must no longer be read)."""
        if self.arena is not None:
            self.arena.close()

    @property
    def fanout(self) -> int:
        return 1 << self.bits

    def sizes(self) -> np.ndarray:
        """Rows of each partition, int64 (fanout,)."""
        if not self.pieces:
            return np.zeros(self.fanout, np.int64)
        return np.sum([np.diff(pc.offsets) for pc in self.pieces], axis=0).astype(np.int64)

    @property
    def width(self) -> int:
        return sum(np.dtype(d).itemsize for d in self.dtypes)

    def bytes(self, cached: bool) -> int:
        return sum(int(pc.offsets[-1]) * self.width for pc in self.pieces if pc.cached == cached)

    def fetch(self, p: int, lo: int, hi: int, stream, out: list | None = None, stats: TransferStats | None = None):
        """Rows [lo, hi) of partition ``p`` (in piece order) into device arrays of the current GPU,
        copies enqueued on ``stream``: cached pieces device to device (over the peer link from
        another GPU's cache), spilled pieces host to device.  ``out``: the arrays to fill
        (allocated here when None).  Returns (arrays, H2D bytes); ``stats`` also counts them,
        and the peer-to-peer bytes.  See :func:`fetch_ranges`."""
        import cupy as cp

        if out is None:
            out = [cp.empty(hi - lo, d) for d in self.dtypes]
        return out, fetch_ranges([(self, p, lo, hi, out)], stream, stats)

    def _table(self):
        """The pieces as arrays, made once their list stops growing: offsets int64 (pieces,
        fanout + 1), column addresses int64 (pieces, columns), cached bool and device int64
        (pieces,), and the columns' item sizes int64 (columns,).  (Pass 2 asks for a partition
        of every piece a pair, on four GPUs in turn on one interpreter lock: for 32 pieces of two
        columns the Python loop took 58 us a side on a 2-core host, these arrays 31 us with the
        lists made of them.)"""
        if self._tab is None or self._tab[0] != len(self.pieces):
            k, ncols = len(self.pieces), len(self.dtypes)
            self._tab = (k, np.array([pc.offsets for pc in self.pieces], np.int64).reshape(k, self.fanout + 1),
                         np.array([pc.addresses() for pc in self.pieces], np.int64).reshape(k, ncols),
                         np.array([pc.cached for pc in self.pieces], bool),
                         np.array([pc.device for pc in self.pieces], np.int64),
                         np.array([np.dtype(d).itemsize for d in self.dtypes], np.int64))
        return self._tab[1:]

    def _copy_arrays(self, p: int, lo: int, hi: int, dst: list[int], here: int):
        """:meth:`copies` as int64 arrays (and a bool array of reads from host memory)."""
        offs, addr, cached, device, sizes = self._table()
        a, b = offs[:, p], offs[:, p + 1]
        end = np.cumsum(b - a)
        start = end - (b - a)  # the piece holds partition rows [start, end); take their overlap with [lo, hi)
        s0 = np.maximum(lo, start)
        rows = np.minimum(hi, end) - s0
        take = rows > 0
        rows, src0 = rows[take], (a + s0 - start)[take]
        pos = np.cumsum(rows) - rows
        host = ~cached[take]
        h2d = int(rows[host].sum()) * self.width
        p2p = int(rows[~host & (device[take] != here)].sum()) * self.width
        # one copy a piece and column (unified addressing: host or peer), piece by piece
        return ((np.asarray(dst, np.int64) + pos[:, None] * sizes).ravel(),
                (addr[take] + src0[:, None] * sizes).ravel(), (rows[:, None] * sizes).ravel(), h2d, p2p,
                np.repeat(host, len(sizes)))

    def copies(self, p: int, lo: int, hi: int, dst: list[int], here: int):
        """The copies that bring rows [lo, hi) of partition ``p`` to the column addresses ``dst``
        on GPU ``here``: (destination addresses, source addresses, byte counts, bytes from
        host memory, bytes from other GPUs, whether each copy reads host memory), one a piece
        and column."""
        d, src, n, h2d, p2p, host = self._copy_arrays(p, lo, hi, dst, here)
        return d.tolist(), src.tolist(), n.tolist(), h2d, p2p, host.tolist()


def fetch_ranges(ranges: list, stream, stats: TransferStats | None = None, device_stream=None) -> int:
    """Rows [lo, hi) of partition p of each ``(relation, p, lo, hi, out)`` into the device arrays
    ``out`` (a column each) on ``stream``; returns the bytes from host memory (``stats`` also
    counts them, and the peer-to-peer bytes).

    One copy a piece and column, issued by address (CuPy slices cost ~10 us each, and on four
    H200s pass 2 was bound by them), all of them in one call where the CUDA runtime batches
    copies (``stream.copy_batch``): a partition of a 2^31-row relation in 2^26-row chunks is 32
    pieces a column.  With ``device_stream``, the pieces in GPU memory (this GPU's cache, a
    peer's over NVLink) are copied on it, beside the host pieces on ``stream``, which then waits
    for them: in one stream a peer's piece held the host link idle (on two H200s GPU 0's pass 2
    took 16 ms a pair against GPU 1's 13.4)."""
    import cupy as cp

    from .stream import copy_batch, record

    here = cp.cuda.Device().id
    parts = [rel._copy_arrays(p, lo, hi, [a.data.ptr for a in out], here) for rel, p, lo, hi, out in ranges]
    dsts, srcs, sizes, host = (np.concatenate([c[i] for c in parts]) for i in (0, 1, 2, 5))
    dev = ~host if device_stream is not None else np.zeros(host.size, bool)
    split = bool(dev.any())
    if split:
        device_stream.wait_event(record(stream))  # after what ``stream`` waits for (the pool's reuse)
        copy_batch(dsts[dev], srcs[dev], sizes[dev], device_stream)
    copy_batch(dsts[~dev], srcs[~dev], sizes[~dev], stream)
    if split:
        stream.wait_event(record(device_stream))
    h2d = sum(c[3] for c in parts)
    if stats is not None:
        stats.h2d += h2d
        stats.p2p += sum(c[4] for c in parts)
    return h2d


@dataclass
class TransferStats:
    """Bytes that crossed PCIe each way and between GPUs, and pass times (seconds)."""

    h2d: int = 0
    d2h: int = 0
    p2p: int = 0
    phases: dict = field(default_factory=dict)


def hash_digits(bits: int):
    """The pass-1 digits: the top ``bits`` bits of the seeded murmur3 hash of the key, independent
    of the unseeded hash whose bits the in-core algorithms and the HyperLogLog sketch use (with
    the unseeded hash's top bits, each partition's sketch used 1/2^bits of its registers and
    under-counted its groups 2^bits-fold, which sent HGB into its overflow path)."""
    from ..cuda.primitives import Digits

    return Digits(bits=bits, shift=32 - bits, use_hash=2)


class _CacheArena:
    """The cached chunks' partitioned columns, carved from one device allocation a relation (a
    pool allocation a chunk and column, near the memory_limit cap, made CuPy's pool free every
    cached block and call cudaMalloc again in the middle of pass 1: on four H200s 143 cudaMalloc
    and 229 cudaFree calls, each synchronizing its GPU, left the links idle up to 160 ms)."""

    def __init__(self, rows: list[int], columns: list[np.ndarray], streams: Streams):
        import cupy as cp

        self.dtypes = [c.dtype for c in columns]
        size = sum(aligned(r * d.itemsize) for r in rows for d in self.dtypes)
        with streams.compute:
            self.buf = cp.empty(max(1, size), cp.uint8)
        self.pos = 0

    def take(self, rows: int) -> tuple:
        """(keys, [values]) device views of ``rows`` rows for the next cached chunk."""
        views = []
        for d in self.dtypes:
            views.append(self.buf[self.pos:self.pos + rows * d.itemsize].view(d))
            self.pos += aligned(rows * d.itemsize)
        return views[0], views[1:]


def partition_pass(columns: list[np.ndarray], bits: int, chunk_rows: int, cached: list[bool],
                   streams: Streams, uploader: Uploader, stats: TransferStats, label: str = "",
                   starts: list[int] | None = None) -> PartitionedRelation:
    """Pass 1 over one relation's host ``columns`` (key first, int32/int64; then any 1-8 byte
    columns), ``chunk_rows`` rows at a time; ``label`` names the relation in the progress report.
    ``starts``: the first rows of the chunks this GPU takes (default: every chunk; the
    multi-GPU joins give each GPU every D-th chunk, paper 000 §3.1's round-robin).

    cached[c] says whether chunk c (of ``starts``) stays in GPU memory.  With ``bits`` 0 (the in-core
    placement: one partition) the chunks are copied into one device array a column.  Returns the PartitionedRelation;
    every copy it enqueued has finished.  Its spill lives in ``rel.arena``: close it (the page-locked
    buffer goes back for reuse) when the relation is no longer read.
    """
    import cupy as cp

    from ..cuda.primitives import radix_partition

    n = columns[0].size if columns else 0
    rel = PartitionedRelation(bits, [c.dtype for c in columns])
    everything = starts is None
    starts = list(range(0, n, chunk_rows)) if everything else list(starts)
    if not starts:
        return rel
    here = cp.cuda.Device().id
    shown = progress.task(f"{'copy in' if not bits else 'pass 1: partition'} {label}".rstrip(),
                          sum(min(chunk_rows, n - a) for a in starts))
    keep = Keepalive()
    width = sum(c.dtype.itemsize for c in columns)
    spilled = sum(min(chunk_rows, n - a) for i, a in enumerate(starts) if not cached[i])
    rel.arena = HostArena(spilled * width + 256 * len(columns) * len(starts)) if spilled else None
    if not bits:  # in core: every chunk straight into one device copy of the relation
        if not everything:
            raise ValueError("the in-core placement (bits 0) copies every chunk of the relation")
        try:
            with streams.compute:
                whole = [cp.empty(n, c.dtype) for c in columns]
            streams.compute.synchronize()
            for a in starts:
                uploader.put([c[a:a + chunk_rows] for c in columns], dest=[w[a:a + chunk_rows] for w in whole])
                shown.advance(min(chunk_rows, n - a))
            streams.copy_in.synchronize()
        except BaseException:
            rel.close()
            raise
        rel.pieces.append(Piece(whole, np.array([0, n], np.int64), True, here))
        stats.h2d += sum(c.nbytes for c in columns)
        return rel
    try:
        digits = hash_digits(bits)
        cache = _CacheArena([min(chunk_rows, n - a) for i, a in enumerate(starts) if cached[i]], columns, streams)
        pending = uploader.put([c[starts[0]:starts[0] + chunk_rows] for c in columns])
        for i, a in enumerate(starts):
            views, ev, slot = pending
            streams.compute.wait_event(ev)
            with streams.compute:
                k, vals, offs = radix_partition(views[0], views[1:], digits, stable=False,
                                                out=cache.take(views[0].size) if cached[i] else None)
                parts = [k, *vals]
                uploader.release(slot, record(streams.compute))
            if i + 1 < len(starts):  # stage the next chunk while this one is partitioned
                b = starts[i + 1]
                pending = uploader.put([c[b:b + chunk_rows] for c in columns])
            offsets = cp.asnumpy(offs, stream=streams.compute)
            if cached[i]:
                rel.pieces.append(Piece(parts, offsets, True, here))
            else:
                host = [rel.arena.take(p.size, p.dtype) for p in parts]
                streams.copy_out.wait_event(record(streams.compute))
                for h, d in zip(host, parts):
                    download_async(h, d, streams.copy_out)
                    stats.d2h += d.nbytes
                keep.hold(record(streams.copy_out), parts)
                rel.pieces.append(Piece(host, offsets, False, -1))
            keep.release_done()
            shown.advance(min(chunk_rows, n - a))
    except BaseException:  # Ctrl-C too: no page-locked memory stays registered
        streams.synchronize()
        rel.close()
        raise
    stats.h2d += sum(min(chunk_rows, n - a) * c.itemsize for c in columns for a in starts)
    streams.synchronize()
    keep.drain()
    shown.done()
    return rel
