"""The CLI's streaming input and output (issue 14 item 6), on the CPU: record-batch reads with a
host-memory check, batch writes through a temporary file, the join's sink, progress reports,
and Ctrl-C leaving nothing behind."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpujoin
from gpujoin import progress
from gpujoin.io import BatchWriter, read_table


class Recorder:
    """A stand-in for rich.progress.Progress that remembers every report."""

    def __init__(self):
        self.tasks, self.done = {}, {}

    def add_task(self, description, total=None):
        self.tasks[len(self.tasks)] = [description, total, 0]
        return len(self.tasks) - 1

    def advance(self, task_id, n):
        self.tasks[task_id][2] += n

    def update(self, task_id, total=None, completed=None):
        self.tasks[task_id][1:] = [total, completed]


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in t.column_names])


def test_batch_writer_commits_in_row_groups(tmp_path):
    out = tmp_path / "o.parquet"
    t = pa.table({"a": np.arange(10, dtype=np.int64), "b": np.arange(10) * 0.5})
    with BatchWriter(out, rows=4) as w:
        for b in t.to_batches(max_chunksize=3):
            w.write(b)
        assert not out.exists()  # only the temporary file until the commit
        w.commit(t.schema)
    assert pq.read_table(out).equals(t) and w.rows == 10
    assert pq.ParquetFile(out).num_row_groups > 1
    assert [p.name for p in tmp_path.iterdir()] == ["o.parquet"]


@pytest.mark.parametrize("ext", ["parquet", "csv", "arrow"])
def test_batch_writer_empty_output_keeps_the_schema(tmp_path, ext):
    out = tmp_path / f"o.{ext}"
    schema = pa.schema([("k", pa.int64()), ("x", pa.float64())])
    with BatchWriter(out) as w:
        w.commit(schema)
    t = read_table(out)
    assert t.num_rows == 0 and t.column_names == ["k", "x"]


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_batch_writer_failure_leaves_nothing(tmp_path, exc):
    t = pa.table({"a": np.arange(100)})
    with pytest.raises(exc):
        with BatchWriter(tmp_path / "o.parquet", rows=10) as w:
            w.write(t)  # written to the temporary file already
            raise exc()
    assert list(tmp_path.iterdir()) == []


def test_join_sink_gets_every_row_in_batches(monkeypatch):
    import gpujoin.plan.join as pj

    monkeypatch.setattr(pj, "SINK_BATCH_ROWS", 7)
    rng = np.random.default_rng(3)
    left = pa.table({"k": rng.integers(0, 20, 60), "x": rng.random(60)})
    right = pa.table({"k": rng.integers(0, 20, 50), "y": rng.integers(0, 9, 50)})
    for how in ("inner", "left", "full", "semi", "anti"):
        batches = []
        empty = gpujoin.join(left, right, on="k", how=how, device="cpu", sink=batches.append)
        whole = gpujoin.join(left, right, on="k", how=how, device="cpu")
        assert empty.num_rows == 0 and empty.schema == whole.schema
        assert all(b.num_rows <= 7 for b in batches)
        got = pa.Table.from_batches(batches, schema=whole.schema)
        assert _sorted(got).equals(_sorted(whole)), how


def test_join_sink_must_be_callable():
    t = pa.table({"k": [1]})
    with pytest.raises(TypeError, match="sink"):
        gpujoin.join(t, t, on="k", device="cpu", sink="out.parquet")


def test_read_reports_progress_and_checks_host_memory(tmp_path, monkeypatch):
    folder = tmp_path / "ds"
    folder.mkdir()
    for i in range(3):
        pq.write_table(pa.table({"k": np.arange(i * 10, i * 10 + 10)}), folder / f"part-{i}.parquet")
    rec = Recorder()
    with progress.reporting(rec):
        t = read_table(folder, "left")
    assert sorted(t.column("k").to_pylist()) == list(range(30))
    assert rec.tasks[0] == ["read left", 30, 30]
    monkeypatch.setenv("GPUJOIN_HOST_MEMORY", "100")
    with pytest.raises(MemoryError, match="bytes"):
        read_table(folder)


def test_no_reporter_no_work():
    with progress.task("anything", 10) as shown:
        shown.advance(3)  # nothing to report to, nothing fails


def test_cli_reports_out_of_memory_before_writing(tmp_path):
    pq.write_table(pa.table({"k": np.arange(1000)}), tmp_path / "l.parquet")
    env = dict(os.environ, GPUJOIN_HOST_MEMORY="100")
    p = subprocess.run([sys.executable, "-m", "gpujoin.cli", "join", str(tmp_path / "l.parquet"),
                        str(tmp_path / "l.parquet"), "--on", "k", "--device", "cpu", "-o", str(tmp_path / "o.parquet")],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 3 and "out of memory" in p.stderr and "bytes" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["l.parquet"]


def test_ctrl_c_leaves_no_output_and_no_temporary_file(tmp_path):
    n = 1 << 22  # a join that runs for seconds on the CPU
    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"k": rng.integers(0, n, n), "x": rng.random(n)}), tmp_path / "l.parquet")
    pq.write_table(pa.table({"k": rng.integers(0, n, n), "y": rng.random(n)}), tmp_path / "r.parquet")
    out = tmp_path / "o.parquet"
    p = subprocess.Popen([sys.executable, "-m", "gpujoin.cli", "join", str(tmp_path / "l.parquet"),
                          str(tmp_path / "r.parquet"), "--on", "k", "--device", "cpu", "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".o.parquet.*.tmp")) and time.time() < deadline and p.poll() is None:
        time.sleep(0.01)
    assert p.poll() is None, "the join finished before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "interrupted" in err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["l.parquet", "r.parquet"]


def test_ctrl_c_inside_numbas_compiler_waits_for_it():
    """A SIGINT while Numba holds its compiler lock is raised when the lock is released (inside
    LLVM's callbacks it was swallowed, or crashed the process)."""
    from numba.core import event

    from gpujoin import interrupt

    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert interrupt.defer_while_compiling()
        assert not interrupt.defer_while_compiling()  # once
        event.start_event("numba:compiler_lock")
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs, records it, raises nothing
        with pytest.raises(KeyboardInterrupt):
            event.end_event("numba:compiler_lock")
            time.sleep(0.01)
        with pytest.raises(KeyboardInterrupt):  # outside the compiler: at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, before)
        for listener in list(event._registered.get("numba:compiler_lock", [])):
            if type(listener).__name__ == "CompilerLock":
                event.unregister("numba:compiler_lock", listener)
