"""Device-resident tables: decimal and string columns in GPU memory, composite keys packed into
one GPU key for joins and group-bys, and the TPC-H job run wholly on the GPU.  Marker ``gpu``."""

import datetime as dt
import shutil
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import gpujoin
from gpujoin.testing import assert_tables_equal

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")
if not gpujoin.backend.cuda_available():
    pytest.skip("no usable GPU", allow_module_level=True)

from gpujoin.cuda.table import DeviceTable  # noqa: E402

HOWS = ["inner", "left", "right", "full", "semi", "anti"]


def _table(rng, n, domain):
    """Composite keys (a int64 with negatives, b int32, d date32), a decimal, a string with nulls."""
    words = np.array(["", "x", "GERMANY", "FRANCE", "ünï", "a" * 40])
    s = pa.array(words[rng.integers(0, words.size, n)], mask=rng.random(n) < 0.1)
    return pa.table({
        "a": pa.array(rng.integers(-domain, domain, n), pa.int64()),
        "b": pa.array(rng.integers(0, 3, n).astype(np.int32)),
        "d": pa.array(rng.integers(8000, 8003, n).astype(np.int32)).view(pa.date32()),
        "m": pa.array([Decimal(int(v)).scaleb(-2) for v in rng.integers(-10**6, 10**6, n)], pa.decimal128(15, 2)),
        "s": s,
    })


def test_from_arrow_round_trip():
    rng = np.random.default_rng(1)
    t = _table(rng, 1000, 50)
    t = t.append_column("dec_null", pa.array([None if i % 7 == 0 else Decimal(i) / 100 for i in range(1000)],
                                             pa.decimal128(18, 2)))
    t = t.append_column("dict", pa.array(["p", "q", None, "p"] * 250).dictionary_encode())
    d = DeviceTable.from_arrow(t)
    assert d["s"].dtype == cp.int32 and d["m"].dtype == cp.int64
    back = d.to_arrow()
    assert back.column("dict").type == pa.string()
    assert_tables_equal(back, t.set_column(6, "dict", t["dict"].cast(pa.string())), check_row_order=True)
    coded = d.to_arrow(decode_strings=False)
    assert pa.types.is_dictionary(coded.column("s").type)
    assert coded.column("s").cast(pa.string()).equals(t.column("s"))
    # decimal(38, s) whose values fit 64 bits live in GPU memory; a wider value is refused by name
    wide = pa.table({"w": pa.array([Decimal("1.25"), None, Decimal("-3")], pa.decimal128(38, 2))})
    assert_tables_equal(DeviceTable.from_arrow(wide).to_arrow(), wide, check_row_order=True)
    with pytest.raises(TypeError, match="'w'.*64 bits"):
        DeviceTable.from_arrow(pa.table({"w": pa.array([Decimal(2**70)], pa.decimal128(38, 0))}))


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("algorithm", ["phj-tr", "smj-tr", "nphj"])
def test_composite_keys_join_matches_cpu_engine(how, algorithm):
    rng = np.random.default_rng(len(how))
    left, right = _table(rng, 3000, 40), _table(rng, 2000, 40).rename_columns(["a", "b", "d", "m2", "s2"])
    on = ["a", "b", "d"]
    want = gpujoin.join(left, right, on, how=how, device="cpu")
    got = gpujoin.join(DeviceTable.from_arrow(left), DeviceTable.from_arrow(right), on, how=how,
                       algorithm=algorithm)
    assert isinstance(got, DeviceTable)
    assert_tables_equal(got.to_arrow(), want)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("coalesce", [None, True, False])
@pytest.mark.parametrize("nulls_equal", [False, True])
def test_null_keys_join_as_on_the_host(how, coalesce, nulls_equal):
    # a row with a null in any key column matches nothing (nulls_equal=False): the rows with all
    # keys present are joined, the others added as an outer side's (or an anti join's) unmatched
    # rows; with nulls_equal=True a null matches a null (the rows with one joined among themselves)
    # (tests/null_key_cases.py: one int64 key, composite keys, a string key, a side of nulls)
    from null_key_cases import cases

    for lt, rt, on in cases(len(how) * 3 + (coalesce is None) + 2 * bool(coalesce) + nulls_equal, 3000, 2000):
        want = gpujoin.join(lt, rt, on, how=how, coalesce=coalesce, nulls_equal=nulls_equal, device="cpu")
        for algorithm in ("auto", "phj-tr", "smj-tr"):
            got = gpujoin.join(DeviceTable.from_arrow(lt), DeviceTable.from_arrow(rt), on, how=how,
                               coalesce=coalesce, nulls_equal=nulls_equal, algorithm=algorithm)
            assert_tables_equal(got.to_arrow(), want)


