"""The host Table: named, typed columns with optional validity masks, backed by Arrow.

A :class:`Table` holds its data as a :class:`pyarrow.Table`, so conversion to and from Arrow is
zero-copy, and pandas, Polars and dicts of NumPy arrays come in through Arrow.  A column's data
is reached as NumPy (:meth:`Table.column`) without a copy wherever Arrow's layout allows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import ColumnNotFoundError, InvalidOperationError

#: Arrow types a column may have.  Keys may use all but float/bool for joins (see plan.keys).
SUPPORTED_TYPES = (
    "int8..int64, uint8..uint64, float32, float64, bool, date32, timestamp, "
    "decimal128, string (string, large_string, string_view), null (all-null columns)"
)


def is_string_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def is_supported_type(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t) and not pa.types.is_float16(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
        or pa.types.is_date64(t)
        or pa.types.is_time(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_duration(t)
        or pa.types.is_decimal128(t)
        or is_string_type(t)
        or pa.types.is_null(t)
    )


@dataclass(frozen=True)
class Column:
    """One column as NumPy: ``values`` of shape (n,), ``validity`` a bool (n,) mask or None.

    ``values`` holds the physical representation (date32 as int32 days, timestamps as int64,
    decimals as their Arrow array since NumPy has no 128-bit integer); slots where
    ``validity`` is False hold unspecified values.
    """

    name: str
    type: pa.DataType
    values: Any
    validity: np.ndarray | None


class Table:
    """Named, typed columns on the host.

    Parameters
    ----------
    data : pyarrow.Table, pandas.DataFrame, polars.DataFrame, Table, or mapping
        A mapping goes from column name to a NumPy array, a ``(values, validity)`` pair with a
        bool mask (True = valid), a list, or an Arrow array.

    Raises
    ------
    TypeError
        ``data`` is none of the above.
    InvalidOperationError
        A column has a type gpujoin does not support (see ``SUPPORTED_TYPES``).
    """

    __slots__ = ("_arrow",)

    def __init__(self, data: Any):
        self._arrow = to_arrow_table(data)
        for field in self._arrow.schema:
            if not is_supported_type(field.type):
                raise InvalidOperationError(
                    f"column {field.name!r} has type {field.type}, which gpujoin does not support; "
                    f"supported: {SUPPORTED_TYPES}. Cast it first (for example with pyarrow.compute.cast)."
                )

    # -- conversions -------------------------------------------------------------------------
    @classmethod
    def from_arrow(cls, table: pa.Table) -> "Table":
        return cls(table)

    @classmethod
    def from_pandas(cls, df) -> "Table":
        return cls(df)

    @classmethod
    def from_polars(cls, df) -> "Table":
        return cls(df)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Table":
        return cls(data)

    def to_arrow(self) -> pa.Table:
        """The data as a :class:`pyarrow.Table`, without a copy."""
        return self._arrow

    def to_pandas(self):
        return self._arrow.to_pandas()

    def to_polars(self):
        import polars as pl

        return pl.from_arrow(self._arrow)

    def to_dict(self) -> dict[str, np.ndarray]:
        """Column name to NumPy array; nulls become NaN/None as :meth:`pyarrow.Array.to_numpy` gives."""
        return {name: col.to_numpy() for name, col in zip(self._arrow.column_names, self._arrow.columns)}

    # -- access ------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return "cpu"

    @property
    def num_rows(self) -> int:
        return self._arrow.num_rows

    def __len__(self) -> int:
        return self._arrow.num_rows

    @property
    def column_names(self) -> list[str]:
        return self._arrow.column_names

    @property
    def schema(self) -> pa.Schema:
        return self._arrow.schema

    def column(self, name: str) -> Column:
        """The column ``name`` as :class:`Column` (NumPy values and validity)."""
        arr = self.arrow_column(name)
        validity = None
        if arr.null_count:
            validity = np.asarray(arr.is_valid())
        t = arr.type
        if pa.types.is_decimal(t) or is_string_type(t):
            values = arr
        else:
            physical = arr.view(pa.int32()) if pa.types.is_date32(t) else arr
            if pa.types.is_timestamp(t):
                physical = arr.view(pa.int64())
            if arr.null_count and _fixed_width_view(physical.type) is not None:
                values = fixed_width_values(physical)  # (to_numpy would make floats of nullable integers)
            else:
                values = physical.to_numpy(zero_copy_only=False)
        return Column(name, t, values, validity)

    def arrow_column(self, name: str) -> pa.Array:
        """The column ``name`` as one contiguous Arrow array."""
        check_columns(self._arrow, [name], "table")
        return combined(self._arrow, name)

    def __getitem__(self, name: str) -> pa.ChunkedArray:
        check_columns(self._arrow, [name], "table")
        return self._arrow.column(name)

    def __repr__(self) -> str:
        cols = ", ".join(f"{f.name}: {f.type}" for f in self._arrow.schema)
        return f"gpujoin.Table[{self.num_rows} rows; {cols}]"


def combined(table: pa.Table, name: str) -> pa.Array:
    """Column ``name`` of an Arrow table as one contiguous array (chunks concatenated when several)."""
    col = table.column(name)
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def decoded(arr: pa.Array) -> pa.Array:
    """A dictionary-encoded column (pandas' categoricals, Polars' Categorical and Enum, Parquet's
    dictionary pages) as its values; any other column itself.  Keys and aggregates compare
    values, not codes: two tables' codes of one string differ."""
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def check_columns(table: pa.Table, names: Iterable[str], side: str) -> None:
    """Raise ColumnNotFoundError for the first of ``names`` missing from ``table``."""
    present = set(table.column_names)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"column names must be str, got {type(name).__name__}: {name!r}")
        if name not in present:
            raise ColumnNotFoundError(
                f"column {name!r} not found in the {side} table; its columns are {table.column_names}"
            )


