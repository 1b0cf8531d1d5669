"""Randomized differential runs of the GPU join and group-by against the CPU engine at sizes the
hypothesis tests do not reach (up to 2^21 rows: many partitions, tiles, work units, oversized
partitions and sort-merge fallbacks in one input), for a time budget.  Each case is drawn from
its seed: key distribution (uniform over a domain, unique, Zipf, a heavy hitter of 1-50% of the
rows, all equal, int64 extremes), key type (int64, int32, string, composite), nulls, payload
columns, join type and algorithm (every GPU algorithm and auto; host tables, device tables, and
host tables out of core under a small ``memory_limit``); group-by the same, with every
aggregate of integer, floating and string columns; and ``join_where`` with 1-3 comparisons of
int64 columns (up to 2^11 rows a side, band join and nested loop).
Exact comparison (floating sums to 1e-9 relative).  Prints each failing case's seed and
parameters, then the counts.

    PYTHONPATH=src python3 scripts/fuzz_device.py [--seconds 240] [--first-seed 0] [--only SEED,SEED,...]
        [--max-log2 21] [--duckdb]

``--duckdb``: the CPU engine (the GPU's oracle) against DuckDB on the same cases, no GPU needed,
with key types beside (uint64 past 2^63, int16, uint32, bool, date32, timestamp, decimal128,
float64 with -0.0 and NaN) and every CPU join algorithm.
"""

import operator
import resource
import sys
import time
import traceback
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import gpujoin
from gpujoin.testing import assert_tables_equal

#: gpujoin.cuda.join's and gpujoin.cuda.groupby's ALGORITHMS (not imported: the cases are drawn
#: on machines without CuPy too); bitmap answers semi and anti joins over [0, 2^32) only
JOIN_ALGORITHMS = ("phj-tr", "phj-ur", "smj-tr", "smj-ur", "nphj")
GB_ALGORITHMS = ("hgb", "pgb-tr", "pgb-ur", "sgb-tr", "sgb-de-tr", "sgb-ur")

HOWS = ["inner", "left", "right", "full", "semi", "anti"]
EXTREMES = np.array([-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1], np.int64)
MAX_OUTPUT = 1 << 23  # output rows past which a case is drawn again (the CPU oracle's time)
AGGS = {"sv": ("v", "sum"), "cv": ("v", "count"), "n": (None, "size"), "mn": ("v", "min"), "mx": ("v", "max"),
        "av": ("v", "mean"), "sf": ("f", "sum"), "mxf": ("f", "max"), "mns": ("s", "min"), "mxs": ("s", "max"),
        "cs": ("s", "count"), "uv": ("v", "n_unique"), "uf": ("f", "n_unique"), "us": ("s", "n_unique")}


def keys(rng, n: int, kind: str, domain: int) -> np.ndarray:
    if kind == "uniform":
        return rng.integers(0, domain, n)
    if kind == "unique":
        return rng.permutation(max(n, domain))[:n] * 7 - domain
    if kind == "zipf":
        return rng.zipf(rng.choice([1.1, 1.5, 2.0]), n) % max(domain, 2)
    if kind == "heavy":
        k = rng.integers(0, max(domain, 2), n)
        k[rng.random(n) < rng.choice([0.01, 0.1, 0.5])] = 42
        return k
    if kind == "equal":
        return np.full(n, rng.choice(EXTREMES))
    return rng.choice(EXTREMES, n)  # "extremes"


def key_column(rng, k: np.ndarray, key_type: str, null_share: float):
    mask = rng.random(k.size) < null_share if null_share else None
    if key_type == "int32":  # (int64's extremes as int32's)
        return pa.array(np.clip(k, -(2**31), 2**31 - 1).astype(np.int32), mask=mask)
    if key_type == "string":
        return pa.array([f"s{x % 5000}" for x in k.tolist()], pa.string(), mask=mask)
    if key_type in OTHER_KEYS:
        return OTHER_KEYS[key_type](k, mask)
    return pa.array(k.astype(np.int64), mask=mask)


def _binary_keys(k, mask):
    """Each key's 8 big-endian bytes (zero bytes and bytes that are not UTF-8 among them), the
    first byte dropped for odd keys (values of two lengths), as binary."""
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), k.size, [None, pa.py_buffer(
        np.asarray(k, ">i8").tobytes())]).cast(pa.binary())
    out = pc.if_else(pa.array(k % 2 == 1), pc.binary_slice(fixed, 1, 8), fixed)
    return out if mask is None else pc.if_else(pa.array(mask), pa.scalar(None, pa.binary()), out)


