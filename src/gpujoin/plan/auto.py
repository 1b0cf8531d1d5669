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

import functools

from . import cost
from .calibrate import device_model
from .stats import (GROUP_DRAWS, GroupByEstimate, JoinEstimate, Sample, device_array, estimate_groups, estimate_join,
                    hll_sub, host_build_sample, launch_join_samples, launch_sample, more_groups_than, multiplicity,
                    sample_match_ratio, top_share)


class Choice:
    """An algorithm, why, and every candidate's predicted seconds (``phases``: candidate -> phase
    -> seconds), computed by ``model`` when first read: the rules never need them, and the cost
    models' Python took about 15 us of the planner's time, which counts on small inputs.
    ``reason``: a string, or a function of none that returns it, called when first read (the
    reasons format percentages, some 6 us of a cold planner's host time: the device join and
    group-by read them once their kernels are queued).  ``estimate``: the statistics it was chosen on
    (stats.GroupByEstimate / JoinEstimate); ``table``: a GPU group-by's HGB stage 1, built while
    planning."""

    def __init__(self, algorithm: str, reason, predicted: dict | None = None, phases: dict | None = None,
                 model=None):
        self.algorithm, self._reason, self.estimate, self.table = algorithm, reason, None, None
        self._predicted, self._phases, self._model = predicted, phases, model

    @property
    def reason(self) -> str:
        if not isinstance(self._reason, str):
            self._reason = self._reason()
        return self._reason

    @property
    def phases(self) -> dict[str, dict[str, float]]:
        if self._phases is None:
            self._phases = self._model() if self._model is not None else {}
        return self._phases

    @property
    def predicted(self) -> dict[str, float]:
        if self._predicted is None:
            self._predicted = {a: sum(ph.values()) for a, ph in self.phases.items()}
        return self._predicted

    def __repr__(self) -> str:
        return f"Choice({self.algorithm!r}, {self.reason!r})"


def fits_shared(est: GroupByEstimate, dev: cost.DeviceModel) -> bool:
    """Fig. 21's first test, at the measured crossover: the groups' accumulators fit in the shared
    memory of one 1024-thread block an SM (2 x smem_block_bytes: HGB's shared-memory paths)."""
    return max(est.groups, 1) * est.slot_bytes <= 2 * dev.smem_block_bytes


def choose_group_by(est: GroupByEstimate, dev: cost.DeviceModel, ordered: bool = False) -> Choice:
    """The group-by algorithm for ``est`` on ``dev`` (Fig. 21), with every candidate's prediction."""
    n, g, p = est.rows, max(est.groups, 1), max(len(est.value_bytes), 1)

    def model() -> dict:
        return cost.group_by_phase_costs(n, g, dev, est.key_bytes, est.value_bytes or [4], est.slot_bytes,
                                         est.hot_share or 0.0)

    def sort_based(why: str) -> Choice:
        # Table 2's minimum plus one column: the paper's printed Table 2 (4-byte keys) asks one more
        # than its formula, and on the H200 SGB-DE-TR lost to SGB-TR with two columns at g = 2^16
        # under skew (27.8 against 24.6 ms, docs/BENCHMARKS.md)
        need = cost.min_payloads_for_encoding(g, est.key_bytes, dev, n)
        if need is not None and p >= need + 1:
            return Choice("sgb-de-tr", f"{why}; dictionary encoding pays from {need + 1} columns at g = {g:,} "
                                       f"(Table 2 + 1), here {p}", model=model)
        return Choice("sgb-tr", f"{why}; dictionary encoding needs {'more than 64' if need is None else need + 1} "
                                f"columns at g = {g:,} (Table 2 + 1), here {p}", model=model)

    # (the reasons formatted when read: Choice)
    if ordered:
        return sort_based("the output must be ordered by key")
    if fits_shared(est, dev):
        return Choice("hgb", lambda: f"{g:,} groups x {est.slot_bytes} B of accumulators fit in shared memory "
                                     f"({2 * dev.smem_block_bytes // 1024} KiB of one block)", model=model)
    share = lambda: f"keys that repeat in a sample hold {est.hot_share or 0:.0%} of it"  # noqa: E731
    if est.hot and g * 8 * p <= dev.l2_bytes:
        return Choice("hgb", lambda: f"{g:,} groups do not fit in shared memory, but {share()}: HGB keeps those "
                                     f"hot groups in shared memory and the others' accumulators fit in L2",
                      model=model)
    return Choice("pgb-tr", lambda: f"{g:,} groups do not fit in shared memory ({share()})", model=model)


