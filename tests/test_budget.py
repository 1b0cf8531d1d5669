"""Memory budgets and placement (CPU: no GPU needed)."""

import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pytest

import gpujoin
from gpujoin.outofcore.budget import check_host, parse_bytes, resolve_memory_limit
from gpujoin.plan.placement import cached_chunks, plan_placement


@pytest.mark.parametrize("text, want", [("16GB", 16 * 10**9), ("16 GiB", 16 * 2**30), ("512MiB", 512 * 2**20),
                                        ("1.5e9", 1_500_000_000), ("100", 100), ("2kb", 2000), (4096, 4096),
                                        (1.5e9, 1_500_000_000), ("0", 0), ("3 TB", 3 * 10**12)])
def test_parse_bytes(text, want):
    assert parse_bytes(text) == want


@pytest.mark.parametrize("bad", ["16 GX", "lots", "-1GB", "", "GB"])
def test_parse_bytes_rejects(bad):
    with pytest.raises(ValueError, match="memory_limit"):
        parse_bytes(bad)
    with pytest.raises(TypeError):
        parse_bytes([1])


def test_memory_limit_from_the_environment(monkeypatch):
    monkeypatch.delenv("GPUJOIN_MEMORY_LIMIT", raising=False)
    assert resolve_memory_limit(None) is None
    monkeypatch.setenv("GPUJOIN_MEMORY_LIMIT", "8GB")
    assert resolve_memory_limit(None) == 8 * 10**9
    assert resolve_memory_limit("1GiB") == 2**30  # the argument wins
    monkeypatch.setenv("GPUJOIN_MEMORY_LIMIT", "eight")
    with pytest.raises(ValueError, match="GPUJOIN_MEMORY_LIMIT"):
        resolve_memory_limit(None)


def test_bad_memory_limit_fails_before_work():
    t = {"k": np.arange(3)}
    with pytest.raises(ValueError, match="memory_limit"):
        gpujoin.join(t, t, "k", device="cpu", memory_limit="16 bananas")
    with pytest.raises(ValueError, match="memory_limit"):
        gpujoin.group_by(t, "k", device="cpu", memory_limit="x")


def test_host_check_names_the_bytes(monkeypatch):
    monkeypatch.setenv("GPUJOIN_HOST_MEMORY", "1GB")
    with pytest.raises(MemoryError, match=r"needs about 1\.86 GiB of host memory but 0\.93 GiB"):
        check_host(2 * 10**9, "the result", "ask for less")
    check_host(10**8, "the result", "ask for less")


def test_placement_in_core_when_it_fits():
    p = plan_placement([2**20, 2**20], [16, 16], 16 * 10**9)
    assert p.placement == "in-core" and p.bits == 0 and p.cache_bytes == p.input_bytes and p.spill_bytes == 0


def test_placement_out_of_core_follows_the_half_budget_rule():
    # paper 004's benchmark at 2^30 a side under 16 GB: two partition pairs and their join in half
    p = plan_placement([2**30, 2**30], [16, 16], 16 * 10**9)
    assert p.placement == "out-of-core"
    pair = p.input_bytes >> p.bits
    assert pair * 6 <= 8 * 10**9 < pair * 2 * 6
    assert 0 < p.cache_bytes <= 8 * 10**9 and p.spill_bytes == p.input_bytes - p.cache_bytes
    assert p.chunk_rows * 16 * 5 <= 8 * 10**9
    forced = plan_placement([1000, 1000], [16, 16], 16 * 10**9, force_out_of_core=True)
    assert forced.placement == "out-of-core" and forced.bits >= 1