def _float_keys(k, mask):
    f = k.astype(np.float64) / 4.0
    f[k % 7 == 3] = -0.0  # -0.0 joins +0.0; NaN joins NaN (DuckDB's and Polars' rule)
    f[k % 11 == 5] = np.nan
    return pa.array(f, mask=mask)


#: Key types beside int64, int32 and strings (``--duckdb``: what the CPU engine must match DuckDB
#: on; ``--other-keys``: the GPU engine on them too)
OTHER_KEYS = {
    "uint64": lambda k, m: pa.array(k.astype(np.uint64), mask=m),  # (negative ones wrap past 2^63)
    "int16": lambda k, m: pa.array(np.clip(k, -(2**15), 2**15 - 1).astype(np.int16), mask=m),
    "uint32": lambda k, m: pa.array((k % (1 << 32)).astype(np.uint32), mask=m),
    "bool": lambda k, m: pa.array(k % 2 == 0, mask=m),
    "date32": lambda k, m: pa.array((k % 200_000).astype(np.int32), mask=m).view(pa.date32()),
    "timestamp": lambda k, m: pa.array((k % (1 << 50)).astype(np.int64), mask=m).view(pa.timestamp("us")),
    "decimal": lambda k, m: pa.array([None if x is None else Decimal(x) / 100
                                      for x in pa.array(k % 10**15, mask=m).to_pylist()], pa.decimal128(18, 2)),
    "float64": _float_keys,
    "time64": lambda k, m: pa.array((k % 86_400_000_000).astype(np.int64), mask=m).view(pa.time64("us")),
    # (DuckDB holds durations as intervals: int64's extremes do not survive it)
    "duration": lambda k, m: pa.array((k % (1 << 50)).astype(np.int64), mask=m).view(pa.duration("us")),
    "date64": lambda k, m: pa.array((k % 200_000).astype(np.int64) * 86_400_000, mask=m).view(pa.date64()),
    "binary": lambda k, m: _binary_keys(k, m),
}


def _pairs(left, right) -> int:
    """Pairs of equal non-null values of two key columns of one type, floats compared as the
    engines compare keys (-0.0 equals 0.0, every NaN one value: dictionary_encode tells them
    apart, and a left side of 0.0 against a right side of -0.0 had passed as no pairs, then
    joined into 181 M rows, 18 GB of the fuzz's memory with DuckDB's answer beside it)."""
    both = pa.chunked_array(left.chunks + right.chunks, left.type).combine_chunks()
    if pa.types.is_floating(both.type):
        both = pc.if_else(pc.is_nan(both), pa.scalar(float("nan"), both.type), pc.add(both, pa.scalar(0.0, both.type)))
    enc = pc.dictionary_encode(both)
    m = len(enc.dictionary)
    idx = enc.indices.fill_null(m).to_numpy(zero_copy_only=False)
    cl, cr = (np.bincount(part, minlength=m + 1)[:m] for part in (idx[:len(left)], idx[len(left):]))
    return int((cl.astype(np.int64) * cr).sum())


