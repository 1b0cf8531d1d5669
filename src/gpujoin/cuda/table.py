"""DeviceTable: columns in GPU memory, the input and output of device-resident joins."""

from __future__ import annotations

import cupy as cp
import numpy as np
import pyarrow as pa


class DeviceTable:
    """Named columns on the GPU.

    Parameters
    ----------
    columns : dict of name -> CuPy array (n,), fixed-width (integers, floats, bool)
    validity : dict of name -> uint8/bool CuPy array (n,), 1 where the value is present;
        a column without an entry has no nulls
    types : dict of name -> pyarrow type to give the column on the host (default: from dtype)
    """

    def __init__(self, columns: dict, validity: dict | None = None, types: dict | None = None):
        self.columns = {name: cp.asarray(a) for name, a in columns.items()}
        lengths = {a.shape[0] for a in self.columns.values()} if self.columns else {0}
        if len(lengths) > 1 or any(a.ndim != 1 for a in self.columns.values()):
            raise ValueError(f"DeviceTable columns must be 1-D and of one length, got {sorted(lengths)}")
        self.validity = {k: v for k, v in (validity or {}).items() if v is not None}
        self.types = dict(types or {})

    @property
    def num_rows(self) -> int:
        return next(iter(self.columns.values())).shape[0] if self.columns else 0

    @property
    def column_names(self) -> list[str]:
        return list(self.columns)

    def __getitem__(self, name: str) -> cp.ndarray:
        return self.columns[name]

    @classmethod
    def from_arrow(cls, table: pa.Table) -> DeviceTable:
        """Copy a pyarrow table's fixed-width columns to the GPU (strings are not supported)."""
        cols, valid, types = {}, {}, {}
        for name, col in zip(table.column_names, table.columns):
            t = col.type
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                    or pa.types.is_temporal(t)):
                raise TypeError(f"column {name!r}: type {t} cannot live in a DeviceTable; only fixed-width "
                                f"numeric, bool and temporal columns can")
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            if pa.types.is_temporal(t):
                storage = arr.view(pa.int32() if t.bit_width == 32 else pa.int64())
            else:
                storage = arr
            if arr.null_count:  # nulls become 0 under a validity mask (to_numpy would make floats)
                valid[name] = cp.asarray(arr.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8))
                storage = storage.fill_null(False if pa.types.is_boolean(t) else 0)
            values = storage.to_numpy(zero_copy_only=False)
            cols[name] = cp.asarray(values.astype(np.uint8) if values.dtype == np.bool_ else values)
            types[name] = t
        return cls(cols, valid, types)

    def to_arrow(self) -> pa.Table:
        """Copy to the host as a pyarrow table (nulls where validity is 0)."""
        arrays = []
        for name, a in self.columns.items():
            values = cp.asnumpy(a)
            mask = None
            if name in self.validity:
                mask = ~cp.asnumpy(self.validity[name]).astype(bool)
            t = self.types.get(name)
            if t is not None and pa.types.is_boolean(t):
                values = values.astype(bool)
            arr = pa.array(values, mask=mask)
            if t is not None and arr.type != t:
                arr = arr.view(t) if pa.types.is_temporal(t) else arr.cast(t)
            arrays.append(arr)
        return pa.Table.from_arrays(arrays, names=list(self.columns))

    def __repr__(self) -> str:
        cols = ", ".join(f"{n}: {a.dtype}{'?' if n in self.validity else ''}" for n, a in self.columns.items())
        return f"DeviceTable({self.num_rows} rows; {cols})"


def as_device_table(x) -> DeviceTable:
    return x if isinstance(x, DeviceTable) else DeviceTable(x)
