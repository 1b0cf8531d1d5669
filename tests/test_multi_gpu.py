"""Paper 000's multi-GPU joins on one host against the CPU engine: the hybrid join (``gpus=``)
and the nested-loop ring of ``join_where``.  On a machine of one GPU the workers share it
(device ids [0, 0]: every thread, peer copy and merge still runs); on two, each has its own.
Tiny ``memory_limit`` budgets and small chunks make every spill, split pair and ring round run.
Marker ``gpu``."""

import os

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

GPUS = cp.cuda.runtime.getDeviceCount()
#: GPUJOIN_TEST_GPUS workers (two unless set: the device's 4-GPU stage sets 4), one a GPU while
#: the machine has enough, else round the GPUs it has (GPU 0 twice on one GPU).
WORKERS = [i % GPUS for i in range(int(os.environ.get("GPUJOIN_TEST_GPUS", "2")))]
#: The array-level tests' budget a GPU: 16 MiB over the workers, so that their caches spill.
BUDGET = (16 << 20) // len(WORKERS)
HOWS = ["inner", "left", "right", "full", "semi", "anti"]
two_gpus = pytest.mark.skipif(GPUS < 2, reason="needs two GPUs")


def _tables(case: str, n: int = 100_000, seed: int = 3):
    if case != "heavy":
        return join_tables(case, n, seed)
    rng = np.random.default_rng(seed)  # one key of 30,000 build rows: a pair past any GPU's share, split
    lk = np.concatenate([np.full(30_000, 7), rng.integers(100, 200_000, 60_000)])
    rk = np.concatenate([np.full(100, 7), rng.integers(100, 200_000, n)])
    return (pa.table({"k": pa.array(lk, pa.int64()), "lv": pa.array(rng.integers(-9, 9, len(lk)), pa.int32())}),
            pa.table({"k": pa.array(rk, pa.int64()), "rv": pa.array(rng.random(len(rk)))}))


@pytest.fixture
def on_workers(monkeypatch):
    """gpujoin.join's planner sends every streaming join to WORKERS."""
    import gpujoin.plan.streaming as streaming

    monkeypatch.setattr(streaming, "choose_gpus", lambda gpus, single, algorithm: WORKERS)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("case", ["uniform", "zipf", "heavy", "extremes"])
def test_hybrid_join_matches_cpu_engine(on_workers, how, case):
    left, right = _tables(case)
    want = gpujoin.join(left, right, "k", how=how, device="cpu")
    got, stats = execute_join(left, right, "k", how=how, device="cuda", memory_limit="4MiB")
    assert stats.algorithm.startswith("hybrid") and len(stats.params["per_gpu"]) == len(WORKERS)
    assert stats.params["pass1_bits"] >= 4  # at least 8 partitions a GPU
    if case == "heavy":
        assert stats.params["split_partitions"] >= 1
    assert_tables_equal(got, want)


@settings(max_examples=20, deadline=None)
@given(pair=join_pair(max_rows=300), how=st.sampled_from(HOWS), nulls_equal=st.booleans())
def test_hybrid_join_random_tables(pair, how, nulls_equal):
    """Exact rows under hypothesis: nulls, duplicates, extremes, empty and one-row sides, on two
    workers with a budget small enough to partition (hypothesis runs without the fixture)."""
    import gpujoin.plan.streaming as streaming

    left, right = pair
    want = gpujoin.join(left, right, "k", how=how, nulls_equal=nulls_equal, device="cpu")
    real = streaming.choose_gpus
    streaming.choose_gpus = lambda gpus, single, algorithm: WORKERS
    try:
        got = gpujoin.join(left, right, "k", how=how, nulls_equal=nulls_equal, device="cuda", algorithm="hybrid",
                           memory_limit="2MiB")
    finally:
        streaming.choose_gpus = real
    assert_tables_equal(got, want)


@pytest.mark.parametrize("how", ["inner", "full", "anti"])
def test_hybrid_join_gather_map_path(on_workers, how):
    """Keys the columnar path does not take (strings, nulls) go through the gather maps."""
    rng = np.random.default_rng(8)
    n = 40_000
    lk = pa.array([f"k{v}" for v in rng.integers(0, n, n)], mask=rng.random(n) < 0.02)
    rk = pa.array([f"k{v}" for v in rng.integers(0, n, n)])
    left, right = pa.table({"k": lk, "a": np.arange(n)}), pa.table({"k": rk, "b": np.arange(n)})
    want = gpujoin.join(left, right, "k", how=how, device="cpu")
    got, stats = execute_join(left, right, "k", how=how, device="cuda", memory_limit="4MiB")
    assert "per_gpu" in stats.params
    assert_tables_equal(got, want)


