"""Joins of device-resident tables: inputs and output stay in GPU memory.

The planner's part for DeviceTables (or dicts of CuPy arrays): check the key columns, promote
their types, choose the build side and the join mode, hand every output column's source to the
GPU algorithm as a payload (validity masks travel as payloads too), and lay the output out as
``polars.DataFrame.join`` would.  Keys here are integer (date/time, or dictionary-coded string:
two sides' dictionaries re-coded into one first, cuda.table.unify_dictionaries) columns; several
a side are packed into one int64 key (:mod:`gpujoin.plan.pack_keys`); wider composite keys go
through Arrow tables (``gpujoin.join`` on host tables, which also runs on the GPU).  A row with a
null key matches nothing (SQL, and Polars' ``nulls_equal=False``): the rows with every key
present are joined, and the others added as the unmatched rows of outer and anti joins.  With
``nulls_equal=True`` (pandas' merge, Polars' ``nulls_equal=True``) a null matches a null: the
rows with a null key are joined among themselves too, each nullable key beside a flag key.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from ..backend import HOST_STREAMING, resolve_algorithm, resolve_device
from ..errors import ComputeError, SchemaError
from ..table import check_columns, is_string_type
from .auto import launch_gpu_join_plan, read_quietly
from .join import JOIN_MODES, JoinStats, _resolve_keys, build_on_left, coalesced, output_layout


#: Key dtypes the planner's device samples take as they are (cuda.primitives.key_type's).
SAMPLED_KEYS = {np.dtype(np.int32), np.dtype(np.int64)}


def _key_dtype(lname, ldt, rname, rdt) -> tuple[np.dtype, np.dtype]:
    """(output key dtype, int32/int64 dtype the GPU joins on) for two integer key columns."""
    t = np.result_type(ldt, rdt)
    if ldt.kind not in "iub" or rdt.kind not in "iub" or t.kind not in "iub":
        raise SchemaError(f"join keys {lname!r} ({ldt}) and {rname!r} ({rdt}) cannot be compared on the GPU: "
                          f"device-resident keys must both be integers; pass Arrow tables for other key types")
    if t == np.uint64:
        return t, np.dtype(np.int64)  # same bits: equality is all a hash or merge join needs
    return t, np.dtype(np.int32) if (t.itemsize < 4 or t == np.int32) else np.dtype(np.int64)


def to_key(a, dt):
    """Key column ``a`` as the GPU's int32/int64 key dtype ``dt`` (uint64: the same bits)."""
    return a.view(dt) if a.dtype == np.uint64 else a.astype(dt, copy=False)


def from_key(k, dt):
    """GPU keys back as the output column's dtype ``dt`` (the inverse of ``to_key``)."""
    return k.view(dt) if dt == np.uint64 else k.astype(dt, copy=False)


def execute_device_join(left, right, on=None, *, left_on=None, right_on=None, how="inner", suffix="_right",
                        nulls_equal=False, validate="m:m", coalesce=None, algorithm="auto", device="auto",
                        radix_bits=None, memory_limit=None):
    """:func:`gpujoin.join` for device-resident inputs; returns (DeviceTable, JoinStats).

    Raises
    ------
    ColumnNotFoundError, SchemaError, ValueError
        As for host tables; also for composite keys whose ranges span more than 63 bits (with
        ``nulls_equal=True`` and null keys, the rows with a null key: their keys and one bit a
        nullable key), a string key joined with a key of another type, and a key whose values
        would not fit 64 bits in the type it is compared in (keys of two decimal scales or time
        units are compared in the host's promoted type, their stored integers rescaled on the
        GPU: :func:`rescale_keys`).  (A null key matches nothing unless ``nulls_equal``: such
        rows are an outer side's unmatched rows.)
    RuntimeError
        device="cpu" with device-resident inputs.
    MemoryError
        The join does not fit in free GPU memory (or within ``memory_limit``).
    """
    if device not in ("auto", "cuda"):
        raise RuntimeError(f"device={device!r}: these tables are in GPU memory; use device='cuda' or 'auto', "
                           f"or pass host tables (DeviceTable.to_arrow())")
    dev = resolve_device("cuda", "join")
    algo = resolve_algorithm("join", algorithm, dev)
    if algo in HOST_STREAMING:
        raise ValueError(f"algorithm={algo!r} streams host-resident tables (out of core, or over several GPUs); "
                         f"these tables are already in GPU memory: use an in-core algorithm, or pass host tables "
                         f"(DeviceTable.to_arrow())")
    from ..outofcore.budget import gpu_memory_cap

    with gpu_memory_cap(memory_limit):
        return _join_null_keys(left, right, on, left_on, right_on, how, suffix, nulls_equal, validate, coalesce,
                               algo, dev, radix_bits)