def join_case(seed: int, max_log2: float = 21, other_keys: bool = False):
    rng = np.random.default_rng(seed)
    nl, nr = (int(2 ** rng.uniform(0, max_log2)) if rng.random() > 0.05 else int(rng.integers(0, 2))
              for _ in range(2))
    kind_l, kind_r = rng.choice(["uniform", "unique", "zipf", "heavy", "equal", "extremes"], 2)
    domain = int(2 ** rng.uniform(0, 22))
    key_type = rng.choice(["int64", "int64", "int32", "string", "composite"])
    if other_keys and rng.random() < 0.5:
        key_type = rng.choice(list(OTHER_KEYS))
    nulls = float(rng.choice([0.0, 0.0, 0.05]))
    kl, kr = keys(rng, nl, kind_l, domain), keys(rng, nr, kind_r, domain)
    tables = []
    for k, n, side in ((kl, nl, "l"), (kr, nr, "r")):
        cols = {"k": key_column(rng, k, "int64" if key_type == "composite" else key_type, nulls)}
        if key_type == "composite":
            cols["k2"] = pa.array((k % 3).astype(np.int32))
        cols[f"{side}id"] = pa.array(np.arange(n, dtype=np.int64))
        for j in range(int(rng.integers(0, 3))):
            v = rng.integers(-100, 100, n)
            cols[f"{side}v{j}"] = pa.array(v.astype(rng.choice([np.int32, np.int64, np.float64])),
                                           mask=rng.random(n) < 0.1 if rng.random() < 0.5 else None)
        tables.append(pa.table(cols))
    # the output's rows, bounded (equal keys' products, of the keys as typed: bool keys collapse),
    # so that the CPU oracle stays quick
    if _pairs(tables[0]["k"], tables[1]["k"]) + nl + nr > MAX_OUTPUT:
        return None
    how = str(rng.choice(HOWS))
    algorithm = str(rng.choice(list(JOIN_ALGORITHMS) + ["auto", "auto"]))
    form = str(rng.choice(["host", "host", "device", "out-of-core"]))
    on = ["k", "k2"] if key_type == "composite" else "k"
    return tables, on, how, algorithm, form, dict(sizes=(nl, nr), kinds=(str(kind_l), str(kind_r)), domain=domain,
                                                  key_type=str(key_type), nulls=nulls,
                                                  nulls_equal=draw_nulls_equal(rng, *tables, on))


def draw_nulls_equal(rng, left, right, on) -> bool:
    """Null keys equal (30% of cases), where their pairs keep the output bounded (4,792 x 11,953
    null keys had made 57 M rows)."""
    return bool(rng.random() < 0.3) and all(left[k].null_count * right[k].null_count <= MAX_OUTPUT // 2
                                            for k in ([on] if isinstance(on, str) else on))


def _documented_device_refusal(e: Exception) -> bool:
    """``e`` is a DeviceTable's documented refusal (a composite key wider than 63 bits, a key or
    column type that GPU memory does not hold or join), whose answer is to pass Arrow tables."""
    return any(m in str(e) for m in ("63 bits", "cannot be packed", "pass Arrow tables", "pass an Arrow table",
                                    "cannot live in a DeviceTable"))


def run_join(case) -> None:
    (left, right), on, how, algorithm, form, params = case
    ne = params.get("nulls_equal", False)
    if form == "device":  # each side's strings dictionary-encoded on their own
        from gpujoin.cuda.table import DeviceTable

        want = gpujoin.join(left, right, on, how=how, device="cpu", nulls_equal=ne)
        try:
            got = gpujoin.join(DeviceTable.from_arrow(left), DeviceTable.from_arrow(right), on, how=how,
                               algorithm=algorithm, nulls_equal=ne).to_arrow()
        except (ValueError, gpujoin.SchemaError, TypeError) as e:  # documented (device composite keys must pack
            if not _documented_device_refusal(e):                   # into 63 bits, keys be integers): host path
                raise
            return run_join(((left, right), on, how, algorithm, "host", params))
    else:
        want = gpujoin.join(left, right, on, how=how, device="cpu", nulls_equal=ne)
        kw = {"memory_limit": "4MB", "algorithm": "auto"} if form == "out-of-core" else {"algorithm": algorithm}
        got = gpujoin.join(left, right, on, how=how, device="cuda", nulls_equal=ne, **kw)
    assert_tables_equal(got, want)


def run_join_duckdb(case, con, seed: int) -> None:
    """The CPU engine's pairs (row ids) against DuckDB's on the same tables: each CPU algorithm
    (paper 002's bitmap joins for semi and anti joins), null keys equal or not."""
    (left, right), on, how, _, _, _ = case
    rng = np.random.default_rng(seed + 1)
    names = [on] if isinstance(on, str) else on
    nulls_equal = draw_nulls_equal(rng, left, right, on)
    algorithm = str(rng.choice(["auto", "phj", "merge"] + (["hash", "split", "bucket"] if how in ("semi", "anti")
                                                           and not nulls_equal else [])))
    con.register("l", left)
    con.register("r", right)
    op = "IS NOT DISTINCT FROM" if nulls_equal else "="
    cond = " AND ".join(f"l.{k} {op} r.{k}" for k in names)
    cols = "l.lid" if how in ("semi", "anti") else "l.lid, r.rid"
    want = con.sql(f"SELECT {cols} FROM l {how.upper()} JOIN r ON {cond}").to_arrow_table()
    try:
        got = gpujoin.join(left, right, on, how=how, device="cpu", algorithm=algorithm, nulls_equal=nulls_equal)
    except ValueError as e:  # the bitmap joins take keys in [0, 2^32) only, and say so
        if "[0, 2^32)" not in str(e):
            raise
        got = gpujoin.join(left, right, on, how=how, device="cpu", nulls_equal=nulls_equal)
    assert_tables_equal(got.select(["lid"] if how in ("semi", "anti") else ["lid", "rid"]), want, check_names=False)


