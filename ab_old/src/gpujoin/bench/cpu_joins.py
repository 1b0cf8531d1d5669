"""Paper 002's experiment: set intersection of two sets of unique uniform 32-bit keys, time
against thread count for each CPU join, beside gpujoin's general CPU join (phj), DuckDB and
Polars on the same data, and the GPU bitmap join (compute only, and with the host transfers).

Reference: paper 002 §6 (Figs. 3-6).
"""

from __future__ import annotations

import numba
import numpy as np

from ..cpu.join.bitmap import membership
from ..cpu.join.merge import merge_join
from ..cpu.join.phj import hash_join
from ..cpu.join.threads import num_threads
from .runner import _peer_join, _record, _timed, device_name

CPU_ALGORITHMS = ("merge", "hash", "split", "bucket", "phj")


def unique_keys(n: int, seed: int) -> np.ndarray:
    """n distinct uniform uint32 keys in random order."""
    rng = np.random.default_rng(seed)
    k = np.unique(rng.integers(0, 2**32, n + n // 8 + 1024, dtype=np.uint64))
    while k.size < n:  # practically never: 1/8 spare covers the collisions
        k = np.unique(np.concatenate([k, rng.integers(0, 2**32, n, dtype=np.uint64)]))
    return rng.permutation(k)[:n].astype(np.uint32)


def thread_counts(top: int | None = None) -> list[int]:
    top = top or numba.config.NUMBA_NUM_THREADS
    counts = [t for t in (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128) if t < top]
    return counts + [top]


def intersect(algorithm: str, r: np.ndarray, s: np.ndarray, threads: int) -> np.ndarray:
    """R ∩ S (the probe-side keys found in R) by one CPU algorithm on ``threads`` threads."""
    if algorithm in ("hash", "split", "bucket"):
        return s[membership(algorithm, r, s, threads=threads)]
    rows_r = np.arange(r.size, dtype=np.int32)
    rows_s = np.arange(s.size, dtype=np.int32)
    if algorithm == "merge":
        p, _ = merge_join(r.astype(np.int64), rows_r, s.astype(np.int64), rows_s, "inner", threads=threads)
    else:
        with num_threads(threads):
            p, _ = hash_join(r.astype(np.int64), rows_r, s.astype(np.int64), rows_s, "inner")
    return s[p]


def bench_cpu_joins(sizes=(1 << 22, 1 << 23, 1 << 24), threads: list[int] | None = None, runs: int = 5,
                    algorithms=CPU_ALGORITHMS, peers=(), gpu: bool = False, seed: int = 2011) -> list[dict]:
    """Records (JSON-ready dicts) of every (size, algorithm, thread count), peer and GPU run.

    Each CPU result is checked against the others (the intersection's size and checksum); a
    mismatch raises AssertionError.
    """
    records = []
    tcounts = threads or thread_counts()
    for n in sizes:
        r, s = unique_keys(n, seed), unique_keys(n, seed + 1)
        expect = None
        w = {"n": n, "key_bits": 32, "unique": True}
        for algo in algorithms:
            for t in tcounts:
                times, out = _timed(lambda: intersect(algo, r, s, t), runs)
                got = (out.size, int(out.astype(np.uint64).sum()))
                expect = expect or got
                assert got == expect, f"{algo} on {t} threads: {got} != {expect}"
                rec = _record("cpu-joins", w, "gpujoin", algo, device_name("cpu").split(",")[0] + f", {t} threads",
                              times, 2 * n, rows=out.size)
                rec["threads"] = t
                records.append(rec)
        for peer in peers:
            for t in (tcounts if peer == "duckdb" else tcounts[-1:]):
                fn = _peer(peer, r, s, t)
                times, rows = _timed(fn, runs)
                assert rows == expect[0], f"{peer}: {rows} rows, expected {expect[0]}"
                rec = _record("cpu-joins", w, peer, "hash join", device_name("cpu").split(",")[0] + f", {t} threads",
                              times, 2 * n, rows=rows)
                rec["threads"] = t
                records.append(rec)
        if gpu:
            records.extend(_gpu_records(w, r, s, runs, expect))
    return records


def _gpu_records(w, r, s, runs, expect) -> list[dict]:
    import cupy as cp

    from ..cuda.join.bitmap import probe_hits

    sync = cp.cuda.Device().synchronize
    dr, ds = cp.asarray(r), cp.asarray(s)

    def compute():
        out = probe_hits(dr, ds, emit_keys=True)
        sync()
        return out

    def total():  # the paper's "GPU total": host to device, join, result back
        out = cp.asnumpy(probe_hits(cp.asarray(r), cp.asarray(s), emit_keys=True))
        return out

    recs = []
    for name, fn in (("bitmap (compute)", compute), ("bitmap (with transfers)", total)):
        times, out = _timed(fn, runs)
        got = (int(out.size), int(cp.asnumpy(out).astype(np.uint64).sum()))
        assert got == expect, f"GPU {name}: {got} != {expect}"
        recs.append(_record("cpu-joins", w, "gpujoin", name, device_name("cuda"), times, 2 * r.size,
                            rows=int(out.size)))
    return recs


def _peer(peer: str, r: np.ndarray, s: np.ndarray, threads: int):
    import pyarrow as pa

    return _peer_join(peer, pa.table({"k": s}), pa.table({"k": r}), threads)


def summary(records: list[dict]) -> list[dict]:
    """Paper 002 Fig. 6 per size: best serial, best parallel, GPU compute and GPU total (ms)."""
    out = []
    for n in sorted({r["workload"]["n"] for r in records}):
        rs = [r for r in records if r["workload"]["n"] == n and r["engine"] == "gpujoin"]
        cpu = [r for r in rs if "threads" in r]
        serial = min((r for r in cpu if r["threads"] == 1), key=lambda r: r["median_s"], default=None)
        par = min((r for r in cpu if r["threads"] > 1), key=lambda r: r["median_s"], default=None)
        row = {"n": n}
        if serial:
            row["best serial"] = (serial["algorithm"], serial["median_s"] * 1e3)
        if par:
            row["best parallel"] = (f"{par['algorithm']} ({par['threads']}T)", par["median_s"] * 1e3)
        for r in rs:
            if r["algorithm"].startswith("bitmap"):
                row[r["algorithm"]] = ("GPU", r["median_s"] * 1e3)
        out.append(row)
    return out


__all__ = ["bench_cpu_joins", "summary", "unique_keys", "thread_counts", "intersect"]