def _join_null_keys(left, right, on, left_on, right_on, how, suffix, nulls_equal, validate, coalesce, algo, dev,
                    radix_bits):
    """The device join where key columns may hold nulls: the rows whose keys are all present
    joined (:func:`_execute_device_join`), then each outer side's (and an anti join's left)
    rows with a null key appended, the other side's columns null, as the host path's
    ``plan.join._match`` adds them; with ``nulls_equal``, the rows with a null key joined among
    themselves (:func:`_join_null_rows`) instead.  Keys of two scales or units are compared in
    the promoted type (:func:`rescale_keys`), and kept in their own where the output keeps
    each side's (:func:`unscale_keys`)."""
    from ..cuda.table import as_device_table

    lt, rt = as_device_table(left), as_device_table(right)
    coalesce = coalesced(how, coalesce)
    if how == "cross":
        return _execute_device_join(lt, rt, on, left_on, right_on, how, suffix, validate, coalesce, algo, dev,
                                    radix_bits)
    lk, rk = _resolve_keys(on, left_on, right_on, how)
    check_columns(lt, lk, "left")
    check_columns(rt, rk, "right")
    lt, rt, scaled = rescale_keys(lt, lk, rt, rk)
    out, stats = _join_present_keys(lt, rt, lk, rk, on, left_on, right_on, how, suffix, nulls_equal, validate,
                                    coalesce, algo, dev, radix_bits)
    if scaled:
        out = unscale_keys(out, scaled, output_layout(lt.column_names, rt.column_names, lk, rk, how, suffix, coalesce))
    return out, stats


def _join_present_keys(lt, rt, lk, rk, on, left_on, right_on, how, suffix, nulls_equal, validate, coalesce, algo,
                       dev, radix_bits):
    """:func:`_join_null_keys` once the keys compare as stored: the rows whose keys are all
    present joined, then the others as an outer side's unmatched rows or, with ``nulls_equal``,
    among themselves."""
    from ..cuda.table import concat_tables, key_validity

    if not (lt.validity or rt.validity):  # (no masks at all: nothing more to look at)
        return _execute_device_join(lt, rt, on, left_on, right_on, how, suffix, validate, coalesce, algo, dev,
                                    radix_bits)
    lvalid, rvalid = key_validity(lt, lk), key_validity(rt, rk)
    if lvalid is None and rvalid is None:
        return _execute_device_join(lt, rt, on, left_on, right_on, how, suffix, validate, coalesce, algo, dev,
                                    radix_bits)
    present = [t if v is None else _without_masks(t.filter(v), k) for t, v, k in ((lt, lvalid, lk), (rt, rvalid, rk))]
    result, stats = _execute_device_join(*present, on, left_on, right_on, how, suffix, validate, coalesce, algo, dev,
                                         radix_bits)
    parts = [result]
    # a null key equals a null key: where both sides have one, the rows with one join among
    # themselves as the rest do (else they match nothing, as without nulls_equal)
    if nulls_equal and all(v is not None and bool((~v).any()) for v in (lvalid, rvalid)):
        parts.append(_join_null_rows(lt.filter(~lvalid), rt.filter(~rvalid), lk, rk, how, suffix, validate,
                                     coalesce, algo, dev))
    else:
        layout = output_layout(lt.column_names, rt.column_names, lk, rk, how, suffix, coalesce)
        for side, t, valid, keep in (("l", lt, lvalid, ("left", "full", "anti")), ("r", rt, rvalid, ("right", "full"))):
            if valid is not None and how in keep:
                parts.append(_unmatched(t.filter(~valid), side, lk if side == "l" else rk, lk, rk, layout, result))
    out = concat_tables([p for p in parts if p.num_rows] or [result])
    stats.output_rows = out.num_rows
    stats.params["null_key_rows"] = sum(p.num_rows for p in parts[1:])
    return out, stats


