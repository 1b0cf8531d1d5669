"""Synthetic workloads of paper 003 §5 (joins: R a shuffled dense primary key, S a foreign key;
group-by: N rows over g groups), as dicts of NumPy columns."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


class _Workload:
    def describe(self) -> dict:
        """The workload's fields, for benchmark records."""
        return asdict(self)


@dataclass
class JoinWorkload(_Workload):
    """R ⋈ S on ``k``.  ``distinct_keys`` > 0 makes it many-to-many (both sides over K keys,
    S uniform, R uniform or Zipf ``build_zipf``).  Heavy hitters (issue 17): ``heavy_share`` of
    S's rows take one key of R; ``equal_rows`` > 0 gives both sides that many rows of one key
    (output equal_rows**2), in place of the log2 sizes."""

    log2_r: int = 24
    log2_s: int = 24
    match_ratio: float = 1.0
    zipf: float = 0.0
    distinct_keys: int = 0
    payloads: int = 1
    key_bytes: int = 4
    payload_bytes: int = 4
    seed: int = 42
    heavy_share: float = 0.0
    build_zipf: float = 0.0
    equal_rows: int = 0

    def sizes(self) -> tuple[int, int]:
        """(|R|, |S|)."""
        if self.equal_rows:
            return self.equal_rows, self.equal_rows
        return 1 << self.log2_r, 1 << self.log2_s


@dataclass
class GroupByWorkload(_Workload):
    """``log2_rows`` rows, keys uniform (or Zipf) over ``2**log2_groups`` groups, MAX of ``values`` columns."""

    log2_rows: int = 24
    log2_groups: int = 16
    zipf: float = 0.0
    values: int = 2
    key_bytes: int = 4
    seed: int = 42


class _Random:
    """The few draws the workloads need, from NumPy (host) or CuPy (device: no host round trip
    for 2^27-row inputs).  The two give the same distributions, not the same numbers."""

    def __init__(self, xp, seed: int):
        self.xp = xp
        self.gen = xp.random.default_rng(seed)
        self.legacy = xp.random.RandomState(seed) if xp is not np else None

    def integers(self, lo, hi, size, dtype=np.int64):
        return self.gen.integers(lo, hi, size, dtype=dtype)

    def random(self, size):
        return self.gen.random(size)

    def permutation(self, n):
        return (self.gen if self.legacy is None else self.legacy).permutation(n)


def zipf_ranks(rng: _Random, n_values: int, size: int, z: float):
    """``size`` draws from {0..n_values-1} with P(i) ∝ 1/(i+1)**z (z = 0: uniform); int64."""
    xp = rng.xp
    if z == 0:
        return rng.integers(0, n_values, size, dtype=np.int64)
    weights = 1.0 / xp.power(xp.arange(1, n_values + 1, dtype=np.float64), z)
    cdf = xp.cumsum(weights)
    cdf /= cdf[-1]
    return xp.minimum(xp.searchsorted(cdf, rng.random(size)), n_values - 1).astype(np.int64)


def _payload(rng, n, width):
    dtype = np.int32 if width == 4 else np.int64
    return rng.integers(0, np.iinfo(dtype).max, n, dtype=dtype)


def make_join(w: JoinWorkload, xp=np) -> tuple[dict, dict]:
    """(R, S) with key column ``k`` and payloads ``r0..``/``s0..``, as NumPy (``xp=numpy``) or
    CuPy (``xp=cupy``) arrays.

    R's keys are 0..|R|-1 shuffled; a fraction 1 - match_ratio of them is replaced by keys
    outside S's domain (paper 003 §5's match ratio).  S's keys are drawn from 0..|R|-1,
    uniformly or Zipf-distributed over a shuffled order (so hot keys are not the small ones),
    then a ``heavy_share`` of them set to one key.
    """
    rng = _Random(xp, w.seed)
    nr, ns = w.sizes()
    kdt = np.int32 if w.key_bytes == 4 else np.int64
    if w.equal_rows:
        rk, sk = xp.full(nr, 7, kdt), xp.full(ns, 7, kdt)
    elif w.distinct_keys:
        order = rng.permutation(w.distinct_keys).astype(kdt)
        rk = order[zipf_ranks(rng, w.distinct_keys, nr, w.build_zipf)]
        sk = rng.integers(0, w.distinct_keys, ns).astype(kdt)
    else:
        rk = rng.permutation(nr).astype(kdt)
        if w.match_ratio < 1.0:
            drop = rng.random(nr) >= w.match_ratio
            rk[drop] += nr  # keys nr..2nr-1 never occur in S
        order = rng.permutation(nr).astype(kdt)
        sk = order[zipf_ranks(rng, nr, ns, w.zipf)]
        if w.heavy_share:  # one key of R (the first drawn order's) takes this share of S's rows
            sk[rng.random(ns) < w.heavy_share] = order[0]
        if w.key_bytes == 8:  # use the full width, so 8-byte keys are not 4-byte keys in disguise
            rk = rk * np.int64(1 << 31) + 7
            sk = sk * np.int64(1 << 31) + 7
    r = {"k": rk, **{f"r{i}": _payload(rng, nr, w.payload_bytes) for i in range(w.payloads)}}
    s = {"k": sk, **{f"s{i}": _payload(rng, ns, w.payload_bytes) for i in range(w.payloads)}}
    return r, s


def make_groupby(w: GroupByWorkload, xp=np) -> dict:
    """Table with key ``k`` over 2**log2_groups values and value columns ``v0..`` (int32)."""
    rng = _Random(xp, w.seed)
    n, g = 1 << w.log2_rows, 1 << w.log2_groups
    kdt = np.int32 if w.key_bytes == 4 else np.int64
    keys = rng.permutation(g).astype(kdt)[zipf_ranks(rng, g, n, w.zipf)]
    return {"k": keys, **{f"v{i}": _payload(rng, n, 4) for i in range(w.values)}}
