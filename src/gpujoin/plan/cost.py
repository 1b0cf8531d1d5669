"""Cost models of paper 003 §3 (and byte-count models to rank every GPU join and group-by).

Every model counts the bytes an algorithm moves, each at the bandwidth of the access it makes:
sequential global memory B_G, random 4-byte accesses B_R = B_G / ratio_random, and random
accesses that hit L1 or L2 at ratio_l1 * B_G or ratio_l2 * B_G.  The device constants come from
``gpujoin calibrate`` (plan/calibrate.py), or default to the H200 figures of ANCHORS.md.
Times are seconds; N, M and g are counts; widths are bytes.

References: paper 003 §3 (a) SGB GFTR vs GFUR, (b) PHJ GFTR vs GFUR against match ratio,
(c) dictionary encoding and its Table 2; §4 the optimizer rules.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..cuda.kernels import pass_count


@dataclass(frozen=True)
class DeviceModel:
    """Bandwidths of one GPU: B_G in bytes/s, the others as ratios to it; cache sizes in bytes."""

    name: str
    b_g: float
    ratio_random: float = 24.0
    ratio_l1: float = 12.0
    ratio_l2: float = 4.5
    l1_bytes: int = 192 * 1024
    l2_bytes: int = 40 * 2**20
    smem_block_bytes: int = 110 * 1024  # cuda/groupby/hgb.py: SMEM_BLOCK_BUDGET
    #: Global-memory atomic updates a second when the targets sit in L2: HGB at 2^20 groups on an
    #: H200 made 2^27 of them in 3.2 ms (docs/BENCHMARKS.md); the paper models none.
    global_atomics_per_s: float = 42e9
    source: str = "paper 003"

    @property
    def b_r(self) -> float:
        return self.b_g / self.ratio_random

    def b_m(self, table_bytes: float) -> float:
        """Bandwidth of the memory level that holds ``table_bytes`` (paper 003 §3 (c)'s B_M)."""
        if table_bytes <= self.l1_bytes:
            return self.ratio_l1 * self.b_g
        if table_bytes <= self.l2_bytes:
            return self.ratio_l2 * self.b_g
        return self.b_g

    def as_dict(self) -> dict:
        return asdict(self)


#: Paper 003's A100 (Table 1 and §3: B_G about 1.5 TB/s, B_G = 24 B_R, L1 12 B_G, L2 4.5 B_G).
A100 = DeviceModel("NVIDIA A100 (paper 003)", 1.555e12)
#: ANCHORS.md's H200: copy 4,064 GB/s; a random 4-byte gather at 38.8 G items/s, which under
#: Table 1's model (8N/B_G + 4N/B_R) gives B_G / B_R = 24.2.  The cache ratios are
#: `gpujoin calibrate`'s on an H200 (2026-11-22): L1 30,954 GB/s and L2 8,881 GB/s of coalesced
#: reads against a 4,095 GB/s copy, 7.6 and 2.2 (the A100's: 12 and 4.5).
H200_ANCHORS = DeviceModel("NVIDIA H200 (ANCHORS.md)", 4.064e12, ratio_random=24.2, ratio_l1=7.6, ratio_l2=2.2,
                           l1_bytes=256 * 1024, l2_bytes=50 * 2**20, source="ANCHORS.md, gpujoin calibrate")


def ratio_from_gather(b_g: float, items_per_s: float, width: int = 4) -> float:
    """B_G / B_R from a gather's rate, with Table 1's model: time = 2 w N / B_G + w N / B_R."""
    per_item = 1.0 / items_per_s - 2 * width / b_g
    return b_g / (width / per_item)


# ---------------------------------------------------------------- (a) SGB: GFTR vs GFUR

def sgb_sort_cost(n: float, dev: DeviceModel, key_bytes: int = 4, value_bytes: int = 4) -> float:
    """Sorting (key, value) on the key: a histogram read, then per 8-bit pass read and write both.
    For 4-byte data this is paper 003's C_S = 68 N / B_G."""
    passes = key_bytes
    return (key_bytes * n + passes * 2 * (key_bytes + value_bytes) * n) / dev.b_g


def sgb_permute_cost(n: float, g: float, dev: DeviceModel, width: int = 4) -> float:
    """Gathering a column through the sort permutation: C_P = 2 w N / B_G + w N / max(B_G / u, B_R)
    with u = min(32, g) groups a warp touches (paper 003: (4 min(24, g) + 8) N / B_G)."""
    u = min(32.0, g)
    return 2 * width * n / dev.b_g + width * n / max(dev.b_g / u, dev.b_r)


def sgb_tr_wins(n: float, g: float, dev: DeviceModel) -> bool:
    """Does SGB-TR (sort each column) beat SGB-UR (gather it) for one more column?  g >= 16 on A100."""
    return sgb_sort_cost(n, dev) < sgb_permute_cost(n, g, dev)


# ---------------------------------------------------------------- (b) PHJ: GFTR vs GFUR

def phj_ur_gather_cost(m: float, dev: DeviceModel, width: int = 4) -> float:
    """C1: an unclustered gather of one column at M matches, 2 w M / B_G + w M / B_R (104 M / B_G)."""
    return 2 * width * m / dev.b_g + width * m / dev.b_r


def phj_tr_cost(n: float, m: float, dev: DeviceModel, width: int = 4, free_partition: bool = False) -> float:
    """C2: partition the column with its key (two 8-bit passes; free when it rides along in the
    key's own passes) then a clustered gather: ((4 + 32) N + 12 M) / B_G for 4-byte data."""
    partition = 0.0 if free_partition else (width * n + 2 * 4 * width * n)
    return (partition + 3 * width * m) / dev.b_g


def phj_crossover(dev: DeviceModel, payloads: int = 1, width: int = 4) -> float:
    """The match ratio above which PHJ-TR beats PHJ-UR for a relation with ``payloads`` columns,
    the first one's partition free when payloads > 1 (paper 003 §3 (b): 0.39 for one column,
    0.2 for two; in general 36 (p - 1) / (92 p) on A100)."""
    n = 1.0
    if payloads == 1:
        part = phj_tr_cost(n, 0.0, dev, width)
        per_match = phj_ur_gather_cost(1.0, dev, width) - phj_tr_cost(0.0, 1.0, dev, width)
        return part / per_match
    part = (payloads - 1) * phj_tr_cost(n, 0.0, dev, width)
    per_match = payloads * (phj_ur_gather_cost(1.0, dev, width) - phj_tr_cost(0.0, 1.0, dev, width, True))
    return part / per_match


def engine_phj_crossover(dev: DeviceModel, payloads: int = 1, width: int = 4, passes: int = 2) -> float:
    """The match ratio above which this engine's PHJ-TR beats its PHJ-UR.  Paper 003's model
    (:func:`phj_crossover`) partitions each carried column with its key (36 N a column);
    here every column rides in the key's own passes (one histogram, one scatter moving them
    all), so a column costs TR only its read and write in each pass (2 w N a pass), and UR
    moves a row id (w bytes) in the same passes instead of the first column: the crossover is
    2 w passes (p - 1) / (p (104 - 12)) for 4-byte data, 0.087 for two columns (paper: 0.2), 0
    for one (TR writes its one column in the match kernel).  On an H200 at 2^27 rows with two
    columns, PHJ-TR took 11.60 ms against PHJ-UR's 12.61 at match ratio 0.125, once the radix
    partition's passes went unstable, most significant digit first (docs/BENCHMARKS.md)."""
    if payloads <= 1:
        return 0.0
    got = _CROSSOVERS.get((id(dev), payloads, width, passes))
    if got is not None and got[0] is dev:  # (the model is kept with its value: its id stays its own)
        return got[1]
    part = (payloads - 1) * 2 * width * passes / dev.b_g
    per_match = payloads * (phj_ur_gather_cost(1.0, dev, width) - phj_tr_cost(0.0, 1.0, dev, width, True))
    if len(_CROSSOVERS) >= 256:
        _CROSSOVERS.clear()
    _CROSSOVERS[id(dev), payloads, width, passes] = dev, part / per_match
    return part / per_match


#: engine_phj_crossover's answers by (id(model), payloads, width, passes): the join planner asks
#: twice a call, and the cost functions' cold Python cost some 10 us of its host time (issue 17
#: item 3).
_CROSSOVERS: dict = {}


# ---------------------------------------------------------------- (c) dictionary encoding

def encoding_cost(n: float, g: float, dev: DeviceModel, key_bytes: int = 4) -> float:
    """D(N, g): build a table of the g keys and probe it with all N (paper 003 §3 (c)); the table's
    accesses run at the bandwidth of the level holding its g entries of key + 4 bytes, divided
    among min(g, 24) groups."""
    entry = key_bytes + 4
    b_m = dev.b_m(g * entry) / min(g, dev.ratio_random)
    build = key_bytes * g / dev.b_g + entry * g / b_m
    probe = (key_bytes * n + 4 * n) / dev.b_g + entry * n / b_m
    return build + probe


def sort_columns_cost(n: float, payloads: int, key_bytes: int, dev: DeviceModel) -> float:
    """C1: sort each of p 4-byte columns with its k-byte key, k 8-bit passes each."""
    k = key_bytes
    return payloads * (k * n + k * n * 2 * (k + 4)) / dev.b_g


def sort_encoded_cost(n: float, g: float, payloads: int, key_bytes: int, dev: DeviceModel) -> float:
    """C2: encode the keys, then sort each column with its 4-byte code in ceil(log2 g / 8) passes."""
    passes = max(1, math.ceil(math.log2(max(g, 2)) / 8))
    return encoding_cost(n, g, dev, key_bytes) + payloads * (4 * n + passes * n * 2 * (4 + 4)) / dev.b_g


def encoding_pays(n: float, g: float, payloads: int, key_bytes: int, dev: DeviceModel) -> bool:
    return sort_encoded_cost(n, g, payloads, key_bytes, dev) < sort_columns_cost(n, payloads, key_bytes, dev)


def min_payloads_for_encoding(g: float, key_bytes: int, dev: DeviceModel, n: float = 2**28,
                              most: int = 64) -> int | None:
    """Table 2: the fewest payload columns for which encoding pays, or None (not up to ``most``)."""
    return next((p for p in range(1, most + 1) if encoding_pays(n, g, p, key_bytes, dev)), None)


def table2(dev: DeviceModel, n: float = 2**28) -> dict[int, list[tuple[int, int | None]]]:
    """Paper 003's Table 2 for ``dev``: per key width, (log2 g, minimum payload columns) rows."""
    return {k: [(lg, min_payloads_for_encoding(2.0**lg, k, dev, n)) for lg in range(0, 29)] for k in (4, 8)}


# ---------------------------------------------------------------- ranking models for the rest

def partition_cost(n: float, key_bytes: int, row_bytes: float, bits: int, dev: DeviceModel,
                   unstable: bool = False) -> float:
    """Radix partition: per pass (8 bits, or 9 unstable where that saves a pass) a histogram read
    of the key and a read and write of the row."""
    return pass_count(bits, unstable) * (key_bytes + 2 * row_bytes) * n / dev.b_g


def join_phase_costs(n_build: float, n_probe: float, matches: float, dev: DeviceModel, key_bytes: int = 4,
                     build_payloads: list[int] = (4,), probe_payloads: list[int] = (4,),
                     sort_bits: int | None = None) -> dict[str, dict[str, float]]:
    """Predicted seconds of each GPU equi-join (cuda/join) by phase, as the joins time them:
    transform (partition or sort), match (NPHJ: build and probe), materialize (gathers, output).

    PHJ partitions both sides into build partitions of about 2048 rows; SMJ sorts both on the
    key's bits; NPHJ builds and probes one global table at random; UR variants gather their
    payloads through row ids (unclustered), TR variants move them with the keys.
    """
    k = key_bytes
    bits = max(1, math.ceil(math.log2(max(n_build / 2048, 2))))
    sort_bits = sort_bits if sort_bits is not None else 8 * k
    pb, pp = sum(build_payloads), sum(probe_payloads)
    out = matches * (k + pb + pp) / dev.b_g
    match = (k * (n_build + n_probe) + k * matches) / dev.b_g

    def unclustered(widths):
        return sum(phj_ur_gather_cost(matches, dev, w) for w in widths)

    def clustered(widths):
        return sum(3 * w * matches for w in widths) / dev.b_g

    # PHJ's passes are unstable (9 bits where that saves one) when a side's columns have one width
    tr_part = (partition_cost(n_build, k, k + pb, bits, dev, len(set(build_payloads)) <= 1)
               + partition_cost(n_probe, k, k + pp, bits, dev, len(set(probe_payloads)) <= 1))
    ur_part = partition_cost(n_build, k, k + 4, bits, dev, True) + partition_cost(n_probe, k, k + 4, bits, dev, True)
    gathers_ur = unclustered(build_payloads) + unclustered(probe_payloads)
    gathers_tr = clustered(build_payloads) + clustered(probe_payloads)
    tr_sort = partition_cost(n_build, k, k + pb, sort_bits, dev) + partition_cost(n_probe, k, k + pp, sort_bits, dev)
    ur_sort = partition_cost(n_build, k, k + 4, sort_bits, dev) + partition_cost(n_probe, k, k + 4, sort_bits, dev)
    # NPHJ: one global table of 2 n_build slots, built and probed at random (L2 speed while it fits)
    table = 2 * n_build * (k + 4)
    random_bw = dev.b_r if table > dev.l2_bytes else dev.ratio_l2 * dev.b_g / dev.ratio_random * 4
    nphj = k * (n_build + n_probe) / dev.b_g + (k + 4) * (n_build + n_probe) / random_bw
    return {
        "phj-tr": {"transform": tr_part, "match": match, "materialize": gathers_tr + out},
        "phj-ur": {"transform": ur_part, "match": match, "materialize": gathers_ur + out},
        "smj-tr": {"transform": tr_sort, "match": match, "materialize": gathers_tr + out},
        "smj-ur": {"transform": ur_sort, "match": match, "materialize": gathers_ur + out},
        "nphj": {"transform": 0.0, "match": nphj, "materialize": gathers_ur + out},
    }


def join_costs(*args, **kwargs) -> dict[str, float]:
    """Predicted seconds of each GPU equi-join: the sum of ``join_phase_costs``."""
    return {a: sum(ph.values()) for a, ph in join_phase_costs(*args, **kwargs).items()}


def group_by_phase_costs(n: float, g: float, dev: DeviceModel, key_bytes: int = 4, value_bytes: list[int] = (4, 4),
                         slot_bytes: int = 8, hot_share: float = 0.0) -> dict[str, dict[str, float]]:
    """Predicted seconds of each GPU group-by (cuda/groupby) of n rows into g groups, by phase as
    the algorithms time them (HGB: group_ids, aggregate; PGB and SGB: transform, aggregate).

    HGB: two reads of the keys (build, aggregate) and one of the values, its table and
    accumulators at the bandwidth of where they fit (shared memory counted as L1); PGB: a radix
    pass per 8 bits of partition fanout (about 4,600 groups a partition), then one read; SGB: a
    sort per column (UR: one sort and unclustered gathers; DE-TR: model (c))."""
    k, p = key_bytes, len(value_bytes)
    vb = sum(value_bytes)
    in_smem = g * slot_bytes <= 2 * dev.smem_block_bytes
    smem_atomics = n * p * 8 / (dev.ratio_l1 * dev.b_g)  # at about L1 bandwidth
    if in_smem:
        atomics = smem_atomics
    else:  # global atomics: a measured rate while the accumulators fit in L2, random access
        # beyond; the hot groups' rows (hot_share) in shared memory (cuda/groupby/hgb.py)
        atomics = n * p / dev.global_atomics_per_s
        if g * slot_bytes > dev.l2_bytes:
            atomics += n * p * 8 / dev.b_r
        atomics = (1 - hot_share) * atomics + hot_share * smem_atomics
    probe = n * (k + 4) / dev.b_m(2 * g * (k + 4))
    hgb = {"group_ids": k * n / dev.b_g + probe, "aggregate": (k * n + vb * n) / dev.b_g + atomics + probe}
    pgb_bits = max(8, math.ceil(math.log2(max(g / 4600, 1))))
    pgb_tr = {"transform": partition_cost(n, k, k + vb, pgb_bits, dev, len(set(value_bytes)) <= 1),
              "aggregate": (2 * k + vb) * n / dev.b_g}
    pgb_ur = {"transform": partition_cost(n, k, k + 4, pgb_bits, dev, True),
              "aggregate": (2 * k + 4) * n / dev.b_g + sum(phj_ur_gather_cost(n, dev, w) for w in value_bytes)}
    key_bits = max(1, math.ceil(math.log2(max(g, 2))))
    reduce_one = lambda w: (4 + w) * n / dev.b_g  # noqa: E731  (a segmented reduction: gid and value)
    sgb_tr = {"transform": sum(partition_cost(n, k, k + w, key_bits, dev) for w in value_bytes),
              "aggregate": sum(reduce_one(w) for w in value_bytes)}
    sgb_ur = {"transform": partition_cost(n, k, k + 4, key_bits, dev),
              "aggregate": sum(sgb_permute_cost(n, g, dev, w) + reduce_one(w) for w in value_bytes)}
    code_bits = max(1, math.ceil(math.log2(max(g, 2))))
    sgb_de = {"transform": partition_cost(n, k, k + value_bytes[0], key_bits, dev) + encoding_cost(n, g, dev, k)
              + sum(partition_cost(n, 4, 4 + w, code_bits, dev) for w in value_bytes[1:]),
              "aggregate": sum(reduce_one(w) for w in value_bytes)}
    if hot_share:  # heavy partitions (paper 003 Fig. 20): PGB's go to HGB afterwards (H200, 2^28
        # rows, g = 2^16: 6.5 ms uniform, 10.8 at a hot share of 0.55, 13.0 at 0.9)
        pgb_tr = {k_: (1 + hot_share) * v for k_, v in pgb_tr.items()}
        pgb_ur = {k_: (1 + hot_share) * v for k_, v in pgb_ur.items()}
    return {"hgb": hgb, "pgb-tr": pgb_tr, "pgb-ur": pgb_ur, "sgb-tr": sgb_tr, "sgb-de-tr": sgb_de, "sgb-ur": sgb_ur}


def group_by_costs(*args, **kwargs) -> dict[str, float]:
    """Predicted seconds of each GPU group-by: the sum of ``group_by_phase_costs``."""
    return {a: sum(ph.values()) for a, ph in group_by_phase_costs(*args, **kwargs).items()}
