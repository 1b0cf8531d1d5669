"""Run by tests/test_device_bookkeeping.py in a process of its own: DeviceTable column types.
Binary columns (binary,
large_binary, fixed_size_binary: UUIDs, digests) in a DeviceTable, checked on the CPU with NumPy
standing in for CuPy: from and back to Arrow with nulls, two tables' dictionaries unified (codes
of equal bytes equal), concatenated, strings and binaries refused together; and the device
group-by's refusal of aggregates a column's type lacks (sum of strings, mean of dates, max of
binaries), as the host engine refuses them; all-null columns; and join keys whose stored
integers mean different things (decimal scales, timestamp units), rescaled into the host's
promoted type, or refused where a value would not fit 64 bits there.  Their joins and
group-bys on the GPU: tests/test_cuda_device_tables.py (marker gpu)."""

import numpy_as_cupy

numpy_as_cupy.install()  # (first: NumPy as CuPy)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from gpujoin.cuda.table import DeviceTable, concat_tables, unify_dictionaries  # noqa: E402
from gpujoin.testing import assert_tables_equal  # noqa: E402


def main():
    rng = np.random.default_rng(5)
    uuids = [bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(30)]
    raw = [b"", b"\xff\xfe\x00", b"GERMANY", b"\x00" * 40] + uuids[:6]
    n = 500
    t = pa.table({"u": pa.array([uuids[i] for i in rng.integers(0, 30, n)], pa.binary(16),
                                mask=rng.random(n) < 0.1),
                  "b": pa.array([raw[i] for i in rng.integers(0, len(raw), n)], pa.binary(), mask=rng.random(n) < 0.1),
                  "lb": pa.array([raw[i] for i in rng.integers(0, len(raw), n)], pa.large_binary()),
                  "i": np.arange(n)})
    d = DeviceTable.from_arrow(t)
    assert set(d.dictionaries) == {"u", "b", "lb"}
    assert_tables_equal(d.to_arrow(), t, check_row_order=True)
    assert d.to_arrow().schema.field("u").type == pa.binary(16)
    # another table's dictionaries (other bytes, another order): unified, equal bytes equal codes
    other = pa.table({"u": pa.array([uuids[i] for i in rng.integers(10, 40, 200) % 30], pa.binary(16)),
                      "b": pa.array([raw[i] for i in rng.integers(0, len(raw), 200)], pa.large_binary()),
                      "lb": pa.array([raw[i] for i in rng.integers(0, len(raw), 200)], pa.binary()),
                      "i": np.arange(200)})
    e = DeviceTable.from_arrow(other)
    a, b = unify_dictionaries([d, e], [[(0, c), (1, c)] for c in ("u", "b", "lb")])
    for c in ("u", "b", "lb"):
        assert a.dictionaries[c] is b.dictionaries[c]
        da, db = a.to_arrow()[c].to_pylist(), b.to_arrow()[c].to_pylist()
        assert da == t[c].to_pylist() and db == other[c].to_pylist()
        codes = {}
        for x, k in zip(da + db, list(np.asarray(a[c])) + list(np.asarray(b[c]))):
            if x is not None:
                assert codes.setdefault(x, int(k)) == int(k), (c, x)
    both = concat_tables([d, e]).to_arrow()
    assert both.num_rows == n + 200 and both["u"].to_pylist() == t["u"].to_pylist() + other["u"].to_pylist()
    assert both["b"].to_pylist() == t["b"].to_pylist() + other["b"].to_pylist()
    strings = DeviceTable.from_arrow(pa.table({"u": pa.array(["x"]), "b": pa.array(["y"]), "lb": pa.array(["z"]),
                                               "i": [0]}))
    try:
        unify_dictionaries([d, strings], [[(0, "b"), (1, "b")]])
    except TypeError as err:
        assert "binary" in str(err) and "'b'" in str(err), err
    else:
        raise AssertionError("strings and binaries were unified")
    # fixed_size_binary of one width keeps its type through a union; of several widths, or beside
    # variable-width bytes, the union is binary (a review found the cast back to the first part's
    # width failing); an all-null one's empty dictionary gets one value of its own width
    u8 = DeviceTable.from_arrow(pa.table({"u": pa.array([b"z" * 8, None], pa.binary(8))}))
    var = DeviceTable.from_arrow(pa.table({"u": pa.array([b"ccc", uuids[0]], pa.binary())}))
    u16 = DeviceTable.from_arrow(t.select(["u"]))
    same = concat_tables([u16, DeviceTable.from_arrow(other.select(["u"]))]).to_arrow()
    assert same.schema.field("u").type == pa.binary(16), same.schema
    for part in (u8, var):
        got = concat_tables([u16, part]).to_arrow()["u"].to_pylist()
        assert got == t["u"].to_pylist() + part.to_arrow()["u"].to_pylist()
    from gpujoin.cuda.table import one_value

    assert one_value(pa.binary(16)).to_pylist() == [b"\0" * 16] and one_value(pa.large_string()).to_pylist() == [""]
    import device_null_keys_check  # (the device join with the CPU engine's join inside)
    import gpujoin
    from gpujoin.plan import device_join

    assert device_join._execute_device_join is device_null_keys_check.cpu_join

    lt = pa.table({"k": pa.array([1, None, 2]), "x": [1, 2, 3]})
    rt = pa.table({"k": pa.array([1, None]), "h": pa.array([None, None], pa.binary(16))})
    for how, ne in (("left", False), ("full", False), ("left", True), ("full", True)):
        got, _ = device_join.execute_device_join(DeviceTable.from_arrow(lt), DeviceTable.from_arrow(rt), "k",
                                                 how=how, nulls_equal=ne)
        assert_tables_equal(got.to_arrow(), gpujoin.join(lt, rt, "k", how=how, nulls_equal=ne, device="cpu"))
    # an all-null column (Arrow's null type, as a Parquet file's never-set column reads) lives in a
    # DeviceTable too, and joins as on the host
    blank = pa.table({"k": pa.array([1, 2, 2]), "z": pa.nulls(3)})
    db = DeviceTable.from_arrow(blank)
    assert_tables_equal(db.to_arrow(), blank, check_row_order=True)
    assert db.to_arrow().schema.field("z").type == pa.null()
    # (stacked under a part of values, the null type does not hide them: a review found it did)
    stacked = concat_tables([DeviceTable.from_arrow(pa.table({"v": pa.nulls(2)})),
                             DeviceTable.from_arrow(pa.table({"v": [5, 6]}))]).to_arrow()
    assert stacked["v"].to_pylist() == [None, None, 5, 6], stacked
    for how in ("left", "full", "anti"):
        got, _ = device_join.execute_device_join(db, DeviceTable.from_arrow(lt), "k", how=how)
        assert_tables_equal(got.to_arrow(), gpujoin.join(blank, lt, "k", how=how, device="cpu"))
    # keys whose stored integers mean different things (decimals of other scales, timestamps of
    # other units) are compared in the host's promoted type, their integers rescaled on the GPU;
    # a date against an integer is refused as on the host, and a value past 64 bits once
    # rescaled by name; of one scale or unit, or integers of any widths, they join as they lie
    import datetime

    from gpujoin.errors import SchemaError

    def keyed(arr):
        return pa.table({"k": arr, "i": np.arange(len(arr))})

    dec = [1, 2, None]
    cases = {"decimal scales": (pa.array(dec, pa.decimal128(10, 2)), pa.array(dec, pa.decimal128(10, 3)), True),
             "decimal precisions": (pa.array(dec, pa.decimal128(10, 2)), pa.array(dec, pa.decimal128(18, 2)), True),
             "timestamp units": (pa.array([1, 2], pa.timestamp("ms")), pa.array([1, 2], pa.timestamp("us")), True),
             "past 64 bits rescaled": (pa.array([10**17, 1], pa.decimal128(18, 0)),
                                       pa.array([1, 2], pa.decimal128(18, 3)), False),
             # a factor of 10^19, past 64 bits, over keys that are all 0: they still join
             "factor past 64 bits": (pa.array([0, 0, None], pa.int64()), pa.array([0, None], pa.decimal128(38, 19)),
                                     True),
             "int and decimal of scale 0": (pa.array([1, 2], pa.int16()), pa.array([2, 3], pa.decimal128(12, 0)), True),
             "date and int": (pa.array([datetime.date(2020, 1, 2)]), pa.array([18263], pa.int32()), False),
             "int widths": (pa.array([1, 2], pa.int32()), pa.array([2, 3], pa.int64()), True),
             "decimal and int": (pa.array([1, 2], pa.decimal128(10, 0)), pa.array([1, 2], pa.int64()), False)}
    for name, (x, y, joins) in cases.items():
        lx, ry = keyed(x), keyed(y)
        for how, coalesce in (("inner", None), ("full", None), ("semi", None), ("left", False)):
            try:
                got, _ = device_join.execute_device_join(DeviceTable.from_arrow(lx), DeviceTable.from_arrow(ry), "k",
                                                         how=how, coalesce=coalesce)
            except SchemaError as err:
                assert not joins and "'k'" in str(err), (name, err)
                continue
            assert joins, f"{name}: joined on stored integers"
            assert_tables_equal(got.to_arrow(), gpujoin.join(lx, ry, "k", how=how, coalesce=coalesce, device="cpu"))
    # a key column in two pairs that compare it in two types (rescaled for one, as stored for the
    # other) is refused: it had been rescaled for both, and the second pair matched nothing
    two = pa.table({"a": pa.array([1, 2], pa.decimal128(10, 2))})
    other = pa.table({"x": pa.array([1, 2], pa.decimal128(10, 4)), "y": pa.array([1, 2], pa.decimal128(10, 2))})
    try:
        device_join.execute_device_join(DeviceTable.from_arrow(two), DeviceTable.from_arrow(other),
                                        left_on=["a", "a"], right_on=["x", "y"])
    except SchemaError as err:
        assert "'a' (decimal128(10, 2)) is compared in types of different scales" in str(err), err
    else:
        raise AssertionError("a key compared in two types was joined")
    # two pairs that compare it in types of one scale (the same type, another precision): joined,
    # its coalesced key in the first pair's type, as on the host
    other = pa.table({"p": pa.array([1, 3], pa.decimal128(10, 2)), "q": pa.array([1, 2], pa.decimal128(12, 2))})
    for how, coalesce in (("inner", None), ("full", True), ("left", False)):
        got, _ = device_join.execute_device_join(DeviceTable.from_arrow(two), DeviceTable.from_arrow(other),
                                                 left_on=["a", "a"], right_on=["p", "q"], how=how, coalesce=coalesce)
        assert_tables_equal(got.to_arrow(), gpujoin.join(two, other, left_on=["a", "a"], right_on=["p", "q"], how=how,
                                                         coalesce=coalesce, device="cpu"))
    # aggregates a column's type lacks are refused before any work, as on the host (a string's
    # codes or a date's days had been summed as numbers)
    from gpujoin.errors import InvalidOperationError
    from gpujoin.plan import device_groupby

    g = DeviceTable.from_arrow(pa.table({"k": [1, 1, 2], "s": ["x", "y", None], "b": [b"x", None, b"\xff"],
                                         "d": pa.array([1, 2, 3], pa.int32()).view(pa.date32()), "v": [1.5, 2, 3]}))
    for col, fn, message in (("s", "sum", "strings support"), ("d", "mean", "dates, times"),
                             ("b", "max", "cannot aggregate column 'b'"), ("b", "n_unique", "column 'b'")):
        try:
            device_groupby.execute_device_group_by(g, ["k"], [("out", col, fn)], "auto")
        except InvalidOperationError as err:
            assert message in str(err), err
        else:
            raise AssertionError(f"{fn} of {col} was not refused")
    for col, fn in (("s", "max"), ("s", "n_unique"), ("d", "min"), ("b", "count"), ("v", "mean")):
        device_groupby.check_aggregate(col, *device_groupby._arrow_kind(g, col), fn)
    print("device column types: ok")