@pytest.mark.parametrize("streams", [1, 3])
@pytest.mark.parametrize("algorithm", ["phj-tr", "smj-tr"])
def test_hybrid_core_sum_columns_and_balance(streams, algorithm):
    """The array-level hybrid join: SUM and materialized columns, the pairs shared out once each,
    peer reads of the other GPU's cache, spill."""
    from gpujoin.dist.hybrid import hybrid_join
    from gpujoin.plan.placement import plan_placement

    n = 300_000
    rk, rp, sk, sp = pk_fk_arrays(n)
    pl = plan_placement([n, n], [16, 16], BUDGET, gpus=len(WORKERS), chunk_rows=20_000)
    assert pl.spill_bytes > 0
    res = hybrid_join([rk, rp], [sk, sp], "inner", pl, WORKERS, aggregate="sum", streams=streams, algorithm=algorithm)
    assert res.total == int(sp.sum()) and res.rows == n
    each = res.stats["per_gpu"]  # the pairs, taken from one queue: every one once
    assert sum(g["partitions"] for g in each) == 1 << pl.bits
    assert sum(g["pair_bytes"] for g in each) == 32 * n
    assert res.stats["spill_bytes"] > 0
    assert (res.stats["p2p_bytes"] > 0) == (GPUS >= 2)  # the other worker's cache: a peer read only on another GPU
    res = hybrid_join([rk, rp], [sk, sp], "inner", pl, WORKERS, emit_keys=True, streams=streams, algorithm=algorithm)
    want = np.empty(n, np.int64)
    want[rk] = rp
    assert np.array_equal(np.sort(res.key), np.sort(sk))
    assert np.array_equal(res.build[0][0], want[res.key])


def test_transfer_only_moves_the_same_bytes_and_joins_nothing():
    """Paper 000's transfer-only mode (Fig. 8): the hybrid join on two workers, the Triton join
    on one GPU (with a skewed pair joined in blocks) and the ring each move exactly the bytes of
    their real run over PCIe and return no rows."""
    from gpujoin.dist.hybrid import hybrid_join
    from gpujoin.dist.nested_loop import ring_join
    from gpujoin.outofcore.triton import triton_join
    from gpujoin.plan.placement import plan_placement

    n = 300_000
    rk, rp, sk, sp = pk_fk_arrays(n)
    keys = ("h2d_bytes", "d2h_bytes", "spill_bytes", "cache_bytes", "p2p_bytes", "split_partitions")
    pl = plan_placement([n, n], [16, 16], BUDGET, gpus=len(WORKERS), chunk_rows=20_000)
    real = hybrid_join([rk, rp], [sk, sp], "inner", pl, WORKERS, aggregate="sum")
    moved = hybrid_join([rk, rp], [sk, sp], "inner", pl, WORKERS, aggregate="sum", transfer_only=True)
    assert real.rows == n and moved.rows == 0 and not moved.total
    # (which GPU takes a pair, and so which of its pieces cross a peer link, is whoever asks first)
    assert {k: moved.stats[k] for k in keys if k != "p2p_bytes"} == \
        {k: real.stats[k] for k in keys if k != "p2p_bytes"}
    sk_heavy = np.where(np.arange(n) % 2 == 0, 7, sk)  # half of S on one key: a pair past the budget
    pl = plan_placement([n, n], [16, 16], 8 << 20, force_out_of_core=True)
    real = triton_join([rk, rp], [sk_heavy, sp], "inner", pl, aggregate="sum")
    moved = triton_join([rk, rp], [sk_heavy, sp], "inner", pl, aggregate="sum", transfer_only=True)
    assert real.stats["split_partitions"] > 0 and real.rows == n and moved.rows == 0
    assert {k: moved.stats[k] for k in keys if k != "p2p_bytes"} == \
        {k: real.stats[k] for k in keys if k != "p2p_bytes"}
    a = np.random.default_rng(1).integers(0, 5_000, 3_000)
    lo = np.random.default_rng(2).integers(0, 5_000, 2_500)
    args = ([a, a], [lo, lo + 50], [">=", "<="], None, WORKERS)
    pairs, st = ring_join(*args, r_chunk_rows=700, s_chunk_rows=450)
    none, st2 = ring_join(*args, r_chunk_rows=700, s_chunk_rows=450, transfer_only=True)
    with pairs:
        li, ri = pairs.arrays()
    assert li.size == ri.size == len(set(zip(li.tolist(), ri.tolist()))) > 0 and len(none) == 0
    assert (a[li] >= lo[ri]).all() and (a[li] <= lo[ri] + 50).all()
    assert (st2["h2d_bytes"], st2["p2p_bytes"], st2["rounds"]) == (st["h2d_bytes"], st["p2p_bytes"], st["rounds"])


