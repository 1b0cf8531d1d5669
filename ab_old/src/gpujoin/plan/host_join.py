"""Host tables joined on the GPU column by column: the streaming path for integer keys.

When both key columns are integers without nulls and every column the output keeps is
fixed-width without nulls, the GPU carries those columns themselves (GFTR, paper 003 §1.4)
through the streaming executor (``outofcore/triton.py``: in core when the budget holds the
join, out of core otherwise), and the result's columns come back as the output's Arrow arrays,
zero-copy.  No host-side work touches the keys before they reach the GPU (no encoding, no gather
maps, no Arrow ``take``).  Other inputs take the general path (keys encoded on the host, gather
maps from the GPU, Arrow materializes), which handles every type and null.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .join import JOIN_MODES, build_on_left, output_layout
from .keys import promote_key_types

#: Arrow types carried as raw fixed-width values, with the NumPy type of their storage.
_STORAGE = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def _storage_dtype(t: pa.DataType):
    """The NumPy dtype of a fixed-width Arrow type's values, or None (bool, decimal, strings...)."""
    if pa.types.is_floating(t) and not pa.types.is_float16(t):
        return np.dtype(t.to_pandas_dtype())
    if pa.types.is_integer(t):
        return np.dtype(t.to_pandas_dtype())
    if pa.types.is_date32(t) or pa.types.is_date64(t) or pa.types.is_timestamp(t) or pa.types.is_time(t) \
            or pa.types.is_duration(t):
        return np.dtype(_STORAGE[t.bit_width])
    return None


def _values(table: pa.Table, name: str, dtype) -> np.ndarray:
    """Column ``name``'s values as one NumPy array (zero-copy for one chunk; chunks of a record-
    batch stream concatenated by threads)."""
    from ..outofcore.stream import concatenate

    parts = []
    for chunk in table.column(name).chunks:
        buf = chunk.buffers()[1]
        parts.append(np.frombuffer(buf, dtype=dtype, count=chunk.offset + len(chunk))[chunk.offset:])
    if not parts:
        return np.empty(0, dtype)
    return concatenate(parts, dtype)


def _key_dtype(t: pa.DataType):
    """int32 or int64: the GPU key of integer type ``t`` (uint64 keeps its bits as int64)."""
    return np.dtype(np.int32) if t.bit_width < 32 or t == pa.int32() else np.dtype(np.int64)


def eligible(lt: pa.Table, rt: pa.Table, lk: list[str], rk: list[str], how: str, validate: str,
             suffix: str, coalesce: bool) -> bool:
    """Whether the columnar path applies (integer keys without nulls, fixed-width outputs)."""
    if len(lk) != 1 or how == "cross" or validate != "m:m":
        return False
    ta, tb = lt.schema.field(lk[0]).type, rt.schema.field(rk[0]).type
    if not (pa.types.is_integer(ta) and pa.types.is_integer(tb)):
        return False
    if lt.column(lk[0]).null_count or rt.column(rk[0]).null_count:
        return False
    try:
        layout = output_layout(lt.column_names, rt.column_names, lk, rk, how, suffix, coalesce)
    except ValueError:
        return False
    for side, name, _, key in layout:
        if key:
            continue
        t = lt if side == "l" else rt
        if _storage_dtype(t.schema.field(name).type) is None or t.column(name).null_count:
            return False
    return True


