"""Paper 001's shuffle of tables in GPU memory, in one process: the GPU's key hashes and
destinations equal the host shuffle's, a one-rank job of DeviceTables equals ``gpujoin.join``,
and the refusals.  Jobs of several ranks over NCCL run under ``mpirun`` (tests/mpi_dist_check.py
with device cuda, the tests-dist stage of scripts/device_check.sh).  Marker ``gpu``."""

import numpy as np
import pyarrow as pa
import pytest

import gpujoin
from gpujoin.dist import Communicator, group_by, join
from gpujoin.dist.shuffle import SEED_FIRST, destinations, key_hashes, shuffle
from gpujoin.testing import assert_tables_equal

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")
if not gpujoin.backend.cuda_available():
    pytest.skip("no usable GPU", allow_module_level=True)

from gpujoin.cuda.table import DeviceTable  # noqa: E402
from gpujoin.dist import device_shuffle  # noqa: E402


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "bool"])
def test_gpu_hashes_and_destinations_equal_the_hosts(dtype):
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype) if dtype != "bool" else None
    values = rng.integers(0, 2, 5000).astype(bool) if info is None else np.concatenate(
        [rng.integers(info.min, info.max, 5000, dtype=dtype, endpoint=True), [info.min, info.max, 0]]).astype(dtype)
    other = rng.integers(-9, 9, values.size)
    for cols in ([values], [values, other]):
        host = key_hashes([pa.array(c) for c in cols], SEED_FIRST)
        gpu = device_shuffle.key_hashes([cp.asarray(c) for c in cols], SEED_FIRST)
        np.testing.assert_array_equal(cp.asnumpy(gpu), host)
        for parts in (1, 2, 3, 8):
            d = device_shuffle.destinations([cp.asarray(c) for c in cols], SEED_FIRST, parts)
            np.testing.assert_array_equal(cp.asnumpy(d), destinations(host, parts))


@pytest.mark.parametrize("parts,n,k,skew,early", [(2, 10_000, 1, False, False), (3, 50_000, 4, True, False),
                                                 (3, 50_000, 4, True, True), (7, 4096 * 5 + 17, 3, False, True),
                                                 (256, 100_000, 2, True, False), (256, 100_000, 2, True, True),
                                                 (300, 20_000, 2, False, True), (2, 0, 1, False, True),
                                                 (5, 1, 2, False, False), (5, 1, 2, False, True)])