def test_placement_overrides_and_too_small_budget():
    p = plan_placement([2**24, 2**24], [16, 16], 2**30, bits=7, cache_bytes=0, chunk_rows=5000)
    assert (p.bits, p.cache_bytes, p.chunk_rows, p.spill_bytes) == (7, 0, 5000, p.input_bytes)
    with pytest.raises(MemoryError, match="raise memory_limit"):
        plan_placement([10, 10], [16, 16], 1000, force_out_of_core=True)
    with pytest.raises(MemoryError, match="raise memory_limit"):
        plan_placement([100, 10], [16, 16], 500_000, gpus=2)
    # rows that fit in core are placed there under any budget: the streaming path's working set
    # bounds only what must be partitioned (a 2-row group-by of 93-byte rows under 4 MB raised)
    p = plan_placement([2], [93], 4 * 10**6)
    assert (p.placement, p.bits) == ("in-core", 0)
    with pytest.raises(MemoryError, match="raise memory_limit"):
        plan_placement([10**5], [93], 4 * 10**6)


@pytest.mark.parametrize("frac", [0.0, 0.25, 0.5, 0.77, 1.0])
def test_cached_chunks_interleave_in_proportion(frac):
    n = 40
    sizes = [100] * n
    got = cached_chunks(n, sizes, int(frac * 100 * n))
    assert sum(got) == int(frac * n)
    if 0 < frac < 1:  # spread out: no run of cached chunks longer than the ratio asks
        runs = max(len(r) for r in "".join("c" if g else "." for g in got).split(".") if r) if any(got) else 0
        assert runs <= int(np.ceil(frac / (1 - frac))) + 1
    assert sum(s for s, g in zip(sizes, got) if g) <= frac * 100 * n


def test_record_batch_streams_and_datasets_are_inputs(tmp_path):
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    t = pa.table({"k": np.arange(10), "v": np.arange(10) * 2})
    r = pa.table({"k": np.arange(0, 20, 2)})
    want = gpujoin.join(t, r, "k", device="cpu")
    pq.write_table(t, tmp_path / "t.parquet", row_group_size=3)
    for src in (iter(t.to_batches(max_chunksize=3)), t.to_batches(max_chunksize=4),
                pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=3)),
                ds.dataset(tmp_path / "t.parquet"), pq.ParquetFile(tmp_path / "t.parquet").iter_batches(batch_size=2)):
        got = gpujoin.join(src, r, "k", device="cpu")
        assert got.sort_by("k").equals(want.sort_by("k"))
    with pytest.raises(TypeError, match="RecordBatch"):
        gpujoin.join(iter([1, 2]), r, "k", device="cpu")


def test_columnar_gpu_path_eligibility():
    import pyarrow as pa

    from gpujoin.plan.host_join import eligible

    lt = pa.table({"k": pa.array([1, 2], pa.int32()), "a": [1.0, 2.0], "d": pa.array([1, 2], pa.date32())})
    rt = pa.table({"k": pa.array([1, 3], pa.int64()), "b": pa.array([5, 6], pa.uint16())})
    assert eligible(lt, rt, ["k"], ["k"], "inner", "m:m", "_right", True)
    assert eligible(lt, rt, ["k"], ["k"], "full", "m:m", "_right", False)
    assert not eligible(lt, rt, ["k"], ["k"], "inner", "1:1", "_right", True)  # validate: general path
    assert not eligible(lt.append_column("s", pa.array(["x", "y"])), rt, ["k"], ["k"], "inner", "m:m", "_r", True)
    assert not eligible(lt, rt.set_column(1, "b", pa.array([None, 1])), ["k"], ["k"], "left", "m:m", "_r", True)
    assert eligible(lt, rt.set_column(1, "b", pa.array([None, 1])), ["k"], ["k"], "semi", "m:m", "_r", True)
    assert not eligible(lt.set_column(0, "k", pa.array([None, 1], pa.int32())), rt, ["k"], ["k"], "inner", "m:m",
                        "_r", True)
    assert not eligible(lt.set_column(0, "k", pa.array(["a", "b"])), rt, ["k"], ["k"], "inner", "m:m", "_r", True)


