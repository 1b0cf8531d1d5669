"""``algorithm="auto"`` on the GPU: paper 003 §4's rules over the statistics and cost models.

Group-by, the decision tree of paper 003 Fig. 21 with this GPU's limits:
1. an ordered output is required: SGB-DE-TR where Table 2 (plus one column, measured) says
   encoding pays, else SGB-TR;
2. the groups' accumulators fit in the shared memory of one block (up to 220 KiB: one
   1024-thread block an SM, cuda/groupby/hgb.py): HGB;
3. hot groups (stats.GROUP_BY_HOT_SHARE of a sample in keys that repeat in it) whose
   accumulators fit in L2: HGB, which keeps the hot groups in shared memory; else PGB-TR.
On an H200 (docs/BENCHMARKS.md) HGB was fastest up to 2^14 groups and PGB-TR from 2^16 for two
4-byte MAX columns on uniform keys, so "fits in shared memory" is the measured crossover as well
as the tree's test (the paper's A100 measured HGB ahead up to 2^18); under Zipf z = 1 and 1.5 at
2^16 groups HGB's hot groups put it ahead of PGB-TR (7.97 against 10.82 ms, 5.88 against 12.95).
Fig. 21's sort-based branch for skew is gone: SGB-TR took 23.6 ms there.

Join: SMJ-TR for heavy build keys (many-to-many with skew, measured on an H200: PHJ's chains
serialize a hot key's matches on one thread); else PHJ-TR when the match ratio is at least model
(b)'s crossover for the payload columns (as this engine partitions them: cost.engine_phj_crossover),
the probe keys are skewed, or keys or payloads are 8 bytes; PHJ-UR below (paper 003 §4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import cost
from .stats import GroupByEstimate, JoinEstimate


@dataclass
class Choice:
    """An algorithm, why, and every candidate's predicted seconds."""

    algorithm: str
    reason: str
    predicted: dict[str, float] = field(default_factory=dict)
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  # candidate -> phase -> seconds
    estimate: object = None  # the statistics it was chosen on (stats.GroupByEstimate / JoinEstimate)
    table: object = field(default=None, repr=False)  # a GPU group-by's HGB stage 1, built while planning


def fits_shared(est: GroupByEstimate, dev: cost.DeviceModel) -> bool:
    """Fig. 21's first test, at the measured crossover: the groups' accumulators fit in the shared
    memory of one 1024-thread block an SM (2 x smem_block_bytes: HGB's shared-memory paths)."""
    return max(est.groups, 1) * est.slot_bytes <= 2 * dev.smem_block_bytes


def choose_group_by(est: GroupByEstimate, dev: cost.DeviceModel, ordered: bool = False) -> Choice:
    """The group-by algorithm for ``est`` on ``dev`` (Fig. 21), with every candidate's prediction."""
    n, g, p = est.rows, max(est.groups, 1), max(len(est.value_bytes), 1)
    phases = cost.group_by_phase_costs(n, g, dev, est.key_bytes, est.value_bytes or [4], est.slot_bytes,
                                       est.hot_share or 0.0)
    predicted = {a: sum(ph.values()) for a, ph in phases.items()}

    def sort_based(why: str) -> Choice:
        # Table 2's minimum plus one column: the paper's printed Table 2 (4-byte keys) asks one more
        # than its formula, and on the H200 SGB-DE-TR lost to SGB-TR with two columns at g = 2^16
        # under skew (27.8 against 24.6 ms, docs/BENCHMARKS.md)
        need = cost.min_payloads_for_encoding(g, est.key_bytes, dev, n)
        if need is not None and p >= need + 1:
            return Choice("sgb-de-tr", f"{why}; dictionary encoding pays from {need + 1} columns at g = {g:,} "
                                       f"(Table 2 + 1), here {p}", predicted, phases)
        return Choice("sgb-tr", f"{why}; dictionary encoding needs {'more than 64' if need is None else need + 1} "
                                f"columns at g = {g:,} (Table 2 + 1), here {p}", predicted, phases)

    if ordered:
        return sort_based("the output must be ordered by key")
    if fits_shared(est, dev):
        return Choice("hgb", f"{g:,} groups x {est.slot_bytes} B of accumulators fit in shared memory "
                             f"({2 * dev.smem_block_bytes // 1024} KiB of one block)", predicted,
                      phases)
    share = f"keys that repeat in a sample hold {est.hot_share or 0:.0%} of it"
    if est.hot and g * 8 * p <= dev.l2_bytes:
        return Choice("hgb", f"{g:,} groups do not fit in shared memory, but {share}: HGB keeps those hot "
                             f"groups in shared memory and the others' accumulators fit in L2", predicted, phases)
    return Choice("pgb-tr", f"{g:,} groups do not fit in shared memory ({share})", predicted, phases)


