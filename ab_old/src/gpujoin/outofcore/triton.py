"""The Triton join (paper 004): a two-pass radix hash join of host-resident relations on one GPU,
for data and join state larger than the GPU's memory budget.

Pass 1 (``outofcore/partition.py``) partitions R, then S, chunk by chunk on the GPU into the
hybrid cache: partitioned chunks stay in GPU memory up to the cache size, the rest spills to
pinned host memory, the two interleaved.  Pass 2 takes one partition pair at a time: its pieces
are copied into GPU memory (device to device from the cache, host to device from the spill) on
the copy-in stream while the previous pair is joined on the compute stream; the pair is joined
by gpujoin's in-core algorithm (PHJ-TR by default: it partitions the pair on the low hash bits
and joins each sub-partition in a shared-memory hash table, paper 004's pass 2 and join), and
its output goes back to host memory.  Pass-1 fanout, chunk and cache sizes come from the memory
budget (``plan.placement``): two partition pairs and their join state within half the budget.

Partitions larger than their share (skewed keys, a key held by many rows) are never a crash:
such a pair is fetched in ranges and joined as a block nested loop over build ranges x probe
ranges; the join type is composed from inner, semi and anti joins of the blocks (the probe-side
rows of an outer join are those that no build range matched), and a block whose output does not
fit is split again, down to single rows.

Adaptation to PCIe 5 (paper 004 ran on cache-coherent NVLink 2.0): the GPU cannot read
pageable host memory on demand, so the inputs stream through pinned staging buffers by DMA
(``outofcore/stream.py``), which also overlaps the copies with compute instead of the paper's
concurrent kernels on half the SMs each; the spill is pinned memory written by DMA a chunk at a
time; pass 1's prefix sums run on the GPU, per chunk, inside the radix partition (the paper found
the CPU faster at 130 GB/s of host reads against a 63 GB/s link; here the keys cross PCIe once
either way, so the GPU's histogram costs no extra transfer).  Measured on an H100 host
(scripts/profile_prefix_sums.py): the histogram and scan of 2^24 int64 keys took 0.09 ms on the
GPU against 4.7-9.1 ms on the 16 cores (Numba), more than the chunk's 4.9 ms over PCIe, and
would take host memory bandwidth from the staging copy that bounds pass 1.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .. import progress
from ..plan.placement import PASS2_FACTOR, Placement, cached_chunks, slack
from .budget import check_host
from .partition import PartitionedRelation, TransferStats, fetch_ranges, partition_pass
from .stream import Downloader, HostColumn, Streams, Uploader, record

MODES = ("inner", "probe_outer", "full", "semi", "anti")


class PartitionQueue:
    """Partition ids handed out one at a time to whichever worker asks first, in the order given
    (dynamic list scheduling: the GPUs of the hybrid join share one, so one whose pairs run
    slower, its thread waiting longer on the interpreter lock or its links, takes fewer; on four
    H200s the GPUs' pass 2s of equal bytes took 81-138 ms).  Safe across threads: ``deque``'s
    ``popleft`` is atomic."""

    def __init__(self, ids):
        self._ids = deque(int(p) for p in ids)

    def __iter__(self):
        return self

    def __next__(self) -> int:
        try:
            return self._ids.popleft()
        except IndexError:
            raise StopIteration from None


@dataclass
class Rel:
    """Rows of one side in GPU memory: ``key`` and carried ``cols`` (CuPy arrays)."""

    key: object
    cols: list

    @property
    def n(self) -> int:
        return int(self.key.size)

    def split(self) -> tuple[Rel, Rel]:
        h = self.n // 2
        return Rel(self.key[:h], [c[:h] for c in self.cols]), Rel(self.key[h:], [c[h:] for c in self.cols])

    @staticmethod
    def concat(parts: list[Rel]) -> Rel:
        import cupy as cp

        if len(parts) == 1:
            return parts[0]
        return Rel(cp.concatenate([p.key for p in parts]),
                   [cp.concatenate([p.cols[i] for p in parts]) for i in range(len(parts[0].cols))])


@dataclass
class JoinResult:
    """A Triton join's output in host memory.

    key : the join key of every output row (when ``emit_keys``), int32/int64 (n,)
    build, probe : per carried column, (values (n,), validity bool (n,) or None); a row of an
        outer join without a partner has its other side's columns null
    total : with ``aggregate="sum"``, the sum of the first probe column over the matched pairs
        (paper 004's measure; no rows are kept)
    """

    key: np.ndarray | None
    build: list
    probe: list
    rows: int
    total: int | None = None
    stats: dict = field(default_factory=dict)


class _Sink:
    """The join's output: blocks materialized on the GPU (``materialize``, which may run out of
    GPU memory: the caller then splits the block), then copied into host columns (``push``), or
    summed (``aggregate``)."""

    def __init__(self, key_dtype, bdtypes, pdtypes, emit_keys: bool, aggregate: str | None, downloader: Downloader,
                 capacity: int, consumer=None):
        self.emit_keys, self.aggregate, self.downloader, self.consumer = emit_keys, aggregate, downloader, consumer
        if consumer is not None:
            capacity = 1  # blocks go to the consumer: the columns only name the dtypes
        self.key = HostColumn(key_dtype, capacity) if emit_keys and aggregate is None else None
        self.build = [HostColumn(d, capacity) for d in bdtypes] if aggregate is None else []
        self.probe = [HostColumn(d, capacity) for d in pdtypes] if aggregate is None else []
        self._sum = None  # aggregate="sum": the running total, int64 on the GPU
        self.rows = 0
        self.bytes = 0

    def materialize(self, out, mode: str):
        """A block's JoinOutput as device columns: (rows, key, build [(values, mask)] or None,
        probe [...]), or (rows, the int32/int64 values to sum) for ``aggregate``."""
        import cupy as cp

        n = out.num_rows
        if self.aggregate == "sum":
            if n == 0:
                return (0, None)
            vals, valid = out.probe_column(0)
            if valid is not None:
                vals = cp.where(valid.astype(bool), vals.astype(cp.int64), 0)
            elif vals.dtype not in (cp.int32, cp.int64):
                vals = vals.astype(cp.int64)
            return (n, vals)  # summed by push
        pairs = mode not in ("semi", "anti")
        return (n, out.key_column() if self.emit_keys and n else None,
                [out.build_column(i) for i in range(len(self.build))] if pairs else None,
                [out.probe_column(i) for i in range(len(self.probe))])

    @property
    def total(self) -> int:
        """aggregate="sum": the sum over every block (int64 arithmetic on the GPU)."""
        return 0 if self._sum is None else int(self._sum)

    def rows_of(self, rel: Rel, build_side: bool):
        """Rows of one side without a partner, the other side's columns null."""
        cols = [(c, None) for c in rel.cols]
        return (rel.n, rel.key if self.emit_keys else None, cols if build_side else None,
                None if build_side else cols)

    def push(self, block) -> None:
        if block is None or block[0] == 0:
            return
        n = block[0]
        self.rows += n
        if self.aggregate == "sum":
            import cupy as cp

            from ..cuda.primitives import sum_into

            # a 0-d device array: the blocks' sums add up on the GPU and are read once, at the end
            # (a read a block made each GPU's thread wait for the interpreter lock once more)
            if self._sum is None:
                self._sum = cp.zeros((), cp.int64)
            sum_into(block[1], self._sum)
            return
        _, key, cols_b, cols_p = block
        width = sum(c.values.itemsize for c in self.build + self.probe) + \
            (self.key.values.itemsize if self.key is not None else 0)
        self.bytes += n * width
        held = "" if self.consumer is not None else f" (already {self.bytes / 2**30:.2f} GiB)"
        check_host(n * width, f"the next {n:,} output rows of the join{held}",
                   "ask for less output (how='semi', fewer columns, a SUM) or write it in batches with the CLI")
        targets = ([] if self.key is None else [(self.key, (key, None))]) + \
            [(c, cols_b[i] if cols_b is not None else None) for i, c in enumerate(self.build)] + \
            [(c, cols_p[i] if cols_p is not None else None) for i, c in enumerate(self.probe)]
        if self.consumer is not None:
            self._emit(n, targets)
            return
        if any(col.n + n > col.values.size for col, _ in targets):
            self.downloader.flush()  # a column about to grow: its pending copies land first
        srcs, dsts = [], []
        masks = []
        for col, src in targets:
            col.reserve(n)
            lo = col.n
            if src is None:  # a side without a partner: nulls
                col.nulls(lo, lo + n)
            else:
                values, mask = src
                srcs.append(values)
                dsts.append(col.values[lo:lo + n])
                if mask is not None:
                    if col.valid is None:
                        col.valid = np.ones(col.values.size, bool)
                    masks.append((mask, col.valid[lo:lo + n]))
            col.n += n
        # the copies out of the pinned slots overlap the next block's join (flushed in columns())
        self.downloader.get(srcs + [m.view(np.uint8) if m.dtype != np.uint8 else m for m, _ in masks],
                            dsts + [d.view(np.uint8) for _, d in masks], wait=False)

    def _emit(self, n: int, targets) -> None:
        """A block into fresh host arrays, handed to the consumer: (n, key or None, build
        [(values, valid) ...], probe [...]); (None, None) for a side without a partner (all null)."""
        srcs, dsts, cols = [], [], []
        for col, src in targets:
            if src is None:
                cols.append((None, None))
                continue
            values, mask = src
            v = np.empty(n, col.values.dtype)
            srcs.append(values)
            dsts.append(v)
            m = None
            if mask is not None:
                m = np.empty(n, bool)
                srcs.append(mask.view(np.uint8) if mask.dtype != np.uint8 else mask)
                dsts.append(m.view(np.uint8))
            cols.append((v, m))
        self.downloader.get(srcs, dsts)
        key = cols.pop(0)[0] if self.key is not None else None
        self.consumer(n, key, cols[:len(self.build)], cols[len(self.build):])

    def columns(self):
        self.downloader.flush()
        key = self.key.finish()[0] if self.key is not None else None
        return key, [c.finish() for c in self.build], [c.finish() for c in self.probe]


