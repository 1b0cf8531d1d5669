"""The CPU group-by against DuckDB on random inputs, and its errors."""

import contextlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, strategies as st

import gpujoin
from gpujoin.testing import assert_tables_equal
from strategies import int_keys

AGG_SQL = {"sum": "sum({c})", "count": "count({c})", "size": "count(*)", "min": "min({c})",
           "max": "max({c})", "mean": "avg({c})", "n_unique": "count(DISTINCT {c})"}


def duckdb_groupby(con, table, by, aggs):
    con.register("t", table)
    sel = ", ".join([f'"{b}"' for b in by] + [AGG_SQL[fn].format(c=f'"{c}"') + f' AS "{n}"'
                                               for n, (c, fn) in aggs.items()])
    gb = ", ".join(f'"{b}"' for b in by)
    return con.sql(f"SELECT {sel} FROM t GROUP BY {gb}").to_arrow_table()


@st.composite
def groupby_table(draw, max_rows=40):
    n = draw(st.integers(0, max_rows))
    vals = draw(st.lists(st.one_of(st.none(), st.integers(-(1 << 40), 1 << 40)), min_size=n, max_size=n))
    fvals = draw(st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)), min_size=n, max_size=n))
    return pa.table({
        "k": pa.array(draw(int_keys(n)), pa.int64()),
        "s": pa.array(draw(st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "c"])), min_size=n,
                                    max_size=n)), pa.string()),
        "v": pa.array(vals, pa.int64()),
        "f": pa.array(fvals, pa.float64()),
    })


@contextlib.contextmanager
def aggregation_path(path: str):
    """Aggregate by per-thread accumulators (few groups) or by partitions (many groups); the
    partitioned path also numbers spread keys by the hashed partitions, not thread-local tables."""
    from gpujoin.cpu import kernels
    from gpujoin.cpu.groupby import pgb

    saved = pgb.PRIVATE_SLOTS, kernels.LOCAL_TABLE_GROUPS
    if path != "per-thread":
        pgb.PRIVATE_SLOTS, kernels.LOCAL_TABLE_GROUPS = 0, 1
    try:
        yield
    finally:
        pgb.PRIVATE_SLOTS, kernels.LOCAL_TABLE_GROUPS = saved


@pytest.mark.parametrize("path", ["per-thread", "partitioned"])
@pytest.mark.parametrize("by", [["k"], ["s"], ["k", "s"]])
@given(table=groupby_table())
def test_groupby_matches_duckdb(duck, path, by, table):
    aggs = {"sv": ("v", "sum"), "cv": ("v", "count"), "n": (None, "size"), "mn": ("v", "min"),
            "mx": ("v", "max"), "av": ("v", "mean"), "sf": ("f", "sum"), "mnf": ("f", "min"),
            "ms": ("s", "max"), "uv": ("v", "n_unique"), "uf": ("f", "n_unique"), "us": ("s", "n_unique")}
    with aggregation_path(path):
        got = gpujoin.group_by(table, by).agg(**aggs)
    duck_aggs = {k: (("v" if c is None else c), fn) for k, (c, fn) in aggs.items()}
    expected = duckdb_groupby(duck, table, by, duck_aggs)
    got = got.set_column(got.column_names.index("sv"), "sv", got["sv"].cast(pa.float64()))
    expected = expected.set_column(expected.column_names.index("sv"), "sv", expected["sv"].cast(pa.float64()))
    # float sums: the summation order differs from DuckDB's; 1e-9 relative covers 40 rows of |x| <= 1e6
    assert_tables_equal(got, expected, rel=1e-9)


def test_groupby_identities():
    t = pa.table({"k": [1, 1, 2, None, None], "v": [1, None, 3, 4, None]})
    const = gpujoin.group_by(t.append_column("c", pa.array([0] * 5)), "c").agg(s=("v", "sum"), n=(None, "size"))
    assert const.to_pydict() == {"c": [0], "s": [8], "n": [5]}  # grouping by a constant = plain aggregate
    out = gpujoin.group_by(t, "k").agg(s=("v", "sum"), c=("v", "count"), m=("v", "max"))
    assert_tables_equal(out, pa.table({"k": [1, 2, None], "s": [1, 3, 4], "c": [1, 1, 1], "m": [1, 3, 4]}))
    allnull = gpujoin.group_by(pa.table({"k": [1], "v": pa.array([None], pa.int64())}), "k").agg(
        s=("v", "sum"), c=("v", "count"), a=("v", "mean"))
    assert allnull.to_pydict() == {"k": [1], "s": [None], "c": [0], "a": [None]}
    empty = gpujoin.group_by(t.slice(0, 0), "k").agg(s=("v", "sum"))
    assert empty.num_rows == 0 and empty.column_names == ["k", "s"]