def test_composite_keys_group_by_matches_cpu_engine():
    rng = np.random.default_rng(7)
    t = _table(rng, 20_000, 1000)
    t = t.set_column(4, "s", t["s"].fill_null("null"))  # device keys cannot be null
    # (the mean of a decimal column: its unscaled integers' mean came back 10^scale too large)
    aggs = dict(total=("m", "sum"), lo=("m", "min"), avg=("m", "mean"), n=("a", "count"), rows=("a", "size"))
    for by in (["a", "b", "d"], ["s", "b"], ["d", "s", "a"]):
        want = gpujoin.group_by(t, by, device="cpu").agg(**aggs)
        got = gpujoin.group_by(DeviceTable.from_arrow(t), by).agg(**aggs)
        out = got.to_arrow()
        assert out.schema.field("total").type == pa.decimal128(38, 2)
        assert_tables_equal(out, want, rel=1e-12)


@pytest.mark.parametrize("algorithm", ["auto", "hgb", "pgb-tr", "sgb-tr"])
def test_string_min_max_follow_the_strings_not_the_codes(algorithm):
    """min and max of a string column of a DeviceTable are the strings' (lexicographic), not the
    dictionary codes' (first appearance: "w9" before "w10"), with nulls, an all-null group and a
    dictionary already sorted (found by scripts/fuzz_device.py)."""
    rng = np.random.default_rng(3)
    n = 20_000
    words = pa.array([f"w{x}" for x in rng.integers(0, 50, n).tolist()], mask=rng.random(n) < 0.1)
    keys = rng.integers(0, 300, n)
    keys[words.is_null().to_numpy(zero_copy_only=False) & (rng.random(n) < 0.5)] = -1  # a group of nulls only
    aggs = dict(lo=("s", "min"), hi=("s", "max"), n=("s", "count"))
    for s in (words, pa.array(sorted(words.to_pylist(), key=lambda w: (w is None, w or "")))):
        t = pa.table({"k": keys, "s": s})
        want = gpujoin.group_by(t, "k", device="cpu").agg(**aggs)
        got = gpujoin.group_by(DeviceTable.from_arrow(t), "k", algorithm=algorithm).agg(**aggs).to_arrow()
        assert_tables_equal(got, want)


@pytest.mark.parametrize("how", HOWS)
def test_binary_columns_join_and_group_as_on_the_host(how):
    """binary, large_binary and fixed_size_binary (UUID) keys and payloads of DeviceTables, with
    nulls, each side's dictionary its own (tests/device_types_check.py: the same bookkeeping on
    the CPU): joins, and group-bys by them, equal the CPU engine's."""
    rng = np.random.default_rng(len(how))
    uuids = [bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(300)]
    raw = [b"", b"\xff\xfe\x00", b"GERMANY", b"\x00" * 40] + uuids[:60]

    def side(n, lo, kind):
        return pa.table({"u": pa.array([uuids[i] for i in rng.integers(lo, lo + 200, n) % 300], pa.binary(16),
                                       mask=rng.random(n) < 0.05),
                         "b": pa.array([raw[i] for i in rng.integers(0, len(raw), n)], kind, mask=rng.random(n) < 0.1),
                         "i": np.arange(n)})

    left, right = side(5000, 0, pa.binary()), side(3000, 100, pa.large_binary())
    for on in ("u", "b", ["u", "b"]):
        want = gpujoin.join(left, right, on, how=how, device="cpu")
        got = gpujoin.join(DeviceTable.from_arrow(left), DeviceTable.from_arrow(right), on, how=how)
        assert_tables_equal(got.to_arrow(), want)
    with pytest.raises(gpujoin.SchemaError, match="both are binary or both are string"):
        gpujoin.join(DeviceTable.from_arrow(left), DeviceTable.from_arrow(pa.table({"b": ["GERMANY"]})), "b", how=how)
    aggs = dict(t=("i", "sum"), hi=("i", "max"), rows=("i", "size"))  # (binary values are not aggregated)
    for by in ("u", ["u", "b"]):
        want = gpujoin.group_by(left, by, device="cpu").agg(**aggs)
        assert_tables_equal(gpujoin.group_by(DeviceTable.from_arrow(left), by).agg(**aggs).to_arrow(), want)