def test_pinned_input_is_read_in_place():
    """Columns page-locked in place (``pinned_host``) reach the GPUs with no staging copy: the
    same SUM and rows as pageable input, every pass-1 byte DMA'd straight from them, and the
    memory unregistered after the block (also when the block raises)."""
    from gpujoin.dist.hybrid import hybrid_join
    from gpujoin.outofcore.stream import is_pinned, pinned_host
    from gpujoin.outofcore.triton import triton_join
    from gpujoin.plan.placement import plan_placement

    n = 300_000
    rk, rp, sk, sp = pk_fk_arrays(n)
    pl = plan_placement([n, n], [16, 16], BUDGET, gpus=len(WORKERS), chunk_rows=20_000)
    paged = hybrid_join([rk, rp], [sk, sp], "inner", pl, WORKERS, aggregate="sum")
    assert paged.stats["pass1_direct_bytes"] == 0
    with pinned_host(rk, rp, sk, sp):
        assert all(is_pinned(a) for a in (rk, rp, sk, sp))
        res = hybrid_join([rk, rp], [sk, sp], "inner", pl, WORKERS, aggregate="sum")
        one = triton_join([rk, rp], [sk, sp], "inner", plan_placement([n, n], [16, 16], 8 << 20,
                          force_out_of_core=True, chunk_rows=20_000), emit_keys=True)
    assert not any(is_pinned(a) for a in (rk, rp, sk, sp))
    assert (res.total, res.rows) == (paged.total, paged.rows) == (int(sp.sum()), n)
    assert res.stats["pass1_direct_bytes"] == sum(a.nbytes for a in (rk, rp, sk, sp))
    assert np.array_equal(np.sort(one.key), np.sort(sk))
    assert res.stats["predicted_phases"]["pass1"] <= paged.stats["predicted_phases"]["pass1"]  # no staging term
    left = gpujoin.Table({"k": rk, "v": rp})  # NumPy-backed: the join reads these very buffers
    right = gpujoin.Table({"k": sk, "w": sp})
    want, _ = execute_join(left, right, "k", device="cuda", memory_limit="8MiB")
    with gpujoin.pinned_host(rk, rp, sk, sp):
        got, stats = execute_join(left, right, "k", device="cuda", memory_limit="8MiB")
    assert stats.params["placement"] == "out-of-core" and stats.params["pass1_direct_bytes"] > 0
    assert_tables_equal(got, want)
    rows = np.zeros((2, 100), np.int64)  # two arrays on one page: registered once, as one range
    with pinned_host(rows[0], rows[1]):
        assert is_pinned(rows[0]) and is_pinned(rows[1])
    assert not is_pinned(rows[1])
    with pytest.raises(RuntimeError), pinned_host(rk):
        raise RuntimeError("inside")
    assert not is_pinned(rk)
    with pytest.raises(ValueError, match="C-contiguous"), pinned_host(rk[::2]):
        pass


def test_measure_links_has_every_rate_the_placement_model_reads():
    """The link probe's keys (small buffers): each GPU's one-way rate, the staging copy alone and
    beside the DMA, both directions at once, and the peer link where there are two GPUs."""
    from gpujoin.plan.calibrate import measure_links

    gpus = list(range(min(GPUS, 2)))
    links = measure_links(gpus, nbytes=8 << 20, reps=2)
    keys = ["h2d_gpu0_GBps", "h2d_all_GBps", "host_in_1_GBps", "host_in_dma_1_GBps", "host_in_dma_all_GBps",
            "duplex_1_GBps", "duplex_all_GBps"] + (["p2p_GBps", "p2p_bidirectional_GBps"] if GPUS >= 2 else [])
    assert all(links[k] > 0 for k in keys), links


