"""GPU group-bys (every algorithm) against the CPU engine.  Marker ``gpu``: run on a GPU machine
with ``pytest -m gpu``."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings

import gpujoin
from gpujoin.testing import assert_tables_equal

from test_groupby import groupby_table

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")
if not gpujoin.backend.cuda_available():
    pytest.skip("no usable GPU", allow_module_level=True)

from gpujoin.cuda.groupby import ALGORITHMS, AggInput, run  # noqa: E402
from gpujoin.cuda.groupby.common import estimate_groups  # noqa: E402
from gpujoin.cuda.table import DeviceTable  # noqa: E402

ALL_AGGS = {"sv": ("v", "sum"), "cv": ("v", "count"), "n": (None, "size"), "mn": ("v", "min"), "mx": ("v", "max"),
            "av": ("v", "mean"), "sf": ("f", "sum"), "mnf": ("f", "min"), "mxf": ("f", "max"), "af": ("f", "mean"),
            "cf": ("f", "count"), "ms": ("s", "max"), "mns": ("s", "min"), "cs": ("s", "count")}
#: Float sums: the GPU adds in another order than the CPU; 1e-9 relative covers these sizes.
REL = 1e-9


def cpu(table, by, aggs):
    return gpujoin.group_by(table, by, device="cpu").agg(**aggs)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("by", [["k"], ["s"], ["k", "s"]])
@settings(max_examples=25)
@given(table=groupby_table(max_rows=60))
def test_gpu_group_by_matches_cpu_engine(algorithm, by, table):
    got = gpujoin.group_by(table, by, device="cuda", algorithm=algorithm).agg(**ALL_AGGS)
    assert_tables_equal(got, cpu(table, by, ALL_AGGS), rel=REL)


def _skewed(case: str, n: int, rng):
    if case == "one_group":
        return np.full(n, 7, np.int64)
    if case == "all_distinct":
        return rng.permutation(n).astype(np.int64) * 3 - n
    if case == "zipf2":
        return rng.zipf(2.0, n).astype(np.int64)
    if case == "zipf1":
        return (rng.zipf(1.1, n) % 50_000).astype(np.int64)
    if case == "extremes":
        return rng.choice(np.array([-(2**63), 2**63 - 1, 0, -1, 1], np.int64), n)
    return rng.integers(0, 5000, n).astype(np.int64)  # "uniform"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case", ["one_group", "all_distinct", "zipf2", "zipf1", "extremes", "uniform"])
@pytest.mark.parametrize("n", [1, 300_000])
def test_gpu_group_by_skew_and_extremes(algorithm, case, n):
    rng = np.random.default_rng(len(case) + n)
    vals = rng.integers(-(2**62), 2**62, n)
    vals[rng.random(n) < 0.1] = 2**63 - 1 if case == "extremes" else 5
    floats = rng.normal(size=n)
    floats[rng.random(n) < 0.01] = np.nan
    table = pa.table({
        "k": _skewed(case, n, rng),
        "v": pa.array(vals, mask=rng.random(n) < 0.2),
        "i": rng.integers(-1000, 1000, n).astype(np.int32),
        "f": pa.array(floats, mask=rng.random(n) < 0.1),
    })
    aggs = {"mn": ("v", "min"), "mx": ("v", "max"), "cv": ("v", "count"), "n": (None, "size"),
            "si": ("i", "sum"), "ai": ("i", "mean"), "mnf": ("f", "min"), "mxf": ("f", "max"), "sf": ("f", "sum")}
    got = gpujoin.group_by(table, "k", device="cuda", algorithm=algorithm).agg(**aggs)
    assert_tables_equal(got, cpu(table, "k", aggs), rel=REL)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("log2_groups", [2, 10, 14, 18])
def test_device_table_group_by_matches_cpu_engine(algorithm, log2_groups):
    """DeviceTable in, DeviceTable out: every value dtype, validity, and the smem/global HGB paths."""
    n = 1 << 19
    rng = cp.random.default_rng(log2_groups)
    keys = rng.integers(0, 1 << log2_groups, n, dtype=cp.int32) * 7 - 100
    cols = {"k": keys, "a": rng.integers(-(2**31), 2**31 - 1, n, dtype=cp.int32),
            "b": rng.integers(-(2**40), 2**40, n, dtype=cp.int64), "c": rng.standard_normal(n, dtype=cp.float32),
            "d": rng.standard_normal(n, dtype=cp.float64), "e": rng.integers(0, 200, n, dtype=cp.int32).astype(cp.uint8)}
    validity = {"b": (rng.random(n) < 0.9).astype(cp.uint8), "c": (rng.random(n) < 0.5).astype(cp.uint8)}
    t = DeviceTable(cols, validity)
    aggs = {"ma": ("a", "max"), "mna": ("a", "min"), "sa": ("a", "sum"), "sb": ("b", "sum"), "mb": ("b", "max"),
            "ab": ("b", "mean"), "cb": ("b", "count"), "sc": ("c", "sum"), "mc": ("c", "min"), "md": ("d", "max"),
            "me": ("e", "max"), "n": (None, "size")}
    out = gpujoin.group_by(t, "k", algorithm=algorithm).agg(**aggs)
    assert isinstance(out, DeviceTable)
    assert out["ma"].dtype == cp.int32 and out["me"].dtype == cp.uint8 and out["sa"].dtype == cp.int64
    expected = gpujoin.group_by(t.to_arrow(), "k", device="cpu").agg(**aggs)
    got = out.to_arrow()
    # the CPU sums float32 values in float64 as the GPU does; min/max keep the column type
    assert_tables_equal(got.cast(expected.schema), expected, rel=1e-6)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", [cp.int32, cp.int64])
def test_the_empty_slot_key_is_a_group_like_any_other(algorithm, dtype):
    """Hash tables mark empty slots with the smallest key value; that key still forms its group."""
    low = np.iinfo(dtype).min
    keys = cp.asarray([low, 0, low, 5, -1, low, 0] * 500, dtype=dtype)
    t = {"k": keys, "v": cp.arange(keys.size, dtype=cp.int32)}
    out = gpujoin.group_by(t, "k", algorithm=algorithm).agg(s=("v", "sum"), n=(None, "size"), m=("v", "min"))
    expected = gpujoin.group_by(DeviceTable(t).to_arrow(), "k", device="cpu").agg(
        s=("v", "sum"), n=(None, "size"), m=("v", "min"))
    assert_tables_equal(out.to_arrow(), expected)


@pytest.mark.parametrize("sliced", [True, False])
@pytest.mark.parametrize("log2_groups", [11, 12, 13, 14, 15])
def test_hgb_shared_sliced_cluster_and_global_paths(log2_groups, sliced, monkeypatch):
    """Every accumulator and value type through HGB's one-block, sliced (a pass per slice of the
    groups), cluster (2-8 blocks of distributed shared memory) and global aggregation, as the
    groups grow; the sliced passes with and without looked-up group ids."""
    from gpujoin.cuda.groupby import hgb as module

    monkeypatch.setattr(module, "HGB_MAX_SLICES", 4 if sliced else 0)
    monkeypatch.setattr(module, "HGB_SLICE_GIDS", log2_groups % 2 == 0)

    g, n = 1 << log2_groups, 1 << 19
    rng = cp.random.default_rng(log2_groups)
    _check_group_by(k=rng.integers(0, g, n, dtype=cp.int64), rng=rng)


def _check_group_by(k, rng, algorithm=None):
    """An algorithm's (default HGB's; ``algorithm(keys, inputs)``) count, sum, min and max of
    int64 (with nulls), int32, float64 and float32 columns against the CPU engine, for keys
    ``k`` (groups of only nulls: their count, and null there); returns its output."""
    from gpujoin.cuda.groupby.hgb import hgb

    n = k.size
    cols = {"a": rng.integers(-(2**40), 2**40, n, dtype=cp.int64), "b": rng.integers(-1000, 1000, n, dtype=cp.int32),
            "f": rng.standard_normal(n), "h": rng.standard_normal(n, dtype=cp.float32)}
    valid = (rng.random(n) < 0.8).astype(cp.uint8)
    ops = ("count", "sum", "min", "max")
    out = (algorithm or hgb)(k, [AggInput(cols["a"], valid, ops)] + [AggInput(cols[c], None, ops) for c in "bfh"])
    order = cp.argsort(out.keys)
    table = DeviceTable({"k": k, **cols}, {"a": valid}).to_arrow()
    aggs = {f"{c}_{fn}": (c, fn) for c in "abfh" for fn in ops}
    expected = gpujoin.group_by(table, "k", device="cpu").agg(**aggs).sort_by("k")
    np.testing.assert_array_equal(cp.asnumpy(out.keys[order]), expected["k"].to_numpy())
    for i, c in enumerate("abfh"):
        got = {fn: cp.asnumpy(v[order]) for fn, v in out.columns[i].items()}
        if c == "a":
            got["sum"] = got["sum"].astype(object) * 2**32 + got.pop("sum_lo").astype(object)
        present = got["count"] > 0  # HGB leaves a group of only nulls at the identity; the caller masks it
        for fn in ops:
            exp = expected[f"{c}_{fn}"].to_numpy(zero_copy_only=False)
            if fn != "count":
                assert np.isnan(exp[~present]).all()
                got[fn], exp = got[fn][present], exp[present]
            if fn == "sum" and c in "fh":
                np.testing.assert_allclose(got[fn], exp, rtol=1e-9)
            else:
                np.testing.assert_array_equal(got[fn].astype(exp.dtype), exp, err_msg=f"{c} {fn}")
    return out


def _zipf_keys(n, z, distinct, seed, dtype):
    """``n`` keys of Zipf ``z`` ranks over ``distinct`` shuffled values, the hottest the sentinel
    (the smallest value of ``dtype``, which HGB keeps outside its table)."""
    ranks = np.random.default_rng(seed).zipf(z, n) % distinct
    values = np.random.default_rng(7).permutation(distinct).astype(np.int64) - distinct // 2
    keys = cp.asarray(values[ranks]).astype(dtype)
    keys[keys == int(values[1])] = np.iinfo(dtype).min
    return keys


@pytest.mark.parametrize("dtype", [cp.int32, cp.int64])
@pytest.mark.parametrize("hot_max", [1, 3, 4096])
def test_hgb_hot_groups_in_shared_memory_the_rest_in_global(dtype, hot_max, monkeypatch):
    """HGB's global path with the sample's frequent keys numbered first and aggregated in shared
    memory (issue 17): Zipf keys with the empty-slot key among the hottest, a few or many hot
    groups, exact results."""
    from gpujoin.cuda.groupby import hgb as module

    monkeypatch.setattr(module, "SMEM_BLOCK_BUDGET", 0)
    monkeypatch.setattr(module, "HGB_MAX_SLICES", 0)
    monkeypatch.setattr(module, "HGB_CLUSTERS", ())
    monkeypatch.setattr(module, "HOT_MIN_ROWS", 0)
    monkeypatch.setattr(module, "HOT_MAX", hot_max)
    _check_group_by(_zipf_keys(1 << 18, 1.5, 5000, hot_max, dtype), cp.random.default_rng(hot_max))


@pytest.mark.parametrize("method", ["tr", "ur"])
@pytest.mark.parametrize("z", [1.1, 2.0])
def test_pgb_spills_heavy_key_partitions_to_hgb_in_place(method, z):
    """PGB's partitions of heavy keys (more rows than SPILL_ROWS times the average) go to HGB,
    read in place as row ranges (adjacent ones merged), exact results."""
    from gpujoin.cuda.groupby.pgb import pgb

    keys = _zipf_keys(1 << 19, z, 20_000, 3, cp.int32)
    out = _check_group_by(keys, cp.random.default_rng(5), lambda k, i: pgb(k, i, method))
    assert out.params["spilled_partitions"] >= 2


@pytest.mark.parametrize("bits", [0, 2])
@pytest.mark.parametrize("method", ["tr", "ur"])
def test_pgb_spills_partitions_with_too_many_groups_to_hgb(bits, method):
    from gpujoin.cuda.groupby.pgb import pgb

    n, g = 200_000, 20_000  # with 1 or 4 partitions every partition holds > MAX_GROUPS groups
    keys = cp.random.default_rng(1).integers(0, g, n, dtype=cp.int32)
    vals = cp.arange(n, dtype=cp.int64)
    out = pgb(keys, [AggInput(vals, None, ("sum", "max")), AggInput(None, None, ("count",))], method, radix_bits=bits)
    assert out.params["spilled_partitions"] >= 1
    order = cp.argsort(out.keys)
    np.testing.assert_array_equal(cp.asnumpy(out.keys[order]), np.unique(cp.asnumpy(keys)))
    sizes = np.bincount(cp.asnumpy(keys), minlength=g)
    np.testing.assert_array_equal(cp.asnumpy(out.columns[1]["count"][order]), sizes[sizes > 0])
    maxes = np.full(g, -1)
    np.maximum.at(maxes, cp.asnumpy(keys), np.arange(n))
    np.testing.assert_array_equal(cp.asnumpy(out.columns[0]["max"][order]), maxes[sizes > 0])


@pytest.mark.parametrize("algorithm", ["pgb-tr", "pgb-ur", "hgb"])
@pytest.mark.parametrize("estimate", [1, 50, 10**7])
def test_a_wrong_groups_estimate_changes_speed_not_results(algorithm, estimate):
    # the planner hands its estimate on: far too low, PGB sizes its tables for a few groups a
    # partition and spills the rest to HGB, and HGB rebuilds a larger table; far too high costs memory
    n, g = 300_000, 30_000
    rng = cp.random.default_rng(3)
    keys = rng.integers(-g, g, n, dtype=cp.int32) * 3
    keys[::7] = cp.iinfo(cp.int32).min  # the empty-slot key value is a group too
    vals = rng.integers(-(2**40), 2**40, n, dtype=cp.int64)
    inputs = [AggInput(vals, None, ("min", "max")), AggInput(None, None, ("count",))]
    got = run(algorithm, keys, inputs, groups_estimate=estimate)
    want = run("sgb-tr", keys, inputs)
    order = cp.argsort(got.keys)
    np.testing.assert_array_equal(cp.asnumpy(got.keys[order]), cp.asnumpy(want.keys))
    for i, fn in ((0, "min"), (0, "max"), (1, "count")):
        np.testing.assert_array_equal(cp.asnumpy(got.columns[i][fn][order]), cp.asnumpy(want.columns[i][fn]))


def test_pgb_many_rows_race_for_few_new_groups():
    # every block sees its partition's few keys first in many threads at once: the thread that
    # inserts a key sets the group up while the others wait for it (one pass, pgb_aggregate)
    n = 1 << 22
    keys = cp.arange(n, dtype=cp.int64) % 1024 * 1_000_003
    vals = cp.arange(n, dtype=cp.float32)
    out = run("pgb-tr", keys, [AggInput(vals, None, ("sum", "min", "max", "count"))], radix_bits=8)
    order = cp.argsort(out.keys)
    c = out.columns[0]
    assert int(out.keys.size) == 1024
    np.testing.assert_array_equal(cp.asnumpy(c["count"][order]), np.full(1024, n // 1024))
    np.testing.assert_array_equal(cp.asnumpy(c["min"][order]), np.arange(1024, dtype=np.float32))
    np.testing.assert_array_equal(cp.asnumpy(c["max"][order]), np.arange(n - 1024, n, dtype=np.float32))
    exact = np.arange(n, dtype=np.float64).reshape(-1, 1024).sum(axis=0)
    np.testing.assert_allclose(cp.asnumpy(c["sum"][order]), exact, rtol=1e-12)


def test_calibration_measures_l1_and_l2_bandwidth():
    from gpujoin.plan.calibrate import measure

    c = measure(1 << 22)
    # a cache level reads faster than device memory, and L1 faster than L2
    assert c["l1_bytes_per_s"] > c["l2_bytes_per_s"] > c["b_g"] > 0
    assert c["ratio_l1"] > c["ratio_l2"] > 1 and c["ratio_random"] > 1


@pytest.mark.parametrize("method", ["sgb-tr", "sgb-ur", "sgb-de-tr"])
def test_sort_based_output_is_in_key_order(method):
    keys = cp.random.default_rng(2).integers(-(2**40), 2**40, 100_000, dtype=cp.int64) // 1000
    out = run(method, keys, [AggInput(cp.ones(keys.size, cp.float32), None, ("sum",)),
                             AggInput(keys, None, ("min",))])
    k = cp.asnumpy(out.keys)
    assert (np.diff(k) > 0).all()
    np.testing.assert_array_equal(cp.asnumpy(out.columns[1]["min"]), k)


@pytest.mark.parametrize("dtype", [cp.int32, cp.int64])
def test_hyperloglog_estimate(dtype):
    for g in (1, 1000, 1 << 20):
        keys = ((cp.arange(4 << 20, dtype=cp.int64) * 7919) % g).astype(dtype)
        assert abs(estimate_groups(keys) - g) <= 0.05 * g + 1
    keys = (cp.arange(1 << 26, dtype=cp.uint32) * cp.uint32(2654435761)).view(cp.int32).astype(dtype)  # distinct
    assert abs(estimate_groups(keys) - (1 << 26)) <= 0.05 * (1 << 26)
    # the planner's sketch over every 8th 32-byte sector (issue 17): spread groups and sorted
    # runs of 64 rows are all seen; a column not a whole number of sectors
    rng = cp.random.default_rng(3)
    for g in (1000, 1 << 16):
        spread = rng.integers(0, g, (4 << 20) + 3).astype(dtype)
        assert abs(estimate_groups(spread, 8) - g) <= 0.05 * g + 1
    runs = (cp.arange(1 << 22, dtype=cp.int64) // 64).astype(dtype)
    assert abs(estimate_groups(runs, 8) - (1 << 16)) <= 0.05 * (1 << 16)
    # every 16th sector (2^28 rows): groups of 256 sorted rows still seen
    runs = (cp.arange(1 << 23, dtype=cp.int64) // 256).astype(dtype)
    assert abs(estimate_groups(runs, 16) - (1 << 15)) <= 0.05 * (1 << 15)
    assert abs(estimate_groups(rng.integers(0, 1 << 14, 1 << 22).astype(dtype), 16) - (1 << 14)) <= 0.05 * (1 << 14)
    few = cp.arange(5, dtype=dtype)  # the first sector only: 8 int32 keys, 4 int64 keys
    assert estimate_groups(few, 8) == min(5, 32 // few.itemsize) and estimate_groups(few[:1], 8) == 1


@pytest.mark.parametrize("dtype", [cp.int32, cp.int64])
def test_radix_histogram_sketch_is_the_hyperloglog_sketch(dtype):
    # PGB's estimate from the partition's histogram read is estimate_groups' own, register for register
    from gpujoin.cuda import primitives as prim
    from gpujoin.cuda.groupby.common import HLL_BITS, hll_estimate

    rng = cp.random.default_rng(5)
    keys = rng.integers(-(1 << 40), 1 << 40, 3_000_017).astype(dtype) % 70_001
    sketch = cp.zeros(1 << HLL_BITS, cp.uint32)
    counts = prim.radix_histogram(keys, [keys], prim.Digits(bits=8), sketch)
    assert hll_estimate(sketch, keys.dtype.itemsize, keys.size) == estimate_groups(keys)
    assert int(counts.sum()) == keys.size
    k, (v,), off = prim.radix_partition(keys, [keys], prim.Digits(bits=11), counts=counts)
    k2, (v2,), off2 = prim.radix_partition(keys, [keys], prim.Digits(bits=11))
    assert bool((k == k2).all()) and bool((v == v2).all()) and bool((off == off2).all())
    # unstable: the first pass's tile is another; same partitions, rows whole
    counts = prim.radix_histogram(keys, [keys], prim.Digits(bits=8), stable=False)
    k3, (v3,), off3 = prim.radix_partition(keys, [keys], prim.Digits(bits=8), counts=counts, stable=False)
    k4, (v4,), off4 = prim.radix_partition(keys, [keys], prim.Digits(bits=8))
    assert bool((off3 == off4).all()) and bool((k3 == v3).all())
    assert bool((cp.sort(k3) == cp.sort(k4)).all())


def test_device_group_by_errors_are_clear():
    t = {"k": cp.asarray([1, 2]), "v": cp.asarray([1.0, 2.0])}
    with pytest.raises(gpujoin.SchemaError, match="integers"):
        gpujoin.group_by(t, ["k", "v"]).agg(m=("v", "max"))
    with pytest.raises(gpujoin.SchemaError, match="integers"):
        gpujoin.group_by(t, "v").agg(m=("k", "max"))
    with pytest.raises(RuntimeError, match="GPU memory"):
        gpujoin.group_by(t, "k", device="cpu")
    with pytest.raises(ValueError, match="unknown group-by algorithm"):
        gpujoin.group_by(t, "k", algorithm="pgb")
    big = {"k": cp.asarray([1]), "u": cp.asarray([2**64 - 1], dtype=cp.uint64)}
    with pytest.raises(gpujoin.ComputeError, match="uint64"):
        gpujoin.group_by(big, "k").agg(m=("u", "max"))
    # auto's sample is launched before those errors: read, and the next group-by plans as usual
    out = gpujoin.group_by({"k": cp.asarray([2, 1, 2]), "v": cp.asarray([5, 6, 7])}, "k").agg(m=("v", "max"))
    out = out.to_arrow() if hasattr(out, "to_arrow") else out
    assert sorted(zip(out["k"].to_pylist(), out["m"].to_pylist())) == [(1, 6), (2, 7)]
    over = {"k": cp.asarray([1, 1]), "b": cp.asarray([2**63 - 1] * 2, dtype=cp.int64)}
    with pytest.raises(gpujoin.ComputeError, match="overflows int64"):
        gpujoin.group_by(over, "k").agg(s=("b", "sum"))


@pytest.mark.parametrize("algorithm", list(ALGORITHMS) + ["auto"])
def test_n_unique_on_the_gpu_matches_cpu_engine(algorithm):
    """n_unique (count(DISTINCT)) of integer, float (-0.0 and 0.0 one value, NaN one value),
    string and all-null columns: host tables grouped on the GPU, DeviceTables (one key and
    composite keys, a string dictionary that repeats a string), against the CPU engine."""
    rng = np.random.default_rng(5)
    n = 20_000
    t = pa.table({"k": pa.array(rng.integers(0, 300, n), mask=rng.random(n) < 0.05),
                  "k2": pa.array(rng.integers(0, 3, n).astype(np.int32)),
                  "i": pa.array(rng.integers(0, 50, n), mask=rng.random(n) < 0.1),
                  "f": pa.array(rng.choice([0.0, -0.0, np.nan, 1.5, 2.5, np.inf], n), mask=rng.random(n) < 0.1),
                  "s": pa.array([f"w{x}" for x in rng.integers(0, 40, n)], mask=rng.random(n) < 0.1),
                  "z": pa.nulls(n, pa.int64())})
    t = t.append_column("g", pa.array(np.where(np.asarray(t["k"].fill_null(0)) == 7, None, 1.0)))  # a group of nulls
    aggs = dict(ui=("i", "n_unique"), uf=("f", "n_unique"), us=("s", "n_unique"), ug=("g", "n_unique"),
                mx=("i", "max"), n=(None, "size"))
    got = gpujoin.group_by(t, "k", device="cuda", algorithm=algorithm).agg(**aggs, uz=("z", "n_unique"))
    assert_tables_equal(got, gpujoin.group_by(t, "k", device="cpu").agg(**aggs, uz=("z", "n_unique")))
    kept = t.filter(t["k"].is_valid()).drop_columns(["z"])  # device keys have no nulls
    for by in ("k", ["k", "k2"]):
        want = gpujoin.group_by(kept, by, device="cpu").agg(**aggs)
        got = gpujoin.group_by(DeviceTable.from_arrow(kept), by, algorithm=algorithm).agg(**aggs).to_arrow()
        assert_tables_equal(got, want)
    # a hand-built dictionary that holds "a" twice: codes 0 and 2 are one string
    d = DeviceTable({"k": cp.asarray([1, 1, 1, 2]), "s": cp.asarray([0, 2, 1, 2], cp.int32)},
                    types={"s": pa.string()}, dictionaries={"s": pa.array(["a", "b", "a"])})
    got = gpujoin.group_by(d, "k", algorithm=algorithm).agg(u=("s", "n_unique")).to_arrow()
    assert sorted(zip(got["k"].to_pylist(), got["u"].to_pylist())) == [(1, 2), (2, 1)]


@pytest.mark.parametrize("algorithm", list(ALGORITHMS) + ["auto"])
def test_device_keys_with_nulls_form_one_null_group(algorithm):
    """DeviceTable keys with validity masks (one key, composite keys, a string key): the null rows
    of a key form one group whose key is null, as the CPU engine (and SQL, Polars) group them;
    device keys with nulls were refused before."""
    rng = np.random.default_rng(12)
    n = 30_000
    t = pa.table({"k": pa.array(rng.integers(-5, 400, n), mask=rng.random(n) < 0.07),
                  "k2": pa.array(rng.integers(0, 4, n).astype(np.int32), mask=rng.random(n) < 0.03),
                  "s": pa.array([f"w{x}" for x in rng.integers(0, 30, n)], mask=rng.random(n) < 0.05),
                  "v": pa.array(rng.integers(-9, 9, n), mask=rng.random(n) < 0.1)})
    aggs = dict(n=(None, "size"), sv=("v", "sum"), mx=("v", "max"), u=("v", "n_unique"), c=("v", "count"))
    dt = DeviceTable.from_arrow(t)
    for by in ("k", ["k", "k2"], "s", ["s", "k2"]):
        got = gpujoin.group_by(dt, by, algorithm=algorithm).agg(**aggs).to_arrow()
        assert_tables_equal(got, gpujoin.group_by(t, by, device="cpu").agg(**aggs))


def test_n_unique_out_of_core_matches_cpu_engine():
    """n_unique of host tables grouped out of core (a partition at a time, under a 2 MB budget):
    strings, floats and integers with nulls, beside the other aggregates (it was refused before)."""
    rng = np.random.default_rng(8)
    n = 200_000
    t = pa.table({"k": np.arange(n) % 1000, "v": pa.array(rng.integers(0, 50, n), mask=rng.random(n) < 0.1),
                  "f": rng.choice([0.0, -0.0, np.nan, 1.5, 2.5], n),
                  "s": pa.array([f"w{x}" for x in rng.integers(0, 30, n)], mask=rng.random(n) < 0.1)})
    aggs = dict(u=("v", "n_unique"), uf=("f", "n_unique"), us=("s", "n_unique"), m=("v", "max"))
    g = gpujoin.group_by(t, "k", device="cuda", memory_limit="2MB")
    got = g.agg(**aggs)
    assert g.stats.params["placement"] == "out-of-core"
    assert_tables_equal(got, gpujoin.group_by(t, "k", device="cpu").agg(**aggs))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_group_by_larger_than_memory_raises_memory_error(algorithm, monkeypatch):
    import gpujoin.cuda.runtime as rt

    monkeypatch.setattr(rt, "free_bytes", lambda: 1 << 16)
    # only the patched free memory counts: rt.fits takes what CuPy's pool holds free first, and
    # that is not 0 after free_all_blocks where an earlier test's live array shares a chunk
    # (test_join_larger_than_memory_raises_memory_error's note; pgb-tr on one xdist worker)
    monkeypatch.setattr(rt, "fits", lambda need: need <= rt.free_bytes())
    t = {"k": cp.arange(1 << 20, dtype=cp.int32), "v": cp.ones(1 << 20, cp.int32)}
    with pytest.raises(MemoryError, match="GiB"):
        gpujoin.group_by(t, "k", algorithm=algorithm).agg(m=("v", "max"))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_2e27_group_by_checksums(algorithm):
    n, g = 1 << 27, 1 << 22
    rng = cp.random.default_rng(5)
    keys = rng.integers(0, g, n, dtype=cp.int32)
    vals = rng.integers(0, 1 << 30, n, dtype=cp.int32)
    out = gpujoin.group_by({"k": keys, "v": vals}, "k", algorithm=algorithm).agg(s=("v", "sum"), n=(None, "size"))
    assert out.num_rows == int(cp.unique(keys).size)
    assert int(out["n"].sum()) == n
    assert int(out["s"].sum()) == int(vals.astype(cp.int64).sum())


# ---------------------------------------------------------------- planning on the GPU (issue 5)


def test_auto_chooses_by_the_statistics_on_the_gpu():
    rng = cp.random.default_rng(9)
    n = 1 << 20
    for g, expected in ((1 << 6, "hgb"), (1 << 18, "pgb-tr")):
        t = {"k": rng.integers(0, g, n, dtype=cp.int32), "v": rng.integers(0, 100, n, dtype=cp.int32)}
        gb = gpujoin.group_by(t, "k")
        out = gb.agg(m=("v", "max"))
        assert gb.stats.algorithm == expected and "auto" in gb.stats.params
        assert out.num_rows == int(cp.unique(t["k"]).size)
    # hot groups among many: HGB, the hot ones in shared memory (issue 17)
    t = {"k": cp.where(rng.random(n) < 0.5, 7, rng.integers(0, 1 << 18, n)).astype(cp.int32),
         "v": rng.integers(0, 100, n, dtype=cp.int32)}
    gb = gpujoin.group_by(t, "k")
    out = gb.agg(m=("v", "max"))
    assert gb.stats.algorithm == "hgb" and gb.stats.params["hot_groups"] >= 1
    assert out.num_rows == int(cp.unique(t["k"]).size)
    r = {"k": cp.arange(n, dtype=cp.int32), "a": cp.ones(n, cp.int32), "b": cp.ones(n, cp.int32)}
    misses = -1 - cp.arange(n, dtype=cp.int32)  # distinct, so the probe side is not skewed
    s = {"k": cp.where(rng.random(n) < 0.04, rng.integers(0, n, n, dtype=cp.int32), misses).astype(cp.int32),
         "c": cp.ones(n, cp.int32), "d": cp.ones(n, cp.int32)}
    _, st = gpujoin.plan.join.execute_join(s, r, "k")
    assert st.algorithm == "phj-ur" and "crossover" in st.params["auto"]  # match ratio ~4% < 9%
    # issue 17: heavy build keys go to SMJ-TR; a few groups are counted from the sample alone
    from gpujoin.plan.auto import resolve_gpu_join

    heavy = cp.where(rng.random(n) < 0.5, 7, cp.arange(n)).astype(cp.int32)
    choice = resolve_gpu_join(heavy, cp.arange(n, dtype=cp.int32), [], [])
    assert choice.algorithm == "smj-tr" and choice.estimate.heavy_build
    # uniform many-to-many keys, 8 build rows a key: too few repeats for the 4,096-key sample, seen
    # in the match ratio's 2^18-key build sample; with two payloads (the match ratio is measured)
    # and with one (the build sample alone, no match ratio); 8-byte keys: PHJ-TR, not measured
    big = 1 << 21
    shuffle = cp.random.RandomState(9).permutation
    many = cp.repeat(cp.arange(big // 8, dtype=cp.int32), 8)[shuffle(big)]
    for pay in ([cp.ones(big, cp.int32)] * 2, [cp.ones(big, cp.int32)]):
        choice = resolve_gpu_join(many, rng.integers(0, big // 8, big, dtype=cp.int32), pay, pay)
        assert choice.algorithm == "smj-tr" and 7 < choice.estimate.build_multiplicity < 9, choice.reason
        assert (choice.estimate.match_ratio is None) == (len(pay) == 1)
        choice = resolve_gpu_join(shuffle(big).astype(cp.int32), rng.integers(0, big, big, dtype=cp.int32), pay, pay)
        assert choice.algorithm != "smj-tr" and choice.estimate.build_multiplicity < 1.1
    choice = resolve_gpu_join(many.astype(cp.int64), rng.integers(0, big // 8, big, dtype=cp.int64), pay, pay)
    assert choice.algorithm == "phj-tr" and choice.estimate.build_multiplicity is None
    t = {"k": rng.integers(0, 16, n, dtype=cp.int32), "v": rng.integers(0, 100, n, dtype=cp.int32)}
    plan = gpujoin.explain(gpujoin.group_by, t, "k", aggs={"m": ("v", "max")}, run=True)
    assert plan.choice == "hgb" and "every group seen twice" in str(plan) and plan.result.num_rows == 16


@pytest.mark.parametrize("dtype", [cp.int32, cp.int64])
def test_planner_counts_groups_with_hgbs_own_table(dtype):
    # issue 17 item 3: where a sample cannot tell, the group count comes from HGB's stage 1,
    # stopped once it holds more groups than the rules compare with; HGB then reuses that table
    from gpujoin.cuda.groupby.hgb import HashTable
    from gpujoin.plan.auto import resolve_gpu_group_by

    rng = cp.random.default_rng(17)
    low = np.iinfo(dtype).min
    keys = rng.integers(0, 3000, 1 << 20).astype(dtype)
    keys[::7] = low  # the sentinel key is a group of its own, outside the table
    want = int(cp.unique(keys).size)
    table = HashTable.at_most(keys, want)
    assert table is not None and table.num_groups == want and table.sentinel_gid >= 0
    assert HashTable.at_most(keys, want - 2) is None  # want - 1 keys in the table: one too many
    assert HashTable.at_most(keys[:0], 10).num_groups == 0
    # skew: hot keys nearly everywhere, 6,000 rare ones spread through the stream; every thread
    # stops soon after the cap is passed, not at its own first new key (which most never meet)
    skewed = rng.integers(0, 8, 1 << 22).astype(dtype)
    skewed[cp.asarray(np.random.default_rng(1).permutation(skewed.size)[:6000])] = cp.arange(100, 6100, dtype=dtype)
    assert HashTable.at_most(skewed, 5000) is None and HashTable.at_most(skewed, 6007) is None
    assert HashTable.at_most(skewed, 6008).num_groups == 6008
    inputs = [AggInput(cp.ones(keys.size, cp.int32), None, ("sum",))]
    choice = resolve_gpu_group_by(keys, inputs)
    assert choice.algorithm == "hgb" and choice.table is not None and choice.estimate.groups == want
    assert choice.estimate.method == "hash table (exact)"
    out = run("hgb", keys, inputs, table=choice.table)
    np.testing.assert_array_equal(np.sort(cp.asnumpy(out.keys)), cp.asnumpy(cp.unique(keys)))
    assert int(out.columns[0]["sum"].sum()) == keys.size
    few = rng.integers(-3, 13, 1 << 18).astype(dtype)  # a sample shows every group: HGB sizes its own table
    choice = resolve_gpu_group_by(few, inputs)
    assert choice.algorithm == "hgb" and choice.table is None and choice.estimate.groups == 16
    assert choice.estimate.method == "sample (every group seen twice)"
    out = run("hgb", few, inputs, groups_estimate=16)
    np.testing.assert_array_equal(np.sort(cp.asnumpy(out.keys)), np.arange(-3, 13))
    many = rng.integers(0, 1 << 22, 1 << 22).astype(dtype)
    choice = resolve_gpu_group_by(many, inputs)
    assert choice.algorithm == "pgb-tr" and choice.table is None and choice.estimate.groups_for("pgb-tr") is None
    assert choice.estimate.method.startswith("more than")


def _drawn(keys: np.ndarray, draws: int) -> np.ndarray:
    """sample_counts' random rows of ``keys``: mix64(i + 0x9E3779B97F4A7C15), times the rows, high word."""
    M = (1 << 64) - 1
    out = []
    for i in range(draws):
        h = (i + 0x9E3779B97F4A7C15) & M
        h ^= h >> 33
        h = (h * 0xFF51AFD7ED558CCD) & M
        h ^= h >> 33
        h = (h * 0xC4CEB9FE1A85EC53) & M
        h ^= h >> 33
        out.append((h * keys.size) >> 64)
    return keys[np.array(out, np.int64)]


