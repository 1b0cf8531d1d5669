"""HGB: the two-stage hash group-by of paper 003 §2.2 (Algorithm 1) on one GPU.

Stage 1 inserts every key into a global open-addressing table of keys (one CAS a new key;
sized from a HyperLogLog estimate of the groups, and rebuilt four times larger if it fills);
each new key takes the next dense group id as it goes in (one counter, an atomic a warp; the scan
over the table and the compaction that followed cost host calls and a sync: at 2^24 rows into 4
groups HGB took 0.64 ms with them, 0.52 without, on an H100): group ids 0..g-1 and g are known
before any aggregate is computed.  Stage 2 finds each row's group id and updates its
aggregates in shared memory when all g groups' slots fit there (several copies at small g, so
that warps contend less; up to 220 KiB in one 1024-thread block an SM), flushing them to
global memory once per block; when they need two such blocks, in two passes over the rows, each
keeping one slice of the group ids (HGB_MAX_SLICES); else, when they fit in the shared memory of
a thread block cluster (HGB_CLUSTERS, Hopper's distributed shared memory), each block owns a
slice of the groups and every update goes to its owner; otherwise straight into global memory.
The per-row kernels are compiled for the columns' type and accumulators when they are one of
kernels.GROUPBY_SPECS (MAX of two int32 columns, 2^28 rows, H200: 2^4 groups 4.39 -> 3.23 ms).

Deviations from Algorithm 1: the table holds keys, not row ids (a probe reads the table only,
never the key column), and stage 2 probes the table again instead of writing each row's
group-id location in stage 1 and reading it back: it reads the 4-byte key instead of writing
and reading a 4-byte location.
"""

from __future__ import annotations

import os

import cupy as cp
import numpy as np

from ..kernels import CLUSTER_SIZES
from ..primitives import frequent_keys, key_type
from ..runtime import PhaseTimer, check_memory, device_properties, kernel, ptr
from .common import (MAXC, AggInput, GroupByOutput, allocate, column_spec, decode, descriptors, estimate_groups,
                     global_bytes, slot_bytes, smem_bytes)

BLOCK = 256
#: Shared memory per block (bytes) for the groups' slots: at most SMEM_BLOCK_BUDGET (two blocks
#: an SM), in one block, else spread over a cluster of CLUSTER_SIZES blocks (Hopper's distributed
#: shared memory), else global memory; extra copies of the slots below SMEM_COPIES_BUDGET.
SMEM_BLOCK_BUDGET, SMEM_COPIES_BUDGET = 110 * 1024, 48 * 1024
CLUSTER_BLOCK = 512
#: The cluster sizes HGB may use (a subset of kernels.CLUSTER_SIZES); GPUJOIN_HGB_CLUSTERS
#: overrides ("" for none).  On an H200, 2^28 rows, MAX of two int32 columns: 2^14 groups took
#: 11.4 ms in clusters of 2 and 15.7 ms in global memory; 2^16 groups 24.5 ms in clusters of 8
#: and 18.9 ms in global memory (remote shared-memory atomics are no faster than L2 ones).  With
#: the one-block path of up to 220 KiB (2^14: 5.80 against 7.47 ms in clusters of 2), clusters
#: are left for accumulators wider than that which the sliced passes do not take.
HGB_CLUSTERS = tuple(int(c) for c in os.environ.get("GPUJOIN_HGB_CLUSTERS", "2").split(",") if c)
#: Sliced shared-memory aggregation: when the groups' accumulators need at most HGB_MAX_SLICES
#: blocks' shared memory (SLICE_BUDGET bytes each, one SLICE_BLOCK-thread block an SM), each
#: pass over the rows aggregates one slice of the group ids, instead of remote (cluster) or
#: global atomics; HGB_SLICE_GIDS: look each row's group id up once (4 bytes a row written, read
#: by every pass) instead of probing the table in every pass.  H200, MAX of two int32 columns,
#: 2^28 rows: 2^15 groups (2 slices) 11.42 ms against 12.12 in global memory, 2^16 (3 slices)
#: 14.04 against 12.43, so at most 2; each pass costs about what one-block aggregation does.
HGB_MAX_SLICES = int(os.environ.get("GPUJOIN_HGB_MAX_SLICES", "2"))
SLICE_BUDGET = int(os.environ.get("GPUJOIN_HGB_SLICE_KB", "220")) * 1024
SLICE_BLOCK = 1024
#: Resident 256-thread blocks an SM at most (GPUJOIN_HGB_BLOCKS_PER_SM).  H200, MAX of two int32
#: columns (specialized kernel, 48 registers), 2^28 rows: at 2^8, 2^10, 2^12 groups 3.59, 3.82,
#: 6.28 ms with 4 against 3.88, 4.26, 6.96 with 8 (more blocks take shared memory from the L1
#: that caches the group-id table's probes).
HGB_BLOCKS_PER_SM = int(os.environ.get("GPUJOIN_HGB_BLOCKS_PER_SM", "4"))
HGB_SLICE_GIDS = os.environ.get("GPUJOIN_HGB_SLICE_GIDS", "1") == "1"
#: Hot groups (issue 17): when the groups' accumulators go to global memory, the keys that a
#: strided sample of HOT_SAMPLE keys shows at least HOT_SEEN times (about HOT_SEEN * n /
#: HOT_SAMPLE rows or more each; at most HOT_MAX, the most frequent; HOT_MIN_SHARE of the
#: sample together, else the renumbering does not pay: uniform keys over 2^16 groups, H200,
#: 9.5 against 10.6 ms with one such group) take group ids 0..h-1, and
#: their accumulators stay in every block's shared memory (at most HOT_BUDGET bytes, in copies
#: as at small g).  A group of many rows then costs shared atomics and one global merge a
#: block, instead of a global atomic a row on one L2 address: Zipf z = 1.5 over 2^16 groups
#: puts 38% of the rows on one group.  Under HOT_MIN_ROWS rows the sample is not taken;
#: GPUJOIN_HGB_HOT_MAX=0 turns hot groups off.
HOT_SAMPLE, HOT_SEEN, HOT_MIN_SHARE = 1 << 14, 4, 0.05
HOT_MAX = int(os.environ.get("GPUJOIN_HGB_HOT_MAX", "4096"))
HOT_BUDGET, HOT_MIN_ROWS = 24 * 1024, 1 << 20