def test_hybrid_join_streams_blocks_to_a_sink(on_workers):
    left, right = _tables("uniform")
    want = gpujoin.join(left, right, "k", how="left", device="cpu")
    batches = []
    empty = gpujoin.join(left, right, "k", how="left", device="cuda", memory_limit="4MiB", sink=batches.append)
    assert empty.num_rows == 0
    assert_tables_equal(pa.Table.from_batches(batches, schema=want.schema), want)


def test_hybrid_join_error_in_one_worker_stops_all(on_workers, monkeypatch):
    """A worker that fails in pass 1 releases the others from the barrier; the error is raised."""
    from gpujoin.outofcore import triton

    calls = []
    real = triton.TritonJoin.pass1

    def failing(self, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise MemoryError("planted")
        return real(self, *a, **k)

    monkeypatch.setattr(triton.TritonJoin, "pass1", failing)
    left, right = _tables("uniform", 20_000)
    with pytest.raises(MemoryError, match="planted"):
        gpujoin.join(left, right, "k", device="cuda", memory_limit="4MiB")


@two_gpus
def test_gpus_argument_uses_two_gpus():
    left, right = _tables("uniform")
    want = gpujoin.join(left, right, "k", how="full", device="cpu")
    got, stats = execute_join(left, right, "k", how="full", device="cuda", gpus=2, memory_limit="64MiB")
    assert stats.params["gpus"] == [0, 1] and stats.algorithm.startswith("hybrid")
    assert_tables_equal(got, want)
    got, stats = execute_join(left, right, "k", how="full", device="cuda", gpus=[1])
    assert "gpus" not in stats.params
    assert_tables_equal(got, want)


def test_gpus_argument_errors():
    left, right = _tables("uniform", 100)
    with pytest.raises(ValueError, match="more GPUs than this host has"):
        gpujoin.join(left, right, "k", device="cuda", gpus=GPUS + 1)
    with pytest.raises(ValueError, match="twice"):
        gpujoin.join(left, right, "k", device="cuda", gpus=[0, 0])
    with pytest.raises(ValueError, match="device='cpu'"):
        gpujoin.join(left, right, "k", device="cpu", gpus=1)


def _theta_tables(n_l=3_000, n_r=2_500, seed=6):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 10_000, n_l)
    start = rng.integers(0, 10_000, n_r)
    left = pa.table({"t": pa.array(t, mask=rng.random(n_l) < 0.01), "x": rng.random(n_l),
                     "g": rng.integers(0, 5, n_l)})
    right = pa.table({"start": start, "end": start + rng.integers(0, 300, n_r), "g": rng.integers(0, 5, n_r)})
    return left, right


PREDICATES = {
    "band": lambda c: [c("t") >= c("start"), c("t") <= c("end")],
    "band_ne": lambda c: [c("t") >= c("start"), c("t") < c("end"), c("g") != c("g_right")],
    "nlj": lambda c: [c("g") != c("g_right"), c("t") < c("start")],
}


@pytest.mark.parametrize("case", sorted(PREDICATES))
@pytest.mark.parametrize("chunks", [None, (700, 450)])
@pytest.mark.parametrize("streams", [1, 3])
def test_ring_join_where_matches_cpu_engine(monkeypatch, case, chunks, streams):
    """The ring over two workers: one R chunk and one S chunk each, or R in 5 chunks (groups of
    2 and a last of 1) and S in 6 (stages of 2), so every ring round runs; then with the pairs
    in page-locked segments of 97 (many segments, a table chunk each)."""
    import gpujoin.dist.nested_loop as nested_loop
    import gpujoin.plan.join_where as jw
    from gpujoin.outofcore.stream import PairColumns

    if chunks:
        monkeypatch.setattr(PairColumns, "SEGMENT_PAIRS", 97)

    real = nested_loop.ring_join
    r_rows, s_rows = chunks or (None, None)
    monkeypatch.setattr(nested_loop, "ring_join", lambda *a, **k: real(
        *a, **{**k, "r_chunk_rows": r_rows, "s_chunk_rows": s_rows, "streams": streams}))
    monkeypatch.setattr(jw, "_ring_gpus", lambda gpus, dev, algo, pairs: WORKERS)
    left, right = _theta_tables()
    preds = PREDICATES[case](gpujoin.col)
    want = gpujoin.join_where(left, right, *preds, device="cpu")
    got, stats = jw.execute_join_where(left, right, *preds, device="cuda", memory_limit="64MiB")
    assert stats.algorithm.startswith("ring")
    if chunks:
        assert stats.params["r_chunks"] == 5 and stats.params["s_chunks"] == 6 and stats.params["p2p_bytes"] > 0
    assert_tables_equal(got, want)