def test_chunks_are_partitioned_by_destination_in_row_order(parts, n, k, skew, early):
    """The shuffle's partition of each chunk (shuffle.cu's one-launch scatter up to 256 ranks,
    the radix partition beyond): rows to every other rank in the chunk's send buffer at their
    send start, rows to this rank straight into the receive buffer, both in input order;
    ``early``: chunk 0 partitioned before the host knows the counts (``_Chunks.early``)."""
    rng = np.random.default_rng(n + parts)
    dest = rng.integers(0, parts, n).astype(np.int32)
    if skew:  # most rows to one rank, runs of one destination
        dest[: n // 2] = parts - 1
    cols = [rng.integers(-2**62, 2**62, n), rng.integers(0, 255, n).astype(np.uint8), rng.random(n).astype(np.float32),
            rng.integers(0, 9, n).astype(np.int16)]
    me = parts // 2
    small = parts <= 256 and n % 2 == 0  # destinations as destinations() gives them up to 256 ranks
    plan = device_shuffle._Chunks([cp.asarray(c) for c in cols], cp.asarray(dest.astype(np.uint8) if small else dest),
                                  parts, k)
    launched = plan.early() if early else 0
    assert launched == (sum(c.itemsize for c in cols) * n if early and n and parts <= 256 else 0)
    counts = cp.asnumpy(plan.counts)
    assert counts.shape == (k, parts)
    for c, (lo, hi) in enumerate(plan.bounds):
        np.testing.assert_array_equal(counts[c], np.bincount(dest[lo:hi], minlength=parts))
    assert plan.bounds[0][0] == 0 and plan.bounds[-1][1] == n
    starts = np.cumsum(counts, axis=1) - counts
    own_at = 3 + np.concatenate([[0], np.cumsum(counts[:, me])[:-1]])  # a gap before the own rows
    out = [cp.zeros(3 + int(counts[:, me].sum()), c.dtype) for c in cols]
    plan.prepare(out, list(starts), [int(x) for x in own_at], [int(x) for x in counts[:, me]], me)
    for c, (lo, hi) in enumerate(plan.bounds):
        part = plan.place(c, out)
        order = np.argsort(dest[lo:hi], kind="stable")
        peers = dest[lo:hi][order] != me
        for col, got in zip(cols, part):
            np.testing.assert_array_equal(cp.asnumpy(got)[peers], col[lo:hi][order][peers])
    cp.cuda.Device().synchronize()
    for col, o in zip(cols, out):
        np.testing.assert_array_equal(cp.asnumpy(o)[3:], col[dest == me])


@pytest.mark.parametrize("parts,buckets", [(2, 4), (3, 5), (1, 3), (2, 128)])
def test_bucket_destinations_put_equal_keys_in_one_rank_and_bucket(parts, buckets):
    """bucket_destinations: bucket-major (rank d % parts, bucket d // parts) over parts x buckets,
    every value used on spread keys, equal keys together, rows without a key on the given rank
    in bucket 0."""
    rng = np.random.default_rng(parts * buckets)
    keys = cp.asarray(np.concatenate([rng.integers(-2**62, 2**62, 50_000), np.full(1000, 7)]))
    valid = cp.asarray(rng.random(keys.size) > 0.1)
    d = cp.asnumpy(device_shuffle.bucket_destinations([keys], SEED_FIRST, parts, buckets, parts - 1, valid))
    k, v = cp.asnumpy(keys), cp.asnumpy(valid)
    assert d.dtype == (np.uint8 if parts * buckets <= 256 else np.int32) and d.max() < parts * buckets
    assert len(np.unique(d[v])) == parts * buckets
    assert (d[~v] == parts - 1).all()
    for key in (7, int(k[3])):
        assert len(set(d[(k == key) & v])) == 1


def test_concat_tables_keeps_masks_types_and_dictionaries():
    from gpujoin.cuda.table import concat_tables

    a = DeviceTable.from_arrow(pa.table({"k": [1, None, 3], "s": ["x", "y", "x"]}))
    b = DeviceTable({"k": a["k"][:0] + 0, "s": a["s"][:0]}, {}, dict(a.types), dict(a.dictionaries))
    c = DeviceTable({"k": cp.asarray([9, 8]), "s": cp.asarray([1, 0], a["s"].dtype)}, {}, dict(a.types),
                    dict(a.dictionaries))
    got = concat_tables([a, b, c]).to_arrow()
    assert got.column("k").to_pylist() == [1, None, 3, 9, 8]
    assert got.column("s").to_pylist() == ["x", "y", "x", "y", "x"]
    assert concat_tables([a]) is a
    with pytest.raises(ValueError, match="differ"):
        concat_tables([a, a.select(["k"])])
    with pytest.raises(ValueError, match="at least one"):
        concat_tables([])


def test_one_rank_job_of_device_tables_equals_the_join():
    comm = Communicator.single()
    rng = np.random.default_rng(2)
    left = pa.table({"k": rng.integers(0, 50, 600), "s": pa.array([f"v{i}" for i in rng.integers(0, 9, 600)]),
                     "a": pa.array(np.arange(600), mask=rng.random(600) < 0.2)})
    right = pa.table({"k": rng.integers(0, 60, 500), "s": pa.array([f"v{i}" for i in rng.integers(3, 12, 500)]),
                      "b": rng.random(500)})
    for how in ("inner", "left", "right", "full", "semi", "anti"):
        for on in ("k", ["k", "s"]):
            stats = {}
            for buckets in ("auto", 3):  # (one rank: the tables whole, one bucket)
                got = join(DeviceTable.from_arrow(left), DeviceTable.from_arrow(right), on, how=how, comm=comm,
                           stats=stats, buckets=buckets)
                assert isinstance(got, DeviceTable) and stats["transport"] == "nccl" and stats["buckets"] == 1
                assert_tables_equal(got.to_arrow(), gpujoin.join(left, right, on, how=how, device="cpu"))
    g = group_by(DeviceTable.from_arrow(right), "s", comm=comm).agg(n=(None, "size"), m=("k", "max"))
    assert_tables_equal(g.to_arrow(), gpujoin.group_by(right, "s", device="cpu").agg(n=(None, "size"),
                                                                                      m=("k", "max")))


def test_dictionaries_unify_into_one_shared_by_both_keys():
    comm = Communicator.single()
    a = DeviceTable.from_arrow(pa.table({"s": ["x", "y", "x"]}))
    b = DeviceTable.from_arrow(pa.table({"s": ["z", "y"]}))
    a2, b2 = device_shuffle.unify_dictionaries([a, b], [[(0, "s"), (1, "s")]], comm)
    assert a2.dictionaries["s"] is b2.dictionaries["s"]
    assert a2.to_arrow().column("s").to_pylist() == ["x", "y", "x"]
    assert b2.to_arrow().column("s").to_pylist() == ["z", "y"]


def test_refusals():
    comm = Communicator.single()
    t = DeviceTable({"k": cp.arange(3)})
    with pytest.raises(TypeError, match="GPU memory and the other on the host"):
        join(t, pa.table({"k": [1]}), "k", comm=comm)
    with pytest.raises(ValueError, match="compression"):
        shuffle(t, cp.zeros(3, cp.int32), comm, compression="zstd")
    with pytest.raises(ValueError, match="cross"):
        join(t, t, how="cross", comm=comm)


def test_without_nvcomp_cascaded_is_refused_and_auto_sends_uncompressed(monkeypatch):
    from gpujoin.dist import cascaded

    monkeypatch.setattr(cascaded, "nvcomp_missing", lambda: "nvCOMP cannot be imported (planted): pip install x")
    comm = Communicator.single()
    t = DeviceTable({"k": cp.arange(3)})
    with pytest.raises(ImportError, match=r"on rank 0: nvCOMP cannot be imported \(planted\)"):
        shuffle(t, cp.zeros(3, cp.int32), comm, compression="cascaded")
    stats = {}
    got = shuffle(t, cp.zeros(3, cp.int32), comm, compression="auto", stats=stats)
    assert "nvCOMP" in stats["compression_skipped"] and got.num_rows == 3


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_nvcomp_cascaded_round_trips_every_integer_width(dtype):
    from gpujoin.dist import cascaded

    if cascaded.nvcomp() is None:
        pytest.skip("nvCOMP not installed (the nvidia-nvcomp-cu13 wheel)")
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    arrays = [np.sort(rng.integers(info.min, info.max, 70000, dtype=dtype, endpoint=True)),  # delta
              np.repeat(rng.integers(info.min, info.max, 300, dtype=dtype, endpoint=True), 231),  # runs
              rng.integers(info.min, info.max, 5000, dtype=dtype, endpoint=True),  # spread over the range
              np.array([info.min, info.max, 0, info.max], dtype), np.full(1, info.max, dtype),
              rng.integers(0, 5, 200_000).astype(dtype)]
    for scheme in (cascaded.Scheme(0, 0, True), cascaded.Scheme(2, 1, True), cascaded.Scheme(1, 0, False),
                   cascaded.device_select(cp.asarray(arrays[1]))):
        codec = cascaded.DeviceCodec(dtype, scheme)
        buf, offsets, sizes = codec.encode([cp.asarray(a) for a in arrays])
        assert all(o % cascaded.ALIGN == 0 for o in offsets)
        assert sizes[5] < arrays[5].nbytes / 2  # 5 values in 3 bits
        blobs = [buf[o:o + n] for o, n in zip(offsets, sizes)]
        # a fresh codec decodes (the scheme travels in nvCOMP's own header), into arrays of their
        # own (aligned: in place) and into one column at each one's rows (mostly not aligned)
        outs = [cp.full(a.size, 7, dtype) for a in arrays]
        column = cp.full(1 + sum(a.size for a in arrays), 7, dtype)
        starts = np.cumsum([1] + [a.size for a in arrays])
        for places in (outs, [column[s:s + a.size] for s, a in zip(starts, arrays)]):
            cascaded.DeviceCodec(dtype, cascaded.Scheme()).decode(blobs, places)
            for a, o in zip(arrays, places):
                np.testing.assert_array_equal(cp.asnumpy(o), a)


def test_nvcomp_codecs_scratch_gives_way_to_a_memory_limit():
    """nvCOMP's cached codecs keep scratch from CuPy's pool; split from a large freed block, one
    piece kept the whole block out of every later memory_limit (26 out-of-core tests failed
    after the nvCOMP ones): a cap lets the codecs go when it needs the room."""
    from gpujoin.dist import cascaded
    from gpujoin.outofcore.budget import gpu_memory_cap

    if cascaded.nvcomp() is None:
        pytest.skip("nvCOMP not installed (the nvidia-nvcomp-cu13 wheel)")
    pool = cp.get_default_memory_pool()
    with cp.cuda.Stream():  # codecs of a stream of their own: new scratch, from this block
        pool.free_all_blocks()
        big = cp.empty(256 << 20, cp.uint8)
        del big
        codec = cascaded.DeviceCodec("int64", cascaded.Scheme(1, 0, True))
        codec.encode([cp.arange(1 << 20, dtype=cp.int64)])
        cp.cuda.get_current_stream().synchronize()
        del codec
    with gpu_memory_cap(4 << 20):
        x = cp.empty(2 << 20, cp.uint8)
        assert pool.total_bytes() <= 4 << 20
    del x


def test_nvcomp_codec_cache_lets_the_oldest_go(monkeypatch):
    """The codec cache is bounded: past CODECS_KEPT the least recently used codecs are let go
    (after the device's work), and codecs made again round-trip as before."""
    from gpujoin.dist import cascaded

    if cascaded.nvcomp() is None:
        pytest.skip("nvCOMP not installed (the nvidia-nvcomp-cu13 wheel)")
    monkeypatch.setattr(cascaded.DeviceCodec, "CODECS_KEPT", 4)
    data = cp.asarray(np.repeat(np.arange(-50, 50, dtype=np.int32), 37))
    for _ in range(2):
        for scheme in (cascaded.Scheme(0, 0, True), cascaded.Scheme(2, 1, True), cascaded.Scheme(1, 0, False)):
            buf, offsets, sizes = cascaded.DeviceCodec("int32", scheme).encode([data])
            out = cp.zeros_like(data)
            cascaded.DeviceCodec("int32", cascaded.Scheme()).decode([buf[offsets[0]:offsets[0] + sizes[0]]], [out])
            assert bool((out == data).all())
            assert len(cascaded.DeviceCodec._codecs) <= 4


def _mpirun() -> list[str] | None:
    """The launcher and the flags this machine's MPI needs (Open MPI as root), or None."""
    import shutil
    import subprocess

    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if exe is None:
        return None
    openmpi = "Open MPI" in subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return [exe, "--allow-run-as-root", "--oversubscribe"] if openmpi else [exe]


def test_cli_job_on_the_gpus(tmp_path):
    """`mpirun -n 2 gpujoin dist join --placement gpu`: each rank's row groups moved to its GPU
    and shuffled there (through the host where the two ranks share one GPU), compressed by nvCOMP
    where installed; the part files' union is the join."""
    import os
    import subprocess
    import sys

    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    launcher = _mpirun()
    if launcher is None:
        pytest.skip("no MPI launcher")
    pytest.importorskip("mpi4py")
    rng = np.random.default_rng(4)
    (tmp_path / "L").mkdir()
    for i in range(2):
        pq.write_table(pa.table({"k": rng.integers(0, 900, 4000), "a": np.arange(4000) + 4000 * i}),
                       tmp_path / "L" / f"p{i}.parquet", row_group_size=1000)
    pq.write_table(pa.table({"k": rng.integers(0, 900, 3000), "s": [f"s{x}" for x in rng.integers(0, 9, 3000)]}),
                   tmp_path / "R.parquet", row_group_size=700)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for how, compression in (("inner", "cascaded"), ("left", "auto"), ("anti", "none")):
        if compression == "cascaded":
            from gpujoin.dist.cascaded import nvcomp

            compression = "cascaded" if nvcomp() else "none"
        out = tmp_path / f"out-{how}"
        p = subprocess.run(launcher + ["-n", "2", sys.executable, "-m", "gpujoin.cli", "dist", "join",
                                       str(tmp_path / "L"), str(tmp_path / "R.parquet"), "--on", "k", "--how", how,
                                       "--placement", "gpu", "--compression", compression, "-o", str(out)],
                           capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        want = gpujoin.join(ds.dataset(tmp_path / "L").to_table(), pq.read_table(tmp_path / "R.parquet"), "k",
                            how=how, device="cpu")
        assert_tables_equal(ds.dataset(out).to_table(), want)
