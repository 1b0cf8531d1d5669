"""Distinct non-null values per group on the GPU: ``n_unique`` (SQL's count(DISTINCT v), Polars'
``n_unique`` without its null), beside the group-by algorithms, whose accumulators are a fixed
width a group: the (key, value) pairs of the present rows sorted (packed into one int64 and
radix-sorted where their ranges fit 62 bits), and a pair counted where it differs from the one
before it within its key's run.  The CPU twin is plan.groupby.CpuReducer
(the distinct pairs of a factorization).
"""

from __future__ import annotations

import cupy as cp

from ..onesweep import onesweep_sort
from ..primitives import value_range
from ..runtime import check_memory


def comparable_values(values):
    """int64 CuPy (n,) whose equality is the values': integers widened (uint64 as its bits),
    floats as float64 bits with -0.0 taken as 0.0 and every NaN as one value (as keys compare)."""
    if values.dtype.kind == "f":
        v = values.astype(cp.float64)
        return cp.where(cp.isnan(v), cp.nan, v + 0.0).view(cp.int64)
    if values.dtype == cp.uint64:
        return values.view(cp.int64)
    return values.astype(cp.int64)


def count_distinct(keys, values, valid, group_keys):
    """int64 CuPy (g,): the distinct non-null ``values`` of each group.

    Parameters
    ----------
    keys : CuPy int32/int64 (n,), each row's group key
    values : CuPy (n,) integers, floats or dictionary codes (one code a distinct string)
    valid : CuPy bool/uint8 (n,), 1 where the value is present, or None
    group_keys : CuPy (g,) of the keys' dtype, each output group's key, in the output's order
        (a group whose values are all null counts 0)

    Raises
    ------
    MemoryError
        The sort's working set (about 40 bytes a row) does not fit in free GPU memory.
    """
    k, v, new_pair = _sorted_pairs(keys, values, valid)
    n = int(k.size)
    out = cp.zeros(group_keys.size, cp.int64)
    if not n:
        return out
    new_key = cp.empty(n, cp.bool_)
    new_key[0] = True
    cp.not_equal(k[1:], k[:-1], out=new_key[1:])
    starts = cp.flatnonzero(new_key)
    ends = cp.concatenate([starts[1:], cp.asarray([n], starts.dtype)])
    total = cp.concatenate([cp.zeros(1, cp.int64), cp.cumsum(new_pair, dtype=cp.int64)])
    per_key = total[ends] - total[starts]  # distinct values in each key's run
    run_keys = k[starts]  # ascending
    gk = group_keys.astype(cp.int64)
    pos = cp.minimum(cp.searchsorted(run_keys, gk), run_keys.size - 1)
    return cp.where(run_keys[pos] == gk, per_key[pos], out)


def distinct_pairs(keys, values, valid):
    """The distinct (key, value) pairs of the present rows, as two int64 CuPy arrays (m,) sorted
    by key then value, values as ``comparable_values`` gives them: for pairs of several row
    ranges to be merged on the host (the out-of-core group-by's partition of a heavy key,
    outofcore/groupby.py).  Arguments and errors as ``count_distinct``'s."""
    k, v, new_pair = _sorted_pairs(keys, values, valid)
    return k[new_pair], v[new_pair]


def _sorted_pairs(keys, values, valid):
    """(keys, comparable values, first of its pair: bool), the present rows sorted by key, value."""
    n = int(keys.size)
    check_memory(40 * n, f"n_unique's sort of {n:,} rows")
    if valid is not None:
        rows = cp.flatnonzero(valid)
        keys, values = keys[rows], values[rows]
        n = int(rows.size)
    k, v = keys.astype(cp.int64), comparable_values(values)
    if not n:
        return k, v, cp.zeros(0, cp.bool_)
    (klo, khi), (vlo, vhi) = value_range([k]), value_range([v])
    kbits, vbits = (khi - klo).bit_length(), (vhi - vlo).bit_length()
    if kbits + vbits <= 62:
        # one int64 a pair, (key - klo) above (value - vlo): CUB's radix sort of the packed words
        # on their kbits + vbits low bits (2^26 pairs on an H200: CuPy's lexsort took 152 ms)
        packed = ((k - klo) << vbits) | (v - vlo)
        packed, _ = onesweep_sort(packed, None, kbits + vbits)
        k, v = (packed >> vbits) + klo, (packed & ((1 << vbits) - 1)) + vlo
    else:  # wider pairs (float values' bits, extreme integers): a comparison sort by key, then value
        order = cp.lexsort(cp.stack([v, k]))
        k, v = k[order], v[order]
    new_pair = cp.empty(n, cp.bool_)
    new_pair[0] = True
    new_pair[1:] = (k[1:] != k[:-1]) | (v[1:] != v[:-1])
    return k, v, new_pair
