"""PGB-UR and PGB-TR: the partition-based group-by of paper 003 §2.6 on one GPU.

1. Transform: radix-partition on the murmur3 hash of the key (so skew in the key bits does not
   matter) into 2^bits partitions of about FILL * max_groups groups each, by a HyperLogLog
   estimate of g (taken in the first radix pass's histogram read when the planner has none).
   PGB-TR moves every value column (and validity) with its key (GFTR); PGB-UR moves (key, row
   id) and later reads the values through the row ids (GFUR).  No order is kept within a
   partition (primitives.radix_partition, stable=False).
2. One thread block per partition (``pgb_aggregate``), in one pass over its rows, inserts
   each key into a shared-memory table and merges the row into the accumulators of its table
   slot; it then claims the partition's group count of output slots with one atomic and stores
   every group whole, since no group spans two partitions.
3. A partition with more than max_groups groups, far more rows than the average (a heavy
   key), or past the output's capacity (the estimate was low) is aggregated afterwards by HGB
   over its rows, and its groups appended: the paper's proposal for oversized partitions.

Deviation: the paper places each partition's groups by a scan over the partitions' group
counts; one atomic claim per partition gives the same dense output without a second pass
over the keys.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from ..primitives import Digits, hash_partition_bits, key_type, radix_histogram, radix_partition
from ..runtime import PhaseTimer, check_memory, device_properties, kernel, ptr
from .common import (HLL_BITS, AggInput, GroupByOutput, allocate, column_spec, concat_outputs, decode, descriptors,
                     empty_output, global_bytes, hll_estimate, slot_bytes, smem_bytes)
from .hgb import check_rows, hgb

BLOCK = 512  # groupby.cu: PGB_BLOCK
#: The largest shared-memory table (slots), and the share of its slots a partition may fill.
MAX_TABLE, FILL = 16384, 0.75
PARALLEL_BITS = 8  # one radix pass
#: A partition of more than SPILL_ROWS times the average rows (and more than a block's share
#: of all rows) is aggregated by HGB afterwards.  On an H200, 2^28 rows into 2^16 groups with
#: Zipf z = 1 keys: at 4 (the earlier limit), partitions of up to 4x the average kept one block
#: busy 7.1 ms, against 1.7 ms for the whole kernel on uniform keys.
SPILL_ROWS = 2


def _ranges(offsets, parts) -> list[tuple[int, int]]:
    """The row ranges of partitions ``parts`` (by partition ``offsets``), in order, adjacent
    ones merged: their rows are read in place, not gathered through an index."""
    out: list[tuple[int, int]] = []
    for p in sorted(int(x) for x in parts):
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        elif hi > lo:
            out.append((lo, hi))
    return out


def _layout(key_bytes: int, inputs: list[AggInput], budget: int) -> tuple[int, int, int] | None:
    """(table bits, max groups, bytes before the accumulators) of the largest shared-memory
    table whose slots (keys) and accumulators (one per slot, and one for the sentinel key) fit
    in ``budget`` bytes; max groups is FILL of the slots, so that probes stay short (a table
    sized to the expected groups, at a higher load, measured slower on an H200); None when
    not even 256 slots fit."""
    per_group = slot_bytes(inputs)
    slots = MAX_TABLE
    while slots >= 256:
        table = (slots * key_bytes + 15) & ~15
        if table + (slots + 2) * per_group <= budget:
            return slots.bit_length() - 1, int(slots * FILL), table
        slots //= 2
    return None


def pgb(keys: cp.ndarray, inputs: list[AggInput], method: str = "tr", radix_bits: int | None = None,
        groups_estimate: int | None = None) -> GroupByOutput:
    """Partition-based group-by of ``keys`` (int32 or int64 (n,), no nulls) with each input's aggregates.

    method : "tr" (GFTR) or "ur" (GFUR); radix_bits : 2**radix_bits partitions (default from
    the estimated groups); groups_estimate : the planner's HyperLogLog estimate, when it has
    one (else estimated here).

    Returns
    -------
    GroupByOutput, groups in unspecified order.

    Raises
    ------
    MemoryError
        The partitioned copies or the accumulators do not fit in free GPU memory.
    ValueError
        An unknown method, or 2**31 rows or more.
    """
    if method not in ("ur", "tr"):
        raise ValueError(f"unknown PGB method {method!r}; valid: ur, tr")
    n = keys.size
    check_rows(n, "group-by")
    timer = PhaseTimer()
    if n == 0:
        return empty_output(keys, inputs, timer.phases)
    props = device_properties(cp.cuda.Device().id)
    # half an SM's shared memory: two blocks of 512 threads per SM
    budget = (props["smem_optin"] + 1024) // 2 - 2200
    layout = _layout(keys.dtype.itemsize, inputs, budget)
    if layout is None:  # too many accumulators for a shared-memory table of useful size
        out = hgb(keys, inputs, groups_estimate)
        out.params["fallback"] = "hgb: the aggregates do not fit in shared memory"
        return out
    tbl_bits, max_groups, acc_base = layout
    carried = [c for i in inputs if i.values is not None for c in (i.values, i.valid) if c is not None]
    moved = carried if method == "tr" else [cp.arange(n, dtype=cp.int32)]
    counts = None
    if groups_estimate is None:
        # the first radix pass's histogram (8 bits from bit 0, whatever the bits) and the
        # HyperLogLog sketch of g in one read of the keys
        sketch = cp.zeros(1 << HLL_BITS, cp.uint32)
        counts = radix_histogram(keys, moved, Digits(bits=PARALLEL_BITS), sketch, stable=False)
        est = hll_estimate(sketch, keys.dtype.itemsize, n)
    else:
        est = groups_estimate
    # partitions of about FILL * max_groups groups: an average one fills the table to FILL^2
    # and at least 2^PARALLEL_BITS of them, so that every SM gets partitions when g is small
    bits = radix_bits if radix_bits is not None else max(PARALLEL_BITS, hash_partition_bits(est, int(max_groups * FILL)))
    if bits != PARALLEL_BITS:
        counts = None  # a first pass of other bits (several passes go most significant digit first)
    width = keys.dtype.itemsize + sum(c.dtype.itemsize for c in moved)
    check_memory(2 * n * width, f"PGB-{method.upper()} of {n:,} rows")
    pkeys, moved, offsets = radix_partition(keys, moved, Digits(bits=bits), counts=counts, stable=False)
    if method == "tr":
        it = iter(moved)
        part_inputs = [AggInput(next(it), next(it) if i.valid is not None else None, i.ops)
                       if i.values is not None else i for i in inputs]
        index = None
    else:
        (index,) = moved
        part_inputs = inputs
    timer.mark("transform")

    capacity = min(n, est + est // 8 + 4096)
    check_memory(global_bytes(inputs, capacity) + capacity * keys.dtype.itemsize,
                 f"the aggregates of about {est:,} groups")
    accs = allocate(part_inputs, capacity)
    out_keys = cp.empty(capacity, keys.dtype)
    # the kernel's counters in one array, set and read back in one copy each (the groups
    # claimed, the first slot not filled, the spilled partitions' count in the low 32 bits of
    # the third word): at 2^24 rows PGB is host-bound, and each CuPy call costs 2-20 us
    state = cp.asarray(np.array([0, 0xFFFFFFFFFFFFFFFF, 0], np.uint64))
    counter, filled, spill_count = (np.uint64(state.data.ptr + 8 * i) for i in range(3))
    P = 1 << bits
    spill_parts = cp.empty(P, cp.int32)
    # accumulators of every table slot and of the sentinel key; even, so that the 8-byte
    # accumulator arrays that follow 4-byte ones stay 8-byte aligned
    sstride = (1 << tbl_bits) + 2
    smem = acc_base + smem_bytes(inputs, sstride)
    fn = kernel("groupby.cu", f"pgb_aggregate<{key_type(keys)}, i32, {column_spec(part_inputs)}>")
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    grid = max(1, min(P, props["sms"] * max(1, min(2048 // BLOCK, props["smem_optin"] // smem))))
    # a partition of more rows than SPILL_ROWS times the average, and than a block's share of
    # the rows, goes to HGB (all the GPU's blocks) instead of keeping one block busy after
    # the others finish: a hot key's partition, which no radix split can cut
    row_limit = max(int(SPILL_ROWS * (n >> bits)), n // grid, 1 << 12)
    fn((grid,), (BLOCK,), (pkeys, offsets, np.int32(P), ptr(index),
                           descriptors(part_inputs, accs, smem_slots=sstride, smem_base=acc_base),
                           np.int32(len(inputs)), np.int32(tbl_bits), np.uint32(max_groups), np.uint64(sstride),
                           np.int64(row_limit), out_keys, np.uint64(capacity), counter, filled, spill_parts,
                           spill_count),
       shared_mem=smem)
    counts = state.get()  # one sync
    g, spilled = int(min(counts[0], counts[1])), int(counts[2])
    parts = [GroupByOutput(out_keys[:g], [decode(i, a[:, :g]) for i, a in zip(inputs, accs)])]
    timer.mark("aggregate")
    if spilled:  # partitions with too many groups or rows for one block: HGB over their rows
        off = cp.asnumpy(offsets)
        ranges = _ranges(off, cp.asnumpy(spill_parts[:spilled]))

        def rows_of(a):
            return a[ranges[0][0]:ranges[0][1]] if len(ranges) == 1 else cp.concatenate([a[lo:hi] for lo, hi in ranges])
        if method == "tr":
            sub = [AggInput(rows_of(i.values), None if i.valid is None else rows_of(i.valid), i.ops)
                   if i.values is not None else i for i in part_inputs]
        else:
            rows = rows_of(index)
            sub = [AggInput(i.values[rows], None if i.valid is None else i.valid[rows], i.ops)
                   if i.values is not None else i for i in inputs]
        # hashing spreads the groups evenly over the partitions: the spilled ones hold about
        # their share of the estimate (HGB's table grows if they hold more)
        parts.append(hgb(rows_of(pkeys), sub, groups_estimate=est * spilled // P + 1024))
    group_keys, cols = concat_outputs(parts) if len(parts) > 1 else (parts[0].keys, parts[0].columns)
    if spilled:
        timer.mark("spilled")
    return GroupByOutput(group_keys, cols, timer.phases,
                         {"radix_bits": bits, "estimated_groups": est, "spilled_partitions": spilled})