@pytest.mark.parametrize("gpus", [1, pytest.param(2, marks=two_gpus),
                                  pytest.param(4, marks=pytest.mark.skipif(GPUS < 4, reason="needs four GPUs"))])
def test_ring_through_the_gpus_argument(gpus):
    left, right = _theta_tables(20_000, 20_000)
    c = gpujoin.col
    preds = [c("t") >= c("start"), c("t") <= c("end")]
    want = gpujoin.join_where(left, right, *preds, device="cpu")
    got, stats = gpujoin.plan.join_where.execute_join_where(left, right, *preds, device="cuda", gpus=gpus)
    assert stats.params["gpus"] == list(range(gpus)) and stats.params["rounds"] == gpus
    assert (stats.params["p2p_bytes"] > 0) == (gpus > 1)
    assert_tables_equal(got, want)
    got = gpujoin.join_where(left.slice(0, 0), right, *preds, device="cuda", gpus=gpus)
    assert got.num_rows == 0 and got.schema == want.schema


def _brute_band(rk, sk, w):
    """(R row, S row) of every pair with |r - s| <= w, sorted (NumPy, by searching sorted R)."""
    from gpujoin.dist.gsm import _band_bounds

    order = np.argsort(rk, kind="stable")
    srt = rk[order]
    lo_v, hi_v = _band_bounds(np, sk, w)
    lo = np.searchsorted(srt, lo_v, side="left")
    hi = np.searchsorted(srt, hi_v, side="right")
    s_rows = np.repeat(np.arange(sk.size), hi - lo)
    r_rows = order[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])] if s_rows.size else s_rows
    return np.array(sorted(zip(r_rows.tolist(), s_rows.tolist())))


@pytest.mark.parametrize("case", ["uniform", "zipf", "dupes", "extremes"])
@pytest.mark.parametrize("band", [0, 3])
def test_gsm_join_matches_brute_force(case, band):
    """Sorted runs of 1,000 rows (so 5 and 4 merge rounds), pieces of at most a few KiB (heavy
    keys halved), on two workers; each pair exactly once, with the keys of R; the sorted copies
    page-locked (the default here) or pageable (the SUM), the input left as it was."""
    from gpujoin.dist.gsm import gsm_join

    rng = np.random.default_rng(13)
    n_r, n_s = 23_000, 17_000
    if case == "uniform":
        rk, sk = rng.integers(0, 40_000, n_r), rng.integers(0, 40_000, n_s)
    elif case == "zipf":
        rk, sk = rng.integers(0, 5_000, n_r), rng.zipf(1.5, n_s) % 5_000
    elif case == "dupes":  # one key held by 5,000 R rows and 300 S rows: 1.5M pairs of one key
        rk = np.concatenate([np.full(5_000, 77), rng.integers(0, 100_000, n_r - 5_000)])
        sk = np.concatenate([np.full(300, 77), rng.integers(0, 100_000, n_s - 300)])
    else:
        ext = np.array([-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1])
        rk = np.concatenate([ext, rng.integers(-(2**62), 2**62, n_r - ext.size)])
        sk = rng.choice(rk, n_s)
    rk, sk = rk.astype(np.int64), sk.astype(np.int64)
    rrow, srow = np.arange(n_r, dtype=np.int64), np.arange(n_s, dtype=np.int64)
    before = rk.copy(), sk.copy()
    res = gsm_join([rk, rrow], [sk, srow], 1 << 20, WORKERS, band=band, emit_keys=True, run_rows=1_000,
                   block_pairs=1 << 16)
    assert res.stats["build_merge_rounds"] == 5 and res.stats["probe_merge_rounds"] == 5 and res.stats["pinned"]
    assert np.array_equal(rk, before[0]) and np.array_equal(sk, before[1])
    got = np.stack([res.build[0][0], res.probe[0][0]], axis=1)
    got = got[np.lexsort((got[:, 1], got[:, 0]))]
    want = _brute_band(rk, sk, band)
    assert got.shape == want.shape and np.array_equal(got, want)
    assert np.array_equal(res.key, rk[res.build[0][0]])
    total = gsm_join([rk, rrow], [sk, srow], 1 << 20, WORKERS, band=band, aggregate="sum", run_rows=1_000, pin=False)
    assert total.rows == want.shape[0] and total.total == int(want[:, 1].sum()) and not total.stats["pinned"]
    moved = gsm_join([rk, rrow], [sk, srow], 1 << 20, WORKERS, band=band, aggregate="sum", run_rows=1_000,
                     transfer_only=True)
    assert moved.rows == 0 and moved.stats["build_runs"] == moved.stats["probe_runs"] == 32  # 23 and 17 runs up to 2^5
    assert moved.stats["h2d_bytes"] >= 16 * (n_r + n_s) * 3  # runs, at least one merge round, the join


