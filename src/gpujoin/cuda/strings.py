"""The union of several string dictionaries on the GPU: for DeviceTable joins and concatenations
whose string columns were dictionary-encoded apart (cuda.table.unify_dictionaries).

Arrow's hash (``pc.dictionary_encode`` of the dictionaries one after the other) is a host memo
table: on an H200's host it took 0.45 s for two dictionaries of 2^20 strings, 3.5x the join of
2^25 rows a side it served.  Here the strings' bytes are copied to the GPU once, each string
hashed (strings.cu: FNV-1a and murmur3's finalizer, 64 bits), the hashes sorted, and each
string's class is the first (smallest-index) string of its run of equal hashes; a kernel then
compares every string with its class's first string, so that a 64-bit collision (two different
strings, one hash) is seen, and the caller falls back to Arrow's hash: never a wrong code.
"""

from __future__ import annotations

import cupy as cp
import cupyx
import numpy as np
import pyarrow as pa

from .primitives import _grid
from .runtime import kernel

#: Fewer dictionary entries than this in all: Arrow's host hash (the GPU path's launches, copies
#: and syncs cost more than hashing a few thousand strings).
GPU_UNION_MIN = 1 << 15


def string_hashes(data, offsets, n: int):
    """CuPy uint64 (n,): each string's 64-bit hash (strings.cu string_hash); ``data`` (uint8)
    and ``offsets`` (int64, n + 1) a large_string array's buffers in GPU memory."""
    out = cp.empty(n, cp.uint64)
    if n:
        kernel("strings.cu", "string_hash")((_grid(n, 256),), (256,), (data, offsets, np.int64(n), out))
    return out


def union_codes(strings: pa.Array) -> tuple[pa.Array, cp.ndarray] | None:
    """(union, code) of ``strings`` (a string or large_string array without nulls, the
    dictionaries one after the other): ``union`` its distinct strings in order of first
    appearance (its type), ``code`` CuPy int32 (n,) each entry's position in ``union``; None when
    two different strings share a hash (a collision: take Arrow's hash instead).

    Host work: a cast to large_string (int64 offsets) where needed and the union's filter; GPU:
    the bytes' copy, a hash a string, a sort of n 64-bit hashes, one comparison a string.
    """
    n = len(strings)
    big = strings.cast(pa.large_string()) if not pa.types.is_large_string(strings.type) else strings
    if not n:
        return strings, cp.empty(0, cp.int32)
    _, obuf, dbuf = big.buffers()
    offsets = cp.asarray(np.frombuffer(obuf, np.int64, n + 1, big.offset * 8))
    data = cp.asarray(np.frombuffer(dbuf, np.uint8)) if dbuf is not None and dbuf.size else cp.zeros(1, cp.uint8)
    hashes = string_hashes(data, offsets, n)
    order = cp.argsort(hashes)
    ordered = hashes[order]
    start = cp.empty(n, cp.bool_)
    start[0] = True
    cp.not_equal(ordered[1:], ordered[:-1], out=start[1:])
    run = cp.cumsum(start, dtype=cp.int64) - 1
    first = cp.full(int(run[-1]) + 1, n, cp.int64)
    cupyx.scatter_min(first, run, order.astype(cp.int64, copy=False))  # each run's smallest index
    rep = cp.empty(n, cp.int64)
    rep[order] = first[run]
    bad = cp.zeros(1, cp.uint64)
    kernel("strings.cu", "strings_differ")((_grid(n, 256),), (256,), (data, offsets, rep, np.int64(n), bad))
    if int(bad[0]):
        return None
    is_rep = rep == cp.arange(n, dtype=cp.int64)
    position = cp.cumsum(is_rep, dtype=cp.int64) - 1
    code = position[rep].astype(cp.int32)
    union = strings.filter(pa.array(cp.asnumpy(is_rep)))
    return union, code
