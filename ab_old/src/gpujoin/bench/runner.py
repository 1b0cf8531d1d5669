"""Timing of gpujoin and its peers on the workloads; one JSON record per (workload, engine)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import random
import statistics
import subprocess
import time
from typing import Callable

import numba
import pyarrow as pa

from ..backend import HOST_STREAMING, SEMI_ANTI_ONLY, algorithms, resolve_device
from ..plan.groupby import GroupBy
from ..plan.join import execute_join
from .workloads import GroupByWorkload, JoinWorkload, make_groupby, make_join


def commit() -> str:
    """Short hash of HEAD, with "-dirty" when tracked files differ from it (a copied working tree
    whose .git is older than its files, for one)."""
    try:
        here = os.path.dirname(__file__)
        git = ["git", "-C", here]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=5).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return (head + ("-dirty" if dirty else "")) or "unknown"
    except Exception:
        return "unknown"


def device_name(device: str) -> str:
    if device == "cpu":
        return f"{platform.processor() or platform.machine()}, {numba.get_num_threads()} threads"
    from ..cuda.runtime import device_properties

    return device_properties(0)["name"]


def _timed(fn: Callable[[], object], runs: int) -> tuple[list[float], object]:
    """``fn`` timed ``runs`` times after a warm-up: (seconds of each run, the last result)."""
    return _timed_rounds({"": fn}, runs)[""]


def _timed_rounds(fns: dict[str, Callable[[], object]], runs: int) -> dict[str, tuple[list[float], object]]:
    """Each of ``fns`` timed ``runs`` times, taking turns: a warm-up of each, then rounds of one
    run of each, in a new (seeded) order each round.  Timed after another's runs, an algorithm
    paid for what the other left behind: on an H100, PGB-TR 7.2 ms after the sort-based
    group-bys and 7.0 before them; HGB at 2^28 rows and 4 groups 3.4 ms after SGB-TR, 3.0 after
    a lighter run."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    last: dict[str, object] = {}
    order = random.Random(0)
    for _ in range(runs):
        for k in order.sample(list(fns), len(fns)):
            t0 = time.perf_counter()
            last[k] = fns[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: (times[k], last.get(k)) for k in fns}