def test_decimal_and_date_aggregates():
    import datetime as dt
    from decimal import Decimal

    t = pa.table({"k": [1, 1, 2], "d": pa.array([Decimal("1.25"), Decimal("-0.05"), None], pa.decimal128(15, 2)),
                  "t": [dt.date(2020, 1, 2), dt.date(2019, 1, 1), None]})
    out = gpujoin.group_by(t, "k").agg(s=("d", "sum"), mx=("d", "max"), tmin=("t", "min"), a=("d", "mean")).sort_by("k")
    assert out["s"].to_pylist() == [Decimal("1.20"), None]
    assert out.schema.field("s").type == pa.decimal128(38, 2)
    assert out["mx"].to_pylist() == [Decimal("1.25"), None]
    assert out["tmin"].to_pylist() == [dt.date(2019, 1, 1), None]
    assert out["a"].to_pylist()[0] == pytest.approx(0.6)


def test_exact_int_sum_and_overflow():
    big = (1 << 62)
    ok = gpujoin.group_by(pa.table({"k": [1, 1, 1], "v": [big, big, -big]}), "k").agg(s=("v", "sum"))
    assert ok["s"].to_pylist() == [big]  # the running total passes 2**63 and comes back: still exact
    with pytest.raises(gpujoin.ComputeError, match="'v'.*overflows"):
        gpujoin.group_by(pa.table({"k": [1, 1], "v": [big, big]}), "k").agg(s=("v", "sum"))


def test_many_groups_against_numpy():
    rng = np.random.default_rng(3)
    k = rng.integers(0, 50_000, 300_000)
    v = rng.integers(-1000, 1000, 300_000)
    out = gpujoin.group_by({"k": k, "v": v}, "k").agg(s=("v", "sum"), n=(None, "size")).sort_by("k")
    keys, inv = np.unique(k, return_inverse=True)
    assert np.array_equal(np.asarray(out["k"]), keys)
    assert np.array_equal(np.asarray(out["s"]), np.bincount(inv, weights=v).astype(np.int64))
    assert np.array_equal(np.asarray(out["n"]), np.bincount(inv))


class TestErrors:
    def test_unknown_function(self):
        with pytest.raises(ValueError, match="'median'"):
            gpujoin.group_by({"k": [1]}, "k").agg(x=("k", "median"))

    def test_missing_column(self):
        with pytest.raises(gpujoin.ColumnNotFoundError, match="'zz'"):
            gpujoin.group_by({"k": [1]}, "zz")
        with pytest.raises(gpujoin.ColumnNotFoundError, match="'zz'"):
            gpujoin.group_by({"k": [1]}, "k").agg(x=("zz", "sum"))

    def test_sum_of_strings(self):
        with pytest.raises(gpujoin.InvalidOperationError, match="'s'"):
            gpujoin.group_by({"k": [1], "s": ["a"]}, "k").agg(x=("s", "sum"))

    def test_unknown_algorithm(self):
        with pytest.raises(ValueError, match="pgb"):
            gpujoin.group_by({"k": [1]}, "k", algorithm="zzz", device="cpu")


def test_n_unique_counts_distinct_non_null_values_as_duckdb(duck):
    t = pa.table({"k": [1, 1, 1, 1, 2, 2, 2, None, None],
                  "f": [1.0, 1.0, None, float("nan"), -0.0, 0.0, float("nan"), None, None],
                  "s": ["a", "b", "a", None, "c", "c", None, "d", None],
                  "d": pa.array([1, 2, 1, 1, None, 3, 3, 4, 4], pa.date32())})
    aggs = {"uf": ("f", "n_unique"), "us": ("s", "n_unique"), "ud": ("d", "n_unique")}
    got = gpujoin.group_by(t, "k").agg(**aggs)
    assert_tables_equal(got, duckdb_groupby(duck, t, ["k"], aggs))
    assert got.sort_by("k").column("uf").to_pylist() == [2, 2, 0]  # {1, NaN}; {0, NaN}; none
    with pytest.raises(gpujoin.InvalidOperationError, match="cannot aggregate column 'l'"):
        gpujoin.group_by(t.append_column("l", pa.array([[1]] * 9)), "k").agg(u=("l", "n_unique"))