#: Ticks a second of each time unit.
_UNITS = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _key_target(lt, a: str, rt, b: str) -> pa.DataType | None:
    """The type that key ``a`` of ``lt`` and ``b`` of ``rt`` (DeviceTables) compare in where
    their types differ (the host's promoted type: decimals of two scales or precisions, an
    integer against a decimal, timestamps, times or durations of two units), which a coalesced
    key comes out in; None where they compare as stored and keep their type (the same type,
    integers of two widths: ``_key_type``, floats, strings and binaries, all-null columns).

    Raises
    ------
    SchemaError
        Types the host refuses to compare (a date with an integer: ``plan.keys.promote_key_types``;
        an int64 against a decimal(18, 0), which ``cast_key`` refuses by type).
    """
    from ..cuda.table import arrow_type, coded_type
    from .keys import cast_key, promote_key_types

    ta, tb = arrow_type(lt, a), arrow_type(rt, b)
    if ta == tb or ta is None or tb is None or coded_type(ta) or coded_type(tb) or pa.types.is_null(ta) \
            or pa.types.is_null(tb) or (pa.types.is_integer(ta) and pa.types.is_integer(tb)) \
            or pa.types.is_floating(ta) or pa.types.is_floating(tb):  # (floats: the key dtype's own refusal)
        return None
    target = promote_key_types(a, ta, b, tb)  # (raises for kinds that never compare)
    for name, t in ((a, ta), (b, tb)):  # the host's cast refuses some by type alone (int64 to decimal(18, 0))
        cast_key(name, pa.array([None], t), target)
    return target


def _scale_factor(t: pa.DataType, target: pa.DataType) -> int | None:
    """What a stored integer of type ``t`` is multiplied by to be one of ``target`` (1: the
    same), or None where no such factor exists."""
    if pa.types.is_decimal(target) and (pa.types.is_decimal(t) or pa.types.is_integer(t)):
        step = target.scale - (t.scale if pa.types.is_decimal(t) else 0)
        return 10**step if step >= 0 else None
    for family in (pa.types.is_timestamp, pa.types.is_time, pa.types.is_duration):
        if family(t) and family(target):
            up, down = _UNITS[target.unit], _UNITS[t.unit]
            return up // down if up % down == 0 else None
    return 1 if t == target or (pa.types.is_boolean(t) and pa.types.is_boolean(target)) else None