def test_all_null_columns_join_and_group_as_on_the_host():
    """A column of Arrow's null type (a Parquet file's never-set column) in a DeviceTable: a
    payload, a key on one side (its rows are null keys) and an aggregate's input."""
    t = pa.table({"k": pa.array([1, 2, 2, None]), "z": pa.nulls(4), "v": [1, 2, 3, 4]})
    r = pa.table({"k": [2, 3], "w": [5, 6], "z": pa.array([7, 8])})
    strings = r.set_column(2, "z", pa.array(["p", None]))  # (an all-null key against strings)
    for how in HOWS:
        for on, right in (("k", r), ("z", r), ("z", strings)):
            want = gpujoin.join(t, right, on, how=how, device="cpu")
            got = gpujoin.join(DeviceTable.from_arrow(t), DeviceTable.from_arrow(right), on, how=how)
            assert_tables_equal(got.to_arrow(), want)
    aggs = dict(n=("z", "count"), s=("v", "sum"))
    assert_tables_equal(gpujoin.group_by(DeviceTable.from_arrow(t), "k").agg(**aggs).to_arrow(),
                        gpujoin.group_by(t, "k", device="cpu").agg(**aggs))


def test_device_key_errors_are_clear():
    wide = {"x": cp.asarray([-2**62, 2**62]), "y": cp.asarray([0, 5])}
    with pytest.raises(ValueError, match="63 bits"):
        gpujoin.group_by(wide, ["x", "y"]).agg(n=("x", "count"))
    with pytest.raises(ValueError, match="63 bits"):
        gpujoin.join(wide, wide, ["x", "y"])
    a = DeviceTable.from_arrow(pa.table({"k": ["p", "q"]}))
    n = DeviceTable({"k": cp.asarray([0, 1], cp.int32)})
    with pytest.raises(gpujoin.SchemaError, match=r"'k' is a string \(or binary\) column and 'k' is not"):
        gpujoin.join(a, n, "k")
    assert_tables_equal(gpujoin.join(a, a, "k").to_arrow(), pa.table({"k": ["p", "q"]}))
    # a decimal key rescaled past 64 bits to meet the other's scale: refused by name (the host
    # compares it in 128 bits)
    big = DeviceTable.from_arrow(pa.table({"k": pa.array([10**17, 1], pa.decimal128(18, 0))}))
    d4 = DeviceTable.from_arrow(pa.table({"k": pa.array([1, 2], pa.decimal128(18, 4))}))
    with pytest.raises(gpujoin.SchemaError, match="'k' .*do not fit 64 bits"):
        gpujoin.join(big, d4, "k")
    # aggregates a column's type lacks, refused as on the host (the codes had been summed)
    s = DeviceTable.from_arrow(pa.table({"k": [1, 2], "s": ["p", "q"]}))
    with pytest.raises(gpujoin.InvalidOperationError, match="strings support"):
        gpujoin.group_by(s, "k").agg(t=("s", "sum"))


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("coalesce", [None, False])
def test_keys_of_two_scales_or_units_join_as_on_the_host(how, coalesce):
    """Decimal keys of two scales, an integer against a decimal, timestamps and times of two
    units: the stored integers rescaled on the GPU into the host's promoted type, so that 1.00
    meets 1.000 and not 0.100; a coalesced key in that type, each side's own kept as it was."""
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, 50, 4000, dtype=np.int32), rng.integers(0, 50, 3000, dtype=np.int32)
    pairs = {"scales": (pa.array(x).cast(pa.decimal128(14, 2)), pa.array(y).cast(pa.decimal128(15, 3))),
             "int-decimal": (pa.array(x, pa.int32()), pa.array(y).cast(pa.decimal128(16, 2))),
             "timestamps": (pa.array(x.astype(np.int64)).view(pa.timestamp("ms")),
                            pa.array(y.astype(np.int64) * 1000).view(pa.timestamp("us"))),
             "times": (pa.array(x).view(pa.time32("s")), pa.array(y.astype(np.int64) * 10**6).view(pa.time64("us")))}
    for name, (a, b) in pairs.items():
        m = rng.random(len(a)) < 0.05
        left = pa.table({"k": pa.array(a.to_pylist(), a.type, mask=m), "i": np.arange(len(a))})
        right = pa.table({"k": b, "j": np.arange(len(b))})
        want = gpujoin.join(left, right, "k", how=how, coalesce=coalesce, device="cpu")
        got = gpujoin.join(DeviceTable.from_arrow(left), DeviceTable.from_arrow(right), "k", how=how, coalesce=coalesce)
        assert want.num_rows, name
        assert_tables_equal(got.to_arrow(), want)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("algorithm", ["auto", "phj-tr", "smj-ur", "nphj"])
