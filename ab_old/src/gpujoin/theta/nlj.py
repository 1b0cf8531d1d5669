"""The block nested-loop join (paper 000 §3.1's in-core step, "NL"): every (left, right) pair
is tested against every predicate, a block of pairs at a time, so that any θ condition works and
memory stays bounded by the block.  Also the expansion that the band join reuses: rows that own
an interval of candidate partners, walked in blocks of the pair index space.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}


def compare(a, op: str, b):
    """``a op b`` elementwise (NumPy or CuPy arrays)."""
    return _OPS[op](a, b)


@dataclass
class ThetaPairs:
    """A θ-join's candidates: ``bound`` pairs at most, and ``blocks()`` yielding the output's
    (left index, right index) arrays (int64) a block at a time (each call walks them anew)."""

    bound: int
    blocks: Callable[[], Iterator[tuple]]


def interval_pairs(xp, lo, counts, order, block_pairs: int, lcols, rcols, ops) -> ThetaPairs:
    """Left row i pairs with the right rows ``order[lo[i] : lo[i] + counts[i]]`` (``order`` None:
    the right rows themselves); each block of at most ``block_pairs`` candidate pairs is kept
    where every predicate ``lcols[k] ops[k] rcols[k]`` holds."""
    ends = xp.cumsum(counts)
    total = int(ends[-1]) if counts.size else 0
    # the filters' right columns put in run order once, so that a run's rows sit side by side
    # and order[] is read for the kept pairs only (on a 2-core host no faster: 2.7 s against
    # 2.8 for 37.8M pairs; the GPU reads them coalesced)
    run_cols = rcols if order is None else [rc[order] for rc in rcols]

    def block(start):
        end = min(total, start + block_pairs)
        if xp is np:
            left, j = _expand(lo, counts, ends, start, end)
        else:  # one thread a pair: its row by a binary search of the row ends
            p = xp.arange(start, end, dtype=xp.int64)
            left = xp.searchsorted(ends, p, side="right")
            j = lo[left] + (p - (ends[left] - counts[left]))
        keep = None
        for lc, op, rc in zip(lcols, ops, run_cols):
            m = compare(lc[left], op, rc[j])
            keep = m if keep is None else keep & m
        if keep is not None:
            left, j = left[keep], j[keep]
        return left, (j if order is None else order[j])

    def blocks():
        starts = range(0, total, block_pairs)
        if xp is np and len(starts) > 1:  # NumPy's gathers and compares release the GIL
            from ..outofcore.stream import COPY_THREADS, parallel_imap

            # at most 8 blocks' temporaries (about 0.15 GB each at 2^22 pairs) beyond the output
            done = parallel_imap(block, starts, ahead=min(8, COPY_THREADS))
        else:  # the GPU's kernels queue on its stream from this thread
            done = map(block, starts)
        for left, right in done:
            if left.size:
                yield left, right

    return ThetaPairs(total, blocks)


def _expand(lo, counts, ends, start: int, end: int) -> tuple:
    """(left row, position in the right run) of the pairs ``start`` .. ``end`` - 1 of the rows'
    concatenated runs, by repeating each row's values over its pairs in the block (NumPy): a
    sequential pass, where a binary search of every pair in ``ends`` (the GPU's way) reads at
    random (37.8M pairs in blocks of 2^24 on a 2-core host: 4.2 s of expansion and filtering
    with the searches, 2.7 s with this, 1.0 s in join_where's blocks of 2^22)."""
    l0, l1 = (int(x) for x in np.searchsorted(ends, [start, end - 1], side="right"))
    begins = ends[l0:l1 + 1] - counts[l0:l1 + 1]  # each row's first pair
    first = np.maximum(begins, start)
    take = np.maximum(np.minimum(ends[l0:l1 + 1], end) - first, 0)  # the row's pairs in the block
    left = np.repeat(np.arange(l0, l1 + 1, dtype=np.int64), take)
    # pair q of the block (row r's first at c_r) sits at lo[r] + (first_r - begin_r) + (q - c_r)
    shift = lo[l0:l1 + 1] + (first - begins) - (np.cumsum(take) - take)
    j = np.repeat(shift, take)
    j += np.arange(end - start, dtype=np.int64)
    return left, j


def nested_loop_join(xp, lcols, rcols, ops, block_pairs: int = 1 << 24) -> ThetaPairs:
    """Block nested-loop join of ``n_l`` x ``n_r`` rows under the conjunction of
    ``lcols[k] ops[k] rcols[k]`` (int64 arrays (n_l,) and (n_r,), one pair a predicate).

    Returns
    -------
    ThetaPairs with bound n_l * n_r; its blocks hold the matching pairs, row-major.
    """
    n_l = int(lcols[0].size) if lcols else 0
    n_r = int(rcols[0].size) if rcols else 0
    lo = xp.zeros(n_l, xp.int64)
    counts = xp.full(n_l, n_r, xp.int64)
    return interval_pairs(xp, lo, counts, None, block_pairs, lcols, rcols, ops)
