"""SMJ-UR and SMJ-TR: sort-merge join of paper 003 §1.1-1.2 on one GPU.

Both sides are sorted by key with the stable LSD radix sort (``primitives.radix_sort``) over
only the bits the key range needs (keys are offset by the smaller minimum).  One merge path
pass then gives each probe key its lower bound among the build keys, its count of equal ones
(its matches) and, by a block scan and decoupled look-back in the same kernel, its first output
row; each output row finds its probe row by a load-balancing search, a merge path over the rows'
output ends and the output indices (the same work for every block under any skew; Baxter's
moderngpu).

SMJ-UR sorts (key, row id) and gathers payloads from the original columns (unclustered);
SMJ-TR sorts every payload column with its key and gathers from the sorted copies at merge
positions, which come out in increasing order on both sides (clustered).
"""

from __future__ import annotations

from dataclasses import dataclass

import cupy as cp
import numpy as np

from ..primitives import MERGE_TILE, key_type, merge_bounds, radix_sort, value_range, word_type
from ..runtime import PhaseTimer, check_memory, kernel, out_of_memory, ptr
from .common import (JoinOutput, direct_column, emits_pairs, map_positions,
                     needs_build_flags, needs_probe_flags, pair_arrays, position_dtype, run_match, unmatched)

BLOCK = 256  # merge.cu's MERGE_BLOCK


def smj(build_keys: cp.ndarray, probe_keys: cp.ndarray, build_payloads: list[cp.ndarray],
        probe_payloads: list[cp.ndarray], mode: str = "inner", *, method: str = "tr",
        emit_keys: bool = False) -> JoinOutput:
    """Sort-merge join; arguments and result as :func:`gpujoin.cuda.join.phj.phj`.

    Raises
    ------
    MemoryError
        The sorted copies, bounds and output guess do not fit in free GPU memory.
    """
    if method not in ("tr", "ur"):
        raise ValueError(f"unknown SMJ method {method!r}; use 'tr' or 'ur'")
    nb, np_ = build_keys.size, probe_keys.size
    kb = build_keys.dtype.itemsize
    width = lambda cols: 4 if method == "ur" else sum(c.dtype.itemsize for c in cols)  # noqa: E731
    check_memory(2 * (nb * (kb + width(build_payloads)) + np_ * (kb + width(probe_payloads))) + np_ * 40,
                 f"SMJ-{method.upper()} of {nb:,} x {np_:,} rows")
    try:
        return _smj(build_keys, probe_keys, build_payloads, probe_payloads, mode, method, emit_keys)
    except cp.cuda.memory.OutOfMemoryError as e:
        raise out_of_memory(e, f"SMJ-{method.upper()}") from None


@dataclass
class MergeRanges:
    """Sorted build and probe keys and, per sorted probe row, its range of equal build keys
    (merge path): what SMJ joins with, and what PHJ hands its oversized partitions to.

    bperm / pperm: int64 positions of the sorted rows in their side's space (None: the sorted
    order is the space).  lower: int64 (np,) first equal build row; with pairs, offsets: int64
    (np + 1,) each probe row's first output row and the total; without, counts: int64 (np,) how
    many (``matched`` gives either way which probe rows have one).
    """

    sbk: cp.ndarray
    spk: cp.ndarray
    bperm: cp.ndarray | None
    pperm: cp.ndarray | None
    lower: cp.ndarray
    counts: cp.ndarray | None = None
    offsets: cp.ndarray | None = None

    def matched(self) -> cp.ndarray:
        """uint8 (np,): 1 where a sorted probe row has an equal build key."""
        if self.counts is not None:
            return (self.counts > 0).astype(cp.uint8)
        return (self.offsets[1:] != self.offsets[:-1]).astype(cp.uint8)

    @property
    def total(self) -> int:
        return 0 if self.offsets is None else int(self.offsets[-1])


