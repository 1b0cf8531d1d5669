"""The operators the TPC-H queries are written in, on two engines with one interface.

``Query`` runs them on Arrow tables in host memory (Arrow compute for filters and
expressions; joins and group-bys through gpujoin on the chosen device).  ``DeviceQuery`` runs
them on DeviceTables in GPU memory: filters and expressions are CuPy element-wise operations,
joins and group-bys the GPU algorithms on device-resident tables, and only the (small) final
result is copied to the host.  The queries in :mod:`gpujoin.tpch.queries` are written once
against these methods.

Literals are Python values: ``str`` for strings, ``datetime.date`` for dates, ``Decimal``
for decimals, ``int``; ``Col("name")`` compares with another column.  Null values compare
false, as in SQL.  In GPU memory strings are dictionary codes, so they compare by = and IN
only (a TypeError says so otherwise).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..plan.groupby import group_by
from ..plan.join import join

_EPOCH = dt.date(1970, 1, 1)


class Col(str):
    """A column name on the right of a comparison: compare with that column, not a literal."""


def revenue_type(price: pa.DataType, discount: pa.DataType) -> pa.DataType:
    """The decimal type of price * (1 - discount), as Arrow (and SQL) type it."""
    empty = lambda t: pa.array([], t)  # noqa: E731
    return pc.multiply(empty(price), pc.subtract(pa.scalar(Decimal(1), discount), empty(discount))).type


class Query:
    """The operators on Arrow tables in host memory; joins on ``device``, group-bys on
    ``group_by_device`` (default: the same)."""

    def __init__(self, device: str = "auto", group_by_device: str | None = None):
        self.device = device
        self.group_by_device = group_by_device or device

    # relational operators
    def j(self, left, right, left_on, right_on, how="inner"):
        return join(left, right, left_on=left_on, right_on=right_on, how=how, device=self.device)

    def g(self, table, by, **aggs):
        return group_by(table, by, device=self.group_by_device).agg(**aggs)

    def where(self, t, mask, columns: list[str] | None = None):
        """Rows where ``mask`` holds; projected first, so the filter copies only ``columns``
        (Arrow tables and DeviceTables alike)."""
        return (t if columns is None else t.select(columns)).filter(mask)

    def select(self, t, columns):
        return t.select(columns)

    def rename(self, t, mapping: dict[str, str]):
        return t.rename_columns([mapping.get(n, n) for n in t.column_names])

    def with_columns(self, t, **columns):
        for name, values in columns.items():
            t = t.append_column(name, values)
        return t

    # predicates
    def _cmp(self, fn, t, name, value):
        other = t[value] if isinstance(value, Col) else (
            pa.scalar(value, t[name].type) if isinstance(value, Decimal) else value)
        return fn(t[name], other)

    def eq(self, t, name, value):
        return self._cmp(pc.equal, t, name, value)

    def lt(self, t, name, value):
        return self._cmp(pc.less, t, name, value)

    def le(self, t, name, value):
        return self._cmp(pc.less_equal, t, name, value)

    def gt(self, t, name, value):
        return self._cmp(pc.greater, t, name, value)

    def ge(self, t, name, value):
        return self._cmp(pc.greater_equal, t, name, value)

    def between(self, t, name, low, high):
        """low <= column <= high (SQL BETWEEN)."""
        return self.and_(self.ge(t, name, low), self.le(t, name, high))

    def isin(self, t, name, values):
        return pc.is_in(t[name], pa.array(values))

    def and_(self, *masks):
        out = masks[0]
        for m in masks[1:]:
            out = pc.and_(out, m)
        return out

    def or_(self, *masks):
        out = masks[0]
        for m in masks[1:]:
            out = pc.or_(out, m)
        return out

    def not_(self, mask):
        return pc.invert(mask)

    # expressions
    def revenue(self, t):
        """l_extendedprice * (1 - l_discount), exact in decimal arithmetic like the SQL."""
        disc = t["l_discount"]
        return pc.multiply(t["l_extendedprice"], pc.subtract(pa.scalar(Decimal(1), disc.type), disc))

    def year(self, t, name):
        return pc.year(t[name])

    def as_int(self, mask):
        """A boolean column as int64 0/1 (SQL's CASE WHEN mask THEN 1 ELSE 0)."""
        return mask.cast(pa.int64())

    def total(self, values) -> pa.Scalar:
        """The sum of a decimal column as SQL types it, decimal128(38, scale) (null when empty)."""
        typ = pa.decimal128(38, values.type.scale)
        return pa.scalar(pc.sum(values).as_py() if len(values) else None, typ)

    # output
    def result(self, t, order: list[tuple[str, str]] | None = None, limit: int | None = None,
               decode_strings: bool = True) -> pa.Table:
        """The query's result as an Arrow table, sorted by ``order`` and cut to ``limit`` rows."""
        t = t.sort_by(order) if order else t
        return t.slice(0, limit) if limit is not None else t


class DeviceQuery(Query):
    """The operators on DeviceTables in GPU memory (joins and group-bys on the GPU)."""

    def __init__(self):
        super().__init__("cuda")

    def rename(self, t, mapping):
        return t.rename(mapping)

    def with_columns(self, t, **columns):
        """``name=(values, pyarrow type or None)`` per new column."""
        for name, (values, typ) in columns.items():
            t = t.with_column(name, values, typ)
        return t

    def _value(self, t, name, value):
        """A literal as the stored representation of column ``name`` (string: its code, -1 if absent)."""
        if name in t.dictionaries:
            i = pc.index(t.dictionaries[name], value).as_py()
            return -1 if i is None else i
        if isinstance(value, dt.date):
            return (value - _EPOCH).days
        if isinstance(value, Decimal):
            return int(value.scaleb(t.types[name].scale))
        return value

    def _cmp(self, fn, t, name, value):
        if isinstance(value, Col):
            m = fn(t[name], t[value])
            v = t.validity.get(value)
            m = m if v is None else m & v.astype(bool)
        else:
            m = fn(t[name], self._value(t, name, value))
        v = t.validity.get(name)
        return m if v is None else m & v.astype(bool)

    def eq(self, t, name, value):
        if isinstance(value, Col) and (name in t.dictionaries or value in t.dictionaries):
            # two string columns: their codes re-coded into one dictionary first (each table's
            # own, from its own source), unless they share one
            from ..cuda.table import unify_dictionaries

            if (name in t.dictionaries) != (value in t.dictionaries):
                s, o = (name, value) if name in t.dictionaries else (value, name)
                raise TypeError(f"comparing {name!r} with {value!r}: {s!r} is a string column and {o!r} is not; "
                                f"cast one to the other's type")
            (t,) = unify_dictionaries([t], [[(0, name), (0, value)]])
        return self._cmp(lambda a, b: a == b, t, name, value)

    def _ordered(self, t, *names):
        for n in names:
            if n in t.dictionaries:
                raise TypeError(f"column {n!r} holds dictionary codes in GPU memory, which are not in string "
                                f"order: only = and IN compare strings here")

    def lt(self, t, name, value):
        self._ordered(t, name, *([value] if isinstance(value, Col) else []))
        return self._cmp(lambda a, b: a < b, t, name, value)

    def le(self, t, name, value):
        self._ordered(t, name, *([value] if isinstance(value, Col) else []))
        return self._cmp(lambda a, b: a <= b, t, name, value)

    def gt(self, t, name, value):
        self._ordered(t, name, *([value] if isinstance(value, Col) else []))
        return self._cmp(lambda a, b: a > b, t, name, value)

    def ge(self, t, name, value):
        self._ordered(t, name, *([value] if isinstance(value, Col) else []))
        return self._cmp(lambda a, b: a >= b, t, name, value)

    def isin(self, t, name, values):
        import cupy as cp

        codes = cp.asarray([self._value(t, name, v) for v in values], dtype=t[name].dtype)
        m = cp.isin(t[name], codes)
        v = t.validity.get(name)
        return m if v is None else m & v.astype(bool)

    def and_(self, *masks):
        out = masks[0]
        for m in masks[1:]:
            out = out & m
        return out

    def or_(self, *masks):
        out = masks[0]
        for m in masks[1:]:
            out = out | m
        return out

    def not_(self, mask):
        return ~mask

    def revenue(self, t):
        """(price * (10^s - discount), its decimal type): exact on the unscaled int64 values."""
        import cupy as cp

        pt, dt_ = t.types["l_extendedprice"], t.types["l_discount"]
        one = cp.int64(10 ** dt_.scale)
        return t["l_extendedprice"] * (one - t["l_discount"]), revenue_type(pt, dt_)

    def year(self, t, name):
        """The calendar year of a date32 column (int64), by the days-to-civil conversion
        (H. Hinnant, "chrono-compatible low-level date algorithms")."""
        z = t[name].astype(np.int64) + 719468
        era = z // 146097
        doe = z - era * 146097
        yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
        doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
        mp = (5 * doy + 2) // 153
        return yoe + era * 400 + (mp >= 10), pa.int64()  # Jan, Feb (mp 10, 11) end the shifted year

    def as_int(self, mask):
        return mask.astype(np.int64), pa.int64()

    def total(self, values):
        arr, typ = values
        total = Decimal(int(arr.sum())).scaleb(-typ.scale) if arr.size else None
        return pa.scalar(total, pa.decimal128(38, typ.scale))

    def result(self, t, order=None, limit=None, decode_strings=True):
        if order and limit is not None and t.num_rows > limit:
            t = t.filter(self._top(t, order, limit))
        return super().result(t.to_arrow(decode_strings=decode_strings), order, limit)

    def _top(self, t, order, limit):
        """A mask of the first ``limit`` rows in ``order`` (ties broken by row order)."""
        import cupy as cp

        if any(t[name].dtype.kind == "f" for name, _ in order):
            return cp.ones(t.num_rows, bool)  # float keys: the host sorts the whole result
        keys = []
        for name, direction in order:
            k = t[name].astype(cp.int64)
            if name in t.dictionaries:  # codes to the rank of their string
                rank = np.empty(len(t.dictionaries[name]), np.int64)
                rank[pc.sort_indices(t.dictionaries[name]).to_numpy()] = np.arange(rank.size)
                k = cp.asarray(rank)[k]
            keys.append(~k if direction == "descending" else k)  # ~k = -k - 1: reverses, never overflows
        rows = cp.lexsort(cp.stack(keys[::-1]))[:limit]  # lexsort: the last key is the primary one
        mask = cp.zeros(t.num_rows, bool)
        mask[rows] = True
        return mask
