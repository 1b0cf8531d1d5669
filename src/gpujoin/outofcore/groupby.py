"""Out-of-core group-by on one GPU: hash-partition the rows by key in pass 1 into the hybrid
cache (``outofcore/partition.py``, as the Triton join does), then aggregate each partition in
core with gpujoin's GPU group-by (HGB, PGB, SGB).  A group's rows all land in one partition, so
the partitions' results are disjoint and their concatenation is the answer.

A partition larger than its share of the budget (a key that holds a large part of the rows) is
aggregated in row ranges, and the ranges' partial aggregates are merged on the host (counts and
sums add, minima and maxima fold; for ``n_unique``, each range's distinct (key, value) pairs,
deduplicated again): never a crash.

Source: paper 003 §2 (the in-core group-by), paper 004 §5 (the partitioned, cached and spilled
layout), adapted to aggregation.
"""

from __future__ import annotations

import time

import numpy as np

from ..plan.placement import PASS2_FACTOR, Placement, cached_chunks, slack
from .budget import check_host
from .. import progress
from .partition import TransferStats, partition_pass
from .stream import Streams, Uploader

#: How partial aggregates of one group merge.
_MERGE = {"count": "sum", "sum": "sum", "sum_lo": "sum", "min": "min", "max": "max"}


def _merge_partials(keys: list[np.ndarray], parts: list[list[dict]], pairs: list[dict] | None = None):
    """Group the partial results of several row ranges of one partition again (host); ``pairs``:
    per range, input -> its distinct (keys, values) pairs, whose union gives the n_unique."""
    allk = np.concatenate(keys)
    uniq, inv = np.unique(allk, return_inverse=True)
    merged = []
    for i in range(len(parts[0])):
        out = {}
        if pairs and i in pairs[0]:
            out["n_unique"] = _distinct_counts(uniq, [p[i] for p in pairs])
        # a range where a group's values are all null holds no minimum or maximum for it (a
        # float's came back NaN, and NaN won every fold after it): only ranges that counted a value
        seen = np.concatenate([p[i]["count"] for p in parts]) > 0 if "count" in parts[0][i] else None
        for name in parts[0][i]:
            vals = np.concatenate([p[i][name] for p in parts])
            how = _MERGE[name]
            if how == "sum":
                acc = np.zeros(uniq.size, vals.dtype)
                np.add.at(acc, inv, vals)
            else:
                if vals.dtype.kind == "f":
                    fill = np.inf if how == "min" else -np.inf
                else:
                    info = np.iinfo(vals.dtype)
                    fill = info.max if how == "min" else info.min
                acc = np.full(uniq.size, fill, vals.dtype)
                at, v = (inv, vals) if seen is None else (inv[seen], vals[seen])
                (np.minimum if how == "min" else np.maximum).at(acc, at, v)
            out[name] = acc
        merged.append(out)
    return uniq, merged


def _distinct_counts(uniq: np.ndarray, pairs: list[tuple]) -> np.ndarray:
    """int64 (len(uniq),): the distinct values of each key of ``uniq`` (sorted) over every range's
    distinct (keys, values) pairs."""
    k = np.concatenate([p[0] for p in pairs])
    v = np.concatenate([p[1] for p in pairs])
    order = np.lexsort((v, k))
    k, v = k[order], v[order]
    first = np.ones(k.size, bool)
    first[1:] = (k[1:] != k[:-1]) | (v[1:] != v[:-1])
    kk, counts = np.unique(k[first], return_counts=True)
    out = np.zeros(uniq.size, np.int64)
    out[np.searchsorted(uniq.astype(np.int64), kk)] = counts
    return out


def agg_columns(keys: np.ndarray, inputs: list[tuple]) -> tuple[list[np.ndarray], list[tuple]]:
    """The host columns pass 1 partitions (key first, then each input's values and validity) and,
    per input, (values column index or None, validity column index or None, ops)."""
    cols, where = [keys], []
    for values, valid, ops in inputs:
        vi = mi = None
        if values is not None:
            vi = len(cols)
            cols.append(values)
        if valid is not None:
            mi = len(cols)
            cols.append(valid)
        where.append((vi, mi, ops))
    return cols, where


