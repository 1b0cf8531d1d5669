"""File input and output for the CLI: Parquet, CSV and Arrow IPC, chosen by extension; atomic writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.feather as feather
import pyarrow.parquet as pq

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".arrow": "ipc", ".feather": "ipc",
           ".ipc": "ipc"}


def file_format(path: str | Path) -> str:
    """The format of ``path`` by its extension; ValueError naming the valid ones otherwise."""
    ext = Path(path).suffix.lower()
    if ext not in FORMATS:
        raise ValueError(f"cannot tell the format of {str(path)!r} from its extension; use one of "
                         f"{sorted(FORMATS)}")
    return FORMATS[ext]


def read_table(path: str | Path) -> pa.Table:
    """Read a Parquet, CSV or Arrow IPC file.  FileNotFoundError when it does not exist."""
    path = Path(path)
    fmt = file_format(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if fmt == "parquet":
        from . import read_parquet

        return read_parquet(str(path))
    if fmt == "csv":
        return pcsv.read_csv(path)
    return feather.read_table(path)


def write_table(table: pa.Table, path: str | Path) -> None:
    """Write ``table`` to ``path`` through a temporary file in the same folder, renamed when complete,
    so a failure never leaves half a file."""
    path = Path(path)
    fmt = file_format(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"output folder does not exist: {folder}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        if fmt == "parquet":
            pq.write_table(table, tmp)
        elif fmt == "csv":
            pcsv.write_csv(table, tmp)
        else:
            feather.write_feather(table, tmp, compression="uncompressed")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
