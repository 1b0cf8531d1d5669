"""Run the TPC-H job: each query through gpujoin, validated against DuckDB's run of the official text."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pyarrow as pa

from .. import read_parquet
from ..testing import first_difference
from .ops import DeviceQuery, Query
from .queries import COLUMNS_USED, QUERIES, SQL_FILES, TABLES_USED


@dataclass
class QueryResult:
    query: str
    rows: int
    gpujoin_s: float
    duckdb_s: float
    validated: bool
    difference: str | None = None

    @property
    def speedup(self) -> float:
        return self.duckdb_s / self.gpujoin_s if self.gpujoin_s else float("nan")


def sql_text(query: str) -> str:
    return resources.files("gpujoin.tpch").joinpath("sql", SQL_FILES[query]).read_text()


def _checksum(con, column: pa.Table) -> pa.Table:
    """count(*), sum(hash(o_orderpriority)) of a join output, with DuckDB's hash as lo_join.sql uses
    (the cast reads a dictionary-encoded column as the strings it stands for)."""
    con.register("lo_out", column)
    return con.sql("select count(*), sum(hash(o_orderpriority::varchar)) from lo_out").to_arrow_table()


def run(data_dir: Path, queries: list[str], device: str = "auto", repeat: int = 3,
        threads: int | None = None, group_by_device: str | None = None,
        on_result=None) -> list[QueryResult]:
    """Run ``queries`` on the Parquet files in ``data_dir``; the median of ``repeat`` runs of each side.

    Joins run on ``device``, group-bys on ``group_by_device`` (default: the same).  When both are
    the GPU, the whole query runs there (:class:`DeviceQuery`): the tables' columns are copied to
    GPU memory once, before any timing, as DuckDB loads them into its own tables.
    ``on_result(QueryResult)``, if given, is called as each query finishes (progress for long runs).

    Both engines read from memory: the tables are loaded once (into Arrow for gpujoin, into
    DuckDB's own tables for DuckDB) before any timing.
    """
    import duckdb

    unknown = [q for q in queries if q not in QUERIES]
    if unknown:
        raise ValueError(f"unknown TPC-H query {unknown[0]!r}; valid: {list(QUERIES)}")
    needed = sorted({t for q in queries for t in TABLES_USED[q]})
    tables = {t: read_parquet(str(Path(data_dir) / f"{t}.parquet")) for t in needed}
    con = duckdb.connect()
    if threads:
        con.execute(f"set threads={int(threads)}")
    for t in needed:
        con.execute(f"create table {t} as select * from read_parquet('{Path(data_dir) / f'{t}.parquet'}')")
    from ..backend import resolve_device

    on_gpu = resolve_device(device, "join") == "cuda" and resolve_device(group_by_device or device,
                                                                           "group_by") == "cuda"
    if on_gpu:
        from ..cuda.table import DeviceTable

        tables = {t: DeviceTable.from_arrow(tables[t].select(COLUMNS_USED[t])) for t in needed}
    q = DeviceQuery() if on_gpu else Query(device, group_by_device)
    results = []
    for name in queries:
        fn, sql = QUERIES[name], sql_text(name)
        fn(tables, q)  # warm-up: JIT compilation and caches
        g_times, d_times = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            ours = fn(tables, q)
            g_times.append(time.perf_counter() - t0)
        for _ in range(repeat):
            t0 = time.perf_counter()
            expected = con.sql(sql).to_arrow_table()
            d_times.append(time.perf_counter() - t0)
        rows = ours.num_rows
        if name == "lo":
            ours = _checksum(con, ours)
        diff = first_difference(ours, expected, check_names=False, rel=1e-9)
        results.append(QueryResult(name, rows, statistics.median(g_times), statistics.median(d_times),
                                   diff is None, diff))
        if on_result:
            on_result(results[-1])
    con.close()
    return results