def wide_join(est: JoinEstimate) -> bool:
    """8-byte keys or payloads: §4 sends these to PHJ-TR whatever the match ratio."""
    return est.key_bytes == 8 or any(w == 8 for w in est.build_payloads + est.probe_payloads)


def choose_join(est: JoinEstimate, dev: cost.DeviceModel) -> Choice:
    """The join algorithm for ``est`` on ``dev`` (§4's rules), with every candidate's prediction."""
    phases = cost.join_phase_costs(est.build_rows, est.probe_rows, est.matches, dev, est.key_bytes,
                                   est.build_payloads or [4], est.probe_payloads or [4])
    predicted = {a: sum(ph.values()) for a, ph in phases.items()}
    p = max(len(est.build_payloads), len(est.probe_payloads), 1)
    crossover = cost.engine_phj_crossover(dev, p)
    if est.heavy_build:
        return Choice("smj-tr", f"heavy build keys ({est.build_repeated:.0%} of a build sample repeats in it): "
                                f"SMJ's expansion costs the output's, PHJ's chains serialize the hot keys' matches",
                      predicted, phases)
    if wide_join(est):
        return Choice("phj-tr", "8-byte keys or payloads", predicted, phases)
    if est.match_ratio is None or est.match_ratio >= crossover:  # None: not measured, 1 assumed
        ratio = "not measured" if est.match_ratio is None else f"{est.match_ratio:.0%} >="
        return Choice("phj-tr", f"match ratio {ratio} model (b)'s crossover {crossover:.0%} for {p} payload "
                                f"column(s)", predicted, phases)
    if est.skewed:
        return Choice("phj-tr", f"skewed probe keys (top key {est.top_share:.1%} of a sample)", predicted, phases)
    return Choice("phj-ur", f"match ratio {est.match_ratio:.0%} < model (b)'s crossover {crossover:.0%} "
                            f"for {p} payload column(s)", predicted, phases)


def resolve_gpu_join(build_keys, probe_keys, build_payloads, probe_payloads) -> Choice:
    """``algorithm="auto"`` for a GPU join of these device (or host) arrays."""
    from .calibrate import device_model
    from .stats import JoinEstimate, device_join_samples, estimate_join, match_ratio, top_share

    dev = device_model()
    bw, pw = [p.dtype.itemsize for p in build_payloads], [p.dtype.itemsize for p in probe_payloads]
    if hasattr(build_keys, "__cuda_array_interface__"):
        # device keys: the build and probe samples and the match ratio in one launch batch and
        # one sync (the rules' order is kept in what is read: a wide join needs no match ratio)
        est = JoinEstimate(int(build_keys.size), int(probe_keys.size), build_keys.dtype.itemsize, bw, pw, None, None)
        wide = wide_join(est)
        # the match ratio only where it can change the choice: narrow keys and payloads, and a
        # crossover above 0 (one payload column a side: PHJ-TR at any ratio)
        match = not wide and cost.engine_phj_crossover(dev, max(len(bw), len(pw), 1)) > 0
        try:
            b, p, ratio = device_join_samples(build_keys, probe_keys, match=match)
        except MemoryError:  # no room for the match ratio's table (a tiny memory_limit): 1 assumed,
            (b, p, _), ratio = device_join_samples(build_keys, probe_keys, match=False), None  # the join's
        est.build_repeated = b.repeated_share                                                  # check names it
        if not est.heavy_build and match:
            est.match_ratio, est.top_share = ratio, p.top_share
    else:
        # each sampled statistic only when the rules reach it (heavy build keys from a small
        # sample, then §4's order: width, match ratio, skew)
        est = estimate_join(build_keys, probe_keys, bw, pw, measure=False)
        crossover = cost.engine_phj_crossover(dev, max(len(bw), len(pw), 1))
        if not est.heavy_build and not wide_join(est) and crossover > 0:
            est.match_ratio = match_ratio(build_keys, probe_keys)
            if est.match_ratio < crossover:
                est.top_share = top_share(probe_keys)
    choice = choose_join(est, dev)
    choice.estimate = est
    return choice


