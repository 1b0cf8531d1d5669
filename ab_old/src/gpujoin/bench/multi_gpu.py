"""``gpujoin bench multi-gpu``: paper 000's workloads on the GPUs of one host.

- The hybrid join (``dist/hybrid.py``): int32 key + int32 payload (paper 000's tuples), R a
  shuffled dense key, S uniform into it, |R| = |S|, SUM mode (no output rows), on 1 and more
  GPUs under a ``memory_limit`` per GPU; the measured passes beside the placement's predicted
  ones (paper 004's transfer model with the rates measured here, ``Placement.predict``).
- The ring's band join (``dist/nested_loop.py``): ``join_where`` of |a - b| <= w on 1 and more
  GPUs; the match phase (the ring) and the whole call.
- The ceilings, measured in the same run (``plan.calibrate.measure_links``): pinned PCIe on each
  GPU alone and on all at once, the staging copy, and the peer-to-peer copy between GPUs 0 and 1.
"""

from __future__ import annotations

import time

import numpy as np

from .runner import commit, device_name


def zipf_keys(n: int, z: float, seed: int, count: int | None = None) -> np.ndarray:
    """``count`` (default n) int32 keys in [0, n) whose ranks follow Zipf's law with exponent
    ``z`` (inverse CDF of the continuous power law; z = 0 is uniform), key k the rank k + 1
    (paper 000 Fig. 12's skew)."""
    import cupy as cp

    u = cp.random.RandomState(seed).random_sample(n if count is None else count)
    if z == 0:
        ranks = u * n
    elif z == 1:
        ranks = cp.exp(u * np.log(n))
    else:
        ranks = ((n ** (1 - z) - 1) * u + 1) ** (1 / (1 - z))
    out = cp.clip(cp.floor(ranks).astype(cp.int64) - (0 if z == 0 else 1), 0, n - 1).astype(cp.int32).get()
    del u, ranks
    return out


def _keep(records: list, emit, *made: dict) -> None:
    """Append ``made`` to ``records``, each handed to ``emit`` (when given) as it comes."""
    for rec in made:
        records.append(rec)
        if emit is not None:
            emit(rec)


def _sizes(log2_n: int, share: float) -> tuple[int, int]:
    """(|R|, |S|) with |R| + |S| = 2 * 2^log2_n and |R| that ``share`` of it (paper 000 Fig. 10)."""
    total = 2 << log2_n
    nr = max(1, min(total - 1, int(round(total * share))))
    return nr, total - nr