def round_trips():
    """Random tables of every type a DeviceTable holds, with nulls, back from the GPU as they went
    (dictionary-coded columns as their values), and cut into parts and stacked again
    (concat_tables: each part's strings coded apart)."""
    import datetime
    from decimal import Decimal

    from hypothesis import given, settings, strategies as st

    def column(kind, n, rng):
        mask = rng.random(n) < 0.2
        x = rng.integers(-1000, 1000, n)
        return {"int8": lambda: pa.array(x % 100, pa.int8(), mask=mask),
                "uint64": lambda: pa.array(np.abs(x).astype(np.uint64) + np.uint64(2**63), mask=mask),
                "float": lambda: pa.array(x / 7, mask=mask),
                "bool": lambda: pa.array(x > 0, mask=mask),
                "date": lambda: pa.array([datetime.date(2000, 1, 1) + datetime.timedelta(days=int(v)) for v in x],
                                         mask=mask),
                "timestamp": lambda: pa.array(x, mask=mask).view(pa.timestamp("ns", tz="UTC")),
                "decimal": lambda: pa.array([Decimal(int(v)).scaleb(-2) for v in x], pa.decimal128(12, 2),
                                            mask=mask),
                "decimal38": lambda: pa.array([Decimal(int(v) * 10**12).scaleb(-4) for v in x], pa.decimal128(38, 4),
                                              mask=mask),
                "string": lambda: pa.array([f"s{v % 13}" for v in x], mask=mask),
                "large_string": lambda: pa.array([f"s{v % 13}" for v in x], pa.large_string(), mask=mask),
                "binary": lambda: pa.array([bytes([v % 256]) * (v % 3) for v in x], pa.binary(), mask=mask),
                "uuid": lambda: pa.array([bytes([v % 256]) * 16 for v in x], pa.binary(16), mask=mask),
                "dictionary": lambda: pa.array([f"d{v % 5}" for v in x], mask=mask).dictionary_encode(),
                "null": lambda: pa.nulls(n)}[kind]()

    kinds = ["int8", "uint64", "float", "bool", "date", "timestamp", "decimal", "decimal38", "string", "large_string",
             "binary", "uuid", "dictionary", "null"]

    @settings(max_examples=150, deadline=None, database=None)
    @given(st.lists(st.sampled_from(kinds), min_size=1, max_size=5), st.integers(0, 40), st.integers(0, 2**32 - 1),
           st.lists(st.integers(0, 40), max_size=3))
    def check(chosen, n, seed, cuts):
        rng = np.random.default_rng(seed)
        t = pa.table({f"c{i}": column(k, n, rng) for i, k in enumerate(chosen)})
        plain = pa.table({c: (col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col)
                          for c, col in zip(t.column_names, t.columns)})
        back = DeviceTable.from_arrow(t).to_arrow()
        assert_tables_equal(back, plain, check_row_order=True)
        bounds = sorted({0, n, *[c for c in cuts if c <= n]})
        parts = [DeviceTable.from_arrow(t.slice(a, b - a)) for a, b in zip(bounds, bounds[1:])]
        if parts:
            assert_tables_equal(concat_tables(parts).to_arrow(), plain, check_row_order=True)

    check()
    try:  # (a decimal beyond 64 bits: refused by name, not cut to its low word)
        DeviceTable.from_arrow(pa.table({"w": pa.array([Decimal(1), Decimal(2**70)], pa.decimal128(38, 0))}))
    except TypeError as e:
        assert "'w'" in str(e) and "64 bits" in str(e), e
    else:
        raise AssertionError("a decimal beyond 64 bits was taken")
    print("device round trips: ok")


if __name__ == "__main__":
    main()
    round_trips()