def merge_ranges(sbk: cp.ndarray, spk: cp.ndarray, bperm=None, pperm=None, pairs: bool = True) -> MergeRanges:
    """The match ranges of sorted keys ``sbk`` (build) and ``spk`` (probe), same dtype."""
    if pairs:  # the offsets (each row's first output, then the total) from the merge pass itself
        lower, offsets = merge_bounds(sbk, spk, upper=False, offsets=True)
        return MergeRanges(sbk, spk, bperm, pperm, lower, offsets=offsets)
    lower, counts = merge_bounds(sbk, spk, upper=False, counts=True)
    return MergeRanges(sbk, spk, bperm, pperm, lower, counts)


def expand(r: MergeRanges, bsrc, psrc, out_b: cp.ndarray, out_p: cp.ndarray, out_k: cp.ndarray | None) -> None:
    """Write the ``r.total`` pairs of ``r`` into ``out_b``/``out_p``/``out_k`` (views of that
    length): each side's value in ``bsrc``/``psrc`` (or its position, when None) and the key."""
    total = r.total
    if not total:
        return
    fn = kernel("merge.cu", f"expand_matches<{key_type(r.sbk)}, {word_type(out_b.dtype)}, {word_type(out_p.dtype)}>")
    blocks = -(-(r.spk.size + total) // MERGE_TILE)  # a tile of the merge of row ends and outputs a block
    splits = cp.empty(blocks + 1, cp.int64)  # where each block starts, a thread each (merge.cu: ends_splits)
    kernel("merge.cu", "ends_splits")((-(-(blocks + 1) // 256),), (256,),
                                      (r.offsets, np.int64(r.spk.size), np.int64(total), np.int64(blocks), splits))
    fn((blocks,), (BLOCK,), (r.lower, r.offsets, np.int64(r.spk.size), np.int64(total), r.spk, ptr(r.bperm),
                             ptr(r.pperm), ptr(bsrc), ptr(psrc), out_b, out_p, ptr(out_k), splits))


def range_flags(r: MergeRanges, pflag: cp.ndarray | None, bflag: cp.ndarray | None) -> None:
    """Mark the matched probe rows (``pflag``) and build rows (``bflag``, uint8 over each space)
    of ``r``; rows outside its permutations are left as they are."""
    if pflag is not None and r.spk.size:
        hit = r.matched()
        if r.pperm is None:
            pflag[:] = hit
        else:
            pflag[r.pperm] = hit
    if bflag is not None and r.sbk.size:
        hit = (merge_bounds(r.spk, r.sbk, upper=False, counts=True)[1] > 0).astype(cp.uint8)
        if r.bperm is None:
            bflag[:] = hit
        else:
            bflag[r.bperm] = hit


def key_range(bk: cp.ndarray, pk: cp.ndarray) -> tuple[int, int]:
    """(smallest key of both sides, bits of the largest minus it): what their radix sort reads."""
    lo, hi = value_range([bk, pk]) or (0, 0)
    return lo, (hi - lo).bit_length()


def sort_rows(bk: cp.ndarray, pk: cp.ndarray, bpos: cp.ndarray, ppos: cp.ndarray, pairs: bool) -> MergeRanges:
    """The match ranges of a subset of rows: build keys ``bk`` at space positions ``bpos`` and
    probe keys ``pk`` at ``ppos`` (int64), each side sorted on the bits the keys' range needs."""
    lo, bits = key_range(bk, pk)
    sbk, (sbpos,) = radix_sort(bk, [bpos], lo, bits)
    spk, (sppos,) = radix_sort(pk, [ppos], lo, bits)
    return merge_ranges(sbk, spk, sbpos, sppos, pairs)


def match_with_ranges(launch, cap: int, bdtype, pdtype, kdtype, what: str, ranges: MergeRanges | None,
                      bsrc, psrc, pflag, bflag):
    """A hash join's ``run_match`` (see ``common.run_match``) when ``ranges`` (rows it left to
    sort-merge, known before its kernel: NPHJ's heavy keys) is not None: room for their pairs
    is allocated with the kernel's, and :func:`append_ranges` writes them there after the
    kernel's.  Returns (out_b, out_p, out_k)."""
    out = run_match(launch, cap, bdtype, pdtype, kdtype, what, extra=ranges.total if ranges is not None else 0)
    return out if ranges is None else append_ranges(ranges, bsrc, psrc, pflag, bflag, *out, what)


def append_ranges(r: MergeRanges, bsrc, psrc, pflag, bflag, out_b, out_p, out_k, what: str):
    """A hash join's ``run_match`` output (``out_b``/``out_p``/``out_k``) followed by the pairs
    of ``r`` (rows it left to sort-merge: PHJ's oversized partitions, found after its kernel
    ran; NPHJ's heavy keys, given room by :func:`match_with_ranges`), whose flags are marked
    too.  Written in place where run_match's allocation (the views' base) has room, else into
    arrays of the sum (MemoryError naming ``what``).  Returns (out_b, out_p, out_k)."""
    range_flags(r, pflag, bflag)
    extra, n = r.total, (out_p.size if out_p is not None else 0)
    if not extra:
        return out_b, out_p, out_k
    outs = [out_b, out_p, out_k]
    if all(a is None or (a.base is not None and a.base.size >= n + extra) for a in outs):
        outs = [None if a is None else a.base[:n + extra] for a in outs]
    else:
        grown = pair_arrays(n + extra, out_b.dtype, out_p.dtype, None if out_k is None else out_k.dtype, what)
        for g, a in zip(grown, outs):
            if a is not None:
                g[:n] = a
        outs = list(grown)
    expand(r, bsrc, psrc, outs[0][n:], outs[1][n:], None if outs[2] is None else outs[2][n:])
    return tuple(outs)


def _smj(bk, pk, bpay, ppay, mode, method, emit_keys):
    nb, np_ = bk.size, pk.size
    timer = PhaseTimer()
    lo, bits = key_range(bk, pk)
    if method == "ur":
        sbk, (sbrow,) = radix_sort(bk, [cp.arange(nb, dtype=position_dtype(nb))], lo, bits)
        spk, (sprow,) = radix_sort(pk, [cp.arange(np_, dtype=position_dtype(np_))], lo, bits)
        space_b, space_p, bsrc, psrc = list(bpay), list(ppay), sbrow, sprow
    else:
        sbk, space_b = radix_sort(bk, list(bpay), lo, bits)
        spk, space_p = radix_sort(pk, list(ppay), lo, bits)
        bsrc, psrc = direct_column(space_b), direct_column(space_p)
    timer.mark("transform")

    pairs = emits_pairs(mode)
    r = merge_ranges(sbk, spk, pairs=pairs)
    pflag = cp.zeros(np_, cp.uint8) if needs_probe_flags(mode) else None
    bflag = cp.zeros(nb, cp.uint8) if needs_build_flags(mode) else None
    range_flags(r, pflag, bflag)
    out_b = out_p = out_k = None
    if pairs:
        bdt = bsrc.dtype if bsrc is not None else position_dtype(nb)
        pdt = psrc.dtype if psrc is not None else position_dtype(np_)
        out_b, out_p, out_k = pair_arrays(r.total, bdt, pdt, bk.dtype if emit_keys else None, "SMJ merge")
        expand(r, bsrc, psrc, out_b, out_p, out_k)
    probe_only, build_only = unmatched(mode, pflag, bflag)
    timer.mark("match")
    out = JoinOutput(space_b, space_p, params={"key_bits": bits, "method": method}, phases=timer.phases)
    if pairs:
        out.pairs_b, out.pairs_p, out.pair_keys = out_b, out_p, out_k
    if method == "ur":
        out.probe_only, out.build_only = map_positions(probe_only, sprow), map_positions(build_only, sbrow)
        out.key_b, out.key_p = bk, pk
    else:
        out.direct_b, out.direct_p = bsrc is not None, psrc is not None
        out.probe_only, out.build_only = probe_only, build_only
        out.key_b, out.key_p = sbk, spk
    return out