def test_string_keys_of_different_dictionaries_join(how, algorithm):
    """Each table's strings dictionary-encoded on their own (codes in first-appearance order, so
    a code means different strings on the two sides): re-coded into one dictionary, the join
    equals the CPU engine's on the strings, on one key and on a composite key with an integer."""
    rng = np.random.default_rng(11)
    words = np.array([f"w{i}" for i in range(40)] + ["", "ünï"])
    tables = []
    for n, lo, hi in ((300, 0, 30), (250, 10, 42)):  # overlapping vocabularies, each with words of its own
        tables.append(pa.table({"s": pa.array(words[rng.integers(lo, hi, n)]),
                                "i": pa.array(rng.integers(0, 3, n).astype(np.int32)),
                                "v": pa.array(rng.integers(0, 1000, n))}))
    left, right = tables
    dl, dr = DeviceTable.from_arrow(left), DeviceTable.from_arrow(right)
    assert not dl.dictionaries["s"].equals(dr.dictionaries["s"])
    for on in ("s", ["s", "i"]):
        want = gpujoin.join(left, right, on, how=how, device="cpu")
        got = gpujoin.join(dl, dr, on, how=how, algorithm=algorithm).to_arrow()
        assert_tables_equal(got, want)
    # both key columns kept (coalesce=False): each decodes to its own side's strings
    want = gpujoin.join(left, right, "s", how=how, coalesce=False, device="cpu")
    assert_tables_equal(gpujoin.join(dl, dr, "s", how=how, coalesce=False, algorithm=algorithm).to_arrow(), want)
    # an empty side (an empty dictionary), and a side of one string
    for other in (right.slice(0, 0), right.slice(0, 1)):
        want = gpujoin.join(left, other, "s", how=how, device="cpu")
        got = gpujoin.join(dl, DeviceTable.from_arrow(other), "s", how=how, algorithm=algorithm).to_arrow()
        assert_tables_equal(got, want)


def test_concat_tables_recodes_different_dictionaries():
    from gpujoin.cuda.table import concat_tables

    a = DeviceTable.from_arrow(pa.table({"s": pa.array(["x", None, "y"], pa.string())}))
    b = DeviceTable.from_arrow(pa.table({"s": pa.array(["y", "z", "x"], pa.large_string())}))
    got = concat_tables([a, b, a]).to_arrow()
    assert got.column("s").to_pylist() == ["x", None, "y", "y", "z", "x", "x", None, "y"]
    with pytest.raises(TypeError, match="a string column on one side only"):
        concat_tables([a, DeviceTable({"s": cp.asarray([0], cp.int32)})])


def test_tpch_on_the_gpu_validates():
    """Every query of the TPC-H job in GPU memory (DeviceQuery) at SF 0.01, against DuckDB."""
    pytest.importorskip("duckdb")
    if not (Path(sys.executable).with_name("tpchgen-cli").exists() or shutil.which("tpchgen-cli")):
        pytest.skip("tpchgen-cli is not installed")
    from gpujoin.tpch.data import ensure_data
    from gpujoin.tpch.queries import QUERIES
    from gpujoin.tpch.runner import run

    data = ensure_data(0.01, progress=False)
    results = run(data, list(QUERIES), device="cuda", repeat=1)
    bad = [(r.query, r.difference) for r in results if not r.validated]
    assert not bad, bad


def test_device_query_year_and_top():
    from gpujoin.tpch.ops import DeviceQuery

    days = [dt.date(y, m, d) for y, m, d in [(1970, 1, 1), (1969, 12, 31), (2000, 2, 29), (2000, 3, 1),
                                            (1996, 12, 31), (1600, 1, 1), (2400, 12, 31)]]
    t = DeviceTable.from_arrow(pa.table({"d": pa.array(days, pa.date32()), "v": list(range(7))}))
    q = DeviceQuery()
    years, typ = q.year(t, "d")
    assert cp.asnumpy(years).tolist() == [d.year for d in days] and typ == pa.int64()
    top = q.result(t, [("d", "descending")], 2)
    assert top.column("v").to_pylist() == [6, 3]


def test_device_query_compares_string_columns_of_different_dictionaries():
    """= of two string columns in GPU memory (each from its own dictionary): re-coded into one
    first (it was refused); nulls compare false; a string column against another type refused."""
    from gpujoin.tpch.ops import Col, DeviceQuery

    a = ["x", "y", None, "z", "w", "y"]
    b = ["y", "y", "x", "z", None, "q"]
    t = DeviceTable.from_arrow(pa.table({"a": a, "b": b, "n": list(range(6))}))
    assert t.dictionaries["a"] is not t.dictionaries["b"]
    q = DeviceQuery()
    got = cp.asnumpy(q.eq(t, "a", Col("b"))).astype(bool).tolist()
    assert got == [x is not None and x == y for x, y in zip(a, b)]
    with pytest.raises(TypeError, match="'a' is a string column and 'n' is not"):
        q.eq(t, "a", Col("n"))
