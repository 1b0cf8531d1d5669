"""Numba primitives of the CPU engine: hashing, stable radix partitioning, factorization.

Every kernel is compiled once (``cache=True`` keeps the machine code on disk) and runs on
Numba's thread pool; ``numba.set_num_threads`` bounds it.  Keys reach these kernels already
reduced to int64 (see ``gpujoin.plan.keys``), so one compiled instance serves every key type.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S33 = np.uint64(33)
_S32 = np.uint64(32)

#: Rows per thread chunk below which a kernel is not worth splitting.
MIN_CHUNK = 1 << 14


@njit(inline="always", cache=True)
def fmix64(x):
    """murmur3's 64-bit finalizer: a bijective mix, so distinct keys get distinct hashes."""
    x ^= x >> _S33
    x *= _M1
    x ^= x >> _S33
    x *= _M2
    x ^= x >> _S33
    return x


@njit(inline="always", cache=True)
def partition_of(h, mask):
    """Partition number of hash ``h``: bits 32.. of the hash, so tables use the low bits."""
    return (h >> _S32) & mask


@njit(parallel=True, cache=True)
def hash_rows(keys2d):
    """One uint64 hash per row of the (k, n) int64 key matrix (columns combined, boost-style).

    For one column it is a bijection of the key (fmix64, an xor and an add, each invertible):
    ``factorize`` relies on that to skip comparing keys whose hashes are equal.
    """
    k, n = keys2d.shape
    out = np.empty(n, np.uint64)
    for i in prange(n):
        h = _GOLDEN
        for c in range(k):
            h = fmix64(h ^ (fmix64(np.uint64(keys2d[c, i])) + _GOLDEN + (h << np.uint64(6)) + (h >> np.uint64(2))))
        out[i] = h
    return out


