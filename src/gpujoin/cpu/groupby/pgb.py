"""PGB on the CPU: partitioned hash group-by with SQL null semantics.

Group ids come from :func:`gpujoin.cpu.kernels.factorize` (rows radix-partitioned on a hash of the
key, one hash table per partition, dense ids per partition offset by a scan), the same
structure as paper 003's PGB (§2.6).  Because no group spans two partitions, each aggregate is
then computed partition-parallel without atomics.

References: paper 003 §2.6 (PGB-UR), doi:10.1145/3709689.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_MASK32 = np.int64(0xFFFFFFFF)


@njit(parallel=True, cache=True)
def reduce_int(values, valid, has_valid, rows, offsets, part_gid, ng):
    """count, exact sum (as hi/lo 32-bit halves), min and max of int64 values per group.

    The sum is kept as sum(v >> 32) and sum(v & 0xffffffff), each exact for < 2**31 rows,
    so the caller can form the exact 128-bit total.
    """
    count = np.zeros(ng, np.int64)
    sum_hi = np.zeros(ng, np.int64)
    sum_lo = np.zeros(ng, np.int64)
    vmin = np.zeros(ng, np.int64)
    vmax = np.zeros(ng, np.int64)
    P = offsets.size - 1
    for p in prange(P):
        for i in range(offsets[p], offsets[p + 1]):
            r = rows[i]
            if has_valid and not valid[r]:
                continue
            g = part_gid[i]
            v = values[r]
            if count[g] == 0:
                vmin[g] = v
                vmax[g] = v
            else:
                if v < vmin[g]:
                    vmin[g] = v
                if v > vmax[g]:
                    vmax[g] = v
            count[g] += 1
            sum_hi[g] += v >> 32
            sum_lo[g] += v & _MASK32
    return count, sum_hi, sum_lo, vmin, vmax


@njit(parallel=True, cache=True)
def reduce_float(values, valid, has_valid, rows, offsets, part_gid, ng):
    """count, sum, min and max of float64 values per group; NaN is larger than every number."""
    count = np.zeros(ng, np.int64)
    vsum = np.zeros(ng, np.float64)
    vmin = np.zeros(ng, np.float64)
    vmax = np.zeros(ng, np.float64)
    P = offsets.size - 1
    for p in prange(P):
        for i in range(offsets[p], offsets[p + 1]):
            r = rows[i]
            if has_valid and not valid[r]:
                continue
            g = part_gid[i]
            v = values[r]
            if count[g] == 0:
                vmin[g] = v
                vmax[g] = v
            else:
                if v < vmin[g] or np.isnan(vmin[g]):
                    vmin[g] = v
                if v > vmax[g] or np.isnan(v):
                    vmax[g] = v
            count[g] += 1
            vsum[g] += v
    return count, vsum, vmin, vmax


@njit(parallel=True, cache=True)
def group_sizes(offsets, part_gid, ng):
    """Rows per group (SQL count(*))."""
    size = np.zeros(ng, np.int64)
    for p in prange(offsets.size - 1):
        for i in range(offsets[p], offsets[p + 1]):
            size[part_gid[i]] += 1
    return size


def exact_sum_words(sum_hi: np.ndarray, sum_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 128-bit totals sum_hi * 2**32 + sum_lo as (low uint64, high int64) words."""
    hw1 = sum_hi >> 32                                   # arithmetic shift keeps the sign
    hw0 = (sum_hi << 32).view(np.uint64)
    w0 = hw0 + sum_lo.view(np.uint64)
    carry = (w0 < hw0).astype(np.int64)
    return w0, hw1 + carry
