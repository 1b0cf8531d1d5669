"""``gpujoin bench out-of-core``: paper 004's workloads on one GPU (Figs. 13, 17, 19).

16-byte tuples (8-byte key, 8-byte payload); R a shuffled dense primary key, S a uniform
foreign key into it; |R| = |S|; data in ordinary (pageable) host memory, as a user has it.
Two result modes: ``sum`` (the sum of S's payload over the matches: paper 004's measure) and
``table`` (the joined key and both payloads materialized in host memory).  The pinned
host-to-device and device-to-host bandwidths are measured first in the same run: the ceiling.
Correctness: every S key matches one R row, so the SUM is the sum of S's payloads and the
table has |S| rows, both known by construction; the table's payloads are checked against R.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ..plan.placement import plan_placement
from .runner import commit, device_name


def pcie_bandwidth(nbytes: int = 1 << 30, reps: int = 5) -> dict:
    """Pinned host<->device copy bandwidth (GB/s, decimal), the median of ``reps`` copies, and the
    pageable host-to-device rate for comparison."""
    import cupy as cp

    from ..cuda.runtime import event_time
    from ..outofcore.stream import pinned_empty

    host = pinned_empty(nbytes, np.uint8)
    host[:] = 1
    dev = cp.empty(nbytes, cp.uint8)
    s = cp.cuda.Stream(non_blocking=True)

    def rate(fn):
        return nbytes / event_time(fn, reps, s, warmup=False) / 1e9

    h2d = rate(lambda: cp.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, nbytes, 1, s.ptr))
    d2h = rate(lambda: cp.cuda.runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, nbytes, 2, s.ptr))
    pageable = np.ones(nbytes, np.uint8)
    t0 = time.perf_counter()
    dev.set(pageable)
    cp.cuda.Device().synchronize()
    pageable_h2d = nbytes / (time.perf_counter() - t0) / 1e9
    host = dev = None  # noqa: F841 (the buffers go back before the joins run)
    cp.get_default_pinned_memory_pool().free_all_blocks()
    return {"h2d_pinned_GBps": h2d, "d2h_pinned_GBps": d2h, "h2d_pageable_GBps": pageable_h2d}


#: Rows of a uniform column generated on the GPU at once (16 GB as int64; the sizes timed before
#: 2026-11-26 were made in one piece and draw the same numbers).
GEN_ROWS = 1 << 31


def make_relations(log2_n: int, seed: int = 42, item_bytes: int = 8, rows: tuple[int, int] | None = None):
    """(R keys, R payloads, S keys, S payloads) as pageable host arrays of ``item_bytes``-byte
    integers, generated on the GPU (a host permutation of 2^30 keys alone takes half a minute)
    and copied down: R a shuffled dense key 0 .. |R| - 1, S uniform into it, |R| = |S| =
    2^log2_n unless ``rows`` gives (|R|, |S|)."""
    import cupy as cp

    nr, ns = rows or (1 << log2_n, 1 << log2_n)
    dt = np.int64 if item_bytes == 8 else np.int32
    top = 1 << 40 if item_bytes == 8 else 1 << 20
    rs = cp.random.RandomState(seed)
    out = []
    for n, make in ((nr, lambda m: rs.permutation(m).astype(dt)),
                    (nr, lambda m: rs.randint(0, top, m, dtype=cp.int64).astype(dt)),
                    (ns, lambda m: rs.randint(0, nr, m, dtype=cp.int64).astype(dt)),
                    (ns, lambda m: rs.randint(0, top, m, dtype=cp.int64).astype(dt))):
        h = np.empty(n, dt)
        # uniform columns past GEN_ROWS in pieces (GPU memory), the permutation whole (unique keys)
        step = n if not out else GEN_ROWS
        for lo in range(0, n, max(step, 1)):
            d = make(min(step, n - lo))
            d.get(out=h[lo:lo + d.size])
            del d
        out.append(h)
    cp.get_default_memory_pool().free_all_blocks()
    return out


def _arrow_join(rk, rp, sk, sp, limit):
    """Mode ``arrow``: the public API on Arrow tables, host to host (what a user times)."""
    import pyarrow as pa

    from ..plan.join import execute_join

    R = pa.table({"k": rk, "r": rp})
    S = pa.table({"k": sk, "s": sp})
    out, stats = execute_join(S, R, "k", device="cuda", memory_limit=limit)
    return out, stats


#: Paper 004's baselines beside the Triton join, in SUM mode: the no-partitioning joins with R's
#: table in GPU memory and S streamed (perfect hashing, linear probing), the CPU engine's radix
#: join, and DuckDB and Polars on the host's cores.
BASELINES = ("npj-perfect", "npj-linear", "cpu-radix", "duckdb", "polars")


def _baseline(name: str, rk, rp, sk, sp, budget: int | None):
    """One SUM-mode run of baseline ``name``: (matches, sum, phases), or a string saying why it
    cannot run here."""
    if name.startswith("npj-"):
        from ..outofcore.budget import gpu_budget
        from ..outofcore.npj import streamed_npj

        try:
            return streamed_npj([rk, rp], [sk, sp], name[4:], gpu_budget(budget))
        except MemoryError as e:
            return f"does not fit: {e}"
    if name == "cpu-radix":
        from ..cpu.join.phj import hash_join

        t0 = time.perf_counter()
        rows = lambda n: np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)  # noqa: E731
        pidx, _ = hash_join(rk.astype(np.int64, copy=False), rows(rk.size), sk.astype(np.int64, copy=False),
                            rows(sk.size), "inner")
        return pidx.size, int(sp[pidx].sum(dtype=np.int64)), {"join": time.perf_counter() - t0}
    import pyarrow as pa

    R, S = pa.table({"k": rk, "r": rp}), pa.table({"k": sk, "s": sp})
    if name == "duckdb":
        import duckdb

        con = duckdb.connect()
        con.register("R", R)
        con.register("S", S)
        m, total = con.execute("SELECT count(*), sum(S.s) FROM S JOIN R ON S.k = R.k").fetchone()
        return int(m), int(total), {}
    import polars as pl

    out = pl.from_arrow(S).join(pl.from_arrow(R), on="k").select(pl.len(), pl.col("s").sum())
    return int(out[0, 0]), int(out[0, 1]), {}


def _wrap64(x: int) -> int:
    """``x`` as an int64 sum reads once it has wrapped around."""
    return (x + 2**63) % 2**64 - 2**63


def bench_baselines(names: list[str], log2_n: int, rk, rp, sk, sp, limit: str | None, runs: int, base: dict,
                    want_sum: int, log=print) -> list[dict]:
    """Records of ``names`` (BASELINES) on one workload, SUM mode, checked like the Triton join."""
    import cupy as cp

    from ..outofcore.budget import parse_bytes

    records = []
    n = sk.size  # every S row matches one R row
    tuples = rk.size + sk.size
    for name in names:
        if name not in BASELINES:
            raise ValueError(f"unknown baseline {name!r}; valid: {list(BASELINES)}")
        times, phases, why = [], {}, None
        for r in range(runs + (1 if name.startswith("npj-") else 0)):  # the GPU's first run warms up
            t0 = time.perf_counter()
            res = _baseline(name, rk, rp, sk, sp, parse_bytes(limit) if limit else None)
            dt = time.perf_counter() - t0
            if isinstance(res, str):
                why = res
                break
            if (res[0], _wrap64(res[1])) != (n, want_sum):  # DuckDB sums exactly, NumPy wraps at 2^64
                raise AssertionError(f"{name} got {res[:2]} at 2^{log2_n}, want {(n, want_sum)}")
            if r or not name.startswith("npj-"):
                times.append(dt)
                phases = res[2]
        cp.get_default_memory_pool().free_all_blocks()
        if why:
            log(f"2^{log2_n} limit={limit} {name}: {why}")
            continue
        med = float(np.median(times))
        cpu = not name.startswith("npj-")
        records.append({**base, "engine": name if name in ("duckdb", "polars") else "gpujoin",
                        "device": device_name("cpu") if cpu else base["device"], "algorithm": name,
                        "workload": {"log2_r": log2_n, "log2_s": log2_n, "tuple_bytes": 2 * rk.itemsize,
                                     "memory_limit": None if cpu else limit, "mode": "sum",
                                     **({} if rk.size == sk.size else {"r_rows": rk.size, "s_rows": sk.size})},
                        "runs": len(times), "median_s": med, "min_s": min(times), "max_s": max(times),
                        "throughput_g_per_s": tuples / med / 1e9, "correct": True, "phases_s": phases})
        log(f"2^{log2_n} limit={limit} {name}: {med * 1e3:.0f} ms, {tuples / med / 1e9:.2f} G tuples/s")
    return records


@contextlib.contextmanager
def input_memory(kind: str, arrays: list[np.ndarray], log=print):
    """A bench's input columns as its runs see them inside the block: "pageable" as made, or
    "pinned": page-locked in place (``outofcore.stream.pinned_host``: no staging copy)."""
    if kind != "pinned":
        yield
        return
    from ..outofcore.stream import pinned_host

    t0 = time.perf_counter()
    with pinned_host(*arrays):
        log(f"  page-locked the inputs ({sum(a.nbytes for a in arrays) / 1e9:.1f} GB) in "
            f"{time.perf_counter() - t0:.2f} s")
        yield


def _timed_runs(mode: str, runs: int, rel: tuple, budget: int | None, frac: float | None, streams: int,
                item_bytes: int, want_sum: int, want_r: np.ndarray | None, label: str):
    """``runs`` timed joins of ``rel`` (rk, rp, sk, sp) in ``mode`` after one warm-up, each
    checked; returns (times, stats of the last, placement or None for "arrow")."""
    from ..outofcore.budget import gpu_budget, gpu_memory_cap
    from ..outofcore.triton import triton_join

    rk, rp, sk, sp = rel
    n = rk.size
    times, stats, pl = [], None, None
    for r in range(runs + 1):  # the first run warms up the kernels and the pinned pool
        if mode == "arrow":
            t0 = time.perf_counter()
            out, st = _arrow_join(rk, rp, sk, sp, budget)
            dt = time.perf_counter() - t0
            ok = out.num_rows == n and int(np.asarray(out["s"]).sum(dtype=np.int64)) == want_sum \
                and bool(np.array_equal(np.asarray(out["r"]), want_r[np.asarray(out["k"])]))
            run_stats = {**st.params, "phases": dict(st.phases), "algorithm": st.algorithm}
            run_stats.setdefault("spill_bytes", 0)
        else:
            with gpu_memory_cap(budget):
                b = gpu_budget(budget)
                pl = plan_placement([n, n], [2 * item_bytes] * 2, b,
                                    cache_bytes=None if frac is None else int(frac * (b // 2)))
                t0 = time.perf_counter()
                out = triton_join([rk, rp], [sk, sp], "inner", pl, emit_keys=mode == "table",
                                  aggregate="sum" if mode == "sum" else None, streams=streams)
                dt = time.perf_counter() - t0
            if mode == "sum":
                ok = out.total == want_sum and out.rows == n
            else:
                ok = out.rows == n and bool(np.array_equal(out.build[0][0], want_r[out.key])) \
                    and int(out.probe[0][0].sum()) == want_sum
            run_stats = out.stats
        if not ok:
            raise AssertionError(f"wrong result at {label}, mode {mode}")
        if r:
            times.append(dt)
            stats = run_stats
        del out
    return times, stats, pl


def bench_out_of_core(log2_sizes: list[int], limits: list[str | None], modes: list[str], runs: int = 3,
                      cache_fractions: list[float | None] | None = None, streams: list[int] | None = None,
                      seed: int = 42, log=print, item_bytes: int = 8, baselines: list[str] = (),
                      inputs: list[str] = ("pageable",)) -> list[dict]:
    """Time the Triton join over the sweeps; one record a (input, size, limit, cache, streams,
    mode), then each of ``baselines`` (BASELINES) a (size, limit) in SUM mode.  ``inputs``:
    "pageable" (NumPy's memory, staged through pinned buffers) and/or "pinned" (the same
    columns page-locked in place by ``outofcore.stream.pinned_host``: no staging copy).

    Modes: ``sum`` and ``table`` call the array-level join (outofcore.triton.triton_join);
    ``arrow`` calls ``gpujoin.join`` on two Arrow tables and gets an Arrow table back."""
    import itertools

    import cupy as cp

    from ..outofcore.budget import parse_bytes

    ceiling = pcie_bandwidth()
    log(f"PCIe: pinned H2D {ceiling['h2d_pinned_GBps']:.1f} GB/s, D2H {ceiling['d2h_pinned_GBps']:.1f} GB/s, "
        f"pageable H2D {ceiling['h2d_pageable_GBps']:.1f} GB/s")
    records = []
    base = {"benchmark": "out-of-core", "engine": "gpujoin", "device": device_name("cuda"), "commit": commit(),
            "date": time.strftime("%Y-%m-%d"), **ceiling}
    sweep = list(itertools.product(limits, cache_fractions or [None], streams or [3], modes))
    for log2_n in log2_sizes:
        rel = make_relations(log2_n, seed, item_bytes)
        rk, rp, sk, sp = rel
        n = rk.size
        want_sum = int(sp.sum(dtype=np.int64))
        want_r = None
        if set(modes) & {"table", "arrow"}:  # R's payload by key, to check materialized rows
            want_r = np.empty(n, rp.dtype)
            want_r[rk] = rp
        for input_kind in inputs:
            with input_memory(input_kind, list(rel), log):
                for limit, frac, ns, mode in sweep:
                    budget = parse_bytes(limit) if limit else None
                    times, stats, pl = _timed_runs(mode, runs, rel, budget, frac, ns, item_bytes, want_sum, want_r,
                                                   f"2^{log2_n}, limit {limit}")
                    med = float(np.median(times))
                    f = stats["spill_bytes"] / (4 * n * item_bytes)
                    floor = (stats["h2d_bytes"]) / (ceiling["h2d_pinned_GBps"] * 1e9)
                    rec = {**base, "workload": {"log2_r": log2_n, "log2_s": log2_n, "tuple_bytes": 2 * item_bytes,
                                                "memory_limit": limit, "cache_fraction": frac, "mode": mode,
                                                "input": input_kind},
                           "algorithm": stats.get("algorithm") or ("triton" if pl.bits else "phj-tr"),
                           "streams": ns, "runs": len(times), "median_s": med,
                           "min_s": min(times), "max_s": max(times), "throughput_g_per_s": 2 * n / med / 1e9,
                           "pcie_floor_s": floor, "spilled_fraction": f, "correct": True,
                           **{k: stats.get(k) for k in ("placement", "pass1_bits", "cache_bytes", "spill_bytes",
                                                        "h2d_bytes", "d2h_bytes", "peak_gpu_bytes")},
                           "phases_s": stats["phases"]}
                    log(f"2^{log2_n} limit={limit} cache={frac} streams={ns} {mode}: {med * 1e3:.0f} ms, "
                        f"{rec['throughput_g_per_s']:.2f} G tuples/s (PCIe floor {floor * 1e3:.0f} ms), "
                        f"{stats.get('placement')} bits={stats.get('pass1_bits')} spill={f:.2f} "
                        f"phases={ {k: round(v * 1e3) for k, v in stats['phases'].items()} }")
                    records.append(rec)
                    cp.get_default_memory_pool().free_all_blocks()
                gpu_side = [b for b in baselines if b.startswith("npj-")]
                for limit in limits if gpu_side else []:
                    records += bench_baselines(gpu_side, log2_n, rk, rp, sk, sp, limit, runs, base, want_sum, log)
        # the CPU baselines once a size (no GPU budget applies), one run: each takes seconds
        records += bench_baselines([b for b in baselines if not b.startswith("npj-")], log2_n, rk, rp, sk, sp,
                                   None, 1, base, want_sum, log)
        del rk, rp, sk, sp, rel, want_r
    return records


def bench_out_of_core_group_by(log2_rows: int, log2_groups: int, limits: list[str | None], runs: int = 2,
                               seed: int = 42, peers: list[str] | None = None, log=print) -> list[dict]:
    """``gpujoin.group_by`` of a host Arrow table of 2^log2_rows rows (int32 key uniform over
    2^log2_groups groups, int32 value) with SUM, COUNT and MAX, under each GPU memory limit;
    checked by the groups' count, the sizes' total and the sums' total (NumPy); DuckDB beside it
    when installed and asked for."""
    import cupy as cp
    import pyarrow as pa

    from ..plan.groupby import GroupBy

    n, g = 1 << log2_rows, 1 << log2_groups
    rs = cp.random.RandomState(seed)
    keys = rs.randint(0, g, n, dtype=cp.int64).astype(cp.int32).get()
    vals = rs.randint(-1000, 1000, n, dtype=cp.int64).astype(cp.int32).get()
    cp.get_default_memory_pool().free_all_blocks()
    want_sum = int(vals.sum(dtype=np.int64))
    table = pa.table({"k": keys, "v": vals})
    aggs = dict(s=("v", "sum"), c=(None, "size"), m=("v", "max"))
    base = {"benchmark": "out-of-core-group-by", "engine": "gpujoin", "device": device_name("cuda"), "commit": commit(),
            "date": time.strftime("%Y-%m-%d")}
    records = []
    for limit in limits:
        times, stats = [], None
        for r in range(runs + 1):
            t0 = time.perf_counter()
            gb = GroupBy(table, "k", device="cuda", memory_limit=limit)
            out = gb.agg(**aggs)
            dt = time.perf_counter() - t0
            ok = (out.num_rows == len(np.unique(keys[:1 << 16])) if g > n else True) and \
                int(np.asarray(out["c"]).sum()) == n and int(np.asarray(out["s"]).sum(dtype=np.int64)) == want_sum
            if not ok:
                raise AssertionError(f"wrong group-by result at 2^{log2_rows} rows, limit {limit}")
            if r:
                times.append(dt)
                stats = gb.stats
            del out
        med = float(np.median(times))
        rec = {**base, "workload": {"log2_rows": log2_rows, "log2_groups": log2_groups, "memory_limit": limit,
                                    "aggs": "sum,size,max"},
               "algorithm": stats.algorithm, "runs": len(times), "median_s": med, "min_s": min(times),
               "max_s": max(times), "throughput_g_per_s": n / med / 1e9, "groups": stats.groups, "correct": True,
               **{k: stats.params.get(k) for k in ("placement", "pass1_bits", "cache_bytes", "spill_bytes",
                                                     "h2d_bytes", "peak_gpu_bytes")},
               "phases_s": {k: v for k, v in stats.phases.items() if isinstance(v, float)}}
        log(f"group-by 2^{log2_rows} rows, 2^{log2_groups} groups, limit={limit}: {med * 1e3:.0f} ms, "
            f"{rec['throughput_g_per_s']:.2f} G rows/s, {stats.algorithm}, {stats.params.get('placement')} "
            f"bits={stats.params.get('pass1_bits')} phases={ {k: round(v * 1e3) for k, v in rec['phases_s'].items()} }")
        records.append(rec)
    if "duckdb" in (peers or []):
        import duckdb

        con = duckdb.connect()
        con.register("t", table)
        q = "SELECT k, sum(v) AS s, count(*) AS c, max(v) AS m FROM t GROUP BY k"
        con.execute(f"CREATE TABLE warm AS {q}")
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            con.execute(f"CREATE OR REPLACE TABLE o AS {q}")
            times.append(time.perf_counter() - t0)
        med = float(np.median(times))
        records.append({**base, "engine": "duckdb", "device": "cpu", "workload": records[-1]["workload"],
                        "algorithm": f"duckdb {duckdb.__version__}", "runs": runs, "median_s": med,
                        "min_s": min(times), "max_s": max(times), "throughput_g_per_s": n / med / 1e9,
                        "phases_s": {}})
        log(f"duckdb {duckdb.__version__}: {med * 1e3:.0f} ms, {n / med / 1e9:.2f} G rows/s")
    return records