def bench_hybrid(log2_sizes: list[int], gpu_counts: list[int], limit: str, inner: list[str], runs: int,
                 streams: int = 3, seed: int = 42, log=print, base: dict | None = None,
                 zipf: list[float] = (0.0,), output_ratios: list[int] = (1,), r_shares: list[float] = (0.5,),
                 transfer_only: bool = False, peers: list[str] = (), inputs: list[str] = ("pageable",),
                 emit=None, pools: str = "cold") -> list[dict]:
    """One record a (size, |R| share, Zipf exponent of S's keys, output ratio, GPUs, in-core
    join): the hybrid join's SUM over int32 tuples (``inner`` "gsm": the global sort-merge join
    instead).  Output ratio k (paper 000 Fig. 11): R's keys folded onto |R|/k values, each held
    by k rows, so every S row matches k of them: k|S| pairs, the SUM k times S's.  ``r_shares``:
    |R| / (|R| + |S|) at the fixed sum 2 * 2^n (Fig. 10; 0.5 is |R| = |S|).

    ``transfer_only``: each hybrid or Triton record also times the same join with no in-core
    join (paper 000 Fig. 8: every copy in, to the spill and back, over the peer links, each pair
    fetched) beside the placement model's transfer prediction (``Placement.predict`` without
    its join term, with the links measured in this run).  ``peers``: out_of_core.BASELINES (e.g.
    "duckdb", "polars", "cpu-radix") on the host's cores, once a workload of uniform keys.
    ``inputs``: "pageable" and/or "pinned", the latter the four columns page-locked in place
    (``outofcore.stream.pinned_host``, paper 000's pinned inputs): the chunks' DMA reads them
    with no staging copy.  ``emit(record)``: called with each record once made (the CLI
    writes it then, so that a later failure keeps it).  ``pools``: "cold" empties every GPU's
    CuPy pool between runs (each run pays its cudaMalloc calls, as a process's first join: on
    four H200s 40 of them took 206 ms of pass 1's threads, one GPU waiting on another's),
    "warm" keeps them (a process's later joins, as cuDF under an RMM pool)."""
    import itertools

    import cupy as cp

    from ..outofcore.budget import parse_bytes
    from ..plan.placement import plan_placement
    from ..plan.streaming import stream_join
    from .out_of_core import bench_baselines, input_memory, make_relations

    records = []
    budget = parse_bytes(limit)

    def timed(ids, algo, pl, rk, rp, sk, sp, want_rows, want, label, **kw):
        times, stats = [], None
        for r in range(runs + 1):
            t0 = time.perf_counter()
            res = stream_join([rk, rp], [sk, sp], "inner", pl, ids, algorithm=algo, memory_limit=budget,
                              aggregate="sum", streams=streams, **kw)
            dt = time.perf_counter() - t0
            if not kw.get("transfer_only") and (res.total != want or res.rows != want_rows):
                raise AssertionError(f"{label} on {len(ids)} GPUs got {res.rows}, {res.total}; want {want_rows}, {want}")
            if r:  # the first run compiles and pins the staging buffers
                times.append(dt)
                stats = res.stats
            del res
            for g in ids if pools == "cold" else ():
                with cp.cuda.Device(g):
                    cp.get_default_memory_pool().free_all_blocks()
        return times, stats

    for log2_n, share, z, k in [(a, b, c, e) for a in log2_sizes for b in r_shares for c in zipf for e in output_ratios]:
        nr, ns = _sizes(log2_n, share)
        rk, rp, sk, sp = make_relations(log2_n, seed, item_bytes=4, rows=(nr, ns))
        if z:
            sk = zipf_keys(nr, z, seed, ns)  # every S key in R
        if k > 1:
            rk, sk = rk % (nr // k), sk % (nr // k)  # |R|/k keys, k R rows each
        want = k * int(sp.sum(dtype=np.int64))
        for input_kind in inputs:
            pinned_input = input_kind == "pinned"
            label = (f"2^{log2_n}" + (f" |R|:|S| = {nr:,}:{ns:,}" if nr != ns else "")
                     + (" pinned" if pinned_input else ""))
            shape = {"log2_r": log2_n, "log2_s": log2_n, "tuple_bytes": 8, "memory_limit": limit, "mode": "sum",
                     "zipf": z, "output_ratio": k, "input": input_kind, "pools": pools,
                     **({} if nr == ns else {"r_rows": nr, "s_rows": ns, "r_share": share})}
            with input_memory(input_kind, [rk, rp, sk, sp], log):
                for d, algo in itertools.product(gpu_counts, inner):
                    ids = list(range(d))
                    pl = plan_placement([nr, ns], [8, 8], budget, gpus=d, force_out_of_core=True)
                    times, stats = timed(ids, algo, pl, rk, rp, sk, sp, k * ns, want, label)
                    med = float(np.median(times))
                    name = "gsm" if algo == "gsm" else "hybrid" if d > 1 else "triton"
                    rates = _rates(base, d, pinned_input)
                    rec = {**(base or {}), "benchmark": "multi-gpu", "algorithm": name, "inner": algo, "gpus": d,
                           "workload": shape, "streams": streams, "runs": len(times), "median_s": med,
                           "min_s": min(times), "max_s": max(times), "throughput_g_per_s": (nr + ns) / med / 1e9,
                           "correct": True,
                           **{k: stats.get(k) for k in ("pass1_bits", "cache_bytes", "spill_bytes", "h2d_bytes",
                                                        "d2h_bytes", "p2p_bytes", "split_partitions")},
                           "phases_s": stats["phases"], "predicted_s": stats.get("predicted_phases"),
                           "predicted_calibrated_s": None if algo == "gsm" else pl.predict(0, rates),
                           "per_gpu": stats.get("per_gpu")}
                    ph = " ".join(f"{k}={v:.2f}" for k, v in stats["phases"].items())
                    pr = " ".join(f"{k}={v:.2f}" for k, v in (rec["predicted_calibrated_s"] or {}).items())
                    loads = [g["pair_bytes"] for g in stats.get("per_gpu") or [] if "pair_bytes" in g]
                    if loads:
                        log(f"  per-GPU pair bytes (max/mean) {max(loads) / (sum(loads) / len(loads)):.3f}")
                    log(f"{label} z={z} out={k}x x{d} {algo}: {med:.2f} s ({(nr + ns) / med / 1e9:.2f} G t/s) measured "
                        f"{ph}; predicted {pr or '-'}; spill {stats.get('spill_bytes', 0) / 1e9:.1f} GB "
                        f"p2p {stats.get('p2p_bytes', 0) / 1e9:.1f} GB")
                    if transfer_only:
                        t_times, t_stats = timed(ids, algo, pl, rk, rp, sk, sp, 0, 0, label, transfer_only=True)
                        t_med = float(np.median(t_times))
                        if algo == "gsm":  # Eqs. 4-5 over the runs it made
                            from ..plan.multi_gpu_cost import transfer_seconds

                            predicted = {"gsm": transfer_seconds("gsm", 8.0 * nr, 8.0 * ns, t_stats["build_runs"],
                                                                 t_stats["probe_runs"], d,
                                                                 _links(base, d, pinned_input))}
                        else:
                            predicted = pl.predict(0, {**(rates or {}), "gpu_join": float("inf")})
                        rec.update({"transfer_only_s": t_med, "transfer_only_phases_s": t_stats["phases"],
                                    "predicted_transfer_s": predicted})
                        err = sum(predicted.values()) / t_med - 1
                        phases = " ".join(f"{k}={v:.2f}" for k, v in t_stats["phases"].items())
                        log(f"  transfer only: {t_med:.2f} s ({phases}); predicted {sum(predicted.values()):.2f} s "
                            f"({err:+.0%}); the join's share {1 - t_med / med:.0%}")
                    _keep(records, emit, rec)
        if peers and not z and k == 1:  # the host engines once a workload (no GPU budget applies)
            _keep(records, emit, *bench_baselines(list(peers), log2_n, rk, rp, sk, sp, None, 1,
                                                  {**(base or {}), "benchmark": "multi-gpu"},
                                                  int(sp.sum(dtype=np.int64)), log))
        del rk, rp, sk, sp
    return records


def _rates(base: dict | None, d: int, pinned_input: bool = False) -> dict | None:
    """The link rates measured in this run (bytes/s) for ``Placement.predict`` on ``d`` GPUs
    (page-locked input: no staging copy)."""
    links = (base or {}).get("links")
    if not links:
        return {"host_in": float("inf")} if pinned_input else None
    out = {"pcie": links["h2d_gpu0_GBps"] * 1e9, "pcie_all": links["h2d_all_GBps"] * 1e9,
           "host_in": float("inf") if pinned_input else
           links["host_in_dma_1_GBps" if d == 1 else "host_in_dma_all_GBps"] * 1e9}
    if "p2p_GBps" in links:
        out["p2p"] = links["p2p_GBps"] * 1e9
    for k in ("duplex_1", "duplex_all"):
        if f"{k}_GBps" in links:
            out[k] = links[f"{k}_GBps"] * 1e9
    return out


def _links(base: dict | None, d: int, pinned_input: bool = False):
    """Paper 000's ``Links`` of ``d`` GPUs from the rates measured in this run (the H200 host's
    defaults without them), with the host's staging copy beside the DMA for pageable input."""
    import dataclasses

    from ..plan.multi_gpu_cost import H200_HOST, measured_links

    if not (base or {}).get("links"):  # the staging copy ran at 20-27 GB/s inside pass 1 on two H200s
        return H200_HOST if pinned_input else dataclasses.replace(H200_HOST, host_in=25e9)
    return measured_links(_rates(base, d, pinned_input), d)


def _ring_transfer(left, right, ids: list[int], runs: int, base: dict | None) -> dict:
    """The ring of join_where's band join with no block joined (paper 000 Fig. 8), median of
    ``runs``, beside Eqs. 1-3 with the links measured in this run; its columns page-locked, as
    join_where's compared columns are."""
    from ..dist.nested_loop import ring_join
    from ..outofcore.stream import pinned_host
    from ..plan.multi_gpu_cost import transfer_seconds

    a = left.column("a").to_numpy().astype(np.int64)
    lo, hi = (right.column(c).to_numpy().astype(np.int64) for c in ("lo", "hi"))
    times = []
    with pinned_host(a, lo, hi):
        for r in range(runs + 1):
            t0 = time.perf_counter()
            _, st = ring_join([a, a], [lo, hi], [">=", "<="], None, ids, transfer_only=True)
            if r:
                times.append(time.perf_counter() - t0)
    # R's one column moves once though compared twice; S's two bounds
    predicted = transfer_seconds("nl", 8 * a.size, 16 * lo.size, st["r_chunks"], st["s_chunks"], len(ids),
                                 _links(base, len(ids), pinned_input=True))
    return {"transfer_only_s": float(np.median(times)), "predicted_transfer_s": predicted,
            "transfer_only_ring_s": st["ring_s"],
            "transfer_only_fixed_s": max((g.get("started_s", 0) + g["setup_s"] for g in st["per_gpu"]), default=0.0)}


def _fresh_write_s(table) -> tuple[float, int]:
    """(seconds, bytes): the host's copy of ``table``'s fixed-width values into fresh memory with
    every copy thread, the floor of any result of that size built in host memory (its pages
    are faulted in as they are written)."""
    from ..outofcore.stream import parallel_copy

    bufs = [np.frombuffer(c.buffers()[1], np.uint8)[c.offset * c.type.byte_width:(c.offset + len(c)) * c.type.byte_width]
            for col in table.columns for c in col.chunks]
    t0 = time.perf_counter()
    for b in bufs:
        parallel_copy(np.empty_like(b), b)
    return time.perf_counter() - t0, sum(b.nbytes for b in bufs)


def bench_ring(log2_sizes: list[int], width: int, gpu_counts: list[int], runs: int, log=print,
               base: dict | None = None, transfer_only: bool = False, emit=None) -> list[dict]:
    """One record a (size, GPUs): join_where's band join through the ring; with
    ``transfer_only`` also the ring with no block joined, beside paper 000's Eqs. 1-3.
    ``emit(record)`` as :func:`bench_hybrid`'s."""
    from ..expr import col
    from ..plan.join_where import execute_join_where
    from .join_where import band_tables

    records = []
    for log2_n in log2_sizes:
        left, right, want = band_tables(log2_n, width)
        for d in gpu_counts:
            times, match, stats = [], [], None
            for r in range(runs + 1):
                t0 = time.perf_counter()
                out, st = execute_join_where(left, right, col("a") >= col("lo"), col("a") <= col("hi"),
                                             device="cuda", gpus=d)
                dt = time.perf_counter() - t0
                if out.num_rows != want:
                    raise AssertionError(f"ring on {d} GPUs gave {out.num_rows:,} rows at 2^{log2_n}, want {want:,}")
                if r == runs:
                    floor = _fresh_write_s(out)
                del out
                if r:
                    times.append(dt)
                    match.append(st.phases["match"])
                    stats = st
            med = float(np.median(times))
            rec = {**(base or {}), "benchmark": "multi-gpu", "algorithm": "ring (band)", "gpus": d,
                   "workload": {"log2_l": log2_n, "log2_r": log2_n, "band_width": width}, "runs": len(times),
                   "median_s": med, "min_s": min(times), "max_s": max(times), "match_s": float(np.median(match)),
                   "throughput_g_per_s": (2 << log2_n) / med / 1e9,
                   "output_rows": want, "correct": True, "phases_s": dict(stats.phases),
                   "output_bytes": floor[1], "fresh_write_s": floor[0],
                   **{k: stats.params.get(k) for k in ("rounds", "h2d_bytes", "p2p_bytes", "candidates")},
                   "per_gpu": stats.params.get("per_gpu")}
            log(f"band 2^{log2_n} w={width} x{d}: {med:.2f} s, match (ring) {rec['match_s']:.3f} s, "
                f"{want:,} rows; its {floor[1] / 1e9:.1f} GB written into fresh host memory alone "
                f"{floor[0]:.3f} s")
            if transfer_only:
                rec.update(_ring_transfer(left, right, list(range(d)), runs, base))
                log(f"  transfer only: {rec['transfer_only_s']:.3f} s (ring {rec['transfer_only_ring_s']:.3f} s, of "
                    f"which threads and buffers before any copy {rec['transfer_only_fixed_s']:.3f} s); "
                    f"predicted (Eqs. 1-3) {rec['predicted_transfer_s']:.3f} s")
            _keep(records, emit, rec)
    return records


def bench_multi_gpu(log2_sizes: list[int], gpu_counts: list[int], limit: str, inner: list[str], band_log2: list[int],
                    band_width: int, runs: int, streams: int = 3, log=print, zipf: list[float] = (0.0,),
                    output_ratios: list[int] = (1,), r_shares: list[float] = (0.5,), transfer_only: bool = False,
                    peers: list[str] = (), inputs: list[str] = ("pageable",), emit=None,
                    pools: str = "cold") -> list[dict]:
    """The link ceilings, then the hybrid join and the ring's band join over ``gpu_counts``
    (``emit(record)``: each record once made)."""
    from ..dist.devices import device_count
    from ..plan.calibrate import measure_links

    have = device_count()
    gpu_counts = [d for d in gpu_counts if d <= have]
    if not gpu_counts:
        raise ValueError(f"this host has {have} GPU(s); ask for --gpus up to that")
    links = measure_links(list(range(max(gpu_counts))))
    log("links: " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in links.items()))
    base = {"engine": "gpujoin", "device": f"{have} x {device_name('cuda')}", "commit": commit(),
            "date": time.strftime("%Y-%m-%d"), "links": links}
    records = bench_hybrid(log2_sizes, gpu_counts, limit, inner, runs, streams, log=log, base=base,
                           zipf=zipf, output_ratios=output_ratios, r_shares=r_shares, transfer_only=transfer_only,
                           peers=peers, inputs=inputs, emit=emit, pools=pools) if log2_sizes else []
    if band_log2:
        records += bench_ring(band_log2, band_width, gpu_counts, runs, log=log, base=base, transfer_only=transfer_only,
                              emit=emit)
    return records