def run_group_by_duckdb(case, con) -> None:
    """The CPU engine's aggregates against DuckDB's (SQL's GROUP BY: one group of null keys)."""
    t, by, _, _ = case
    con.register("t", t)
    aggs = {**AGGS, **(OTHER_AGGS if "d" in t.column_names else {})}
    sql = {"sum": "sum({})::BIGINT", "count": "count({})", "size": "count(*)", "min": "min({})", "max": "max({})",
           "mean": "avg({})", "n_unique": "count(DISTINCT {})"}
    plain_sum = ("f", "d")  # (float and decimal sums keep their types)
    cols = ", ".join(f"{sql[fn].format(c) if fn != 'sum' or c not in plain_sum else f'sum({c})'} AS {name}"
                     for name, (c, fn) in aggs.items())
    keys = ", ".join(by)
    want = con.sql(f"SELECT {keys}, {cols} FROM t GROUP BY {keys}").to_arrow_table()
    got = gpujoin.group_by(t, by, device="cpu").agg(**aggs)
    if pa.types.is_duration(t.schema.field(by[0]).type):  # DuckDB gives durations back as intervals: microseconds
        micros = [None if d is None else d.months * 2_592_000_000_000 + d.days * 86_400_000_000 + d.nanoseconds // 1000
                  for d in want.column(0).to_pylist()]
        want = want.set_column(0, by[0], pa.array(micros, pa.int64()))
        got = got.set_column(0, by[0], got.column(0).cast(pa.int64()))
    assert_tables_equal(got, want, check_names=False, rel=1e-9)


#: ``--duckdb``'s aggregates of _other_values' columns, beside AGGS
OTHER_AGGS = {"sd": ("d", "sum"), "mnd": ("d", "min"), "mxd": ("d", "max"), "ad": ("d", "mean"),
              "mndt": ("dt", "min"), "mxts": ("ts", "max"), "cts": ("ts", "count"), "mnb": ("b", "min"),
              "mxb": ("b", "max"), "si": ("i16", "sum"), "mni": ("i16", "min"), "su": ("u", "sum"),
              "mxu": ("u", "max")}


def _other_values(t: pa.Table, rng) -> pa.Table:
    """``t`` with decimal, date, timestamp, bool, int16 and uint64 value columns (nulls among them)."""
    n = t.num_rows
    m = lambda: rng.random(n) < 0.1  # noqa: E731
    cents = rng.integers(-10**12, 10**12, n)
    return (t.append_column("d", pa.array([Decimal(int(x)) / 100 for x in cents], pa.decimal128(18, 2), mask=m()))
            .append_column("dt", pa.array(rng.integers(-50_000, 50_000, n).astype(np.int32), mask=m())
                           .view(pa.date32()))
            .append_column("ts", pa.array(rng.integers(-(2**50), 2**50, n), mask=m()).view(pa.timestamp("us")))
            .append_column("b", pa.array(rng.random(n) < 0.5, mask=m()))
            .append_column("i16", pa.array(rng.integers(-(2**15), 2**15, n).astype(np.int16), mask=m()))
            .append_column("u", pa.array(rng.integers(0, 2**40, n).astype(np.uint64), mask=m())))


