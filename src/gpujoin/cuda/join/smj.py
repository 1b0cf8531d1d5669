"""SMJ-UR and SMJ-TR: sort-merge join of paper 003 §1.1-1.2 on one GPU.

Both sides are sorted by key with the stable LSD radix sort (``primitives.radix_sort``) over
only the bits the key range needs (keys are offset by the smaller minimum).  Merge path then
gives each probe key its lower and upper bound among the build keys; their difference is its
match count, a scan turns counts into output offsets, and each output row finds its probe row
by binary search over the offsets (load-balanced under any skew).

SMJ-UR sorts (key, row id) and gathers payloads from the original columns (unclustered);
SMJ-TR sorts every payload column with its key and gathers from the sorted copies at merge
positions, which come out in increasing order on both sides (clustered).
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from ..primitives import key_type, merge_bounds, radix_sort, word_type
from ..runtime import PhaseTimer, check_memory, kernel, out_of_memory, ptr
from .common import (JoinOutput, direct_column, emits_pairs, map_positions,
                     needs_build_flags, needs_probe_flags, position_dtype, run_match, unmatched)

BLOCK = 256


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


def _smj(bk, pk, bpay, ppay, mode, method, emit_keys):
    nb, np_ = bk.size, pk.size
    timer = PhaseTimer()
    both = [a for a in (bk, pk) if a.size]
    lo = min(int(a.min()) for a in both) if both else 0
    hi = max(int(a.max()) for a in both) if both else 0
    bits = (hi - lo).bit_length()
    if method == "ur":
        sbk, (sbrow,) = radix_sort(bk, [cp.arange(nb, dtype=position_dtype(nb))], lo, bits)
        spk, (sprow,) = radix_sort(pk, [cp.arange(np_, dtype=position_dtype(np_))], lo, bits)
        space_b, space_p, bsrc, psrc = list(bpay), list(ppay), sbrow, sprow
    else:
        sbk, space_b = radix_sort(bk, list(bpay), lo, bits)
        spk, space_p = radix_sort(pk, list(ppay), lo, bits)
        bsrc, psrc = direct_column(space_b), direct_column(space_p)
    timer.mark("transform")

    lower = merge_bounds(sbk, spk, upper=False)
    counts = merge_bounds(sbk, spk, upper=True) - lower
    pflag = (counts > 0).astype(cp.uint8) if needs_probe_flags(mode) else None
    bflag = None
    if needs_build_flags(mode):
        bflag = (merge_bounds(spk, sbk, upper=True) > merge_bounds(spk, sbk, upper=False)).astype(cp.uint8)
    pairs = emits_pairs(mode)
    out_b = out_p = out_k = None
    if pairs:
        offsets = cp.zeros(np_ + 1, cp.int64)
        cp.cumsum(counts, out=offsets[1:])
        total = int(offsets[-1])
        bdt = bsrc.dtype if bsrc is not None else position_dtype(nb)
        pdt = psrc.dtype if psrc is not None else position_dtype(np_)
        fn = kernel("merge.cu", f"expand_matches<{key_type(bk)}, {word_type(bdt)}, {word_type(pdt)}>")

        def launch(ob, op, ok, counter, cap):
            counter.fill(total)
            if total:
                grid = (max(1, min((total + BLOCK - 1) // BLOCK, 132 * 16)),)
                fn(grid, (BLOCK,), (lower, offsets, np.int64(np_), np.uint64(total), sbk, ptr(bsrc), ptr(psrc),
                                    ob, op, ptr(ok)))

        out_b, out_p, out_k = run_match(launch, total, bdt, pdt, bk.dtype if emit_keys else None,
                                        "SMJ merge")
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