@pytest.mark.parametrize("dtype", [cp.int32, cp.int64])
def test_planner_draws_random_rows_whatever_the_order(dtype):
    # issue 17 item 3: rows drawn at random tell more groups than fit shared memory without
    # HGB's capped build (its launches and sync had cost PGB-TR 10% at 2^24 rows), sorted keys
    # too (a strided sample of those sees a new key at every step); where they cannot tell, the
    # capped build counts
    from gpujoin.cuda import primitives as prim
    from gpujoin.cuda.groupby.common import slot_bytes
    from gpujoin.plan import stats
    from gpujoin.plan.auto import resolve_gpu_group_by, shared_groups
    from gpujoin.plan.calibrate import device_model

    n, draws = 1 << 21, stats.GROUP_DRAWS
    inputs = [AggInput(cp.ones(n, cp.int32), None, ("sum",))]
    cap = shared_groups(slot_bytes(inputs), device_model())
    for groups, more in ((cap // 3, False), (cap - 8, False), (4 * cap, True)):
        keys = (cp.arange(n, dtype=cp.int64) * groups // n).astype(dtype)  # sorted, equal counts
        keys[0] = np.iinfo(dtype).min  # the sentinel key counts as a key
        got = prim.key_samples([keys], 4096, draws=draws)
        assert got.sizes == (4096, draws)
        assert (got.summaries[0] == prim.key_samples([keys], 4096).summaries[0]).all()
        d = stats._summary(got.summaries[1], draws)
        assert d == stats.Sample.of_counts(np.unique(_drawn(cp.asnumpy(keys), draws), return_counts=True)[1])
        assert stats.more_groups_than(d, cap) == more, (groups, d)
        choice = resolve_gpu_group_by(keys, inputs)
        if more:
            assert choice.algorithm == "pgb-tr" and choice.table is None and "random rows" in choice.estimate.method
        else:
            assert choice.algorithm == "hgb" and choice.estimate.groups == groups + 1
            assert choice.estimate.method == "hash table (exact)"
    # hot keys over a tail of rare ones: a strided sample sees the hot ones only, twice each;
    # the random rows see some of the tail, so the groups are counted, not taken from the sample
    hot = cp.random.default_rng(2).integers(0, 16, n).astype(dtype)
    off_stride = np.flatnonzero(np.arange(n) % (n // 4096))  # rows the strided sample skips
    tail = np.random.default_rng(2).choice(off_stride, n // 64, replace=False)
    hot[cp.asarray(tail)] = cp.arange(100, 100 + n // 64, dtype=dtype)
    assert stats.sample(hot).groups == 16
    choice = resolve_gpu_group_by(hot, inputs)
    assert choice.estimate.groups > cap and "random rows" not in choice.estimate.method, choice.estimate
    with pytest.raises(ValueError, match="random draws"):
        prim.key_samples([keys, keys], 4096, draws=8)


def test_explain_on_the_gpu_predicts_and_measures():
    rng = cp.random.default_rng(3)
    t = {"k": rng.integers(0, 1000, 1 << 20, dtype=cp.int32), "v": rng.integers(0, 9, 1 << 20, dtype=cp.int32)}
    plan = gpujoin.explain(gpujoin.group_by, t, "k", aggs={"m": ("v", "max")}, run=True)
    assert plan.device == "cuda" and plan.choice == "hgb" and len(plan.predicted) == 6
    assert plan.measured_s > 0 and plan.result.num_rows == 1000
    assert "hyperloglog" in str(plan)
    jplan = gpujoin.explain(gpujoin.join, t, {"k": cp.arange(1000, dtype=cp.int32)}, on="k", run=True)
    assert jplan.choice == "phj-tr" and jplan.result.num_rows == 1 << 20