def columnar_gpu_join(lt: pa.Table, rt: pa.Table, lk: list[str], rk: list[str], how: str, suffix: str,
                      coalesce: bool, algorithm: str, memory_limit: int | None, stats, sink=None,
                      gpus=None) -> pa.Table:
    """The join of ``eligible`` host tables on the GPU (or the GPUs ``gpus``: see
    ``plan.streaming.choose_gpus``); fills ``stats`` (JoinStats).  With ``sink``
    (a callable taking ``pa.RecordBatch``), each block of output rows goes to it as it leaves the
    GPU and the result returned is empty (the output's schema).

    Raises
    ------
    MemoryError
        The budget cannot hold the out-of-core working set, or host memory the spill or output.
    """
    import time

    from ..outofcore.budget import gpu_budget, gpu_memory_cap
    from .streaming import inner_algorithm, place, stream_join, transfer_model

    t0 = time.perf_counter()
    ta, tb = lt.schema.field(lk[0]).type, rt.schema.field(rk[0]).type
    ktype = promote_key_types(lk[0], ta, rk[0], tb)
    kdt = _key_dtype(ktype)

    def key(table, name, t):
        v = _values(table, name, np.dtype(t.to_pandas_dtype()))
        return v.view(np.int64) if v.dtype == np.uint64 else v.astype(kdt, copy=False)

    lkey, rkey = key(lt, lk[0], ta), key(rt, rk[0], tb)
    layout = output_layout(lt.column_names, rt.column_names, lk, rk, how, suffix, coalesce)
    nl, nr = lt.num_rows, rt.num_rows
    build_left = build_on_left(how, nl, nr)
    stats.params["build_side"] = "left" if build_left else "right"
    mode = JOIN_MODES[how]
    carried = {"l": [], "r": []}
    for side, name, _, k in layout:
        if not k and name not in carried[side]:
            carried[side].append(name)
    cols = {s: [_values(t, n, _storage_dtype(t.schema.field(n).type)) for n in carried[s]]
            for s, t in (("l", lt), ("r", rt))}
    bside, pside = ("l", "r") if build_left else ("r", "l")
    bcols = [lkey if build_left else rkey] + cols[bside]
    pcols = [rkey if build_left else lkey] + cols[pside]
    emit_keys = any(k for *_, k in layout)
    ltypes = {name: lt.schema.field(name).type for name in lt.column_names}
    rtypes = {name: rt.schema.field(name).type for name in rt.column_names}

    def batch(n, key, build, probe) -> pa.RecordBatch:
        """The output columns of n rows as Polars lays them out (zero-copy over the arrays)."""
        arrays = []
        for side, name, _, k in layout:
            if k:
                typ, valid = ktype, None
                values = key.view(np.uint64) if typ == pa.uint64() else key.astype(typ.to_pandas_dtype(), copy=False)
            else:
                typ = (ltypes if side == "l" else rtypes)[name]
                values, valid = (build if side == bside else probe)[carried[side].index(name)]
            arrays.append(pa.nulls(n, typ) if values is None else _arrow(values, valid, typ))
        return pa.RecordBatch.from_arrays(arrays, names=[out for _, _, out, _ in layout])

    consumer = None if sink is None else (lambda n, key, build, probe: sink(batch(n, key, build, probe)))
    stats.phases["transform"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    with gpu_memory_cap(memory_limit):
        budget = gpu_budget(memory_limit)
        widths = [sum(c.itemsize for c in bcols), sum(c.itemsize for c in pcols)]
        pl, ids = place([bcols[0].size, pcols[0].size], widths, budget, algorithm, gpus)
        inner = inner_algorithm(algorithm)
        if ids is not None and len(ids) > 1:  # paper 000's models: the candidates' transfer times
            best, stats.params["transfer_model_s"] = transfer_model([bcols[0].size, pcols[0].size], widths, pl,
                                                                    len(ids))
            if algorithm == "auto" and best == "gsm" and mode == "inner":
                inner = "gsm"
        if algorithm == "auto" and pl.placement == "in-core" and ids is None:
            from .auto import resolve_gpu_join

            choice = resolve_gpu_join(bcols[0], pcols[0], bcols[1:], pcols[1:])
            inner, stats.params["auto"] = choice.algorithm, choice.reason
        stats.algorithm = inner if inner == "gsm" or pl.placement == "in-core" and ids is None else \
            f"{'hybrid' if ids and len(ids) > 1 else 'triton'} ({inner})"
        res = stream_join(bcols, pcols, mode, pl, ids, algorithm=inner, memory_limit=memory_limit,
                          emit_keys=emit_keys, consumer=consumer)
    stats.params.update(res.stats)
    stats.phases["match"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    out = pa.Table.from_batches([batch(0 if sink is not None else res.rows, res.key, res.build, res.probe)])
    stats.phases["materialize"] = time.perf_counter() - t2
    stats.output_rows = res.rows
    return out


def _arrow(values: np.ndarray, valid: np.ndarray | None, typ: pa.DataType) -> pa.Array:
    """An Arrow array of type ``typ`` over ``values`` (zero-copy), null where ``valid`` is False."""
    bitmap = None
    null_count = 0
    if valid is not None:
        null_count = int(values.size - np.count_nonzero(valid))
        if null_count:
            bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, values.size, [bitmap, pa.py_buffer(values)], null_count=null_count)
