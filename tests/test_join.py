"""The CPU join against DuckDB (the values) and Polars (the output layout), on random inputs."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, strategies as st

import gpujoin
from gpujoin.testing import assert_tables_equal
from strategies import join_pair

HOWS = ["inner", "left", "right", "full", "semi", "anti"]


def duckdb_pairs(con, left, right, keys, how, nulls_equal):
    """(lid, rid) pairs of the join by DuckDB, NULL for a missing partner."""
    con.register("l", left)
    con.register("r", right)
    op = "IS NOT DISTINCT FROM" if nulls_equal else "="
    cond = " AND ".join(f"l.{k} {op} r.{k}" for k in keys)
    if how in ("semi", "anti"):
        sql = f"SELECT l.lid FROM l {how.upper()} JOIN r ON {cond}"
    else:
        sql = f"SELECT l.lid, r.rid FROM l {how.upper()} JOIN r ON {cond}"
    return con.sql(sql).to_arrow_table()


def gpujoin_pairs(left, right, keys, how, nulls_equal, **kw):
    out = gpujoin.join(left, right, on=keys, how=how, nulls_equal=nulls_equal, **kw)
    if how in ("semi", "anti"):
        return out.select(["lid"])
    return out.select(["lid", "rid"])


@pytest.mark.parametrize("key_type,keys", [("int", ["k"]), ("int32", ["k"]), ("string", ["k"]),
                                            ("composite", ["k", "k2"])])
@pytest.mark.parametrize("how", HOWS)
@given(data=st.data())
def test_join_matches_duckdb(duck, key_type, keys, how, data):
    left, right = data.draw(join_pair(key_type=key_type))
    nulls_equal = data.draw(st.booleans())
    radix_bits = data.draw(st.sampled_from([None, 0, 3]))
    got = gpujoin_pairs(left, right, keys, how, nulls_equal, device="cpu")
    expected = duckdb_pairs(duck, left, right, keys, how, nulls_equal)
    assert_tables_equal(got, expected, check_names=False)
    if radix_bits is not None:  # perturbed partitioning gives the same answer
        from gpujoin.plan.join import execute_join
        out, _ = execute_join(left, right, keys, how=how, nulls_equal=nulls_equal, radix_bits=radix_bits)
        assert_tables_equal(out.select(got.column_names), got)


@pytest.mark.parametrize("how", HOWS + ["cross"])
@given(pair=join_pair(max_rows=8))
def test_layout_matches_polars(how, pair):
    pl = pytest.importorskip("polars")
    left, right = pair
    on = None if how == "cross" else "k"
    got = gpujoin.join(left, right, on=on, how=how)
    expected = pl.from_arrow(left).join(pl.from_arrow(right), on=on, how=how).to_arrow()
    assert got.column_names == expected.column_names
    assert_tables_equal(got, expected)


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
def test_layout_left_on_right_on_matches_polars(how):
    pl = pytest.importorskip("polars")
    left = pa.table({"a": [1, 2, None, 4], "x": [1, 2, 3, 4], "v": [0, 0, 0, 0]})
    right = pa.table({"v": [9, 9, 9], "b": [1, 3, 4], "y": [1, 2, 3]})
    got = gpujoin.join(left, right, left_on="a", right_on="b", how=how)
    expected = pl.from_arrow(left).join(pl.from_arrow(right), left_on="a", right_on="b", how=how).to_arrow()
    assert got.column_names == expected.column_names
    assert_tables_equal(got, expected)


@pytest.mark.parametrize("how", HOWS + ["cross"])
@pytest.mark.parametrize("sides", ["left", "right", "both"])
def test_empty_sides_keep_types(how, sides):
    left = pa.table({"k": pa.array([1, 2], pa.int32()), "x": ["a", "b"]})
    right = pa.table({"k": pa.array([2, 3], pa.int32()), "y": [1.5, 2.5]})
    if sides in ("left", "both"):
        left = left.slice(0, 0)
    if sides in ("right", "both"):
        right = right.slice(0, 0)
    out = gpujoin.join(left, right, on=None if how == "cross" else "k", how=how)
    pl = pytest.importorskip("polars")
    expected = pl.from_arrow(left).join(pl.from_arrow(right), on=None if how == "cross" else "k", how=how)
    assert out.num_rows == expected.height
    assert out.column_names == expected.columns
    assert out.schema.field("k").type == pa.int32()


def test_one_row_sides():
    out = gpujoin.join({"k": [7]}, {"k": [7], "y": [1]}, on="k")
    assert out.to_pydict() == {"k": [7], "y": [1]}


def test_many_to_many_heavy_key_multiplicity():
    # one key repeated 10,000 times on one side and 30 on the other: 300,000 output rows
    left = pa.table({"k": np.zeros(10_000, np.int64), "i": np.arange(10_000)})
    right = pa.table({"k": np.zeros(30, np.int64), "j": np.arange(30)})
    out = gpujoin.join(left, right, on="k")
    assert out.num_rows == 300_000
    assert int(np.asarray(out["i"]).sum()) == 30 * (10_000 * 9_999 // 2)


def test_int64_extremes_and_sentinel_like_keys():
    vals = [-(1 << 63), -(1 << 63) + 1, -1, 0, 1, (1 << 63) - 2, (1 << 63) - 1]
    left = pa.table({"k": pa.array(vals, pa.int64()), "i": list(range(7))})
    right = pa.table({"k": pa.array(vals[::-1], pa.int64()), "j": list(range(7))})
    out = gpujoin.join(left, right, on="k").sort_by("i")
    assert out["j"].to_pylist() == [6, 5, 4, 3, 2, 1, 0]


def test_uint64_above_int64_max_joins():
    big = (1 << 64) - 1
    left = pa.table({"k": pa.array([big, 1], pa.uint64())})
    right = pa.table({"k": pa.array([big, 2], pa.uint64()), "y": [1, 2]})
    assert gpujoin.join(left, right, on="k").to_pydict() == {"k": [big], "y": [1]}


def test_key_type_promotion():
    left = pa.table({"k": pa.array([1, 2, 3], pa.int32())})
    right = pa.table({"k": pa.array([3, 4], pa.int64()), "y": [1, 2]})
    out = gpujoin.join(left, right, on="k")
    assert out.schema.field("k").type == pa.int64()
    assert out.to_pydict() == {"k": [3], "y": [1]}


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
def test_all_null_keys_on_both_sides_match_only_under_nulls_equal(how):
    # two null-typed key columns (Parquet's never-set columns): their promotion had failed
    left, right = pa.table({"z": pa.nulls(3), "i": [0, 1, 2]}), pa.table({"z": pa.nulls(2), "j": [5, 6]})
    rows = {"inner": (0, 6), "left": (3, 6), "right": (2, 6), "full": (5, 6), "semi": (0, 3), "anti": (3, 0)}[how]
    for nulls_equal, n in zip((False, True), rows):
        out = gpujoin.join(left, right, "z", how=how, nulls_equal=nulls_equal, device="cpu")
        assert out.num_rows == n and out.column("z").null_count == n


def test_keys_in_different_order_and_names():
    left = pa.table({"a": [1, 1, 2], "b": ["x", "y", "x"], "i": [0, 1, 2]})
    right = pa.table({"d": ["x", "y"], "c": [1, 1], "j": [10, 11]})
    out = gpujoin.join(left, right, left_on=["a", "b"], right_on=["c", "d"]).sort_by("i")
    assert out.to_pydict() == {"a": [1, 1], "b": ["x", "y"], "i": [0, 1], "j": [10, 11]}


def test_decimal_date_and_float_keys():
    import datetime as dt
    from decimal import Decimal

    left = pa.table({"d": pa.array([Decimal("1.10"), Decimal("-2.00"), None], pa.decimal128(10, 2)),
                     "t": pa.array([dt.date(2020, 1, 1), dt.date(1970, 1, 1), dt.date(1969, 12, 31)]),
                     "f": pa.array([0.0, float("nan"), 1.5])})
    right = pa.table({"d": pa.array([Decimal("1.1"), Decimal("-2")], pa.decimal128(5, 1)),
                      "t": pa.array([dt.date(2020, 1, 1), dt.date(1969, 12, 31)]),
                      "f": pa.array([-0.0, float("nan")])})
    assert gpujoin.join(left, right, on="d").num_rows == 2
    assert gpujoin.join(left, right, on="t").num_rows == 2
    assert gpujoin.join(left, right, on="f").num_rows == 2  # -0.0 == 0.0 and NaN == NaN, as DuckDB


def test_wide_decimal_keys():
    from decimal import Decimal

    t = pa.decimal128(38, 0)
    big = Decimal(10 ** 30)
    left = pa.table({"k": pa.array([big, -big, Decimal(5)], t), "i": [0, 1, 2]})
    right = pa.table({"k": pa.array([-big, Decimal(5), Decimal(10 ** 30 + 1)], t), "j": [0, 1, 2]})
    out = gpujoin.join(left, right, on="k").sort_by("i")
    assert out.select(["i", "j"]).to_pydict() == {"i": [1, 2], "j": [0, 1]}


@pytest.mark.parametrize("validate,ok", [("m:m", True), ("1:m", False), ("m:1", True), ("1:1", False)])
def test_validate(validate, ok):
    left = pa.table({"k": [1, 1, 2]})
    right = pa.table({"k": [1, 2, None, None]})
    if ok:
        gpujoin.join(left, right, on="k", validate=validate)
    else:
        with pytest.raises(gpujoin.ComputeError, match=validate):
            gpujoin.join(left, right, on="k", validate=validate)


def test_large_random_join_against_numpy():
    rng = np.random.default_rng(1)
    n = 200_000
    r = rng.permutation(n).astype(np.int64)
    s = rng.integers(0, 2 * n, n).astype(np.int64)
    out = gpujoin.join({"k": r, "i": np.arange(n)}, {"k": s, "j": np.arange(n)}, on="k")
    assert out.num_rows == int((s < n).sum())
    k, i = np.asarray(out["k"]), np.asarray(out["i"])
    assert np.array_equal(r[i], k)


class TestErrors:
    def test_missing_column(self):
        with pytest.raises(gpujoin.ColumnNotFoundError, match="'nope'.*left"):
            gpujoin.join({"k": [1]}, {"k": [1]}, left_on="nope", right_on="k")

    def test_int_with_string(self):
        with pytest.raises(gpujoin.SchemaError, match="'a'.*'b'") as e:
            gpujoin.join({"a": [1]}, {"b": ["1"]}, left_on="a", right_on="b")
        assert isinstance(e.value, TypeError)

    def test_on_with_left_on(self):
        with pytest.raises(ValueError, match="cannot use 'on' in conjunction with 'left_on'"):
            gpujoin.join({"k": [1]}, {"k": [1]}, on="k", left_on="k")

    def test_unknown_how(self):
        with pytest.raises(ValueError, match="'outer_apply'"):
            gpujoin.join({"k": [1]}, {"k": [1]}, on="k", how="outer_apply")

    def test_unknown_algorithm_lists_valid(self):
        with pytest.raises(ValueError, match="phj"):
            gpujoin.join({"k": [1]}, {"k": [1]}, on="k", algorithm="magic", device="cpu")

    def test_unsupported_type(self):
        with pytest.raises(gpujoin.InvalidOperationError, match="'k'.*list"):
            gpujoin.Table({"k": pa.array([[1], [2]])})
        with pytest.raises(gpujoin.SchemaError, match="'k'"):
            gpujoin.join({"k": pa.array([[1]])}, {"k": pa.array([[1]])}, on="k")

    def test_wrong_object(self):
        with pytest.raises(TypeError, match="list"):
            gpujoin.join([1, 2], {"k": [1]}, on="k")

    def test_cuda_unavailable_is_clear(self):
        if "cuda" in gpujoin.devices():
            pytest.skip("a GPU is present")
        with pytest.raises(RuntimeError, match="device='cuda'"):
            gpujoin.join({"k": [1]}, {"k": [1]}, on="k", device="cuda")

    def test_cast_overflow_is_schema_error(self):
        left = pa.table({"k": pa.array([(1 << 64) - 1], pa.uint64())})
        right = pa.table({"k": pa.array([1], pa.int32())})
        with pytest.raises(gpujoin.SchemaError, match="'k'"):
            gpujoin.join(left, right, on="k")


def test_inputs_pandas_polars_dict_table():
    pd = pytest.importorskip("pandas")
    pl = pytest.importorskip("polars")
    left = pd.DataFrame({"k": [1, 2], "x": [1.0, 2.0]})
    right = pl.DataFrame({"k": [2, 3], "y": ["a", "b"]})
    out = gpujoin.join(gpujoin.Table(left), right, on="k")
    assert out.to_pydict() == {"k": [2], "x": [2.0], "y": ["a"]}
    t = gpujoin.Table({"k": (np.array([1, 2, 3]), np.array([True, False, True]))})
    assert t.to_arrow()["k"].to_pylist() == [1, None, 3]
    assert t.column("k").validity.tolist() == [True, False, True]
    assert gpujoin.Table(t.to_polars()).num_rows == 3 and len(t.to_pandas()) == 3


def test_nullable_int64_extremes_survive_the_gather():
    """int64 keys and payloads near 2^63 with nulls, past the multi-threaded gather's 2^16 rows:
    the gather had read such columns through floats (2^63 - 1 came back as 2^63 and failed its
    cast back; found by scripts/fuzz_device.py)."""
    n = 70_000
    top, bottom = 2**63 - 1, -(2**63)
    mask = np.arange(n) % 20 == 0
    keys = np.where(np.arange(n) % 2 == 0, top, bottom).astype(np.int64)
    left = pa.table({"k": pa.array(keys, mask=mask), "v": pa.array(keys - np.sign(keys), mask=mask[::-1].copy())})
    right = pa.table({"k": pa.array([top], pa.int64()), "w": pa.array([top - 5], pa.int64())})
    for how in ("left", "anti", "inner"):
        got = gpujoin.join(left, right, "k", how=how, device="cpu")
        want = {"left": n, "anti": n - int((keys == top)[~mask].sum()), "inner": int((keys == top)[~mask].sum())}[how]
        assert got.num_rows == want
        k = got["k"].to_numpy(zero_copy_only=False) if not got["k"].null_count else None
        if how == "inner":
            assert set(k.tolist()) == {top} and set(got["w"].to_pylist()) == {top - 5}
    out = gpujoin.join(left, right, "k", how="left", device="cpu").sort_by("v")
    assert sorted(v for v in out["v"].to_pylist() if v is not None) == sorted(
        (keys - np.sign(keys))[~mask[::-1]].tolist())
    col = gpujoin.Table(left).column("k")
    assert col.values.dtype == np.int64 and col.values[~mask].tolist() == keys[~mask].tolist()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_dictionary_keys_join_as_their_values(device):
    """Dictionary-encoded keys (each table's own dictionaries, a chunked one with two) against
    dictionary and plain keys: the rows of the same join of the decoded tables, every join type
    (a dictionary key had been refused: 'cannot be a join key')."""
    if device == "cuda" and not gpujoin.backend.cuda_available():
        pytest.skip("no usable GPU")
    rng = np.random.default_rng(8)
    words = np.array(["b", "a", "", "ünï", "c", "d"])

    def strings(n, lo):
        return pa.array(words[rng.integers(lo, words.size, n)], mask=rng.random(n) < 0.1)
    left = pa.table({"k": pa.chunked_array([strings(40, 0).dictionary_encode(), strings(30, 2).dictionary_encode()]),
                     "i": pa.array(rng.integers(0, 5, 70)).dictionary_encode(), "a": np.arange(70)})
    right = pa.table({"k": strings(50, 1).dictionary_encode(), "i": rng.integers(0, 6, 50), "b": np.arange(50)})
    plain = {"l": left.set_column(0, "k", left["k"].cast(pa.string())).set_column(1, "i", left["i"].cast(pa.int64())),
             "r": right.set_column(0, "k", right["k"].cast(pa.string()))}
    for how in ("inner", "left", "right", "full", "semi", "anti"):
        for on, r in (("k", right), ("k", plain["r"]), (["k", "i"], right)):
            got = gpujoin.join(left, r, on, how=how, device=device)
            want = gpujoin.join(plain["l"], plain["r"], on, how=how, device="cpu")
            got = pa.table({n: (c.cast(want.schema.field(n).type) if pa.types.is_dictionary(c.type) else c)
                            for n, c in zip(got.column_names, got.columns)})
            assert_tables_equal(got, want)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_view_columns_join_and_group(device):
    """string_view and binary_view columns, and dictionaries of string views (Polars' newest Arrow
    export): keys, payloads and aggregates, as their large_string / large_binary twins (Arrow's
    take has no kernel for views: the output gather had raised ArrowNotImplementedError)."""
    if device == "cuda" and not gpujoin.backend.cuda_available():
        pytest.skip("no usable GPU")
    words = ["a", "bb", None, "a", "a string longer than twelve bytes", ""]
    views = pa.array(words, pa.string_view())
    left = pa.table({"k": views, "b": pa.array([w and w.encode() for w in words], pa.binary_view()),
                     "d": pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, None, 1, 0], pa.int32()),
                                                         pa.array(["x", "y"], pa.string_view())),
                     "v": np.arange(6)})
    right = pa.table({"k": ["a", "", "zz", "a string longer than twelve bytes"], "w": np.arange(4)})
    plain = pa.table({"k": pa.array(words, pa.large_string()),
                      "b": pa.array([w and w.encode() for w in words], pa.large_binary()),
                      "d": pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, None, 1, 0], pa.int32()),
                                                          pa.array(["x", "y"], pa.large_string())),
                      "v": np.arange(6)})
    for how in HOWS:
        assert_tables_equal(gpujoin.join(left, right, "k", how=how, device=device),
                            gpujoin.join(plain, right, "k", how=how, device="cpu"))
    aggs = dict(n=(None, "size"), mx=("k", "max"), u=("k", "n_unique"), s=("v", "sum"))
    for by in ("k", "d"):
        assert_tables_equal(gpujoin.group_by(left, by, device=device).agg(**aggs),
                            gpujoin.group_by(plain, by, device="cpu").agg(**aggs))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_time_duration_and_date64_keys_join_as_duckdb_does(device, duck):
    """time32/time64, duration and date64 keys (pandas' timedeltas are durations), units mixed
    within a family (promoted to the finer one), with nulls: the pairs DuckDB joins (they had
    been refused: 'cannot be a join key')."""
    if device == "cuda" and not gpujoin.backend.cuda_available():
        pytest.skip("no usable GPU")
    rng = np.random.default_rng(12)
    n = 300

    def col(values, typ):
        return pa.array(values.astype(np.int64 if typ.bit_width == 64 else np.int32), mask=rng.random(n) < 0.1).view(typ)
    cases = {
        "time": (col(rng.integers(0, 50, n), pa.time32("s")), col(rng.integers(0, 50, n) * 1_000_000, pa.time64("us"))),
        "duration": (col(rng.integers(-40, 40, n), pa.duration("ms")), col(rng.integers(-40, 40, n) * 1000, pa.duration("us"))),
        "date64": (col(rng.integers(0, 60, n) * 86_400_000, pa.date64()), col(rng.integers(0, 60, n) * 86_400_000, pa.date64())),
    }
    for name, (lk, rk) in cases.items():
        _pairs_as_duckdb(duck, pa.table({"k": lk, "a": np.arange(n)}), pa.table({"k": rk, "b": np.arange(n)}), device)


def _pairs_as_duckdb(duck, left, right, device):
    """The (a, b) pairs of the inner, left and full joins of ``left`` and ``right`` on "k" equal
    DuckDB's."""
    duck.register("l", left)
    duck.register("r", right)
    for how, sql in (("inner", "JOIN"), ("left", "LEFT JOIN"), ("full", "FULL JOIN")):
        want = duck.sql(f"SELECT l.a, r.b FROM l {sql} r ON l.k = r.k").to_arrow_table()
        got = gpujoin.join(left, right, "k", how=how, device=device, coalesce=False).select(["a", "b"])
        assert_tables_equal(got, want, check_names=False)


def test_polars_lazy_frames_and_bad_pandas_columns():
    """A Polars LazyFrame is collected (it had raised AttributeError); a pandas object column of
    mixed types raises a TypeError that says what to do."""
    pl = pytest.importorskip("polars")
    pd = pytest.importorskip("pandas")
    out = gpujoin.join(pl.LazyFrame({"k": [1, 2], "a": [3, 4]}), pl.DataFrame({"k": [2, 2]}), "k", device="cpu")
    assert out.to_pydict() == {"k": [2, 2], "a": [4, 4]}
    out = gpujoin.group_by(pl.LazyFrame({"k": [1, 2, 1]}), "k", device="cpu").agg(n=(None, "size"))
    assert sorted(zip(out["k"].to_pylist(), out["n"].to_pylist())) == [(1, 2), (2, 1)]
    with pytest.raises(TypeError, match="give each column one type"):
        gpujoin.join(pd.DataFrame({"k": ["a", 1]}), pd.DataFrame({"k": ["b"]}), "k", device="cpu")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_binary_keys_join_group_and_compare_as_duckdb_does(device, duck):
    """Binary keys (UUIDs as fixed_size_binary(16), bytes that are not UTF-8, empty values, nulls)
    against binary and large_binary ones: joins, group-by and join_where's byte order, as DuckDB
    answers (they had been refused: 'cannot be a join key')."""
    if device == "cuda" and not gpujoin.backend.cuda_available():
        pytest.skip("no usable GPU")
    from gpujoin import col

    rng = np.random.default_rng(14)
    ids = [int(x).to_bytes(16, "big") for x in rng.integers(0, 60, 300)]
    left = pa.table({"k": pa.array(ids, pa.binary(16), mask=rng.random(300) < 0.05), "a": np.arange(300)})
    other = [b"", b"\xff\xfe", ids[0]] + ids[100:160]
    right = pa.table({"k": pa.array(other, pa.large_binary()), "b": np.arange(len(other))})
    _pairs_as_duckdb(duck, left, right, device)  # (l and r stay registered)
    got = gpujoin.group_by(left, "k", device=device).agg(n=(None, "size"))
    want = duck.sql("SELECT k, count(*) FROM l GROUP BY k").to_arrow_table()
    assert_tables_equal(got.set_column(0, "k", got["k"].cast(pa.large_binary())),
                        want.set_column(0, "k", want["k"].cast(pa.large_binary())), check_names=False)
    got = gpujoin.join_where(left, right.rename_columns(["kk", "b"]), col("k") < col("kk"), device=device)
    want = duck.sql("SELECT l.a, r.b FROM l JOIN r ON l.k < r.k").to_arrow_table()
    assert_tables_equal(got.select(["a", "b"]), want, check_names=False)
