"""Paper 000's global sort-merge join (GSM) of host-resident relations on the GPUs of one host.

1. Sorted runs (§3.2.1): the chunks of each relation go round-robin to the GPUs; each GPU sorts
   its chunk by key (gpujoin's radix sort, carried columns with it) and writes it back in place
   to host memory: the relation is then a sequence of sorted runs.
2. Merge rounds (§3.2.2): adjacent runs are merged pairwise until one run is left; each merge is
   cut by merge path (``merge_path.split``) into pieces of equal length that fit a GPU, the
   pieces spread over the GPUs, each piece merged on its GPU (the rank of each element in the
   other input is its offset: a stable merge, ties from the left run first) and written to its
   place in the output.
3. Join (§3.2.3): the sorted R and S are cut by merge path into pieces that every GPU joins on
   its own: ``merge_path.join_ranges`` moves each cut to the first row of its key, so no key's
   rows straddle two pieces, and gives each piece the S rows that its R keys can match (with a
   band |r - s| <= w, the S rows within w of its R range: a halo shared with the neighbours, so
   each pair is found once, by the piece owning its R row).  A piece larger than a GPU's share
   (a heavy key) is halved, S side first, then R side, until it fits.  Each S row's matches
   are the R rows in [s - w, s + w] (two binary searches), expanded a bounded block at a time.

The two sorted copies a relation ping-pongs between lie in page-locked host memory
(``outofcore.stream.HostArena``, kept registered between calls) when half the host's free memory
holds them: every run, merge piece and join piece then moves by DMA in place, with no staging copy
and no copy out of a pinned slot (on two H200s each such host copy ran at 7-25 GB/s against
PCIe's 55, and the merge round took 2.2 s of 2^29 x 2^29 rows).  The sorted runs are written
straight from the input, which is read once and never modified.

Inner joins (GSM's output is the matching pairs); the other join types use the hybrid join.
Keys are int32 or int64; any fixed-width carried columns.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np

from ..outofcore.stream import (Downloader, HostArena, HostColumn, Streams, Uploader, concatenate, parallel_copy,
                                record)
from .devices import on_each
from .merge_path import join_ranges, split


def _sort_key_range(keys) -> tuple[int, int]:
    lo, hi = int(keys.min()), int(keys.max())
    return lo, (hi - lo).bit_length()


class _Worker:
    """One GPU's streams, staging slots and copy-out slots (made in its own thread)."""

    def __init__(self, streams: int, slot_bytes: int):
        self.st = Streams(streams)
        self.up = Uploader(self.st, slot_bytes)
        self.down = Downloader(self.st)
        self.h2d = 0
        self.d2h = 0

    def upload(self, cols: list[np.ndarray], lo: int, hi: int) -> list:
        """Rows [lo, hi) of ``cols`` to the GPU on the copy-in stream (:func:`_on_gpus` makes the
        compute stream wait for them when their task's work starts; the host does not wait)."""
        out = self.up.rows_to_device(cols, lo, hi)
        self.h2d += sum((hi - lo) * c.itemsize for c in cols)
        return out

    def download(self, arrays: list, outs: list[np.ndarray], pinned: bool = False) -> None:
        """``arrays`` into host ``outs``: by DMA in place when they are page-locked (``pinned``),
        else through the Downloader's slots."""
        if pinned:
            self.down.get_pinned(arrays, outs)
        else:
            self.down.get(arrays, outs, wait=False)
        self.d2h += sum(a.nbytes for a in arrays)


