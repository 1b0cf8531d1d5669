"""Out-of-core joins and group-bys on the GPU (paper 004's Triton join, the out-of-core
group-by) against the CPU engine, with a tiny ``memory_limit`` and small chunks so that every
path runs: spill, cache, interleaving, skewed partitions over their share, every join type.
Marker ``gpu``."""

import gc
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import gpujoin
from gpujoin.plan.join import execute_join
from gpujoin.testing import assert_tables_equal

from strategies import join_pair, join_tables, pk_fk_arrays

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")
if not gpujoin.backend.cuda_available():
    pytest.skip("no usable GPU", allow_module_level=True)

HOWS = ["inner", "left", "right", "full", "semi", "anti"]


@pytest.fixture(autouse=True)
def one_gpu(monkeypatch):
    """The Triton join on one GPU, also on a machine of several (where a join past one GPU's
    budget would go to the hybrid join: tests/test_multi_gpu.py)."""
    import gpujoin.plan.streaming as streaming
    from gpujoin.dist.devices import resolve_gpus

    monkeypatch.setattr(streaming, "choose_gpus", lambda gpus, single, algorithm: resolve_gpus(gpus))
#: Small enough that tables of some 10^5 rows partition, spill and split.
TINY = "4MiB"


def _tables(case: str, n: int = 120_000, seed: int = 3):
    return join_tables(case, n, seed)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("case", ["uniform", "zipf", "extremes"])
def test_triton_join_matches_cpu_engine(how, case):
    left, right = _tables(case)
    want = gpujoin.join(left, right, "k", how=how, device="cpu")
    got, stats = execute_join(left, right, "k", how=how, device="cuda", memory_limit=TINY)
    assert stats.params["placement"] == "out-of-core" and stats.params["pass1_bits"] >= 1
    assert_tables_equal(got, want)


@pytest.mark.parametrize("how", HOWS)
def test_triton_join_heavy_partition_is_split(how):
    rng = np.random.default_rng(11)
    # key 7: 30,000 build rows, alone more than a partition pair's share of a 2 MiB budget; 100
    # probe rows of it make 3,000,000 pairs
    lk = np.concatenate([np.full(30_000, 7), rng.integers(100, 200_000, 60_000)])
    rk = np.concatenate([np.full(100, 7), rng.integers(100, 200_000, 100_000)])
    left, right = pa.table({"k": lk, "a": np.arange(lk.size)}), pa.table({"k": rk, "b": np.arange(rk.size)})
    want = gpujoin.join(left, right, "k", how=how, device="cpu")
    got, stats = execute_join(left, right, "k", how=how, device="cuda", memory_limit="2MiB")
    assert stats.params["placement"] == "out-of-core" and stats.params["split_partitions"] >= 1
    assert_tables_equal(got, want)


@pytest.mark.parametrize("how", ["inner", "full"])
@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("algorithm", ["auto", "phj-tr"])
def test_output_past_the_budget_goes_out_of_core(how, nulls, algorithm):
    """Inputs far inside the budget whose many-to-many output is not (1,000 x 700 rows of one
    key: 700,000 pairs under 2 MiB): the in-core join's MemoryError had reached the user (found
    by scripts/fuzz_device.py); the join runs again out of core, where blocks split until their
    output fits.  Null keys take the gather-map path, none the columnar one."""
    rng = np.random.default_rng(2)
    lk = pa.array(np.full(1_000, 7), mask=rng.random(1_000) < 0.05 if nulls else None)
    left = pa.table({"k": lk, "a": np.arange(1_000)})
    right = pa.table({"k": np.concatenate([np.full(700, 7), np.arange(100, 400)]), "b": np.arange(1_000)})
    want = gpujoin.join(left, right, "k", how=how, device="cpu")
    got, stats = execute_join(left, right, "k", how=how, device="cuda", algorithm=algorithm, memory_limit="2MiB")
    if nulls:  # (the columnar path's in-core join is already the Triton join's one block, split the same way)
        assert stats.params["placement"] == "out-of-core" and stats.params["in_core_output_did_not_fit"]
    assert_tables_equal(got, want)