def to_arrow_table(data: Any) -> pa.Table:
    """Normalize a supported host input into a :class:`pyarrow.Table` (zero-copy where possible;
    string_view and binary_view columns, which Arrow's take and hash kernels lack, as
    large_string and large_binary)."""
    return without_views(_to_table(data))


def _view_free(t: pa.DataType) -> pa.DataType | None:
    """The type a view column is cast to, or None for any other."""
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    return None


def without_views(table: pa.Table) -> pa.Table:
    """``table`` with its string_view and binary_view columns (and dictionaries of them) as
    large_string and large_binary: Arrow's take and hash kernels lack the views."""
    for i, field in enumerate(table.schema):
        col, t = table.column(i), field.type
        dictionary = pa.types.is_dictionary(t)
        to = _view_free(t.value_type if dictionary else t)
        if to is None:
            continue
        if dictionary:  # (its dictionaries cast, the codes kept: Arrow's cast of the whole column
            # takes from the views, which it cannot)
            col = pa.chunked_array([pa.DictionaryArray.from_arrays(c.indices, c.dictionary.cast(to))
                                    for c in col.chunks], pa.dictionary(t.index_type, to, t.ordered))
        else:
            col = col.cast(to)
        table = table.set_column(i, field.name, col)
    return table


def _to_table(data: Any) -> pa.Table:
    if isinstance(data, Table):
        return data.to_arrow()
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if type(data).__module__.startswith("pyarrow") and hasattr(data, "to_table"):  # pyarrow.dataset
        return data.to_table()
    if not isinstance(data, (Mapping, str, bytes)) and type(data).__module__.split(".")[0] not in ("pandas", "polars") \
            and hasattr(data, "__iter__") and not hasattr(data, "__array__"):
        batches = list(data)  # an iterable of RecordBatches (e.g. a Parquet file read by batches)
        if batches and all(isinstance(b, pa.RecordBatch) for b in batches):
            return pa.Table.from_batches(batches)
        if batches:
            raise TypeError(f"expected a gpujoin.Table, pyarrow.Table, pandas.DataFrame, polars.DataFrame, a dict "
                            f"of arrays, or an iterable of pyarrow.RecordBatch objects; got a {type(data).__name__} "
                            f"of {type(batches[0]).__name__}")
        raise ValueError("an empty iterable of record batches has no schema; pass a pyarrow.Table instead")
    mod = type(data).__module__.split(".")[0]
    if mod == "pandas":
        try:
            return pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:  # (an object column of mixed types, say)
            raise TypeError(f"this pandas DataFrame does not convert to Arrow: {exc}; give each column one type "
                            f"(e.g. .astype(str) or pd.to_numeric)") from None
    if mod == "polars":
        if hasattr(data, "collect") and not hasattr(data, "to_arrow"):  # a LazyFrame: its result
            data = data.collect()
        return data.to_arrow()
    if isinstance(data, Mapping):
        arrays, names = [], []
        for name, value in data.items():
            names.append(str(name))
            arrays.append(_to_arrow_array(name, value))
        return pa.Table.from_arrays(arrays, names=names)
    raise TypeError(
        f"expected a gpujoin.Table, pyarrow.Table, pandas.DataFrame, polars.DataFrame, a dict of "
        f"arrays, or record batches (a RecordBatchReader, a pyarrow.dataset, an iterable), got {type(data).__module__}.{type(data).__name__}"
    )


def _to_arrow_array(name: str, value: Any) -> pa.Array:
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        values, validity = value
        mask = None if validity is None else ~np.asarray(validity, dtype=bool)
        return pa.array(np.asarray(values), mask=mask)
    if type(value).__module__.split(".")[0] == "cupy":
        raise TypeError(
            f"column {name!r} is a CuPy array; device tables need the CUDA backend, which this "
            f"build of gpujoin does not have. Copy it to the host with .get() first."
        )
    return pa.array(value)


