"""The sort-based band join: range and equality conditions answered by sorting the right side
on one of its columns and binary-searching, per left row, the contiguous run of right rows that
the conditions on that column allow (several conditions on the same right column, such as
``lo <= t`` and ``t <= hi``, narrow the same run: a band).  The other predicates filter the
candidates, so the work is the candidates' count, not |L| x |R| (paper 000 §3.2's range match
on sorted runs; DuckDB's piecewise merge join does the same for one inequality).
"""

from __future__ import annotations

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


def band_join(xp, lcols, rcols, ops, driver: list[int], block_pairs: int = 1 << 24) -> ThetaPairs:
    """The pairs of the conjunction ``lcols[k] ops[k] rcols[k]`` (int64 arrays) whose right
    column under ``driver`` (``band_plan``) is sorted and searched.

    Returns
    -------
    ThetaPairs: bound = the candidates of the runs; blocks of matching (left, right) pairs.
    """
    n_l, n_r = int(lcols[0].size), int(rcols[0].size)
    key = rcols[driver[0]]
    order = xp.argsort(key)
    sorted_key = key[order]
    lo = xp.zeros(n_l, xp.int64)
    hi = xp.full(n_l, n_r, xp.int64)
    for i in driver:  # "v op r" bounds r within the sorted run
        v, op = lcols[i], ops[i]
        if op in ("<", "<=", "=="):  # r > v, r >= v: the run starts at the first such r
            lo = xp.maximum(lo, xp.searchsorted(sorted_key, v, side="right" if op == "<" else "left"))
        if op in (">", ">=", "=="):  # r < v, r <= v: the run ends before the first r past it
            hi = xp.minimum(hi, xp.searchsorted(sorted_key, v, side="left" if op == ">" else "right"))
    counts = xp.maximum(hi - lo, 0)
    rest = [i for i in range(len(ops)) if i not in driver]
    return interval_pairs(xp, lo, counts, order, block_pairs, [lcols[i] for i in rest], [rcols[i] for i in rest],
                          [ops[i] for i in rest])