@pytest.mark.parametrize("inner", ["phj-tr", "phj-ur", "smj-tr", "nphj"])
def test_out_of_core_runs_the_chosen_in_core_join_per_partition(inner):
    left, right = _tables("uniform", 50_000)
    want = gpujoin.join(left, right, "k", how="left", device="cpu")
    got, stats = execute_join(left, right, "k", how="left", device="cuda", algorithm=inner, memory_limit=TINY)
    assert stats.params["placement"] == "out-of-core"
    assert_tables_equal(got, want)


@settings(max_examples=25, deadline=None)
@given(pair=join_pair(max_rows=300), how=st.sampled_from(HOWS), nulls_equal=st.booleans())
def test_triton_join_random_tables(pair, how, nulls_equal):
    left, right = pair
    want = gpujoin.join(left, right, "k", how=how, nulls_equal=nulls_equal, device="cpu")
    got = gpujoin.join(left, right, "k", how=how, nulls_equal=nulls_equal, device="cuda", algorithm="triton",
                       memory_limit="2MiB")
    assert_tables_equal(got, want)


@pytest.mark.parametrize("streams", [1, 3])
@pytest.mark.parametrize("cache", [0, 1 << 20, None])
def test_triton_core_sum_and_columns(streams, cache):
    """The array-level Triton join: the SUM of paper 004, materialized columns, both stream
    settings, the cache from none to all."""
    from gpujoin.outofcore.triton import triton_join
    from gpujoin.plan.placement import plan_placement

    n = 200_000
    rk, rp, sk, sp = pk_fk_arrays(n)
    pl = plan_placement([n, n], [16, 16], 8 << 20, cache_bytes=cache, force_out_of_core=True)
    res = triton_join([rk, rp], [sk, sp], "inner", pl, aggregate="sum", streams=streams)
    assert res.total == int(sp.sum()) and res.rows == n
    res = triton_join([rk, rp], [sk, sp], "inner", pl, emit_keys=True, streams=streams)
    want = np.empty(n, np.int64)
    want[rk] = rp
    assert np.array_equal(np.sort(res.key), np.sort(sk))
    assert np.array_equal(res.build[0][0], want[res.key])
    assert res.stats["cache_bytes"] <= (cache if cache is not None else pl.input_bytes)


@pytest.mark.parametrize("algorithm", ["auto", "hgb", "pgb-tr"])
def test_group_by_state_past_the_budget_goes_out_of_core(algorithm):
    """Rows far inside the budget whose groups' state is not (24,000 distinct keys and eleven
    aggregates, strings among them, under 4 MB): the in-core group-by's MemoryError had reached the
    user (found by scripts/fuzz_device.py); it runs again out of core, a share of the groups in
    each partition."""
    rng = np.random.default_rng(5)
    n = 24_000
    t = pa.table({"k": rng.permutation(n) * 3 - n, "k2": pa.array(rng.integers(0, 3, n).astype(np.int32)),
                  "v": pa.array(rng.integers(-(2**40), 2**40, n), mask=rng.random(n) < 0.1),
                  "f": pa.array(rng.integers(-4000, 4000, n) / 8.0, mask=rng.random(n) < 0.1),
                  "s": pa.array([f"w{x}" for x in rng.integers(0, 50, n).tolist()], pa.string(),
                                mask=rng.random(n) < 0.1)})
    aggs = {"sv": ("v", "sum"), "cv": ("v", "count"), "n": (None, "size"), "mn": ("v", "min"), "mx": ("v", "max"),
            "av": ("v", "mean"), "sf": ("f", "sum"), "mxf": ("f", "max"), "mns": ("s", "min"), "mxs": ("s", "max"),
            "cs": ("s", "count")}
    want = gpujoin.group_by(t, ["k", "k2"], device="cpu").agg(**aggs)
    g = gpujoin.group_by(t, ["k", "k2"], device="cuda", algorithm=algorithm, memory_limit="4MB")
    got = g.agg(**aggs)
    assert g.stats.params["placement"] == "out-of-core"
    assert_tables_equal(got, want)