def num_chunks(n: int) -> int:
    """Chunks a parallel pass splits ``n`` rows into: a few per thread, none tiny."""
    return int(max(1, min(numba.get_num_threads() * 4, n // MIN_CHUNK)))


@njit(inline="always", cache=True)
def _hash_at(hashes, a, i, inline):
    return fmix64(np.uint64(a[i])) if inline else hashes[i]


@njit(parallel=True, cache=True)
def _radix_partition(hashes, inline, nbits, nchunks, a, b):
    n = a.size
    P = 1 << nbits
    mask = np.uint64(P - 1)
    step = (n + nchunks - 1) // nchunks
    hist = np.zeros((nchunks, P), np.int64)
    for t in prange(nchunks):
        lo = t * step
        hi = min(n, lo + step)
        for i in range(lo, hi):
            hist[t, partition_of(_hash_at(hashes, a, i, inline), mask)] += 1
    offsets = np.empty(P + 1, np.int64)
    total = 0
    for p in range(P):
        offsets[p] = total
        for t in range(nchunks):
            c = hist[t, p]
            hist[t, p] = total
            total += c
    offsets[P] = total
    out_a = np.empty_like(a)
    out_b = np.empty_like(b)
    for t in prange(nchunks):
        lo = t * step
        hi = min(n, lo + step)
        cur = hist[t]
        for i in range(lo, hi):
            p = partition_of(_hash_at(hashes, a, i, inline), mask)
            j = cur[p]
            out_a[j] = a[i]
            out_b[j] = b[i]
            cur[p] = j + 1
    return out_a, out_b, offsets


def radix_partition(hashes, nbits, nchunks, a, b):
    """Stable radix partition of the pairs (a[i], b[i]) on hash bits [32, 32 + nbits).

    Parameters
    ----------
    hashes : uint64 (n,)   the hash of each row's key
    nbits : int            radix bits; 2**nbits partitions
    nchunks : int          thread chunks (see ``num_chunks``)
    a, b : (n,) integer    payloads moved with the rows (key and row id, or row id and hash)

    Returns
    -------
    out_a, out_b : (n,), dtypes of a and b: partitioned payloads, input order kept within a partition
    offsets : int64 (2**nbits + 1,) partition p holds rows offsets[p]:offsets[p+1]

    Notes
    -----
    Histogram per chunk, exclusive scan in (partition, chunk) order, scatter per chunk: the
    classic two-pass parallel radix partition (paper 003 §1, "radix-partition").
    """
    return _radix_partition(hashes, False, nbits, nchunks, a, b)


def radix_partition_keys(keys, rows, nbits, nchunks):
    """:func:`radix_partition` of (key, row id) pairs on the fmix64 hash of the key, computed in
    both passes instead of read from an array (8 bytes a row less to write and read twice)."""
    return _radix_partition(np.empty(0, np.uint64), True, nbits, nchunks, keys, rows)


def table_offsets(part_offsets: np.ndarray, load: int = 1) -> np.ndarray:
    """Start of each partition's bucket array in one shared array: a power of two >= load * rows."""
    sizes = np.diff(part_offsets) * load
    sizes = np.left_shift(1, np.ceil(np.log2(np.maximum(sizes, 1))).astype(np.int64))
    out = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


@njit(parallel=True, cache=True)
def _factorize_partitions(keys2d, rows, hashes, offsets, local, reps):
    """Per partition, a chained hash table of groups: local group id of each row, groups' first rows.

    The bucket array starts small and doubles when the groups outgrow it, so a partition with few
    groups keeps its table in L1 whatever its row count.
    """
    P = offsets.size - 1
    k = keys2d.shape[0]
    counts = np.zeros(P, np.int64)
    for p in prange(P):
        lo = offsets[p]
        hi = offsets[p + 1]
        cap = 64
        heads = np.zeros(cap, np.int64)
        gnext = np.empty(hi - lo, np.int64)
        ghash = np.empty(hi - lo, np.uint64)
        ng = 0
        for i in range(lo, hi):
            r = rows[i]
            h = hashes[i]
            g = heads[np.int64(h & np.uint64(cap - 1))]
            found = -1
            while g != 0:
                if ghash[g - 1] == h:
                    rr = reps[lo + g - 1]
                    same = True
                    # one column: hash_rows is a bijection of the key, so equal hashes are equal
                    # keys and the two random reads of the check can be skipped
                    for c in range(k if k > 1 else 0):
                        if keys2d[c, rr] != keys2d[c, r]:
                            same = False
                            break
                    if same:
                        found = g - 1
                        break
                g = gnext[g - 1]
            if found < 0:
                if 2 * ng >= cap:
                    cap *= 4
                    heads = np.zeros(cap, np.int64)
                    for q in range(ng):
                        s = np.int64(ghash[q] & np.uint64(cap - 1))
                        gnext[q] = heads[s]
                        heads[s] = q + 1
                found = ng
                s = np.int64(h & np.uint64(cap - 1))
                reps[lo + ng] = r
                ghash[ng] = h
                gnext[ng] = heads[s]
                heads[s] = ng + 1
                ng += 1
            local[i] = found
        counts[p] = ng
    return counts


@njit(parallel=True, cache=True)
def _globalize(rows, offsets, local, reps, goff, codes, first_rows, part_gid):
    P = offsets.size - 1
    for p in prange(P):
        lo = offsets[p]
        g0 = goff[p]
        for i in range(lo, offsets[p + 1]):
            g = g0 + local[i]
            codes[rows[i]] = g
            part_gid[i] = g
        for g in range(goff[p + 1] - g0):
            first_rows[g0 + g] = reps[lo + g]


class Factorization:
    """Dense group ids of a key matrix (see :func:`factorize`).

    Attributes
    ----------
    codes : int64 (n,)         group id of each row, in [0, num_groups)
    num_groups : int
    first_rows : int64 (g,)    a row of each group (its first in partition order, or in input
                               order where the ids came from a dense key range)
    rows, offsets, part_gid    a radix partition of the rows whose groups are disjoint across
                               partitions: partition p holds rows[offsets[p]:offsets[p+1]] with
                               ids part_gid[...], so partition-parallel aggregation needs no
                               atomics (the hash path's own partition; for dense ids made on
                               first use, partitions by ranges of ids)
    """

    __slots__ = ("codes", "num_groups", "first_rows", "_rows", "_offsets", "_part_gid")

    def __init__(self, codes, num_groups, first_rows, rows=None, offsets=None, part_gid=None):
        self.codes = codes
        self.num_groups = num_groups
        self.first_rows = first_rows
        self._rows, self._offsets, self._part_gid = rows, offsets, part_gid

    def _partition(self) -> None:
        n, g = self.codes.size, max(1, self.num_groups)
        bits = partition_bits(n)
        # partition = the id's range of g / 2^bits ids, placed in the hash bits radix_partition reads
        part = (self.codes * (1 << bits) // g).astype(np.uint64) << np.uint64(32)
        self._rows, self._part_gid, self._offsets = radix_partition(part, bits, num_chunks(n),
                                                                    np.arange(n, dtype=np.int64), self.codes)

    @property
    def rows(self):
        if self._rows is None:
            self._partition()
        return self._rows

    @property
    def offsets(self):
        if self._offsets is None:
            self._partition()
        return self._offsets

    @property
    def part_gid(self):
        if self._part_gid is None:
            self._partition()
        return self._part_gid


@njit(parallel=True, cache=True)
def _dense_first_rows(keys, kmin, span, nchunks):
    """The first row of each key value in [kmin, kmin + span), -1 where the value is absent:
    each chunk of rows its own table, then the earliest chunk's row of each value."""
    n = keys.size
    step = (n + nchunks - 1) // nchunks
    firsts = np.full((nchunks, span), -1, np.int64)
    for t in prange(nchunks):
        f = firsts[t]
        for i in range(t * step, min(n, (t + 1) * step)):
            v = keys[i] - kmin
            if f[v] < 0:
                f[v] = i
    first = np.full(span, -1, np.int64)
    for v in prange(span):
        for t in range(nchunks):
            if firsts[t, v] >= 0:
                first[v] = firsts[t, v]
                break
    return first


@njit(parallel=True, cache=True)
def _dense_codes(keys, kmin, ids, out):
    for i in prange(keys.size):
        out[i] = ids[keys[i] - kmin]


#: factorize's dense path: one key column whose values span at most this many times its rows
#: (and at least 2^16 values are always allowed), a table as large as the column itself.
DENSE_SPAN_PER_ROW = 1


def _factorize_dense(keys: np.ndarray) -> Factorization | None:
    """One int64 key column whose values lie in a range no wider than its rows: the value less
    the minimum indexes a table directly (the perfect hash aggregation of DuckDB and of paper
    003's HGB for dense keys), no hashing, no partitioning, ids in key order.  None otherwise."""
    n = keys.size
    if n == 0:
        return None
    kmin, kmax = int(keys.min()), int(keys.max())
    span = kmax - kmin + 1  # Python ints: no overflow at the int64 extremes
    if span > max(1 << 16, DENSE_SPAN_PER_ROW * n):
        return None
    # a table a thread, as long as they stay within 64 MiB together
    chunks = int(max(1, min(numba.get_num_threads(), n // MIN_CHUNK, (1 << 23) // span)))
    first = _dense_first_rows(keys, np.int64(kmin), span, chunks)
    present = first >= 0
    ids = np.cumsum(present, dtype=np.int64) - 1
    codes = np.empty(n, np.int64)
    _dense_codes(keys, np.int64(kmin), ids, codes)
    return Factorization(codes, int(ids[-1]) + 1, first[present])


def partition_bits(n: int, rows_per_partition: int = 1 << 13, max_bits: int = 12) -> int:
    """Radix bits so that a partition's hash table stays cache-sized."""
    if n <= rows_per_partition:
        return 0
    return int(min(max_bits, np.ceil(np.log2(n / rows_per_partition))))


#: Rows after which a thread's table estimates its chunk's groups from the keys it has seen twice.
_PROBE_ROWS = 1 << 16


@njit(inline="always", cache=True)
def _slot(slots, k):
    """The slot of key ``k`` in a linear-probing table of (key, id) rows (id -1: empty; its
    size a power of two): where ``k`` sits, or the empty slot where it would go."""
    mask = slots.shape[0] - 1
    s = np.int64(fmix64(np.uint64(k)) & np.uint64(mask))
    while slots[s, 1] >= 0 and slots[s, 0] != k:
        s = (s + 1) & mask
    return s


@njit(cache=True)
def _empty_slots(cap):
    slots = np.empty((cap, 2), np.int64)
    slots[:, 1] = -1
    return slots


@njit(parallel=True, cache=True)
def _local_tables(keys, nchunks, max_groups, codes, lkeys, lfirst, counts):
    """Each chunk of rows numbers its keys in its own linear-probing table of (key, id) slots
    (one cache line a probe; grown 4x at half full, cache-sized while the groups are few):
    ``codes`` gets the chunk-local ids, ``lkeys`` and ``lfirst`` each local group's key and
    first row.  A chunk that meets more than ``max_groups`` keys, or whose first rows' repeats
    predict more, stops with its count set to -1."""
    n = keys.size
    step = (n + nchunks - 1) // nchunks
    for t in prange(nchunks):
        slots = _empty_slots(256)
        ng = 0
        lo = t * step
        for i in range(lo, min(n, (t + 1) * step)):
            if i - lo == _PROBE_ROWS:  # r rows drawn from G keys repeat about r^2 / 2G times
                repeats = _PROBE_ROWS - ng
                if repeats == 0 or _PROBE_ROWS * _PROBE_ROWS // (2 * repeats) > max_groups:
                    ng = -1  # too many groups: give up now, not once the table is full
                    break
            k = keys[i]
            s = _slot(slots, k)
            g = slots[s, 1]
            if g < 0:
                if ng == max_groups:
                    ng = -1
                    break
                g = ng
                lkeys[t, g] = k
                lfirst[t, g] = i
                slots[s, 0] = k
                slots[s, 1] = g
                ng += 1
                if 2 * ng >= slots.shape[0]:  # grow: the groups' keys placed again
                    slots = _empty_slots(4 * slots.shape[0])
                    for q in range(ng):
                        s2 = _slot(slots, lkeys[t, q])
                        slots[s2, 0] = lkeys[t, q]
                        slots[s2, 1] = q
            codes[i] = g
        counts[t] = ng


@njit(cache=True)
def _merge_local_tables(lkeys, lfirst, counts, ids):
    """The chunks' groups in one table, in chunk order: ``ids[t, l]`` the global id of chunk t's
    local group l (ids by first appearance in the input); returns the groups' first rows."""
    total = 0
    for t in range(counts.size):
        total += counts[t]
    cap = 16
    while cap < 2 * total:
        cap *= 2
    slots = _empty_slots(cap)
    first = np.empty(total, np.int64)
    ng = 0
    for t in range(counts.size):
        for q in range(counts[t]):
            k = lkeys[t, q]
            s = _slot(slots, k)
            if slots[s, 1] < 0:
                slots[s, 0] = k
                slots[s, 1] = ng
                first[ng] = lfirst[t, q]
                ng += 1
            ids[t, q] = slots[s, 1]
    return first[:ng]


@njit(parallel=True, cache=True)
def _globalize_local(codes, ids, nchunks):
    n = codes.size
    step = (n + nchunks - 1) // nchunks
    for t in prange(nchunks):
        for i in range(t * step, min(n, (t + 1) * step)):
            codes[i] = ids[t, codes[i]]


#: factorize's thread-local tables serve one key column while the threads' chunks hold at most
#: this many distinct values together (their merge is one sequential pass over them); more,
#: and the hashed partitions do.  On 2 cores, 2^23 rows: 2^18-2^19 groups 0.14 s in thread
#: tables against 0.23 s hashed, 2^20 groups 0.33 s against 0.25.
LOCAL_TABLE_GROUPS = 1 << 20


def _factorize_local(keys: np.ndarray) -> Factorization | None:
    """One int64 key column of few distinct values however spread: every thread numbers its
    chunk's keys in a small table of its own, the tables are merged in chunk order, and the
    rows' ids are mapped to the merged ones (DuckDB's thread-local pre-aggregation, without the
    partitioning that many groups need).  None when a chunk meets more than its share of
    ``LOCAL_TABLE_GROUPS`` keys (found early: a chunk stops there)."""
    n = keys.size
    chunks = int(max(1, min(numba.get_num_threads(), n // MIN_CHUNK)))  # a table a thread, built once
    most = max(1, LOCAL_TABLE_GROUPS // chunks)  # a chunk's groups
    codes = np.empty(n, np.int64)
    lkeys = np.empty((chunks, most), np.int64)
    lfirst = np.empty((chunks, most), np.int64)
    counts = np.zeros(chunks, np.int64)
    _local_tables(keys, chunks, most, codes, lkeys, lfirst, counts)
    if (counts < 0).any():
        return None
    ids = np.empty((chunks, most), np.int64)
    first = _merge_local_tables(lkeys, lfirst, counts, ids)
    _globalize_local(codes, ids, chunks)
    return Factorization(codes, first.size, first)


def factorize(keys2d: np.ndarray) -> Factorization:
    """Dense ids for the distinct rows of a (k, n) int64 key matrix: a partitioned hash group-by.

    Rows are radix-partitioned on a hash of all k columns, then each partition builds its own
    chained hash table of groups (exact: equal hashes are verified column by column), so
    the work is parallel over partitions and every table fits in cache.  One column whose
    values span no more than its rows takes a direct table instead (:func:`_factorize_dense`),
    one of few distinct values a table a thread (:func:`_factorize_local`).

    Raises
    ------
    ValueError
        ``keys2d`` is not a C-contiguous 2-D int64 array.
    """
    if keys2d.ndim != 2 or keys2d.dtype != np.int64:
        raise ValueError(f"factorize expects a (k, n) int64 matrix, got {keys2d.dtype} {keys2d.shape}")
    keys2d = np.ascontiguousarray(keys2d)
    n = keys2d.shape[1]
    if keys2d.shape[0] == 1 and n:
        one = _factorize_dense(keys2d[0])
        if one is None:
            one = _factorize_local(keys2d[0])
        if one is not None:
            return one
    hashes = hash_rows(keys2d)
    rows, phash, offsets = radix_partition(hashes, partition_bits(n), num_chunks(n),
                                           np.arange(n, dtype=np.int64), hashes.view(np.int64))
    phash = phash.view(np.uint64)
    local = np.empty(n, np.int64)
    reps = np.empty(n, np.int64)
    counts = _factorize_partitions(keys2d, rows, phash, offsets, local, reps)
    goff = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=goff[1:])
    g = int(goff[-1])
    codes = np.empty(n, np.int64)
    first_rows = np.empty(g, np.int64)
    part_gid = np.empty(n, np.int64)
    _globalize(rows, offsets, local, reps, goff, codes, first_rows, part_gid)
    return Factorization(codes, g, first_rows, rows, offsets, part_gid)


@njit(parallel=True, cache=True)
def gather(src, idx, out):
    """out[i] = src[idx[i]], or 0 where idx[i] < 0 (the caller marks those rows null)."""
    for i in prange(idx.size):
        j = idx[i]
        # two statements, not `src[j] if j >= 0 else 0`: Numba unifies uint64 with the int literal
        # as float64, which rounded uint64 values past 2^53
        if j >= 0:
            out[i] = src[j]
        else:
            out[i] = 0
