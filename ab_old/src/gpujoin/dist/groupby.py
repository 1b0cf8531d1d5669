"""The out-of-core group-by on the GPUs of one host, shaped as the hybrid join (paper 000's
partition-then-spread, applied to aggregation): each GPU hash-partitions every D-th chunk of
the rows into its own cache (the rest spilled to pinned host memory); then the partitions are
spread over the GPUs by size, each GPU gathering its partitions' pieces from every GPU's cache
(peer links) and the spill and aggregating them in core.  A group's rows all hash to one
partition, so the GPUs' groups are disjoint and their concatenation is the answer.
"""

from __future__ import annotations

import time

import numpy as np

from ..outofcore.groupby import PartitionAggregator, agg_columns, assemble, partition_rows
from ..outofcore.partition import PartitionedRelation, TransferStats
from ..outofcore.stream import Streams
from ..plan.placement import Placement
from .devices import enable_peer_access, two_passes
from .hybrid import assign_partitions


def group_by_multi_gpu(algorithm: str, keys: np.ndarray, inputs: list[tuple], placement: Placement, gpus: list[int],
                       *, streams: int = 3, memory_limit: int | None = None):
    """``outofcore.groupby.group_by_out_of_core`` on the GPUs ``gpus`` (one host thread each; an
    id may repeat).  ``placement``: ``plan_placement(..., gpus=len(gpus))``; ``memory_limit``
    each GPU's cap.  Returns (keys, columns, stats) as that function, stats with ``per_gpu``
    (partitions, rows aggregated, pass times) and ``p2p_bytes``.

    Raises
    ------
    MemoryError
        A GPU's budget cannot hold the working set, or host memory the spill.
    """
    from ..outofcore.budget import check_host
    from ..plan.calibrate import link_rates

    cols, where = agg_columns(keys, inputs)
    if placement.spill_bytes:
        check_host(placement.spill_bytes, "the group-by's spill", "raise memory_limit or use more GPUs")
    d = len(gpus)
    enable_peer_access(gpus)
    chunk = placement.chunk_rows
    n = keys.size
    rels: list = [None] * d
    aggs: list = [None] * d
    times: list = [None] * d

    def first(g):
        st, transfer = Streams(streams), TransferStats()
        t0 = time.perf_counter()
        rels[g] = partition_rows(cols, placement, st, transfer, list(range(g * chunk, n, d * chunk)))
        aggs[g] = PartitionAggregator(algorithm, where, placement, st, transfer)
        times[g] = [time.perf_counter() - t0, 0.0]

    def between(_):
        union = PartitionedRelation(placement.bits, rels[0].dtypes, [pc for r in rels for pc in r.pieces])
        sizes = union.sizes()
        return union, sizes, assign_partitions(sizes * union.width, d)

    def second(g, plan):
        union, _, share = plan
        t0 = time.perf_counter()
        aggs[g].run(union, share[g])
        times[g][1] = time.perf_counter() - t0
        return plan

    t0 = time.perf_counter()
    try:
        union, sizes, share = two_passes(gpus, first, between, second, memory_limit)[0]
    finally:
        for r in rels:
            if r is not None:
                r.close()
    t1 = time.perf_counter()
    gkeys, merged = assemble(aggs, keys.dtype, len(inputs))
    pass1 = max(t[0] for t in times)
    stats = {"placement": placement.placement, "pass1_bits": placement.bits, "chunk_rows": chunk,
             "budget_bytes": placement.budget, "cache_bytes": union.bytes(True), "spill_bytes": union.bytes(False),
             "h2d_bytes": sum(a.transfer.h2d for a in aggs), "d2h_bytes": sum(a.transfer.d2h for a in aggs),
             "p2p_bytes": sum(a.transfer.p2p for a in aggs), "gpus": list(gpus),
             "partition_algorithms": sorted(set().union(*(a.chosen for a in aggs))),
             "phases": {"pass1": pass1, "pass2": t1 - t0 - pass1, "assemble": time.perf_counter() - t1},
             "predicted_phases": placement.predict(0, link_rates()),
             "per_gpu": [{"device": gpus[g], "partitions": len(share[g]), "rows": int(sizes[share[g]].sum()),
                          "pass1": times[g][0], "pass2": times[g][1]} for g in range(d)]}
    return gkeys, merged, stats
