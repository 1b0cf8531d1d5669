"""The TPC-H job at scale factor 0.01: every query validated against DuckDB."""

import shutil
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    pytest.importorskip("duckdb")  # the queries' oracle
    if not (Path(sys.executable).with_name("tpchgen-cli").exists() or shutil.which("tpchgen-cli")):
        pytest.skip("tpchgen-cli is not installed")
    from gpujoin.tpch.data import ensure_data

    return ensure_data(0.01, tmp_path_factory.mktemp("tpch"), progress=False)


def test_all_queries_validate(data):
    from gpujoin.tpch.queries import QUERIES
    from gpujoin.tpch.runner import run

    results = run(data, list(QUERIES), device="cpu", repeat=1)
    bad = [(r.query, r.difference) for r in results if not r.validated]
    assert not bad, bad
    assert {r.query: r.rows for r in results}["lo"] == 60175


def test_cli_tpch_exit_code(data, capsys):
    from gpujoin.cli import main

    main(["tpch", "--data-dir", str(data), "--queries", "3,12", "--repeat", "1", "--device", "cpu"])
    assert "Q12" in capsys.readouterr().out


def test_broken_oracle_is_caught(data, monkeypatch):
    """The check must fail on a wrong answer (a runner that compared a result with itself could not)."""
    from gpujoin.tpch import queries
    from gpujoin.tpch.runner import run

    real = queries.q12
    monkeypatch.setitem(queries.QUERIES, "12", lambda T, q: real(T, q).slice(0, 1))
    (r,) = run(data, ["12"], device="cpu", repeat=1)
    assert not r.validated and "row counts differ" in r.difference


def test_processes_asking_at_once_generate_the_data_once(tmp_path, monkeypatch):
    """The ranks of an MPI job all call ensure_data: one generates, the others wait on the lock
    and find its data (each had generated it, and a late one replaced the folder another read)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from gpujoin.tpch import data

    made = []

    def generate(sf, root, target, progress):
        made.append(sf)
        time.sleep(0.2)
        target.mkdir()
        for t in data.TABLES:
            (target / f"{t}.parquet").touch()

    monkeypatch.setattr(data, "_generate", generate)
    with ThreadPoolExecutor(3) as pool:  # (flock excludes another open file of the same process too)
        got = list(pool.map(lambda _: data.ensure_data(0.5, tmp_path, progress=False), range(3)))
    assert made == [0.5] and got == [tmp_path / "sf0.5"] * 3