@pytest.mark.parametrize("path, span", [("dense", 1), ("dense", 7), ("dense", 1 << 10), ("local", 1 << 40),
                                        ("hashed", 1 << 40)])
def test_factorize_paths_agree(monkeypatch, path, span):
    """One key column: a span up to its rows takes the direct table (ids in key order), a wider
    one thread-local tables (ids by first appearance) or, past LOCAL_TABLE_GROUPS, the hashed
    partitions; each gives one id a distinct key, a first row of each group, and a partition
    whose groups are disjoint (made on first use where the ids did not come from one)."""
    from gpujoin.cpu import kernels
    from gpujoin.cpu.kernels import _factorize_dense, _factorize_local, factorize

    if path == "hashed":
        monkeypatch.setattr(kernels, "LOCAL_TABLE_GROUPS", 64)
    rng = np.random.default_rng(span % 97)
    n = 50_000
    keys = rng.integers(-5, span - 5, n, dtype=np.int64) if span < (1 << 40) else \
        np.concatenate([[np.iinfo(np.int64).min, np.iinfo(np.int64).max], rng.integers(-span, span, n - 2)])
    f = factorize(keys[None, :])
    assert (_factorize_dense(keys) is not None) == (path == "dense")
    assert path == "dense" or (_factorize_local(keys) is not None) == (path == "local")
    uniq = np.unique(keys)
    assert f.num_groups == uniq.size
    assert np.array_equal(keys[f.first_rows][f.codes], keys)  # each row's group holds its key
    assert np.unique(keys[f.first_rows]).size == f.num_groups  # and no two groups the same key
    if path == "dense":
        assert np.array_equal(keys[f.first_rows], uniq)  # ids in key order, each group's first row
        assert all(f.first_rows[g] == np.flatnonzero(keys == uniq[g])[0] for g in range(min(50, uniq.size)))
    if path == "local":  # ids by first appearance
        assert np.array_equal(f.first_rows, np.sort(np.unique(keys, return_index=True)[1]))
    rows, offsets, part = f.rows, f.offsets, f.part_gid
    assert np.array_equal(np.sort(rows), np.arange(n)) and np.array_equal(part, f.codes[rows])
    owner = np.full(f.num_groups, -1)
    for p in range(offsets.size - 1):
        g = np.unique(part[offsets[p]:offsets[p + 1]])
        assert (owner[g] == -1).all()  # no group in two partitions
        owner[g] = p