def wide_join(est: JoinEstimate) -> bool:
    """8-byte keys or payloads: §4 sends these to PHJ-TR whatever the match ratio."""
    return est.key_bytes == 8 or 8 in est.build_payloads or 8 in est.probe_payloads


def choose_join(est: JoinEstimate, dev: cost.DeviceModel) -> Choice:
    """The join algorithm for ``est`` on ``dev`` (§4's rules), with every candidate's prediction."""
    def model() -> dict:
        return cost.join_phase_costs(est.build_rows, est.probe_rows, est.matches, dev, est.key_bytes,
                                     est.build_payloads or [4], est.probe_payloads or [4])
    p = max(len(est.build_payloads), len(est.probe_payloads), 1)
    crossover = cost.engine_phj_crossover(dev, p)
    # (the reasons formatted when read: Choice)
    if est.heavy_build:
        return Choice("smj-tr", lambda: f"heavy build keys ({est.build_repeated:.0%} of a build sample repeats in "
                                        f"it): SMJ's expansion costs the output's, PHJ's chains serialize the hot "
                                        f"keys' matches", model=model)
    if est.many_to_many:
        return Choice("smj-tr", lambda: f"many-to-many keys (about {est.build_multiplicity:.1f} build rows a key, "
                                        f"from a build sample's distinct keys): SMJ's merge and expansion cost the "
                                        f"output's, PHJ's chains walk every repeat", model=model)
    if wide_join(est):
        return Choice("phj-tr", "8-byte keys or payloads", model=model)
    ratio = est.match_ratio
    shown = None if ratio is None else round(ratio, 2)  # (as printed: the texts are kept by it)
    if ratio is None or ratio >= crossover:  # None: not measured, 1 assumed
        return Choice("phj-tr", lambda: _ratio_reason(shown, crossover, p, ">="), model=model)
    if est.skewed:
        return Choice("phj-tr", lambda: f"skewed probe keys (top key {est.top_share:.1%} of a sample)", model=model)
    return Choice("phj-ur", lambda: _ratio_reason(shown, crossover, p, "<"), model=model)


@functools.lru_cache(maxsize=1024)
def _ratio_reason(ratio: float | None, crossover: float, p: int, side: str) -> str:
    """choose_join's text for a choice by the match ratio, kept: a loop of joins reads the same few
    (their formatting showed in the host-bound tail of a 2^24-row join on an H200)."""
    shown = "not measured" if ratio is None else f"{ratio:.0%}"
    return f"match ratio {shown} {side} model (b)'s crossover {crossover:.0%} for {p} payload column(s)"


def resolve_gpu_join(build_keys, probe_keys, build_payloads, probe_payloads) -> Choice:
    """``algorithm="auto"`` for a GPU join of these device (or host) arrays."""
    return launch_gpu_join_plan(build_keys, probe_keys, [p.dtype.itemsize for p in build_payloads],
                                [p.dtype.itemsize for p in probe_payloads])()


