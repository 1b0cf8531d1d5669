"""``merge``: the parallel merge join of paper 002 §4.1, generalized to gpujoin's joins.

Both sides are sorted in parallel (an order-preserving bucketing on the top bits of key - min,
then each bucket sorted on its own thread), the sorted probe side is cut into one fragment per
thread chunk, each fragment finds its start in the sorted build side by binary search and then
merges forward, so every chunk works independently.  Duplicates on both sides are handled
(each probe key gets the run of equal build keys), which makes it a full equi-join for every
join type; the paper's case (unique 32-bit keys, output the intersection) is the inner join.

Reference: Kruliš, Yaghob, "Revision of relational joins for multi-core and many-core
architectures", DATESO 2011 (paper 002), §4.1.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ...outofcore.budget import check_pairs
from ..kernels import num_chunks, radix_partition
from .phj import ANTI, FULL, INNER, MODES, PROBE_OUTER, SEMI
from .threads import num_threads


@njit(parallel=True, cache=True)
def _sort_buckets(keys, rows, offsets):
    """Sort every bucket [offsets[b], offsets[b+1]) of (keys, rows) by key, one bucket a task."""
    for b in prange(offsets.size - 1):
        lo, hi = offsets[b], offsets[b + 1]
        if hi - lo > 1:
            order = np.argsort(keys[lo:hi])
            k = keys[lo:hi][order]
            r = rows[lo:hi][order]
            keys[lo:hi] = k
            rows[lo:hi] = r


@njit(parallel=True, cache=True)
def _bucket_of(keys, kmin, shift):
    out = np.empty(keys.size, np.uint64)
    for i in prange(keys.size):
        out[i] = (np.uint64(keys[i] - kmin) >> np.uint64(shift)) << np.uint64(32)
    return out


def parallel_sort(keys: np.ndarray, rows: np.ndarray, kmin: int, kmax: int) -> tuple[np.ndarray, np.ndarray]:
    """(keys, rows) sorted by key: MSD bucketing into about 64 buckets a thread, then a sort per
    bucket in parallel.  kmin/kmax bound the keys (int64)."""
    n = keys.size
    if n < 2:
        return keys.copy(), rows.copy()
    span_bits = max(1, int(kmax - kmin).bit_length())
    bbits = min(span_bits, max(6, int(np.log2(max(1, n >> 12))) if n > 4096 else 1), 16)
    shift = span_bits - bbits
    k, r, off = radix_partition(_bucket_of(keys, np.int64(kmin), shift), bbits, num_chunks(n), keys, rows)
    _sort_buckets(k, r, off)
    return k, r


@njit(parallel=True, cache=True)
def _bounds(a, b, nchunks, upper):
    """For each b[j] of sorted b: how many of sorted a are < b[j] (<= when upper).  Each chunk of
    b binary-searches its first element, then merges forward."""
    n = b.size
    out = np.empty(n, np.int64)
    step = (n + nchunks - 1) // nchunks
    for t in prange(nchunks):
        lo, hi = t * step, min(n, (t + 1) * step)
        if lo >= hi:
            continue
        i = np.searchsorted(a, b[lo], side="right") if upper else np.searchsorted(a, b[lo], side="left")
        for j in range(lo, hi):
            x = b[j]
            if upper:
                while i < a.size and a[i] <= x:
                    i += 1
            else:
                while i < a.size and a[i] < x:
                    i += 1
            out[j] = i
    return out


@njit(parallel=True, cache=True)
def _emit(lower, counts, offsets, sb_rows, sp_rows, nchunks, outer, out_p, out_b):
    """Write each probe row's pairs (or, with ``outer``, a -1 partner where it has none)."""
    n = counts.size
    step = (n + nchunks - 1) // nchunks
    for t in prange(nchunks):
        for j in range(t * step, min(n, (t + 1) * step)):
            o = offsets[j]
            c = counts[j]
            for q in range(c):
                out_p[o + q] = sp_rows[j]
                out_b[o + q] = sb_rows[lower[j] + q]
            if outer and c == 0:
                out_p[o] = sp_rows[j]
                out_b[o] = -1


def merge_join(build_keys: np.ndarray, build_rows: np.ndarray, probe_keys: np.ndarray,
               probe_rows: np.ndarray, mode: str, *, threads: int | None = None):
    """Parallel sort-merge join; the contract of :func:`gpujoin.cpu.join.phj.hash_join`.

    Parameters
    ----------
    build_keys, probe_keys : int64 or int32 (nb,), (np,)
    build_rows, probe_rows : int32/int64 row ids of those keys
    mode : "inner", "probe_outer", "full", "semi", "anti"
    threads : Numba threads to use (default: all)

    Returns
    -------
    probe_idx, build_idx : (m,) row ids (-1: no partner); build_idx is None for semi/anti.
    """
    m = MODES[mode]
    with num_threads(threads):
        both = [k for k in (build_keys, probe_keys) if k.size]
        kmin = min(int(k.min()) for k in both) if both else 0
        kmax = max(int(k.max()) for k in both) if both else 0
        sbk, sbr = parallel_sort(build_keys, build_rows, kmin, kmax)
        spk, spr = parallel_sort(probe_keys, probe_rows, kmin, kmax)
        chunks = num_chunks(max(spk.size, 1))
        lower = _bounds(sbk, spk, chunks, False)
        counts = _bounds(sbk, spk, chunks, True) - lower
        if m == SEMI:
            return spr[counts > 0], None
        if m == ANTI:
            return spr[counts == 0], None
        outer = m in (PROBE_OUTER, FULL)
        sizes = np.maximum(counts, 1) if outer else counts
        offsets = np.zeros(sizes.size + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        total = int(offsets[-1])
        check_pairs(total, spr.itemsize + sbr.itemsize)
        out_p = np.empty(total, spr.dtype)
        out_b = np.empty(total, sbr.dtype)
        _emit(lower, counts, offsets, sbr, spr, chunks, outer, out_p, out_b)
        if m == FULL:
            bchunks = num_chunks(max(sbk.size, 1))
            matched = _bounds(spk, sbk, bchunks, True) > _bounds(spk, sbk, bchunks, False)
            unmatched = sbr[~matched]
            out_p = np.concatenate([out_p, np.full(unmatched.size, -1, out_p.dtype)])
            out_b = np.concatenate([out_b, unmatched])
        assert m in (INNER, PROBE_OUTER, FULL)
        return out_p, out_b