def hgb_groups_limits(est: GroupByEstimate, dev: cost.DeviceModel) -> tuple[int, int]:
    """(the most groups whose accumulators fit shared memory, the most groups for which
    choose_group_by takes HGB): with hot groups in ``est``, what fits L2 for the second."""
    shared = 2 * dev.smem_block_bytes // max(est.slot_bytes, 1)
    if est.hot:
        return shared, max(shared, dev.l2_bytes // (8 * max(len(est.value_bytes), 1)))
    return shared, shared


def resolve_gpu_group_by(keys, inputs) -> Choice:
    """``algorithm="auto"`` for a GPU group-by of device ``keys`` with aggregate ``inputs``
    (cuda.groupby.AggInput).  Choice.table is HGB's stage 1 when the planner built it."""
    from ..cuda.groupby.common import slot_bytes
    from ..cuda.groupby.hgb import HashTable
    from ..cuda.runtime import free_bytes
    from .calibrate import device_model
    from .stats import estimate_groups, hll_sub, sample

    widths = [i.values.dtype.itemsize for i in inputs if i.values is not None]
    dev = device_model()
    # one small sample gives the skew and, for a few groups, their number; otherwise HGB's own
    # build counts the groups up to the bound that the rules compare them with, and is kept for
    # HGB (HyperLogLog's pass over every key cost 19% of HGB's 3 ms at 2^28 rows, and even over
    # 1/16 of them 6-8% of HGB's run under Zipf keys)
    smp = sample(keys)
    est = GroupByEstimate(int(keys.size), smp.groups or 0, keys.dtype.itemsize, widths, slot_bytes(inputs),
                          smp.top_share, "sample (every group seen twice)", smp.repeated_share)
    table = None
    if smp.groups is None and keys.size:
        # caps growing 16x up to the last bound, so that HGB gets a table sized near its groups;
        # a table that would take more than a quarter of the free memory is not built
        cap, top = hgb_groups_limits(est, dev)
        room, counted = free_bytes() // 4, False
        while not counted and HashTable.nbytes(cap, keys.dtype.itemsize) <= room:
            table = HashTable.at_most(keys, cap)
            counted = table is not None or cap >= top
            cap = cap if counted else min(top, cap * 16)
        if table is not None:
            est.groups, est.method = table.num_groups, "hash table (exact)"
        elif counted:  # PGB sketches the groups in its first radix pass
            est.groups, est.method, est.sketched = cap + 1, f"more than {cap:,} (a hash table of {cap:,} overflowed)", 0.0
        else:  # no room for the table: HyperLogLog over part of the keys
            sub = hll_sub(keys.size)
            est.groups, est.method = estimate_groups(keys, sub)
            est.sketched = 1 / sub
    choice = choose_group_by(est, dev)
    choice.estimate = est
    choice.table = table if choice.algorithm == "hgb" else None
    return choice
