"""The ``gpujoin`` command: join, group-by, tpch, bench, info."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table as RichTable

from .errors import GpujoinError

console = Console()


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one clear line, exit code 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _fail(msg: str, code: int = 2):
    print(f"gpujoin: error: {msg}", file=sys.stderr)
    sys.exit(code)


def _csv_list(s: str | None) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()] if s else []


@contextmanager
def _progress():
    """A Rich progress bar of the passes on stderr while the block runs (when stderr is a terminal)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from . import progress
    from .outofcore.stream import release_host_memory

    err = Console(stderr=True)
    bar = Progress(TextColumn("{task.description:<34}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                   TimeElapsedColumn(), console=err, transient=True) if err.is_terminal else None
    try:
        if bar is None:
            yield
        else:
            with bar, progress.reporting(bar):
                yield
    finally:
        release_host_memory()  # Ctrl-C too: no page-locked host memory stays behind


def cmd_join(a):
    from . import join
    from .io import BatchWriter, file_format, read_table

    file_format(a.output)
    on = _csv_list(a.on) or None
    kw = dict(on=on, left_on=_csv_list(a.left_on) or None, right_on=_csv_list(a.right_on) or None, how=a.how,
              suffix=a.suffix, nulls_equal=a.nulls_equal, validate=a.validate, algorithm=a.algorithm,
              device=a.device, memory_limit=a.memory_limit, gpus=_gpus(a.gpus))
    with _progress(), BatchWriter(a.output) as out:
        left, right = read_table(a.left, "left"), read_table(a.right, "right")
        # the output goes to the file batch by batch as the join makes it (out of core: as it leaves the GPU)
        if a.explain:
            from . import explain

            plan = explain(join, left, right, run=True, sink=out.write, **kw)
            Console(stderr=True).print(str(plan), markup=False, highlight=False)
            schema = plan.result.schema
        else:
            schema = join(left, right, sink=out.write, **kw).schema
        out.commit(schema)
    console.print(f"wrote {out.rows} rows, {len(schema)} columns to {a.output}")


def _parse_where(spec: str):
    """``"t >= start"`` as a predicate (one comparison of two column names)."""
    import re

    from .expr import col

    m = re.fullmatch(r"\s*([^<>=!]+?)\s*(<=|>=|==|!=|<|>|=)\s*([^<>=!]+?)\s*", spec)
    if not m:
        raise ValueError(f"--where {spec!r} is not LEFT_COLUMN OP RIGHT_COLUMN with OP one of < <= > >= == != "
                         f"(for example 't >= start')")
    a, op, b = m.groups()
    op = "==" if op == "=" else op
    return {"<": col(a) < col(b), "<=": col(a) <= col(b), ">": col(a) > col(b), ">=": col(a) >= col(b),
            "==": col(a) == col(b), "!=": col(a) != col(b)}[op]


def cmd_join_where(a):
    from . import join_where
    from .io import BatchWriter, file_format, read_table

    file_format(a.output)
    preds = [_parse_where(w) for w in a.where]
    with _progress(), BatchWriter(a.output) as out:
        left, right = read_table(a.left, "left"), read_table(a.right, "right")
        if a.explain:
            from . import explain

            plan = explain(join_where, left, right, *preds, suffix=a.suffix, algorithm=a.algorithm,
                           device=a.device, run=True, memory_limit=a.memory_limit, gpus=_gpus(a.gpus))
            Console(stderr=True).print(str(plan), markup=False, highlight=False)
            result = plan.result
        else:
            result = join_where(left, right, *preds, suffix=a.suffix, algorithm=a.algorithm, device=a.device,
                                memory_limit=a.memory_limit, gpus=_gpus(a.gpus))
        out.write(result)
        out.commit(result.schema)
    console.print(f"wrote {out.rows} rows, {len(result.schema)} columns to {a.output}")


def _choices(spec: str | None, valid, option: str) -> list[str]:
    """The comma-separated values of ``option``, each checked against ``valid``."""
    values = _csv_list(spec)
    bad = [v for v in values if v not in valid]
    if bad:
        raise ValueError(f"unknown {option} {bad[0]!r}; use {', '.join(valid)}")
    return values


def _whole(value: str, option: str) -> int:
    """``value`` of ``option`` as a whole number from 1."""
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{option}: expected 'auto' or a whole number from 1, got {value!r}")
    return int(value)


def _stderr(message: str) -> None:
    """A benchmark's progress line, on stderr (stdout may carry the records)."""
    Console(stderr=True).print(message, markup=False, highlight=False)


def _gpus(spec: str | None):
    """--gpus: None, a count ("2") or device ids ("0,1")."""
    if spec is None:
        return None
    parts = _csv_list(spec)
    try:
        ids = [int(x) for x in parts]
    except ValueError:
        raise ValueError(f"--gpus {spec!r} is neither a number of GPUs nor device ids such as 0,1") from None
    return ids[0] if len(parts) == 1 and "," not in spec else ids


def _parse_agg(spec: str):
    name, sep, rest = spec.partition("=")
    col, sep2, fn = rest.rpartition(":")
    if not sep or not sep2 or not name or not fn:
        raise ValueError(f"--agg {spec!r} is not NAME=COLUMN:FUNCTION (for example total=price:sum)")
    return name, (col or None, fn)


def cmd_group_by(a):
    from . import group_by
    from .io import file_format, read_table, write_table

    file_format(a.output)
    aggs = dict(_parse_agg(s) for s in a.agg)
    by = [b for s in a.by for b in _csv_list(s)]
    with _progress():
        table = read_table(a.table)
        if a.explain:
            from . import explain

            plan = explain(group_by, table, by, aggs=aggs, algorithm=a.algorithm, device=a.device, run=True,
                           memory_limit=a.memory_limit, gpus=_gpus(a.gpus))
            Console(stderr=True).print(str(plan), markup=False, highlight=False)
            out = plan.result
        else:
            out = group_by(table, by, algorithm=a.algorithm, device=a.device,
                           memory_limit=a.memory_limit, gpus=_gpus(a.gpus)).agg(**aggs)
        write_table(out, a.output)
    console.print(f"wrote {out.num_rows} groups to {a.output}")


class _DistJob:
    """One rank of a ``gpujoin dist`` job: steps that every rank runs, a rank's failure reported
    to every rank, and OUT/part-RANK.parquet files that appear only when every rank has written."""

    def __init__(self, name: str, output: str):
        from .dist.join import default_communicator

        self.name, self.comm, self.out_dir = name, default_communicator(), Path(output)

    def agreed(self, step, what: str):
        """Run ``step`` on every rank; when any rank fails, every rank stops with its message."""
        comm = self.comm
        try:
            value, err = step(), None
        except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 (reported to every rank below)
            value, err = None, f"rank {comm.rank}: {type(exc).__name__}: {exc}"
        errors = [e for e in comm.allgather(err) if e]
        if errors:
            raise RuntimeError(f"{what} failed on {len(errors)} of {comm.size} rank(s): {errors[0]}")
        return value

    def collective(self, step):
        """Run ``step``, which holds collectives: a rank that fails inside cannot tell the others,
        so the job ends (every rank non-zero, this rank's message printed)."""
        try:
            return step()
        except Exception as exc:  # noqa: BLE001
            print(f"gpujoin dist {self.name}: rank {self.comm.rank}: {type(exc).__name__}: {exc}", file=sys.stderr,
                  flush=True)
            time.sleep(1)  # the launcher forwards the message before the abort ends the ranks
            self.comm.abort(1)
            os._exit(1)  # MPI_Abort may return before the launcher ends this process: nothing more runs here

    def read(self, paths: list[str], sides: list[str]) -> list:
        """This rank's share of each Parquet dataset's row groups (the output folder made first)."""
        from .io import read_share

        def step():
            self.out_dir.mkdir(parents=True, exist_ok=True)
            return [read_share(p, self.comm.rank, self.comm.size, s) for p, s in zip(paths, sides)]
        return self.agreed(step, "reading the inputs")

    def write(self, result) -> None:
        """OUT/part-RANK.parquet of ``result`` (a DeviceTable moved to host memory first)."""
        import pyarrow as pa

        from .io import BatchWriter

        if not isinstance(result, pa.Table):
            result = self.agreed(result.to_arrow, "moving the output to host memory")
        writer = BatchWriter(self.out_dir / f"part-{self.comm.rank}.parquet")
        with writer:
            self.agreed(lambda: writer.write(result), "writing the output")
            writer.commit(result.schema)  # renamed into place only once every rank has written

    def summary(self, mine: dict, title: str, columns: tuple, cells, total) -> None:
        """Every rank's ``mine`` gathered; rank 0 prints a table (rank, host, then ``cells(stats)``
        under ``columns``) and the line ``total(every rank's stats)``."""
        comm = self.comm
        rows = comm.allgather((comm.rank, comm.node, mine))
        if comm.rank:
            return
        t = RichTable(title=f"gpujoin dist {self.name}: {comm.size} ranks on {comm.nodes} host(s){title}")
        for c in ("rank", "host") + columns:
            t.add_column(c, justify="right")
        for r, node, st in rows:
            t.add_row(str(r), str(node), *cells(st))
        console.print(t)
        console.print(total([st for _, _, st in rows]))


def cmd_dist_join(a):
    """One rank of ``mpirun -n P gpujoin dist join``: read this rank's row groups, join through the
    shuffle, write OUT/part-RANK.parquet; the files appear only when every rank has succeeded."""
    from .dist.join import check_inputs, join

    job = _DistJob("join", a.output)
    comm = job.comm
    left, right = job.read([a.left, a.right], ["left", "right"])
    keys = dict(on=_csv_list(a.on) or None, left_on=_csv_list(a.left_on) or None,
                right_on=_csv_list(a.right_on) or None, how=a.how)
    job.agreed(lambda: check_inputs(left, right, **keys), "checking the join")
    if a.placement == "gpu":  # the rows to each rank's GPU: hashed, partitioned and shuffled there (NCCL)
        from .cuda.table import DeviceTable

        left, right = job.agreed(lambda: (DeviceTable.from_arrow(left), DeviceTable.from_arrow(right)),
                                 "moving the inputs to the GPUs")
    stats: dict = {}
    result = job.collective(lambda: join(left, right, comm=comm, shuffle=a.shuffle, compression=a.compression,
                                         device=a.device, stats=stats, nulls_equal=a.nulls_equal, suffix=a.suffix,
                                         validate=a.validate, algorithm=a.algorithm, **keys))
    job.write(result)
    job.summary(stats, f", {a.how} join",
                ("in L, R", "got L, R", "out", "part ms", "a2a ms", "join ms", "algo", "comp"),
                lambda st: (f"{st['rows_in'][0]:,}, {st['rows_in'][1]:,}",
                            f"{st['rows_received'][0]:,}, {st['rows_received'][1]:,}", f"{st['rows_out']:,}",
                            f"{st['partition'] * 1e3:,.1f}", f"{st['shuffle'] * 1e3:,.1f}",
                            f"{st['local_join'] * 1e3:,.1f}", st["local_algorithm"], _ratio(st.get("compression"))),
                lambda every: f"wrote {sum(st['rows_out'] for st in every):,} rows to {job.out_dir}/part-*.parquet")


def cmd_dist_group_by(a):
    """One rank of ``mpirun -n P gpujoin dist group-by``: read this rank's row groups, shuffle the
    rows by key hash (a group's rows all on one rank), aggregate, write OUT/part-RANK.parquet; the
    files appear only when every rank has succeeded."""
    from .dist.join import group_by
    from .table import check_columns

    job = _DistJob("group-by", a.output)
    comm = job.comm
    aggs = dict(_parse_agg(s) for s in a.agg)
    by = [b for s in a.by for b in _csv_list(s)]
    (table,) = job.read([a.table], ["input"])

    job.agreed(lambda: check_columns(table, by + [c for c, _ in aggs.values() if c is not None], "input"),
               "checking the group-by")
    if a.placement == "gpu":
        from .cuda.table import DeviceTable

        table = job.agreed(lambda: DeviceTable.from_arrow(table), "moving the input to the GPUs")
    stats: dict = {}
    grouped = job.collective(lambda: group_by(table, by, comm=comm, shuffle=a.shuffle, compression=a.compression,
                                              device=a.device, algorithm=a.algorithm, stats=stats))
    t1 = time.perf_counter()
    result = job.agreed(lambda: grouped.agg(**aggs), "aggregating")  # (local: a group's rows are all here)
    t2 = time.perf_counter()
    job.write(result)
    job.summary({**stats, "groups": result.num_rows, "aggregate": t2 - t1, "algorithm": grouped.stats.algorithm},
                "", ("in", "got", "groups", "part ms", "a2a ms", "agg ms", "algo", "comp"),
                lambda st: (f"{st['rows_in']:,}", f"{st['rows_received']:,}", f"{st['groups']:,}",
                            f"{st['partition'] * 1e3:,.1f}", f"{st['shuffle'] * 1e3:,.1f}",
                            f"{st['aggregate'] * 1e3:,.1f}", st["algorithm"], _ratio(st.get("compression"))),
                lambda every: f"wrote {sum(st['groups'] for st in every):,} groups to {job.out_dir}/part-*.parquet")


def _ratio(columns: dict | None) -> str:
    """The compressed columns' bytes before over after, or '-'."""
    raw = sum(c["raw_bytes"] for c in (columns or {}).values())
    sent = sum(c["bytes"] for c in (columns or {}).values())
    return f"{raw / sent:.2f}x" if sent else "-"


def cmd_dist_model(a):
    from dataclasses import replace

    from .dist import model as m

    rates = replace(m.H200, **{k: v for k, v in dict(
        inter_Bps=a.inter_node_GBps and a.inter_node_GBps * 1e9, intra_Bps=a.intra_node_GBps and a.intra_node_GBps * 1e9,
        alpha_s=a.message_us is not None and a.message_us * 1e-6, partition_Bps=a.partition_GBps and a.partition_GBps * 1e9,
        shuffle_partition_Bps=a.shuffle_partition_GBps and a.shuffle_partition_GBps * 1e9,
        join_tuples_per_s=a.join_gtuples and a.join_gtuples * 1e9).items() if v})
    base = m.TPCH if a.workload == "tpch" else m.RANDOM
    if a.rows_per_gpu:
        base = replace(base, left_rows=a.rows_per_gpu, right_rows=a.rows_per_gpu)
    ratios = [1.0] + ([a.compression_ratio] if a.compression_ratio and a.compression_ratio != 1.0 else [])
    phases = ["partition", "compress", "all-to-all", "decompress", "local join"]
    short = {"partition": "part", "compress": "comp", "all-to-all": "a2a", "decompress": "decomp", "local join": "join"}
    t = RichTable(title=f"paper 001's join, {a.workload} workload, {base.left_rows / 1e6:,.0f}M x "
                        f"{base.right_rows / 1e6:,.0f}M rows a GPU (model; per-phase ms on every GPU)")
    for c in ["GPUs", "shuffle", "ratio"] + [short[p] for p in phases] + ["total", "G tuples/s"]:
        t.add_column(c, justify="right")
    for g in [int(x) for x in _csv_list(a.gpus)]:
        for shuffle in _csv_list(a.shuffle):
            for ratio in ratios:
                r = m.predict(replace(base, compression=ratio), g, a.gpus_per_node, rates, shuffle)
                t.add_row(str(g), shuffle.replace("-level", "-lvl"), f"{ratio:g}x" if ratio != 1.0 else "none",
                          *[f"{r['phases'][p] * 1e3:,.1f}" for p in phases], f"{r['total_s'] * 1e3:,.1f}",
                          f"{r['tuples_per_s'] / 1e9:,.1f}")
    console.print(t)
    console.print("rates: " + ", ".join(f"{k} {v:.3g}" for k, v in m.rates_dict(rates).items()))
    # beside paper 001's figures, at the paper's scales (8 GPUs a node), with these rates
    P = m.PAPER
    fig6 = m.predict(m.RANDOM, 1024, 8, rates)["tuples_per_s"]
    cross = m.crossover(512, 8, rates)
    alpha = m.alpha_for_crossover(P["fig7_crossover_rows_512"], 512, 8, rates)
    tp_u = m.predict(m.TPCH, 1024, 8, rates)
    tp_c = m.predict(replace(m.TPCH, compression=a.tpch_ratio), 1024, 8, rates)
    c = RichTable(title="the model beside paper 001 (1,024 A100s, 200 Gb/s HDR InfiniBand)")
    for col in ("figure", "paper", "model", "model / paper"):
        c.add_column(col, justify="right" if col != "figure" else "left")
    rows = [("Fig. 6 random, 1024 GPUs, G tuples/s", P["fig6_random_1024_one_level_tuples_per_s"] / 1e9, fig6 / 1e9),
            ("Fig. 7 crossover at 512 GPUs, M rows a GPU", P["fig7_crossover_rows_512"] / 1e6, cross / 1e6),
            ("Fig. 8 TPC-H uncompressed, G tuples/s", P["fig8_tpch_1024_uncompressed_tuples_per_s"] / 1e9,
             tp_u["tuples_per_s"] / 1e9),
            (f"Fig. 8 TPC-H compressed ({a.tpch_ratio:g}x), G tuples/s", P["fig8_tpch_1024_compressed_tuples_per_s"] / 1e9,
             tp_c["tuples_per_s"] / 1e9),
            ("Fig. 8 speedup from compression", P["fig8_tpch_1024_compressed_tuples_per_s"] /
             P["fig8_tpch_1024_uncompressed_tuples_per_s"], tp_c["tuples_per_s"] / tp_u["tuples_per_s"]),
            ("Fig. 9 TPC-H all-to-all uncompressed, ms", P["fig9_all_to_all_uncompressed_s"] * 1e3,
             tp_u["phases"]["all-to-all"] * 1e3),
            ("Fig. 9 TPC-H all-to-all compressed, ms", P["fig9_all_to_all_compressed_s"] * 1e3,
             tp_c["phases"]["all-to-all"] * 1e3)]
    for name, paper, model in rows:
        c.add_row(name, f"{paper:,.2f}", f"{model:,.2f}", f"{model / paper:.2f}" if paper else "")
    console.print(c)
    if alpha is not None:
        console.print(f"a per-message time of {alpha * 1e6:.1f} us puts the model's crossover at the paper's 25M rows")


def cmd_calibrate(a):
    from .plan.calibrate import cache_file, calibrate

    c = calibrate(force=a.force)
    t = RichTable(title=f"{c['name']} (cached in {cache_file()})")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_row("B_G, device copy", f"{c['b_g'] / 1e9:,.0f} GB/s")
    for k in ("random", "sorted"):
        t.add_row(f"4-byte gather, {k}", f"{c[f'gather_{k}_items_per_s'] / 1e9:.1f} G items/s")
    for k in ("l1", "l2"):
        if f"{k}_bytes_per_s" in c:
            t.add_row(f"{k.upper()} read bandwidth", f"{c[f'{k}_bytes_per_s'] / 1e9:,.0f} GB/s")
    t.add_row("B_G / B_R (paper 003 Table 1: 24 on A100)", f"{c['ratio_random']:.1f}")
    t.add_row("B_L1 / B_G, B_L2 / B_G (A100: 12, 4.5)", f"{c['ratio_l1']:.1f}, {c['ratio_l2']:.1f}")
    console.print(t)


def cmd_tpch(a):
    from .backend import resolve_device
    from .tpch.data import ensure_data
    from .tpch.queries import QUERIES
    from .tpch.runner import run

    queries = _csv_list(a.queries) or list(QUERIES)
    bad = [q for q in queries if q not in QUERIES]
    if bad:
        raise ValueError(f"unknown TPC-H query {bad[0]!r}; valid: {','.join(QUERIES)}")
    device = resolve_device(a.device, "join")
    where = device if device == resolve_device(a.device, "group_by") else f"{device} (joins), cpu (group-by)"
    data = Path(a.data_dir) if a.data_dir else ensure_data(a.sf)
    def progress(r):  # one line per query on stderr, so a cut-off run still shows what finished
        print(f"Q{r.query}: {r.gpujoin_s * 1e3:.1f} ms, DuckDB {r.duckdb_s * 1e3:.1f} ms, "
              f"{'validated' if r.validated else 'DIFFERS'}", file=sys.stderr, flush=True)

    results = run(data, queries, device=a.device if a.device == "auto" else device, repeat=a.repeat,
                  threads=a.threads, on_result=progress)
    t = RichTable(title=f"TPC-H SF {a.sf:g} on {where} (median of {a.repeat}; DuckDB on the same CPUs)")
    for col in ("query", "result rows", "gpujoin ms", "DuckDB ms", "speedup", "validated"):
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(r.query if r.query == "lo" else f"Q{r.query}", str(r.rows), f"{r.gpujoin_s * 1e3:.1f}",
                  f"{r.duckdb_s * 1e3:.1f}", f"{r.speedup:.2f}x", "yes" if r.validated else "[red]NO[/red]")
    console.print(t)
    failed = [r for r in results if not r.validated]
    for r in failed:
        console.print(f"[red]Q{r.query} differs from DuckDB:[/red] {r.difference}")
    if a.json:
        Path(a.json).write_text("\n".join(json.dumps(r.__dict__) for r in results) + "\n")
    if failed:
        sys.exit(1)


def _sweep(spec: str | None, base: dict) -> list[dict]:
    if not spec:
        return [base]
    name, _, values = spec.partition("=")
    if name not in base or not values:
        raise ValueError(f"--sweep {spec!r}: use PARAM=V1,V2,... with PARAM one of {sorted(base)}")
    kind = type(base[name])
    return [{**base, name: kind(v)} for v in _csv_list(values)]


def _write_records(records: list[dict], output: str | None) -> None:
    """Append JSON lines to ``output``, or print them."""
    lines = "".join(json.dumps(r) + "\n" for r in records)
    if output:
        with open(output, "a") as f:
            f.write(lines)
    else:
        sys.stdout.write(lines)


def cmd_bench(a):
    from .bench import runner
    from .bench.workloads import GroupByWorkload, JoinWorkload

    if a.what == "plot":
        from .bench.plot import plot

        if not Path(a.file).exists():
            raise FileNotFoundError(f"no such file: {a.file}")
        console.print(f"wrote {plot(Path(a.file), Path(a.output))}")
        return
    peers = _csv_list(a.peers)
    if a.what == "join":
        base = dict(log2_r=a.log2_r, log2_s=a.log2_s if a.log2_s is not None else a.log2_r,
                    match_ratio=a.match_ratio, zipf=a.zipf, distinct_keys=a.distinct_keys, payloads=a.payloads,
                    key_bytes=a.key_bytes, payload_bytes=a.payload_bytes, seed=a.seed, heavy_share=a.heavy_share,
                    build_zipf=a.build_zipf, equal_rows=a.equal_rows)
        algos = _csv_list(a.algorithm)
        runs = [runner.bench_join(JoinWorkload(**w), a.device, algos, a.runs, peers) for w in _sweep(a.sweep, base)]
    else:
        base = dict(log2_rows=a.log2_rows, log2_groups=a.log2_groups, zipf=a.zipf, values=a.values,
                    key_bytes=a.key_bytes, seed=a.seed)
        algos = _csv_list(a.algorithm)
        runs = [runner.bench_group_by(GroupByWorkload(**w), a.device, algos, a.runs, peers)
                for w in _sweep(a.sweep, base)]
    records = [r for rs in runs for r in rs]
    _write_records(records, a.output)
    t = RichTable(title=f"gpujoin bench {a.what}")
    for col in ("workload", "engine", "algorithm", "median ms", "min ms", "max ms", "G items/s", "phases ms"):
        t.add_column(col)
    for r in records:
        defaults = (JoinWorkload() if a.what == "join" else GroupByWorkload()).describe()
        w = " ".join(f"{k}={v}" for k, v in r["workload"].items() if k.startswith("log2") or v != defaults[k])
        ph = " ".join(f"{k}={v * 1e3:.0f}" for k, v in r["phases_s"].items())
        algo = r["algorithm"] + (f" ({r['chosen']})" if "chosen" in r else "")
        t.add_row(w, r["engine"], algo, f"{r['median_s'] * 1e3:.1f}", f"{r['min_s'] * 1e3:.1f}",
                  f"{r['max_s'] * 1e3:.1f}", f"{r['throughput_g_per_s']:.3f}", ph)
    Console(stderr=True).print(t)


def cmd_bench_out_of_core(a):
    from .bench.out_of_core import bench_out_of_core
    from .outofcore.budget import parse_bytes

    limits = [None if x.lower() == "none" else x for x in _csv_list(a.memory_limit)]
    for x in limits:
        if x is not None:
            parse_bytes(x, "--memory-limit")
    modes = _choices(a.mode, ("sum", "table", "arrow"), "--mode")
    fracs = [float(x) for x in _csv_list(a.cache_fraction)] if a.cache_fraction else None
    from .bench.out_of_core import BASELINES

    baselines = _choices(a.baselines, BASELINES, "--baselines")
    records = bench_out_of_core([int(x) for x in _csv_list(a.log2_n)], limits, modes, a.runs, fracs,
                                [int(x) for x in _csv_list(a.streams)], a.seed,
                                log=_stderr,
                                item_bytes=a.item_bytes, baselines=baselines,
                                inputs=_choices(a.input, ("pageable", "pinned"), "--input"))
    _write_records(records, a.output)


def cmd_bench_out_of_core_group_by(a):
    from .bench.out_of_core import bench_out_of_core_group_by

    limits = [None if x.lower() == "none" else x for x in _csv_list(a.memory_limit)]
    records = bench_out_of_core_group_by(a.log2_rows, a.log2_groups, limits, a.runs, a.seed, _csv_list(a.peers),
                                         log=_stderr)
    _write_records(records, a.output)


def cmd_bench_multi_gpu(a):
    from .bench.multi_gpu import bench_multi_gpu
    from .outofcore.budget import parse_bytes

    parse_bytes(a.memory_limit, "--memory-limit")
    inner = _choices(a.inner, ("phj-tr", "phj-ur", "smj-tr", "smj-ur", "nphj", "gsm"), "--inner")
    peers = _choices(a.peers, ("duckdb", "polars", "cpu-radix"), "--peers") if a.peers else []
    shares = [float(x) for x in _csv_list(a.r_share)]
    if any(not 0 < x < 1 for x in shares):
        raise ValueError(f"--r-share takes fractions between 0 and 1 (|R| of |R| + |S|), got {a.r_share!r}")
    # each record written as it is made: those before a failing GPU count or size stay
    bench_multi_gpu([int(x) for x in _csv_list(a.log2_n)], [int(x) for x in _csv_list(a.gpus)],
                    a.memory_limit, inner, [int(x) for x in _csv_list(a.band_log2_n)], a.band_width,
                    a.runs, a.streams, log=_stderr, zipf=[float(x) for x in _csv_list(a.zipf)],
                    output_ratios=[int(x) for x in _csv_list(a.output_ratio)],
                    r_shares=[float(x) for x in _csv_list(a.r_share)], transfer_only=a.transfer_only,
                    peers=peers, inputs=_choices(a.input, ("pageable", "pinned"), "--input"),
                    emit=lambda r: _write_records([r], a.output), pools=a.pools)


def cmd_bench_dist(a):
    from .bench.dist import bench_dist

    shuffles = _choices(a.shuffle, ("auto", "one-level", "two-level"), "--shuffle")
    compressions = _choices(a.compression, ("none", "auto", "cascaded"), "--compression")
    # each record written as it is made (on rank 0): those before a failing setting stay
    buckets = [b if b == "auto" else _whole(b, "--buckets") for b in _csv_list(a.buckets)]
    bench_dist([int(float(x)) for x in _csv_list(a.rows)], shuffles, a.device, a.runs, log=_stderr,
               workload=a.workload, sf=a.sf, compressions=compressions, placement=a.placement,
               ranks_per_node=a.ranks_per_node, emit=lambda r: _write_records([r], a.output), buckets=buckets,
               radix=_choices(a.shuffle_radix, ("auto", "off"), "--shuffle-radix"))


def cmd_bench_compression(a):
    from .bench.dist import bench_compression

    records = bench_compression(a.sf, log=_stderr, device=a.device, runs=a.runs)
    _write_records(records, a.output)


def cmd_bench_join_where(a):
    from .bench.join_where import bench_join_where

    algos = _choices(a.algorithm, ("nlj", "band", "auto"), "--algorithm")
    records = bench_join_where([int(x) for x in _csv_list(a.log2_n)], a.width, algos, a.device, a.runs)
    _write_records(records, a.output)
    for r in records:
        console.print(f"2^{r['workload']['log2_l']} {r['algorithm']:5} on {r['device']}: {r['median_s'] * 1e3:,.1f} ms, "
                      f"{r['output_rows']:,} rows, {r['throughput_g_per_s']:.3f} G input rows/s")


def cmd_bench_cpu_joins(a):
    from .bench.cpu_joins import CPU_ALGORITHMS, bench_cpu_joins, summary

    algos = _choices(a.algorithms, CPU_ALGORITHMS, "CPU join")
    threads = [int(t) for t in _csv_list(a.threads)] if a.threads else None
    sizes = [1 << int(x) for x in _csv_list(a.log2_n)]
    records = bench_cpu_joins(sizes, threads, a.runs, algos, _csv_list(a.peers), a.gpu, a.seed)
    _write_records(records, a.output)
    tcounts = sorted({r["threads"] for r in records if "threads" in r})
    t = RichTable(title="set intersection, median ms (paper 002 Figs. 3-5)")
    for col in ["n", "engine"] + [f"{x}T" for x in tcounts]:
        t.add_column(col, justify="right")
    for n in sorted({r["workload"]["n"] for r in records}):
        for name in dict.fromkeys(r["algorithm"] if r["engine"] == "gpujoin" else r["engine"]
                                  for r in records if r["workload"]["n"] == n and "threads" in r):
            ms = {r["threads"]: r["median_s"] * 1e3 for r in records if r["workload"]["n"] == n and "threads" in r
                  and (r["algorithm"] if r["engine"] == "gpujoin" else r["engine"]) == name}
            t.add_row(f"2^{n.bit_length() - 1}", name, *[f"{ms[x]:.1f}" if x in ms else "" for x in tcounts])
    err = Console(stderr=True)
    err.print(t)
    for row in summary(records):
        err.print(f"n=2^{row.pop('n').bit_length() - 1}: " + "; ".join(f"{k} {v[0]} {v[1]:.1f} ms" for k, v in row.items()))


def cmd_info(a):
    import numba
    import numpy
    import pyarrow

    from . import __version__
    from .backend import algorithms, devices

    t = RichTable(title="gpujoin")
    t.add_column("item")
    t.add_column("value")
    t.add_row("gpujoin", __version__)
    t.add_row("python", sys.version.split()[0])
    for mod in (numpy, numba, pyarrow):
        t.add_row(mod.__name__, mod.__version__)
    try:
        import cupy

        t.add_row("cupy", cupy.__version__)
    except Exception:
        t.add_row("cupy", "not installed")
    t.add_row("CPU threads", str(numba.get_num_threads()))
    for dev in devices():
        algos = algorithms(dev)
        t.add_row(f"device {dev}", "; ".join(f"{op}: {', '.join(n)}" for op, n in algos.items()))
    console.print(t)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpujoin", description="Relational joins and grouped aggregations on GPUs (and CPUs).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(sp, explain=False, many=False):
        sp.add_argument("--algorithm", default="auto", help=(
            "comma-separated: 'auto', standard names (see `gpujoin info`), or 'all' for every algorithm "
            "(all,auto also times the planner's choice)" if many else
            "'auto' or a standard name (see `gpujoin info`)"))
        sp.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
        if explain:
            sp.add_argument("--explain", action="store_true",
                            help="print the plan: statistics, predicted times, choice, measured phases")
            sp.add_argument("--memory-limit", help="GPU memory the operation may take, e.g. 16GB (default: "
                            "$GPUJOIN_MEMORY_LIMIT, else the free memory); past it host data runs out of core")
            sp.add_argument("--gpus", help="GPUs of this host to spread the work over: a count (2) or device ids "
                            "(0,1); default one, all when the work does not fit one (memory limit each)")

    j = sub.add_parser("join", help="join two files (Parquet, CSV, Arrow IPC)")
    j.add_argument("left")
    j.add_argument("right")
    j.add_argument("--on", help="key column(s), comma-separated")
    j.add_argument("--left-on")
    j.add_argument("--right-on")
    j.add_argument("--how", default="inner", choices=["inner", "left", "right", "full", "semi", "anti", "cross"])
    j.add_argument("--suffix", default="_right")
    j.add_argument("--nulls-equal", action="store_true")
    j.add_argument("--validate", default="m:m", choices=["m:m", "1:m", "m:1", "1:1"])
    j.add_argument("-o", "--output", required=True)
    common(j, explain=True)
    j.set_defaults(fn=cmd_join)

    jw = sub.add_parser("join-where", help="θ-join of two files on comparisons of columns (Polars' join_where)")
    jw.add_argument("left")
    jw.add_argument("right")
    jw.add_argument("--where", action="append", required=True,
                    help="LEFT_COLUMN OP RIGHT_COLUMN, OP one of < <= > >= == != (repeat: all must hold)")
    jw.add_argument("--suffix", default="_right")
    jw.add_argument("-o", "--output", required=True)
    jw.add_argument("--algorithm", default="auto", choices=["auto", "band", "nlj"])
    jw.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    jw.add_argument("--explain", action="store_true", help="print the plan and the candidates it walked")
    jw.add_argument("--memory-limit", help="GPU memory the join may take, e.g. 16GB")
    jw.add_argument("--gpus", help="run the ring over these GPUs: a count (2) or device ids (0,1)")
    jw.set_defaults(fn=cmd_join_where)

    g = sub.add_parser("group-by", help="grouped aggregation of a file")
    g.add_argument("table")
    g.add_argument("--by", action="append", required=True, help="key column(s); repeat or comma-separate")
    g.add_argument("--agg", action="append", required=True, help="NAME=COLUMN:FUNCTION (sum, count, size, min, max, mean, n_unique)")
    g.add_argument("-o", "--output", required=True)
    common(g, explain=True)
    g.set_defaults(fn=cmd_group_by)

    t = sub.add_parser("tpch", help="run the TPC-H job, validated against DuckDB")
    t.add_argument("--sf", type=float, default=1.0)
    t.add_argument("--queries", help="comma-separated: 3,5,7,10,12,18,19,lo (default all)")
    t.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    t.add_argument("--repeat", type=int, default=3)
    t.add_argument("--threads", type=int, help="DuckDB threads (default: all cores)")
    t.add_argument("--data-dir", help="use these Parquet files instead of the generated cache")
    t.add_argument("--json", help="also write the results as JSON lines to this file")
    t.set_defaults(fn=cmd_tpch)

    b = sub.add_parser("bench", help="benchmarks of paper 003 §5 (JSON lines)")
    bsub = b.add_subparsers(dest="what", required=True, parser_class=_Parser)
    for name in ("join", "group-by"):
        bb = bsub.add_parser(name)
        common(bb, many=True)
        bb.add_argument("--runs", type=int, default=5,
                        help="timed runs of each algorithm after a warm-up, taken in rounds of one run of each in a "
                             "new order (default 5; the median is reported)")
        bb.add_argument("--peers", help="comma-separated: duckdb,polars")
        bb.add_argument("--zipf", type=float, default=0.0)
        bb.add_argument("--key-bytes", type=int, default=4, choices=[4, 8])
        bb.add_argument("--seed", type=int, default=42)
        bb.add_argument("--sweep", help="PARAM=V1,V2,... (a workload field, e.g. match_ratio=1,0.5,0.25)")
        bb.add_argument("-o", "--output", help="append JSON lines to this file (default: stdout)")
        if name == "join":
            bb.add_argument("--log2-r", type=int, default=24)
            bb.add_argument("--log2-s", type=int)
            bb.add_argument("--match-ratio", type=float, default=1.0)
            bb.add_argument("--distinct-keys", type=int, default=0)
            bb.add_argument("--payloads", type=int, default=1)
            bb.add_argument("--payload-bytes", type=int, default=4, choices=[4, 8])
            bb.add_argument("--heavy-share", type=float, default=0.0,
                            help="share of S's rows that take one key of R (a heavy hitter)")
            bb.add_argument("--build-zipf", type=float, default=0.0,
                            help="Zipf exponent of R's keys over --distinct-keys (many-to-many, build-side skew)")
            bb.add_argument("--equal-rows", type=int, default=0,
                            help="both sides this many rows of one key (output its square), instead of the log2 sizes")
        else:
            bb.add_argument("--log2-rows", type=int, default=24)
            bb.add_argument("--log2-groups", type=int, default=16)
            bb.add_argument("--values", type=int, default=2)
        bb.set_defaults(fn=cmd_bench)
    bo = bsub.add_parser("out-of-core", help="paper 004: the Triton join of host data past GPU memory")
    bo.add_argument("--log2-n", default="27", help="comma-separated log2 of |R| = |S| (16-byte tuples)")
    bo.add_argument("--memory-limit", default="16GB", help="comma-separated GPU budgets; 'none' for the free memory")
    bo.add_argument("--mode", default="sum,table", help="sum (paper 004's measure), table (materialized on the host), "
                    "arrow (gpujoin.join on Arrow tables, host to host)")
    bo.add_argument("--item-bytes", type=int, default=8, choices=[4, 8], help="key and payload width")
    bo.add_argument("--cache-fraction", help="comma-separated shares of half the budget kept as cache (Fig. 19)")
    bo.add_argument("--streams", default="3", help="comma-separated: 3 (overlapped) and/or 1")
    bo.add_argument("--baselines", default="", help="comma-separated, SUM mode: npj-perfect, npj-linear (R's table "
                    "in GPU memory, S streamed), cpu-radix, duckdb, polars")
    bo.add_argument("--input", default="pageable", help="comma-separated: pageable (staged through pinned "
                    "buffers), pinned (page-locked in place first: no staging copy)")
    bo.add_argument("--runs", type=int, default=3)
    bo.add_argument("--seed", type=int, default=42)
    bo.add_argument("-o", "--output", help="append JSON lines to this file (default: stdout)")
    bo.set_defaults(fn=cmd_bench_out_of_core)

    bg = bsub.add_parser("out-of-core-group-by", help="a host table's group-by under a GPU memory limit")
    bg.add_argument("--log2-rows", type=int, default=28)
    bg.add_argument("--log2-groups", type=int, default=24)
    bg.add_argument("--memory-limit", default="16GB", help="comma-separated GPU budgets; 'none' for the free memory")
    bg.add_argument("--runs", type=int, default=2)
    bg.add_argument("--peers", default="", help="duckdb")
    bg.add_argument("--seed", type=int, default=42)
    bg.add_argument("-o", "--output", help="append JSON lines to this file (default: stdout)")
    bg.set_defaults(fn=cmd_bench_out_of_core_group_by)

    bw = bsub.add_parser("join-where", help="join_where's band join |a - b| <= w (paper 000's band workload)")
    bw.add_argument("--log2-n", default="20", help="comma-separated log2 of |L| = |R|")
    bw.add_argument("--width", type=int, default=4, help="the band's half width w")
    bw.add_argument("--algorithm", default="band", help="comma-separated: band, nlj, auto")
    bw.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    bw.add_argument("--runs", type=int, default=3)
    bw.add_argument("-o", "--output", help="append JSON lines to this file (default: stdout)")
    bw.set_defaults(fn=cmd_bench_join_where)

    bm = bsub.add_parser("multi-gpu", help="paper 000: the hybrid join and the ring's band join on 1..D GPUs")
    bm.add_argument("--log2-n", default="28", help="comma-separated log2 of |R| = |S| (int32 key + int32 payload); "
                    "'' for none")
    bm.add_argument("--gpus", default="1,2", help="comma-separated GPU counts")
    bm.add_argument("--memory-limit", default="16GB", help="each GPU's budget")
    bm.add_argument("--inner", default="phj-tr", help="comma-separated in-core joins of the partition pairs "
                    "(smj-tr: paper 000's sort-merge); gsm: the global sort-merge join instead")
    bm.add_argument("--zipf", default="0", help="comma-separated Zipf exponents of S's keys (0: uniform)")
    bm.add_argument("--output-ratio", default="1", help="comma-separated output sizes over |S| (Fig. 11: 1,2,4,8,16)")
    bm.add_argument("--r-share", default="0.5", help="comma-separated |R| / (|R| + |S|) at the fixed sum 2 * 2^n "
                    "(Fig. 10: 0.125,0.25,0.5,0.75; 0.5 is |R| = |S|)")
    bm.add_argument("--transfer-only", action="store_true", help="also time each join with its in-core joins "
                    "disabled (Fig. 8), beside the cost models' transfer predictions")
    bm.add_argument("--peers", default="", help="comma-separated host engines run on the same tables once a "
                    "workload: duckdb, polars, cpu-radix")
    bm.add_argument("--input", default="pageable", help="comma-separated: pageable (NumPy's memory: the chunks "
                    "pass through pinned staging buffers), pinned (page-locked in place first, paper 000's setting)")
    bm.add_argument("--pools", default="cold", choices=["cold", "warm"], help="cold: every GPU's memory pool "
                    "emptied between runs (each pays its cudaMalloc calls, as a process's first join); warm: kept "
                    "(a process's later joins, as cuDF under an RMM pool)")
    bm.add_argument("--band-log2-n", default="24", help="comma-separated log2 of |L| = |R| of the ring's band join")
    bm.add_argument("--band-width", type=int, default=4)
    bm.add_argument("--streams", type=int, default=3, choices=[1, 3])
    bm.add_argument("--runs", type=int, default=3)
    bm.add_argument("-o", "--output", help="append JSON lines to this file (default: stdout)")
    bm.set_defaults(fn=cmd_bench_multi_gpu)

    bd = bsub.add_parser("dist", help="paper 001's random workload under mpirun: the distributed join's phases")
    bd.add_argument("--workload", default="random", choices=["random", "tpch"],
                    help="random (unique int64 keys, 30%% matching) or TPC-H lineitem x orders")
    bd.add_argument("--rows", default="1e6", help="comma-separated rows of each table a rank (random)")
    bd.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (tpch)")
    bd.add_argument("--compression", default="none", help="comma-separated: none, auto, cascaded")
    bd.add_argument("--shuffle", default="one-level,two-level")
    bd.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    bd.add_argument("--placement", default="host", choices=["host", "gpu"],
                    help="where each rank's tables are: host (shuffled over MPI) or gpu (in GPU memory, "
                         "shuffled over NCCL; with the NCCL ceiling and the one-GPU join beside)")
    bd.add_argument("--ranks-per-node", type=int, default=None,
                    help="play hosts of this many consecutive ranks (default: MPI's shared-memory split), "
                         "so that one machine runs the two-level shuffle as several hosts")
    bd.add_argument("--buckets", default="auto",
                    help="comma-separated: the local join's hash buckets (tables in GPU memory), 'auto' or a number")
    bd.add_argument("--shuffle-radix", default="auto",
                    help="comma-separated: 'auto' (tables in GPU memory: the shuffle's partition does the local "
                         "join's first radix pass where that saves one, dist.radix_shuffle) or 'off' "
                         "(GPUJOIN_SHUFFLE_RADIX=0), each timed in turn")
    bd.add_argument("--runs", type=int, default=3, help="runs; the minimum is reported (as paper 001)")
    bd.add_argument("-o", "--output", help="append JSON lines to this file (default: stdout)")
    bd.set_defaults(fn=cmd_bench_dist)

    bz = bsub.add_parser("compression", help="paper 001 Table 1: the cascaded selector on TPC-H's shuffled columns")
    bz.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (generated with tpchgen-cli)")
    bz.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cpu: gpujoin's NumPy codec; cuda: nvCOMP's cascaded codec on the GPU (nvidia-nvcomp-cu13)")
    bz.add_argument("--runs", type=int, default=5, help="timed runs on the GPU; the median is reported")
    bz.add_argument("-o", "--output", help="append JSON lines to this file (default: stdout)")
    bz.set_defaults(fn=cmd_bench_compression)

    bc = bsub.add_parser("cpu-joins", help="paper 002: set intersection of unique 32-bit keys vs threads")
    bc.add_argument("--log2-n", default="22,23,24", help="comma-separated log2 of the keys per side")
    bc.add_argument("--threads", help="comma-separated thread counts (default 1, 2, 4, ... all)")
    bc.add_argument("--algorithms", default="merge,hash,split,bucket,phj")
    bc.add_argument("--runs", type=int, default=5)
    bc.add_argument("--peers", default="", help="comma-separated: duckdb,polars")
    bc.add_argument("--gpu", action="store_true", help="also the GPU bitmap join (compute, and with transfers)")
    bc.add_argument("--seed", type=int, default=2011)
    bc.add_argument("-o", "--output", help="append JSON lines to this file (default: stdout)")
    bc.set_defaults(fn=cmd_bench_cpu_joins)
    bp = bsub.add_parser("plot")
    bp.add_argument("file")
    bp.add_argument("-o", "--output", required=True)
    bp.set_defaults(fn=cmd_bench)

    d = sub.add_parser("dist", help="distributed joins (paper 001)")
    dsub = d.add_subparsers(dest="what", required=True, parser_class=_Parser)
    def dist_options(sp, what: str):  # (both jobs: the shuffle, where the rows live, the output)
        sp.add_argument("--shuffle", default="auto", choices=["auto", "one-level", "two-level"])
        sp.add_argument("--compression", default="auto", choices=["auto", "none", "cascaded"],
                        help="cascaded compression of the shuffled integer columns: of messages to other hosts "
                             "(auto), of every message, or none")
        sp.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
        sp.add_argument("--placement", default="host", choices=["host", "gpu"],
                        help=f"host: rows shuffled over MPI from host memory, {what} on --device; gpu: each rank's "
                             f"rows moved to its GPU, hashed, partitioned and shuffled there over NCCL (compressed by "
                             f"nvCOMP when installed), {what} on the GPU")
        sp.add_argument("-o", "--output", required=True, help="output folder (part-RANK.parquet files)")

    dj = dsub.add_parser("join", help="one rank of `mpirun -n P gpujoin dist join`: the repartitioned join of two "
                         "Parquet datasets, each rank its share of the row groups, OUT/part-RANK.parquet")
    dj.add_argument("left")
    dj.add_argument("right")
    dj.add_argument("--on", help="key column(s), comma-separated")
    dj.add_argument("--left-on")
    dj.add_argument("--right-on")
    dj.add_argument("--how", default="inner", choices=["inner", "left", "right", "full", "semi", "anti"])
    dj.add_argument("--nulls-equal", action="store_true", help="a null key matches a null key (a row with one goes "
                    "where its key hashes with each null read as a zero)")
    dj.add_argument("--suffix", default="_right")
    dj.add_argument("--validate", default="m:m", choices=["m:m", "1:m", "m:1", "1:1"],
                    help="check the keys' multiplicity (each key's rows meet on one rank: checked there)")
    dj.add_argument("--algorithm", default="auto", help="each rank's local join: 'auto' or a standard name (see "
                    "`gpujoin info`)")
    dist_options(dj, "joined")
    dj.set_defaults(fn=cmd_dist_join)
    dg = dsub.add_parser("group-by", help="one rank of `mpirun -n P gpujoin dist group-by`: a Parquet dataset's "
                         "rows shuffled by key (each rank its share of the row groups), each rank's groups "
                         "aggregated, OUT/part-RANK.parquet")
    dg.add_argument("table")
    dg.add_argument("--by", action="append", required=True, help="key column(s); repeat or comma-separate")
    dg.add_argument("--agg", action="append", required=True,
                    help="NAME=COLUMN:FUNCTION (sum, count, size, min, max, mean, n_unique)")
    dg.add_argument("--algorithm", default="auto", help="each rank's group-by: 'auto' or a standard name")
    dist_options(dg, "grouped")
    dg.set_defaults(fn=cmd_dist_group_by)
    dm = dsub.add_parser("model", help="predict the one- and two-level joins' phases at any scale")
    dm.add_argument("--gpus", default="8,64,512,1024", help="comma-separated GPU counts")
    dm.add_argument("--gpus-per-node", type=int, default=8)
    dm.add_argument("--inter-node-GBps", type=float, help="bytes a GPU sends to other nodes, GB/s (default 25: "
                    "200 Gb/s HDR)")
    dm.add_argument("--intra-node-GBps", type=float, help="all-to-all GB/s sent per GPU within a node (default "
                    "337, measured between two H200s)")
    dm.add_argument("--message-us", type=float, help="microseconds a message of an all-to-all (default 10)")
    dm.add_argument("--partition-GBps", type=float,
                    help="one radix-partition pass (more than 256 ranks), GB/s (default 610, H200)")
    dm.add_argument("--shuffle-partition-GBps", type=float,
                    help="the partition by destination up to 256 ranks, GB/s (default 1200, H200)")
    dm.add_argument("--join-gtuples", type=float, help="local join, G input tuples/s (default 20.8, H200 PHJ-TR)")
    dm.add_argument("--workload", default="random", choices=["random", "tpch"])
    dm.add_argument("--rows-per-gpu", type=float, help="rows of each table a GPU (default: the paper's)")
    dm.add_argument("--compression-ratio", type=float, help="also model the inter-node bytes compressed this much")
    dm.add_argument("--tpch-ratio", type=float, default=3.9, help="TPC-H compression ratio for the Fig. 8 check "
                    "(default 3.9: Fig. 9's all-to-all, 648 ms against 167)")
    dm.add_argument("--shuffle", default="one-level,two-level")
    dm.set_defaults(fn=cmd_dist_model)

    c = sub.add_parser("calibrate", help="measure this GPU's bandwidths for the cost models (cached)")
    c.add_argument("--force", action="store_true", help="measure again even when cached")
    c.set_defaults(fn=cmd_calibrate)

    i = sub.add_parser("info", help="devices, versions and algorithms")
    i.set_defaults(fn=cmd_info)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    from .interrupt import defer_while_compiling

    defer_while_compiling()  # Ctrl-C inside Numba's compiler would be lost, or crash LLVM
    try:
        args.fn(args)
    except (GpujoinError, ValueError, TypeError, FileNotFoundError, RuntimeError, OSError) as exc:
        _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except MemoryError as exc:  # the budget and what to do, before any work or output
        _fail(f"out of memory: {exc}" if str(exc) else "out of memory", 3)
    except KeyboardInterrupt:
        # the output's temporary file and the pinned buffers were released while the exception
        # unwound; skipping the interpreter's finalization avoids the segmentation fault that
        # Numba's native thread pool gave at exit in 1 of some 20 interrupted CI runs
        print("gpujoin: error: interrupted", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)


if __name__ == "__main__":
    main()