@pytest.mark.parametrize("case", ["uniform", "heavy", "nulls"])
def test_out_of_core_group_by_matches_cpu_engine(case):
    rng = np.random.default_rng(2)
    n = 150_000
    k = rng.integers(0, 20_000, n)
    if case == "heavy":
        k[rng.random(n) < 0.6] = 3
    v = rng.integers(-(2**40), 2**40, n)
    t = pa.table({"k": pa.array(k, mask=(rng.random(n) < 0.01) if case == "nulls" else None),
                  "v": pa.array(v, mask=rng.random(n) < 0.1),
                  "f": rng.integers(-4000, 4000, n) / 8.0,  # exact sums: the mean does not depend on order
                  "d": pa.array(rng.integers(0, 7, n), mask=rng.random(n) < 0.2)})
    # n_unique a partition at a time; the heavy key's partition in row ranges, their distinct
    # pairs merged (v: packed pairs, f: float bits sorted by comparison, d: few values)
    aggs = dict(s=("v", "sum"), c=("v", "count"), n=(None, "size"), lo=("v", "min"), hi=("f", "max"),
                m=("f", "mean"), uv=("v", "n_unique"), uf=("f", "n_unique"), ud=("d", "n_unique"))
    want = gpujoin.group_by(t, "k", device="cpu").agg(**aggs)
    g = gpujoin.group_by(t, "k", device="cuda", memory_limit="2MiB")
    got = g.agg(**aggs)
    assert g.stats.params["placement"] == "out-of-core"
    assert_tables_equal(got, want)


def test_memory_limit_caps_the_pool_and_in_core_runs_under_it():
    left, right = _tables("uniform", 10_000)
    got, stats = execute_join(left, right, "k", device="cuda", memory_limit="1GB")
    assert stats.params["placement"] == "in-core"
    assert_tables_equal(got, gpujoin.join(left, right, "k", device="cpu"))
    assert cp.get_default_memory_pool().get_limit() == 0  # restored


def test_device_tables_under_a_memory_limit_raise_memory_error():
    # an earlier test's garbage (device arrays in reference cycles) freed by a collection during
    # the join would give the capped pool room (the cap never falls below the bytes in use on
    # entry): collected first, so that only this test's arrays are in use
    gc.collect()
    cp.get_default_memory_pool().free_all_blocks()
    t = {"k": cp.arange(1 << 20, dtype=cp.int64), "v": cp.arange(1 << 20, dtype=cp.int64)}
    with pytest.raises(MemoryError, match="memory_limit"):
        gpujoin.join(t, t, "k", memory_limit="2MiB")
    with pytest.raises(ValueError, match="host-resident"):
        gpujoin.join(t, t, "k", algorithm="triton")