def _on_gpus(gpus, tasks, fetch, work, slot_bytes: int, streams: int, workers: list,
             memory_limit: int | None = None):
    """For every task, ``data = fetch(worker, task)`` (its uploads) then ``work(worker, task,
    data)``, task i on GPU i mod D (one thread a GPU, its pool held to ``memory_limit``).  Task
    i + 1's fetch is enqueued before task i's work: its copy-in waits only for the kernels
    before task i's, and runs beside them (paper 000 §3.2.4's copy-in and compute streams); the
    compute stream waits for a task's uploads only when its work starts (had it waited when they
    were enqueued, task i's kernels and copy-out would have waited for task i + 1's uploads: on
    two H200s both copy directions were busy together only half of each merge round)."""
    from ..outofcore.budget import gpu_memory_cap

    def run(g):
        if workers[g] is None:
            workers[g] = _Worker(streams, slot_bytes)
        w = workers[g]
        mine = tasks[g::len(gpus)]

        def fetched(task):
            return fetch(w, task), record(w.st.copy_in)  # the task's data, and when it has arrived

        with gpu_memory_cap(memory_limit), w.st.compute:
            data, ready = fetched(mine[0]) if mine else (None, None)
            for i, t in enumerate(mine):
                nxt = fetched(mine[i + 1]) if i + 1 < len(mine) else (None, None)
                w.st.compute.wait_event(ready)
                work(w, t, data)
                data, ready = nxt
            w.down.flush()
            w.st.synchronize()
    on_each(gpus, run)


def _interleaved(per_relation: list[list]) -> list:
    """The tasks of several relations taken in turns (one of each, then the next of each, ...):
    one call of :func:`_on_gpus` runs them all, each GPU a share of every relation's, so that a
    phase's pipeline fills and drains once, not once a relation (on two H200s each of GSM's
    phases had moved only 8.6 GB a relation, and its first upload and last download ran alone)."""
    out = []
    for i in range(max((len(t) for t in per_relation), default=0)):
        out += [t[i] for t in per_relation if i < len(t)]
    return out


def sort_runs(rels: list, gpus, workers, slot_bytes, streams, memory_limit=None, pinned: bool = False,
              transfer_only: bool = False) -> list[list[tuple[int, int]]]:
    """For each relation ``(src, dst, run_rows)`` of ``rels``, each run of ``run_rows`` rows of
    ``src`` (key first) sorted by key into the same rows of ``dst`` (page-locked when
    ``pinned``), the relations' runs in one phase; ``transfer_only``: the rows move, unsorted.
    Returns each relation's runs [(lo, hi)]."""
    from ..cuda.primitives import radix_sort

    runs = [[(a, min(src[0].size, a + rows)) for a in range(0, src[0].size, rows)] for src, _, rows in rels]

    def work(w, task, dev):
        k, lo, hi = task
        if not transfer_only:
            base, bits = _sort_key_range(dev[0])
            dev = radix_sort(dev[0], dev[1:], base, bits)
            dev = [dev[0], *dev[1]]
        w.download(dev, [c[lo:hi] for c in rels[k][1]], pinned)

    tasks = _interleaved([[(k, lo, hi) for lo, hi in r] for k, r in enumerate(runs)])
    _on_gpus(gpus, tasks, lambda w, t: w.upload(rels[t[0]][0], t[1], t[2]), work, slot_bytes, streams, workers,
             memory_limit)
    return runs


def _merge_on_gpu(a: list, b: list) -> list:
    """The stable merge of sorted runs a and b (key first, same columns) on the current GPU."""
    import cupy as cp

    na, nb = int(a[0].size), int(b[0].size)
    pa = cp.arange(na, dtype=cp.int64) + cp.searchsorted(b[0], a[0], side="left")
    pb = cp.arange(nb, dtype=cp.int64) + cp.searchsorted(a[0], b[0], side="right")
    out = []
    for x, y in zip(a, b):
        o = cp.empty(na + nb, x.dtype)
        o[pa] = x
        o[pb] = y
        out.append(o)
    return out


