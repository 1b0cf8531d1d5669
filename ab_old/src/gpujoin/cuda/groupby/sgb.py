"""SGB-UR, SGB-TR and SGB-DE-TR: the sort-based group-bys of paper 003 §2.3-2.5 on one GPU.

All three radix-sort on the key (LSD, order-preserving digits of key - min, as many 8-bit passes
as the key range needs), mark where the sorted key changes, and number the runs: group ids in
key order, so the output comes sorted by key.  Each aggregate is then a segmented reduction of
its values in that order (``sorted_reduce``).

- SGB-UR (GFUR) sorts (key, row id) once and reads every value column through the permuted
  row ids: unclustered.
- SGB-TR (GFTR) sorts (key, column) again for every value column, so each reduction reads
  its values sequentially.
- SGB-DE-TR sorts the first column as SGB-TR does, which gives the g distinct keys in order;
  it then encodes every key as its rank among them (a hash table over the distinct keys,
  probed by every row) and sorts the remaining columns on the codes: ceil(log2 g / 8) passes
  instead of the key range's.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from ..primitives import radix_sort, value_range
from ..runtime import PhaseTimer, check_memory, kernel, ptr
from .common import AggInput, GroupByOutput, allocate, decode, descriptors, empty_output, smem_bytes
from .hgb import HashTable, check_rows

SR_TILE = 4096  # groupby.cu: 256 threads x 16 positions per block


def _runs(sorted_keys: cp.ndarray) -> tuple[cp.ndarray, cp.ndarray]:
    """(int32 group id of each sorted position, int64 start of each group)."""
    change = cp.empty(sorted_keys.size, cp.bool_)
    change[0] = True
    cp.not_equal(sorted_keys[1:], sorted_keys[:-1], out=change[1:])
    gid = cp.cumsum(change, dtype=cp.int32)
    gid -= 1
    return gid, cp.flatnonzero(change)


def segmented_reduce(gid: cp.ndarray, inp: AggInput, groups: int, index: cp.ndarray | None = None) -> cp.ndarray:
    """Reduce ``inp`` (values in position order, or read through ``index``) over the runs of the
    non-decreasing int32 ``gid``; returns its (accumulators, groups) u64 slots."""
    (acc,) = allocate([inp], groups)
    n = gid.size
    if n:
        it = "i64" if index is not None and index.dtype == np.int64 else "i32"
        fn = kernel("groupby.cu", f"sorted_reduce<{it}>")
        smem = smem_bytes([inp], SR_TILE)
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        fn(((n + SR_TILE - 1) // SR_TILE,), (256,),
           (gid, np.int64(n), ptr(index), descriptors([inp], [acc]), np.uint64(groups)), shared_mem=smem)
    return acc


def _dictionary_codes(keys: cp.ndarray, distinct: cp.ndarray) -> cp.ndarray:
    """Order-preserving dictionary encoding: int32 rank of every key among the sorted ``distinct``
    keys, through a hash table over them (built once, probed by every row)."""
    table = HashTable(distinct, estimate=int(distinct.size))
    slots = table.lookup(distinct, ids="slot")
    ranks = cp.arange(distinct.size, dtype=cp.int32)
    rank_of_slot = cp.full(table.mask + 1, -1, cp.int32)
    rank_of_slot[slots[slots >= 0]] = ranks[slots >= 0]
    # the sentinel key, the smallest value, kept outside the table: rank 0 when present
    return table.lookup(keys, ids=rank_of_slot, sentinel_id=0)


def _sorted(inp: AggInput, cols: list[cp.ndarray]) -> AggInput:
    values = cols[0]
    valid = cols[1] if inp.valid is not None else None
    return AggInput(values, valid, inp.ops)


def _columns(inp: AggInput) -> list[cp.ndarray]:
    return [inp.values] + ([inp.valid] if inp.valid is not None else [])


def sgb(keys: cp.ndarray, inputs: list[AggInput], method: str = "tr") -> GroupByOutput:
    """Sort-based group-by of ``keys`` (int32 or int64 (n,), no nulls) with each input's aggregates.

    method : "ur" (GFUR), "tr" (GFTR) or "de-tr" (GFTR with dictionary-encoded keys).

    Returns
    -------
    GroupByOutput, groups in ascending key order.

    Raises
    ------
    MemoryError
        The sorted copies do not fit in free GPU memory.
    ValueError
        An unknown method, or 2**31 rows or more.
    """
    if method not in ("ur", "tr", "de-tr"):
        raise ValueError(f"unknown SGB method {method!r}; valid: ur, tr, de-tr")
    n = keys.size
    check_rows(n, "group-by")
    timer = PhaseTimer()
    if n == 0:
        return empty_output(keys, inputs, timer.phases)
    widest = max([keys.dtype.itemsize + 8] + [sum(c.dtype.itemsize for c in _columns(i)) for i in inputs
                                              if i.values is not None])
    check_memory(n * (2 * keys.dtype.itemsize + 2 * widest + 8), f"SGB-{method.upper()} of {n:,} rows")
    kmin, kmax = value_range([keys])
    bits = (kmax - kmin).bit_length()
    sortable = [(i, inp) for i, inp in enumerate(inputs) if inp.values is not None]
    accs: dict[int, cp.ndarray] = {}
    if method == "ur":
        sorted_keys, (perm,) = radix_sort(keys, [cp.arange(n, dtype=cp.int32)], kmin, bits)
        gid, starts = _runs(sorted_keys)
        timer.mark("transform")
        for i, inp in sortable:
            accs[i] = segmented_reduce(gid, inp, starts.size, index=perm)
    else:
        first = sortable[0][1] if sortable else None
        sorted_keys, cols = radix_sort(keys, _columns(first) if first else [], kmin, bits)
        gid, starts = _runs(sorted_keys)
        timer.mark("transform")
        if first is not None:
            accs[sortable[0][0]] = segmented_reduce(gid, _sorted(first, cols), starts.size)
        rest = sortable[1:]
        codes, code_bits = keys, bits
        if method == "de-tr" and rest:
            codes = _dictionary_codes(keys, sorted_keys[starts])
            code_bits, kmin = max(1, (int(starts.size) - 1).bit_length()), 0
        for i, inp in rest:
            sorted_codes, cols = radix_sort(codes, _columns(inp), kmin, code_bits)
            accs[i] = segmented_reduce(gid if codes is keys else sorted_codes, _sorted(inp, cols), starts.size)
    g = int(starts.size)
    sizes = cp.diff(cp.append(starts, n)).astype(cp.uint64)
    for i, inp in enumerate(inputs):
        if inp.values is None:  # row counts: the run lengths
            accs[i] = sizes[None, :]
    cols = [decode(inp, accs[i]) for i, inp in enumerate(inputs)]
    timer.mark("aggregate")
    return GroupByOutput(sorted_keys[starts], cols, timer.phases, {"key_bits": bits, "groups": g})
