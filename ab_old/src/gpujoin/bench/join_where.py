"""``gpujoin bench join-where``: the band join |a - b| <= w of paper 000's workload (int32 keys
uniform over [0, n)), as ``a >= lo`` and ``a <= hi`` with lo = b - w, hi = b + w on the right;
each record checked against the output size known by construction (every pair within w)."""

from __future__ import annotations

import time

import numpy as np

from .runner import _record, device_name


def band_tables(log2_n: int, width: int, seed: int = 7):
    """Left (a, x) and right (lo, hi, y) Arrow tables of 2^log2_n rows, and the exact output size."""
    import pyarrow as pa

    n = 1 << log2_n
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, n, dtype=np.int64)
    b = rng.integers(0, n, n, dtype=np.int64)
    counts = np.bincount(a, minlength=n)
    cum = np.concatenate([[0], np.cumsum(counts)])
    want = int((cum[np.minimum(b + width, n - 1) + 1] - cum[np.maximum(b - width, 0)]).sum())
    left = pa.table({"a": a.astype(np.int32), "x": np.arange(n, dtype=np.int32)})
    right = pa.table({"lo": (b - width).astype(np.int32), "hi": (b + width).astype(np.int32),
                      "y": np.arange(n, dtype=np.int32)})
    return left, right, want


def bench_join_where(log2_sizes: list[int], width: int, algorithms: list[str], device: str, runs: int) -> list[dict]:
    from ..expr import col
    from ..plan.join_where import execute_join_where

    records = []
    for log2_n in log2_sizes:
        left, right, want = band_tables(log2_n, width)
        for algo in algorithms:
            times, stats = [], None
            for r in range(runs + 1):
                t0 = time.perf_counter()
                out, st = execute_join_where(left, right, col("a") >= col("lo"), col("a") <= col("hi"),
                                             algorithm=algo, device=device)
                dt = time.perf_counter() - t0
                if out.num_rows != want:
                    raise AssertionError(f"join_where {algo} gave {out.num_rows:,} rows at 2^{log2_n}, want {want:,}")
                if r:  # the first run compiles and warms up
                    times.append(dt)
                    stats = st
            rec = _record("join-where", {"log2_l": log2_n, "log2_r": log2_n, "band_width": width}, "gpujoin",
                          stats.algorithm, device_name(stats.device), times, 2 << log2_n, stats.phases, want)
            rec["candidates"] = stats.params["candidates"]
            records.append(rec)
    return records
