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


def _on_device(arrays: list[pa.Array]):
    """(data uint8, offsets int64 (n + 1,)) in GPU memory of the ``arrays``' strings one after
    the other: each array's bytes and offsets copied as they lie (no host concatenation, no cast
    of string's int32 offsets: they are widened and rebased on the GPU)."""
    parts, total = [], 0
    for a in arrays:
        if len(a):
            wide = pa.types.is_large_string(a.type) or pa.types.is_large_binary(a.type)
            _, obuf, dbuf = a.buffers()
            o = np.frombuffer(obuf, np.int64 if wide else np.int32, len(a) + 1, a.offset * (8 if wide else 4))
            lo, hi = int(o[0]), int(o[-1])
            parts.append((o, np.frombuffer(dbuf, np.uint8)[lo:hi] if hi > lo else None, lo, total))
            total += hi - lo
    data = cp.empty(max(1, total), cp.uint8)
    offsets = cp.empty(sum(len(o) - 1 for o, *_ in parts) + 1, cp.int64)
    at = 0
    for o, b, lo, base in parts:
        if b is not None:
            data[base:base + b.size].set(b)
        offsets[at:at + len(o) - 1] = cp.asarray(o[:-1]).astype(cp.int64) + (base - lo)
        at += len(o) - 1
    offsets[at] = total
    return data, offsets


def union_codes(arrays: list[pa.Array]) -> tuple[pa.Array, cp.ndarray] | None:
    """(union, code) of the strings of ``arrays`` (string arrays of one type, the dictionaries,
    without nulls) one after the other: ``union`` their distinct strings in order of first
    appearance (of their type), ``code`` CuPy int32 (n,) each entry's position in ``union``;
    None when two different strings share a hash (a collision: take Arrow's hash instead).

    Host work: the union's pieces (an array whose strings are all new is taken whole, one
    without any left out); GPU: the bytes' copy, a hash a string, a sort of n 64-bit hashes,
    one comparison a string.
    """
    n = sum(len(a) for a in arrays)
    if not n:
        return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string()), cp.empty(0, cp.int32)
    data, offsets = _on_device(arrays)
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
    keep, pieces, at = cp.asnumpy(is_rep), [], 0
    for a in arrays:
        m, at = keep[at:at + len(a)], at + len(a)
        if m.all():
            pieces.append(a)
        elif m.any():
            pieces.append(a.filter(pa.array(m)))
    return pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0], code
