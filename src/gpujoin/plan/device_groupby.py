"""Group-bys of device-resident tables: input and output stay in GPU memory.

The planner's part for DeviceTables (or dicts of CuPy arrays): integer (also date and
dictionary-coded string or binary) key columns, several packed into one int64 key (wider
composite keys go through Arrow tables, which also run on the GPU); a key with nulls is packed
with a null flag, so that its null rows form one group whose key is null, as in SQL and Polars;
value columns of any integer, bool or float type with validity masks (strings: count, n_unique,
min and max; dates and times no sum or mean; binaries count, as on the host); each aggregate
becomes the accumulators it needs, and the results get SQL semantics: sums of integers are int64
(an overflow is an error), of floats float64; mean float64; count and size int64; min and max
the column's own type; an all-null group's sum, min, max and mean are null.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from ..backend import resolve_device
from ..errors import ComputeError, InvalidOperationError, SchemaError
from ..table import is_string_type
from .device_join import _key_dtype, from_key, to_key
from .groupby import GroupByStats, check_aggregate

_NEEDS = {"sum": ("sum",), "mean": ("sum", "count"), "min": ("min",), "max": ("max",), "count": ("count",)}


def _arrow_kind(table, col: str) -> tuple | None:
    """(Arrow type, kind) of DeviceTable column ``col`` as ``plan.groupby.check_aggregate`` takes
    them: a dictionary column's "string" or "other" (binary), else its type's numeric kind; None
    for a dtype Arrow has no type of (the kernels' own check names it)."""
    from ..cuda.table import arrow_type

    t = arrow_type(table, col)
    if t is None:
        return None
    if col in table.dictionaries:
        return t, "string" if is_string_type(t) else "other"
    return t, "float" if table[col].dtype.kind == "f" else "int"


def _kernel_values(name: str, a):
    """The column as int32, int64, float32 or float64, the types the kernels read."""
    import cupy as cp

    k, size = a.dtype.kind, a.dtype.itemsize
    if k == "f":
        return a if size >= 4 else a.astype(cp.float32)
    if k == "b" or (k in "iu" and size < 4) or a.dtype == np.int32:
        return a.astype(cp.int32, copy=False)
    if a.dtype == np.uint64:
        if a.size and bool((a >> np.uint64(63)).any()):
            raise ComputeError(f"column {name!r} (uint64) has values above 2**63-1, which aggregates do not "
                               f"support; cast it to float64")
        return a.view(cp.int64)
    if k in "iu":
        return a.astype(cp.int64, copy=False)
    raise InvalidOperationError(f"cannot aggregate column {name!r} of dtype {a.dtype}")


def _string_order(dictionary):
    """(rank, order): CuPy int32 arrays, each code's rank among the sorted ``dictionary``'s
    strings and the code of each rank; min and max of a string column aggregate the ranks (its
    codes follow the dictionary's own order, first appearance from ``dictionary_encode``), or
    None when the dictionary is sorted already."""
    import cupy as cp
    import pyarrow.compute as pc

    order = pc.sort_indices(dictionary).to_numpy().astype(np.int32)
    if np.array_equal(order, np.arange(order.size)):
        return None
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size, dtype=np.int32)
    return cp.asarray(rank), cp.asarray(order)


def _distinct_values(table, col: str):
    """Column ``col``'s values, one a distinct value: a string column's codes made canonical where
    its dictionary repeats a string (a DeviceTable built by hand may hold such a dictionary)."""
    import cupy as cp
    import pyarrow.compute as pc

    values, d = table[col], table.dictionaries.get(col)
    if d is None or pc.count_distinct(d, mode="all").as_py() == len(d):
        return values
    first = cp.asarray(pc.dictionary_encode(d, null_encoding="encode").indices.to_numpy().astype(np.int32))
    return first[cp.clip(values, 0, first.size - 1)]