def _fixed_width_view(t: pa.DataType):
    """The NumPy-viewable physical type of a fixed-width column, or None (strings, decimals, bools)."""
    if pa.types.is_integer(t) or pa.types.is_floating(t) and not pa.types.is_float16(t):
        return t
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_timestamp(t):
        return pa.int64()
    return None


def fixed_width_values(arr: pa.Array) -> np.ndarray:
    """The values of an integer or floating Arrow array (or one viewed as such) as NumPy, in
    place; a null slot holds whatever its buffer does.  (``to_numpy`` turns integers with nulls
    into floats, which rounds int64s past 2^53: 2^63 - 1 came back as 2^63 and failed its cast.)"""
    dt = np.dtype(arr.type.to_pandas_dtype())
    if not len(arr):
        return np.empty(0, dt)
    return np.frombuffer(arr.buffers()[1], dt, count=arr.offset + len(arr))[arr.offset:]


def take(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """Rows of ``table`` at ``indices`` (int32 or int64 (n,)); an index of -1 gives a row of nulls.

    Fixed-width columns are gathered by a multi-threaded kernel; the others by Arrow's take.
    """
    from .cpu.kernels import gather

    if not (isinstance(indices, np.ndarray) and indices.dtype in (np.int32, np.int64)):
        indices = np.asarray(indices, dtype=np.int64)
    indices = np.ascontiguousarray(indices)
    n = indices.size
    if n == table.num_rows and (n == 0 or (indices[0] == 0 and indices[-1] == n - 1
                                          and np.array_equal(indices, np.arange(n)))):
        return table  # the identity: every row once, in order
    missing = indices < 0 if indices.size and indices.min() < 0 else None
    arrow_idx = None
    cols = []
    for col in table.columns:
        phys = _fixed_width_view(col.type)
        if phys is None or indices.size < (1 << 16):
            if arrow_idx is None:
                arrow_idx = pa.array(indices, mask=missing)
            cols.append(col.take(arrow_idx))
            continue
        arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        src = fixed_width_values(arr.view(phys))
        out = np.empty(indices.size, src.dtype)
        gather(src, indices, out)
        invalid = missing
        if arr.null_count:
            valid_src = np.asarray(arr.is_valid())
            valid = np.empty(indices.size, np.bool_)
            gather(valid_src, indices, valid)
            invalid = ~valid if invalid is None else invalid | ~valid
        cols.append(pa.array(out, mask=invalid).view(col.type) if phys != col.type else pa.array(out, mask=invalid))
    return pa.Table.from_arrays(cols, schema=table.schema)


def decimal_to_int64(arr: pa.Array) -> np.ndarray:
    """The unscaled values of a decimal128 array as int64 (n,); nulls read 0.  Any precision
    whose values fit 64 bits (a wider type's, decimal128(38, s) as SQL sums and Spark write it,
    checked value by value: ``plan.keys.decimal64``).

    Raises TypeError where a value does not fit 64 bits (or the array is not decimal128).
    """
    from .plan.keys import decimal_words, decimal64

    t = arr.type
    if not pa.types.is_decimal128(t):
        raise TypeError(f"expected decimal128, got {t}")
    # (precision <= 18: the low word holds the whole value; wider: where every value fits)
    out = decimal_words(arr)[0] if t.precision <= 18 else decimal64(arr)
    if out is None:
        raise TypeError(f"decimal values of {t} beyond 64 bits (|unscaled value| >= 2^63)")
    out = np.array(out, np.int64)  # (a copy: the nulls zeroed below)
    if arr.null_count:
        out[~np.asarray(arr.is_valid())] = 0
    return out


def int64_to_decimal(values: np.ndarray, t: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """int64 unscaled values (n,) as a decimal128 array of type ``t`` (the inverse of
    :func:`decimal_to_int64`); ``valid`` (bool (n,)) marks the present values."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    words = np.empty((values.size, 2), np.int64)
    words[:, 0], words[:, 1] = values, values >> 63  # the high word sign-extends
    arr = pa.Array.from_buffers(t, values.size, [None, pa.py_buffer(words)])
    if valid is not None and not valid.all():
        arr = pc.if_else(pa.array(valid), arr, pa.scalar(None, t))
    return arr


__all__ = ["Table", "Column", "check_columns", "combined", "to_arrow_table", "take", "decimal_to_int64",
           "int64_to_decimal"]


def device_array(a) -> bool:
    """Whether ``a`` is a device array (the CUDA array interface).  The type is asked first:
    CuPy's interface is a property that builds a dict, 5 us of a cold planner's host time on an
    H200's host (docs/BENCHMARKS.md, issue 17 item 3)."""
    return hasattr(type(a), "__cuda_array_interface__") or hasattr(a, "__cuda_array_interface__")


def on_device(x) -> bool:
    """A DeviceTable or a dict of GPU arrays (checked without importing CuPy)."""
    if type(x).__name__ == "DeviceTable":
        return True
    return isinstance(x, dict) and bool(x) and all(device_array(v) for v in x.values())