def rescale_keys(lt, lk: list[str], rt, rk: list[str]):
    """(lt, rt, scaled): the DeviceTables with each key column whose type differs from the other
    side's (:func:`_key_target`) in the promoted type, its stored integers multiplied where the
    scale or unit differs (an int64 column, int32 for time32), so that the GPU compares what the
    host compares and a coalesced key has the host's type; ``scaled``: {(side "l"/"r", name):
    (factor, original type, original dtype)} for :func:`unscale_keys`.

    Raises
    ------
    SchemaError
        Keys that never compare, a key column that two key pairs compare in types of different
        scales or units (one stored integer cannot be both), or a value that the rescale takes
        past 64 bits (32 for time32; naming the column and both types).
    """
    import cupy as cp

    from ..cuda.table import DeviceTable, arrow_type

    goal: dict = {}  # (side, name) -> the types each key pair compares it in (None: its own), in order
    for a, b in zip(lk, rk):
        target = _key_target(lt, a, rt, b)
        for key in (("l", a), ("r", b)):
            goal.setdefault(key, []).append(target)
    scaled, tables = {}, {"l": lt, "r": rt}
    for (side, name), targets in goal.items():
        t = tables[side]
        was = arrow_type(t, name)
        factors = {1 if u is None else _scale_factor(was, u) for u in targets}
        if None in factors:
            raise SchemaError(f"join key {name!r} ({was}) cannot be compared as {[u for u in targets if u]} in GPU "
                              f"memory; cast it before DeviceTable.from_arrow (or pass Arrow tables)")
        if len(factors) > 1:  # (one stored integer cannot be two values; types of one scale can share it)
            raise SchemaError(f"join key {name!r} ({was}) is compared in types of different scales or units by two "
                              f"key pairs ({', '.join(str(u or was) for u in targets)}); cast the keys to one type "
                              f"first")
        target, (f,) = targets[0], factors  # (the first pair's type, as the host's coalesced key takes it)
        if target is None:
            continue
        x, present = t[name], _present(t, name)
        store = np.dtype(np.int32 if getattr(target, "bit_width", 64) == 32 else np.int64)  # (time32's int32)
        limit = np.iinfo(store).max // f
        if present.size and (f > 1 or x.dtype.itemsize >= store.itemsize and x.dtype.kind == "u"):
            lo, hi = (int(cp.asnumpy(m)) for m in (present.min(), present.max()))
            if max(abs(lo), abs(hi)) > limit:
                raise SchemaError(f"join key {name!r} ({was}): its values past {limit:,} do not fit "
                                  f"{8 * store.itemsize} bits as {target}, the type it is compared in; pass Arrow "
                                  f"tables (the host compares them in its own types)")
        # (a factor past 64 bits leaves only zeros present: the masked slots' values do not matter)
        col = x.astype(store) * f if 1 < f <= np.iinfo(store).max else \
            cp.zeros(x.size, store) if f > 1 else x.astype(store, copy=False)
        tables[side] = DeviceTable({**t.columns, name: col}, t.validity, {**t.types, name: target}, t.dictionaries)
        scaled[(side, name)] = (f, was, x.dtype)
    return tables["l"], tables["r"], scaled


def unscale_keys(out, scaled: dict, layout: list):
    """``out`` with each output column that is a rescaled key kept as a column of its side (not a
    coalesced key: ``layout``, output_layout's) back in its own values and type, as the host
    keeps it: divided by the factor :func:`rescale_keys` multiplied it by (exactly)."""
    from ..cuda.table import DeviceTable

    cols, types = dict(out.columns), dict(out.types)
    for side, name, o, key in layout:
        if not key and (side, name) in scaled:
            f, was, dtype = scaled[(side, name)]
            back = cols[o] // f if 1 < f <= np.iinfo(cols[o].dtype).max else cols[o] * 0 if f > 1 else cols[o]
            cols[o] = back.astype(dtype, copy=False)  # (past 64 bits: only zeros were present)
            types[o] = was
    return DeviceTable(cols, out.validity, types, out.dictionaries)


def _key_type(lt, a: str, rt, b: str, out: str) -> dict:
    """{out: Arrow type} of a coalesced key column whose two sides' types differ and whose rows
    come from either: the promoted integer type of two widths (int8 and int64: int64), or the
    other side's type beside an all-null (null-typed) column; {} to keep the layout side's."""
    ta, tb = lt.types.get(a), rt.types.get(b)
    if ta is None or tb is None or ta == tb:
        return {}
    if pa.types.is_null(ta) or pa.types.is_null(tb):
        return {out: tb if pa.types.is_null(ta) else ta}
    if pa.types.is_integer(ta) and pa.types.is_integer(tb):
        return {out: pa.from_numpy_dtype(np.result_type(ta.to_pandas_dtype(), tb.to_pandas_dtype()))}
    return {}