def launch_gpu_join_plan(build_keys, probe_keys, build_widths: list[int], probe_widths: list[int],
                         build_ready=None):
    """resolve_gpu_join in two steps, for payload columns of these byte widths: device keys'
    samples launched now; the returned function (no arguments) waits for them and returns the
    Choice, so that the caller's Python between the two runs while the GPU samples (on an H200
    at 2^24 rows, the samples' 16-33 us behind the device join's own checks).  Host keys are
    sampled when the function is called.  Call it on the thread that launched, before that
    thread's next planner launch on the device.

    ``build_ready``: a CUDA event after which the build keys are in place while the current
    stream still has work queued (a shuffle's build side, finished first:
    ``HashPartitioning.ready``).  Where the rules read the build keys' sample alone (8-byte keys
    or payloads), it is then taken on a stream of its own from that event, so that the rules
    and the join's setup run while the GPU ends the shuffle (on two H200s the local join's
    planner had waited for the probe side's last pass, the GPU then idle about 0.4 ms)."""
    dev = device_model()
    bw, pw = list(build_widths), list(probe_widths)
    if device_array(build_keys):
        # device keys: the build and probe samples and the match ratio in one launch and one
        # read (the rules' order is kept in what is read: a wide join needs no match ratio)
        est = JoinEstimate(int(build_keys.size), int(probe_keys.size), build_keys.dtype.itemsize, bw, pw, None, None)
        wide = wide_join(est)
        # the match ratio only where it can change the choice: narrow keys and payloads, and a
        # crossover above 0 (one payload column a side: PHJ-TR at any ratio); the build's
        # multiplicity for every narrow join (one payload column, 2^26 rows a side over 2^23
        # keys on an H200: SMJ-TR 11.5 ms, PHJ-TR 23.9)
        match = not wide and cost.engine_phj_crossover(dev, max(len(bw), len(pw), 1)) > 0
        try:
            if wide and build_ready is not None:
                stream = _side_stream()
                stream.wait_event(build_ready)
                with stream:
                    read = launch_join_samples(build_keys, None, match=False)
            else:
                read = launch_join_samples(build_keys, probe_keys, match=match, multiplicity=not wide)
        except MemoryError:  # no room for the match ratio's table (memory exhausted): 1 assumed,
            read, match = launch_join_samples(build_keys, probe_keys, match=False), False  # the join's check names it

        def finish() -> Choice:
            b, p, ratio = read()
            est.build_repeated = b.repeated_share
            if not est.heavy_build:
                est.build_multiplicity = b.multiplicity
                if match:
                    est.match_ratio, est.top_share = ratio, p.top_share
            return _chosen(est, dev)
        return finish

    def host() -> Choice:
        # each sampled statistic only when the rules reach it (heavy build keys from a small
        # sample, then §4's order: many-to-many keys, width, match ratio, skew)
        est = estimate_join(build_keys, probe_keys, bw, pw, measure=False)
        crossover = cost.engine_phj_crossover(dev, max(len(bw), len(pw), 1))
        if not est.heavy_build and not wide_join(est):
            sample = host_build_sample(build_keys)  # (one sorted sample for both statistics)
            est.build_multiplicity = multiplicity(build_keys, sample)
            if not est.many_to_many and crossover > 0:
                est.match_ratio = sample_match_ratio(sample, int(build_keys.size), probe_keys)
                if est.match_ratio < crossover:
                    est.top_share = top_share(probe_keys)
        return _chosen(est, dev)
    return host


_side_streams: dict = {}


def _side_stream():
    """The planner's own non-blocking stream on the current device (made once)."""
    import cupy as cp

    d = cp.cuda.Device().id
    if d not in _side_streams:
        _side_streams[d] = cp.cuda.Stream(non_blocking=True)
    return _side_streams[d]


def _chosen(est: JoinEstimate, dev: cost.DeviceModel) -> Choice:
    choice = choose_join(est, dev)
    choice.estimate = est
    return choice


def shared_groups(slot_bytes: int, dev: cost.DeviceModel) -> int:
    """The most groups of ``slot_bytes`` bytes of accumulators that fit in shared memory
    (fits_shared's bound)."""
    return 2 * dev.smem_block_bytes // max(slot_bytes, 1)


