"""gpujoin.join_where (issue 15 item 1) on the CPU engine against Polars' DataFrame.join_where:
every operator, conjunctions, both algorithms, nulls, duplicates, int64 extremes, floats with
NaN and -0.0, strings, dates, empty and one-row tables, name resolution and errors."""

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import gpujoin
from gpujoin import col
from gpujoin.errors import ColumnNotFoundError, SchemaError
from gpujoin.testing import assert_tables_equal

from strategies import EXTREMES, theta_tables

pl = pytest.importorskip("polars")
OPS = ["<", "<=", ">", ">=", "==", "!="]


def _pl(a, op, b):
    return eval(f"pl.col(a) {op} pl.col(b)")  # noqa: S307 - the six comparison operators above


def _want(left, right, preds):
    out = pl.from_arrow(left).join_where(pl.from_arrow(right), *[_pl(a, op, b) for a, op, b in preds])
    return out.to_arrow()


def _ours(left, right, preds, **kw):
    return gpujoin.join_where(left, right, *[_pl(a, op, b) for a, op, b in preds], device="cpu", **kw)


def _check(left, right, preds, algorithms=("auto", "nlj", "band")):
    want = _want(left, right, preds)
    for algo in algorithms:
        if algo == "band" and all(op == "!=" for _, op, _ in preds):
            continue
        got = _ours(left, right, preds, algorithm=algo)
        assert got.column_names == want.column_names
        assert_tables_equal(got.cast(want.schema), want)


@pytest.mark.parametrize("op", OPS)
def test_every_operator_on_ints_with_duplicates_and_nulls(op):
    left = pa.table({"a": [3, 1, None, 3, 7, 0], "x": range(6)})
    right = pa.table({"b": [3, None, 2, 3, 9], "y": range(5)})
    _check(left, right, [("a", op, "b")])


@pytest.mark.parametrize("op", OPS)
def test_floats_in_polars_total_order(op):
    left = pa.table({"f": [float("nan"), 1.0, -0.0, None, float("-inf"), 0.5]})
    right = pa.table({"g": [float("nan"), 2.0, 0.0, float("inf"), None, -1.5]})
    _check(left, right, [("f", op, "g")])


@pytest.mark.parametrize("op", OPS)
def test_strings_dates_and_extremes(op):
    s1 = pa.table({"s": ["b", "a", "c", None, "bb", ""]})
    s2 = pa.table({"t": ["b", "bb", "", "zz", None]})
    _check(s1, s2, [("s", op, "t")])
    d1 = pa.table({"d": pa.array([dt.date(2020, 1, i) for i in (1, 5, 9)], pa.date32())})
    d2 = pa.table({"e": pa.array([dt.date(2020, 1, i) for i in (5, 2)], pa.date32())})
    _check(d1, d2, [("d", op, "e")])
    e1 = pa.table({"k": pa.array(EXTREMES, pa.int64())})
    e2 = pa.table({"j": pa.array(EXTREMES[::2], pa.int64())})
    _check(e1, e2, [("k", op, "j")])


def test_band_with_both_bounds_and_a_filter():
    rng = np.random.default_rng(1)
    n = 400
    left = pa.table({"t": rng.integers(0, 100, n), "id": np.arange(n)})
    lo = rng.integers(0, 100, 150)
    right = pa.table({"lo": lo, "hi": lo + rng.integers(0, 10, 150), "id": np.arange(150)})
    _check(left, right, [("t", ">=", "lo"), ("t", "<=", "hi"), ("id", "!=", "id_right")])
    _check(left, right, [("lo", "<=", "t"), ("hi", ">", "t")])  # right columns named first
    _check(left, right, [("t", "==", "lo"), ("id", "<", "id_right")])


def test_empty_and_one_row_tables():
    one = pa.table({"a": [5]})
    none = pa.table({"a": pa.array([], pa.int64())})
    other = pa.table({"b": [1, 5, 9]})
    for left, right in ((one, other), (none, other), (other.rename_columns(["a"]), one.rename_columns(["b"])),
                        (one, pa.table({"b": pa.array([], pa.int64())}))):
        for op in OPS:
            _check(left, right, [("a", op, "b")])


def test_gpujoin_col_and_conjunctions():
    left = pa.table({"t": [1, 5, 9], "k": [1, 2, 3]})
    right = pa.table({"s": [0, 4, 8], "e": [6, 6, 9], "k": [3, 2, 1]})
    want = _want(left, right, [("t", ">=", "s"), ("t", "<", "e")])
    p = (col("t") >= col("s")) & (col("t") < col("e"))
    assert_tables_equal(gpujoin.join_where(left, right, p, device="cpu"), want)
    assert_tables_equal(gpujoin.join_where(left, right, col("t") >= col("s"), col("e") > col("t"), device="cpu"),
                        want)
    assert_tables_equal(gpujoin.join_where(left, right, (pl.col("t") >= pl.col("s")) & (pl.col("t") < pl.col("e")),
                                           device="cpu"), want)
    got = gpujoin.join_where(left, right, col("k") == col("k_right"), device="cpu")
    assert got.column_names == ["t", "k", "s", "e", "k_right"] and got.num_rows == 3