def test_out_of_core_partials_skip_ranges_without_values():
    """The out-of-core group-by merges a hot partition's row ranges on the host: a range where a
    group's float values are all null holds NaN for its min and max, which had won every fold
    (found by scripts/fuzz_device.py); only ranges that counted a value fold."""
    from gpujoin.outofcore.groupby import _merge_partials

    nan = float("nan")
    keys = [np.array([1, 2]), np.array([2, 1])]
    parts = [[{"count": np.array([0, 1]), "min": np.array([nan, 3.0]), "max": np.array([nan, 3.0])}],
             [{"count": np.array([0, 2]), "min": np.array([nan, 4.0]), "max": np.array([nan, 5.0])}]]
    uniq, merged = _merge_partials(keys, parts)
    assert uniq.tolist() == [1, 2]
    assert merged[0]["count"].tolist() == [2, 1]
    assert merged[0]["min"].tolist() == [4.0, 3.0] and merged[0]["max"].tolist() == [5.0, 3.0]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_column_of_null_type_aggregates_to_nulls(device):
    """A column of Arrow's null type (every value null, none typed: pa.array(["a"], mask=[True])
    is one) had raised on both engines; as SQL and Polars answer: count 0, sum, mean, min and max
    null (found by scripts/fuzz_device.py)."""
    if device == "cuda" and not gpujoin.backend.cuda_available():
        pytest.skip("no usable GPU")
    t = pa.table({"k": [1, 1, 2], "s": pa.nulls(3), "v": [4, 5, 6]})
    aggs = dict(mx=("s", "max"), mn=("s", "min"), c=("s", "count"), sm=("s", "sum"), me=("s", "mean"),
                n=(None, "size"), top=("v", "max"))
    out = gpujoin.group_by(t, "k", device=device).agg(**aggs).sort_by("k")
    assert out.to_pydict() == {"k": [1, 2], "mx": [None, None], "mn": [None, None], "c": [0, 0], "sm": [None, None],
                               "me": [None, None], "n": [2, 1], "top": [5, 6]}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_dictionary_columns_group_and_aggregate_as_their_values(device):
    """Dictionary-encoded columns (pandas' categoricals, Polars' Categorical, Parquet's dictionary
    pages), chunks with dictionaries of their own: keys group by value and values aggregate as
    values, as the same table decoded does.  A dictionary key had raised ArrowTypeError, a
    dictionary value 'cannot aggregate'."""
    if device == "cuda" and not gpujoin.backend.cuda_available():
        pytest.skip("no usable GPU")
    rng = np.random.default_rng(4)
    words = np.array(["b", "a", "", "ünï", "c"])

    def part(n):
        s = pa.array(words[rng.integers(0, words.size, n)], mask=rng.random(n) < 0.1)
        return pa.table({"k": s.dictionary_encode(), "v": rng.integers(0, 9, n),
                         "d": pa.array(rng.integers(0, 4, n)).dictionary_encode()})
    t = pa.concat_tables([part(300), part(200)])  # two chunks, two dictionaries
    plain = t.set_column(0, "k", t["k"].cast(pa.string())).set_column(2, "d", t["d"].cast(pa.int64()))
    aggs = dict(s=("v", "sum"), n=(None, "size"), mx=("d", "max"), ud=("d", "n_unique"), sd=("d", "sum"))
    got = gpujoin.group_by(t, "k", device=device).agg(**aggs)
    assert pa.types.is_dictionary(got.schema.field("k").type)  # the key keeps its type
    got = got.set_column(0, "k", got["k"].cast(pa.string()))
    assert_tables_equal(got, gpujoin.group_by(plain, "k", device="cpu").agg(**aggs))
    # a dictionary value column: min, max and n_unique of its strings
    got = gpujoin.group_by(t, "d", device=device).agg(mn=("k", "min"), mx=("k", "max"), u=("k", "n_unique"))
    assert pa.types.is_dictionary(got.schema.field("d").type)  # (on the GPU too: not its integer codes' key path)
    want = gpujoin.group_by(plain, "d", device="cpu").agg(mn=("k", "min"), mx=("k", "max"), u=("k", "n_unique"))
    assert_tables_equal(got.set_column(0, "d", got["d"].cast(pa.int64())), want)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_time_duration_and_date64_columns_group_as_duckdb_does(device, duck):
    """time64, duration and date64 columns as keys and as min/max/count/n_unique values, with
    nulls: DuckDB's answer (durations compared as microseconds: DuckDB holds them as intervals).
    They had been refused as keys and as values ('cannot aggregate')."""
    if device == "cuda" and not gpujoin.backend.cuda_available():
        pytest.skip("no usable GPU")
    rng = np.random.default_rng(13)
    n = 500
    mask = lambda: rng.random(n) < 0.1  # noqa: E731
    t = pa.table({"tm": pa.array(rng.integers(0, 20, n) * 1_000_000, mask=mask()).view(pa.time64("us")),
                  "du": pa.array(rng.integers(-30, 30, n) * 1000, mask=mask()).view(pa.duration("us")),
                  "d64": pa.array(rng.integers(0, 40, n) * 86_400_000, mask=mask()).view(pa.date64()),
                  "v": rng.integers(0, 100, n)})
    duck.register("t", t)
    for key in ("tm", "d64", "du"):
        values = [c for c in ("tm", "d64", "du") if c != key]
        aggs = {f"{f}_{c}": (c, f) for c in values for f in ("min", "max", "count", "n_unique")}
        sql = ", ".join(f"{'count(DISTINCT ' + c + ')' if f == 'n_unique' else f + '(' + c + ')'}"
                        for c in values for f in ("min", "max", "count", "n_unique"))
        want = duck.sql(f"SELECT {key}, {sql}, sum(v) FROM t GROUP BY {key}").to_arrow_table()
        got = gpujoin.group_by(t, key, device=device).agg(**aggs, s=("v", "sum"))
        # DuckDB's intervals as microseconds, and ours
        micros = lambda a: pa.array([None if d is None else d.days * 86_400_000_000 + d.nanoseconds // 1000  # noqa: E731
                                     for d in a.to_pylist()], pa.int64())
        want = pa.table([micros(c) if pa.types.is_interval(c.type) else c for c in want.columns], names=got.column_names)
        got = pa.table([c.cast(pa.int64()) if pa.types.is_duration(c.type) else c for c in got.columns],
                       names=got.column_names)
        assert_tables_equal(got, want)
