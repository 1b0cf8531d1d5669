"""Merge-path partitioning for paper 000 §3.2's global sort-merge join (GSM), with the boundary
rules the paper leaves open.

``split(a, b, diag)`` finds where the ``diag``-th element of the merge of two sorted arrays falls
(Odeh et al., merge path): ``a[:i]`` and ``b[:j]`` with i + j = diag are the merge's first
``diag`` elements.  Cutting the merge at equally spaced diagonals gives equal work to each GPU
(§3.2.2's cooperative merge).  For the join (§3.2.3) a cut must not fall inside a run of equal
keys, or the pairs of that key would be split between two parts and missed: :func:`join_ranges`
moves each cut to the start of the key at the cut (so every key lies wholly in one part), and for
a band condition |r - s| <= w gives each part the S rows within w of its R keys (a halo that
overlaps the neighbours'), so that every pair is found by the part that owns its R row, once.
Written over an array module (NumPy or CuPy): searchsorted only.
"""

from __future__ import annotations

import numpy as np


def split(a, b, diag: int) -> tuple[int, int]:
    """(i, j), i + j = ``diag``: a[:i] and b[:j] are the first ``diag`` elements of the stable
    merge of sorted ``a`` and ``b`` (ties from ``a`` first)."""
    lo, hi = max(0, diag - b.size), min(diag, a.size)
    while lo < hi:  # the smallest i with a[i] > b[diag - i - 1] (a's element goes after)
        i = (lo + hi) // 2
        if a[i] <= b[diag - i - 1]:
            lo = i + 1
        else:
            hi = i
    return lo, diag - lo


def join_ranges(r, s, parts: int, band: int = 0, xp=np) -> list[tuple[int, int, int, int]]:
    """Cut the join of sorted keys ``r`` and ``s`` into at most ``parts`` pieces of about equal
    merge length: (r_lo, r_hi, s_lo, s_hi) each, with r's ranges disjoint and covering r, and
    s's range holding every s key that any r key of the piece can match (equal keys; with
    ``band`` w > 0, keys within w).  Pieces that would be empty are dropped.

    Raises
    ------
    ValueError
        ``parts`` below 1 or a negative ``band``.
    """
    if parts < 1 or band < 0:
        raise ValueError(f"join_ranges needs parts >= 1 and band >= 0, got {parts} and {band}")
    total = r.size + s.size
    cuts = [0]
    for p in range(1, parts):
        i, j = split(r, s, total * p // parts)
        if i >= r.size:
            break
        # the key at the cut: start the next piece at its first occurrence, so no key straddles
        cuts.append(max(cuts[-1], int(xp.searchsorted(r, r[i], side="left"))))
    cuts.append(r.size)
    kind = np.dtype(r.dtype)
    bounds = (np.iinfo(kind).min, np.iinfo(kind).max) if kind.kind in "iu" else (-np.inf, np.inf)
    out = []
    for lo, hi in zip(cuts, cuts[1:]):
        if hi <= lo:
            continue
        first, last = r[lo].item() - band, r[hi - 1].item() + band  # Python numbers: no wrap-around
        first, last = max(first, bounds[0]), min(last, bounds[1])
        s_lo = int(xp.searchsorted(s, xp.asarray(first, kind), side="left"))
        s_hi = int(xp.searchsorted(s, xp.asarray(last, kind), side="right"))
        out.append((lo, hi, s_lo, s_hi))
    return out