def hgb_groups_limits(est: GroupByEstimate, dev: cost.DeviceModel) -> tuple[int, int]:
    """(the most groups whose accumulators fit shared memory, the most groups for which
    choose_group_by takes HGB): with hot groups in ``est``, what fits L2 for the second."""
    shared = shared_groups(est.slot_bytes, dev)
    if est.hot:
        return shared, max(shared, dev.l2_bytes // (8 * max(len(est.value_bytes), 1)))
    return shared, shared


def resolve_gpu_group_by(keys, inputs) -> Choice:
    """``algorithm="auto"`` for a GPU group-by of device ``keys`` with aggregate ``inputs``
    (cuda.groupby.AggInput).  Choice.table is HGB's stage 1 when the planner built it."""
    return launch_gpu_group_by_plan(keys)(inputs)


def read_quietly(finish, *args) -> None:
    """On an error path, a launched plan's samples read (``finish(*args)``; nothing for None), so
    that nothing of the launch stays in flight; an error of its own gives way to the first."""
    if finish is not None:
        try:
            finish(*args)
        except Exception:  # noqa: BLE001
            pass


def launch_gpu_group_by_plan(keys):
    """resolve_gpu_group_by in two steps: the keys' sample launched now; the returned function
    of the aggregate inputs waits for it and returns the Choice, so that the caller's Python
    between the two (the device group-by's inputs) runs while the GPU samples; given None (an
    error came first) it only reads the sample.  Call it on the thread that launched, before
    that thread's next planner launch on the device."""
    n = int(keys.size)
    read = launch_sample(keys, GROUP_DRAWS if n > GROUP_DRAWS else 0) if n else None

    def finish(inputs) -> Choice | None:
        if inputs is None:
            if read is not None:
                read()
            return None
        return _finish_group_by(keys, inputs, read)
    return finish


_GROUP_BY_NAMES: tuple | None = None


def _group_by_modules() -> tuple:
    """(slot_bytes, HashTable, fits) of the device group-by (CuPy's: imported at the first plan;
    three import statements cost some 10 us of a cold planner's host time, issue 17 item 3).
    Threads that plan at once may both import: the tuple is bound whole."""
    global _GROUP_BY_NAMES
    if _GROUP_BY_NAMES is None:
        from ..cuda.groupby.common import slot_bytes
        from ..cuda.groupby.hgb import HashTable
        from ..cuda.runtime import fits

        _GROUP_BY_NAMES = (slot_bytes, HashTable, fits)
    return _GROUP_BY_NAMES


def _finish_group_by(keys, inputs, read) -> Choice:
    """The group-by planner's rules over the launched sample (``read``; None for no keys)."""
    slot_bytes, HashTable, fits = _group_by_modules()
    # a small sample first: the skew, the groups when it shows every one twice, and from rows
    # drawn at random whether the groups surely pass the bound of shared memory; only if neither
    # answers, HGB's own build, capped at that bound, counts them exactly up to it (the rules'
    # first test) and is kept for HGB.  At 2^24 rows the planner's time is host time (each CuPy
    # call 2-20 us, a round trip 30-50, against PGB-TR's 0.9-1.4 ms on an H200): the capped
    # build's launches and sync, launched with the sample, had cost PGB-TR 9% at 2^16 groups,
    # where the draws now answer alone (3%), and a few groups 3-6% more (the two syncs' round
    # trips; docs/BENCHMARKS.md).  HyperLogLog's pass over every key had cost 19% of HGB's 3 ms
    # at 2^28 rows.  The sample is launched first (launch_gpu_group_by_plan), the planner's and
    # the caller's Python run while it counts.
    n = int(keys.size)
    dev = device_model()
    sb = slot_bytes(inputs)
    cap = max(1, shared_groups(sb, dev))
    widths = [i.values.dtype.itemsize for i in inputs if i.values is not None]
    est = GroupByEstimate(n, 0, keys.dtype.itemsize, widths, sb, 0.0, "sample (every group seen twice)", 0.0)
    # no counting table larger than a quarter of the free memory
    room = lambda c: fits(4 * HashTable.nbytes(c, keys.dtype.itemsize, capped=True))  # noqa: E731
    table, smp = None, Sample()
    if n:
        smp, draws = read()
        est.top_share, est.hot_share = smp.top_share, smp.repeated_share
        _, top = hgb_groups_limits(est, dev)
        if more_groups_than(draws, top):  # PGB sketches the groups in its first radix pass
            est.groups, est.sketched = top + 1, 0.0
            est.method = f"more than {top:,} ({draws.distinct:,} distinct keys in {draws.size:,} random rows)"
        elif smp.groups is not None and draws is not None and draws.distinct <= smp.groups:
            # few groups, every one seen twice, and no other among the random rows (hot keys
            # over a tail of rare ones would show a few): HGB sizes its table by them
            est.groups = smp.groups
        elif room(cap):
            table = HashTable(keys, cap=cap)  # (its state read back)
            # hot groups: caps growing 16x up to what fits L2, so that HGB gets a table near its groups
            while table.overflow and cap < top and room(min(top, cap * 16)):
                cap = min(top, cap * 16)
                table = HashTable(keys, cap=cap)
            if not table.overflow:
                est.groups, est.method = table.num_groups, "hash table (exact)"
            elif cap >= top:  # PGB sketches the groups in its first radix pass
                est.groups, est.sketched = cap + 1, 0.0
                est.method = f"more than {cap:,} (a hash table of {cap:,} overflowed)"
            table = None if table.overflow else table
    if table is None and keys.size and not est.groups:
        if smp.groups is not None:
            est.groups = smp.groups
        else:  # no room for a counting table: HyperLogLog over part of the keys
            sub = hll_sub(keys.size)
            est.groups, est.method = estimate_groups(keys, sub)
            est.sketched = 1 / sub
    choice = choose_group_by(est, dev)
    choice.estimate = est
    choice.table = table if choice.algorithm == "hgb" else None
    return choice