def _null_as_strings(t, name: str, dictionary):
    """DeviceTable ``t`` with its all-null column ``name`` as codes (int32, all masked) into
    ``dictionary``: a string (or binary) column of nulls, to be joined with one."""
    from ..cuda.table import DeviceTable

    cols = {**t.columns, name: t[name].astype(np.int32)}
    return DeviceTable(cols, t.validity, {**t.types, name: dictionary.type}, {**t.dictionaries, name: dictionary})


def _join_null_rows(lt, rt, lk: list[str], rk: list[str], how, suffix, validate, coalesce, algo, dev):
    """``nulls_equal=True``'s join of the rows with a null in some key column (``lt``, ``rt``:
    only those rows), laid out as the join of the other rows: each key position with a mask on
    either side gets a flag column (uint8, 1 where null) beside it as one more key, its nulls
    read as one present value of that key (:func:`_null_fill`; a string key's as code 0 of the
    two sides' one dictionary), so that a null meets only a null; then the key columns' masks
    come back from the flags, which are dropped.  (The rows with every key present cannot meet
    these rows, so the two joins are the whole join, outer and anti rows included.)"""
    import cupy as cp

    from ..cuda.table import DeviceTable, one_value, unify_dictionaries

    names = set(lt.column_names) | set(rt.column_names)
    taken = names | {n + suffix for n in names}  # (an output name of a user's column, suffixed or not)
    flags = {}  # key position -> flag column name (the same on both sides)
    for i, (a, b) in enumerate(zip(lk, rk)):
        if a in lt.validity or b in rt.validity:
            name = f"__null_{i}"
            while name in taken or name + suffix in taken:
                name = "_" + name
            flags[i] = name
            taken.add(name)
    strings = [[(0, a), (1, b)] for a, b in zip(lk, rk) if a in lt.dictionaries and b in rt.dictionaries]
    if strings:
        lt, rt = unify_dictionaries([lt, rt], strings)
        for (_, a), (_, b) in strings:  # (code 0 must index a string: an empty dictionary gets one)
            if not len(lt.dictionaries[a]):
                d = one_value(lt.dictionaries[a].type)
                lt = DeviceTable(lt.columns, lt.validity, lt.types, {**lt.dictionaries, a: d})
                rt = DeviceTable(rt.columns, rt.validity, rt.types, {**rt.dictionaries, b: d})

    fills = {i: _null_fill(lt, rt, lk[i], rk[i]) for i in flags}

    def flagged(t, keys):
        cols, valid = dict(t.columns), {n: v for n, v in t.validity.items() if n not in keys}
        for i, name in flags.items():
            v = t.validity.get(keys[i])
            if v is None:
                cols[name] = cp.zeros(t.num_rows, cp.uint8)
            else:
                cols[keys[i]] = cp.where(v.astype(bool), t[keys[i]], fills[i]).astype(t[keys[i]].dtype, copy=False)
                cols[name] = (v == 0).astype(cp.uint8)
        return DeviceTable(cols, valid, t.types, t.dictionaries)

    fk = [flags[i] for i in sorted(flags)]
    out, _ = _execute_device_join(flagged(lt, lk), flagged(rt, rk), None, lk + fk, rk + fk, how, suffix, validate,
                                  coalesce, algo, dev, None)
    layout = output_layout(lt.column_names + fk, rt.column_names + fk, lk + fk, rk + fk, how, suffix, coalesce)
    where = {(s, name): o for s, name, o, _ in layout}
    valid = dict(out.validity)
    for s, keys in (("l", lk), ("r", rk)):
        for i, name in flags.items():
            o, f = where.get((s, keys[i])), where.get((s, name))
            if o is not None:  # (a key the layout keeps on this side)
                present = out[f] == 0
                valid[o] = (present & valid[o].astype(bool) if o in valid else present).astype(cp.uint8)
    drop = {o for (s, name), o in where.items() if name in fk}
    types = {n: t for n, t in out.types.items() if n not in drop}
    return DeviceTable({n: a for n, a in out.columns.items() if n not in drop},
                       {n: v for n, v in valid.items() if n not in drop}, types,
                       {n: d for n, d in out.dictionaries.items() if n not in drop})


