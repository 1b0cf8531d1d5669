"""The gpujoin command end to end on small files."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from gpujoin.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "gpujoin.cli", *args], capture_output=True, text=True)


@pytest.fixture
def files(tmp_path):
    left = pa.table({"k": [1, 2, 3, None], "x": ["a", "b", "c", "d"]})
    right = pa.table({"k": [2, 3, 3, 5], "y": [1.5, 2.5, 3.5, 4.5]})
    pq.write_table(left, tmp_path / "l.parquet")
    pcsv.write_csv(right, tmp_path / "r.csv")
    return tmp_path


@pytest.mark.parametrize("ext", ["parquet", "csv", "arrow"])
def test_join_files(files, ext):
    out = files / f"o.{ext}"
    main(["join", str(files / "l.parquet"), str(files / "r.csv"), "--on", "k", "--how", "left", "-o", str(out)])
    from gpujoin.io import read_table

    t = read_table(out)
    assert t.num_rows == 5 and t.column_names == ["k", "x", "y"]


def test_group_by_file(files):
    out = files / "g.parquet"
    main(["group-by", str(files / "r.csv"), "--by", "k", "--agg", "total=y:sum", "--agg", "n=:size", "-o", str(out)])
    t = pq.read_table(out).sort_by("k")
    assert t.to_pydict() == {"k": [2, 3, 5], "total": [1.5, 6.0, 4.5], "n": [1, 2, 1]}


def test_bad_path_exits_2_with_one_line(files):
    p = run("join", str(files / "missing.parquet"), str(files / "r.csv"), "--on", "k", "-o", str(files / "o.parquet"))
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "missing.parquet" in p.stderr
    assert not (files / "o.parquet").exists()


def test_bad_argument_exits_2(files):
    p = run("join", str(files / "l.parquet"), str(files / "r.csv"), "--on", "k", "--how", "sideways", "-o", "o.csv")
    assert p.returncode == 2 and "sideways" in p.stderr
    p = run("group-by", str(files / "r.csv"), "--by", "k", "--agg", "oops", "-o", str(files / "g.csv"))
    assert p.returncode == 2 and "NAME=COLUMN:FUNCTION" in p.stderr


def test_gpus_option_is_checked(files):
    p = run("join", str(files / "l.parquet"), str(files / "r.csv"), "--on", "k", "--device", "cpu", "--gpus", "2",
            "-o", str(files / "o.csv"))
    assert p.returncode == 2 and "device='cpu'" in p.stderr
    p = run("group-by", str(files / "r.csv"), "--by", "k", "--agg", "n=:size", "--gpus", "two", "-o",
            str(files / "g.csv"))
    assert p.returncode == 2 and "number of GPUs" in p.stderr
    assert not (files / "o.csv").exists() and not (files / "g.csv").exists()


def test_failure_leaves_no_output(files):
    out = files / "o.parquet"
    p = run("join", str(files / "l.parquet"), str(files / "r.csv"), "--on", "nope", "-o", str(out))
    assert p.returncode == 2 and "'nope'" in p.stderr
    assert list(files.glob("o.parquet*")) == [] and list(files.glob(".o.parquet*")) == []


def test_info_runs():
    p = run("info")
    assert p.returncode == 0 and "cpu" in p.stdout


def test_bench_and_plot(tmp_path):
    out = tmp_path / "b.jsonl"
    main(["bench", "join", "--log2-r", "10", "--runs", "2", "--sweep", "match_ratio=1,0.5", "-o", str(out),
          "--device", "cpu"])
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 2 and recs[0]["runs"] == 2 and recs[0]["throughput_g_per_s"] > 0
    assert set(recs[0]["phases_s"]) == {"transform", "match", "materialize"}
    main(["bench", "group-by", "--log2-rows", "10", "--log2-groups", "4", "--runs", "2", "-o", str(tmp_path / "g.jsonl")])
    # "all,auto": every algorithm, then auto as a run of its own, its choice recorded beside it
    main(["bench", "join", "--log2-r", "10", "--runs", "1", "--device", "cpu", "--algorithm", "all,auto", "-o",
          str(tmp_path / "a.jsonl")])
    recs = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    names = [r["algorithm"] for r in recs]
    assert names[-1] == "auto" and recs[-1]["chosen"] in names[:-1] and len(set(names)) == len(names)
    pytest.importorskip("matplotlib")
    main(["bench", "plot", str(out), "-o", str(tmp_path / "b.png")])
    assert (tmp_path / "b.png").stat().st_size > 0


def test_bench_algorithms_take_turns():
    # a warm-up of each, then rounds of one run of each in a new order (issue 17: timed after
    # another's runs, an algorithm paid for what the other left behind)
    from gpujoin.bench.runner import _timed_rounds

    calls = []
    out = _timed_rounds({k: (lambda k=k: calls.append(k) or k) for k in "abc"}, 5)
    assert calls[:3] == list("abc")
    rounds = [calls[3 + 3 * i:6 + 3 * i] for i in range(5)]
    assert all(sorted(r) == list("abc") for r in rounds) and len({tuple(r) for r in rounds}) > 1
    assert all(len(out[k][0]) == 5 and out[k][1] == k for k in "abc")


def test_bench_cpu_joins_and_plot(tmp_path):
    out = tmp_path / "c.jsonl"
    main(["bench", "cpu-joins", "--log2-n", "12", "--threads", "1,2", "--runs", "1", "--peers", "duckdb",
          "-o", str(out)])
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    ours = [r for r in recs if r["engine"] == "gpujoin"]
    assert {r["algorithm"] for r in ours} == {"merge", "hash", "split", "bucket", "phj"}
    assert {r["threads"] for r in ours} == {1, 2}
    assert len({r["output_rows"] for r in recs}) == 1  # every engine found the same intersection
    pytest.importorskip("matplotlib")
    main(["bench", "plot", str(out), "-o", str(tmp_path / "c.png")])
    assert (tmp_path / "c.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        main(["bench", "cpu-joins", "--algorithms", "nope"])


def test_plot_of_out_of_core_records(tmp_path):
    """The out-of-core records measured on an H200 (docs/) draw with the PCIe ceiling line."""
    pytest.importorskip("matplotlib")
    src = Path(__file__).parent.parent / "docs" / "bench_cuda_out_of_core.jsonl"
    joins = [line for line in src.read_text().splitlines() if '"benchmark": "out-of-core"' in line]
    assert joins
    f = tmp_path / "ooc.jsonl"
    f.write_text("\n".join(joins) + "\n")
    main(["bench", "plot", str(f), "-o", str(tmp_path / "ooc.png")])
    assert (tmp_path / "ooc.png").stat().st_size > 0


def test_bench_out_of_core_rejects_bad_arguments():
    p = run("bench", "out-of-core", "--mode", "median")
    assert p.returncode == 2 and "--mode" in p.stderr
    p = run("bench", "out-of-core", "--memory-limit", "lots")
    assert p.returncode == 2 and "--memory-limit" in p.stderr
    p = run("bench", "out-of-core", "--baselines", "npj-cuckoo")
    assert p.returncode == 2 and "--baselines" in p.stderr and "npj-perfect" in p.stderr


def test_bench_multi_gpu_rejects_bad_arguments():
    """Checked before any GPU is looked for (this machine may have none)."""
    p = run("bench", "multi-gpu", "--r-share", "0.5,1.5")
    assert p.returncode == 2 and "--r-share" in p.stderr
    p = run("bench", "multi-gpu", "--peers", "spark")
    assert p.returncode == 2 and "--peers" in p.stderr and "duckdb" in p.stderr
    p = run("bench", "multi-gpu", "--inner", "bitmap")
    assert p.returncode == 2 and "--inner" in p.stderr


def test_join_where_files(tmp_path):
    pq.write_table(pa.table({"t": [1, 5, 9], "id": [1, 2, 3]}), tmp_path / "l.parquet")
    pq.write_table(pa.table({"start": [0, 4], "end": [6, 10], "id": [7, 8]}), tmp_path / "r.parquet")
    out = tmp_path / "o.parquet"
    main(["join-where", str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet"), "--where", "t >= start",
          "--where", "t<=end", "--device", "cpu", "-o", str(out)])
    t = pq.read_table(out).sort_by([("t", "ascending"), ("id_right", "ascending")])
    assert t.column_names == ["t", "id", "start", "end", "id_right"]
    assert list(zip(t["t"].to_pylist(), t["id_right"].to_pylist())) == [(1, 7), (5, 7), (5, 8), (9, 8)]
    p = run("join-where", str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet"), "--where", "t ~ start",
            "-o", str(tmp_path / "x.parquet"))
    assert p.returncode == 2 and "LEFT_COLUMN OP RIGHT_COLUMN" in p.stderr
    assert not (tmp_path / "x.parquet").exists()