def partition_rows(cols: list[np.ndarray], placement: Placement, st: Streams, transfer: TransferStats,
                   starts: list[int] | None = None):
    """Pass 1 of the group-by on the current GPU: every chunk, or those beginning at ``starts``."""
    n = cols[0].size
    width = sum(c.dtype.itemsize for c in cols)
    mine = list(range(0, n, placement.chunk_rows)) if starts is None else starts
    sizes = [min(placement.chunk_rows, n - a) * width for a in mine]
    uploader = Uploader(st, Uploader.slot_size(placement.chunk_rows * width, len(cols)))
    return partition_pass(cols, placement.bits, placement.chunk_rows,
                          cached_chunks(len(mine), sizes, placement.cache_bytes), st, uploader, transfer, "rows", starts)


class PartitionAggregator:
    """Pass 2 of the group-by on the current GPU: partitions aggregated in core one at a time
    (in row ranges when over their share, the partial results merged on the host)."""

    def __init__(self, algorithm: str, where: list[tuple], placement: Placement, st: Streams, transfer: TransferStats):
        self.algorithm, self.where, self.placement, self.st, self.transfer = algorithm, where, placement, st, transfer
        self.spent = {"fetch": 0.0, "aggregate": 0.0, "resolve": 0.0, "run": 0.0, "download": 0.0}
        self.chosen: set = set()
        self.decided: dict = {}
        self.keys: list = []
        self.columns: list = []

    def _aggregate(self, dcols, split: bool = False):
        """(keys, per input: accumulator -> host array, per n_unique input: its distinct pairs when
        ``split`` (a range of a partition), else counted as the accumulator "n_unique")."""
        import cupy as cp

        from ..cuda.groupby import AggInput, run
        from ..cuda.groupby.distinct import count_distinct, distinct_pairs

        dk = dcols[0]
        agg = [AggInput(None if vi is None else dcols[vi], None if mi is None else dcols[mi],
                        tuple(o for o in ops if o != "n_unique") or ("count",))
               for vi, mi, ops in self.where]
        algo, groups, table = self.algorithm, None, None
        ta = time.perf_counter()
        if algo == "auto":  # decided on the first partition: the others are alike (hashed keys)
            if "algo" not in self.decided:
                from ..plan.auto import resolve_gpu_group_by

                choice = resolve_gpu_group_by(dk, [a for a in agg if a.values is not None] or agg)
                groups = choice.estimate.groups_for(choice.algorithm)  # None: PGB sketches them itself
                self.decided["per_row"] = None if groups is None else groups / max(1, dk.size)
                self.decided["algo"] = choice.algorithm
                table = choice.table  # HGB's stage 1 of this partition, built while planning
            algo, per_row = self.decided["algo"], self.decided["per_row"]
            groups = None if per_row is None else max(1, int(per_row * dk.size))
        tb = time.perf_counter()
        self.chosen.add(algo)
        res = run(algo, dk, agg, groups_estimate=groups, table=table)
        self.st.compute.synchronize()
        tc = time.perf_counter()
        cols = [{k: cp.asnumpy(v) for k, v in c.items()} for c in res.columns]
        pairs = {}
        for i, (vi, mi, ops) in enumerate(self.where):
            if "n_unique" in ops:  # (a group's rows all lie in this partition, or in its ranges)
                valid = None if mi is None else dcols[mi]
                if split:
                    pairs[i] = tuple(cp.asnumpy(a) for a in distinct_pairs(dk, dcols[vi], valid))
                else:
                    cols[i]["n_unique"] = cp.asnumpy(count_distinct(dk, dcols[vi], valid, res.keys))
        host = cp.asnumpy(res.keys), cols, pairs
        self.spent["resolve"] += tb - ta
        self.spent["run"] += tc - tb
        self.spent["download"] += time.perf_counter() - tc
        return host

    def run(self, rel, partitions) -> None:
        import cupy as cp

        pl, st = self.placement, self.st
        psz = rel.sizes()
        limit = max(1, int((pl.budget // 2 - slack(pl.budget)) // PASS2_FACTOR))
        step = max(1, limit // rel.width)
        shown = progress.task("pass 2: aggregate partitions" if pl.bits else "aggregate",
                              int(sum(psz[p] for p in partitions)))
        for p in partitions:
            rows = int(psz[p])
            if rows == 0:
                continue
            shown.advance(rows)
            parts_k, parts_c, parts_d = [], [], []
            for lo in range(0, rows, step):  # one range unless the partition is over its share
                with st.compute:
                    ta = time.perf_counter()
                    dcols, _ = rel.fetch(p, lo, min(rows, lo + step), st.compute, stats=self.transfer)
                    st.compute.synchronize()
                    tb = time.perf_counter()
                    k, c, d = self._aggregate(dcols, split=rows > step)
                    self.spent["fetch"] += tb - ta
                    self.spent["aggregate"] += time.perf_counter() - tb
                parts_k.append(k)
                parts_c.append(c)
                parts_d.append(d)
                del dcols
                cp.get_default_memory_pool().free_all_blocks()  # no cached blocks left to fragment the cap
            if len(parts_k) > 1:
                k, c = _merge_partials(parts_k, parts_c, parts_d)
            self.keys.append(k)
            self.columns.append(c)
        st.synchronize()


def assemble(aggregators: list[PartitionAggregator], key_dtype, inputs: int):
    """The groups of every partition: (keys (g,), [per input: accumulator -> (g,)])."""
    keys = [k for a in aggregators for k in a.keys]
    cols = [c for a in aggregators for c in a.columns]
    gkeys = np.concatenate(keys) if keys else np.empty(0, key_dtype)
    merged = [{name: np.concatenate([c[i][name] for c in cols]) for name in (cols[0][i] if cols else {})}
              for i in range(inputs)]
    return gkeys, merged


def group_by_out_of_core(algorithm: str, keys: np.ndarray, inputs: list[tuple], placement: Placement, *,
                         streams: int = 3):
    """Group host ``keys`` and aggregate ``inputs`` partition by partition on the GPU.

    Parameters
    ----------
    algorithm : a GPU group-by ("hgb", "pgb-tr", ...; "auto" chooses per partition)
    keys : int32 or int64 (n,) host array, nulls already encoded as a value
    inputs : per aggregate input, (values (n,) int32/int64/float32/float64 host array or None to
        count rows, validity uint8 (n,) or None, ops: subset of count, sum, min, max, n_unique)
    placement : from ``plan.placement.plan_placement`` (pass-1 bits, chunk, cache)

    Returns
    -------
    (keys (g,), [per input: dict accumulator -> host array (g,)], stats dict), groups in
    unspecified order; accumulators as ``cuda.groupby.GroupByOutput``'s, and "n_unique" (int64:
    distinct non-null values) where asked.

    Raises
    ------
    MemoryError
        The budget cannot hold the working set, or host memory the spill.
    """
    import cupy as cp

    from ..plan.calibrate import link_rates

    cols, where = agg_columns(keys, inputs)
    if placement.spill_bytes:
        check_host(placement.spill_bytes, "the group-by's spill", "raise memory_limit")
    st = Streams(streams)
    transfer = TransferStats()
    t0 = time.perf_counter()
    rel = None
    try:
        rel = partition_rows(cols, placement, st, transfer)
        t1 = time.perf_counter()
        agg = PartitionAggregator(algorithm, where, placement, st, transfer)
        agg.run(rel, range(rel.fanout))
        t2 = time.perf_counter()
    finally:
        if rel is not None:
            rel.close()
    gkeys, merged = assemble([agg], keys.dtype, len(inputs))
    stats = {"placement": placement.placement, "pass1_bits": placement.bits, "chunk_rows": placement.chunk_rows,
             "budget_bytes": placement.budget, "cache_bytes": rel.bytes(True), "spill_bytes": rel.bytes(False),
             "h2d_bytes": transfer.h2d, "d2h_bytes": transfer.d2h, "partition_algorithms": sorted(agg.chosen),
             "peak_gpu_bytes": int(cp.get_default_memory_pool().total_bytes()),
             "phases": {"pass1": t1 - t0, "pass2": t2 - t1, **{f"pass2_{k}": v for k, v in agg.spent.items()}},
             "predicted_phases": placement.predict(0, link_rates())}
    return gkeys, merged, stats