def test_errors_name_what_is_wrong():
    left, right = pa.table({"a": [1], "s": ["x"]}), pa.table({"b": [1.0], "c": [2]})
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        gpujoin.join_where(left, right, col("a") < col("nope"), device="cpu")
    with pytest.raises(SchemaError, match="'a'.*'b'"):
        gpujoin.join_where(left, right, col("a") < col("b"), device="cpu")
    with pytest.raises(SchemaError, match="'s'"):
        gpujoin.join_where(left, right, col("s") < col("c"), device="cpu")
    with pytest.raises(ValueError, match="two columns of the left"):
        gpujoin.join_where(left, right, col("a") < col("s"), device="cpu")
    with pytest.raises(ValueError, match="plain columns"):
        gpujoin.join_where(left, right, pl.col("a") + 1 < pl.col("c"), device="cpu")
    with pytest.raises(ValueError, match="at least one predicate"):
        gpujoin.join_where(left, right, device="cpu")
    with pytest.raises(ValueError, match="range or equality"):
        gpujoin.join_where(left, right, col("a") != col("c"), algorithm="band", device="cpu")
    with pytest.raises(TypeError, match="compares two columns"):
        col("a") < 3  # noqa: B015


def test_output_too_large_for_host_memory_raises_before_building(monkeypatch):
    monkeypatch.setenv("GPUJOIN_HOST_MEMORY", "1MB")
    big = pa.table({"a": np.arange(2000)})
    with pytest.raises(MemoryError, match="join_where's output"):
        gpujoin.join_where(big, big.rename_columns(["b"]), col("a") != col("b"), device="cpu")


def test_blocks_smaller_than_a_row_s_run(monkeypatch):
    """A left row whose run is larger than a block is split across blocks."""
    import gpujoin.plan.join_where as jw

    monkeypatch.setattr(jw, "CPU_BLOCK_PAIRS", 7)
    left = pa.table({"a": [0, 5, 5, 100]})
    right = pa.table({"b": np.arange(50)})
    for op in OPS:
        _check(left, right, [("a", op, "b")])


@settings(max_examples=60, deadline=None)
@given(data=st.data(), ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=3))
def test_random_tables_match_polars(data, ops):
    left, right = data.draw(theta_tables(len(ops)))
    preds = [(f"a{i}", op, f"b{i}") for i, op in enumerate(ops)]
    if data.draw(st.booleans()):  # several predicates on one right column: a band
        preds = [(f"a{i}", op, "b0") for i, op in enumerate(ops)]
    _check(left, right, preds)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), ops=st.lists(st.sampled_from(OPS[:5]), min_size=1, max_size=3), block=st.integers(1, 40))
def test_blocks_of_any_size_cut_runs_anywhere(data, ops, block):
    """The CPU expansion of runs into pairs (theta.nlj._expand) with blocks of 1 to 40 pairs:
    runs cut at every place, empty runs between, the band join's sorted needles, a band on one
    right column or filters on others."""
    from unittest import mock

    import gpujoin.plan.join_where as jw

    left, right = data.draw(theta_tables(len(ops)))
    preds = [(f"a{i}", op, f"b{i}") for i, op in enumerate(ops)]
    if data.draw(st.booleans()):
        preds = [(f"a{i}", op, "b0") for i, op in enumerate(ops)]
    with mock.patch.object(jw, "CPU_BLOCK_PAIRS", block):
        _check(left, right, preds, ("nlj", "band"))


def test_interval_join_narrows_on_the_other_column():
    """lo <= t <= hi with narrow intervals: candidates stay near the output, not |L| x |R| / 2."""
    rng = np.random.default_rng(4)
    n = 3000
    left = pa.table({"t": rng.integers(0, 10**6, n)})
    lo = rng.integers(0, 10**6, n)
    right = pa.table({"lo": lo, "hi": lo + rng.integers(0, 500, n)})
    preds = [("t", ">=", "lo"), ("t", "<=", "hi")]
    _check(left, right, preds)
    from gpujoin.plan.join_where import execute_join_where

    _, stats = execute_join_where(left, right, col("t") >= col("lo"), col("t") <= col("hi"), device="cpu")
    assert stats.algorithm == "band" and stats.params["candidates"] < 20 * max(1, stats.output_rows) + n


def test_dictionary_columns_and_timestamp_units():
    left = pa.table({"s": pa.array(["a", "b", "c", None]).dictionary_encode(),
                     "t": pa.array([1, 2, 3, 4], pa.timestamp("ms"))})
    right = pa.table({"u": ["b", "c"], "v": pa.array([2500, 5], pa.timestamp("us"))})
    got = gpujoin.join_where(left, right, col("s") <= col("u"), device="cpu")
    assert sorted(zip(got["s"].to_pylist(), got["u"].to_pylist())) == [("a", "b"), ("a", "c"), ("b", "b"),
                                                                       ("b", "c"), ("c", "c")]
    got = gpujoin.join_where(left, right, col("t") <= col("v"), device="cpu")  # 1 ms and 2 ms <= 2500 us
    assert sorted(x.value for x in got["t"]) == [1, 2]


def test_explain_names_the_algorithm_and_the_candidates():
    left = pa.table({"t": [1, 5, 9]})
    right = pa.table({"lo": [0, 4, 8], "hi": [2, 6, 10]})
    plan = gpujoin.explain(gpujoin.join_where, left, right, col("t") >= col("lo"), col("t") <= col("hi"),
                           device="cpu", run=True)
    text = str(plan)
    assert plan.choice == "band" and "'lo' sorted" in text and "candidates" in text
    assert plan.result.num_rows == 3 and plan.statistics["candidates"] == 3
    plan = gpujoin.explain(gpujoin.join_where, left, right, col("t") != col("lo"), device="cpu")
    assert plan.choice == "nlj" and plan.result is None
