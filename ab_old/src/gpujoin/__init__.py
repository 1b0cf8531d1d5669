"""gpujoin: relational joins and grouped aggregations on NVIDIA GPUs, with a multi-threaded CPU engine.

The API speaks Polars: ``join(left, right, on=..., how=...)`` and
``group_by(table, by).agg(name=(column, function))`` take and return Arrow tables.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as _pq

from .backend import algorithms, devices
from .errors import ColumnNotFoundError, ComputeError, GpujoinError, InvalidOperationError, SchemaError
from .plan.explain import Plan, explain
from .plan.groupby import GroupBy, group_by
from .expr import col
from .plan.join import JoinStats, join
from .plan.join_where import join_where
from .outofcore.stream import pinned_host, release_host_memory
from .table import Table

__version__ = "0.1.0"


def read_parquet(path, columns: list[str] | None = None) -> pa.Table:
    """Read a Parquet file (or a folder of them) into a :class:`pyarrow.Table`, optionally only ``columns``.

    ``string_view`` columns (as tpchgen-cli writes) come back as ``large_string``, which every
    Arrow compute kernel supports.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ColumnNotFoundError
        A name in ``columns`` is not in the file.
    """
    import os

    if not os.path.exists(path):
        raise FileNotFoundError(f"no such Parquet file or folder: {path}")
    if columns is not None:
        names = _pq.read_schema(path).names if os.path.isfile(path) else _pq.ParquetDataset(path).schema.names
        missing = [c for c in columns if c not in names]
        if missing:
            raise ColumnNotFoundError(f"column {missing[0]!r} not found in {path}; its columns are {names}")
    from .io import large_strings

    return large_strings(_pq.read_table(path, columns=columns))


__all__ = [
    "Table", "join", "join_where", "col", "group_by", "GroupBy", "JoinStats", "explain", "Plan", "read_parquet", "algorithms", "devices",
    "pinned_host", "release_host_memory",
    "GpujoinError", "ColumnNotFoundError", "SchemaError", "ComputeError", "InvalidOperationError",
]