def test_cpu_gather_keeps_uint64_exact():
    """The CPU engine's multi-threaded gather (tables of 2^16 rows or more) once rounded uint64
    values past 2^53 through float64; found by the GPU columnar path's test."""
    import pyarrow as pa

    n = 70_000
    u = np.random.default_rng(1).integers(2**63, 2**64 - 1, n, dtype=np.uint64)
    left = pa.table({"k": np.arange(n), "u": u})
    right = pa.table({"k": np.arange(0, 2 * n, 2), "w": np.arange(n)})
    out = gpujoin.join(left, right, "k", how="left", device="cpu").sort_by("k")
    assert np.array_equal(np.asarray(out["u"]), u)


def test_placement_predicts_the_streaming_path_from_its_bytes():
    """paper 004's transfer model with this host's rates: 2^30 x 2^30 16-byte tuples under 16 GB
    (measured on an H200: pass 1 1.19-1.37 s, pass 2 0.54 s in SUM mode)."""
    from gpujoin.plan.placement import HOST_IN_BPS, PCIE_BPS, plan_placement

    n = 1 << 30
    pl = plan_placement([n, n], [16, 16], 16 * 10**9)
    sum_mode = pl.predict()
    assert sum_mode["pass1"] == pytest.approx(pl.input_bytes / min(PCIE_BPS, HOST_IN_BPS))
    assert 1.0 < sum_mode["pass1"] < 1.4 and 0.4 < sum_mode["pass2"] < 0.8
    table = pl.predict(output_bytes=24 * n)
    assert table["pass1"] == sum_mode["pass1"] and table["pass2"] > sum_mode["pass2"] + 1.0
    in_core = plan_placement([1 << 20] * 2, [16, 16], 16 * 10**9)
    assert in_core.spill_bytes == 0 and in_core.predict()["pass2"] < 1e-3


def test_placement_pass2_bound_by_the_hosts_turns_on_four_gpus():
    """Pass 2's pairs take host time that no GPU count divides: four H200s, 2^31 x 2^31 int32
    tuples under 16 GB a GPU, 32 pairs (measured 0.064 s at 91539d6, its transfers 0.047 s); one GPU stays
    transfer bound (0.49 s), and the transfer-only time leaves the host term out."""
    from gpujoin.plan.placement import HOST_PAIR_S, plan_placement

    n = 1 << 31
    rates = {"pcie": 55.4e9, "host_in": float("inf"), "pcie_all": 168.9e9, "p2p": 395e9}
    one = plan_placement([n, n], [8, 8], 16 << 30, force_out_of_core=True)
    four = plan_placement([n, n], [8, 8], 16 << 30, force_out_of_core=True, gpus=4)
    assert four.bits == 5 and four.predict(0, rates)["pass2"] == pytest.approx(32 * HOST_PAIR_S)
    assert 0.064 * 0.9 < four.predict(0, rates)["pass2"] < 0.064 * 1.1
    assert four.predict(0, {**rates, "gpu_join": float("inf")})["pass2"] < 0.06
    assert 32 * HOST_PAIR_S < 0.49 * 0.9 < one.predict(0, rates)["pass2"] < 0.49 * 1.25


def test_placement_pass1_bound_by_both_directions_of_the_links():
    """Page-locked input (no staging copy) with a spill: pass 1 sends the spill out while the
    input comes in, bounded by the links' measured two-way rate; two H100s at 2^31 x 2^31 int32
    tuples under 16 GB a GPU (transfer-only pass 1: 0.87 s on one, 0.48 s on two)."""
    from gpujoin.plan.placement import plan_placement

    n = 1 << 31
    rates = {"pcie": 52.6e9, "host_in": float("inf"), "duplex_1": 70e9, "duplex_all": 112e9}
    one = plan_placement([n, n], [8, 8], 16 << 30, force_out_of_core=True)
    two = plan_placement([n, n], [8, 8], 16 << 30, force_out_of_core=True, gpus=2)
    p1, p2 = one.predict(0, rates)["pass1"], two.predict(0, rates)["pass1"]
    assert p1 == pytest.approx((one.input_bytes + one.spill_bytes) / 70e9)
    assert p2 == pytest.approx((two.input_bytes + two.spill_bytes) / 112e9)
    assert 0.87 * 0.9 < p1 < 0.87 * 1.1 and 0.48 * 0.8 < p2 < 0.48 * 1.1
    plain = {k: v for k, v in rates.items() if not k.startswith("duplex")}  # not measured: one way only
    assert one.predict(0, plain)["pass1"] == pytest.approx(one.input_bytes / 52.6e9)


