"""PHJ on the CPU: a multi-threaded radix-partitioned hash join producing gather maps.

Both sides are radix-partitioned on a hash of the key into cache-sized co-partitions (one
parallel pass each); then every co-partition, in parallel, builds a chained hash table on its
build rows and probes it with its probe rows, once to count the output and once to write it, so
every thread writes its own contiguous slice of the output without locks.

References: Kim et al., "Sort vs. Hash Revisited", PVLDB 2(2), 2009 (the radix join on
multi-core CPUs); paper 003 §1.4 (its GPU counterpart, PHJ), doi:10.1145/3709689.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..kernels import fmix64, num_chunks, partition_bits, radix_partition_keys, table_offsets
from ...outofcore.budget import check_pairs

#: Probe modes: which probe rows and pairs are emitted.
INNER, PROBE_OUTER, FULL, SEMI, ANTI = 0, 1, 2, 3, 4
MODES = {"inner": INNER, "probe_outer": PROBE_OUTER, "full": FULL, "semi": SEMI, "anti": ANTI}


@njit(parallel=True, cache=True)
def _build(bkeys, boff, toff, heads, nxt):
    """Chained tables, one per partition; returns the number of build keys seen twice.

    Links are int32 positions within the partition (+1; 0 ends a chain): half the bytes of
    global int64 links, and partitions never approach 2**31 rows.
    """
    P = boff.size - 1
    dups = np.zeros(P, np.int64)
    for p in prange(P):
        base = toff[p]
        mask = np.uint64(toff[p + 1] - base - 1)
        d = 0
        lo = boff[p]
        for j in range(lo, boff[p + 1]):
            k = bkeys[j]
            s = base + np.int64(fmix64(np.uint64(k)) & mask)
            c = heads[s]
            while c != 0:
                if bkeys[lo + c - 1] == k:
                    d += 1
                    break
                c = nxt[lo + c - 1]
            nxt[j] = heads[s]
            heads[s] = np.int32(j - lo + 1)
        dups[p] = d
    return dups.sum()


@njit(parallel=True, cache=True)
def _compact(out_off, counts, out_p, out_b, has_b):
    """Close the gaps a single-pass probe leaves between partitions' outputs."""
    P = counts.size
    dst = np.zeros(P + 1, np.int64)
    for p in range(P):
        dst[p + 1] = dst[p] + counts[p]
    res_p = np.empty(dst[P], out_p.dtype)
    res_b = np.empty(dst[P] if has_b else 0, out_b.dtype)
    for p in prange(P):
        for i in range(counts[p]):
            res_p[dst[p] + i] = out_p[out_off[p] + i]
            if has_b:
                res_b[dst[p] + i] = out_b[out_off[p] + i]
    return res_p, res_b


@njit(parallel=True, cache=True)
def _probe(bkeys, brows, boff, pkeys, prows, poff, toff, heads, nxt, mode, write, out_off,
           out_p, out_b, bmatched):
    """Count (write=False: returns per-partition output counts) or write the output pairs."""
    P = poff.size - 1
    counts = np.zeros(P, np.int64)
    for p in prange(P):
        base = toff[p]
        mask = np.uint64(toff[p + 1] - base - 1)
        o = out_off[p] if write else 0
        lo = boff[p]
        for i in range(poff[p], poff[p + 1]):
            k = pkeys[i]
            j = heads[base + np.int64(fmix64(np.uint64(k)) & mask)]
            found = False
            while j != 0:
                b = lo + j - 1
                if bkeys[b] == k:
                    found = True
                    if mode == SEMI or mode == ANTI:
                        break
                    if write:
                        out_p[o] = prows[i]
                        out_b[o] = brows[b]
                        if mode == FULL:
                            bmatched[b] = True
                    o += 1
                j = nxt[b]
            emit = (found and mode == SEMI) or (not found and mode != INNER and mode != SEMI)
            if emit:
                if write:
                    out_p[o] = prows[i]
                    if mode == PROBE_OUTER or mode == FULL:
                        out_b[o] = -1
                o += 1
        counts[p] = o - out_off[p] if write else o
    return counts


@njit(parallel=True, cache=True)
def _int32_range(a):
    """True when every value of the integer array ``a`` fits in int32 (a parallel min/max)."""
    n = a.size
    if n == 0:
        return True
    chunks = max(1, min(64, n >> 16))
    step = (n + chunks - 1) // chunks
    lo = np.empty(chunks, np.int64)
    hi = np.empty(chunks, np.int64)
    for t in prange(chunks):
        a0, a1 = t * step, min(n, (t + 1) * step)
        mn = mx = np.int64(a[a0])
        for i in range(a0, a1):
            v = np.int64(a[i])
            mn = min(mn, v)
            mx = max(mx, v)
        lo[t], hi[t] = mn, mx
    return lo.min() >= -2147483648 and hi.max() <= 2147483647


