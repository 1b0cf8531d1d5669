"""TPC-H data: generated once per scale factor with tpchgen-cli into a cache folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TABLES = ("nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem")


def cache_dir() -> Path:
    """$GPUJOIN_CACHE, else $XDG_CACHE_HOME/gpujoin, else ~/.cache/gpujoin."""
    if os.environ.get("GPUJOIN_CACHE"):
        return Path(os.environ["GPUJOIN_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpujoin"


def sf_label(sf: float) -> str:
    return f"sf{sf:g}"


def _tpchgen() -> str:
    exe = Path(sys.executable).with_name("tpchgen-cli")
    found = str(exe) if exe.exists() else shutil.which("tpchgen-cli")
    if not found:
        raise FileNotFoundError("tpchgen-cli not found; install it with `pip install tpchgen-cli` "
                                "(or `pip install 'gpujoin[tpch]'`)")
    return found


def ensure_data(sf: float, root: Path | None = None, progress: bool = True) -> Path:
    """The folder holding ``<table>.parquet`` for scale factor ``sf``, generating it when missing.

    Generation writes into a temporary folder beside the target and renames it when every table
    is complete, so an interrupted run never leaves a half-written data set; processes that ask
    at once (the ranks of an MPI job) take turns on a lock file, so one generates and the others
    find its data.

    Raises
    ------
    ValueError
        ``sf`` is not positive.
    FileNotFoundError
        tpchgen-cli is not installed.
    RuntimeError
        tpchgen-cli failed (its message is included).
    """
    if not sf > 0:
        raise ValueError(f"the scale factor must be positive, got {sf}")
    root = Path(root) if root is not None else cache_dir() / "tpch"
    target = root / sf_label(sf)
    if _complete(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{sf_label(sf)}.lock", "w") as lock:
        _lock(lock)  # (released when the file closes)
        if not _complete(target):  # another process may have made it while this one waited
            _generate(sf, root, target, progress)
    return target


def _complete(target: Path) -> bool:
    return all((target / f"{t}.parquet").exists() for t in TABLES)


def _lock(f) -> None:
    """An exclusive lock on the open file ``f`` (none where fcntl is missing: Windows)."""
    try:
        import fcntl
    except ImportError:
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)


def _generate(sf: float, root: Path, target: Path, progress: bool) -> None:
    exe = _tpchgen()
    tmp = Path(tempfile.mkdtemp(prefix=f".{sf_label(sf)}-", dir=root))
    try:
        from rich.progress import Progress

        with Progress(transient=True, disable=not progress) as bar:
            task = bar.add_task(f"generating TPC-H SF {sf:g} with tpchgen-cli", total=len(TABLES))
            for table in TABLES:
                bar.update(task, description=f"generating TPC-H SF {sf:g}: {table}")
                proc = subprocess.run([exe, "parquet", "-s", f"{sf:g}", f"--tables={table}",
                                       f"--output-dir={tmp}"], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(f"tpchgen-cli failed on table {table}: {proc.stderr.strip()}")
                bar.advance(task)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
