"""NPHJ: the non-partitioned hash join (paper 003 §1.5, the design of cuDF's hash join).

One global open-addressing table (linear probing, 2^k slots for at least twice the build rows)
holds every build row, duplicates in slots of their own; each probe row walks its probe
sequence to the first empty slot.  The rows of heavy build keys (a sample's estimate:
:func:`heavy_keys`) join by sort-merge instead, since a multimap of linear probing inserts m
equal keys in m^2/2 steps (issue 17).  No transformation: payloads are gathered from the original
columns at the matched row ids (the build side's gather is random, the probe side's follows
probe order), or written by the match kernel itself when a side has one payload column.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from ..primitives import compact, frequent_keys, key_type, word_type
from ..runtime import PhaseTimer, check_memory, kernel, out_of_memory, ptr
from .common import (JoinOutput, direct_column, emits_pairs, needs_build_flags,
                     needs_probe_flags, position_dtype, run_match, unmatched)
from .smj import match_with_ranges, sort_rows

BLOCK = 256
#: heavy_keys: the sample of build keys, and the rows a key must hold to be heavy.
HEAVY_SAMPLE, HEAVY_ROWS = 1 << 16, 4096


def nphj(build_keys: cp.ndarray, probe_keys: cp.ndarray, build_payloads: list[cp.ndarray],
         probe_payloads: list[cp.ndarray], mode: str = "inner", *, emit_keys: bool = False
         ) -> JoinOutput:
    """Non-partitioned hash join; arguments and result as :func:`gpujoin.cuda.join.phj.phj`.

    Raises
    ------
    MemoryError
        The table and output guess do not fit in free GPU memory.
    """
    nb, np_ = build_keys.size, probe_keys.size
    if nb >= 2**31:
        raise ValueError(f"NPHJ's table holds fewer than 2**31 build rows, got {nb:,}; use phj-tr")
    slots = 1 << max(1, (2 * nb - 1).bit_length())
    check_memory(slots * (build_keys.dtype.itemsize + 4) + np_ * 16, f"NPHJ of {nb:,} x {np_:,} rows")
    try:
        return _nphj(build_keys, probe_keys, build_payloads, probe_payloads, mode, emit_keys, slots)
    except cp.cuda.memory.OutOfMemoryError as e:
        raise out_of_memory(e, "NPHJ") from None


def _grid(n: int) -> tuple[int]:
    return (max(1, min((n + BLOCK - 1) // BLOCK, 132 * 16)),)


def build_table(bk: cp.ndarray, slots: int | None = None, rows: cp.ndarray | None = None
                ) -> tuple[cp.ndarray, cp.ndarray, np.uint64]:
    """The linear-probing table of build keys ``bk`` (int32/int64, fewer than 2^31), of the
    ``rows`` (int64 positions) only when given: (slot keys, slot row ids (int32, -1 empty),
    slot mask)."""
    nb = bk.size if rows is None else rows.size
    slots = slots or 1 << max(1, (2 * nb - 1).bit_length())
    slot_key = cp.empty(slots, bk.dtype)
    slot_row = cp.full(slots, -1, cp.int32)
    mask = np.uint64(slots - 1)
    if nb:
        kernel("hashjoin.cu", f"nphj_build<{key_type(bk)}>")(_grid(nb), (BLOCK,),
                                                            (bk, np.int64(nb), ptr(rows), slot_key, slot_row, mask))
    return slot_key, slot_row, mask


def heavy_keys(bk: cp.ndarray) -> cp.ndarray | None:
    """Sorted keys of ``bk`` that a strided sample of HEAVY_SAMPLE keys shows holding about
    HEAVY_ROWS rows or more (seen at least twice unless the sample is all of ``bk``), or None.

    A linear-probing multimap inserts m equal keys in m^2/2 steps and walks all m for each
    probe row of the key: 25 million equal build keys would take hours.  The heavy keys' rows
    join by sort-merge instead (``smj.sort_rows``), at the cost of their output.  Keys of fewer
    rows that the sample misses keep the quadratic build (with 2^26 build rows, those of under
    about 2,048 rows)."""
    return frequent_keys(bk, HEAVY_ROWS, HEAVY_SAMPLE)


def key_in(keys: cp.ndarray, sorted_set: cp.ndarray) -> cp.ndarray:
    """uint8 (n,): 1 where ``keys`` is in ``sorted_set`` (a few sorted keys)."""
    pos = cp.minimum(cp.searchsorted(sorted_set, keys), sorted_set.size - 1)
    return (sorted_set[pos] == keys).view(cp.uint8)


def probe_sum(table, pk: cp.ndarray, pvals: cp.ndarray, bvals: cp.ndarray) -> tuple[cp.ndarray, cp.ndarray]:
    """Probe ``table`` (from :func:`build_table`) with keys ``pk``, the pairs' build values
    ``bvals`` and probe values ``pvals`` written out as a join does: (matched pairs, sum of
    ``pvals`` over them) as int64 device scalars (paper 004's NPJ baseline, ``outofcore/npj.py``)."""
    slot_key, slot_row, mask = table
    fn = kernel("hashjoin.cu", f"nphj_probe<{key_type(pk)}, {word_type(bvals.dtype)}, {word_type(pvals.dtype)}>")

    def launch(out_b, out_p, out_k, counter, cap):
        if pk.size:
            fn(_grid(pk.size), (BLOCK,), (pk, np.int64(pk.size), slot_key, slot_row, mask, bvals, pvals,
                                          out_b, out_p, ptr(None), counter, cap, ptr(None), ptr(None)))

    _, out_p, _ = run_match(launch, pk.size, bvals.dtype, pvals.dtype, None, "NPJ probe")
    return cp.asarray(out_p.size, cp.int64), out_p.astype(cp.int64).sum()


def _nphj(bk, pk, bpay, ppay, mode, emit_keys, slots):
    nb, np_ = bk.size, pk.size
    timer = PhaseTimer()
    kt = key_type(bk)
    pairs = emits_pairs(mode)
    hot = heavy_keys(bk)
    heavy = light = None
    if hot is not None:  # heavy keys' rows to the sort-merge path; the table holds the rest
        in_b = key_in(bk, hot)
        light = compact(in_b, False)
        bpos, ppos = compact(in_b, True), compact(key_in(pk, hot), True)
        heavy = sort_rows(bk[bpos], pk[ppos], bpos, ppos, pairs)
    slot_key, slot_row, mask = build_table(bk, slots, light)
    grid = _grid
    timer.mark("transform")
    bsrc, psrc = direct_column(bpay), direct_column(ppay)
    bdt = bsrc.dtype if bsrc is not None else position_dtype(nb)
    pdt = psrc.dtype if psrc is not None else position_dtype(np_)
    pflag = cp.zeros(np_, cp.uint8) if needs_probe_flags(mode) else None
    bflag = cp.zeros(nb, cp.uint8) if needs_build_flags(mode) else None
    fn = kernel("hashjoin.cu", f"nphj_probe<{kt}, {word_type(bdt)}, {word_type(pdt)}>")

    def launch(out_b, out_p, out_k, counter, cap):
        if np_:
            fn(grid(np_), (BLOCK,), (pk, np.int64(np_), slot_key, slot_row, mask, ptr(bsrc), ptr(psrc),
                                     out_b, out_p, ptr(out_k), counter, cap, ptr(bflag), ptr(pflag)))

    out_b, out_p, out_k = match_with_ranges(launch, np_ if pairs else 0, bdt, pdt,
                                            bk.dtype if (emit_keys and pairs) else None, "NPHJ match", heavy,
                                            bsrc, psrc, pflag, bflag)
    probe_only, build_only = unmatched(mode, pflag, bflag)
    timer.mark("match")
    out = JoinOutput(list(bpay), list(ppay), direct_b=bsrc is not None, direct_p=psrc is not None,
                     probe_only=probe_only, build_only=build_only, key_b=bk, key_p=pk,
                     params={"slots": slots, "heavy_build_rows": 0 if heavy is None else int(heavy.sbk.size)},
                     phases=timer.phases)
    if pairs:
        out.pairs_b, out.pairs_p, out.pair_keys = out_b, out_p, out_k
    return out
