"""Paper 001's distributed join and group-by on the CPU: the hashing and partition planning, the
one-rank job in-process, and real MPI jobs of 2 and 4 ranks (``mpiexec``, when installed: the
``test`` extra brings mpi4py and MPICH) that take both shuffles, two hosts played by one machine
included, against the one-process answer (tests/mpi_dist_check.py)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import gpujoin
from gpujoin.dist import Communicator, group_by, join
from gpujoin.dist.shuffle import destinations, exchange, fmix64, key_hashes, shuffle
from gpujoin.testing import assert_tables_equal

MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def test_hashes_agree_across_key_types_and_spread_evenly():
    a = key_hashes([pa.array([1, 2, None, -5], pa.int64())], 7)
    b = key_hashes([pa.array([1, 2, 3, -5], pa.int32()).cast(pa.int64())], 7)
    assert a[0] == b[0] and a[1] == b[1] and a[3] == b[3]
    assert key_hashes([pa.array([1], pa.int64())], 8)[0] != a[0]  # another seed, another hash
    s = key_hashes([pa.array(["ab", "", None, "ab", "abc", "ba"])], 1)
    assert s[0] == s[3] and len({s[0], s[1], s[4], s[5]}) == 4
    d = destinations(fmix64(np.arange(1 << 16, dtype=np.uint64)), 5)
    counts = np.bincount(d, minlength=5)
    assert d.min() >= 0 and d.max() < 5 and counts.max() < 1.05 * counts.mean()
    composite = key_hashes([pa.array([1, 1]), pa.array(["x", "y"])], 3)
    assert composite[0] != composite[1]


def test_null_keys_under_nulls_equal_hash_alike_and_spread():
    # nulls_equal=True: a null hashes as a zero word of its column whatever its type (what lies
    # under a null slot is anything), so equal keys with nulls in the same places meet on one
    # rank, and a composite key's rows with a null in one column spread over the ranks (they had
    # all gone to rank 0)
    n = 4000
    b = np.arange(n)
    left = pa.table({"a": pa.array(np.zeros(n, np.int64), mask=np.ones(n, bool)), "b": b})
    right = pa.table({"a": pa.array(np.arange(n), mask=np.ones(n, bool)), "b": b})  # (other values under the nulls)
    same = [key_hashes([t["a"], t["b"]], 5, nulls_as_zero=True) for t in (left, right)]
    assert (same[0] == same[1]).all()
    assert (same[0] == key_hashes([pa.array(np.zeros(n, np.int64)), pa.array(b)], 5)).all()
    strings = [key_hashes([pa.array([v] * n, pa.string(), mask=np.ones(n, bool)), t["b"]], 5, nulls_as_zero=True)
               for v, t in (("x", left), ("yyy", right))]
    assert (strings[0] == strings[1]).all()

    class Four:
        size = 4

    from gpujoin.dist.join import _destinations

    ranks = _destinations(left, ["a", "b"], [pa.int64(), pa.int64()], Four(), None)
    assert np.bincount(ranks, minlength=4).min() > n // 8
    assert (ranks == _destinations(right, ["a", "b"], [pa.int64(), pa.int64()], Four(), None)).all()


def test_one_rank_job_equals_the_join():
    comm = Communicator.single()
    assert (comm.rank, comm.size, comm.nodes, comm.local_size) == (0, 1, 1, 1)
    rng = np.random.default_rng(1)
    left = pa.table({"k": pa.array(rng.integers(0, 50, 500), mask=rng.random(500) < 0.1), "a": np.arange(500)})
    right = pa.table({"k": rng.integers(0, 60, 400), "b": rng.random(400)})
    for how in ("inner", "left", "right", "full", "semi", "anti"):
        stats = {}
        got = join(left, right, "k", how=how, comm=comm, device="cpu", stats=stats)
        assert_tables_equal(got, gpujoin.join(left, right, "k", how=how, device="cpu"))
        assert stats["rows_received"] == (500, 400) and stats["ranks"] == 1
        assert stats["local_build_side"] == ("left" if how == "right" else "right")
        got = join(left, left, "k", how=how, comm=comm, device="cpu", nulls_equal=True)
        assert_tables_equal(got, gpujoin.join(left, left, "k", how=how, device="cpu", nulls_equal=True))
    got = group_by(right, "k", comm=comm, device="cpu").agg(n=(None, "size"))
    assert_tables_equal(got, gpujoin.group_by(right, "k", device="cpu").agg(n=(None, "size")))
    t = pa.table({"x": [1, 2, 3]})
    assert_tables_equal(exchange(t, np.zeros(3, np.int64), comm), t, check_row_order=True)
    assert_tables_equal(shuffle(t, np.zeros(3, np.int64), comm, "two-level"), t, check_row_order=True)
    assert comm.allgather_array(np.arange(6).reshape(2, 3)).tolist() == [[[0, 1, 2], [3, 4, 5]]]


def test_the_jobs_row_counts_pick_every_ranks_build_side():
    # a rank's received sides differ from the job's by the hash's noise: its local join builds on
    # the side the whole job's counts pick (inner and full joins), as the one-GPU join would
    from gpujoin.dist.join import _job_build_side
    from gpujoin.plan.join import BUILD_SIDE, build_on_left, execute_join

    left, right = pa.table({"k": np.arange(90)}), pa.table({"k": np.arange(100) % 50})
    for how, sizes, want in (("inner", [[60, 40], [50, 40]], False), ("full", [[30, 40], [30, 40]], True),
                             ("inner", [[40, 40], [40, 40]], False), ("right", [[10, 90], [10, 90]], True),
                             ("left", [[10, 90], [10, 90]], False), ("semi", [[10, 90], [10, 90]], False)):
        with _job_build_side(how, np.array(sizes)):
            assert build_on_left(how, 1, 2) is want and build_on_left(how, 2, 1) is want  # (not the local sizes)
            _, st = execute_join(left, right, "k", how=how, device="cpu")
            assert st.params["build_side"] == ("left" if want else "right"), (how, sizes)
        assert BUILD_SIDE.get() is None and build_on_left(how, 1, 2) is (how in ("inner", "full", "right"))
    with _job_build_side("inner", np.array([[100, 90]])):  # (the job builds right: on sides far apart, the smaller)
        assert not build_on_left("inner", 200, 101) and build_on_left("inner", 100, 201)
        assert build_on_left("inner", 0, 5) and not build_on_left("inner", 0, 0)


def test_bad_arguments():
    comm = Communicator.single()
    t = pa.table({"k": [1]})
    with pytest.raises(ValueError, match="cross"):
        join(t, t, how="cross", comm=comm)
    with pytest.raises(ValueError, match="compression"):
        join(t, t, "k", comm=comm, compression="zstd")
    with pytest.raises(ValueError, match="unknown shuffle"):
        join(t, t, "k", comm=comm, shuffle="three-level")


def test_bucket_count_follows_the_shuffle_and_refuses_bad_values():
    """The local join's hash buckets: "auto" only for a one-level uncompressed shuffle on more
    than two ranks, of about BUCKET_ROWS rows each; an explicit count falls back to 1 where the buckets
    cannot ride the shuffle (two levels, compression); anything but "auto" or a whole number from
    1 refused."""
    from gpujoin.dist.join import BUCKET_ROWS, _bucket_count

    class Ranks:
        size = 4

    class Two:
        size = 2

    big, one = 2 * BUCKET_ROWS, Communicator.single()
    assert _bucket_count("auto", "one-level", "none", Two, big) == 1
    assert _bucket_count("auto", "one-level", "none", Ranks, big) == 2
    assert _bucket_count("auto", "one-level", "none", Ranks, big + 1) == 3
    assert _bucket_count("auto", "one-level", "none", Ranks, BUCKET_ROWS) == 1
    assert _bucket_count("auto", "one-level", "none", Ranks, 0) == 1
    assert _bucket_count("auto", "two-level", "none", Ranks, big) == 1
    assert _bucket_count("auto", "one-level", "cascaded", Ranks, big) == 1
    assert _bucket_count("auto", "one-level", "none", one, big) == 1
    assert _bucket_count(5, "one-level", "none", Ranks, 10) == 5
    assert _bucket_count(np.int64(3), "one-level", "none", Ranks, 10) == 3
    assert _bucket_count(5, "two-level", "none", Ranks, 10) == 1
    assert _bucket_count(5, "one-level", "auto", Ranks, 10) == 1
    for bad in (0, -1, 2.5, "4", True, None):
        with pytest.raises(ValueError, match="buckets"):
            _bucket_count(bad, "one-level", "none", Ranks, 10)


@pytest.mark.parametrize("column", ["sorted", "small", "runs", "ids", "extremes", "empty", "one", "uniform"])
def test_cascaded_codec_round_trips_and_selects(column):
    """Every scheme decodes to the column exactly (dtype too, through the wire format); the
    selector picks what compresses the sample most (paper 001 Table 1's kinds of choice)."""
    from gpujoin.dist import cascaded as c

    rng = np.random.default_rng(0)
    col = {"sorted": np.sort(rng.integers(0, 1000, 100_000)).astype(np.int32),
           "small": rng.integers(0, 7, 100_000).astype(np.int64),
           "runs": np.repeat(rng.integers(-5, 5, 1000), 100).astype(np.int16),
           "ids": np.arange(10**6, 2 * 10**6, dtype=np.int64),
           "extremes": np.array([-(2**63), 2**63 - 1, 0, -1] * 100, np.int64),
           "empty": np.zeros(0, np.int32), "one": np.array([5], np.uint8),
           "uniform": rng.integers(0, 2**62, 10_000)}[column]
    for scheme in c.SCHEMES:
        enc = c.encode(np, col, scheme)
        for back in (c.decode(np, enc), c.from_bytes(c.to_bytes(enc))):
            assert back.dtype == col.dtype and np.array_equal(back, col), scheme
        if scheme.bitpack and col.size:
            assert len(c.to_bytes(enc)) <= c.encoded_bytes(np, col, scheme) + 512 + col.size // 8
    scheme, ratio = c.select(np, col)
    want = {"sorted": "RLE+delta+bitpack", "small": "bitpack", "runs": "RLE+bitpack", "ids": "delta+bitpack",
            "extremes": "none", "empty": "none", "one": "none", "uniform": "bitpack"}[column]
    assert str(scheme) == want and ratio >= 1.0


def test_nvcomp_missing_says_why_and_what_to_install(monkeypatch):
    """Where nvCOMP cannot be imported, the reason names the import's error and both wheels."""
    from gpujoin.dist import cascaded

    monkeypatch.setitem(sys.modules, "nvidia.nvcomp", None)  # (None in sys.modules: ImportError)
    why = cascaded.nvcomp_missing()
    assert "nvidia.nvcomp" in why and "nvidia-nvcomp-cu13" in why and "nvidia-libnvcomp-cu13" in why
    assert cascaded.nvcomp() is None


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpi4py mpich)")
@pytest.mark.parametrize("ranks,per_node", [(2, None), (2, 1), (4, 2)])
def test_mpi_jobs(ranks, per_node):
    """2 ranks on one host; 2 ranks as 2 hosts of 1; 4 ranks as 2 hosts of 2 (one rank without rows)."""
    pytest.importorskip("mpi4py")
    script = Path(__file__).with_name("mpi_dist_check.py")
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, str(script)] + ([str(per_node)] if per_node else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count(" ok") == ranks


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpi4py mpich)")
@pytest.mark.parametrize("ranks,per_node", [(2, None), (4, 2)])
def test_mpi_jobs_under_hypothesis(ranks, per_node):
    """Exact rows against the one-process join on examples Hypothesis draws (rank 0 draws, every
    rank joins its rows): 2 ranks, and 4 ranks as 2 hosts of 2."""
    pytest.importorskip("mpi4py")
    script = Path(__file__).with_name("mpi_hypothesis_check.py")
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, str(script), str(per_node or ""), "cpu", "25"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count(" ok") == ranks


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpi4py mpich)")
def test_mpi_cli_job(tmp_path):
    """`mpiexec -n 2 gpujoin dist join`: each rank its row groups, part-RANK.parquet each, their union
    the join (null keys matching nothing, or with --nulls-equal each other); a job that fails leaves
    no part file and exits non-zero with the reason."""
    pytest.importorskip("mpi4py")
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    (tmp_path / "L").mkdir()
    for i in range(3):
        pq.write_table(pa.table({"k": pa.array(rng.integers(0, 800, 3000), mask=rng.random(3000) < 0.01),
                                 "a": rng.random(3000)}), tmp_path / "L" / f"p{i}.parquet", row_group_size=700)
    pq.write_table(pa.table({"k": pa.array(rng.integers(0, 800, 4000), mask=rng.random(4000) < 0.01),
                             "b": [f"s{x}" for x in rng.integers(0, 9, 4000)]}), tmp_path / "R.parquet",
                   row_group_size=900)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    base = [MPIEXEC, "-n", "2", sys.executable, "-m", "gpujoin.cli", "dist", "join", str(tmp_path / "L"),
            str(tmp_path / "R.parquet"), "--device", "cpu", "--how", "full"]
    p = subprocess.run(base + ["--on", "k", "-o", str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert sorted(f.name for f in (tmp_path / "out").iterdir()) == ["part-0.parquet", "part-1.parquet"]
    got = ds.dataset(tmp_path / "out").to_table()
    want = gpujoin.join(ds.dataset(tmp_path / "L").to_table(), pq.read_table(tmp_path / "R.parquet"), "k",
                        how="full", device="cpu")
    assert_tables_equal(got, want)
    p = subprocess.run(base + ["--on", "k", "--nulls-equal", "-o", str(tmp_path / "eq")], capture_output=True,
                       text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    want = gpujoin.join(ds.dataset(tmp_path / "L").to_table(), pq.read_table(tmp_path / "R.parquet"), "k",
                        how="full", device="cpu", nulls_equal=True)
    assert_tables_equal(ds.dataset(tmp_path / "eq").to_table(), want)
    # each key's rows meet on one rank, which checks their multiplicity: L's keys repeat
    p = subprocess.run(base + ["--on", "k", "--validate", "1:m", "--algorithm", "phj", "-o", str(tmp_path / "dup")],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode != 0 and "1:m" in p.stderr, p.stderr[-2000:]
    assert not any((tmp_path / "dup").glob("*part-*"))
    p = subprocess.run(base + ["--on", "nope", "-o", str(tmp_path / "bad")], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode != 0 and "nope" in p.stderr
    assert not any((tmp_path / "bad").glob("*part-*"))


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpi4py mpich)")
def test_mpi_cli_group_by_job(tmp_path):
    """`mpiexec -n 2 gpujoin dist group-by`: each rank its row groups, the rows shuffled by key (null
    keys one group, on one rank), part-RANK.parquet each, their union the group-by; a job whose
    column is missing, or whose aggregate fails on a rank after the shuffle, leaves no part file
    and exits non-zero with the reason."""
    pytest.importorskip("mpi4py")
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    rng = np.random.default_rng(4)
    (tmp_path / "T").mkdir()
    for i in range(3):
        n = 2500
        pq.write_table(pa.table({"k": pa.array(rng.integers(0, 300, n), mask=rng.random(n) < 0.05),
                                 "v": rng.integers(-50, 50, n),
                                 "w": pa.array([f"s{x}" for x in rng.integers(0, 9, n)], mask=rng.random(n) < 0.1)}),
                       tmp_path / "T" / f"p{i}.parquet", row_group_size=600)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    base = [MPIEXEC, "-n", "2", sys.executable, "-m", "gpujoin.cli", "dist", "group-by", str(tmp_path / "T"),
            "--device", "cpu", "--by", "k"]
    aggs = ["--agg", "s=v:sum", "--agg", "u=w:n_unique", "--agg", "n=:size", "--agg", "hi=w:max"]
    p = subprocess.run(base + aggs + ["-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=600,
                       env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "groups to" in p.stdout
    assert sorted(f.name for f in (tmp_path / "out").iterdir()) == ["part-0.parquet", "part-1.parquet"]
    want = gpujoin.group_by(ds.dataset(tmp_path / "T").to_table(), "k", device="cpu").agg(
        s=("v", "sum"), u=("w", "n_unique"), n=(None, "size"), hi=("w", "max"))
    assert_tables_equal(ds.dataset(tmp_path / "out").to_table(), want)
    for bad, reason in ((["--agg", "s=nope:sum"], "nope"), (["--agg", "s=w:sum"], "aggregating failed")):
        p = subprocess.run(base + bad + ["-o", str(tmp_path / "bad")], capture_output=True, text=True, timeout=600,
                           env=env)
        assert p.returncode != 0 and reason in p.stderr, p.stderr[-3000:]
        assert not any((tmp_path / "bad").glob("*part-*"))


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpi4py mpich)")
def test_mpi_bench_dist(tmp_path):
    import json

    pytest.importorskip("mpi4py")
    out = tmp_path / "d.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gpujoin.cli", "bench", "dist", "--rows", "3000",
                        "--device", "cpu", "--runs", "1", "-o", str(out)], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["shuffle"] for r in recs] == ["one-level", "two-level"]
    assert all(r["correct"] and r["ranks"] == 2 and r["output_rows"] > 0 for r in recs)
    # each rank's phases, and the build side the job's equal sides pick (the right) on both
    assert all([d["build_side"] for d in r["ranks_detail"]] == ["right", "right"] for r in recs), recs
    hosts = tmp_path / "h.jsonl"  # two ranks playing two hosts of one: the two-level shuffle's rail
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gpujoin.cli", "bench", "dist", "--rows", "3000",
                        "--device", "cpu", "--shuffle", "two-level", "--ranks-per-node", "1", "--runs", "1",
                        "-o", str(hosts)], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (rec,) = [json.loads(line) for line in hosts.read_text().splitlines()]
    assert rec["correct"] and rec["hosts"] == 2
    tpch = tmp_path / "t.jsonl"  # paper 001's TPC-H join: every lineitem row finds its order
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gpujoin.cli", "bench", "dist", "--workload", "tpch",
                        "--sf", "0.01", "--shuffle", "one-level", "--compression", "cascaded", "--device", "cpu",
                        "--runs", "1", "-o", str(tpch)], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (rec,) = [json.loads(line) for line in tpch.read_text().splitlines()]
    assert rec["output_rows"] == 60_175 and rec["columns"]["o_orderpriority"]["scheme"] == "bitpack"


def test_bench_dist_emits_each_record_before_a_later_failure(monkeypatch):
    """A setting that fails leaves the records of those timed before it written (emit)."""
    import importlib

    from gpujoin.bench.dist import bench_dist

    dj = importlib.import_module("gpujoin.dist.join")  # (the package's `join` is the function)
    real = dj.join

    def flaky(*a, **k):
        if k.get("compression") == "cascaded":
            raise RuntimeError("planted")
        return real(*a, **k)

    monkeypatch.setattr(dj, "join", flaky)
    got = []
    with pytest.raises(RuntimeError, match="planted"):
        bench_dist([3000], ["one-level"], "cpu", 1, log=lambda m: None, compressions=["none", "cascaded"],
                   emit=got.append)
    assert [(r["compression"], r["correct"]) for r in got] == [("none", True)]


def test_selector_reproduces_paper_001_table_1():
    """On TPC-H's shuffled columns (SF 0.01) the selector picks Table 1's configurations:
    O_ORDERKEY and L_ORDERKEY 2 RLEs + 1 delta + bit-packing, O_ORDERPRIORITY bit-packing alone."""
    from gpujoin.bench.dist import bench_compression

    recs = bench_compression(0.01, log=lambda m: None)
    assert [r["workload"]["column"] for r in recs] == ["o_orderkey", "o_orderpriority", "l_orderkey"]
    assert all(r["matches_paper"] and r["ratio"] > 5 for r in recs), [(r["scheme"], r["ratio"]) for r in recs]


def test_auto_shuffle_follows_the_crossover_model():
    from types import SimpleNamespace

    from gpujoin.dist.model import H200, crossover, measured_rates
    from gpujoin.dist.shuffle import auto_method

    two_hosts = SimpleNamespace(nodes=2, local_size=8, size=16)
    edge = crossover(16, 8)
    assert auto_method(two_hosts, int(edge / 2), rates=H200) == "two-level"
    assert auto_method(two_hosts, int(edge * 2), rates=H200) == "one-level"
    assert auto_method(SimpleNamespace(nodes=1, local_size=8, size=8), 10) == "one-level"
    assert auto_method(two_hosts, 10, uniform=False) == "one-level"
    # by default the links are the job's own, measured: a NIC of 1 GB/s and 1 ms a message
    # (the one-level shuffle's 15 messages a rank against 1 + 7) move the crossover far up
    # for tables in GPU memory the links are NCCL's (device=True), measured apart from MPI's
    link = lambda gbps: SimpleNamespace(size=2, link_GBps=lambda device=False: gbps * (20 if device else 1))  # noqa
    slow = SimpleNamespace(nodes=2, local_size=8, size=16, rail=lambda: link(1.0), host=lambda: link(300.0),
                           message_s=lambda device=False: 1e-5 if device else 1e-3, allgather=lambda x: [x])
    rates = measured_rates(slow)
    assert (rates.inter_Bps, rates.intra_Bps, rates.alpha_s) == (1e9, 300e9, 1e-3)
    # each rail and host measures its own links; every rank takes the slowest, so that all
    # choose alike (ranks choosing differently wait in different collectives for ever)
    other = SimpleNamespace(**{**vars(slow), "allgather": lambda x: [x, (x[0] / 2, x[1] * 2)]})
    assert (measured_rates(other).inter_Bps, measured_rates(other).intra_Bps) == (0.5e9, 300e9)
    assert crossover(16, 8, rates) > 10 * edge
    assert auto_method(slow, int(edge * 2)) == "two-level"
    fast = measured_rates(slow, device=True)
    assert (fast.inter_Bps, fast.intra_Bps, fast.alpha_s) == (20e9, 6000e9, 1e-5)
    rows = int(2 * crossover(16, 8, fast))  # past NCCL's crossover, under MPI's
    assert auto_method(slow, rows, device=True) == "one-level" and auto_method(slow, rows) == "two-level"


def test_alltoallv_sends_big_messages_in_rounds(monkeypatch):
    from gpujoin.dist import comm as comm_module

    monkeypatch.setattr(comm_module, "MAX_MESSAGE_BYTES", 7)  # 40 bytes: six rounds
    comm = Communicator.single()
    x = np.arange(5, dtype=np.int64)
    np.testing.assert_array_equal(comm.alltoallv(x, np.array([5]), np.array([5])), x)


def test_nccl_messages_past_the_cap_go_in_pieces_cut_alike():
    """Messages longer than MAX_NCCL_MESSAGE go to NCCL as several, each end cutting one message
    of n bytes into the same pieces in the same order; shorter ones and empty ones unchanged."""
    from gpujoin.dist.comm import pieces

    got = pieces([(1, 1000, 25), (0, 0, 0), (1, 5000, 10)], cap=10)
    assert got == [(1, 1000, 10), (1, 1010, 10), (1, 1020, 5), (0, 0, 0), (1, 5000, 10)]
    two_gib = pieces([(1, 0, 1 << 31)])
    assert [n for *_, n in two_gib] == [1 << 30] * 2 and two_gib[1][1] == 1 << 30


def test_device_layout_places_every_row_once_with_aligned_bodies():
    from gpujoin.dist.comm import ALIGN_ROWS, DeviceLayout, cut

    rng = np.random.default_rng(4)
    P = 4
    for _ in range(50):
        U = int(rng.integers(1, 4))
        # counts[u, s, d]: rows of chunk u that rank s sends to rank d
        counts = rng.integers(0, 70, (U, P, P))
        counts[rng.random((U, P, P)) < 0.2] = 0
        starts = np.cumsum(counts, axis=2) - counts
        sent = {}
        for r in range(P):
            lay = DeviceLayout(r, [(starts[u, r], counts[u, r], starts[u, :, r], counts[u, :, r]) for u in range(U)])
            taken = np.zeros(lay.rows, int)
            for u in range(U):
                sends, recvs, (src, dst, rows) = lay.unit(u)
                assert (src, rows) == (starts[u, r, r], counts[u, r, r])
                taken[dst:dst + rows] += 1
                for j, st, n in recvs:
                    taken[st:st + n] += 1
                for j, st, n in sends:
                    sent.setdefault((u, r, j), []).append((st, n))
                got = {}
                for j, st, n in recvs:
                    got.setdefault(j, []).append(n)
                for j in got:  # what j sends here, piece by piece, in the order this rank receives
                    h, b, t = cut(starts[u, j, r], counts[u, j, r])
                    assert got[j] == [x for x in (b, h, t) if x]
                    if b:  # the body lands aligned
                        assert next(st for jj, st, _ in recvs if jj == j) % ALIGN_ROWS == 0
            assert (taken == 1).all() and lay.rows == counts[:, :, r].sum()
        for (u, r, j), pieces in sent.items():  # a message's pieces cover its rows once, the body aligned
            h, b, t = cut(starts[u, r, j], counts[u, r, j])
            assert sum(n for _, n in pieces) == counts[u, r, j]
            if b:
                assert pieces[0][0] % ALIGN_ROWS == 0 and pieces[0][1] == b


def test_bucket_units_deliver_each_bucket_whole_to_its_rank():
    """device_shuffle.bucket_units: every rank's send buffer bucket-major (rank d % P, bucket
    d // P), each (table, bucket) laid out as one all-to-all unit; moving the rows as the units'
    messages say (pieces matched in order, this rank's own rows copied) gives each rank, per
    table and bucket, exactly the rows every rank had for it."""
    from gpujoin.dist.comm import DeviceLayout
    from gpujoin.dist.device_shuffle import bucket_units

    rng = np.random.default_rng(9)
    for P, T, B in ((2, 2, 2), (3, 2, 5), (4, 1, 3), (1, 2, 4)):
        dest = [[rng.integers(0, P * B, int(rng.integers(0, 300))) for _ in range(T)] for _ in range(P)]
        for r in range(P):  # some empty runs
            dest[r][0] = dest[r][0][dest[r][0] % P != (r + 1) % P]
        # each rank's send buffer of a table: its row labels (rank, row), bucket-major, in row order
        order = [[np.argsort(d, kind="stable") for d in dest[r]] for r in range(P)]
        buf = [[np.stack([np.full(d.size, r), np.arange(d.size)], 1)[o] for d, o in zip(dest[r], order[r])]
               for r in range(P)]
        counts = np.stack([np.stack([np.bincount(d, minlength=P * B).reshape(B, P) for d in dest[r]])
                           for r in range(P)])
        units = [bucket_units(counts, r) for r in range(P)]
        lays = [{k: DeviceLayout(r, [u]).unit(0) for k, u in units[r].items()} for r in range(P)]
        for r in range(P):
            for (i, b), (sends, recvs, (src, dst, n)) in lays[r].items():
                out = np.full((int(units[r][i, b][3].sum()), 2), -1)
                out[dst:dst + n] = buf[r][i][src:src + n]
                for j in range(P):  # j's pieces for r, in the order both ends list them
                    theirs = [(st, m) for jj, st, m in lays[j][i, b][0] if jj == r]
                    mine = [(st, m) for jj, st, m in recvs if jj == j]
                    assert [m for _, m in theirs] == [m for _, m in mine]
                    for (a, m), (c, _) in zip(theirs, mine):
                        out[c:c + m] = buf[j][i][a:a + m]
                want = sorted((j, k) for j in range(P) for k in np.flatnonzero(dest[j][i] == b * P + r))
                assert sorted(map(tuple, out.tolist())) == want


def test_compression_pays_only_where_the_codec_outruns_the_link():
    from gpujoin.dist.shuffle import compression_pays

    # 10x smaller, codec at 100 GB/s each way: pays on a 10 GB/s NIC, not over 300 GB/s NVLink
    assert compression_pays(10, 100, 100, 10) and not compression_pays(10, 100, 100, 300)
    # the host codec's 0.3 GB/s pays only on links slower than it
    assert compression_pays(20, 0.3, 0.3, 0.05) and not compression_pays(20, 0.3, 0.3, 1.0)
    assert not compression_pays(1.0, 1e9, 1e9, 1.0)  # nothing saved: never


def test_the_device_shuffles_chunks_start_on_tiles_and_cover_the_rows():
    from gpujoin.dist.device_shuffle import chunk_bounds

    for n in (0, 1, 4095, 4096, 4097, 10_000, 3 * 4096, 1 << 20):
        for k in (1, 2, 3, 7, 300):
            b = chunk_bounds(n, k, 4096)
            sizes = [hi - lo for lo, hi in b]
            assert len(b) == k and b[0][0] == 0 and b[-1][1] == n
            assert all(b[i][1] == b[i + 1][0] for i in range(k - 1))
            assert all(lo % 4096 == 0 or lo == n for lo, _ in b)
            full = [x for x in sizes if x][:-1]  # every non-empty chunk but the last is of one size
            assert sizes == sorted(sizes, reverse=True) and len(set(full)) <= 1
    with pytest.raises(ValueError, match="at least 1"):
        chunk_bounds(10, 0)

