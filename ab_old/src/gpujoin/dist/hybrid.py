"""Paper 000's hybrid join on the GPUs of one host: radix partition on every GPU, then each
partition pair joined in core on one GPU, the pairs spread over the GPUs.

It is the Triton join (``outofcore/triton.py``) with its passes spread over D GPUs, one host
thread each with its own streams and pinned buffers (``devices.on_each``):

- pass 1: the chunks of R, then of S, go round-robin to the GPUs (chunk c to GPU c mod D, paper
  000 §3.1); each GPU partitions its chunks on the same hash bits into its own cache, and what
  its cache cannot hold spills to pinned host memory;
- pass 2: the partition pairs go to the GPUs largest first, each to the next GPU free to take
  one (dynamic list scheduling, in the spirit of paper 000 §4.4's load balance: a GPU slowed
  by its links or by the interpreter lock takes fewer bytes, and the GPUs finish together); each GPU
  gathers its pairs' pieces from its own cache, from the other GPUs' caches over the peer links
  (NVLink), and from the spill over its PCIe link, and joins them with an in-core algorithm
  (paper 000 sorts and merges, ``smj-tr``; PHJ-TR is gpujoin's faster default).  A pair past a
  GPU's budget (skew) is joined in blocks as in the Triton join, never a crash.

Every join type of the Triton join works: the partitions hold disjoint keys.  Each GPU's output
goes to its own host columns (concatenated at the end) or, with a ``consumer``, to the consumer
under a lock.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ..outofcore.partition import PartitionedRelation
from ..outofcore.stream import concatenate
from ..outofcore.triton import MODES, JoinResult, PartitionQueue, TritonJoin
from ..plan.placement import Placement
from .devices import enable_peer_access, two_passes


def assign_partitions(pair_bytes: np.ndarray, workers: int) -> list[list[int]]:
    """Partition ids per worker: the non-empty pairs, largest first, each to the worker with the
    fewest bytes so far (LPT scheduling: within 4/3 of the best makespan)."""
    loads = [0] * workers
    out: list[list[int]] = [[] for _ in range(workers)]
    for p in np.argsort(-pair_bytes, kind="stable"):
        if pair_bytes[p] == 0:
            break
        w = min(range(workers), key=loads.__getitem__)
        out[w].append(int(p))
        loads[w] += int(pair_bytes[p])
    return [sorted(o) for o in out]


def _merged(rels: list[PartitionedRelation]) -> PartitionedRelation:
    """One relation over the pieces of every GPU's pass 1 (each GPU's arena stays its own)."""
    return PartitionedRelation(rels[0].bits, rels[0].dtypes, [pc for r in rels for pc in r.pieces])


def _concat_columns(parts: list[tuple]) -> tuple:
    """(values, valid) columns of the workers as one: validity made where any part has one."""
    values = concatenate([v for v, _ in parts], parts[0][0].dtype)
    if all(m is None for _, m in parts):
        return values, None
    return values, np.concatenate([np.ones(v.size, bool) if m is None else m for v, m in parts])


def hybrid_join(build_cols: list[np.ndarray], probe_cols: list[np.ndarray], mode: str, placement: Placement,
                gpus: list[int], *, algorithm: str = "phj-tr", emit_keys: bool = False, aggregate: str | None = None,
                streams: int = 3, consumer=None, memory_limit: int | None = None,
                transfer_only: bool = False) -> JoinResult:
    """The hybrid join of host relations R (build) and S (probe) on the GPUs ``gpus``.

    Parameters
    ----------
    build_cols, probe_cols, mode, emit_keys, aggregate, streams, consumer, transfer_only : as
        :func:`gpujoin.outofcore.triton.triton_join` (key first, int32/int64, no nulls)
    placement : ``plan_placement(..., gpus=len(gpus))``: each GPU's budget, chunk and cache
    gpus : device ids, one host thread each (an id may repeat: several workers on one GPU)
    algorithm : the in-core join of each partition pair ("smj-tr" is the paper's sort-merge)
    memory_limit : each GPU's cap on CuPy's pool (bytes), None for none

    Returns
    -------
    JoinResult with ``stats`` of the whole join (bytes summed over GPUs; ``p2p_bytes`` read over
    peer links) and ``per_gpu``: each GPU's partitions (those it took from the shared queue),
    pair bytes, output rows and pass times.

    Raises
    ------
    MemoryError
        A GPU's budget cannot hold the working set, or host memory the spill or output.

    References
    ----------
    Paper 000 (Rui et al., multi-GPU joins) §3.3 and §4.4; paper 004 §5 for the passes.
    """
    from ..outofcore.budget import check_host

    if mode not in MODES:
        raise ValueError(f"unknown join mode {mode!r}; valid: {list(MODES)}")
    if placement.bits == 0:
        raise ValueError("the hybrid join partitions: plan it with gpus > 1 or force_out_of_core")
    if placement.spill_bytes:
        check_host(placement.spill_bytes, f"the hybrid join's spill of {placement.spill_bytes:,} bytes (pinned)",
                   "raise memory_limit or use more GPUs so that more stays in GPU memory")
    d = len(gpus)
    enable_peer_access(gpus)
    lock = threading.Lock()  # one output block at a time to the consumer

    def shared(*block):  # one block at a time reaches the caller's consumer
        with lock:
            consumer(*block)

    workers: list = [None] * d  # made in each GPU's thread: their streams belong to that GPU
    chunk = placement.chunk_rows
    starts = [(list(range(g * chunk, build_cols[0].size, d * chunk)), list(range(g * chunk, probe_cols[0].size,
                                                                                 d * chunk))) for g in range(d)]
    rels: list = [None] * d

    def first(g):
        w = workers[g] = TritonJoin(placement, algorithm, emit_keys, aggregate, streams, consumer and shared,
                                    transfer_only)
        w.out_bytes = w.open_sink(build_cols, probe_cols, mode, share=1 / d)
        rels[g] = w.pass1(build_cols, probe_cols, starts[g])

    def between(_):
        R, S = _merged([r[0] for r in rels]), _merged([r[1] for r in rels])
        rsz, ssz = R.sizes(), S.sizes()
        pair_bytes = rsz * R.width + ssz * S.width
        # largest first, to whichever GPU is free (a GPU's pieces lie in every GPU's cache: any may take any)
        return {"R": R, "S": S, "rsz": rsz, "ssz": ssz,
                "queue": PartitionQueue(np.argsort(-pair_bytes, kind="stable")[:int(np.count_nonzero(pair_bytes))])}

    def second(g, plan):
        w = workers[g]
        w.pass2(plan["R"], plan["S"], mode, plan["queue"])
        t = time.perf_counter()
        cols = w.sink.columns()
        w.transfer.phases["assemble"] = time.perf_counter() - t
        return cols, plan, w.sink.total if aggregate else None  # read on its own GPU

    t0 = time.perf_counter()
    try:
        done = two_passes(gpus, first, between, second, memory_limit)
    finally:
        for r in rels:
            for rel in r or ():
                rel.close()
    cols, plan = [c for c, _, _ in done], done[0][1]
    t2 = time.perf_counter()
    key = concatenate([c[0] for c in cols], build_cols[0].dtype) if cols[0][0] is not None else None
    build = [_concat_columns([c[1][i] for c in cols]) for i in range(len(cols[0][1]))]
    probe = [_concat_columns([c[2][i] for c in cols]) for i in range(len(cols[0][2]))]
    t3 = time.perf_counter()
    R, S, rsz, ssz = plan["R"], plan["S"], plan["rsz"], plan["ssz"]
    share = [w.joined for w in workers]
    import cupy as cp

    with cp.cuda.Device(gpus[0]):
        stats = workers[0].stats([R, S], workers[0].out_bytes * d)
    each = [stats]
    for g, w in enumerate(workers[1:], 1):  # once a GPU, on its device: each reads its own pool
        with cp.cuda.Device(gpus[g]):
            each.append(w.stats([], 0))
    for k in ("h2d_bytes", "d2h_bytes", "blocks", "split_partitions", "pass1_direct_bytes"):
        stats[k] = sum(e[k] for e in each)
    stats["peak_gpu_bytes"] = max(e["peak_gpu_bytes"] for e in each)
    stats["p2p_bytes"] = sum(w.transfer.p2p for w in workers)
    stats["gpus"] = list(gpus)
    stats["algorithm"] = "hybrid"
    pass1 = max(w.transfer.phases["pass1"] for w in workers)
    stats["phases"] = {"pass1": pass1, "pass2": t2 - t0 - pass1, "assemble": t3 - t2}
    stats["per_gpu"] = [{"device": gpus[g], "partitions": len(share[g]),
                         "pair_bytes": int(sum(rsz[p] * R.width + ssz[p] * S.width for p in share[g])),
                         "rows": w.sink.rows, "h2d_bytes": w.transfer.h2d, "p2p_bytes": w.transfer.p2p,
                         "phases": dict(w.transfer.phases)} for g, w in enumerate(workers)]
    rows = sum(w.sink.rows for w in workers)
    total = sum(t for _, _, t in done) if aggregate else None
    return JoinResult(key, build, probe, rows, total, stats)
