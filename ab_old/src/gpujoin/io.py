"""File input and output for the CLI: Parquet (a file or a folder of them), CSV and Arrow IPC,
chosen by extension; reads by record batches after a host-memory check; writes by batches to a
temporary file renamed when complete."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.dataset as ds
import pyarrow.feather as feather
import pyarrow.parquet as pq

from . import progress

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".arrow": "ipc", ".feather": "ipc",
           ".ipc": "ipc"}

#: Rows a row group (Parquet) or record batch (CSV, IPC) of a written file holds at least.
WRITE_ROWS = 1 << 20


def file_format(path: str | Path) -> str:
    """The format of ``path`` by its extension (a folder: Parquet); ValueError naming the valid
    ones otherwise."""
    path = Path(path)
    if path.is_dir():
        return "parquet"
    ext = path.suffix.lower()
    if ext not in FORMATS:
        raise ValueError(f"cannot tell the format of {str(path)!r} from its extension; use one of "
                         f"{sorted(FORMATS)}")
    return FORMATS[ext]


def large_strings(table: pa.Table) -> pa.Table:
    """``string_view`` columns (as tpchgen-cli writes) as ``large_string``, which every Arrow
    compute kernel supports."""
    if any(pa.types.is_string_view(f.type) for f in table.schema):
        table = table.cast(pa.schema([pa.field(f.name, pa.large_string(), f.nullable)
                                      if pa.types.is_string_view(f.type) else f for f in table.schema]))
    return table


def parquet_bytes(dataset: ds.Dataset) -> int:
    """The uncompressed bytes of a Parquet dataset's row groups (from the footers: nothing is read)."""
    total = 0
    for frag in dataset.get_fragments():
        md = frag.metadata
        total += sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    return total


def read_table(path: str | Path, label: str = "") -> pa.Table:
    """Read a Parquet file or folder (record batch by record batch, after checking that host
    memory holds its uncompressed size), a CSV or an Arrow IPC file.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    MemoryError
        The data would not fit in host memory (nothing is read).
    """
    from .outofcore.budget import check_host

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    fmt = file_format(path)
    if fmt == "parquet":
        dataset = ds.dataset(str(path), format="parquet")
        check_host(parquet_bytes(dataset), f"reading {path} (its uncompressed size)",
                   "select fewer columns, or filter the file first")
        batches = []
        with progress.task(f"read {label or path.name}", dataset.count_rows()) as shown:
            for b in dataset.to_batches():
                batches.append(b)
                shown.advance(b.num_rows)
        return large_strings(pa.Table.from_batches(batches, schema=dataset.schema))
    if fmt == "csv":
        return pcsv.read_csv(path)
    return feather.read_table(path)


def read_share(path: str | Path, rank: int, size: int, label: str = "") -> pa.Table:
    """Rank ``rank`` of ``size``'s share of a table: every ``size``-th row group of a Parquet file
    or folder (the ranks read disjoint row groups that together are the whole), or a contiguous
    block of a CSV or Arrow IPC file's rows.

    Raises
    ------
    FileNotFoundError, MemoryError
        As :func:`read_table` (the share's uncompressed size is what host memory must hold).
    """
    from .outofcore.budget import check_host

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if file_format(path) != "parquet":
        t = read_table(path, label)
        return t.slice(t.num_rows * rank // size, t.num_rows * (rank + 1) // size - t.num_rows * rank // size)
    dataset = ds.dataset(str(path), format="parquet")
    groups = [rg for frag in dataset.get_fragments() for rg in frag.split_by_row_group()]
    mine = groups[rank::size]
    need = sum(rg.row_groups[0].total_byte_size for rg in mine)  # uncompressed bytes of the row groups
    check_host(need, f"reading rank {rank}'s share of {path} (its uncompressed size)",
               "run more ranks, or select fewer columns")
    batches = [b for rg in mine for b in rg.to_batches(schema=dataset.schema)]
    return large_strings(pa.Table.from_batches(batches, schema=dataset.schema))


class BatchWriter:
    """Record batches written to ``path`` through a temporary file in the same folder: ``commit``
    renames it into place; an error or Ctrl-C inside the ``with`` block removes it, so a failure
    never leaves half a file (nor a stray temporary one).

    >>> with BatchWriter("out.parquet") as w:   # doctest: +SKIP
    ...     for batch in batches:
    ...         w.write(batch)
    ...     w.commit(schema)
    """

    def __init__(self, path: str | Path, rows: int = WRITE_ROWS):
        self.path = Path(path)
        self.format = FORMATS.get(self.path.suffix.lower()) or file_format(self.path)
        self.folder = self.path.parent if str(self.path.parent) else Path(".")
        if not self.folder.is_dir():
            raise FileNotFoundError(f"output folder does not exist: {self.folder}")
        self.tmp = None  # made on entering the with block, so that its exit always removes it
        self.rows_per_write = rows
        self.rows = 0
        self._writer = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._done = False

    def _open(self, schema: pa.Schema):
        if self._writer is None:
            if self.format == "parquet":
                self._writer = pq.ParquetWriter(self.tmp, schema)
            elif self.format == "csv":
                self._writer = pcsv.CSVWriter(self.tmp, schema)
            else:
                self._writer = pa.ipc.new_file(self.tmp, schema)
        return self._writer

    def _flush(self) -> None:
        if self._pending:
            t = pa.Table.from_batches(self._pending)
            self._pending, self._pending_rows = [], 0
            self._open(t.schema).write_table(t)

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows (written once ``rows`` of them are pending: row groups of a useful size)."""
        for b in (batch.to_batches() if isinstance(batch, pa.Table) else [batch]):
            if b.num_rows:
                self._pending.append(b)
                self._pending_rows += b.num_rows
                self.rows += b.num_rows
        if self._pending_rows >= self.rows_per_write:
            self._flush()

    def commit(self, schema: pa.Schema) -> None:
        """Finish the file (``schema`` gives an empty output its columns) and rename it into place."""
        self._flush()
        self._open(schema).close()
        self._writer = None
        os.replace(self.tmp, self.path)
        self._done = True

    def abort(self) -> None:
        """Drop what was written: close the writer and remove the temporary file."""
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - the file is removed next either way
                pass
            self._writer = None
        if self.tmp is not None and os.path.exists(self.tmp):
            os.unlink(self.tmp)
        self._done = True

    def __enter__(self) -> BatchWriter:
        try:
            fd, self.tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.folder)
            os.close(fd)
        except BaseException:  # Ctrl-C between the two: the file must not stay
            self.abort()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if not self._done:  # an exception (KeyboardInterrupt too), or no commit
            self.abort()


def write_table(table: pa.Table, path: str | Path) -> None:
    """Write ``table`` to ``path`` by batches through a temporary file renamed when complete."""
    with BatchWriter(path) as w:
        with progress.task(f"write {Path(path).name}", table.num_rows) as shown:
            for b in table.to_batches(max_chunksize=WRITE_ROWS):
                w.write(b)
                shown.advance(b.num_rows)
        w.commit(table.schema)