class TritonJoin:
    """One Triton join: the plan, the streams and buffers, pass 1 and pass 2.  See
    :func:`triton_join`."""

    def __init__(self, placement: Placement, algorithm: str, emit_keys: bool, aggregate: str | None,
                 streams: int, consumer=None, transfer_only: bool = False):
        self.placement = placement
        self.transfer_only = transfer_only
        self.consumer = consumer
        self.algorithm = algorithm
        self.emit_keys = emit_keys
        self.aggregate = aggregate
        self.streams = Streams(streams)
        self.transfer = TransferStats()
        self.blocks = 0
        self.split_partitions = 0
        self.direct_bytes = 0  # pass 1's bytes DMA'd straight from page-locked input
        self.pinned_input = False  # all of them were: pass 1 had no staging copy

    # ---------------------------------------------------------------- pass 2 building blocks
    def _run(self, R: Rel, S: Rel, mode: str):
        """The in-core join of one block; a MemoryError is retried once after CuPy's pool gives
        back its cached blocks (cached for another stream, they are out of this one's reach)."""
        import cupy as cp

        from ..cuda.join import run

        self.blocks += 1
        emit = self.emit_keys and mode not in ("semi", "anti")
        with self.streams.compute:
            try:
                return run(self.algorithm, R.key, S.key, R.cols, S.cols, mode, emit_keys=emit)
            except MemoryError:
                pass  # retried below, once the failed call's frames (and their arrays) are gone
            cp.get_default_memory_pool().free_all_blocks()
            return run(self.algorithm, R.key, S.key, R.cols, S.cols, mode, emit_keys=emit)

    def _pairs(self, R: Rel, S: Rel) -> None:
        """Every matching pair of R x S, split until a block's output fits."""
        out = self._attempt(R, S, "inner", materialize=True)
        if out is None:  # split outside the except clause: its traceback would pin the failed arrays
            if S.n > 1:
                for half in S.split():
                    self._pairs(R, half)
            elif R.n > 1:
                for half in R.split():
                    self._pairs(half, S)
            else:
                self._run(R, S, "inner")  # one row a side that cannot fit: its MemoryError stands
            return
        self.sink.push(out)

    def _select(self, B: Rel, P: Rel, matched: bool) -> Rel:
        """The rows of P whose key is (``matched``) or is not in B: a semi or anti join, split as
        needed (anti over B1 + B2 is anti over B2 of anti over B1)."""
        import cupy as cp

        if P.n == 0 or (B.n == 0 and not matched):
            return P
        if B.n == 0:
            return Rel(P.key[:0], [c[:0] for c in P.cols])
        out = self._attempt(B, P, "semi" if matched else "anti", select=len(P.cols))
        if out is None and P.n == 1 and B.n == 1:
            self._run(B, P, "semi" if matched else "anti")  # one row a side: its MemoryError stands
        if out is not None:
            if out.n == 0:
                return Rel(cp.empty(0, P.key.dtype), [c[:0] for c in P.cols])
            return out
        if P.n > 1:
            return Rel.concat([self._select(B, h, matched) for h in P.split()])
        b1, b2 = B.split()
        if matched:
            return Rel.concat([self._select(b1, P, True), self._select(b2, self._select(b1, P, False), True)])
        return self._select(b2, self._select(b1, P, False), False)

    def _join_pair(self, R: Rel, S: Rel, mode: str) -> None:
        """A partition pair in GPU memory: the in-core join, composed from blocks if it fails."""
        out = self._attempt(R, S, mode, materialize=True)
        if out is None:
            self._join_blocks(lambda: [R], lambda: [S], mode)
            return
        self.sink.push(out)

    def _attempt(self, R: Rel, S: Rel, mode: str, materialize: bool = False, select: int | None = None):
        """The block joined and its output materialized in GPU memory (``materialize``: the sink's
        block; ``select``: the probe rows selected, as a Rel of that many columns), or None when
        it does not fit."""
        import cupy as cp

        try:
            out = self._run(R, S, mode)
            if materialize:
                return self.sink.materialize(out, mode)
            return Rel(out.key_column(), [out.probe_column(i)[0] for i in range(select)])
        except (MemoryError, cp.cuda.memory.OutOfMemoryError):
            return None

    def _join_blocks(self, build_ranges, probe_ranges, mode: str) -> None:
        """Block nested loop: ``build_ranges()`` and ``probe_ranges()`` yield the pair's rows in
        blocks (fetched again for each pass over them)."""
        if self.transfer_only:  # an inner join's fetches, no join
            for _ in probe_ranges():
                for _ in build_ranges():
                    pass
            return
        if mode in ("inner", "probe_outer", "full"):
            for S in probe_ranges():
                for R in build_ranges():
                    self._pairs(R, S)
        if mode != "inner":  # probe rows by whether any build block matched them
            for S in probe_ranges():
                rest, hits = S, []
                for R in build_ranges():
                    if mode == "semi":
                        hits.append(self._select(R, rest, True))
                    rest = self._select(R, rest, False)
                if mode == "semi":
                    sel = Rel.concat(hits) if hits else Rel(rest.key[:0], [c[:0] for c in rest.cols])
                    self.sink.push(self.sink.rows_of(sel, build_side=False))
                elif mode in ("anti", "probe_outer", "full"):
                    self.sink.push(self.sink.rows_of(rest, build_side=False))
        if mode == "full":  # build rows no probe block matched
            for R in build_ranges():
                rest = R
                for S in probe_ranges():
                    rest = self._select(S, rest, False)
                self.sink.push(self.sink.rows_of(rest, build_side=True))

    # ---------------------------------------------------------------- the passes
    def open_sink(self, build_cols: list[np.ndarray], probe_cols: list[np.ndarray], mode: str, share: float = 1.0):
        """The output's columns on the host, sized for ``share`` of the planner's guess (one row a
        probe row); returns the output bytes that guess expects."""
        nb, np_ = build_cols[0].size, probe_cols[0].size
        guess = {"inner": np_, "probe_outer": np_, "full": np_ + nb, "semi": np_, "anti": np_}[mode]
        out_width = (build_cols[0].itemsize if self.emit_keys else 0) + sum(c.itemsize for c in probe_cols[1:]) + \
            (sum(c.itemsize for c in build_cols[1:]) if mode not in ("semi", "anti") else 0)
        self.sink = _Sink(build_cols[0].dtype, [c.dtype for c in build_cols[1:]], [c.dtype for c in probe_cols[1:]],
                          self.emit_keys, self.aggregate, Downloader(self.streams), int(guess * share), self.consumer)
        return guess * out_width

    def pass1(self, build_cols: list[np.ndarray], probe_cols: list[np.ndarray],
              starts: tuple[list[int], list[int]] | None = None) -> list[PartitionedRelation]:
        """Pass 1 of both sides into this GPU's cache and the spill: every chunk, or the chunks
        that begin at ``starts`` (build, probe) on this GPU; returns [R, S]."""
        pl = self.placement
        t0 = time.perf_counter()
        rels = []
        widest = max(sum(c.dtype.itemsize for c in build_cols), sum(c.dtype.itemsize for c in probe_cols))
        uploader = Uploader(self.streams, Uploader.slot_size(pl.chunk_rows * widest, max(len(build_cols),
                                                                                          len(probe_cols))))
        # one cache for both relations, interleaved in each in proportion (paper 004: split by |R| : |S|)
        try:
            for side, cols in enumerate((build_cols, probe_cols)):
                n = cols[0].size
                width = sum(c.dtype.itemsize for c in cols)
                mine = list(range(0, n, pl.chunk_rows)) if starts is None else starts[side]
                sizes = [min(pl.chunk_rows, n - a) * width for a in mine]
                share = pl.cache_bytes * (n * width) // max(1, pl.input_bytes)
                rels.append(partition_pass(cols, pl.bits, pl.chunk_rows, cached_chunks(len(mine), sizes, share),
                                           self.streams, uploader, self.transfer,
                                           "build side" if cols is build_cols else "probe side",
                                           None if starts is None else mine))
        except BaseException:
            for r in rels:
                r.close()
            raise
        self.transfer.phases["pass1"] = time.perf_counter() - t0
        self.transfer.phases["pass1_staging_copy"] = uploader.stage_s
        self.transfer.phases["pass1_staging_wait"] = uploader.wait_s
        self.direct_bytes = uploader.direct_bytes
        self.pinned_input = uploader.bytes > 0 and uploader.direct_bytes == uploader.bytes
        return rels

    def pass2(self, R: PartitionedRelation, S: PartitionedRelation, mode: str, partitions=None):
        """Pass 2 over ``partitions`` (default: all; a list of ids, or a :class:`PartitionQueue`
        that several GPUs' pass 2s take from) of R and S, whose pieces may lie in any GPU's cache
        or the spill; every output block reaches the sink.  ``self.joined``: the ids it took."""
        from ..cuda.runtime import untimed_phases

        t0 = time.perf_counter()
        # every allocation and kernel of pass 2 on one stream; the in-core joins' phases untimed
        with self.streams.compute, untimed_phases():
            self._pass2(R, S, mode, partitions)
        self.streams.synchronize()
        self.transfer.phases["pass2"] = time.perf_counter() - t0

    def stats(self, caches: list[PartitionedRelation], out_bytes: int) -> dict:
        import cupy as cp

        from ..plan.calibrate import link_rates

        pl = self.placement
        return {"placement": pl.placement, "pass1_bits": pl.bits, "chunk_rows": pl.chunk_rows,
                "budget_bytes": pl.budget, "cache_bytes": sum(r.bytes(True) for r in caches),
                "spill_bytes": sum(r.bytes(False) for r in caches), "h2d_bytes": self.transfer.h2d,
                "d2h_bytes": self.transfer.d2h + self.sink.bytes, "blocks": self.blocks,
                "split_partitions": self.split_partitions, "streams": self.streams.count,
                "peak_gpu_bytes": int(cp.get_default_memory_pool().total_bytes()),
                "phases": dict(self.transfer.phases),
                "pass1_direct_bytes": self.direct_bytes,
                "predicted_phases": pl.predict(0 if self.aggregate or self.consumer else out_bytes,
                                               # page-locked input: no staging copy in pass 1
                                               {**link_rates(), **({"host_in": float("inf")} if self.pinned_input
                                                                   else {})})}

    def run(self, build_cols: list[np.ndarray], probe_cols: list[np.ndarray], mode: str) -> JoinResult:
        out_bytes = self.open_sink(build_cols, probe_cols, mode)
        R, S = self.pass1(build_cols, probe_cols)
        try:
            self.pass2(R, S, mode)
        finally:
            R.close()
            S.close()
        t2 = time.perf_counter()
        key, bcols, pcols = self.sink.columns()
        self.transfer.phases["assemble"] = time.perf_counter() - t2
        return JoinResult(key, bcols, pcols, self.sink.rows, self.sink.total if self.aggregate else None,
                          self.stats([R, S], out_bytes))

    def _pass2(self, R: PartitionedRelation, S: PartitionedRelation, mode: str, partitions=None) -> None:
        rsz, ssz = R.sizes(), S.sizes()
        limit = max(1, int((self.placement.budget // 2 - slack(self.placement.budget)) // PASS2_FACTOR))  # bytes of a pair joined at once
        # taken one at a time (a PartitionQueue that several GPUs share hands each to whichever asks first)
        ids = range(R.fanout) if partitions is None else partitions
        source = iter(ids)
        big: list[int] = []  # pairs past the limit: joined in blocks, after the others
        self.joined = []  # the partitions this pass 2 took

        def next_small():
            for p in source:
                if not (rsz[p] or ssz[p]):
                    continue
                self.joined.append(p)
                if self.placement.bits and rsz[p] * R.width + ssz[p] * S.width > limit:
                    big.append(p)  # (in core, bits == 0: the planner found the whole join fits)
                    continue
                return p
            return None

        st = self.streams
        # (from a shared queue, how many this GPU takes is known only at the end)
        shown = progress.task("pass 2: join partition pairs" if self.placement.bits else "join",
                              None if isinstance(ids, PartitionQueue) else sum(1 for p in ids if rsz[p] or ssz[p]))
        p = next_small()
        pending = self._fetch_pair(R, S, p, rsz, ssz) if p is not None else None
        while pending is not None:
            (Rp, Sp), ev = pending
            st.compute.wait_event(ev)
            p = next_small()  # the next pair is copied in while this one is joined
            pending = self._fetch_pair(R, S, p, rsz, ssz) if p is not None else None
            if not self.transfer_only:
                self._join_pair(Rp, Sp, mode)
            del Rp, Sp
            shown.advance()
        for p in big:
            self.split_partitions += 1
            self._join_big(R, S, p, int(rsz[p]), int(ssz[p]), limit, mode)
            shown.advance()

    def _fetch_pair(self, R, S, p, rsz, ssz):
        """Partition p of both sides into fresh device arrays on the copy-in stream; returns
        ((Rel, Rel), event).  The copy-in stream first waits for the compute stream's work so
        far: the pool may hand it memory that an enqueued kernel still reads."""
        import cupy as cp

        st = self.streams
        here = cp.cuda.Device().id
        whole = [rel.pieces[0].columns for rel in (R, S)
                 if len(rel.pieces) == 1 and rel.pieces[0].cached and rel.pieces[0].device == here
                 and rel.pieces[0].offsets[-1] == (rsz if rel is R else ssz)[p]]
        if len(whole) == 2:  # each side one piece in GPU memory that is the partition: no copy
            (rc, sc) = whole
            return (Rel(rc[0], rc[1:]), Rel(sc[0], sc[1:])), record(st.compute)
        with st.compute:
            rb = [cp.empty(int(rsz[p]), d) for d in R.dtypes]
            sb = [cp.empty(int(ssz[p]), d) for d in S.dtypes]
        st.copy_in.wait_event(record(st.compute))
        # both sides' pieces in one batch of copies (one CUDA call where the runtime batches)
        fetch_ranges([(R, p, 0, int(rsz[p]), rb), (S, p, 0, int(ssz[p]), sb)], st.copy_in, self.transfer,
                     device_stream=st.copy_out)
        return (Rel(rb[0], rb[1:]), Rel(sb[0], sb[1:])), record(st.copy_in)

    def _join_big(self, R, S, p, nr, ns, limit, mode):
        """A partition pair over its share: fetched in ranges, joined block by block."""
        st = self.streams
        rows_r = max(1, limit // 2 // R.width)
        rows_s = max(1, limit // 2 // S.width)

        def ranges(rel, n, step):
            def gen():
                for lo in range(0, n, step):
                    cols, _ = rel.fetch(p, lo, min(n, lo + step), st.compute, stats=self.transfer)
                    yield Rel(cols[0], cols[1:])
            return gen

        self._join_blocks(ranges(R, nr, rows_r), ranges(S, ns, rows_s), mode)


def triton_join(build_cols: list[np.ndarray], probe_cols: list[np.ndarray], mode: str, placement: Placement, *,
                algorithm: str = "phj-tr", emit_keys: bool = False, aggregate: str | None = None,
                streams: int = 3, consumer=None, transfer_only: bool = False) -> JoinResult:
    """The Triton join of host relations R (build) and S (probe) on the current GPU.

    Parameters
    ----------
    build_cols, probe_cols : lists of host NumPy arrays (n,), the key first (int32 or int64, the
        same dtype both sides, no nulls), then each carried column (1, 2, 4 or 8-byte items)
    mode : "inner", "probe_outer" (the probe side's unmatched rows kept), "full", "semi", "anti"
        (probe rows with / without a match)
    placement : sizes from ``plan.placement.plan_placement`` (budget, pass-1 bits, chunk, cache)
    algorithm : the in-core GPU join of each partition pair ("phj-tr", "phj-ur", "smj-tr",
        "smj-ur", "nphj")
    emit_keys : also return every output row's key
    aggregate : None (materialize the output in host memory) or "sum": the sum of the first
        probe column over matched pairs (paper 004's measure, inner joins only)
    streams : 3 (copy-in, compute, copy-out overlapped) or 1
    consumer : None, or a callable that takes each block of output rows as it leaves the GPU,
        ``consumer(n, key, build, probe)`` with fresh host arrays (key None unless ``emit_keys``;
        build and probe lists of (values (n,), valid bool (n,) or None), (None, None) for the
        columns of a side without a partner, all null); the result then holds no rows, so that
        an output larger than host memory can be written as it comes
    transfer_only : move every byte as the join would (inputs in, spill out and back, each
        pair fetched) but run no in-core join: no output; paper 000's transfer-only mode, the
        time its cost models predict

    Returns
    -------
    JoinResult (host arrays; rows in unspecified order) with ``stats``: placement, pass-1 bits,
    cache and spill bytes, bytes over PCIe each way, GPU memory CuPy's pool holds at the end
    (``peak_gpu_bytes``: the pool only grows within a join, and its blocks cached from earlier
    operations count, up to ``memory_limit``), phase times.

    Raises
    ------
    MemoryError
        The budget cannot hold the join's smallest working set, or host memory cannot hold the
        spill or the output (raised before the bytes are taken, naming them).

    Notes
    -----
    Transfer volume: the inputs cross PCIe once into the GPU, the spilled fraction f of them
    crosses back and forth once more (pass 1 out, pass 2 in), and the output once out:
    H2D = N w (1 + f), D2H = N w f + output.

    References
    ----------
    Paper 004 (Lutz et al., Triton join, SIGMOD 2022) §4-§5, doi:10.1145/3514221.3517911;
    paper 000 §3.2.4 for the three-stream overlap.
    """
    if mode not in MODES:
        raise ValueError(f"unknown join mode {mode!r}; valid: {list(MODES)}")
    if aggregate not in (None, "sum"):
        raise ValueError(f"aggregate must be None or 'sum', got {aggregate!r}")
    if aggregate == "sum" and (mode != "inner" or len(probe_cols) < 2):
        raise ValueError("aggregate='sum' sums the first probe payload of an inner join; give one")
    if build_cols[0].dtype != probe_cols[0].dtype:
        raise TypeError(f"build and probe keys must share a dtype, got {build_cols[0].dtype} and {probe_cols[0].dtype}")
    spill = placement.spill_bytes
    if spill:
        check_host(spill, f"the Triton join's spill of {spill:,} bytes (pinned)",
                   "raise memory_limit so that more stays in GPU memory")
    return TritonJoin(placement, algorithm, emit_keys, aggregate, streams, consumer,
                      transfer_only).run(build_cols, probe_cols, mode)
