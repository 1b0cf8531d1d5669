"""The block nested-loop join (paper 000 §3.1's in-core step, "NL"): every (left, right) pair
is tested against every predicate, a block of pairs at a time, so that any θ condition works and
memory stays bounded by the block.  Also the expansion that the band join reuses: rows that own
an interval of candidate partners, walked in blocks of the pair index space.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable, Iterator

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

    def blocks():
        for start in range(0, total, block_pairs):
            p = xp.arange(start, min(total, start + block_pairs), dtype=xp.int64)
            left = xp.searchsorted(ends, p, side="right")
            j = lo[left] + (p - (ends[left] - counts[left]))
            right = j if order is None else order[j]
            keep = None
            for lc, op, rc in zip(lcols, ops, rcols):
                m = compare(lc[left], op, rc[right])
                keep = m if keep is None else keep & m
            if keep is not None:
                left, right = left[keep], right[keep]
            if left.size:
                yield left, right

    return ThetaPairs(total, blocks)


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