def _null_fill(lt, rt, a: str, b: str) -> int:
    """The value both sides' null slots of key ``a`` (of ``lt``) and ``b`` (of ``rt``) are read
    as in :func:`_join_null_rows`: one side's smallest present value where it fits both key
    dtypes, else 0, so that the packed key (``plan.pack_keys``: a column's bits from its range)
    is no wider than the present values make it (0 beside keys near 2^60 had made it too wide)."""
    import cupy as cp

    for t, n in ((lt, a), (rt, b)):
        present = _present(t, n)
        if present.size:
            lo = int(cp.asnumpy(present.min()))
            if all(_fits(lo, c.dtype) for c in (lt[a], rt[b])):
                return lo
    return 0


def _present(t, name: str):
    """DeviceTable ``t``'s column ``name`` without its null slots (whose values are anything)."""
    v = t.validity.get(name)
    return t[name] if v is None else t[name][v.astype(bool)]


def _fits(value: int, dtype) -> bool:
    info = np.iinfo(np.uint8 if dtype == np.bool_ else dtype)
    return info.min <= value <= info.max


def _without_masks(t, names: list[str]):
    """``t`` without the validity masks of columns ``names`` (rows whose keys are all present)."""
    from ..cuda.table import DeviceTable

    return DeviceTable(t.columns, {n: v for n, v in t.validity.items() if n not in names}, t.types, t.dictionaries)


def _unmatched(t, side: str, keys: list[str], lk: list[str], rk: list[str], layout: list, result):
    """The output rows of ``t``'s rows (side "l" or "r") with no partner: laid out as ``result``
    (``layout``: output_layout's), ``t``'s columns as they are, a coalesced key column from
    ``t``'s own key of that position, the other side's columns null."""
    import cupy as cp

    from ..cuda.table import DeviceTable, one_value

    n = t.num_rows
    cols, valid, dicts = {}, {}, {}
    for s, name, out, key in layout:
        dt = result[out].dtype
        if key:  # (the key column of the same position on this side)
            name, s = keys[(lk if s == "l" else rk).index(name)], side
        mine = s == side and (name in t.dictionaries or out not in result.dictionaries)
        if mine:  # this side's values; a string column's codes in this side's dictionary (concat re-codes)
            cols[out] = t[name].astype(dt, copy=False)
            if name in t.validity:
                valid[out] = t.validity[name]
            if out in result.dictionaries:
                dicts[out] = t.dictionaries[name]
        else:  # the other side's column, or this side's all-null one beside strings: nulls
            cols[out] = cp.zeros(n, dt)
            valid[out] = cp.zeros(n, cp.uint8)
            if out in result.dictionaries:  # all null: any dictionary, but one (null codes index it)
                d = result.dictionaries[out]
                dicts[out] = d if len(d) else one_value(d.type)
    return DeviceTable(cols, valid, dict(result.types), dicts)


