"""Bitmap joins of paper 002 on the CPU: ``hash`` (one shared bitmap, atomic OR), ``split``
(recursive MSB bucketing of both sides, a local bitmap per bucket pair) and ``bucket`` (the
lock-free two-pass T x b bucketing of the build side, one bitmap per bucket column).

A bitmap holds one bit per value of the 32-bit key domain (2^32 bits = 512 MiB in all), so these
algorithms answer **set membership**: for every probe row, whether its key occurs on the build
side.  That is the paper's set intersection, and gpujoin's semi and anti joins, for keys in
[0, 2^32) (duplicates on either side allowed).  They cannot produce build-side row ids, so inner,
outer and full joins go to ``phj`` or ``merge``; :func:`check_domain` refuses other inputs.

Reference: Kruliš, Yaghob, "Revision of relational joins for multi-core and many-core
architectures", DATESO 2011 (paper 002), §3.1 and §4.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .threads import num_threads

#: The key domain of the bitmap joins, and the words of a whole-domain bitmap.
DOMAIN_BITS = 32
ALGORITHMS = ("hash", "split", "bucket")


@intrinsic
def _atomic_or(typingctx, arr, idx, val):
    """arr[idx] |= val as one atomic read-modify-write (LLVM atomicrmw or); returns the old word."""
    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        return builder.atomic_rmw("or", ptr, args[2], "monotonic")
    return types.uint64(arr, idx, val), codegen


def check_domain(algorithm: str, mode: str, *key_arrays: np.ndarray) -> None:
    """Raise ValueError unless ``algorithm`` can answer ``mode`` on these keys.

    The bitmap joins answer semi and anti joins (and set intersection) of keys in [0, 2^32).
    """
    if mode not in ("semi", "anti"):
        raise ValueError(f"algorithm {algorithm!r} is a bitmap join: it answers semi and anti joins only, "
                         f"not {mode} joins; use 'phj' or 'merge'")
    for k in key_arrays:
        if k.size and (int(k.min()) < 0 or int(k.max()) >= 1 << DOMAIN_BITS):
            raise ValueError(f"algorithm {algorithm!r} needs join keys in [0, 2^32), got "
                             f"[{int(k.min())}, {int(k.max())}]; use 'phj' or 'merge'")


@njit(inline="always", cache=True)
def _test(bitmap, x):
    return (bitmap[x >> 6] >> (x & 63)) & 1


# ---------------------------------------------------------------- hash: one shared bitmap


@njit(parallel=True, cache=True)
def _hash_join(bkeys, pkeys, nchunks):
    bitmap = np.zeros(1 << (DOMAIN_BITS - 6), np.uint64)  # 512 MiB, zeroed inside the timing
    nb = bkeys.size
    step = (nb + nchunks - 1) // nchunks
    for t in prange(nchunks):
        for i in range(t * step, min(nb, (t + 1) * step)):
            x = np.uint64(bkeys[i])
            _atomic_or(bitmap, np.int64(x >> np.uint64(6)), np.uint64(1) << (x & np.uint64(63)))
    flags = np.empty(pkeys.size, np.bool_)
    for i in prange(pkeys.size):
        flags[i] = _test(bitmap, np.uint64(pkeys[i])) != 0
    return flags


# ---------------------------------------------------------------- split: recursive MSB bucketing


@njit(cache=True)
def _split_range(keys, rows, lo, hi, bit):
    """In-place partition of keys[lo:hi] (rows alongside) on ``bit``: zeros first.  Returns the
    first position of the ones."""
    i, j = lo, hi - 1
    one = np.uint64(1) << np.uint64(bit)
    while True:
        while i <= j and (np.uint64(keys[i]) & one) == 0:
            i += 1
        while i <= j and (np.uint64(keys[j]) & one) != 0:
            j -= 1
        if i >= j:
            return i
        keys[i], keys[j] = keys[j], keys[i]
        rows[i], rows[j] = rows[j], rows[i]


@njit(parallel=True, cache=True)
def _split_levels(keys, rows, depth):
    """Level-synchronous recursion: level d splits each of its 2^d ranges on bit 31 - d, one
    range a task (so level 0 runs on one thread, as the paper's recursion does).  Returns the
    2^depth + 1 bucket offsets."""
    bounds = np.zeros(2, np.int64)
    bounds[1] = keys.size
    for d in range(depth):
        nxt = np.empty(2 * (bounds.size - 1) + 1, np.int64)
        for r in prange(bounds.size - 1):
            mid = _split_range(keys, rows, bounds[r], bounds[r + 1], DOMAIN_BITS - 1 - d)
            nxt[2 * r] = bounds[r]
            nxt[2 * r + 1] = mid
        nxt[-1] = keys.size
        bounds = nxt
    return bounds


@njit(parallel=True, cache=True)
def _join_buckets(bkeys, boff, pkeys, poff, depth, flags):
    """Bucket pair j: set the bits of its build keys in a local 2^(32-depth)-bit bitmap, test its
    probe keys, then clear the bits it set (cost proportional to the bucket, not the bitmap)."""
    local_bits = DOMAIN_BITS - depth
    mask = np.uint64((1 << local_bits) - 1)
    for j in prange(boff.size - 1):
        if boff[j + 1] == boff[j] or poff[j + 1] == poff[j]:
            for i in range(poff[j], poff[j + 1]):
                flags[i] = False
            continue
        bitmap = np.zeros(max(1, 1 << max(0, local_bits - 6)), np.uint64)
        for i in range(boff[j], boff[j + 1]):
            x = np.uint64(bkeys[i]) & mask
            bitmap[x >> np.uint64(6)] |= np.uint64(1) << (x & np.uint64(63))
        for i in range(poff[j], poff[j + 1]):
            flags[i] = _test(bitmap, np.uint64(pkeys[i]) & mask) != 0


# ---------------------------------------------------------------- bucket: two-pass T x b


@njit(parallel=True, cache=True)
def _bucket_join(bkeys, pkeys, T, kbits):
    b = 1 << kbits
    shift = np.uint64(DOMAIN_BITS - kbits)
    nb = bkeys.size
    step = (nb + T - 1) // T
    # pass 1: thread t scatters its share into its own row M[t][0..b-1] (a count, then a scatter)
    hist = np.zeros((T, b), np.int64)
    for t in prange(T):
        for i in range(t * step, min(nb, (t + 1) * step)):
            hist[t, np.uint64(bkeys[i]) >> shift] += 1
    start = np.zeros((T, b), np.int64)
    total = 0
    for t in range(T):
        for j in range(b):
            start[t, j] = total
            total += hist[t, j]
    M = np.empty(nb, np.uint32)
    for t in prange(T):
        cur = start[t].copy()
        for i in range(t * step, min(nb, (t + 1) * step)):
            x = np.uint64(bkeys[i])
            j = x >> shift
            M[cur[j]] = np.uint32(x)
            cur[j] += 1
    # pass 2: bitmap j, a slice of one 2^32-bit array, is written by whoever owns column j alone
    words = 1 << (DOMAIN_BITS - 6)
    bitmap = np.zeros(words, np.uint64)
    for j in prange(b):
        for t in range(T):
            for q in range(start[t, j], start[t, j] + hist[t, j]):
                x = np.uint64(M[q])
                bitmap[x >> np.uint64(6)] |= np.uint64(1) << (x & np.uint64(63))
    # probe: S is not bucketed; the bucket's bitmap is found from the key's prefix
    flags = np.empty(pkeys.size, np.bool_)
    for i in prange(pkeys.size):
        flags[i] = _test(bitmap, np.uint64(pkeys[i])) != 0
    return flags


def membership(algorithm: str, build_keys: np.ndarray, probe_keys: np.ndarray, *,
               threads: int | None = None, depth: int = 8, bucket_bits: int = 8) -> np.ndarray:
    """For each probe key, whether it occurs among the build keys (bool (np,)).

    Parameters
    ----------
    algorithm : "hash" (shared 512 MiB bitmap, atomic fetch-OR build, read-only probe),
        "split" (both sides bucketed by ``depth`` levels of in-place 1-bit MSB partitioning, a
        2^(32-depth)-bit bitmap per bucket pair) or "bucket" (the build side scattered into
        T x 2^bucket_bits private buckets, then bitmap column j built by one thread; probe
        unbucketed)
    build_keys, probe_keys : integer arrays with values in [0, 2^32)
    threads : Numba threads (default all); ``bucket`` uses T = threads rows

    Raises
    ------
    ValueError
        An unknown algorithm, or keys outside [0, 2^32).
    """
    check_domain(algorithm, "semi", build_keys, probe_keys)
    with num_threads(threads) as T:
        if algorithm == "hash":
            return _hash_join(build_keys, probe_keys, max(1, 4 * T))
        if algorithm == "bucket":
            if not 0 <= bucket_bits <= 16:
                raise ValueError(f"bucket_bits={bucket_bits}: use 0..16")
            return _bucket_join(build_keys, probe_keys, T, max(bucket_bits, int(np.ceil(np.log2(T)))))
        if algorithm == "split":
            if not 0 <= depth <= 16:
                raise ValueError(f"depth={depth}: use 0..16")
            bk, pk = build_keys.copy(), probe_keys.copy()
            prow = np.arange(pk.size, dtype=np.int64)
            boff = _split_levels(bk, np.empty(bk.size, np.int64), depth)
            poff = _split_levels(pk, prow, depth)
            local = np.empty(pk.size, np.bool_)
            _join_buckets(bk, boff, pk, poff, depth, local)
            flags = np.empty(pk.size, np.bool_)
            flags[prow] = local
            return flags
    raise ValueError(f"unknown bitmap join {algorithm!r}; valid: {list(ALGORITHMS)}")


def bitmap_join(algorithm: str, build_keys, build_rows, probe_keys, probe_rows, mode: str, *,
                threads: int | None = None):
    """Semi or anti join by :func:`membership`; the contract of ``phj.hash_join`` (build_idx None)."""
    check_domain(algorithm, mode, build_keys, probe_keys)
    hit = membership(algorithm, build_keys, probe_keys, threads=threads)
    return (probe_rows[hit] if mode == "semi" else probe_rows[~hit]), None