def merge_round(rels: list, gpus, workers, slot_bytes, streams, memory_limit=None, pinned: bool = False,
                transfer_only: bool = False) -> list[list[tuple[int, int]]]:
    """For each relation ``(src, dst, runs, piece_rows)`` of ``rels``, runs 0+1, 2+3, ... of
    ``src`` merged into ``dst`` (a last odd run is copied), the relations' merges in one phase;
    returns each relation's merged runs.  Each merge is cut by merge path into pieces of at most
    ``piece_rows`` rows (``transfer_only``: the pieces' rows move, not merged)."""
    per_relation, merged_of = [], []
    for k, (src, dst, runs, piece_rows) in enumerate(rels):
        tasks, merged = [], []
        for i in range(0, len(runs) - 1, 2):
            (lo, mid), (_, hi) = runs[i], runs[i + 1]
            a, b = src[0][lo:mid], src[0][mid:hi]
            total = hi - lo
            parts = len(gpus) * -(-total // (piece_rows * len(gpus)))  # as many pieces for every GPU
            if transfer_only:  # unsorted runs have no merge path: even cuts of both, the same bytes
                cuts = [(a.size * p // parts, b.size * p // parts) for p in range(parts + 1)]
            else:
                cuts = [split(a, b, total * p // parts) for p in range(parts + 1)]
            tasks += [(k, lo, mid, cuts[p], cuts[p + 1]) for p in range(parts) if cuts[p] != cuts[p + 1]]
            merged.append((lo, hi))
        if len(runs) % 2:  # rare: global_sort makes a power of two of runs unless the rows are few
            lo, hi = runs[-1]
            for s, d in zip(src, dst):
                parallel_copy(d[lo:hi], s[lo:hi])
            merged.append((lo, hi))
        per_relation.append(tasks)
        merged_of.append(merged)

    def fetch(w, task):
        k, lo, mid, (i0, j0), (i1, j1) = task
        src = rels[k][0]
        return w.upload(src, lo + i0, lo + i1), w.upload(src, mid + j0, mid + j1)

    def work(w, task, ab):
        k, lo, mid, (i0, j0), (i1, j1) = task
        dst = rels[k][1]
        a, b = ab
        at = lo + i0 + j0
        if transfer_only:
            w.download(a, [d[at:at + i1 - i0] for d in dst], pinned)
            w.download(b, [d[at + i1 - i0:at + (i1 - i0) + (j1 - j0)] for d in dst], pinned)
            return
        w.download(_merge_on_gpu(a, b), [d[at:at + (i1 - i0) + (j1 - j0)] for d in dst], pinned)

    _on_gpus(gpus, _interleaved(per_relation), fetch, work, slot_bytes, streams, workers, memory_limit)
    return merged_of


def _host_copy_of(cols: list[np.ndarray], arenas: list | None) -> list[np.ndarray]:
    """Uninitialized host arrays shaped as ``cols``: in one page-locked arena (appended to
    ``arenas``) or, with ``arenas`` None, pageable."""
    if arenas is None:
        return [np.empty_like(c) for c in cols]
    arena = HostArena(sum(c.nbytes + 256 for c in cols))
    arenas.append(arena)
    return [arena.take(c.size, c.dtype) for c in cols]


def global_sort(rels: list[list[np.ndarray]], run_rows: int, gpus, workers, slot_bytes, streams, stats: dict,
                labels: list[str], memory_limit=None, arenas: list | None = None, transfer_only: bool = False
                ) -> list[list[np.ndarray]]:
    """Each relation of ``rels`` (its columns, key first) sorted by key on the GPUs, all of them
    in the same phases: sorted runs written from the columns into a host buffer, then merge
    rounds between two (page-locked ones, in ``arenas``, when given); the columns are not
    modified.  Returns each relation's sorted columns."""
    t0 = time.perf_counter()
    pinned = arenas is not None
    bufs = [[_host_copy_of(cols, arenas)] for cols in rels]
    # a power of two of runs, at least one a GPU: every merge round pairs them all (no odd run
    # copied by the host) and the GPUs get as many runs each (5 runs on two H200s: 3 and 2)
    rows = []
    for cols in rels:
        n = cols[0].size
        count = 1 << max(0, math.ceil(math.log2(max(len(gpus), -(-n // run_rows), 1))))
        rows.append(max(1, -(-n // count)))
    runs = sort_runs([(cols, b[0], r) for cols, b, r in zip(rels, bufs, rows)], gpus, workers, slot_bytes, streams,
                     memory_limit, pinned, transfer_only)
    for label, r in zip(labels, runs):
        stats[f"{label}_runs"] = len(r)
    t1 = time.perf_counter()
    for cols, b, r in zip(rels, bufs, runs):
        if len(r) > 1:
            b.append(_host_copy_of(cols, arenas))
    rounds = [0] * len(rels)
    while any(len(r) > 1 for r in runs):
        # pieces of half a run: more of them a GPU keep its copy-in and copy-out busy at once
        live = [k for k, r in enumerate(runs) if len(r) > 1]
        done = merge_round([(bufs[k][rounds[k] % 2], bufs[k][(rounds[k] + 1) % 2], runs[k], max(1, run_rows // 2))
                            for k in live], gpus, workers, slot_bytes, streams, memory_limit, pinned, transfer_only)
        for k, r in zip(live, done):
            runs[k] = r
            rounds[k] += 1
    stats["sort_s"] = t1 - t0
    stats["merge_s"] = time.perf_counter() - t1
    for label, r in zip(labels, rounds):
        stats[f"{label}_merge_rounds"] = r
    return [b[r % 2] for b, r in zip(bufs, rounds)]


def _band_bounds(xp, keys, band: int):
    """keys - band and keys + band, saturating at the dtype's ends (no wrap-around)."""
    if not band:
        return keys, keys
    info = np.iinfo(keys.dtype)
    b = min(band, info.max)
    lo = xp.where(keys < info.min + b, info.min, keys - keys.dtype.type(b)).astype(keys.dtype)
    hi = xp.where(keys > info.max - b, info.max, keys + keys.dtype.type(b)).astype(keys.dtype)
    return lo, hi


def _pieces(todo: list, limit: int, width_r: int, width_s: int, keys: tuple | None = None):
    """Pieces (r0, r1, s0, s1) (join_ranges'), each halved (S first, then R) until its rows fit
    ``limit`` bytes.  ``keys`` (sorted R keys, sorted S keys, band): an S half keeps only the R
    rows its keys can match (two binary searches), so R is not read once per half."""
    out = []
    while todo:
        r0, r1, s0, s1 = todo.pop()
        if (r1 - r0) * width_r + (s1 - s0) * width_s <= limit or (r1 - r0 <= 1 and s1 - s0 <= 1):
            out.append((r0, r1, s0, s1))
        elif s1 - s0 > 1 and (s1 - s0) * width_s >= (r1 - r0) * width_r or r1 - r0 <= 1:
            m = (s0 + s1) // 2  # any S subset finds its matches in the piece's R range
            todo += [(*_matching(keys, r0, r1, a, b), a, b) for a, b in ((s0, m), (m, s1))]
        else:
            m = (r0 + r1) // 2
            todo += [(r0, m, s0, s1), (m, r1, s0, s1)]
    return out[::-1]


def _matching(keys: tuple | None, r0: int, r1: int, s0: int, s1: int) -> tuple[int, int]:
    """The R rows of [r0, r1) that S rows [s0, s1) can match (all of them without ``keys``)."""
    if keys is None or s1 <= s0:
        return r0, r1
    rk, sk, band = keys
    info = np.iinfo(rk.dtype)
    first, last = max(int(sk[s0]) - band, info.min), min(int(sk[s1 - 1]) + band, info.max)
    part = rk[r0:r1]
    lo = r0 + int(np.searchsorted(part, rk.dtype.type(first), side="left"))
    return lo, max(lo, r0 + int(np.searchsorted(part, rk.dtype.type(last), side="right")))


def gsm_join(build_cols: list[np.ndarray], probe_cols: list[np.ndarray], budget: int, gpus: list[int], *,
             band: int = 0, emit_keys: bool = False, aggregate: str | None = None, run_rows: int | None = None,
             block_pairs: int = 1 << 24, streams: int = 3, memory_limit: int | None = None,
             pin: bool | None = None, transfer_only: bool = False):
    """The global sort-merge join of host relations R (build) and S (probe) on ``gpus``.

    Parameters
    ----------
    build_cols, probe_cols : host NumPy arrays (n,), the key first (int32 or int64, the same
        dtype both sides, no nulls), then carried fixed-width columns
    budget : GPU bytes each GPU may use (sizes the runs and the pieces)
    gpus : device ids, one host thread each (an id may repeat)
    band : pairs with |r - s| <= band (0: the equi-join)
    emit_keys, aggregate : as ``triton_join`` (``aggregate="sum"``: the sum of the first probe
        column over the pairs, no rows kept)
    run_rows : rows of a sorted run at most (default from ``budget``; a power of two of runs is
        made, at least one a GPU), merge pieces of half that
    block_pairs : pairs expanded at once on a GPU (the output buffer)
    memory_limit : each GPU's cap on CuPy's pool (bytes), None for none
    pin : the sorted copies in page-locked memory (default: when they take at most half the
        host's free memory)
    transfer_only : every run, merge piece and join piece moves as in the join, no kernel runs
        and nothing is joined (paper 000's transfer-only mode, Fig. 8; the time of Eq. 4-5)

    Returns
    -------
    ``outofcore.triton.JoinResult`` of the inner join (build's key when ``emit_keys``), rows in
    key order of the probe side within each piece; ``stats`` with the sort, merge and join times,
    merge rounds, pieces and bytes moved.

    Raises
    ------
    MemoryError
        Host memory cannot hold the two sorted copies of the relations (checked before work).

    References
    ----------
    Paper 000 §3.2 (sorted runs, merge-path multi-GPU merge, merge-path partitioned join).
    """
    import cupy as cp

    from ..outofcore.triton import JoinResult

    if build_cols[0].dtype != probe_cols[0].dtype:
        raise TypeError(f"build and probe keys must share a dtype, got {build_cols[0].dtype} and {probe_cols[0].dtype}")
    if aggregate not in (None, "sum"):
        raise ValueError(f"aggregate must be None or 'sum', got {aggregate!r}")
    if aggregate == "sum" and len(probe_cols) < 2:
        raise ValueError("aggregate='sum' sums the first probe column; give one")
    if band < 0:
        raise ValueError(f"band must be at least 0, got {band}")
    wr, ws = (sum(c.itemsize for c in cols) for cols in (build_cols, probe_cols))
    from ..outofcore.budget import check_host

    sorted_bytes = 2 * (build_cols[0].size * wr + probe_cols[0].size * ws)  # each relation sorted twice over
    check_host(sorted_bytes, f"GSM's sorted copies of both relations ({sorted_bytes:,} bytes: runs and merges "
               "ping-pong between two host buffers)", "use algorithm='hybrid', which partitions in place")
    if run_rows is None:  # a merge piece: two inputs, their merged copy and the ranks, within a quarter
        run_rows = max(1024, budget // 4 // (4 * max(wr, ws) + 16))
    slot = Uploader.slot_size(run_rows * max(c.itemsize for c in build_cols + probe_cols), 1)
    d = len(gpus)
    workers: list = [None] * d
    if pin is None:
        from ..outofcore.budget import host_available

        pin = sorted_bytes <= host_available() // 2
    arenas: list | None = [] if pin else None
    stats: dict = {"gpus": list(gpus), "algorithm": "gsm", "run_rows": run_rows, "pinned": pin}
    try:
        t0 = time.perf_counter()
        R, S = global_sort([build_cols, probe_cols], run_rows, gpus, workers, slot, streams, stats, ["build", "probe"],
                           memory_limit, arenas, transfer_only)
        t1 = time.perf_counter()
        n_r, n_s = R[0].size, S[0].size
        # enough pieces that each fits a sixth of the budget (a multiple of the GPUs, so that
        # they share them evenly), halved further only where one key is heavy; transfer-only:
        # the keys are not sorted, so the pieces are even cuts of both (each row read once)
        limit = max(1, budget // 6)  # the next piece's inputs arrive beside this one's pairs
        parts = d * max(1, -(-(n_r * wr + n_s * ws) // (d * limit)))
        todo = ([(n_r * p // parts, n_r * (p + 1) // parts, n_s * p // parts, n_s * (p + 1) // parts)
                 for p in range(parts)] if transfer_only else join_ranges(R[0], S[0], parts, band))
        pieces = _pieces(todo, limit, wr, ws, None if transfer_only else (R[0], S[0], band))
        outs = [None] * d
        lock = threading.Lock()
        totals = [0] * d
        rows = [0] * d

        def fetch(w, piece):
            r0, r1, s0, s1 = piece
            return w.upload(R, r0, r1), w.upload(S, s0, s1)

        def work(w, piece, data):
            from ..theta.nlj import interval_pairs

            g = workers.index(w)
            rc, sc = data
            if transfer_only:
                return
            lo_v, hi_v = _band_bounds(cp, sc[0], band)
            lo = cp.searchsorted(rc[0], lo_v, side="left")
            counts = cp.searchsorted(rc[0], hi_v, side="right") - lo
            if aggregate == "sum":
                v = sc[1].astype(cp.int64)
                with lock:
                    totals[g] += int((v * counts).sum())
                    rows[g] += int(counts.sum())
                return
            out = outs[g]
            for s_idx, r_idx in interval_pairs(cp, lo, counts, None, block_pairs, [], [], []).blocks():
                k = int(s_idx.size)
                cols = ([rc[0][r_idx]] if emit_keys else []) + [c[r_idx] for c in rc[1:]] + [c[s_idx] for c in sc[1:]]
                if out[0].n + k > out[0].values.size:
                    w.down.flush()
                    for c in out:
                        c.reserve(max(k, out[0].values.size))
                w.download(cols, [c.values[c.n:c.n + k] for c in out])
                for c in out:
                    c.n += k
                rows[g] += k

        dtypes = ([R[0].dtype] if emit_keys else []) + [c.dtype for c in R[1:]] + [c.dtype for c in S[1:]]
        guess = max(probe_cols[0].size, 1) // d
        if aggregate is None and not transfer_only:
            outs[:] = [[HostColumn(t, guess) for t in dtypes] for _ in range(d)]
        _on_gpus(gpus, pieces, fetch, work, slot, streams, workers, memory_limit)
        t2 = time.perf_counter()
        key = None
        cols = []
        if aggregate is None:
            cols = [concatenate([o[i].finish()[0] for o in outs if o], dtypes[i]) for i in range(len(dtypes))]
            if emit_keys:
                key = cols.pop(0)
        nb = len(R) - 1
        stats.update({"pieces": len(pieces), "join_s": t2 - t1, "sort_merge_s": t1 - t0,
                      "h2d_bytes": sum(w.h2d for w in workers if w), "d2h_bytes": sum(w.d2h for w in workers if w),
                      "phases": {"sort": stats["sort_s"], "merge": stats["merge_s"], "join": t2 - t1},
                      "per_gpu": [{"device": gpus[g], "rows": rows[g]} for g in range(d)]})
        return JoinResult(key, [(c, None) for c in cols[:nb]], [(c, None) for c in cols[nb:]], sum(rows),
                          sum(totals) if aggregate else None, stats)
    finally:
        for arena in arenas or []:
            arena.close()