def _execute_device_join(left, right, on, left_on, right_on, how, suffix, validate, coalesce, algo, dev, radix_bits):
    import cupy as cp

    from ..cuda.join import run
    from ..cuda.table import DeviceTable, as_device_table

    lt, rt = as_device_table(left), as_device_table(right)
    lk, rk = _resolve_keys(on, left_on, right_on, how)
    check_columns(lt, lk, "left")
    check_columns(rt, rk, "right")
    layout = output_layout(lt.column_names, rt.column_names, lk, rk, how, suffix, coalesce)
    if how == "cross":
        stats, t0 = JoinStats(algo, dev, how, lt.num_rows, rt.num_rows), time.perf_counter()
        nl, nr = lt.num_rows, rt.num_rows
        lidx = cp.repeat(cp.arange(nl, dtype=cp.int64), nr)
        ridx = cp.tile(cp.arange(nr, dtype=cp.int64), nl)
        cols = {out: (lt if side == "l" else rt)[name][lidx if side == "l" else ridx]
                for side, name, out, _ in layout}
        valid = {out: (lt if side == "l" else rt).validity[name][lidx if side == "l" else ridx]
                 for side, name, out, _ in layout if name in (lt if side == "l" else rt).validity}
        types, dicts = {}, {}
        for s, n, o, _ in layout:
            t, d = (lt if s == "l" else rt).meta(n, o)
            types.update(t)
            dicts.update(d)
        result = DeviceTable(cols, valid, types, dicts)
        stats.output_rows = result.num_rows
        stats.phases = {"transform": 0.0, "match": time.perf_counter() - t0, "materialize": 0.0}
        return result, stats
    build_left = build_on_left(how, lt.num_rows, rt.num_rows)
    bside, pside = ("l", "r") if build_left else ("r", "l")
    # each side's payloads: the columns its output needs, then their validity masks
    payloads = [(side, name, False) for side, name, _out, key in layout if not key]
    payloads += [(side, name, True) for side, name, _ in payloads if name in (lt if side == "l" else rt).validity]

    def launch_plan(lkey, rkey):  # the planner's samples, read (finish) once the work below ran
        widths = {"l": [], "r": []}
        for side, name, mask in payloads:
            widths[side].append(1 if mask else (lt if side == "l" else rt)[name].dtype.itemsize)
        bkey, part = (lkey, lt.partitioning) if build_left else (rkey, rt.partitioning)
        return launch_gpu_join_plan(bkey, rkey if build_left else lkey, widths[bside], widths[pside],
                                    part.ready if part is not None and part.key is bkey else None)
    strings = []  # string keys' pairs, re-coded into one dictionary each (before the planner samples codes)
    for a, b in zip(lk, rk):
        da, db = lt.dictionaries.get(a), rt.dictionaries.get(b)
        if (da is None) != (db is None):  # an all-null column's codes index the other's dictionary (none is read)
            if da is None and pa.types.is_null(lt.types.get(a, pa.int8())):
                lt, da = _null_as_strings(lt, a, db), db
            elif db is None and pa.types.is_null(rt.types.get(b, pa.int8())):
                rt, db = _null_as_strings(rt, b, da), da
        if (da is None) != (db is None):
            s, o = (a, b) if da is not None else (b, a)
            raise SchemaError(f"join keys {a!r} and {b!r}: {s!r} is a string (or binary) column and {o!r} is not; "
                              f"cast one to the other's type (or pass Arrow tables)")
        if da is not None and is_string_type(da.type) != is_string_type(db.type):
            raise SchemaError(f"join keys {a!r} ({da.type}) and {b!r} ({db.type}) have incompatible types; cast one "
                              f"of them so both are binary or both are string")
        if da is not None and da is not db:
            strings.append([(0, a), (1, b)])
    if strings:
        from ..cuda.table import unify_dictionaries

        lt, rt = unify_dictionaries([lt, rt], strings)
    finish = None
    if algo == "auto" and len(lk) == 1 and {lt[lk[0]].dtype, rt[rk[0]].dtype} <= SAMPLED_KEYS:
        # int32/int64 keys: sampled as they are (to_key widens at most), before the keys' own
        # checks, so that the GPU samples while the host runs them (a bad key's error is raised
        # below as ever, the samples read first)
        finish = launch_plan(lt[lk[0]], rt[rk[0]])
    stats = JoinStats(algo, dev, how, lt.num_rows, rt.num_rows)  # (after the launch: while the GPU samples)
    try:
        packing = None
        if len(lk) == 1:
            ln, rn = lk[0], rk[0]
            out_dt, join_dt = _key_dtype(ln, lt[ln].dtype, rn, rt[rn].dtype)
            lkey, rkey = to_key(lt[ln], join_dt), to_key(rt[rn], join_dt)
        else:  # composite keys: one exact int64 key when their ranges fit 63 bits together
            from .pack_keys import pack_keys

            for a, b in zip(lk, rk):
                _key_dtype(a, lt[a].dtype, b, rt[b].dtype)  # integers only, as for one key
            (lkey, rkey), packing = pack_keys([[lt[a] for a in lk], [rt[b] for b in rk]], lk)
        if algo == "auto" and finish is None:  # (other key types: sampled as the GPU joins them)
            finish = launch_plan(lkey, rkey)
        for keys, side, check in ((lkey, "left", validate in ("1:1", "1:m")),
                                  (rkey, "right", validate in ("1:1", "m:1"))):
            if check and cp.unique(keys).size != keys.size:
                raise ComputeError(f"join keys did not fulfill {validate} validation: the {side} keys are not unique")
        stats.params["build_side"] = "left" if build_left else "right"
        mode = JOIN_MODES[how]
        sides = {"l": (lt, []), "r": (rt, [])}
        index, vindex = {}, {}
        for side, name, mask in payloads:
            t, pay = sides[side]
            (vindex if mask else index)[(side, name)] = len(pay)
            pay.append(t.validity[name].astype(cp.uint8, copy=False) if mask else t[name])
        emit_keys = any(key for *_, key in layout)
    except BaseException:
        read_quietly(finish)
        raise
    if finish is not None:
        choice = finish()
        algo = stats.algorithm = choice.algorithm
    runs = None
    if algo in ("phj-tr", "phj-ur"):
        radix_bits, runs = _partitioned(lt, rt, lk, rk, lkey, rkey, radix_bits, build_left)
        if runs is not None:
            stats.params["partitioned_bits"] = min(r.bits for r in runs)  # (the bits neither side partitions)
    res = run(algo, lkey if build_left else rkey, rkey if build_left else lkey, sides[bside][1], sides[pside][1],
              mode, emit_keys=emit_keys, radix_bits=radix_bits, runs=runs)
    stats.phases.update(res.phases)
    stats.params.update(res.params)
    t1 = time.perf_counter()
    cols, valid, types, dicts, unpacked = {}, {}, {}, {}, None
    for side, name, out, key in layout:
        src = lt if side == "l" else rt
        t, d = src.meta(name, out)
        types.update(t)
        dicts.update(d)
        if key:
            pos = (lk if side == "l" else rk).index(name)
            types.update(_key_type(lt, lk[pos], rt, rk[pos], out))
            if packing is None:
                cols[out] = from_key(res.key_column(), out_dt)
            else:
                unpacked = unpacked if unpacked is not None else packing.unpack(res.key_column())
                cols[out] = unpacked[(lk if side == "l" else rk).index(name)]
            continue
        column = res.build_column if side == bside else res.probe_column
        values, present = column(index[(side, name)])
        if (side, name) in vindex:
            v, _ = column(vindex[(side, name)])
            present = v if present is None else (present & v)
        cols[out] = values
        if present is not None:
            valid[out] = present
    result = DeviceTable(cols, valid, types, dicts)
    if finish is not None:  # (its text formatted while the GPU materializes: Choice.reason)
        stats.params["auto"] = choice.reason
    cp.cuda.Device().synchronize()
    stats.phases["materialize"] = time.perf_counter() - t1
    stats.output_rows = result.num_rows
    return result, stats


def _partitioned(lt, rt, lk, rk, lkey, rkey, radix_bits, build_left):
    """(radix_bits, (build runs, probe runs) or None): the pieces PHJ may start from, where both
    tables come grouped on their join keys by one radix digit (``DeviceTable.partitioning``, a
    shuffle's: dist.radix_shuffle), the keys joined as they are and no other radix_bits asked."""
    lp, rp = lt.partitioning, rt.partitioning
    if (lp is None or rp is None or len(lk) != 1 or lp.column != lk[0] or rp.column != rk[0]
            or lp.key is not lt[lk[0]] or rp.key is not rt[rk[0]]  # (a key column replaced since)
            or lp.radix_bits != rp.radix_bits or radix_bits not in (None, lp.radix_bits)
            or lkey is not lt[lk[0]] or rkey is not rt[rk[0]]):  # (a key widened: another hash)
        return radix_bits, None
    return lp.radix_bits, ((lp.runs, rp.runs) if build_left else (rp.runs, lp.runs))