def _pow2(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length())


def _slots(groups: int) -> int:
    """A table's slots for ``groups`` keys: a load of at most 0.45, a power of two."""
    return max(1024, _pow2(2 * groups + groups // 4))


#: The fewest slots of a table sized by an estimate, from SPREAD_ROWS rows (fewer rows: as many
#: slots as rows / 64): few groups spread over many slots.  On an H200 at 2^28 rows, HGB's
#: stage 1 (its HyperLogLog estimate and the build) took 2.75 ms over 2^8 groups in the 1,024
#: slots of the estimate and 0.65 in 131,072; over 2^12 groups 3.68 in 16,384 and 1.72
#: (docs/BENCHMARKS.md).
SPREAD_SLOTS, SPREAD_ROWS = 1 << 17, 1 << 23


def _spread_slots(rows: int) -> int:
    """The fewest slots of a table sized by an estimate, for ``rows`` keys (SPREAD_SLOTS)."""
    return min(SPREAD_SLOTS, _pow2(max(rows, 1)) // (SPREAD_ROWS // SPREAD_SLOTS))


def _slot_bytes(key_bytes: int) -> int:
    """A table slot's bytes: its key, its group id, and the key of the id it may take."""
    return 2 * key_bytes + 4


#: The capped build's first grid, in blocks an SM (HashTable; GPUJOIN_HGB_PREFIX_BLOCKS_PER_SM):
#: the keys in flight before any count arrives number up to its threads, so the capped table has
#: room for cap plus them (sized for the cap alone, the keys in flight filled it: at 2^24 rows
#: over 2^16 groups the build's overflow took 0.14 ms of device time on an H100, 0.10 with the
#: room); and every thread of it bumps one count, so fewer threads contend less: on an H100 the
#: planner's statistics at 2^24 rows took 0.31 ms with 2 blocks an SM and 0.23 with 1/2 (2^16
#: groups, overflow; 4 groups: 0.31 and 0.24), at 2^28 rows over 2^16 groups 0.37 and 0.23.
PREFIX_BLOCKS_PER_SM = float(os.environ.get("GPUJOIN_HGB_PREFIX_BLOCKS_PER_SM", "0.5"))


def _prefix_blocks() -> int:
    return max(1, int(device_properties(cp.cuda.Device().id)["sms"] * PREFIX_BLOCKS_PER_SM))


def _prefix_threads() -> int:
    return _prefix_blocks() * BLOCK


def check_rows(n: int, name: str) -> None:
    if n >= 2**31:
        raise ValueError(f"GPU {name} takes fewer than 2**31 rows, got {n:,}; use device='cpu' or split the input")


def sentinel(dtype) -> int:
    """The key value that marks an empty table slot (groupby.cu: sentinel<K>)."""
    return int(np.iinfo(dtype).min)


class HashTable:
    """Stage 1: the distinct keys of ``keys`` in a global open-addressing table, with dense ids.

    Attributes: table (the keys; empty slots hold the sentinel), mask (slots - 1), slot_gid
    (int32 dense group id of each occupied slot, in the order the keys went in), sentinel_gid
    (the id of the sentinel key's group, kept outside the table, or -1), group_keys ((g,) the
    key of each id).  With ``cap``
    (use :meth:`at_most`) a table that passes cap keys stops there and holds only overflow=True.
    With ``state`` (two device u64) the build is only launched: :meth:`finish` takes the state
    once read back, so that the planner reads it in one copy with its sample.
    """

    def __init__(self, keys: cp.ndarray, estimate: int | None = None, cap: int = 0,
                 state: cp.ndarray | None = None):
        check_rows(keys.size, "hash tables")
        self.keys, self.cap, self.overflow, self.hot = keys, cap, False, 0  # hot: number_first's
        self._launch(self.capped_slots(keys.size, cap) if cap else
                     max(_slots(estimate_groups(keys) if estimate is None else estimate), _spread_slots(keys.size)),
                     state)
        if state is None:
            self.finish(self.state.get())

    @staticmethod
    def capped_slots(rows: int, cap: int) -> int:
        """The slots of a table capped at ``cap`` keys for ``rows`` keys: room for the cap and the
        keys in flight on the capped build's first grid (_prefix_threads)."""
        return _slots(cap + min(rows, _prefix_threads()))

    def _launch(self, slots: int, state: cp.ndarray | None = None) -> None:
        """hgb_build into a table of ``slots`` (filled with the sentinel first, by hgb_clear);
        its state (u64: keys inserted; two int32 flags: full, sentinel key seen) in ``state``
        (two u64 on the current stream, zeroed by hgb_clear).  Host time counts here: at 2^24
        rows the planner's build and HGB are mostly launch overhead (one CuPy call 2-20 us on
        an H200), so arguments go as pointers, not CuPy views."""
        keys, n, kb = self.keys, self.keys.size, self.keys.dtype.itemsize
        check_memory(slots * _slot_bytes(kb), f"a hash table of {slots:,} slots")
        self.table = cp.empty(slots, keys.dtype)
        # each key's id and the key of each id, written by the build (the sentinel key's group,
        # outside the table, takes the id after the others: its key is written by finish)
        self.slot_gid = cp.empty(slots, cp.int32)
        self.group_keys = cp.empty(slots + 1, keys.dtype)
        self.state = cp.empty(2, cp.uint64) if state is None else state
        sms = device_properties(cp.cuda.Device().id)["sms"]
        kt = key_type(keys)
        kernel("groupby.cu", f"hgb_clear<{kt}>")((max(1, min(-(-slots // BLOCK), sms * 4)),), (BLOCK,),
                                                 (self.table, np.int64(slots), self.state))
        build = kernel("groupby.cu", f"hgb_build<{kt}>")
        count, flags = np.uint64(self.state.data.ptr), np.uint64(self.state.data.ptr + 8)
        # with a cap, a prefix of 32 cap keys on a small grid first (hgb_build): past the cap on
        # spread keys the build then ends after a few of their rows
        cut = min(n, 32 * self.cap) if self.cap else 0
        for start, end, most in ((0, cut, _prefix_blocks()), (cut, n, sms * 16)):
            if end > start:
                grid = max(1, min((end - start + BLOCK - 1) // BLOCK, most))
                build((grid,), (BLOCK,), (np.uint64(keys.data.ptr + start * kb), np.int64(end - start), self.table,
                                          np.uint32(slots - 1), count, flags, np.uint64(self.cap), self.slot_gid,
                                          self.group_keys))

    def finish(self, state: np.ndarray) -> None:
        """Stage 1's end from the build's state read back to the host (``state``, the u64 pair
        given to the constructor): a full table is rebuilt four times larger (the estimate was
        far off), or with a cap marks overflow; else the group count, with no further work on
        the device (the build numbered the groups) but the sentinel key's, when present."""
        full, has_sentinel = (bool(f) for f in np.asarray(state[1:2]).view(np.int32))
        while full and not self.cap:
            self._launch(self.table.size * 4)
            state = self.state.get()
            full, has_sentinel = (bool(f) for f in np.asarray(state[1:2]).view(np.int32))
        if full:
            self.overflow = True  # more than cap groups: the table holds some of them only
            return
        in_table = int(state[0])
        self.n, self.mask = self.keys.size, self.table.size - 1
        self.sentinel_gid = in_table if has_sentinel else -1
        self.num_groups = in_table + has_sentinel
        self.group_keys = self.group_keys[:self.num_groups]
        if has_sentinel:
            self.group_keys[in_table] = sentinel(self.keys.dtype)

    @staticmethod
    def nbytes(groups: int, key_bytes: int, capped: bool = False) -> int:
        """GPU memory of a table sized for ``groups`` keys (``capped``: as at_most sizes it, at
        most): its slots, their ids and the keys of the ids."""
        return _slots(groups + _prefix_threads() if capped else groups) * _slot_bytes(key_bytes)

    @classmethod
    def at_most(cls, keys: cp.ndarray, cap: int) -> "HashTable | None":
        """The table of ``keys`` when they hold at most ``cap`` distinct keys (the sentinel key
        aside), else None: the planner's exact group count where its rules compare it with a
        bound, from the build HGB runs anyway (issue 17 item 3).  On more groups the build stops
        once cap + 1 keys went in, a read of the first rows only for spread keys.  At exactly
        ``cap`` groups it may also answer None (a key that raced the count's last step)."""
        table = cls(keys, cap=max(1, cap))
        return None if table.overflow else table

    def number_first(self, first: cp.ndarray) -> int:
        """Renumber the groups so that the keys ``first`` (distinct, each in the table) take
        ids 0..h-1 and the others follow in slot order; returns h (the sentinel key, kept
        outside the table, is never among them)."""
        slots = self.lookup(first, ids="slot")
        slots = slots[slots >= 0]
        h = int(slots.size)
        if h == 0:
            return 0
        occupied = self.table != self.table.dtype.type(sentinel(self.table.dtype))
        cold = occupied.copy()
        cold[slots] = False
        gid = cp.cumsum(cold, dtype=cp.int32)
        gid += h - 1
        gid[slots] = cp.arange(h, dtype=cp.int32)
        keys = self.group_keys.copy()
        keys[gid[occupied]] = self.table[occupied]  # the sentinel's group stays last
        self.slot_gid, self.group_keys, self.hot = gid, keys, h
        return h

    def lookup(self, probe: cp.ndarray, ids: cp.ndarray | None = None, sentinel_id: int | None = None
               ) -> cp.ndarray:
        """int32 ``ids[slot]`` of every key of ``probe`` (each must be in the table); by default
        its dense group id.  With ``ids="slot"``, the slot itself (-1 for the sentinel key)."""
        if ids is None:
            ids, sentinel_id = self.slot_gid, self.sentinel_gid
        elif isinstance(ids, str):
            ids, sentinel_id = None, -1
        codes = cp.empty(probe.size, cp.int32)
        if probe.size:
            sms = device_properties(cp.cuda.Device().id)["sms"]
            grid = max(1, min((probe.size + BLOCK - 1) // BLOCK, sms * 16))
            kernel("groupby.cu", f"hgb_lookup<{key_type(probe)}>")(
                (grid,), (BLOCK,), (probe, np.int64(probe.size), self.table, ptr(ids), np.int32(sentinel_id),
                                    np.uint32(self.mask), codes))
        return codes


def placement(part: list[AggInput], g: int, props: dict) -> tuple[str, int]:
    """Where stage 2 keeps the accumulators of ``part`` for ``g`` groups: ("block", 0) in one
    block's shared memory, ("slices", passes), ("cluster", blocks a cluster) or ("global", 0)."""
    if smem_bytes(part, g) <= SMEM_BLOCK_BUDGET:
        return "block", 0
    passes = -(-smem_bytes(part, g) // min(SLICE_BUDGET, props["smem_optin"]))  # one slice a pass
    if passes <= HGB_MAX_SLICES:
        return "slices", passes
    cl = next((c for c in HGB_CLUSTERS if c in CLUSTER_SIZES and smem_bytes(part, -(-g // c)) <= SMEM_BLOCK_BUDGET),
              None)
    return ("cluster", cl) if cl is not None else ("global", 0)


def aggregate(table: HashTable, keys: cp.ndarray, inputs: list[AggInput]) -> list[cp.ndarray]:
    """Stage 2 over every input (rows of ``keys``, the keys the table was built from): each
    input's (accumulators, g) u64 slots.  May renumber ``table``'s groups (hot groups first)."""
    g, n = table.num_groups, keys.size
    check_memory(global_bytes(inputs, g), f"the aggregates of {g:,} groups")
    accs = allocate(inputs, g)
    if not n:
        return accs
    props = device_properties(cp.cuda.Device().id)
    kt = key_type(keys)
    parts = [(inputs[lo:lo + MAXC], accs[lo:lo + MAXC]) for lo in range(0, len(inputs), MAXC)]
    where = [placement(part, g, props) for part, _ in parts]
    hot = 0
    if HOT_MAX > 0 and n >= HOT_MIN_ROWS and ("global", 0) in where:
        first = frequent_keys(keys, HOT_SEEN * n / HOT_SAMPLE, HOT_SAMPLE, HOT_SEEN, HOT_MAX, HOT_MIN_SHARE)
        hot = 0 if first is None else table.number_first(first)
    gids = None  # each row's group id, looked up once when the sliced passes would probe again
    for (part, part_accs), (path, count) in zip(parts, where):
        block, slice_, grid_y, copies, part_hot = BLOCK, 0, 1, 1, 0
        if path == "block":  # every group in one block's shared memory
            while copies < 8 and smem_bytes(part, 2 * copies * g) <= SMEM_COPIES_BUDGET:
                copies *= 2
            sstride, smem, use_smem = (g * copies + 1) & ~1, smem_bytes(part, g * copies), 1
        elif path == "slices":  # a few passes, a slice of groups each
            grid_y, slice_ = count, -(-g // count)
            sstride, smem, use_smem, block = (slice_ + 1) & ~1, smem_bytes(part, slice_), 1, SLICE_BLOCK
            if grid_y > 1 and gids is None and HGB_SLICE_GIDS:
                gids = table.lookup(keys)
        elif path == "cluster":  # the groups fit in a cluster's distributed shared memory
            slice_ = -(-g // count)
            sstride, smem = (slice_ + 1) & ~1, smem_bytes(part, slice_)
            fn = kernel("groupby.cu", f"hgb_aggregate_cluster<{kt}, {count}>")
            if smem > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = smem
            per_sm = max(1, min(2, props["smem_optin"] // smem))
            grid = max(count, props["sms"] * per_sm // count * count)
            args = (keys, np.int64(n), table.table, table.slot_gid, np.int32(table.sentinel_gid),
                    np.uint32(table.mask))
            fn((grid,), (CLUSTER_BLOCK,), (*args, descriptors(part, part_accs, smem_slots=sstride),
                                           np.int32(len(part)), np.uint64(g), np.uint64(slice_), np.uint64(sstride)),
               shared_mem=smem)
            continue
        else:  # global memory, but for the hot groups (in shared memory when there are any)
            part_hot = max(0, min(hot, HOT_BUDGET // slot_bytes(part) - 1))
            while part_hot and copies < 8 and smem_bytes(part, 2 * copies * part_hot) <= HOT_BUDGET:
                copies *= 2
            sstride, smem, use_smem = (part_hot * copies + 1) & ~1, smem_bytes(part, part_hot * copies), int(part_hot > 0)
        fn = kernel("groupby.cu", f"hgb_aggregate<{kt}, {column_spec(part)}>")
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        per_sm = max(1, min(HGB_BLOCKS_PER_SM * BLOCK // block, (props["smem_optin"] // smem) if smem else 8))
        grid = max(1, min((n + block - 1) // block, props["sms"] * per_sm))
        desc = descriptors(part, part_accs, smem_slots=sstride)
        fn((grid, grid_y), (block,), (keys, np.int64(n), table.table, table.slot_gid, np.int32(table.sentinel_gid),
                                      np.uint32(table.mask), ptr(gids if grid_y > 1 else None), desc,
                                      np.int32(len(part)), np.uint64(g), np.int32(use_smem), np.int32(copies),
                                      np.uint64(sstride), np.uint64(slice_), np.uint64(part_hot)), shared_mem=smem)
    return accs


def hgb(keys: cp.ndarray, inputs: list[AggInput], groups_estimate: int | None = None,
        table: HashTable | None = None) -> GroupByOutput:
    """Hash group-by of ``keys`` (int32 or int64 (n,), no nulls) with each input's aggregates;
    ``groups_estimate`` sizes the table (else a HyperLogLog estimate here); ``table``, the
    planner's capped HashTable of these keys (not overflowed), is used as stage 1 when given.

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
    table = HashTable(keys, groups_estimate) if table is None else table
    timer.mark("group_ids")
    accs = aggregate(table, keys, inputs)
    cols = [decode(inp, a) for inp, a in zip(inputs, accs)]
    timer.mark("aggregate")
    return GroupByOutput(table.group_keys, cols, timer.phases, {"table_slots": table.mask + 1, "hot_groups": table.hot})