def _sum_int64(name: str, hi, lo, present):
    """Exact int64 totals from the halves sum(v >> 32) and sum(v & 0xffffffff); ComputeError on overflow."""
    import cupy as cp

    high = hi + (lo >> 32)  # the total is high * 2^32 + (lo & 0xffffffff), exactly
    if bool(((high < -(2**31)) | (high >= 2**31))[present].any()):
        raise ComputeError(f"the sum of column {name!r} overflows int64 in at least one group; "
                           f"cast the column to float64 first")
    return (high << 32) | (lo & cp.int64(0xFFFFFFFF))


def execute_device_group_by(table, by: list[str], specs: list, algorithm: str):
    """``GroupBy.agg`` for a DeviceTable; returns (DeviceTable, GroupByStats).

    Raises
    ------
    ValueError
        Composite keys (a key with nulls counts as two: its null flag and its values) whose
        value ranges span more than 63 bits (they are packed into one int64 key:
        :mod:`gpujoin.plan.pack_keys`).
    SchemaError
        A key column that is not an integer, date or string.
    InvalidOperationError, ComputeError
        As for host tables.
    MemoryError
        The group-by does not fit in free GPU memory.
    """
    import cupy as cp

    from ..cuda.groupby import AggInput, run
    from ..cuda.table import DeviceTable

    for kname in by:
        if table[kname].dtype.kind not in "iub":
            raise SchemaError(f"group-by key {kname!r} has dtype {table[kname].dtype}; device-resident keys must be "
                              f"integers, dates, strings or binaries (pass an Arrow table for other key types)")
    for _, col, fn in specs:  # (a string's codes or a date's days summed would be numbers, not an answer)
        kind = _arrow_kind(table, col) if fn != "size" else None
        if kind is not None:
            check_aggregate(col, *kind, fn)
    packing, nullable = None, [k for k in by if k in table.validity]
    if len(by) == 1 and not nullable:
        kcol = table[by[0]]
        _, kdt = _key_dtype(by[0], kcol.dtype, by[0], kcol.dtype)
        keys = to_key(kcol, kdt)
    else:  # composite or nullable keys: one exact int64 key when their ranges fit 63 bits together
        from .pack_keys import pack_keys

        parts, names = [], []
        for k in by:
            col = table[k]
            if k in table.validity:  # its null flag above its values (a null slot's value: 0)
                valid = table.validity[k].astype(cp.bool_)
                parts.append((~valid).astype(cp.uint8))
                names.append(f"{k} (null)")
                col = cp.where(valid, col, col.dtype.type(0))
            parts.append(col)
            names.append(k)
        (keys,), packing = pack_keys([parts], names)
    t0 = time.perf_counter()
    plan = None
    if algorithm == "auto":  # the planner's sample launched here, read once the inputs are made
        from .auto import launch_gpu_group_by_plan

        plan = launch_gpu_group_by_plan(keys)
    try:
        stats = GroupByStats(algorithm, resolve_device("cuda", "group_by"), table.num_rows)

        # one input per column: the union of what its aggregates need, and count for null groups
        ops: dict[str, set] = {}
        for _, col, fn in specs:
            if fn in ("size", "n_unique"):  # (n_unique: its own sort, cuda.groupby.distinct)
                continue
            ops.setdefault(col, set()).update(_NEEDS[fn])
            if col in table.validity and fn != "count":
                ops[col].add("count")
        cols = list(ops)
        # row counts only when an aggregate reads them (size, or count of a column without nulls):
        # an unasked count costs a shared atomic per row and 4 bytes per group (PGB's table size);
        # with no aggregates at all, one input keeps the algorithms' layouts non-empty
        need_sizes = not cols or any(fn == "size" or (fn == "count" and col not in table.validity)
                                     for _, col, fn in specs)
        inputs = [AggInput(None, None, ("count",))] if need_sizes else []
        ranked = {}  # string columns whose min or max reads ranks (_string_order), not codes
        for col in cols:
            valid = table.validity.get(col)
            values = _kernel_values(col, table[col])
            if col in table.dictionaries and ops[col] & {"min", "max"} and len(table.dictionaries[col]):
                ranked[col] = _string_order(table.dictionaries[col])
                if ranked[col] is not None:  # (a null slot's code may be anything: clipped into range)
                    values = ranked[col][0][cp.clip(values, 0, ranked[col][0].size - 1)]
            inputs.append(AggInput(values, None if valid is None else valid.astype(cp.uint8, copy=False),
                                   tuple(ops[col])))
    except BaseException:
        from .auto import read_quietly

        read_quietly(plan, None)
        raise
    if plan is not None:
        choice = plan(inputs)
        algorithm = stats.algorithm = choice.algorithm
        groups = choice.estimate.groups_for(algorithm)
    else:  # a few groups, all seen in a small sample, need no HyperLogLog pass (None: the algorithm runs it)
        from .stats import sample

        choice, groups = None, sample(keys).groups
    out = run(algorithm, keys, inputs, groups_estimate=groups, table=choice and choice.table)
    sizes = out.columns[0]["count"] if need_sizes else None
    res = {col: out.columns[i + need_sizes] for i, col in enumerate(cols)}

    columns, validity, types, dicts = {}, {}, {}, {}
    if packing is None:
        columns[by[0]] = from_key(out.keys, kcol.dtype)
    else:
        unpacked = iter(packing.unpack(out.keys))
        for k in by:
            if k in table.validity:
                validity[k] = (next(unpacked) == 0).astype(cp.uint8)  # (the null flag: the null key's group)
            columns[k] = next(unpacked)
    for kname in by:
        t, d = table.meta(kname)
        types.update(t)
        dicts.update(d)
    for name, col, fn in specs:
        if fn == "size" or (fn == "count" and col not in table.validity):
            columns[name] = sizes
            continue
        if fn == "n_unique":
            from ..cuda.groupby.distinct import count_distinct

            columns[name] = count_distinct(keys, _distinct_values(table, col), table.validity.get(col), out.keys)
            continue
        r, src = res[col], table[col]
        if fn == "count":
            columns[name] = r["count"]
            continue
        present = r["count"] > 0 if col in table.validity else None
        floating = src.dtype.kind == "f"
        if fn in ("min", "max"):
            if ranked.get(col) is not None:  # the rank's code (an empty group's slot: clipped, masked below)
                order = ranked[col][1]
                columns[name] = order[cp.clip(r[fn], 0, order.size - 1)].astype(src.dtype, copy=False)
            else:
                columns[name] = from_key(r[fn], src.dtype)  # uint64: the int64 bits back
            t, d = table.meta(col, name)
            types.update(t)
            dicts.update(d)
        elif fn == "sum":  # 8-byte integers come as exact halves; floats and 4-byte integers whole
            columns[name] = r["sum"] if "sum_lo" not in r else _sum_int64(
                col, r["sum"], r["sum_lo"], present if present is not None else slice(None))
            t = table.types.get(col)
            if t is not None and pa.types.is_decimal128(t):  # SQL: sum(decimal(p, s)) is decimal(38, s)
                types[name] = pa.decimal128(38, t.scale)
        else:  # mean
            total = r["sum"].astype(cp.float64) if floating or "sum_lo" not in r else \
                r["sum"].astype(cp.float64) * 2.0**32 + r["sum_lo"].astype(cp.float64)
            t = table.types.get(col)
            if t is not None and pa.types.is_decimal128(t):  # the unscaled integers' mean, scaled (float64)
                total = total / 10.0**t.scale
            columns[name] = total / cp.maximum(r["count"], 1)
        if present is not None:
            validity[name] = present.astype(cp.uint8)
    result = DeviceTable(columns, validity, types, dicts)
    if choice is not None:  # (its text formatted while the GPU ends the work: Choice.reason)
        stats.params["auto"] = choice.reason
    cp.cuda.Device().synchronize()
    stats.phases = dict(out.phases)
    stats.phases["total"] = time.perf_counter() - t0
    stats.params.update(out.params)
    stats.groups = out.num_groups
    return result, stats