def _median_run(stats: list, times: list[float]):
    """The stats of the run whose time is the median (stats[0] is the warm-up, already dropped)."""
    order = sorted(range(len(times)), key=times.__getitem__)
    return stats[order[len(order) // 2]]


def _algorithms(algorithm: str | list[str], names: list[str]) -> list[str]:
    """``algorithm`` as a list: a name, a list of names, or "all" (also inside a list, as in
    ["all", "auto"]: every algorithm, then the planner's choice timed as a run of its own)."""
    algos = [algorithm] if isinstance(algorithm, str) else list(algorithm)
    return list(dict.fromkeys(a for x in algos for a in (names if x == "all" else [x])))


def _algorithm_fields(requested: str, stats) -> dict:
    """The record's algorithm: the one that ran, or "auto" with the planner's choice beside it."""
    if requested == "auto":
        return {"algorithm": "auto", "chosen": stats.algorithm, "reason": stats.params.get("auto")}
    return {"algorithm": stats.algorithm}


def _record(kind, workload, engine, algorithm, device, times, items, phases=None, rows=None):
    med = statistics.median(times)
    if isinstance(algorithm, dict):  # _algorithm_fields
        extra, algorithm = algorithm, algorithm["algorithm"]
    else:
        extra = {}
    return {
        **extra,
        "benchmark": kind, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(), "device": device, "engine": engine, "algorithm": algorithm,
        "workload": workload, "runs": len(times), "median_s": med, "min_s": min(times), "max_s": max(times),
        "throughput_g_per_s": items / med / 1e9, "output_rows": rows, "phases_s": phases or {},
    }


def bench_join(w: JoinWorkload, device: str = "auto", algorithm: str | list[str] = "auto", runs: int = 5,
               peers: list[str] = ()) -> list[dict]:
    """Time gpujoin's ``algorithm`` (a name, a list, or "all") and ``peers`` (duckdb, polars) on
    one join workload; output materialized.

    On the CPU the inputs are Arrow tables; on the GPU they are generated in GPU memory and the
    output stays there (paper 003 §5's setting); each run is timed from the call to the
    synchronized result.
    """
    dev = resolve_device(device, "join")
    # "all": every algorithm that answers the benchmark's inner join in GPU memory (bitmap joins
    # are semi/anti only; the Triton and multi-GPU joins stream host tables: `gpujoin bench
    # out-of-core`, `gpujoin bench multi-gpu`)
    algos = _algorithms(algorithm, [a for a in algorithms(dev)["join"] if a not in SEMI_ANTI_ONLY | HOST_STREAMING])
    if dev == "cuda":
        import cupy as cp

        r, s = make_join(w, cp)
        left, right = s, r
        sync = cp.cuda.Device().synchronize
    else:
        r, s = make_join(w)
        left, right = pa.table(s), pa.table(r)
        sync = None
    items = sum(w.sizes())
    records = []
    stats: dict[str, list] = {algo: [] for algo in algos}

    def ours(algo):
        # S on the left (probe), R on the right (build), the convention of Polars and DuckDB plans
        def run():
            out, st = execute_join(left, right, "k", algorithm=algo, device=dev)
            if sync:
                sync()
            stats[algo].append(st)
            return out.num_rows
        return run

    timed = _timed_rounds({algo: ours(algo) for algo in algos}, runs)
    for algo in algos:
        times, rows = timed[algo]
        st = _median_run(stats[algo][1:], times)
        rec = _record("join", w.describe(), "gpujoin", _algorithm_fields(algo, st), device_name(dev), times,
                      items, st.phases, rows)
        if dev == "cuda":  # one more run for its peak GPU memory against inputs and output (issue 14 item 5)
            from ..cuda.runtime import PeakMemory

            with PeakMemory() as m:
                held = execute_join(left, right, "k", algorithm=algo, device=dev)[0]  # held: the output's bytes
                sync()
            assert held.num_rows == rows
            inputs = sum(a.nbytes for t in (left, right) for a in t.values())
            output = m.end - m.start
            del held
            rec["memory"] = {"inputs_bytes": inputs, "output_bytes": output, "peak_bytes": m.peak - m.start + inputs,
                             "peak_over_inputs": (m.peak - m.start + inputs) / inputs,
                             "peak_over_inputs_output": (m.peak - m.start + inputs) / (inputs + output)}
        records.append(rec)
    if peers:
        if dev == "cuda":  # the peers join the same workload from host memory
            r_host, s_host = make_join(w)
            rt, st_ = pa.table(r_host), pa.table(s_host)
        else:
            rt, st_ = right, left
        for peer in peers:
            fn = _peer_join(peer, st_, rt)
            ptimes, prows = _timed(fn, runs)
            records.append(_record("join", w.describe(), peer, "hash join", device_name("cpu"), ptimes, items,
                                   rows=prows))
    return records


def bench_group_by(w: GroupByWorkload, device: str = "auto", algorithm: str | list[str] = "auto", runs: int = 5,
                   peers: list[str] = ()) -> list[dict]:
    """Time gpujoin's ``algorithm`` (a name, a list, or "all") and ``peers`` on one group-by
    workload: MAX of every value column per key.

    On the GPU the input is generated in GPU memory and the output stays there (paper 003 §5);
    each run is timed from the call to the synchronized result, allocation included.
    """
    dev = resolve_device(device, "group_by")
    algos = _algorithms(algorithm, algorithms(dev)["group_by"])
    if dev == "cuda":
        import cupy as cp

        from ..cuda.table import DeviceTable

        t = DeviceTable(make_groupby(w, cp))
        sync = cp.cuda.Device().synchronize
    else:
        t = pa.table(make_groupby(w))
        sync = None
    aggs = {f"max_{c}": (c, "max") for c in t.column_names if c != "k"}
    records = []
    stats: dict[str, list] = {algo: [] for algo in algos}

    def ours(algo):
        def run():
            gb = GroupBy(t, "k", algorithm=algo, device=dev)
            out = gb.agg(**aggs)
            if sync:
                sync()
            stats[algo].append(gb.stats)
            return out.num_rows
        return run

    timed = _timed_rounds({algo: ours(algo) for algo in algos}, runs)
    for algo in algos:
        times, rows = timed[algo]
        st = _median_run(stats[algo][1:], times)
        records.append(_record("group-by", w.describe(), "gpujoin", _algorithm_fields(algo, st), device_name(dev),
                               times, t.num_rows, st.phases, rows))
    if peers:
        host = pa.table(make_groupby(w)) if dev == "cuda" else t
        for peer in peers:
            fn = _peer_group_by(peer, host, list(aggs.values()))
            ptimes, prows = _timed(fn, runs)
            records.append(_record("group-by", w.describe(), peer, "hash group-by", device_name("cpu"), ptimes,
                                   host.num_rows, rows=prows))
    return records


def _duckdb(threads: int):
    import duckdb

    con = duckdb.connect()
    con.execute(f"set threads={threads}")
    return con


def _duckdb_query(threads: int, tables: dict[str, pa.Table], select: str) -> Callable[[], int]:
    """A call that materializes ``select`` over ``tables`` as a DuckDB table; returns its rows."""
    con = _duckdb(threads)
    for name, table in tables.items():
        con.register(name, table)

    def run():
        con.execute(f"create or replace table out as {select}")
        return con.execute("select count(*) from out").fetchone()[0]
    return run


def _peer_join(peer: str, s: pa.Table, r: pa.Table, threads: int | None = None) -> Callable[[], int]:
    """A call that runs S ⋈ R on k in ``peer`` (duckdb, polars) on ``threads`` and returns the row count."""
    threads = threads or numba.get_num_threads()
    if peer == "duckdb":
        cols = ", ".join(["s_in.k"] + [f"s_in.{c}" for c in s.column_names[1:]] + [f"r_in.{c}" for c in r.column_names[1:]])
        return _duckdb_query(threads, {"r_in": r, "s_in": s},
                             f"select {cols} from s_in join r_in on s_in.k = r_in.k")
    if peer == "polars":
        pl = _polars(threads)
        pr, ps = pl.from_arrow(r), pl.from_arrow(s)
        return lambda: ps.join(pr, on="k").height
    raise ValueError(f"unknown peer {peer!r}; valid: duckdb, polars")


def _peer_group_by(peer: str, t: pa.Table, aggs) -> Callable[[], int]:
    threads = numba.get_num_threads()
    if peer == "duckdb":
        sel = ", ".join(f"max({c})" for c, _ in aggs)
        return _duckdb_query(threads, {"t_in": t}, f"select k, {sel} from t_in group by k")
    if peer == "polars":
        pl = _polars(threads)
        df = pl.from_arrow(t)
        return lambda: df.group_by("k").agg([pl.col(c).max() for c, _ in aggs]).height
    raise ValueError(f"unknown peer {peer!r}; valid: duckdb, polars")


def _polars(threads: int):
    os.environ.setdefault("POLARS_MAX_THREADS", str(threads))  # read once, when polars is first imported
    import polars as pl

    return pl
