"""HGB: the two-stage hash group-by of paper 003 §2.2 (Algorithm 1) on one GPU.

Stage 1 inserts every key into a global open-addressing table of row ids (sized from a
HyperLogLog estimate of the groups, doubled and retried if it fills), then numbers the occupied
slots densely (a scan over the table): group ids 0..g-1 and g are known before any aggregate
is computed.  Stage 2 finds each row's group id and updates its aggregates in shared memory
when all g groups' slots fit there (several copies at small g, so that warps contend less),
flushing them to global memory once per block; otherwise straight into global memory.

One deviation from Algorithm 1: the paper writes each row's group-id location (gIdLoc) in
stage 1 and reads it back in stage 2; here stage 2 probes the table again, which reads the
4-byte key instead of writing and reading a 4-byte location, and needs no atomic counter.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from ..primitives import key_type
from ..runtime import PhaseTimer, check_memory, device_properties, kernel, ptr
from .common import (MAXC, AggInput, GroupByOutput, allocate, decode, descriptors, estimate_groups, global_bytes,
                     smem_bytes)

_EMPTY = np.uint32(0xFFFFFFFF)
BLOCK = 256
#: Shared memory the aggregation may use per block (bytes) before it goes to global memory,
#: and the share below which it keeps extra copies of the slots.
SMEM_COPIES_BUDGET = 48 * 1024


def _pow2(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length())


def check_rows(n: int, name: str) -> None:
    if n >= 2**31:
        raise ValueError(f"GPU {name} takes fewer than 2**31 rows, got {n:,}; use device='cpu' or split the input")


class HashTable:
    """Stage 1: the distinct keys of ``keys`` in a global table of row ids, with dense ids.

    Attributes: table (u32 slots: a row id or empty), slot_gid (int32 dense id per slot,
    in slot order), mask (slots - 1), rows (u32 (g,): one row of each group, by id).
    """

    def __init__(self, keys: cp.ndarray, estimate: int | None = None):
        n = keys.size
        check_rows(n, "hash tables")
        est = estimate_groups(keys) if estimate is None else estimate
        slots = max(1024, _pow2(2 * est + est // 4))
        sms = device_properties(cp.cuda.Device().id)["sms"]
        build = kernel("groupby.cu", f"hgb_build<{key_type(keys)}>")
        while True:
            check_memory(slots * 8, f"a hash table of {slots:,} slots")
            table = cp.full(slots, _EMPTY, cp.uint32)
            counter = cp.zeros(1, cp.uint64)
            overflow = cp.zeros(1, cp.int32)
            if n:
                grid = max(1, min((n + BLOCK - 1) // BLOCK, sms * 16))
                build((grid,), (BLOCK,), (keys, np.int64(n), table, np.uint32(slots - 1), counter, overflow))
            if not int(overflow[0]):
                break
            slots *= 4  # the estimate was far off: rebuild larger
        occupied = table != _EMPTY
        self.keys, self.table, self.mask = keys, table, slots - 1
        self.slot_gid = (cp.cumsum(occupied, dtype=cp.int32) - 1).astype(cp.int32, copy=False)
        self.rows = table[occupied]
        self.num_groups = int(self.rows.size)
        # each slot's key beside it, so that probes read the table only (empty slots: any value)
        self.slot_key = keys[cp.where(occupied, table, 0)] if n else cp.zeros(slots, keys.dtype)

    def lookup(self, probe: cp.ndarray, ids: str = "group") -> cp.ndarray:
        """int32 id of every key of ``probe`` (each must be in the table): its dense group id, or
        with ``ids="row"`` the row of ``keys`` the table holds for it."""
        codes = cp.empty(probe.size, cp.int32)
        if probe.size:
            sms = device_properties(cp.cuda.Device().id)["sms"]
            grid = max(1, min((probe.size + BLOCK - 1) // BLOCK, sms * 16))
            kernel("groupby.cu", f"hgb_lookup<{key_type(probe)}>")(
                (grid,), (BLOCK,), (probe, np.int64(probe.size), self.slot_key, self.table,
                                    self.slot_gid if ids == "group" else ptr(None),
                                    np.uint32(self.mask), codes))
        return codes


def aggregate(table: HashTable, inputs: list[AggInput]) -> list[cp.ndarray]:
    """Stage 2 over every input: each input's (accumulators, g) u64 slots."""
    g, keys, n = table.num_groups, table.keys, table.keys.size
    check_memory(global_bytes(inputs, g), f"the aggregates of {g:,} groups")
    accs = allocate(inputs, g)
    if not n:
        return accs
    props = device_properties(cp.cuda.Device().id)
    fn = kernel("groupby.cu", f"hgb_aggregate<{key_type(keys)}>")
    for lo in range(0, len(inputs), MAXC):
        part, part_accs = inputs[lo:lo + MAXC], accs[lo:lo + MAXC]
        per_copy = smem_bytes(part, g)
        use_smem = 0 < per_copy <= props["smem_optin"] - 1024
        copies = 1
        while use_smem and copies < 8 and 2 * copies * per_copy <= SMEM_COPIES_BUDGET:
            copies *= 2
        smem = smem_bytes(part, g * copies) if use_smem else 0
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        per_sm = max(1, min(8, (props["smem_optin"] // smem) if smem else 8))
        grid = max(1, min((n + BLOCK - 1) // BLOCK, props["sms"] * per_sm))
        sstride = (g * copies + 1) & ~1
        desc = descriptors(part, part_accs, smem_slots=sstride if use_smem else 0)
        fn((grid,), (BLOCK,), (keys, np.int64(n), table.slot_key, table.slot_gid, np.uint32(table.mask), desc,
                               np.int32(len(part)), np.uint64(g), np.int32(use_smem), np.int32(copies),
                               np.uint64(sstride)),
           shared_mem=smem)
    return accs


def hgb(keys: cp.ndarray, inputs: list[AggInput]) -> GroupByOutput:
    """Hash group-by of ``keys`` (int32 or int64 (n,), no nulls) with each input's aggregates.

    Returns
    -------
    GroupByOutput, groups in hash-table slot order (unspecified).

    Raises
    ------
    MemoryError
        The table or the accumulators do not fit in free GPU memory.
    ValueError
        2**31 rows or more.
    """
    timer = PhaseTimer()
    table = HashTable(keys)
    group_keys = keys[table.rows]
    timer.mark("group_ids")
    accs = aggregate(table, inputs)
    cols = [decode(inp, a) for inp, a in zip(inputs, accs)]
    timer.mark("aggregate")
    return GroupByOutput(group_keys, cols, timer.phases, {"table_slots": table.mask + 1})
