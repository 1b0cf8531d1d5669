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


def zipf_keys(n: int, z: float, seed: int) -> np.ndarray:
    """n int32 keys in [0, n) whose ranks follow Zipf's law with exponent ``z`` (inverse CDF of the
    continuous power law; z = 0 is uniform), key k the rank k + 1 (paper 000 Fig. 12's skew)."""
    import cupy as cp

    u = cp.random.RandomState(seed).random_sample(n)
    if z == 0:
        ranks = u * n
    elif z == 1:
        ranks = cp.exp(u * np.log(n))
    else:
        ranks = ((n ** (1 - z) - 1) * u + 1) ** (1 / (1 - z))
    out = cp.clip(cp.floor(ranks).astype(cp.int64) - (0 if z == 0 else 1), 0, n - 1).astype(cp.int32).get()
    del u, ranks
    return out


def bench_hybrid(log2_sizes: list[int], gpu_counts: list[int], limit: str, inner: list[str], runs: int,
                 streams: int = 3, seed: int = 42, log=print, base: dict | None = None,
                 zipf: list[float] = (0.0,), output_ratios: list[int] = (1,)) -> list[dict]:
    """One record a (size, Zipf exponent of S's keys, output ratio, GPUs, in-core join): the
    hybrid join's SUM over int32 tuples (``inner`` "gsm": the global sort-merge join instead).
    Output ratio k (paper 000 Fig. 11): R's keys folded onto n/k values, each held by k rows, so
    every S row matches k of them: k|S| pairs, the SUM k times S's."""
    import cupy as cp

    from ..outofcore.budget import parse_bytes
    from ..plan.placement import plan_placement
    from ..plan.streaming import stream_join
    from .out_of_core import make_relations

    records = []
    budget = parse_bytes(limit)
    for log2_n, z, k in [(a, b, c) for a in log2_sizes for b in zipf for c in output_ratios]:
        rk, rp, sk, sp = make_relations(log2_n, seed, item_bytes=4)
        if z:
            sk = zipf_keys(rk.size, z, seed)  # every key still matches one R row: the SUM is known
        n = rk.size
        if k > 1:
            rk, sk = rk % (n // k), sk % (n // k)  # n/k keys, k R rows each
        want = k * int(sp.sum(dtype=np.int64))
        for d in gpu_counts:
            ids = list(range(d))
            for algo in inner:
                pl = plan_placement([n, n], [8, 8], budget, gpus=d, force_out_of_core=True)
                times, stats = [], None
                for r in range(runs + 1):
                    t0 = time.perf_counter()
                    res = stream_join([rk, rp], [sk, sp], "inner", pl, ids, algorithm=algo, memory_limit=budget,
                                      aggregate="sum", streams=streams)
                    dt = time.perf_counter() - t0
                    if res.total != want or res.rows != k * n:
                        raise AssertionError(f"hybrid on {d} GPUs got {res.rows}, {res.total} at 2^{log2_n}; "
                                             f"want {k * n}, {want}")
                    if r:  # the first run compiles and pins the staging buffers
                        times.append(dt)
                        stats = res.stats
                    del res
                    for g in ids:
                        with cp.cuda.Device(g):
                            cp.get_default_memory_pool().free_all_blocks()
                med = float(np.median(times))
                name = "gsm" if algo == "gsm" else "hybrid" if d > 1 else "triton"
                rec = {**(base or {}), "benchmark": "multi-gpu", "algorithm": name,
                       "inner": algo, "gpus": d, "workload": {"log2_r": log2_n, "log2_s": log2_n, "tuple_bytes": 8,
                                                              "memory_limit": limit, "mode": "sum", "zipf": z,
                                                              "output_ratio": k},
                       "streams": streams, "runs": len(times), "median_s": med, "min_s": min(times),
                       "max_s": max(times), "throughput_g_per_s": 2 * n / med / 1e9, "correct": True,
                       **{k: stats.get(k) for k in ("pass1_bits", "cache_bytes", "spill_bytes", "h2d_bytes",
                                                    "d2h_bytes", "p2p_bytes", "split_partitions")},
                       "phases_s": stats["phases"], "predicted_s": stats.get("predicted_phases"),
                       "predicted_calibrated_s": None if algo == "gsm" else pl.predict(0, _rates(base, d)),
                       "per_gpu": stats.get("per_gpu")}
                records.append(rec)
                ph = " ".join(f"{k}={v:.2f}" for k, v in stats["phases"].items())
                pr = " ".join(f"{k}={v:.2f}" for k, v in (rec["predicted_calibrated_s"] or {}).items())
                loads = [g["pair_bytes"] for g in stats.get("per_gpu") or [] if "pair_bytes" in g]
                if loads:
                    log(f"  per-GPU pair bytes (max/mean) {max(loads) / (sum(loads) / len(loads)):.3f}")
                log(f"2^{log2_n} z={z} out={k}x x{d} {algo}: {med:.2f} s ({2 * n / med / 1e9:.2f} G t/s) measured {ph}; "
                    f"predicted {pr or '-'}; spill {stats.get('spill_bytes', 0) / 1e9:.1f} GB "
                    f"p2p {stats.get('p2p_bytes', 0) / 1e9:.1f} GB")
        del rk, rp, sk, sp
    return records


def _rates(base: dict | None, d: int) -> dict | None:
    """The link rates measured in this run (bytes/s) for ``Placement.predict`` on ``d`` GPUs."""
    links = (base or {}).get("links")
    if not links:
        return None
    out = {"pcie": links["h2d_gpu0_GBps"] * 1e9,
           "host_in": links["host_in_1_GBps" if d == 1 else "host_in_all_GBps"] * 1e9}
    if "p2p_GBps" in links:
        out["p2p"] = links["p2p_GBps"] * 1e9
    return out


def bench_ring(log2_sizes: list[int], width: int, gpu_counts: list[int], runs: int, log=print,
               base: dict | None = None) -> list[dict]:
    """One record a (size, GPUs): join_where's band join through the ring."""
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
                   **{k: stats.params.get(k) for k in ("rounds", "h2d_bytes", "p2p_bytes", "candidates")},
                   "per_gpu": stats.params.get("per_gpu")}
            records.append(rec)
            log(f"band 2^{log2_n} w={width} x{d}: {med:.2f} s, match (ring) {rec['match_s']:.3f} s, "
                f"{want:,} rows")
    return records


def bench_multi_gpu(log2_sizes: list[int], gpu_counts: list[int], limit: str, inner: list[str], band_log2: list[int],
                    band_width: int, runs: int, streams: int = 3, log=print, zipf: list[float] = (0.0,),
                    output_ratios: list[int] = (1,)) -> list[dict]:
    """The link ceilings, then the hybrid join and the ring's band join over ``gpu_counts``."""
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
                           zipf=zipf, output_ratios=output_ratios) if log2_sizes else []
    if band_log2:
        records += bench_ring(band_log2, band_width, gpu_counts, runs, log=log, base=base)
    return records