def _typed_tables(n=60_000, seed=9):
    rng = np.random.default_rng(seed)
    left = pa.table({"k": pa.array(rng.integers(0, n, n), pa.int32()),
                     "a": pa.array(rng.random(n)), "d": pa.array(rng.integers(0, 20000, n).astype(np.int32), pa.date32()),
                     "u": pa.array(rng.integers(0, 2**64 - 1, n, dtype=np.uint64))})
    right = pa.table({"k": pa.array(rng.integers(0, n, n // 2), pa.int64()),
                      "b": pa.array(rng.integers(-128, 127, n // 2), pa.int8()),
                      "t": pa.array(rng.integers(0, 10**15, n // 2), pa.timestamp("us")),
                      "a": pa.array(rng.random(n // 2), pa.float32())})
    return left, right


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("limit", [None, TINY])
def test_columnar_path_matches_cpu_engine(how, limit):
    """Integer keys, fixed-width columns: the columns stream through the GPU (in core, and out of
    core under a tiny budget); every output type and the coalesced key as Polars lays them out."""
    left, right = _typed_tables()
    want = gpujoin.join(left, right, "k", how=how, device="cpu")
    got, stats = execute_join(left, right, "k", how=how, device="cuda", memory_limit=limit)
    assert stats.params["placement"] == ("in-core" if limit is None else "out-of-core")
    assert "triton" in stats.algorithm if limit else "triton" not in stats.algorithm
    assert got.schema == want.schema
    assert_tables_equal(got, want)


def test_columnar_path_reads_record_batch_streams_and_uint64_keys():
    rng = np.random.default_rng(4)
    k = rng.integers(2**63, 2**64 - 1, 30_000, dtype=np.uint64)
    left = pa.table({"k": pa.array(k), "v": np.arange(k.size)})
    right = pa.table({"k": pa.array(rng.choice(k, 50_000)), "w": rng.random(50_000)})
    want = gpujoin.join(left, right, "k", how="full", coalesce=True, device="cpu")
    got = gpujoin.join(iter(left.to_batches(max_chunksize=7_000)), right, "k", how="full", coalesce=True,
                       device="cuda", memory_limit=TINY)
    assert_tables_equal(got, want)


def test_explain_shows_the_placement():
    left, right = _typed_tables()  # past what TINY holds in core
    plan = gpujoin.explain(gpujoin.join, left, right, on="k", device="cuda", memory_limit=TINY, run=True)
    text = str(plan)
    assert "placement" in text and "out-of-core" in text and "spill_bytes" in text


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("limit", [None, TINY])
def test_columnar_path_streams_output_blocks_to_a_sink(how, limit):
    """sink=: each block goes out as a record batch as it leaves the GPU (out of core: one or more
    per partition pair) and the join returns only the schema; the batches are the join."""
    left, right = _typed_tables()
    want = gpujoin.join(left, right, "k", how=how, device="cpu")
    batches = []
    empty, stats = execute_join(left, right, "k", how=how, device="cuda", memory_limit=limit, sink=batches.append)
    assert empty.num_rows == 0 and empty.schema == want.schema
    assert stats.output_rows == want.num_rows
    if limit is not None and how not in ("semi", "anti"):
        assert len(batches) > 1
    assert_tables_equal(pa.Table.from_batches(batches, schema=want.schema), want)


def test_out_of_core_join_reports_its_passes():
    from gpujoin import progress

    class Recorder:
        def __init__(self):
            self.tasks = []

        def add_task(self, description, total=None):
            self.tasks.append([description, total, 0])
            return len(self.tasks) - 1

        def advance(self, i, n):
            self.tasks[i][2] += n

        def update(self, i, total=None, completed=None):
            self.tasks[i][1:] = [total, completed]

    left, right = _typed_tables()
    rec = Recorder()
    with progress.reporting(rec):
        gpujoin.join(left, right, "k", device="cuda", memory_limit=TINY)
    names = [t[0] for t in rec.tasks]
    assert names == ["pass 1: partition build side", "pass 1: partition probe side", "pass 2: join partition pairs"]
    assert all(t[1] == t[2] for t in rec.tasks)


@pytest.mark.parametrize("hashing", ["perfect", "linear"])
def test_streamed_npj_baselines_sum_the_matches(hashing):
    """Paper 004's NPJ baselines: R's table in GPU memory, S streamed in small chunks."""
    from gpujoin.outofcore.npj import streamed_npj

    rng = np.random.default_rng(5)
    n = 100_000
    rk, rp = rng.permutation(n).astype(np.int64), rng.integers(0, 1000, n)
    sk, sp = rng.integers(-10, n + 10, 3 * n), rng.integers(-50, 50, 3 * n)
    hit = (sk >= 0) & (sk < n)
    m, total, phases = streamed_npj([rk, rp], [sk, sp], hashing, 1 << 30, chunk_rows=30_000)
    assert (m, total) == (int(hit.sum()), int(sp[hit].sum()))
    with pytest.raises(MemoryError, match="budget"):
        streamed_npj([rk, rp], [sk, sp], hashing, 1 << 16, chunk_rows=30_000)
    if hashing == "perfect":
        for bad in (np.zeros(4, np.int64), np.array([0, 1, 2, 9])):  # duplicates; a key past |R|
            with pytest.raises(ValueError, match="permutation"):
                streamed_npj([bad, rp[:4]], [sk, sp], hashing, 1 << 30)


@pytest.mark.parametrize("typ", [pa.int8(), pa.uint16(), pa.int32(), pa.uint32(), pa.int64(), pa.date32(),
                                 pa.uint64(), pa.string()])
@pytest.mark.parametrize("limit", [None, "2MiB"])
def test_group_by_key_types_with_and_without_first_rows(typ, limit):
    """Keys whose codes are their values come back from the codes (no row numbers carried); the
    others (uint64, strings) from each group's first row: both as the CPU engine's."""
    rng = np.random.default_rng(8)
    n = 60_000
    raw = rng.integers(0, 100, n)
    k = pa.array(raw.astype(str)) if typ == pa.string() else \
        pa.array(raw.astype(np.int32)).view(pa.date32()) if typ == pa.date32() else pa.array(raw).cast(typ)
    t = pa.table({"k": k, "v": rng.integers(-99, 99, n)})
    aggs = dict(s=("v", "sum"), n=(None, "size"))
    want = gpujoin.group_by(t, "k", device="cpu").agg(**aggs)
    g = gpujoin.group_by(t, "k", device="cuda", memory_limit=limit)
    got = g.agg(**aggs)
    same = typ not in (pa.uint64(), pa.string())
    assert g.stats.params["key_from"] == ("codes" if same else "first rows")
    assert got.schema == want.schema
    assert_tables_equal(got, want)


@pytest.mark.parametrize("api", ["driver", "runtime", "one at a time"])
def test_copy_batch_moves_host_and_device_pieces_in_stream_order(api, monkeypatch):
    """stream.copy_batch: pieces from page-locked host memory and from device memory land at
    their destinations, after the stream's earlier work (a fill of the target); batched (the
    driver's cuMemcpyBatchAsync through ctypes, or cuda-bindings' cudaMemcpyBatchAsync) and one
    copy at a time alike, from lists and from int64 arrays."""
    from gpujoin.outofcore import stream as st_mod

    monkeypatch.setitem(st_mod._batch, "api", None if api != "one at a time" else False)
    if api == "runtime":
        monkeypatch.setattr(st_mod, "_driver_batch", lambda: None)
    if api != "one at a time" and (not st_mod._batch_api() or st_mod._batch_api()[0] != api):
        pytest.skip(f"no batched copy through the {api} API here")
    rng = np.random.default_rng(1)
    host = st_mod.pinned_empty(3000, np.int64)
    host[:] = rng.integers(0, 1 << 40, 3000)
    dev = cp.asarray(rng.integers(0, 1 << 40, 2000))
    out = cp.empty(5000, cp.int64)
    s = cp.cuda.Stream(non_blocking=True)
    pieces = [(0, host.ctypes.data, 1000), (1000, dev.data.ptr + 8 * 500, 1500), (2500, host.ctypes.data + 8000, 2000),
              (4500, dev.data.ptr, 500)]
    args = ([out.data.ptr + 8 * a for a, _, _ in pieces], [src for _, src, _ in pieces], [8 * n for _, _, n in pieces])
    want = np.concatenate([host[:1000], cp.asnumpy(dev[500:2000]), host[1000:3000], cp.asnumpy(dev[:500])])
    for form in (list, lambda a: np.array(a, np.int64)):
        with s:
            out.fill(-1)
        st_mod.copy_batch(*map(form, args), s)
        s.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(out), want)
    assert (st_mod._batch["api"] is False) == (api == "one at a time")  # no failure fell back