def group_by_case(seed: int, max_log2: float = 21, other_keys: bool = False):
    rng = np.random.default_rng(seed)
    n = int(2 ** rng.uniform(0, max_log2))
    kind = str(rng.choice(["uniform", "unique", "zipf", "heavy", "equal", "extremes"]))
    domain = int(2 ** rng.uniform(0, 22))
    key_type = str(rng.choice(["int64", "int32", "string", "composite"]))
    if other_keys and rng.random() < 0.5:
        key_type = str(rng.choice(list(OTHER_KEYS)))
    k = keys(rng, n, kind, domain)
    t = pa.table({"k": key_column(rng, k, "int64" if key_type == "composite" else key_type,
                                  float(rng.choice([0.0, 0.05]))),
                  "k2": pa.array((k % 3).astype(np.int32)),
                  "v": pa.array(rng.integers(-(1 << 40), 1 << 40, n), mask=rng.random(n) < 0.1),
                  "f": pa.array(rng.normal(0, 1e3, n), mask=rng.random(n) < 0.1),
                  "s": pa.array([f"w{x}" for x in rng.integers(0, 50, n).tolist()], pa.string(),
                                mask=rng.random(n) < 0.1)})
    if other_keys:  # value columns of the other types too (their own draws: the GPU's cases stay as they are)
        t = _other_values(t, np.random.default_rng(seed + 12_345))
    by = ["k", "k2"] if key_type == "composite" else ["k"]
    algorithm = str(rng.choice(list(GB_ALGORITHMS) + ["auto", "auto"]))
    form = str(rng.choice(["host", "host", "device", "out-of-core"]))
    return t, by, algorithm, form, dict(rows=n, kind=kind, domain=domain, key_type=key_type, algorithm=algorithm,
                                        form=form)


def run_group_by(case) -> None:
    t, by, algorithm, form = case
    aggs = {**AGGS, **(OTHER_AGGS if "d" in t.column_names else {})}
    if form == "device":  # device keys carry no nulls
        from gpujoin.cuda.table import DeviceTable

        for b in by:
            t = t.filter(t[b].is_valid())
        try:
            got = gpujoin.group_by(DeviceTable.from_arrow(t), by, algorithm=algorithm).agg(**aggs)
        except (ValueError, gpujoin.SchemaError, TypeError) as e:  # documented: device composite keys must
            if not _documented_device_refusal(e):                    # pack into 63 bits, keys be integers
                raise
            got = gpujoin.group_by(t, by, device="cuda", algorithm=algorithm).agg(**aggs)
        got = got.to_arrow() if hasattr(got, "to_arrow") else got
    else:
        # (the other value columns' 93-byte rows: 4 MB is below the streaming path's working set, 4.4 MiB)
        limit = "8MB" if "d" in t.column_names else "4MB"
        kw = {"memory_limit": limit, "algorithm": "auto"} if form == "out-of-core" else {"algorithm": algorithm}
        got = gpujoin.group_by(t, by, device="cuda", **kw).agg(**aggs)
    assert_tables_equal(got, gpujoin.group_by(t, by, device="cpu").agg(**aggs), rel=1e-9)


THETA = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
         "!=": operator.ne}


#: join_where's column types with ``other_keys`` (each comparison's two columns of one type)
THETA_TYPES = ["int64", "int32", "float64", "date32", "timestamp", "decimal", "uint64", "uint32", "int16", "bool",
               "string", "time64", "duration", "date64", "binary"]


def theta_case(seed: int, other_keys: bool = False):
    """join_where's case: 1-3 comparisons a_i op b_i of int64 columns (``other_keys``: each
    comparison's of a type of THETA_TYPES, drawn apart so that the int64 cases stay as they
    are) with nulls among them, up to 2^11 rows a side (a nested loop's output is up to their
    product)."""
    rng = np.random.default_rng(seed)
    types = np.random.default_rng(seed + 54_321).choice(THETA_TYPES, 3) if other_keys else ["int64"] * 3
    nl, nr = (int(2 ** rng.uniform(0, 11)) for _ in range(2))
    ops = [str(o) for o in rng.choice(list(THETA), int(rng.integers(1, 4)))]
    domain = int(2 ** rng.uniform(0, 12))
    tables = []
    for n, side in ((nl, "a"), (nr, "b")):
        cols = {f"{side}{i}": key_column(rng, keys(rng, n, str(rng.choice(["uniform", "zipf", "extremes", "equal"])),
                                                   domain), str(types[i]), float(rng.choice([0.0, 0.05])))
                for i in range(len(ops))}
        cols[f"{side}id"] = pa.array(np.arange(n, dtype=np.int64))
        tables.append(pa.table(cols))
    algorithm = str(rng.choice(["auto", "band", "nlj"]))
    return tables, ops, algorithm, dict(sizes=(nl, nr), ops=ops, domain=domain, algorithm=algorithm,
                                        types=[str(t) for t in types[:len(ops)]])


