"""Paper 001's device shuffle with its partition doing the local join's first radix pass.

The one-level shuffle (``device_shuffle.exchange_many``) partitions each table by destination
rank, and the local join (PHJ, ``cuda.join.phj``) then partitions the received rows again, most
significant digit first, a read and write of every column a pass.  Here one pass does both: a
row's digit is its rank (the device shuffle's hash, so equal keys meet on one rank) followed by
the top bits of the digit PHJ partitions on (``partition.cu``'s ``use_hash`` 3), 9 bits in all,
so that every message leaves grouped by those bits.  A rank receives each source's rows in
that order, and PHJ's remaining passes read the pieces (``cuda.primitives.Runs``) as if one pass
had grouped them: at 2^28 rows a rank and 17 radix bits on two ranks, 8 of the bits travel with
the shuffle and one 9-bit pass is left, where a partition by rank and two passes (9 + 8) ran.

Also as in ``exchange_many``: this rank's own rows go straight from the pass to their place in
the receive buffer (no self-copy), messages are cut into 16-byte-aligned bodies and short
heads and tails (``comm.DeviceLayout``), and each table goes in chunks, a chunk partitioned
while the chunk before is on the links.  Then the first table's remaining pass runs while the
second table's messages are still on the links (:func:`finished`), so the local join partitions
only the second.  On one host the messages go by NCCL's copy engines (:class:`BlockLayout`),
leaving the SMs to the passes.  Each table's histogram stores its rows' digits for its passes
to read back (:data:`DIGIT_CACHE_ROOM`).  On two H200s at 2^28 rows a rank: 34.4 ms by the copy
engines, 36.6 by send/recv and 47.9 for the shuffle without the pass (bc6e383); the whole job
27.6-28.3 ms, 1.75-1.81x the one GPU's join of the whole job (96c3bab, docs/BENCHMARKS.md).

Reusable: ``radix_partition(runs=...)`` (a partition that starts from pieces of rows grouped on
their top digits, wherever they lie), ``scatter_placed`` (one pass whose output places the caller
moves), ``DeviceTable.partitioning`` (which the device join hands to PHJ),
``DeviceLayout.received`` (where each peer's message pieces land), and :class:`BlockLayout` (an
exchange of padded blocks by the copy engines, for any shuffle of about even messages).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import registered
from .comm import ALIGN_ROWS, Communicator, DeviceLayout


#: Rows a chunk starts on a multiple of (the passes read any row range; this keeps loads aligned).
CHUNK_ALIGN = 32
#: The copy-engine exchange pads every message of a chunk to the chunk's largest; where that
#: moves more than this many times the rows that the busiest rank sends or receives, the table
#: goes by send/recv instead (GPUJOIN_NCCL_CE=force on every rank: by the copy engines whatever
#: the padding, ``Communicator.copy_engine``).
PAD_LIMIT = 1.25
#: Each table's histogram stores its rows' digits (2 bytes a row) for the passes to read back
#: (``radix_histogram(digit_cache=...)``), where free memory is this many times their size;
#: GPUJOIN_DIGIT_CACHE=0: the passes hash every key again.
DIGIT_CACHE_ROOM = 8


class BlockLayout:
    """One table's places in the copy-engine exchange (``dist.registered``), in one window a
    column of two regions of ``rows`` rows each: chunk c has ``blocks[c]`` rows a rank at row
    ``at[c]`` of each region, the chunk's largest message (of every rank to every rank, itself
    included) rounded up to ``ALIGN_ROWS``.

    Two ranks: an in-place all-gather.  A rank's message for the other goes to its own block of
    the first region (``at[c] + rank * blocks[c]``), which the all-gather copies to the same
    place at the other rank, where the other's block is what it receives; the rank's own rows go
    to its block of the second region.  Only the messages cross HBM and the link (an
    all-to-all's copy engines would also copy each rank's own block: 2 GiB more a chunk of 2^27
    int64 pairs).  More ranks: an all-to-all from the first region (block d for rank d) into the
    second (block s from rank s).

    ``rows``: int64 (P ranks, C chunks, P destinations), every rank's rows of each chunk to each
    rank; ``me``: this rank."""

    def __init__(self, rows: np.ndarray, me: int):
        P = rows.shape[0]
        self.blocks = -(-rows.max(axis=(0, 2)) // ALIGN_ROWS) * ALIGN_ROWS  # (C,)
        self.at = P * (np.cumsum(self.blocks) - self.blocks)
        self.rows = int(P * self.blocks.sum())  # of each region
        busiest = max(int(rows.sum(axis=(1, 2)).max()), int(rows.sum(axis=(0, 1)).max()))
        self.padding = self.rows / max(1, busiest)
        self.rank, self.mine, self.here = me, rows[me], rows[:, :, me]
        self.gather = P == 2

    def _place(self, c: int, j: int, own: bool) -> int:
        """Row of the window where chunk ``c``'s block j of the first region (``own``: of the
        second) starts."""
        return int(own) * self.rows + int(self.at[c] + j * self.blocks[c])

    def shifts(self, c: int) -> list[int]:
        """What chunk ``c``'s pass adds to the scan of its counts, destination by destination:
        the place of its rows for rank d, less the rows for the ranks before."""
        me, P = self.rank, self.mine.shape[1]
        if self.gather:
            places = [self._place(c, me, d == me) for d in range(P)]
        else:
            places = [self._place(c, d, False) for d in range(P)]
        return [places[d] - int(self.mine[c, :d].sum()) for d in range(P)]

    def pieces(self) -> list[tuple[int, int, int, int]]:
        """(message: chunk * P + source, row of the window, row in the message, rows)."""
        P, me = self.here.shape[0], self.rank
        return [(c * P + s, self._place(c, s, s == me if self.gather else True), 0, int(self.here[s, c]))
                for c in range(self.blocks.size) for s in range(P)]

    def post(self, comm: Communicator, bufs: list, c: int, stream) -> None:
        """Chunk ``c``'s exchange of every column of ``bufs`` (:func:`registered.windows` blocks
        of ``2 * rows`` rows) on ``stream``."""
        n = int(self.blocks[c])
        for b in bufs if n else []:  # (a chunk of no rows anywhere: nothing to post on any rank)
            w = b.dtype.itemsize
            if self.gather:
                registered.allgather(comm, b.data.ptr + self._place(c, self.rank, False) * w,
                                     b.data.ptr + self._place(c, 0, False) * w, n * w, stream.ptr)
            else:
                registered.alltoall(comm, b.data.ptr + self._place(c, 0, False) * w,
                                    b.data.ptr + self._place(c, 0, True) * w, n * w, stream.ptr)


def _block_layout(comm: Communicator, rows: np.ndarray) -> BlockLayout | None:
    """The copy-engine layout of a table (``rows`` as :class:`BlockLayout`'s), where ``comm``'s
    NCCL runs all-to-alls on the copy engines and the padding stays within :data:`PAD_LIMIT`;
    else None (send/recv).  The same answer on every rank (``rows`` is every rank's)."""
    if not comm.copy_engine:
        return None
    layout = BlockLayout(rows, comm.rank)
    return layout if layout.padding <= PAD_LIMIT or comm.copy_engine == "force" else None


def top_bits(parts: int, radix_bits: int) -> int:
    """Bits of a ``radix_bits``-bit PHJ digit that the shuffle's one pass takes beside the rank
    of ``parts`` ranks: what a 9-bit pass leaves after the rank's bits, at most ``radix_bits``."""
    from ..cuda.kernels import UNSTABLE_PASS_BITS

    return max(0, min(radix_bits, UNSTABLE_PASS_BITS - (parts - 1).bit_length()))


def saves_a_pass(parts: int, radix_bits: int) -> bool:
    """Whether the local join of ``radix_bits`` bits runs fewer passes after this shuffle (with
    at least one left: the pieces are read by a pass, not copied)."""
    from ..cuda.kernels import pass_count

    top = top_bits(parts, radix_bits)
    return 0 < top < radix_bits and pass_count(radix_bits - top, True) < pass_count(radix_bits, True)


#: The key dtypes of this shuffle (compared as dtypes: their names took microseconds a call).
_INT_KEYS = (np.dtype(np.int32), np.dtype(np.int64))


def eligible(table, key: str) -> bool:
    """Whether ``table`` (DeviceTable) can take this shuffle on key column ``key``: an int32 or
    int64 key, no validity masks, every other column of one width (one unstable pass moves them
    all), as PHJ-TR's own passes need."""
    from ..cuda.primitives import _unstable

    return (table[key].dtype in _INT_KEYS and not table.validity and not table.dictionaries.get(key)
            and _unstable([table[n] for n in table.column_names if n != key], False))


def overlapped() -> bool:
    """Whether a chunk's pass runs beside the NCCL group of the chunk before (the default), or
    (GPUJOIN_SHUFFLE_OVERLAP=0, the same on every rank) after it: what the overlap costs the
    passes that run beside NCCL's kernels, measured."""
    import os

    return os.environ.get("GPUJOIN_SHUFFLE_OVERLAP", "1") != "0"


@dataclass(eq=False)  # (its arrays compare by identity only: fits)
class Counted:
    """:func:`count`'s launches: each table's chunk histograms of the shuffle's fused digit, its
    stored digits, and the events after them, for ``radix_bits`` on ``parts`` ranks in
    ``chunks`` chunks, of the key and value arrays named (taken by :func:`exchange_partitioned`
    only where its own are these very arrays and its arguments the same)."""

    parts: int
    radix_bits: int
    chunks: int
    columns: list  # per table: its key array, then its other columns'
    digits: object
    histograms: list  # per table, per chunk: (lo, hi, counts a tile or None)
    counted: list  # per table: the event after its histograms (main stream)
    sums: list
    ready: list  # per table: the event after its sums (their stream)
    caches: list
    start: object

    def fits(self, tables: list, keys: list[str], parts: int, radix_bits: int, chunks: int) -> bool:
        return ((self.parts, self.radix_bits, self.chunks) == (parts, radix_bits, chunks)
                and len(self.columns) == len(tables)
                and all(len(c) == len(t.column_names) and c[0] is t[k]
                        and all(a is b for a, b in zip(c[1:], (t[n] for n in t.column_names if n != k)))
                        for c, t, k in zip(self.columns, tables, keys)))


def count(tables: list, keys: list[str], parts: int, radix_bits: int, chunks: int) -> Counted:
    """The first step of :func:`exchange_partitioned` for ``parts`` ranks, alone and local (no
    collective): each table's histograms of the fused digit (destination rank and the top
    :func:`top_bits` bits of PHJ's ``radix_bits``-bit digit) over ``chunks`` chunks, launched on
    the current stream, with the digits stored where memory allows.  ``dist.join`` launches it
    before the job's collectives, on what every rank's own rows suggest, so that the GPU counts
    while the ranks agree (the host's checks and allgathers had left it idle about 0.4 ms of a
    29 ms job on two H200s); the shuffle takes it if the agreed arguments are the same."""
    import cupy as cp

    from ..cuda.primitives import FUSED_HASH, Digits, radix_histogram, radix_of, row_sums
    from .device_shuffle import _net_stream, chunk_bounds

    top = top_bits(parts, radix_bits)
    digits = Digits(bits=(parts - 1).bit_length() + top, shift=radix_bits - top, use_hash=FUSED_HASH,
                    base=parts | top << 32)
    radix, G, main = radix_of(digits.bits), 1 << top, cp.cuda.get_current_stream()
    # the sums on a stream of their own: the next table's histograms (and the first pass, after
    # the last table's) need not wait for them (0.08 ms of short kernels on two H200s); of the
    # highest priority, so that their blocks go before the next histogram's (at the same
    # priority the first table's counts reached the host 0.3 ms later)
    on_side = _net_stream("sums")
    start = main.record()
    columns, histograms, counted, sums, ready, caches = [], [], [], [], [], []
    for t, k in zip(tables, keys):
        vals = [t[n] for n in t.column_names if n != k]
        caches.append(_digit_cache(t.num_rows))
        chunks_of = [(lo, hi, radix_histogram(t[k][lo:hi], [v[lo:hi] for v in vals], digits, stable=False,
                                              digit_cache=_rows(caches[-1], lo, hi))
                      if hi > lo else None) for lo, hi in chunk_bounds(t.num_rows, chunks, CHUNK_ALIGN)]
        columns.append([t[k]] + vals)
        histograms.append(chunks_of)
        # rows a (chunk, destination, top digit): one launch a chunk (CuPy's sums and their
        # concatenation had taken about 0.1 ms of the host's time a table, on its critical path)
        sums.append(cp.empty(len(chunks_of) * parts * G, cp.int64))
        counted.append(main.record())
        on_side.wait_event(counted[-1])
        with on_side:
            for j, (_, _, c) in enumerate(chunks_of):
                part = sums[-1][j * parts * G:(j + 1) * parts * G]
                if c is None:
                    part.fill(0)
                else:
                    row_sums(c, c.size // radix, part)
            ready.append(on_side.record())
    return Counted(parts, radix_bits, chunks, columns, digits, histograms, counted, sums, ready, caches, start)


def exchange_partitioned(tables: list, keys: list[str], comm: Communicator, radix_bits: int,
                         stats: dict | None = None, finish_first: bool = True, chunk_rows: int | None = None,
                         counted: Counted | None = None, most_rows: int | None = None) -> list:
    """Shuffle ``tables`` (DeviceTables, :func:`eligible` on ``keys``: one key column each) so
    that equal keys meet on one rank, each message grouped by the top :func:`top_bits` bits of
    the ``radix_bits``-bit digit of PHJ (a collective: every rank passes the same columns and
    ``radix_bits``).  Returns the DeviceTables of the rows every rank sent here, each with
    ``partitioning`` (``cuda.table.HashPartitioning``) saying where those pieces lie; a join of
    two of them (``gpujoin.join``, PHJ chosen or named) partitions only the bits below.  With
    ``finish_first``, the first table's remaining passes run while the last table's messages are
    on the links (:func:`finished`): that table arrives wholly partitioned, its
    ``partitioning.ready`` the event after those passes.  Each table goes in
    chunks of ``chunk_rows`` (default ``device_shuffle.chunk_rows_default()``), a chunk's pass
    beside the chunk before's NCCL group (after it where not :func:`overlapped`).

    Where the ranks share a host and NCCL runs all-to-alls on the copy engines
    (``Communicator.copy_engine``, ``dist.registered``), a table whose messages are about even
    (:data:`PAD_LIMIT`) goes as one copy-engine exchange a chunk and column (an in-place
    all-gather on two ranks, else an all-to-all), every message padded to the chunk's largest
    (:class:`BlockLayout`), with no NCCL kernel beside the passes; else by
    NCCL sends and receives (:class:`comm.DeviceLayout`).  Such a table arrives finished too
    (its blocks' gaps hold no rows; the local join would run the same passes).

    ``counted``: :func:`count`'s launches for these tables, taken where they fit the agreed
    arguments (else counted again).  ``most_rows``: the most rows any rank's table has, where
    the caller knows it (the same on every rank; else the ranks gather it).  ``stats`` gains
    bytes_sent, wire_bytes_sent (padding included) and bytes_received (rows of other ranks
    only), shuffle_copy_engine (the tables that went by the copy engines) and
    shuffle_counted_early (whether ``counted`` was taken).
    GPU memory: each table's send buffer (the rows for other ranks; every rank's padded blocks,
    its own too, by the copy engines) and its received rows, in one allocation a column
    (registered with NCCL under GPUJOIN_NCCL_REGISTER=1, a symmetric window by the copy engines:
    ``dist.registered``).

    Raises
    ------
    ValueError
        A table is not :func:`eligible`, or ``radix_bits`` leaves no bits to this shuffle.
    MemoryError
        On every rank, before data moves, when some rank's buffers would not fit its free memory.
    """
    import cupy as cp

    from ..cuda.kernels import pass_count
    from ..cuda.primitives import device_words, exclusive_scan, radix_of, scatter_placed
    from ..cuda.runtime import free_bytes
    from .device_shuffle import _net_stream

    P, me, T = comm.size, comm.rank, len(tables)
    top = top_bits(P, radix_bits)
    for t, k in zip(tables, keys):
        if not eligible(t, k):
            raise ValueError(f"exchange_partitioned: key {k!r} must be int32 or int64, with no validity masks in "
                             f"the table and its other columns of one width")
    if P < 2 or not top or comm.nccl() is None:
        raise ValueError(f"exchange_partitioned needs two or more ranks on GPUs of their own and radix bits to take "
                         f"(ranks {P}, radix_bits {radix_bits})")
    G = 1 << top
    main, net = cp.cuda.get_current_stream(), _net_stream()
    # every rank cuts each table into as many chunks (its largest slice's), each partitioned and
    # sent apart, so that the links start after a chunk's pass rather than a table's
    if most_rows is None:
        most_rows = int(comm.allgather_array(np.array([max(t.num_rows for t in tables)], np.int64)).max())
    C = chunk_count(max(most_rows, 0), chunk_rows)
    early_counts = counted is not None and counted.fits(tables, keys, P, radix_bits, C)
    if not early_counts:
        counted = count(tables, keys, P, radix_bits, C)
    digits, radix, start = counted.digits, radix_of(counted.digits.bits), counted.start
    # per table: (key, values, per chunk (lo, hi, counts a tile or None)); its rows a (chunk,
    # destination, top digit) and when those are known; its stored digits
    parts = [(c[0], c[1:], h) for c, h in zip(counted.columns, counted.histograms)]
    sums, ready, caches, hist_done = counted.sums, counted.ready, counted.caches, counted.counted
    counted = None  # (each table's digits go once its last pass has read them)
    width = [t[k].dtype.itemsize + sum(v.dtype.itemsize for v in vals) for t, k, (_, vals, _) in
             zip(tables, keys, parts)]

    def shifted(i: int, layout, send_at, base: int):
        """Table i's shifts of its chunks' scans (int64 (C * P,) on the device, a destination's
        a chunk): the chunk's part of the send buffer, this rank's digits to their place in the
        receive buffer and the later ranks' down over the gap they leave."""
        if isinstance(layout, BlockLayout):
            add = np.array([layout.shifts(c) for c in range(C)], np.int64)
        else:
            add = _send_recv_shifts(layout, send_at, base, rows[:, i], me)
        with scans:
            return device_words([int(w) for w in add.ravel().view(np.uint64)]).view(cp.int64)

    def placed(i: int, c: int):
        """Unit (table i, chunk c)'s scatter offsets: the scan of the chunk's counts, each
        destination's moved to its place (:func:`shifted`) in the same launch."""
        _, _, _, _, units, shifts = plans[i]
        _, _, counts, offs = units[c]
        return exclusive_scan(counts, out=offs, shifts=shifts[c * P:(c + 1) * P], segment=G * (counts.size // radix))

    # A chunk's scan runs on a stream of its own, of the highest priority, launched once the pass
    # before is queued (the first's while the GPU counts the later tables): its blocks go among
    # that pass's, and no launch gap stands between two passes (with the shifts in the scan's
    # launch, the later passes took 0.1 ms less on two H200s); the pass waits for its event.  The
    # scans' offsets and shifts come from that stream's part of CuPy's pool (a block of the main
    # stream's may still be read by its queued kernels).
    scans, scanned = _net_stream("scans"), {}

    def scan_ahead(i: int, c: int) -> None:
        if plans[i] is not None and plans[i][4][c][2] is not None:
            scans.wait_event(hist_done[i])
            with scans:
                placed(i, c)
            scanned[i, c] = scans.record()

    def offsets(i: int, c: int):
        if (i, c) not in scanned:
            scan_ahead(i, c)
        main.wait_event(scanned.pop((i, c)))
        return plans[i][4][c][3]

    # The first table's counts are gathered, its buffers made and its first chunk's pass launched
    # while the GPU still counts the later tables: the host's part (the counts to the host, their
    # allgather, the layouts) had left the GPU idle about 1 ms.  The later tables' counts are
    # gathered before any message is posted, so that a MemoryError still comes on every rank
    # before data moves.  Every buffer is made before the passes it waits on (an allocation that
    # the pool must take from the driver, cudaMalloc, waits for the GPU, which would hold the
    # later passes back until the NCCL groups before them had ended); a chunk's places are
    # scanned beside the pass before (scan_ahead).
    side = cp.cuda.Stream(non_blocking=True)
    new = (lambda n, dtype: registered.empty(comm, n, dtype)) if registered.enabled() else cp.empty
    # (two finishing passes over padded windows are bounded by Runs.rows, tested on one GPU
    # only: the copy engines wait for a run of that path on several)
    one_pass = pass_count(radix_bits - top, True) == 1
    plans, blocks, gathered, marks, free, pooled, early = [None] * T, [None] * T, [], None, None, None, False
    for members in ([0], list(range(1, T))) if T > 1 else ([0],):
        # copies only on the side stream (not behind the later tables' counts on the main stream;
        # a kernel there, a concatenate, waited for the first pass's blocks: 0.85 ms idle)
        side.wait_event(ready[members[-1]])
        mine = np.concatenate([cp.asnumpy(sums[i], stream=side) for i in members])
        room = [free_bytes(), registered.pooled_bytes(comm)] if free is None else [0, 0]
        got = comm.allgather_array(np.append(mine, room))
        free, pooled = (got[:, -2], got[:, -1]) if free is None else (free, pooled)
        gathered.append(got[:, :-2].reshape(P, len(members), C, P, G))
        # rows a digit, every rank's: (rank, table, chunk, destination, top digit)
        cnt = np.concatenate(gathered, axis=1)
        rows = cnt.sum(axis=4)  # (rank, table, chunk, destination)
        for i in members:
            blocks[i] = _block_layout(comm, rows[:, i]) if one_pass else None
        try:
            _check_room(rows, width, free, finish_first, blocks, pooled)
        except MemoryError:
            if all(blocks[i] is None for i in members):
                raise
            for i in members:  # (the copy engines' padded regions do not fit: send/recv may)
                blocks[i] = None
            _check_room(rows, width, free, finish_first, blocks, pooled)
        if marks is None and stats is not None:
            marks = [("start", start), ("counted", main.record())]
        for i in members:
            columns = [parts[i][0]] + parts[i][1]
            if blocks[i] is not None:  # (a collective: every rank takes its windows alike)
                layout, send_at, base = blocks[i], None, 0  # (its pieces: rows of the whole window)
                bufs = registered.windows(comm, [(2 * layout.rows, a.dtype) for a in columns])
            else:
                layout, send_at, base = _layout(rows[:, i], me)
                bufs = [new(base + layout.rows, a.dtype) for a in columns]
            with scans:
                units = [(lo, hi, counts, None if counts is None else cp.empty(counts.size + 1, cp.int64))
                         for lo, hi, counts in parts[i][2]]
            plans[i] = (layout, send_at, base, bufs, units, shifted(i, layout, send_at, base))
        if not early and parts[0][2][0][2] is not None:
            scan_ahead(0, 0)
            if stats is not None:
                marks.append(("planned", main.record()))
            lo, hi, _ = parts[0][2][0]
            scatter_placed(parts[0][0][lo:hi], [v[lo:hi] for v in parts[0][1]], digits, offsets(0, 0),
                           plans[0][3][0], plans[0][3][1:], _rows(caches[0], lo, hi))
            early = True
            if C > 1:
                scan_ahead(0, 1)

    out, arrived, overlap = [], [], overlapped()
    for i, (t, k) in enumerate(zip(tables, keys)):
        key, vals, _ = parts[i]
        layout, _, base, bufs, units, _ = plans[i]
        got = [b[base:] for b in bufs]
        for c, (lo, hi, counts, _) in enumerate(units):
            if counts is not None and not (early and i == c == 0):
                scatter_placed(key[lo:hi], [v[lo:hi] for v in vals], digits, offsets(i, c), bufs[0], bufs[1:],
                               _rows(caches[i], lo, hi))
                if c + 1 < C or i + 1 < T:  # (the next chunk's scan beside this pass)
                    scan_ahead(*((i, c + 1) if c + 1 < C else (i + 1, 0)))
            partitioned = main.record()
            net.wait_event(partitioned)
            if isinstance(layout, BlockLayout):
                layout.post(comm, bufs, c, net)
            else:
                sends, recvs, _ = layout.unit(c)
                with net:
                    comm.post_device(bufs, got, sends, recvs)
            posted = net.record()
            if not overlap:
                main.wait_event(posted)
            if stats is not None:
                marks += [(f"partitioned {i}.{c}", partitioned), (f"sent {i}.{c}", posted)]
        caches[i] = None  # (freed in stream order, once its last pass has read it)
        arrived.append(net.record())
        out.append(received_table(t, k, got, radix_bits, top, layout, [cnt[:, i, c, me] for c in range(C)]))
        if stats is not None:
            sent = int(rows[me, i].sum() - rows[me, i, :, me].sum()) * width[i]
            wire = sent if blocks[i] is None else (P - 1) * int(blocks[i].blocks.sum()) * width[i]
            for name, n in (("bytes_sent", sent), ("wire_bytes_sent", wire)):
                stats[name] = stats.get(name, 0) + n
            stats["bytes_received"] = stats.get("bytes_received", 0) + int(
                rows[:, i, :, me].sum() - rows[me, i, :, me].sum()) * width[i]
    if finish_first and T > 1:
        # the first table's remaining radix passes while the last one is on the links; the local
        # join's statistics may read it from then on (HashPartitioning.ready)
        main.wait_event(arrived[0])
        out[0] = finished(out[0], ready=True)
        if stats is not None:
            marks.append(("finished 0", out[0].partitioning.ready))
    main.wait_event(net.record())  # (the send buffers are freed once the groups have read them)
    scans.wait_event(main.record())  # (and the offsets, to the scans' pool, once the passes have)
    for i in range(T):
        if blocks[i] is not None and not out[i].partitioning.runs.in_place:
            # the padded blocks' gaps hold no rows: the remaining passes (the local join's own
            # otherwise) leave the table dense, in its partitions
            out[i] = finished(out[i])
    if stats is not None:
        stats["shuffle_marks"] = marks
        stats["shuffle_chunks"] = C
        stats["shuffle_copy_engine"] = [i for i in range(T) if blocks[i] is not None]
        stats["shuffle_counted_early"] = early_counts
    return out


def chunk_count(rows: int, chunk_rows: int | None = None) -> int:
    """Chunks a table of the shuffle is cut into, where the largest table slice of any rank has
    ``rows`` rows (``chunk_rows`` a chunk; default ``device_shuffle.chunk_rows_default()``)."""
    from .device_shuffle import chunk_rows_default

    return max(1, -(-rows // (chunk_rows or chunk_rows_default())))


def _check_room(rows: np.ndarray, width: list[int], free: np.ndarray, finish_first: bool,
                blocks: list | None = None, pooled: np.ndarray | None = None) -> None:
    """MemoryError, alike on every rank, where some rank's send buffers and received rows of the
    tables counted so far (``rows``: (rank, table, chunk, destination), the first tables') would
    not fit the GPU memory it had free (``free``, bytes a rank); the first table's rows twice
    where ``finish_first`` (its finished copy); a table with a :class:`BlockLayout` in
    ``blocks`` needs its window of two padded regions instead, and a finished copy as long (the
    finishing pass's output, trimmed to the rows after).  ``pooled``: bytes a rank of free
    windows (``registered.pooled_bytes``), which only windows can take."""
    blocks = blocks or [None] * rows.shape[1]
    for r in range(rows.shape[0]):
        # buffers from CuPy's pool (send/recv tables', every finished copy), and windows
        plain = sum(w * (int(rows[r, i].sum() - rows[r, i, :, r].sum()
                             + rows[:, i, :, r].sum() * (1 + (finish_first and i == 0)))
                         if blocks[i] is None else 2 * blocks[i].rows)
                    for i, w in zip(range(rows.shape[1]), width))
        windows = sum(w * 2 * b.rows for b, w in zip(blocks, width) if b is not None)
        have = int(free[r]) + (int(pooled[r]) if windows and pooled is not None else 0)
        if plain > int(free[r]) or plain + windows > have:
            raise MemoryError(f"the shuffle on rank {r} needs about {(plain + windows) / 2**30:.2f} GiB of GPU memory "
                              f"for its send buffers and the rows it receives, {have / 2**30:.2f} GiB is free: "
                              f"use more ranks")


def _send_recv_shifts(layout: DeviceLayout, send_at: np.ndarray, base: int, rows: np.ndarray, me: int) -> np.ndarray:
    """What each chunk's scan of its digit-major counts gains, destination by destination (int64
    (C chunks, P destinations)), so that rank ``me``'s pass puts its rows for another rank at
    their message's start in its send buffer (chunk c's part from ``send_at[c]``, in rank order),
    and its own rows at their place in the receive buffer (from row ``base``), the later ranks'
    moved down over the gap they leave; ``layout, send_at, base``: :func:`_layout`'s of ``rows``
    (int64 (P ranks, C chunks, P destinations))."""
    P, C = rows.shape[0], rows.shape[1]
    add = np.repeat(np.asarray(send_at, np.int64)[:, None], P, axis=1)
    for c in range(C):
        own_at, own_rows = layout.unit(c)[2][1:]
        add[c, me] = base + own_at - int(rows[me, c, :me].sum())
        add[c, me + 1:] -= own_rows
    return add


def _layout(rows: np.ndarray, me: int) -> tuple[DeviceLayout, np.ndarray, int]:
    """(the DeviceLayout of one table's all-to-all on rank ``me``, a unit a chunk; where each
    chunk's rows for other ranks start in its send buffer (int64 (C,)); the first row of its
    receive buffer in the same allocation); ``rows``: int64 (P ranks, C chunks, P destinations),
    every rank's rows of each chunk to each rank.  A rank's send buffer holds its rows for the
    other ranks chunk after chunk, each chunk's in rank order (its own rows go straight to the
    receive buffer), and the receive buffer follows from a row that keeps NCCL's aligned bodies
    aligned (unaligned, NCCL copies at about two thirds of its rate: comm.cut)."""
    P, C, _ = rows.shape
    others = rows * (1 - np.eye(P, dtype=np.int64))[:, None, :]
    chunk_at = np.cumsum(others.sum(axis=2), axis=1) - others.sum(axis=2)  # (rank, chunk)
    starts = chunk_at[:, :, None] + np.cumsum(others, axis=2) - others  # every rank's send starts
    layout = DeviceLayout(me, [(starts[me, c], rows[me, c], starts[:, c, me].copy(), rows[:, c, me].copy())
                               for c in range(C)])
    return layout, chunk_at[me], -(-int(others[me].sum()) // ALIGN_ROWS) * ALIGN_ROWS


def piece_runs(layout: DeviceLayout | BlockLayout, counts: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Where each top digit's received rows lie (host arithmetic): per unit (chunk) of
    ``layout``, this rank's own rows (one run) and each peer's head, body and tail
    (``layout.received``), or each source's block (a :class:`BlockLayout`), cut at the digits'
    bounds; ``counts``: per unit, int64 (P sources, G digits), each source's rows here a digit.  Returns (starts, ends: int64 (G * pieces,),
    digit-major, rows of the receive buffer; part_off: int64 (G + 1,), where each digit's rows
    start once partitioned; pieces a digit)."""
    me, P = layout.rank, counts[0].shape[0]
    if isinstance(layout, BlockLayout):
        pieces = layout.pieces()
    else:
        pieces = []  # (message: unit * P + source, row here, row in the message, rows)
        for u in range(len(counts)):
            _, _, (_, own_at, own_rows) = layout.unit(u)
            pieces.append((u * P + me, own_at, 0, own_rows))
            pieces += [(u * P + j, at, first, n) for j, ps in layout.received(u).items() for at, first, n in ps]
    msgs = np.concatenate(counts)  # (message, digit)
    begin = np.cumsum(msgs, axis=1) - msgs  # first row of each digit in its message
    m = np.array([p[0] for p in pieces])
    at, first, n = (np.array([p[k] for p in pieces], np.int64)[None, :] for k in (1, 2, 3))
    lo = np.maximum(first, begin[m].T)  # (digit, piece), message rows
    hi = np.minimum(first + n, (begin + msgs)[m].T)
    starts = at + lo - first
    ends = np.maximum(starts, at + hi - first)
    return starts.ravel(), ends.ravel(), np.append(0, np.cumsum(msgs.sum(axis=0))), len(pieces)


def received_table(t, key: str, got: list, radix_bits: int, top: int, layout: DeviceLayout, counts: list):
    """The DeviceTable of the received columns ``got`` (``t``'s key, then its other columns),
    partitioned on the top ``top`` bits of its ``radix_bits``-bit digit in the pieces
    :func:`piece_runs` finds."""
    import cupy as cp

    from ..cuda.primitives import Runs

    starts, ends, part_off, k = piece_runs(layout, counts)
    return _partitioned(t, key, got[0], got[1:], radix_bits,
                        Runs(top, k, cp.asarray(starts), cp.asarray(ends), cp.asarray(part_off),
                             rows=int(part_off[-1])))


def _digit_cache(rows: int):
    """uint16 (rows,) for a table's digits, or None: none asked (GPUJOIN_DIGIT_CACHE=0), or
    free memory under :data:`DIGIT_CACHE_ROOM` times its size (the passes then hash again)."""
    import os

    import cupy as cp

    from ..cuda.runtime import fits

    if os.environ.get("GPUJOIN_DIGIT_CACHE", "1") == "0" or not rows or not fits(DIGIT_CACHE_ROOM * 2 * rows):
        return None
    try:
        return cp.empty(rows, cp.uint16)
    except cp.cuda.memory.OutOfMemoryError:
        return None


def _rows(cache, lo: int, hi: int):
    return None if cache is None else cache[lo:hi]


def finished(t, ready: bool = False):
    """The DeviceTable ``t`` (:func:`exchange_partitioned`'s) partitioned on every bit of its
    ``partitioning``'s digit (PHJ's passes, from its pieces), its pieces then the partitions
    themselves, in place: a join starts from them with nothing left to move.  Columns longer
    than the rows the pieces hold (``Runs.rows``: a :class:`BlockLayout`'s padded blocks) come
    back cut to those rows, where the partitions end.  ``ready``: its partitioning's ``ready``
    event recorded after the passes, on the current stream."""
    import cupy as cp

    from ..cuda.primitives import Digits, Runs, radix_partition

    p = t.partitioning
    key, vals, runs = t[p.column], [t[n] for n in t.column_names if n != p.column], p.runs
    if p.runs.bits != p.radix_bits:
        key, vals, offs = radix_partition(key, vals, Digits(bits=p.radix_bits), stable=False, runs=p.runs)
        rows = p.runs.rows  # (radix_partition's offsets end there already)
        if rows is not None and rows < key.size:
            key, vals = key[:rows], [v[:rows] for v in vals]
        runs = Runs(p.radix_bits, 1, offs[:-1], offs[1:], offs, in_place=True)
    elif not ready:
        return t
    return _partitioned(t, p.column, key, vals, p.radix_bits, runs,
                        cp.cuda.get_current_stream().record() if ready else None)


def _partitioned(t, key: str, keys, values: list, radix_bits: int, runs, ready=None):
    """A DeviceTable of ``t``'s columns as ``keys`` (column ``key``) and ``values`` (its other
    columns, in order), grouped as ``runs`` says on the ``radix_bits``-bit digit (in place once
    the event ``ready`` has passed, where given)."""
    from ..cuda.table import DeviceTable, HashPartitioning

    cols = dict(zip([key] + [n for n in t.column_names if n != key], [keys] + list(values)))
    return DeviceTable({n: cols[n] for n in t.column_names}, {}, dict(t.types), dict(t.dictionaries),
                       partitioning=HashPartitioning(key, radix_bits, runs, keys, ready))


def timeline_ms(marks: list) -> dict:
    """{name: milliseconds after the first mark (the shuffle's start)} of :func:`exchange_partitioned`'s
    ``stats["shuffle_marks"]`` (CUDA events), once the GPU has passed them all."""
    first = marks[0][1]
    first.synchronize()
    return {name: round(_elapsed_ms(first, e), 3) for name, e in marks[1:]}


def timeline_summary(ms: dict) -> str:
    """One line of :func:`timeline_ms`'s marks: the counts' time, each chunk's pass (from the mark
    before it on the GPU's main stream: the counts, or the pass before) and messages (from its
    pass's end, or the messages before, whichever is later), and the first table's finishing
    pass (from the later of the last pass and that table's last message), in ms; "laid out": from
    the counts to the first pass's launch (the host's buffers and layouts, where the GPU waits)."""
    counted = ms.get("counted", 0.0)
    passes, sends, last_pass, last_sent, sent = [], [], ms.get("planned", counted), 0.0, {}
    for name, t in ms.items():
        if name.startswith("partitioned "):
            passes.append(t - last_pass)
            last_pass = t
        elif name.startswith("sent "):
            sends.append(t - max(last_pass, last_sent))
            last_sent = sent[name.split()[1].split(".")[0]] = t
    out = f"counts {counted:.2f}, laid out {ms.get('planned', counted) - counted:.2f}, " \
          f"passes {[round(x, 2) for x in passes]}, messages {[round(x, 2) for x in sends]}"
    if "finished 0" in ms:
        begin = max(last_pass, sent.get("0", 0.0))
        out += f", first table finished {ms['finished 0'] - begin:.2f} ({ms['finished 0'] - last_sent:+.2f} after " \
               f"the last message)"
    return out


def _elapsed_ms(a, b) -> float:
    import cupy as cp

    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b)
