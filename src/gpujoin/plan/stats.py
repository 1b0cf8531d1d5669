"""Statistics the cost models need, estimated cheaply before a join or group-by runs.

- groups: HyperLogLog over every key on the GPU (one pass, about 1.6% error); on the host, the
  GEE estimator over a sample (Charikar et al. 2000).
- match ratio: the share of a sample of probe keys found in a sorted sample of build keys,
  scaled by the build sample's share of the build side (exact for unique build keys, in
  expectation).
- heavy build keys: the share of a small build sample whose keys repeat in it (HEAVY_BUILD_SHARE).
- skew: the top key's share of a sample; SKEW_SHARE or more counts as skewed for a join (Zipf
  z >= 1 over up to 2^27 distinct keys gives 5% or more, z = 0.5 over 2^10 keys 1.6%).
- hot groups: the share of a small sample whose key repeats in it (keys of about n / 4096 rows
  or more); GROUP_BY_HOT_SHARE or more sends a group-by of many groups to HGB, whose hot
  groups aggregate in shared memory (issue 17).  On an H200 (2^28 rows, g = 2^16, MAX of two
  int32 columns): Zipf z = 1 (share about 0.55) HGB 7.97 against PGB-TR 10.82 ms, z = 1.5
  5.88 against 12.95; uniform keys (share about 0.12, birthday repeats) PGB-TR 6.49 against
  HGB 13.07 (docs/BENCHMARKS.md).

- more groups than a bound (the GPU group-by): the distinct keys of rows drawn at random, against
  what keys of that many groups could leave (:func:`distinct_bound`, a Chernoff bound); random
  rows, because a strided sample of sorted keys sees a new key at every step.

Arrays are NumPy (host) or CuPy (device) int32/int64 keys; samples are strided, and the random
draws come from a hash of the draw's index (a fixed seed), so they cost no random generator and
the same input gives the same estimate.  Source: paper 003 §4 asks for
these statistics, without saying how to get them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..table import device_array

SKEW_SHARE = 0.02
#: repeated_share of the build keys from which a join counts as having heavy build keys.  On an
#: H200, 2^26 ⋈ 2^26 over 2^24 keys with Zipf build keys (issue 17): SMJ-TR 19.2 ms against
#: PHJ-TR 38.2 at z = 1 (share about 0.35), 16.4 against 23.7 at z = 1.5; uniform
#: many-to-many keys (share 0) stay PHJ-TR's (34.5 against 36.7 ms at 8 rows a key).
HEAVY_BUILD_SHARE = 0.2
#: Build rows a key from which auto takes SMJ-TR (build_multiplicity).  One H200, 2^26 ⋈ 2^26
#: with two payloads, keys uniform over 2^23 / 2^24 / 2^25 values (8 / 4 / 2 build rows a key),
#: once SMJ had CUB's one-sweep sort and the look-back merge pass: SMJ-TR 19.0 / 14.1 / 12.6 ms,
#: PHJ-TR 32.1 / 17.1 / 10.6 (the uniform many-to-many keys above had been PHJ-TR's).
#: The estimate assumes every key has m rows; for keys drawn at random (Poisson counts of mean
#: lambda, as the benchmark's) it reads about 1 + lambda: 3 at 2^25 keys, where PHJ-TR is faster
#: (10.96 against 12.78 ms), 5 at 2^24.
MULTIPLICITY_SMJ = 4.0
GROUP_BY_HOT_SHARE = 0.3
#: From HLL_SUB_ROWS rows the planner's HyperLogLog reads every sub-th 32-byte sector of the
#: keys, sub = rows / HLL_SUB_ROWS up to HLL_SUB (so that at least about 2^22 keys are
#: sketched): its choice needs to know whether the groups fit in shared memory or L2, not their
#: exact number.  On an H200 at 2^28 rows the full sketch took 0.63-0.75 ms, every 8th sector
#: 0.22-0.25, every 16th 0.17 (HGB's own run: 2.8-4 ms).
HLL_SUB, HLL_SUB_ROWS = 16, 1 << 22


def hll_sub(rows: int) -> int:
    """Every how many 32-byte sectors the planner's device HyperLogLog reads at ``rows`` keys."""
    return max(1, min(HLL_SUB, rows // HLL_SUB_ROWS))
SAMPLE = 1 << 14
SKEW_SAMPLE = 1 << 12
BUILD_SAMPLE, PROBE_SAMPLE = 1 << 20, 1 << 16
#: On the GPU the build sample goes into a hash table of twice its keys: 2^18 keys (4 MiB of
#: table for 8-byte keys), with more probe keys for as many expected hits as on the host.
DEVICE_BUILD_SAMPLE, DEVICE_PROBE_SAMPLE = 1 << 18, 1 << 18
#: The planner takes rows / 2^DEVICE_SAMPLE_SHIFT of each side (at least DEVICE_SAMPLE_MIN, at
#: most the sizes above): the multiplicity's precision depends on the sampled share, about 5% at
#: 4 rows a key from 1/256 (some 380 repeats), and at 2^24 rows the samples' GPU time is the
#: planner's (one H200: 2^16 build keys 23 us, 2^18 39; with as many probe keys 39 and 62, the
#: summaries alone 16; PHJ-TR 1.5 ms).  The match ratio sees ratio x 256 hits from 2^24 rows
#: up (22 at model (b)'s crossover for two columns, 0.087: about 20%, where the two PHJs cost
#: about the same).
DEVICE_SAMPLE_SHIFT, DEVICE_SAMPLE_MIN = 8, 1 << 14


def planner_sample(rows: int, most: int) -> int:
    """The planner's sample of a side of ``rows`` keys (at most ``most``), on the GPU or the host."""
    return min(rows, max(DEVICE_SAMPLE_MIN, min(most, rows >> DEVICE_SAMPLE_SHIFT)))


def _xp(a):
    if device_array(a):
        import cupy

        return cupy
    return np


def _sample(a, size: int):
    """A strided sample of ``size`` of ``a`` (empty for size 0: planner_sample of no rows)."""
    step = max(1, a.size // max(size, 1))
    return a[::step][:size]


def _to_host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


@dataclass
class GroupByEstimate:
    """What a group-by's plan knows: rows, estimated groups, key and value widths (bytes), the
    accumulator bytes a group needs in shared memory, the top key's share of a sample and the
    share of the sample in keys that repeat in it (:func:`repeated_share`: the hot groups)."""

    rows: int
    groups: int
    key_bytes: int
    value_bytes: list[int] = field(default_factory=list)
    slot_bytes: int = 8
    top_share: float | None = 0.0  # None: not measured (the choice did not depend on it)
    method: str = "sample"
    hot_share: float | None = 0.0
    sketched: float = 1.0  # the share of the keys that the groups' sketch read

    def groups_for(self, algorithm: str) -> int | None:
        """The estimate ``algorithm`` may size itself by: None for PGB when the sketch read part
        of the keys (too few partitions would spill; PGB sketches every key in its first
        radix pass, at no extra read)."""
        return None if algorithm.startswith("pgb") and self.sketched < 1 else self.groups

    @property
    def hot(self) -> bool:
        """Hot groups: GROUP_BY_HOT_SHARE or more of a sample falls in keys that repeat in it."""
        return bool(self.hot_share is not None and self.hot_share >= GROUP_BY_HOT_SHARE)

    def as_dict(self) -> dict:
        return {**asdict(self), "hot": self.hot}


@dataclass
class JoinEstimate:
    """What a join's plan knows: side sizes, key and payload widths (bytes), the estimated match
    ratio (share of probe rows with a partner) and the probe keys' top share."""

    build_rows: int
    probe_rows: int
    key_bytes: int
    build_payloads: list[int] = field(default_factory=list)
    probe_payloads: list[int] = field(default_factory=list)
    match_ratio: float | None = 1.0  # None: not measured (the choice did not depend on it; 1 assumed)
    top_share: float | None = 0.0  # None: not measured
    build_repeated: float | None = 0.0  # repeated_share of the build keys; None: not measured
    build_multiplicity: float | None = None  # build rows a distinct key (build_multiplicity); None: not measured

    @property
    def skewed(self) -> bool:
        return self.top_share is not None and self.top_share >= SKEW_SHARE

    @property
    def heavy_build(self) -> bool:
        """Heavy build keys: HEAVY_BUILD_SHARE or more of a build sample repeats in it."""
        return self.build_repeated is not None and self.build_repeated >= HEAVY_BUILD_SHARE

    @property
    def many_to_many(self) -> bool:
        """Build keys repeat MULTIPLICITY_SMJ times or more on average (a sample's estimate)."""
        return self.build_multiplicity is not None and self.build_multiplicity >= MULTIPLICITY_SMJ

    @property
    def matches(self) -> float:
        return (1.0 if self.match_ratio is None else self.match_ratio) * self.probe_rows

    def as_dict(self) -> dict:
        return {**asdict(self), "skewed": self.skewed, "heavy_build": self.heavy_build,
                "many_to_many": self.many_to_many}


@dataclass
class Sample:
    """A sample of keys (strided, SKEW_SAMPLE of them; or rows drawn at random), summarized:
    its size, distinct keys, rows of keys seen more than once, the largest and the smallest
    count.  Counted on the host for host keys (np.unique), on the GPU for device keys
    (primitives.key_samples: the sample never leaves the GPU, and a join's two samples and match
    ratio share one sync)."""

    size: int = 0
    distinct: int = 0
    repeated: int = 0
    top: int = 0
    least: int = 0
    # a join's build sample: build_multiplicity from the match ratio's larger one (not a count of
    # this sample, so not compared)
    multiplicity: float | None = field(default=None, compare=False)

    @classmethod
    def of_counts(cls, counts: np.ndarray) -> "Sample":
        """The summary of a sample's per-key counts (host int64)."""
        if not counts.size:
            return cls()
        return cls(int(counts.sum()), int(counts.size), int(counts[counts > 1].sum()), int(counts.max()),
                   int(counts.min()))

    @property
    def top_share(self) -> float:
        """The most frequent key's share (0 for no keys): a 20% share is known to about 0.6%."""
        return self.top / self.size if self.size else 0.0

    @property
    def repeated_share(self) -> float:
        """The share of the sample whose key occurs more than once in it: keys of about
        |keys| / SKEW_SAMPLE rows or more (16,384 at 2^26 rows).  0 for unique keys and for
        many-to-many keys of even, low multiplicity; the share of the rows that heavy keys
        hold otherwise (Zipf z = 1 over 2^24 keys of 2^26 rows: about 0.35; all-equal keys: 1)."""
        return self.repeated / self.size if self.size else 0.0

    @property
    def groups(self) -> int | None:
        """The number of groups when the sample shows every group at least twice and at most
        one distinct key per 8 sampled (a few groups, all seen), else None (the sketch is
        needed).  Reading a few thousand keys costs less than HyperLogLog's pass over all of
        them: at 2^28 rows into 2^4 groups that pass was 19% of HGB's 3 ms run (issue 17)."""
        if self.distinct and self.least >= 2 and self.distinct * 8 <= self.size:
            return self.distinct
        return None


def _summary(row: np.ndarray, size: int) -> Sample:
    return Sample(size, *(int(x) for x in row))


def sample(keys) -> Sample:
    """The summary of a strided sample of SKEW_SAMPLE ``keys`` (host or device)."""
    if keys.size == 0:
        return Sample()
    if _xp(keys) is np:
        return Sample.of_counts(np.unique(_sample(keys, SKEW_SAMPLE), return_counts=True)[1])
    from ..cuda.primitives import key_samples

    got = key_samples([keys], SKEW_SAMPLE)
    return _summary(got.summaries[0], got.sizes[0])


def launch_sample(keys, draws: int = 0):
    """:func:`sample` of non-empty device ``keys``, launched and not read: returns the function
    that waits for it and makes (the Sample, the Sample of ``draws`` rows drawn at random or
    None), so that the planner's Python runs while the GPU counts."""
    pending = _primitives().launch_key_samples([keys], SKEW_SAMPLE, draws=draws)
    sizes = pending.sizes

    def read():
        w = pending.words()  # Python ints: the planner's host time counts at 2^24 rows
        return Sample(sizes[0], *w[:4]), Sample(sizes[1], *w[4:8]) if len(sizes) > 1 else None
    return read


#: Random draws of the group-by planner's test of more groups than fit shared memory
#: (more_groups_than), and the chance it may err.
GROUP_DRAWS, GROUP_TEST_ERROR = 8192, 1e-6


@functools.lru_cache(maxsize=64)
def distinct_bound(groups: int, draws: int, error: float = GROUP_TEST_ERROR) -> float:
    """A bound that the distinct keys among ``draws`` rows drawn at random (with replacement)
    from keys of at most ``groups`` groups pass with probability at most ``error``, whatever
    the groups' frequencies.  Their expected count is at most mu = g (1 - (1 - 1/g)^draws), the
    uniform case (it is Schur-concave in the frequencies); the groups' occupancy indicators are
    negatively associated (Dubhashi and Ranjan 1998), so Chernoff's bound P(X >= mu + t) <=
    exp(-t^2 / (2 mu + t)) holds for their sum: t = (L + sqrt(L^2 + 8 L mu)) / 2, L = ln(1 /
    error)."""
    g = max(int(groups), 1)
    mu = g * -math.expm1(draws * math.log1p(-1 / g)) if g > 1 else 1.0
    L = math.log(1 / error)
    return mu + (L + math.sqrt(L * L + 8 * L * mu)) / 2


def more_groups_than(draws: Sample | None, groups: int) -> bool:
    """Whether ``draws`` (a Sample of rows drawn at random) shows more than ``groups`` groups,
    wrong with probability at most GROUP_TEST_ERROR (:func:`distinct_bound`).  On uniform keys,
    8,192 draws tell 2^16 groups (7,700 distinct expected) from 28,160 (the bound: 7,558).  False
    when the draws cannot tell, so that the caller counts the groups."""
    return bool(draws is not None and draws.size and draws.distinct > distinct_bound(groups, draws.size))


def top_share(keys) -> float:
    """The most frequent key's share of a strided sample of ``keys`` (0 for no keys)."""
    return sample(keys).top_share


def repeated_share(keys) -> float:
    """Sample.repeated_share of a strided sample of ``keys``."""
    return sample(keys).repeated_share


def sample_groups(counts: np.ndarray) -> int | None:
    """Sample.groups of a sample's per-key counts."""
    return Sample.of_counts(counts).groups


def estimate_groups(keys, sub: int = 1) -> tuple[int, str]:
    """(estimated distinct keys, method): HyperLogLog on the GPU (over every ``sub``-th 32-byte
    sector of the keys when ``sub`` > 1), GEE over a sample on the host."""
    n = keys.size
    if n == 0:
        return 0, "exact"
    if _xp(keys) is not np:
        from ..cuda.groupby.common import estimate_groups as hll

        return hll(keys, sub), "hyperloglog" + (f" (1/{sub} of the keys)" if sub > 1 else "")
    s = _sample(keys, SAMPLE)
    if s.size == n:
        return int(np.unique(s).size), "exact"
    _, counts = np.unique(s, return_counts=True)
    f1 = int(np.count_nonzero(counts == 1))
    est = math.sqrt(n / s.size) * f1 + int(np.count_nonzero(counts > 1))
    return max(1, min(n, int(round(est)))), "sample (GEE)"


def estimate_group_by(keys, value_bytes: list[int], slot_bytes: int) -> GroupByEstimate:
    """The group-by's statistics: a small sample first (its top key's share, its hot groups'
    share, and the groups when it shows them all: :attr:`Sample.groups`), the estimate of the
    groups over the keys only otherwise."""
    smp = sample(keys)
    groups, method = smp.groups, "sample (every group seen twice)"
    sub = 1
    if groups is None:
        sub = hll_sub(keys.size) if _xp(keys) is not np else 1
        groups, method = estimate_groups(keys, sub)
    return GroupByEstimate(int(keys.size), groups, keys.dtype.itemsize, list(value_bytes), slot_bytes,
                           smp.top_share, method, smp.repeated_share, 1 / sub)


def _ratio(hits: int, probes: int, build_rows: int, build_sampled: int) -> float:
    return min(1.0, hits / probes * build_rows / build_sampled)


def match_ratio(build_keys, probe_keys) -> float:
    """Estimated share of probe rows whose key is among the build keys (at most 1)."""
    if build_keys.size == 0 or probe_keys.size == 0:
        return 0.0
    if _xp(build_keys) is np:
        b, p = np.sort(_sample(build_keys, BUILD_SAMPLE)), _sample(probe_keys, PROBE_SAMPLE)
        return _ratio(_hits(b, p), p.size, build_keys.size, b.size)
    return device_join_samples(build_keys, probe_keys, True, full=True)[2]


def build_multiplicity(rows: int, sampled: int, distinct: int) -> float:
    """Build rows a distinct key, estimated from a uniform sample of ``sampled`` of the ``rows``
    keys holding ``distinct`` distinct keys: the m that solves distinct = (rows / m) (1 - (1 - f)^m),
    f = sampled / rows (each of rows / m keys of m rows is sampled at least once with that
    probability; exact when f = 1).  A strided sample of clustered keys sees fewer repeats and
    errs low (towards PHJ, the choice without the estimate).  1.0 for no rows."""
    if rows <= 0 or sampled <= 0 or distinct <= 0 or distinct >= min(sampled, rows):
        return 1.0  # (every sampled key distinct: seen(1) below; at once, for the planner's host time)
    f = min(1.0, sampled / rows)
    seen = lambda m: rows / m * (1.0 - (1.0 - f) ** m)  # noqa: E731  (decreasing in m)
    if distinct >= seen(1.0):
        return 1.0
    lo, hi = 1.0, float(rows)
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if seen(mid) > distinct else (lo, mid)
    return (lo * hi) ** 0.5


#: The host planner's samples (strided; the build's sorted with NumPy, the probe's looked up in
#: it): planner_sample's share of each side, at most HOST_MULTIPLICITY_SAMPLE keys, since a key
#: costs a host sort about 60 ns against the GPU's table a fraction of one (2^16 keys: 4 ms on a
#: 2-core host).  At 2^26 rows over 2^23 keys, 8 rows a key, its 2^16 keys hold about 224
#: repeats to count.  The match ratio from them had taken a 2^20-key sort: 116 ms at 2^24 rows
#: on the same host, where the sorted build sample now serves both.
HOST_MULTIPLICITY_SAMPLE = 1 << 16


def host_build_sample(build_keys) -> np.ndarray:
    """The host planner's build sample of NumPy ``build_keys`` (n,), sorted."""
    n = int(build_keys.size)
    return np.sort(_sample(build_keys, planner_sample(n, HOST_MULTIPLICITY_SAMPLE)))


def multiplicity(build_keys, sample: np.ndarray | None = None) -> float:
    """Build rows a distinct key of host ``build_keys`` (NumPy (n,)): :func:`build_multiplicity`
    of ``sample`` (host_build_sample's, taken when not given), its distinct keys counted once
    sorted (exact when the sample is every key).  1.0 for no keys."""
    if build_keys.size == 0:
        return 1.0
    s = host_build_sample(build_keys) if sample is None else sample
    return build_multiplicity(int(build_keys.size), int(s.size), 1 + int(np.count_nonzero(s[1:] != s[:-1])))


def sample_match_ratio(sample: np.ndarray, build_rows: int, probe_keys) -> float:
    """The match ratio from host_build_sample's ``sample`` of ``build_rows`` keys and a strided
    sample of as large a share of host ``probe_keys`` (at most HOST_MULTIPLICITY_SAMPLE)."""
    if sample.size == 0 or probe_keys.size == 0:
        return 0.0
    p = np.ascontiguousarray(_sample(probe_keys, planner_sample(int(probe_keys.size), HOST_MULTIPLICITY_SAMPLE)))
    return _ratio(_hits(sample, p), p.size, build_rows, sample.size)


def _hits(sorted_sample: np.ndarray, probe: np.ndarray) -> int:
    """How many of host ``probe``'s keys the sorted, non-empty ``sorted_sample`` holds."""
    return int(np.count_nonzero(sorted_sample[np.minimum(np.searchsorted(sorted_sample, probe),
                                                          sorted_sample.size - 1)] == probe))


def device_join_samples(build_keys, probe_keys, match: bool, multiplicity: bool = False, full: bool = False
                        ) -> tuple[Sample, Sample, float | None]:
    """A device join's samples in one launch (primitives.key_samples): the build and probe
    keys' SKEW_SAMPLE summaries and, with ``match``, the match ratio from a hash table of a
    build sample probed by a probe sample (planner_sample of each side; DEVICE_BUILD_SAMPLE and
    DEVICE_PROBE_SAMPLE with ``full``), and from that table's distinct keys the build's
    multiplicity (the build Sample's); with ``multiplicity`` alone, that table and the
    multiplicity without the probe keys.  The probe summary comes from the same launch as the
    build's (a second block), so it costs no time of its own; the match ratio's table is built
    only when ``match`` or ``multiplicity``.  Raises MemoryError (CuPy's) where that table
    does not fit (the device's memory exhausted; or, past primitives.TABLE_KEPT bytes, the
    memory_limit)."""
    return launch_join_samples(build_keys, probe_keys, match, multiplicity, full)()


def launch_join_samples(build_keys, probe_keys, match: bool, multiplicity: bool = False, full: bool = False):
    """device_join_samples' launch: returns the function (no arguments) that waits for its
    words and returns device_join_samples' answer (on this thread, before its next launch).
    ``probe_keys`` None: the build keys' summary alone (the probe's Sample empty, no match
    ratio or multiplicity)."""
    launch_key_samples = _primitives().launch_key_samples
    nb, np_ = int(build_keys.size), 0 if probe_keys is None else int(probe_keys.size)
    sizes = None
    if nb and np_ and (match or multiplicity):
        sizes = ((DEVICE_BUILD_SAMPLE, DEVICE_PROBE_SAMPLE if match else 0) if full else
                 (planner_sample(nb, DEVICE_BUILD_SAMPLE), planner_sample(np_, DEVICE_PROBE_SAMPLE) if match else 0))
    pending = launch_key_samples([build_keys] if probe_keys is None else [build_keys, probe_keys], SKEW_SAMPLE, sizes)

    def read() -> tuple[Sample, Sample, float | None]:
        w, n = pending.words(), pending.sizes  # (Python ints: at 2^24 rows the planner is host time)
        b, p, ratio = Sample(n[0], *w[0:4]), Sample(n[1], *w[4:8]) if len(n) > 1 else Sample(), None
        if match:
            ratio = _ratio(w[8], pending.match_sizes[1], nb, pending.match_sizes[0]) if sizes else 0.0
        if sizes:  # the match ratio's build sample: its distinct keys
            b.multiplicity = build_multiplicity(nb, pending.match_sizes[0], w[10])
        return b, p, ratio
    return read


_PRIMITIVES = None


def _primitives():
    """gpujoin.cuda.primitives (CuPy's), imported at the first device sample: an import statement
    in the planner's launch cost 3 us of cold host time on an H200's host."""
    global _PRIMITIVES
    if _PRIMITIVES is None:
        from ..cuda import primitives

        _PRIMITIVES = primitives
    return _PRIMITIVES


def estimate_join(build_keys, probe_keys, build_payloads: list[int], probe_payloads: list[int],
                  measure: bool = True) -> JoinEstimate:
    """The join's statistics; ``measure=False`` leaves the match ratio and the probe keys' skew
    as None (the build keys' small sample is always read)."""
    if _xp(build_keys) is not np:
        b, p, ratio = device_join_samples(build_keys, probe_keys, measure)
        return JoinEstimate(int(build_keys.size), int(probe_keys.size), build_keys.dtype.itemsize,
                            list(build_payloads), list(probe_payloads), ratio, p.top_share if measure else None,
                            b.repeated_share, b.multiplicity)
    return JoinEstimate(int(build_keys.size), int(probe_keys.size), build_keys.dtype.itemsize, list(build_payloads),
                        list(probe_payloads), match_ratio(build_keys, probe_keys) if measure else None,
                        top_share(probe_keys) if measure else None, repeated_share(build_keys))
