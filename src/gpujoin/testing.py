"""Test helpers: table comparison without row order, and hypothesis strategies for join inputs."""

from __future__ import annotations

import math
from decimal import Decimal

import pyarrow as pa

from .table import to_arrow_table


def _sortable(v):
    # None first, then by type name, then value: a total order over mixed column values
    if v is None:
        return (0, "", 0)
    if isinstance(v, float) and math.isnan(v):
        return (2, "float", 0)
    return (1, type(v).__name__ if not isinstance(v, (int, float, Decimal)) else "num", v)


def _rows(table: pa.Table) -> list[tuple]:
    cols = [c.to_pylist() for c in table.columns]
    return list(zip(*cols)) if cols else []


def _close(a, b, rel: float) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, float) or isinstance(b, float):
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return math.isclose(fa, fb, rel_tol=rel, abs_tol=rel)
    return a == b


# (not floats: a cast from float64 to float32 rounds without an error)
_FAMILIES = (pa.types.is_integer, pa.types.is_decimal,
             lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
             lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t))


def _decoded(t: pa.Table) -> pa.Table:
    """``t`` with each dictionary column replaced by its values (Arrow does not sort dictionaries),
    its fields nullable and without metadata (which the row-by-row path does not look at)."""
    cols = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in t.columns]
    return pa.Table.from_arrays(cols, names=t.column_names)


def _common_schema(lt: pa.Table, rt: pa.Table) -> pa.Table | None:
    """``lt`` with each column cast to ``rt``'s type where the two differ only within a family
    (integers, decimals, strings, binaries), as the row-by-row path compares their Python
    values; None where a column's types are of different kinds or a value does not fit."""
    for i, (a, b) in enumerate(zip(lt.schema, rt.schema)):
        if a.type == b.type:
            continue
        if not any(f(a.type) and f(b.type) for f in _FAMILIES):
            return None
        try:
            lt = lt.set_column(i, a.name, lt.column(i).cast(b.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    return lt


def _same_when_sorted(lt: pa.Table, rt: pa.Table, check_row_order: bool) -> bool:
    """Fast path: equal after Arrow sorts both by every column (columns of one kind, such as
    int32 against int64 or a dictionary against its strings, compared by value).

    False means "look row by row" (the slow path finds and describes the difference)."""
    if lt.num_columns == 0:
        return False
    rt = _decoded(rt)
    lt = _common_schema(_decoded(lt), rt)
    if lt is None or not lt.schema.equals(rt.schema):
        return False
    if check_row_order:
        return lt.equals(rt)
    try:
        order = [(name, "ascending") for name in lt.column_names]
        return lt.sort_by(order).equals(rt.sort_by(order))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False


def first_difference(left, right, *, check_row_order: bool = False, check_names: bool = True,
                     rel: float = 0.0) -> str | None:
    """None when the tables hold the same rows, else a description of the first difference.

    Floats compare within relative tolerance ``rel`` (0: exactly); NaN equals NaN.
    """
    lt, rt = to_arrow_table(left), to_arrow_table(right)
    if check_names and lt.column_names != rt.column_names:
        return f"column names differ: {lt.column_names} vs {rt.column_names}"
    if lt.num_columns != rt.num_columns:
        return f"column counts differ: {lt.num_columns} vs {rt.num_columns}"
    if lt.num_rows != rt.num_rows:
        return f"row counts differ: {lt.num_rows} vs {rt.num_rows}"
    if _same_when_sorted(lt, rt, check_row_order):
        return None
    lrows, rrows = _rows(lt), _rows(rt)
    if not check_row_order:
        key = lambda row: tuple(_sortable(v) for v in row)  # noqa: E731
        lrows.sort(key=key)
        rrows.sort(key=key)
    for i, (a, b) in enumerate(zip(lrows, rrows)):
        if len(a) != len(b) or not all(_close(x, y, rel) for x, y in zip(a, b)):
            return f"row {i} (after sorting) differs:\n  got      {a}\n  expected {b}"
    return None


def assert_tables_equal(left, right, *, check_row_order: bool = False, check_names: bool = True,
                        rel: float = 0.0) -> None:
    """Assert two tables hold the same rows (in any order unless ``check_row_order``)."""
    diff = first_difference(left, right, check_row_order=check_row_order, check_names=check_names, rel=rel)
    if diff is not None:
        raise AssertionError(diff)
