"""Paper 000 §3.1's block nested-loop join on D GPUs: the peer-to-peer ring's schedule.

R is cut into M chunks and S into N chunks.  GPUs take R chunks D at a time (GPU g the g-th of
the group); for each stage, every GPU reads a different S chunk from host memory and joins it with
its R chunk, then D - 1 ring rounds pass each S chunk to the next GPU, (g + 1) mod D, which joins
it in turn; after a stage every GPU of the group has met the stage's D S chunks.  S crosses PCIe
once per R group (M/D times, not M), and the peer links carry the rest (Eqs. 2-3).  Round t's
copies (the next chunk from the host or the previous GPU) run on the copy-in stream while round
t's pairs are joined on the compute stream (paper 000 §3.2.4).  The paper's
Algorithm 1 has confused indices; this follows its prose.  When M or N is not a multiple of D,
the last group or stage has fewer chunks: only GPUs that hold an R chunk join, and a stage with
fewer S chunks than GPUs passes empty slots round the ring (no transfer, no join).

:func:`ring_schedule` is the schedule alone, so that tests can check it covers every chunk pair
once; :func:`ring_join` runs it, one host thread a GPU, joining each chunk pair with
``gpujoin.theta`` (the sort-based band join, or the block nested loop for any θ).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Step:
    """What GPU ``gpu`` does in one round: join R chunk ``r`` with S chunk ``s``, which came from
    the host (``source`` None) or from GPU ``source`` over a peer link."""

    gpu: int
    r: int
    s: int
    source: int | None


def ring_schedule(m: int, n: int, gpus: int) -> list[list[Step]]:
    """The rounds of the ring join of M R chunks and N S chunks on ``gpus`` GPUs: each round a
    list of the steps the GPUs run at once (at most one each).

    Raises
    ------
    ValueError
        Fewer than one chunk or GPU.
    """
    if min(m, n, gpus) < 1:
        raise ValueError(f"the ring needs at least one R chunk, S chunk and GPU, got {m}, {n}, {gpus}")
    rounds: list[list[Step]] = []
    for base in range(0, m, gpus):
        active = min(gpus, m - base)  # GPUs holding an R chunk in this group
        for first in range(0, n, active):
            held = [first + g if first + g < n else None for g in range(active)]  # read from the host
            rounds.append([Step(g, base + g, held[g], None) for g in range(active) if held[g] is not None])
            for _ in range(active - 1):
                held = [held[(g - 1) % active] for g in range(active)]  # from the previous GPU
                rounds.append([Step(g, base + g, held[g], (g - 1) % active)
                               for g in range(active) if held[g] is not None])
    return [r for r in rounds if r]


def _chunks(n: int, rows: int) -> list[tuple[int, int]]:
    return [(a, min(n, a + rows)) for a in range(0, n, rows)]


def ring_join(lcols: list[np.ndarray], rcols: list[np.ndarray], ops: list[str], driver: list[int] | None,
              gpus: list[int], *, r_chunk_rows: int | None = None, s_chunk_rows: int | None = None,
              block_pairs: int = 1 << 24, streams: int = 3, memory_limit: int | None = None,
              transfer_only: bool = False):
    """The θ-join of host rows on the GPUs ``gpus`` by the peer-to-peer ring (paper 000 §3.1).

    Parameters
    ----------
    lcols, rcols : int64 host arrays (n_l,) and (n_r,), one pair a predicate (order-preserving
        values, ``plan.join_where.comparable``); the left side is R (kept), the right S (passed)
    ops : the predicates' comparisons ("<", "<=", ">", ">=", "==", "!=")
    driver : ``theta.band_plan``'s predicates for the sort-based band join of each block, or
        None for the block nested loop
    gpus : device ids, one host thread each (an id may repeat: several workers on one GPU)
    r_chunk_rows, s_chunk_rows : chunk sizes (paper 000's M); default: one R chunk and one S
        chunk a GPU (the whole ring in one stage)
    block_pairs : candidate pairs a GPU tests at once
    streams : 3 (the next round's chunk copies in while this one is joined) or 1
    memory_limit : each GPU's cap on CuPy's pool (bytes), None for none
    transfer_only : every chunk in from the host and around the ring, no block joined (no
        pairs): paper 000's transfer-only mode (Fig. 8), the time its Eq. 1-2 predict

    Returns
    -------
    (pairs, stats): the matching pairs (``outofcore.stream.Pairs``: int64 row numbers in
    page-locked segments, unspecified order; the caller closes it once read); stats with the
    rounds, bytes from the host and over peer links, each GPU's pairs and times.

    Raises
    ------
    MemoryError
        A chunk pair and its block do not fit a GPU's budget (smaller chunks: r/s_chunk_rows).
    """
    import threading
    import time

    import cupy as cp

    from ..outofcore.budget import gpu_memory_cap
    from ..outofcore.stream import Downloader, PairColumns, Pairs, Streams, Uploader, d2d_async, record
    from ..theta import band_join, nested_loop_join
    from .devices import enable_peer_access, on_each

    n_l, n_r = (int(c[0].size) if c else 0 for c in (lcols, rcols))
    d = len(gpus)
    if n_l == 0 or n_r == 0:
        return Pairs(), {"gpus": list(gpus), "r_chunks": 0, "s_chunks": 0, "rounds": 0, "streams": streams,
                         "h2d_bytes": 0, "p2p_bytes": 0, "ring_s": 0.0, "per_gpu": []}
    rch = _chunks(n_l, r_chunk_rows or -(-n_l // d))
    sch = _chunks(n_r, s_chunk_rows or -(-n_r // d))
    rounds = ring_schedule(len(rch), len(sch), d)
    steps = [[next((s for s in rnd if s.gpu == g), None) for rnd in rounds] for g in range(d)]
    enable_peer_access(gpus)
    held: list = [None] * d  # the S chunk each GPU joins this round (device arrays), for its successor
    barrier = threading.Barrier(d)
    found: list = [None] * d
    per_gpu = [{"device": gpus[g], "steps": 0, "candidates": 0, "pairs": 0, "h2d_bytes": 0, "p2p_bytes": 0,
                "join_s": 0.0, "setup_s": 0.0, "in_place_s": []} for g in range(d)]

    def work(g):
        t_in = time.perf_counter()
        st = Streams(streams)
        out = PairColumns(Downloader(st), f"join_where on GPU {gpus[g]}")
        up = Uploader(st, Uploader.slot_size(max(rch[0][1] - rch[0][0], sch[0][1] - sch[0][0]) * 8, 1))
        me = per_gpu[g]
        # the thread's start and its streams and buffers, before any byte moves: a fixed cost of
        # each call, which the transfer model does not count
        me["started_s"], me["setup_s"] = t_in - t_call, time.perf_counter() - t_in
        loaded_r = [None, None]  # (chunk index, device columns)

        def upload(cols, lo, hi):
            # a column compared twice (a band join's) moves once
            once = list({id(c): c for c in cols}.values())
            me["h2d_bytes"] += (hi - lo) * 8 * len(once)
            got = dict(zip(map(id, once), up.rows_to_device(once, lo, hi)))
            return [got[id(c)] for c in cols]

        def fetch(t):
            """Round t's R and S chunks of this GPU, copies enqueued on the copy-in stream."""
            step = steps[g][t]
            if step is None:
                return None
            if loaded_r[0] != step.r:
                loaded_r[:] = [step.r, upload(lcols, *rch[step.r])]
            if step.source is None:
                s = upload(rcols, *sch[step.s])
            else:  # the chunk the previous GPU joined last round, over the peer link
                src = held[step.source]
                once = {id(a): a for a in src}
                with st.compute:
                    to = {k: cp.empty(a.size, cp.int64) for k, a in once.items()}
                st.copy_in.wait_event(record(st.compute))
                for k, a in once.items():
                    d2d_async(to[k], a, st.copy_in)
                s = [to[id(a)] for a in src]
                me["p2p_bytes"] += int(src[0].size) * 8 * len(once)
            return step, loaded_r[1], s

        with gpu_memory_cap(memory_limit):
            try:
                nxt = fetch(0)
                for t in range(len(rounds)):
                    cur = nxt
                    st.copy_in.synchronize()
                    me["in_place_s"].append(time.perf_counter() - t_call)  # when round t's chunks arrived
                    held[g] = None if cur is None else cur[2]
                    barrier.wait()  # every GPU's round-t chunk is in place
                    nxt = fetch(t + 1) if t + 1 < len(rounds) else None
                    if cur is not None and not transfer_only:
                        step, rc, sc = cur
                        t0 = time.perf_counter()
                        r0, s0 = rch[step.r][0], sch[step.s][0]
                        with st.compute:
                            pairs = (band_join(cp, rc, sc, ops, driver, block_pairs) if driver is not None
                                     else nested_loop_join(cp, rc, sc, ops, block_pairs))
                            for a, b in pairs.blocks():  # row numbers of the whole sides, to the host
                                a += r0
                                b += s0
                                out.add(a, b, pairs.bound)  # the host copies overlap the next block
                                me["pairs"] += int(a.size)
                        me["candidates"] += pairs.bound
                        me["steps"] += 1
                        me["join_s"] += time.perf_counter() - t0
                    st.synchronize()
                    barrier.wait()  # every copy out of the round-t chunks is done
                found[g] = out.finish()
            except BaseException:
                out.close()
                barrier.abort()
                raise

    t_call = t0 = time.perf_counter()
    try:
        on_each(gpus, work)
    except BaseException:
        for f in found:
            if f is not None:
                f.close()
        raise
    elapsed = time.perf_counter() - t0
    stats = {"gpus": list(gpus), "r_chunks": len(rch), "s_chunks": len(sch), "rounds": len(rounds),
             "streams": streams, "h2d_bytes": sum(p["h2d_bytes"] for p in per_gpu),
             "p2p_bytes": sum(p["p2p_bytes"] for p in per_gpu), "ring_s": elapsed, "per_gpu": per_gpu}
    return Pairs.merge(found), stats
