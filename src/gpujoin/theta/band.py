"""The sort-based band join: range and equality conditions answered by sorting the right side
on one of its columns and binary-searching, per left row, the contiguous run of right rows that
the conditions on that column allow (several conditions on the same right column, such as
``lo <= t`` and ``t <= hi``, narrow the same run: a band).  The other predicates filter the
candidates, so the work is the candidates' count, not |L| x |R| (paper 000 §3.2's range match
on sorted runs; DuckDB's piecewise merge join does the same for one inequality).  A condition on
another right column narrows the run too, through the spread of the two columns' difference
(``_derived``): ``lo <= a <= hi`` with intervals of bounded width is a band on ``lo``.
"""

from __future__ import annotations

import numpy as np

from .nlj import ThetaPairs, interval_pairs

#: Conditions that bound a contiguous run of a sorted column (not ``!=``).
RANGE_OPS = ("<", "<=", ">", ">=", "==")


def band_plan(ops: list[str], right_columns: list[str]) -> list[int] | None:
    """The predicates that bound the run: those on the right column with the most range or
    equality conditions (equality first: the narrowest run); None when no predicate can."""
    groups: dict[str, list[int]] = {}
    for i, (op, rc) in enumerate(zip(ops, right_columns)):
        if op in RANGE_OPS:
            groups.setdefault(rc, []).append(i)
    if not groups:
        return None
    return max(groups.values(), key=lambda g: (any(ops[i] == "==" for i in g), len(g)))


#: Values whose differences int64 holds: bounds are derived only within this range.
_SAFE = 1 << 61


def _derived(xp, lcols, rcols, ops, driver) -> list[tuple]:
    """Bounds on the driver column D implied by a condition on another right column E: with
    d = E - D over the right rows in [dmin, dmax], "E >= v" gives "D >= v - dmax" and "E <= v"
    gives "D <= v - dmin" (as (left column k, shift s, op): "lcols[k] - s op D").  This makes an
    interval join such as ``lo <= a and a <= hi`` a band: D = lo runs over [a - max(hi - lo), a],
    not all of lo <= a."""
    if not rcols[0].size or not lcols[0].size:
        return []
    d_col = rcols[driver[0]]
    out = []
    for i, (v, op, e) in enumerate(zip(lcols, ops, rcols)):
        if i in driver or op == "!=" or e is d_col:
            continue
        if max(abs(int(x)) for x in (e.min(), e.max(), d_col.min(), d_col.max(), v.min(), v.max())) >= _SAFE:
            continue  # differences could overflow: this condition stays a filter only
        d = e - d_col
        if op in ("<", "<=", "=="):  # E >= v: D >= v - max(d)
            out.append((i, int(d.max()), "<="))
        if op in (">", ">=", "=="):  # E <= v: D <= v - min(d)
            out.append((i, int(d.min()), ">="))
    return out


def _searcher(xp, sorted_key):
    """``search(k, shift, side)``: xp.searchsorted(sorted_key, lcols[k] - shift, side), for
    left columns given to it once.  On the CPU the needles go in sorted order (each left column
    argsorted once, shifts keep its order) and the answers back to the rows: NumPy's binary
    searches of 2^22 random needles in 2^22 keys took 2.85 s on a 2-core host, of the same
    needles sorted 0.34 s (cached paths); on the GPU as they are."""
    perms: dict = {}

    def search(col, k: int, shift: int, side: str):
        if xp is not np:
            return xp.searchsorted(sorted_key, col - shift if shift else col, side=side)
        if k not in perms:  # a column equal to one sorted already (``lo <= a and a <= hi``) reuses it
            same = next((v for v in perms.values() if v[2] is col or (v[2].dtype == col.dtype and
                                                                      np.array_equal(v[2], col))), None)
            if same is None:
                perm = np.argsort(col, kind="stable")
                same = (perm, col[perm], col)
            perms[k] = same
        perm, ordered, _ = perms[k]
        out = np.empty(col.size, np.int64)
        out[perm] = np.searchsorted(sorted_key, ordered - shift if shift else ordered, side=side)
        return out

    return search


def band_join(xp, lcols, rcols, ops, driver: list[int], block_pairs: int = 1 << 24) -> ThetaPairs:
    """The pairs of the conjunction ``lcols[k] ops[k] rcols[k]`` (int64 arrays) whose right
    column under ``driver`` (``band_plan``) is sorted and searched.

    Returns
    -------
    ThetaPairs: bound = the candidates of the runs; blocks of matching (left, right) pairs.
    """
    n_l, n_r = int(lcols[0].size), int(rcols[0].size)
    key = rcols[driver[0]]
    # NumPy's stable sort of 2^22 int64 took 0.48 s on 2 cores, its default quicksort 0.62
    order = xp.argsort(key, kind="stable") if xp is np else xp.argsort(key)
    sorted_key = key[order]
    search = _searcher(xp, sorted_key)
    lo = xp.zeros(n_l, xp.int64)
    hi = xp.full(n_l, n_r, xp.int64)
    for k, shift, op in [(i, 0, ops[i]) for i in driver] + _derived(xp, lcols, rcols, ops, driver):
        # "v op r" (v = lcols[k] - shift) bounds r within the sorted run
        if op in ("<", "<=", "=="):  # r > v, r >= v: the run starts at the first such r
            lo = xp.maximum(lo, search(lcols[k], k, shift, "right" if op == "<" else "left"))
        if op in (">", ">=", "=="):  # r < v, r <= v: the run ends before the first r past it
            hi = xp.minimum(hi, search(lcols[k], k, shift, "left" if op == ">" else "right"))
    counts = xp.maximum(hi - lo, 0)
    rest = [i for i in range(len(ops)) if i not in driver]
    return interval_pairs(xp, lo, counts, order, block_pairs, [lcols[i] for i in rest], [rcols[i] for i in rest],
                          [ops[i] for i in rest])