def test_gsm_through_join(on_workers):
    left, right = _tables("zipf")
    want = gpujoin.join(left, right, "k", device="cpu")
    got, stats = execute_join(left, right, "k", device="cuda", algorithm="gsm", memory_limit="4MiB")
    assert stats.algorithm == "gsm" and stats.params["pieces"] >= 2
    assert_tables_equal(got, want)
    strings = {"k": pa.array(["a", "b", None, "b"]), "v": np.arange(4)}
    assert_tables_equal(gpujoin.join(strings, strings, "k", device="cuda", algorithm="gsm"),
                        gpujoin.join(strings, strings, "k", device="cpu"))
    with pytest.raises(ValueError, match="inner joins"):
        gpujoin.join(left, right, "k", how="left", device="cuda", algorithm="gsm")


@pytest.mark.parametrize("case", ["uniform", "heavy", "nulls", "strings"])
def test_group_by_on_two_workers_matches_cpu_engine(on_workers, case):
    """The out-of-core group-by spread over two workers: each partitions half the chunks, then
    aggregates half the partitions (a heavy key's partition in row ranges)."""
    rng = np.random.default_rng(2)
    n = 150_000
    k = rng.integers(0, 20_000, n)
    if case == "heavy":
        k[rng.random(n) < 0.6] = 3
    key = pa.array(k, mask=(rng.random(n) < 0.01) if case == "nulls" else None)
    if case == "strings":
        key = pa.array([f"g{v}" for v in k])
    t = pa.table({"k": key, "v": pa.array(rng.integers(-(2**40), 2**40, n), mask=rng.random(n) < 0.1),
                  "f": rng.integers(-4000, 4000, n) / 8.0})
    aggs = dict(s=("v", "sum"), c=("v", "count"), n=(None, "size"), lo=("v", "min"), hi=("f", "max"),
                m=("f", "mean"), uv=("v", "n_unique"), uf=("f", "n_unique"))
    want = gpujoin.group_by(t, "k", device="cpu").agg(**aggs)
    g = gpujoin.group_by(t, "k", device="cuda", memory_limit="2MiB")
    got = g.agg(**aggs)
    assert g.stats.params["placement"] == "out-of-core" and len(g.stats.params["per_gpu"]) == len(WORKERS)
    assert sum(p["rows"] for p in g.stats.params["per_gpu"]) == n
    assert_tables_equal(got, want)


@two_gpus
def test_group_by_gpus_argument():
    rng = np.random.default_rng(3)
    t = pa.table({"k": rng.integers(0, 1000, 50_000), "v": rng.integers(0, 100, 50_000)})
    want = gpujoin.group_by(t, "k", device="cpu").agg(s=("v", "sum"))
    g = gpujoin.group_by(t, "k", device="cuda", gpus=2, memory_limit="64MiB")
    assert_tables_equal(g.agg(s=("v", "sum")), want)
    assert g.stats.params["gpus"] == [0, 1]
    g = gpujoin.group_by(t, "k", device="cuda", gpus=[1])
    assert_tables_equal(g.agg(s=("v", "sum")), want)