@njit(parallel=True, cache=True)
def _to_int32(a):
    out = np.empty(a.size, np.int32)
    for i in prange(a.size):
        out[i] = a[i]
    return out


def _narrow(bkeys, pkeys, brows, prows):
    """4-byte keys and row ids where the values allow: half the bytes through the partition,
    the tables and the output gather maps."""
    if bkeys.dtype != np.int32 and _int32_range(bkeys) and _int32_range(pkeys):
        bkeys, pkeys = _to_int32(bkeys), _to_int32(pkeys)
    if brows.dtype != np.int32 or prows.dtype != np.int32:  # row ids ascend: the last is the largest
        if max(brows[-1] if brows.size else 0, prows[-1] if prows.size else 0) < 2**31:
            brows, prows = _to_int32(brows), _to_int32(prows)
    return bkeys, pkeys, brows, prows


def hash_join(build_keys: np.ndarray, build_rows: np.ndarray, probe_keys: np.ndarray,
              probe_rows: np.ndarray, mode: str, *, radix_bits: int | None = None):
    """Radix-partitioned hash join of int64 keys; returns gather maps.

    Parameters
    ----------
    build_keys, build_rows : int64 (nb,), and int32 or int64 ascending row ids
        Keys of the build side R and the row id each came from (rows with null keys left out).
    probe_keys, probe_rows : the same (np,)
        The same for the probe side S.
    mode : {"inner", "probe_outer", "full", "semi", "anti"}
        ``probe_outer`` also emits probe rows without a partner (build id -1); ``full`` adds
        to that the unmatched build rows (probe id -1); ``semi``/``anti`` emit each probe row
        once, when it has / has no partner.
    radix_bits : int, optional
        Partitioning fanout 2**radix_bits; by default sized so a partition's table fits in L2.

    Returns
    -------
    probe_idx, build_idx : int32 or int64 (m,), the dtype of the row ids (int32 when they fit)
        Row ids of each output pair, -1 where a side has no partner; ``build_idx`` is None
        for semi and anti joins.  Order is unspecified.

    Notes
    -----
    Memory: 2 x (nb + np) int64 for the partitions, one int64 per build row for the chains
    and two power-of-two bucket arrays per partition, plus the output.  Numba threads.
    """
    m = MODES[mode]
    nbits = partition_bits(build_keys.size) if radix_bits is None else radix_bits
    build_keys, probe_keys, build_rows, probe_rows = _narrow(build_keys, probe_keys, build_rows, probe_rows)
    bk, br, boff = radix_partition_keys(build_keys, build_rows, nbits, num_chunks(build_keys.size))
    pk, pr, poff = radix_partition_keys(probe_keys, probe_rows, nbits, num_chunks(probe_keys.size))
    toff = table_offsets(boff)
    heads = np.zeros(toff[-1], np.int32)
    nxt = np.empty(bk.size, np.int32)
    unique_build = _build(bk, boff, toff, heads, nxt) == 0
    empty_p, empty_b = np.empty(0, pr.dtype), np.empty(0, br.dtype)
    bmatched = np.zeros(bk.size if m == FULL else 0, np.bool_)
    has_b = m in (INNER, PROBE_OUTER, FULL)
    if unique_build or m in (SEMI, ANTI):
        # every probe row emits at most one row: its partition's probe range bounds the output,
        # so one probe pass writes it and a compaction closes the gaps (no counting pass)
        out_p = np.empty(pk.size, pr.dtype)
        out_b = np.empty(pk.size if has_b else 0, br.dtype)
        counts = _probe(bk, br, boff, pk, pr, poff, toff, heads, nxt, m, True, poff, out_p, out_b, bmatched)
        if counts.sum() != pk.size:
            out_p, out_b = _compact(poff, counts, out_p, out_b, has_b)
    else:
        counts = _probe(bk, br, boff, pk, pr, poff, toff, heads, nxt, m, False,
                        np.zeros(poff.size, np.int64), empty_p, empty_b, bmatched)
        out_off = np.zeros(counts.size + 1, np.int64)
        np.cumsum(counts, out=out_off[1:])
        pairs = int(out_off[-1])
        check_pairs(pairs, pr.itemsize + (br.itemsize if has_b else 0))
        out_p = np.empty(int(out_off[-1]), pr.dtype)
        out_b = np.empty(int(out_off[-1]) if has_b else 0, br.dtype)
        _probe(bk, br, boff, pk, pr, poff, toff, heads, nxt, m, True, out_off, out_p, out_b, bmatched)
    if m == FULL:
        unmatched = br[~bmatched]
        out_p = np.concatenate([out_p, np.full(unmatched.size, -1, out_p.dtype)])
        out_b = np.concatenate([out_b, unmatched])
    return out_p, (out_b if m in (INNER, PROBE_OUTER, FULL) else None)