def run_theta(case, con=None) -> None:
    from gpujoin import col

    (left, right), ops, algorithm = case
    preds = [THETA[op](col(f"a{i}"), col(f"b{i}")) for i, op in enumerate(ops)]
    want = gpujoin.join_where(left, right, *preds, device="cpu")
    if con is None and algorithm == "band" and set(ops) == {"!="}:  # no range or equality to drive it
        try:
            gpujoin.join_where(left, right, *preds, device="cuda", algorithm="band")
        except ValueError as e:
            assert "use 'nlj'" in str(e), e
            return
        raise AssertionError("the band join of != conditions only did not raise")
    if con is None:
        assert_tables_equal(gpujoin.join_where(left, right, *preds, device="cuda", algorithm=algorithm), want)
        return
    con.register("l", left)
    con.register("r", right)
    cond = " AND ".join(f"l.a{i} {op.replace('==', '=')} r.b{i}" for i, op in enumerate(ops))
    duck = con.sql(f"SELECT l.aid, r.bid FROM l JOIN r ON {cond}").to_arrow_table()
    assert_tables_equal(want.select(["aid", "bid"]), duck, check_names=False)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Randomized joins, group-bys and join_wheres: the GPU engine "
                                             "against the CPU engine, or (--duckdb) the CPU engine against DuckDB.")
    ap.add_argument("--seconds", type=float, default=240.0, help="run for this long (default 240)")
    ap.add_argument("--first-seed", type=int, default=0, help="the first case's seed; the next ones count up")
    ap.add_argument("--only", help="comma-separated seeds to run (a failure's traceback printed)")
    ap.add_argument("--duckdb", action="store_true", help="the CPU engine against DuckDB (no GPU needed)")
    ap.add_argument("--max-log2", type=float, default=21, help="the largest tables' log2 rows (default 21)")
    ap.add_argument("--other-keys", action="store_true",
                    help="GPU runs: key and value types beside int64, int32 and strings too (as --duckdb has)")
    args = ap.parse_args()
    seconds, seed, max_log2 = args.seconds, args.first_seed, args.max_log2
    other = args.duckdb or args.other_keys
    only = [int(x) for x in args.only.split(",")] if args.only else None
    duck = None
    if args.duckdb:
        import duckdb

        duck = duckdb.connect()
    end = time.perf_counter() + seconds
    done = {"join": 0, "group-by": 0, "join_where": 0}
    failed = []
    report = time.perf_counter() + 60
    peak_seen, last = 0.0, None
    while time.perf_counter() < end and (only is None or only):
        s = only.pop(0) if only is not None else seed
        seed += 1
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # (KiB on Linux)
        if peak > peak_seen + 1:  # the seed before took a new GiB: named (a kill's suspects)
            print(f"peak resident {peak:.2f} GB after seed {last}", flush=True)
            peak_seen = peak
        last = s
        if time.perf_counter() > report:  # the seed and the peak memory now and then: a kill names its case
            report = time.perf_counter() + 60
            print(f"progress: seed {s}, peak resident {peak:.2f} GB", flush=True)
        for what in ("join", "group-by", "join_where"):
            params = None
            try:
                if what == "join":
                    case = join_case(s, max_log2, other_keys=other)
                    if case is None:
                        continue
                    params = dict(case[5], how=case[2], algorithm=case[3], form=case[4])
                    run_join(case) if duck is None else run_join_duckdb(case, duck, s)
                elif what == "group-by":
                    *case, params = group_by_case(s, max_log2, other_keys=other)
                    run_group_by(case) if duck is None else run_group_by_duckdb(case, duck)
                else:
                    *case, params = theta_case(s, other)
                    run_theta(case, duck)
                done[what] += 1
            except Exception as e:  # noqa: BLE001
                failed.append((what, s))
                print(f"FAIL {what} seed {s}: {params}\n  {type(e).__name__}: {str(e)[:1500]}", flush=True)
                if only is not None:
                    traceback.print_exc()
    print(f"fuzz: {done['join']} joins, {done['group-by']} group-bys, {done['join_where']} join_wheres, "
          f"{'the seeds given' if args.only else f'seeds up to {seed - 1}'}; "
          f"{len(failed)} failed: {failed[:30]}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