def test_joins_whose_output_host_memory_cannot_hold_raise_first(monkeypatch):
    """A cross join, and a many-to-many join of all-equal keys, of 3,000 x 3,000 rows (9M output
    rows) under a 1 MB host: MemoryError naming the rows, before anything of that size exists."""
    t = gpujoin.Table({"k": np.zeros(3000, np.int64), "v": np.arange(3000)}).to_arrow()
    monkeypatch.setenv("GPUJOIN_HOST_MEMORY", "1MB")
    with pytest.raises(MemoryError, match="9,000,000 rows"):
        gpujoin.join(t, t, how="cross", device="cpu")
    with pytest.raises(MemoryError, match="9,000,000 output rows"):
        gpujoin.join(t, t, on="k", device="cpu")
    monkeypatch.setenv("GPUJOIN_HOST_MEMORY", "100GB")
    assert gpujoin.join(t.slice(0, 30), t.slice(0, 30), on="k", device="cpu").num_rows == 900


@pytest.mark.parametrize("algorithm", ["phj", "merge"])
def test_a_join_whose_columns_host_memory_cannot_hold_fails_before_its_maps(monkeypatch, algorithm):
    """9M output rows whose gather maps fit a 300 MB host but whose 14 int64 columns do not: the
    match's own check counts the columns, so the error comes before the maps are allocated and
    filled (the maps alone had passed, and the output's check failed only after the match); with
    a sink the output is built and handed over a batch at a time, and the join runs."""
    t = pa.table({"k": np.zeros(3000, np.int64), **{f"v{i}": np.arange(3000) for i in range(6)}})
    monkeypatch.setenv("GPUJOIN_HOST_MEMORY", "300MB")
    with pytest.raises(MemoryError, match="9,000,000 output rows .their gather maps and columns"):
        gpujoin.join(t, t, on="k", device="cpu", algorithm=algorithm)
    # a semi join's output is the left rows only: no pairs, no columns of the right side
    assert gpujoin.join(t, t, on="k", how="semi", device="cpu", algorithm=algorithm).num_rows == 3000
    # with a sink, the output is built a batch at a time: the maps and one batch fit, so it runs
    seen = {"rows": 0, "v0": 0, "batches": 0}

    def sink(b):
        seen["rows"] += b.num_rows
        seen["v0"] += int(pa.compute.sum(b.column("v0")).as_py())
        seen["batches"] += 1
    out = gpujoin.join(t, t, on="k", device="cpu", algorithm=algorithm, sink=sink)
    assert out.num_rows == 0 and out.column_names[:2] == ["k", "v0"]
    assert seen["rows"] == 9_000_000 and seen["v0"] == 3000 * (2999 * 3000 // 2) and seen["batches"] >= 9
    with pytest.raises(MemoryError, match="pass sink="):  # (the remedy named)
        gpujoin.join(t, t, how="cross", device="cpu")
    seen.update(rows=0, v0=0)
    gpujoin.join(t, t, how="cross", device="cpu", sink=sink)
    assert seen["rows"] == 9_000_000 and seen["v0"] == 3000 * (2999 * 3000 // 2)


class _FakePool:
    def __init__(self):
        self.limit, self.freed, self.held, self.used = 0, 0, 0, 0

    def get_limit(self):
        return self.limit

    def set_limit(self, size):
        self.limit = size

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.held

    def free_all_blocks(self):
        self.freed += 1


def _fake_cupy(monkeypatch, pool):
    import types

    from fake_cupy import FakeDevice

    class OutOfMemoryError(Exception):
        pass

    cuda = types.SimpleNamespace(Device=FakeDevice, memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
    fake = types.SimpleNamespace(get_default_memory_pool=lambda: pool, cuda=cuda)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


def test_gpu_memory_cap_nests_and_sums_workers_sharing_a_gpu(monkeypatch):
    """Workers of a multi-GPU join that share one GPU are each owed their budget: the pool is
    held to the sum while they overlap; a nested cap replaces the outer one in its thread; the
    pool's own limit comes back when the last holder leaves, whatever the order; an allocation
    past the cap is a MemoryError naming memory_limit."""
    import threading

    import gpujoin.outofcore.budget as budget
    from gpujoin.outofcore.budget import gpu_memory_cap

    monkeypatch.setattr(budget, "_releasers", [])  # (none registered by other tests: nvCOMP's)
    pool = _FakePool()
    pool.limit = 7
    cp = _fake_cupy(monkeypatch, pool)
    with gpu_memory_cap(100):
        assert pool.limit == 100
        with gpu_memory_cap(40):  # nested, same thread: replaces
            assert pool.limit == 40
        assert pool.limit == 100
        inside, leave = threading.Event(), threading.Event()

        def worker():
            with gpu_memory_cap(50):
                inside.set()
                leave.wait()

        t = threading.Thread(target=worker)
        t.start()
        inside.wait()
        assert pool.limit == 150  # two holders on GPU 0
    assert pool.limit == 50  # the first left before the second
    leave.set()
    t.join()
    assert pool.limit == 7 and pool.freed == 0  # cached blocks within the cap stay for reuse
    pool.held = 120
    with gpu_memory_cap(100):  # a pool holding more than the cap is trimmed
        assert pool.freed == 1
    # pieces a cache keeps (nvCOMP's codecs) let go whenever pieces are in use: any may pin a chunk
    released = []
    budget.on_memory_cap(lambda: released.append(pool.held) or True)
    pool.used = 1
    with gpu_memory_cap(100):
        assert pool.freed == 3 and released == [120]
    pool.held = 100  # exactly the cap, a piece in use: it may pin a whole chunk (seen: 512 B, 2 MiB)
    with gpu_memory_cap(100):
        assert pool.freed == 4 and released == [120, 100]
    pool.held = 50  # (a 2 MiB chunk pinned under a 4 MiB cap halved its room)
    with gpu_memory_cap(100):
        assert pool.freed == 5 and released == [120, 100, 50]
    pool.held, pool.used = 90, 0  # nothing in use: nothing pinned
    with gpu_memory_cap(100):
        assert pool.freed == 5 and released == [120, 100, 50]
    with pytest.raises(MemoryError, match="memory_limit=100"):
        with gpu_memory_cap(100):
            raise cp.cuda.memory.OutOfMemoryError("out of memory")
    assert pool.limit == 7



def test_pinned_host_checks_its_arrays_before_any_gpu_work():
    """gpujoin.pinned_host: a strided view or a non-array is refused by name; on a machine
    without a usable GPU, a clear RuntimeError (nothing is registered)."""
    a = np.arange(10, dtype=np.int64)
    with pytest.raises(ValueError, match="argument 1 .* not C-contiguous"):
        with gpujoin.pinned_host(a, a[::2]):
            pass
    with pytest.raises(ValueError, match="argument 0 is a list"):
        with gpujoin.pinned_host([1, 2]):
            pass
    if not gpujoin.backend.cuda_available():
        with pytest.raises(RuntimeError, match="no usable GPU"):
            with gpujoin.pinned_host(a):
                pass


def test_page_ranges_cover_whole_pages_once():
    """pinned_host registers whole pages, each once: spans sharing or touching a page merge."""
    from gpujoin.outofcore.stream import page_ranges

    assert page_ranges([(4096 + 10, 100), (4096 + 200, 50)], 4096) == [(4096, 8192)]  # one page, two arrays
    assert page_ranges([(0, 4096), (4096, 1)], 4096) == [(0, 8192)]  # touching
    assert page_ranges([(3 * 4096, 5000), (0, 10), (20000, 0)], 4096) == [(0, 4096), (12288, 20480)]


def test_streams_are_reused_by_the_next_pipeline_of_the_gpu(monkeypatch):
    """A finished pipeline's CUDA streams serve the next one on the same GPU, each in its role
    (CuPy's pool caches freed blocks per stream); never while the first is alive."""
    import gc
    import types

    made = []

    class Stream:
        def __init__(self, non_blocking=False):
            assert non_blocking
            made.append(self)

    class Device:
        current = 0

        def __init__(self, i=None):
            self.id = Device.current if i is None else i

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(Stream=Stream,
                                                                                            Device=Device)))
    from gpujoin.outofcore import stream

    monkeypatch.setattr(stream, "_idle_streams", {})
    a = stream.Streams(3)
    first = (a.copy_in, a.compute, a.copy_out)
    b = stream.Streams(3)  # a is alive: fresh streams
    assert not set(map(id, first)) & {id(b.copy_in), id(b.compute), id(b.copy_out)}
    del a
    gc.collect()
    c = stream.Streams(3)
    assert (c.copy_in, c.compute, c.copy_out) == first and len(made) == 6
    Device.current = 1  # another GPU: its own streams
    d = stream.Streams(1)
    assert d.compute is d.copy_in and len(made) == 7


def test_phase_timer_records_events_and_waits_only_when_read(monkeypatch):
    """A PhaseTimer records an event at its making and at each mark, without synchronizing, and
    waits only for the last mark's event when its phases are read (each phase the events'
    elapsed time); inside runtime.untimed_phases (the streaming joins' pass 2) it records
    nothing and has no phases."""
    import types

    from gpujoin.cuda import runtime

    events, waited = [], []

    class Event:
        def __init__(self):
            self.ms = 10.0 * len(events)
            events.append(self)

        def synchronize(self):
            waited.append(self)

    stream = types.SimpleNamespace(record=Event, synchronize=lambda: waited.append("stream"))
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: stream,
                                                            get_elapsed_time=lambda a, b: b.ms - a.ms))
    monkeypatch.setattr(runtime, "_cupy", lambda: fake)
    with runtime.untimed_phases():
        t = runtime.PhaseTimer()
        t.mark("transform")
        assert t.phases == {} and events == [] and waited == []
    t = runtime.PhaseTimer()
    t.mark("transform")
    t.mark("match")
    assert len(events) == 3 and waited == []
    assert t.phases == {"transform": 0.01, "match": 0.01} and waited == [events[2]]
    t.mark("match")
    assert t.phases == {"transform": 0.01, "match": 0.02} and waited == [events[2], events[3]]


def test_keepalive_waits_for_the_oldest_past_its_bound():
    """Keepalive(max_held): past the bound the host waits for the oldest batch's event, so the
    device memory that in-flight downloads hold stays bounded; done batches are dropped."""
    from gpujoin.outofcore.stream import Keepalive

    class Event:
        def __init__(self):
            self.done, self.waited = False, False

        def synchronize(self):
            self.waited = self.done = True

    k = Keepalive(max_held=2)
    evs = [Event() for _ in range(4)]
    for e in evs[:2]:
        k.hold(e, ["a"])
    assert not any(e.waited for e in evs)
    k.hold(evs[2], ["b"])
    assert evs[0].waited and not evs[1].waited and len(k._held) == 2
    evs[1].done = True
    k.release_done()
    k.hold(evs[3], ["c"])
    assert [e for e, _ in k._held] == [evs[2], evs[3]] and not evs[2].waited
    unbounded = Keepalive()
    for _ in range(10):
        unbounded.hold(Event(), [])
    assert len(unbounded._held) == 10
