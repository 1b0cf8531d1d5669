"""The group-by front end: keys, aggregates, backend and algorithm, output assembly (SQL semantics)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..backend import resolve_algorithm, resolve_device
from ..cpu.groupby import pgb
from ..cpu.kernels import factorize
from ..errors import ComputeError, InvalidOperationError
from ..table import check_columns, combined, decoded, is_string_type, on_device, take, to_arrow_table
from .keys import decimal64, encode_keys, integer_view, no_nulls, temporal_storage

FUNCTIONS = ("sum", "count", "size", "min", "max", "mean", "n_unique")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass
class GroupByStats:
    """What a group-by did: phase times in seconds (group ids, aggregate, materialize) and sizes."""

    algorithm: str
    device: str
    rows: int
    groups: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    params: dict = field(default_factory=dict)


class GroupBy:
    """A table grouped by key columns; call :meth:`agg` to compute aggregates.

    Made by :func:`gpujoin.group_by`.
    """

    def __init__(self, table, by, *, algorithm: str = "auto", device: str = "auto", memory_limit=None, gpus=None):
        from ..outofcore.budget import resolve_memory_limit
        from .join import _check_gpus

        self._memory_limit = resolve_memory_limit(memory_limit)
        _check_gpus(gpus, device)
        self._gpus = gpus
        self._by = [by] if isinstance(by, str) else list(by)
        if not self._by:
            raise ValueError("group_by needs at least one key column in 'by'")
        self._on_device = on_device(table)
        if self._on_device:  # a DeviceTable or dict of GPU arrays: stays in GPU memory
            from ..cuda.table import as_device_table

            if device not in ("auto", "cuda"):
                raise RuntimeError(f"device={device!r}: this table is in GPU memory; use device='cuda' or "
                                   f"'auto', or pass a host table (DeviceTable.to_arrow())")
            self._table = as_device_table(table)
            device = "cuda"
        else:
            self._table = to_arrow_table(table)
        check_columns(self._table, self._by, "input")
        self._device = resolve_device(device, "group_by")
        self._algorithm = resolve_algorithm("group_by", algorithm, self._device)
        self.stats: GroupByStats | None = None

    def agg(self, **aggs: tuple[str | None, str]) -> pa.Table:
        """Aggregate each group: ``name=(column, function)``, function in sum, count, size, min, max,
        mean, n_unique.

        ``count`` counts non-null values, ``n_unique`` distinct non-null values (SQL
        count(DISTINCT); floats compare as the keys do, all NaNs one value, -0.0 equal to 0.0;
        on the GPU a sort of the rows' (key, value) pairs in GPU memory, so in core only:
        InvalidOperationError before any work where the group-by would run out of core),
        ``size`` counts rows (its column may be None); nulls
        are skipped by every aggregate, an all-null group's sum, min, max and mean are null, and
        rows with null keys form one group, as in SQL.

        Returns
        -------
        pyarrow.Table, or DeviceTable for a table in GPU memory
            The key columns, then one column per aggregate, in the order given; one row per group,
            in unspecified order.  sum gives int64 for integers, float64 for floats, decimal128(38, s)
            for decimals; count and size int64; mean float64; min and max the column's type.

        Raises
        ------
        ValueError
            An unknown function, or a spec that is not a (column, function) pair.
        ColumnNotFoundError
            A column not in the table.
        InvalidOperationError
            A function the column's type does not support (the sum of a string column).
        ComputeError
            An integer sum outside int64, or decimal values wider than 64 bits.
        MemoryError
            On the GPU, when the group-by does not fit in free GPU memory (nothing is left allocated).
        """
        specs = []
        for name, spec in aggs.items():
            if not (isinstance(spec, tuple) and len(spec) == 2):
                raise ValueError(f"aggregate {name!r} must be a (column, function) pair, got {spec!r}")
            col, fn = spec
            if fn not in FUNCTIONS:
                raise ValueError(f"unknown aggregate function {fn!r} for {name!r}; valid: {list(FUNCTIONS)}")
            if fn != "size" or col is not None:
                check_columns(self._table, [col], "input")
            specs.append((name, col, fn))
        names = list(self._by)
        for name, _, _ in specs:
            if name in names:
                raise ValueError(f"output column {name!r} appears twice; give the aggregate another name")
            names.append(name)
        if self._on_device:
            from .device_groupby import execute_device_group_by

            from ..outofcore.budget import gpu_memory_cap

            with gpu_memory_cap(self._memory_limit):
                out, self.stats = execute_device_group_by(self._table, self._by, specs, self._algorithm)
            return out
        return self._run(specs)

    def _run(self, specs) -> pa.Table:
        t = self._table
        stats = GroupByStats(self._algorithm, self._device, t.num_rows)
        t0 = time.perf_counter()
        raw = [combined(t, b) for b in self._by]
        keys = [decoded(k) for k in raw]  # (the output's keys keep their types: taken from the rows)
        requests = {}
        for _, col, fn in specs:  # check every column's type before any work
            if fn != "size" and col not in requests:
                requests[col] = _request(t, col)
                requests[col].device = self._device
            if fn != "size":
                requests[col].check(fn)
        if self._device == "cuda":
            from .gpu_reduce import GpuReducer

            enc = encode_keys([keys], nulls_equal=True, narrow=True)
            # the codes are the key values (not of a dictionary column): no first rows to take them from
            same = _keys_are_codes(raw)
            reducer = GpuReducer(self._algorithm, enc.keys[0], [r for r in requests.values() if r.kind != "null"],
                                 self._memory_limit, first_rows=not same, gpus=self._gpus)
            stats.params["key_from"] = "codes" if same else "first rows"
            stats.params.update(reducer.params)
            stats.algorithm = reducer.algorithm
        else:
            enc = encode_keys([keys], nulls_equal=True)
            reducer = CpuReducer(factorize(enc.keys[0][None, :]))
        t1 = time.perf_counter()
        stats.phases["group_ids"] = t1 - t0
        stats.groups = reducer.num_groups
        if reducer.first_rows is None:
            out_cols = {self._by[0]: _key_column(reducer.group_keys, keys[0].type)}
        else:
            out_cols = {name: col for name, col in zip(self._by, take(t.select(self._by), reducer.first_rows).columns)}
        for name, col, fn in specs:
            out_cols[name] = _aggregate(requests.get(col), fn, reducer)
        stats.phases["aggregate"] = time.perf_counter() - t1
        stats.phases.update({f"gpu_{k}": v for k, v in getattr(reducer, "phases", {}).items()})
        self.stats = stats
        return pa.table(out_cols)


def group_by(table, by, *, algorithm: str = "auto", device: str = "auto", memory_limit=None, gpus=None) -> GroupBy:
    """Group ``table`` by the key column(s) ``by``; finish with ``.agg(name=(column, function), ...)``.

    Parameters
    ----------
    table : gpujoin.Table, pyarrow.Table, pandas.DataFrame, polars.DataFrame or dict of arrays
    by : str or list of str
        Key columns: integers, floats, decimals, dates, times, timestamps, durations, bools or strings
        (a dictionary-encoded column as its values).
    algorithm : str
        "auto" or a group-by algorithm of the device (``gpujoin.algorithms()``).
    device : {"auto", "cpu", "cuda"}
    memory_limit : int or str, optional
        GPU memory the group-by may take (bytes, or e.g. ``"16GB"``; default
        ``GPUJOIN_MEMORY_LIMIT``, else the free memory).  Host tables larger than that are
        grouped out of core: hash-partitioned by key into GPU memory and spilled pinned host
        memory, then aggregated a partition at a time.
    gpus : int or list of int, optional
        Spread the group-by of a host table over several GPUs of this host (a count, or device
        ids; ``memory_limit`` is then each GPU's): each partitions a share of the rows, then
        aggregates a share of the partitions (``dist/groupby.py``).  Default: one GPU, and every
        GPU of the host when the group-by does not fit one GPU's budget.

    Raises
    ------
    ColumnNotFoundError, ValueError, TypeError
        A missing key column, an empty ``by``, an unknown algorithm or device, an unsupported input.

    References
    ----------
    Paper 003 §2 (hash, sort and partition group-by), doi:10.1145/3709689.
    """
    return GroupBy(table, by, algorithm=algorithm, device=device, memory_limit=memory_limit, gpus=gpus)


def _validity(arr: pa.Array):
    return (np.asarray(arr.is_valid()), True) if arr.null_count else (np.empty(0, np.bool_), False)


def _int_values(name: str, arr: pa.Array) -> np.ndarray:
    """int64 values of an integer-like, date, timestamp or decimal column (null slots arbitrary)."""
    t = arr.type
    if pa.types.is_decimal128(t):
        lo = decimal64(arr)
        if lo is None:
            raise ComputeError(f"column {name!r} ({t}) holds values beyond 64 bits, which aggregates do not "
                               f"support yet; cast it to float64 or to a decimal with precision <= 18")
        return lo
    arr = integer_view(arr)
    if pa.types.is_uint64(t):
        try:
            arr = arr.cast(pa.int64())
        except pa.ArrowInvalid:
            raise ComputeError(f"column {name!r} (uint64) has values above 2**63-1, which aggregates do "
                               f"not support; cast it to float64") from None
    from ..outofcore.stream import parallel_astype

    return parallel_astype(no_nulls(arr).to_numpy(zero_copy_only=False), np.int64)  # widened by threads: 2^30 rows


def _from_words(w0: np.ndarray, w1: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
    words = np.empty(2 * w0.size, np.uint64)
    words[0::2], words[1::2] = w0, w1.view(np.uint64)
    bitmap = None if valid.all() else pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(t, w0.size, [bitmap, pa.py_buffer(words)])


@dataclass
class _Request:
    """One input column prepared for reduction: kind "int" (int64 values), "float" (float64),
    "string" (order-preserving int64 codes into ``uniq``), "null" (Arrow's null type: count is 0,
    sum, mean, min and max null, as Polars answers; nothing reduced), or "other" (a type only
    count supports; its values are zeros)."""

    name: str
    typ: pa.DataType
    kind: str
    values: np.ndarray
    valid: np.ndarray
    has_valid: bool
    uniq: pa.Array | None = None
    device: str = "cpu"
    distinct: bool = False  # an n_unique of it is asked

    def check(self, fn: str) -> None:
        check_aggregate(self.name, self.typ, self.kind, fn)
        if fn == "n_unique":
            self.distinct = True  # (the GPU's reducer counts it apart: in core over all rows, else a partition at a time)


def check_aggregate(col: str, typ: pa.DataType, kind: str, fn: str) -> None:
    """InvalidOperationError where aggregate ``fn`` (not "size") is not defined for column ``col``
    of Arrow type ``typ``; ``kind`` "string", "other" (binary values and the like: count only) or
    a numeric kind.  The host engine's rule, and DeviceTables' (plan.device_groupby)."""
    if kind == "string" and fn not in ("min", "max", "count", "n_unique"):
        raise InvalidOperationError(f"cannot compute {fn} of column {col!r} of type {typ}; "
                                    f"strings support count, n_unique, size, min and max")
    if kind == "other" and fn != "count":
        raise InvalidOperationError(f"cannot aggregate column {col!r} of type {typ}")
    if temporal_storage(typ) is not None and fn in ("sum", "mean"):
        raise InvalidOperationError(f"cannot compute {fn} of column {col!r} of type {typ}; dates, times, "
                                    f"timestamps and durations support count, n_unique, size, min and max")


def _keys_are_codes(keys: list[pa.Array]) -> bool:
    """Whether ``encode_keys`` gives back the key values themselves: one integer (not uint64) or
    date32 column without nulls."""
    if len(keys) != 1 or keys[0].null_count:
        return False
    t = keys[0].type
    return (pa.types.is_integer(t) and t != pa.uint64()) or pa.types.is_date32(t)


def _key_column(codes: np.ndarray, typ: pa.DataType) -> pa.Array:
    """The key column of type ``typ`` from codes that are its values (``_keys_are_codes``)."""
    if pa.types.is_date32(typ):
        return pa.array(codes.astype(np.int32, copy=False)).view(typ)
    return pa.array(codes.astype(typ.to_pandas_dtype(), copy=False))


def _request(t: pa.Table, col: str) -> _Request:
    arr = decoded(combined(t, col))  # (a dictionary column aggregates as its values, min/max of their type)
    typ = arr.type
    if pa.types.is_null(typ):  # every value null (Arrow's type of no values): answered without a reduction
        return _Request(col, typ, "null", np.zeros(len(arr), np.int64), np.zeros(len(arr), bool), True)
    valid, has_valid = _validity(arr)
    if is_string_type(typ):
        # order-preserving codes: rank in the sorted distinct values
        uniq = pc.unique(arr.cast(pa.large_string())).drop_null()
        uniq = uniq.take(pc.sort_indices(uniq))
        values = pc.index_in(arr.cast(pa.large_string()), value_set=uniq).fill_null(0).to_numpy().astype(np.int64)
        return _Request(col, typ, "string", values, valid, has_valid, uniq)
    if pa.types.is_floating(typ):
        return _Request(col, typ, "float", arr.cast(pa.float64()).fill_null(0).to_numpy(), valid, has_valid)
    if not (pa.types.is_integer(typ) or pa.types.is_decimal128(typ) or pa.types.is_boolean(typ)
            or temporal_storage(typ) is not None):
        return _Request(col, typ, "other", np.zeros(len(arr), np.int64), valid, has_valid)
    return _Request(col, typ, "int", _int_values(col, arr), valid, has_valid)


class CpuReducer:
    """Per-group reductions on the CPU engine (cpu/groupby/pgb.py) over one factorization."""

    def __init__(self, fact):
        self.fact = fact
        self.num_groups = fact.num_groups
        self.first_rows = fact.first_rows
        self._reduced: dict = {}  # one pass a column, however many of its aggregates are asked

    def sizes(self) -> np.ndarray:
        # a column without nulls already counted every row of each group
        done = next((r[0] for req, r in self._reduced.values() if not req.has_valid), None)
        return pgb.group_sizes(self.fact) if done is None else done

    def n_unique(self, req: _Request) -> np.ndarray:
        """Distinct non-null values per group, int64 (g,): the distinct (group, value) pairs of the
        non-null rows, counted by group."""
        values = req.values
        if req.kind == "float":  # the keys' float equality: -0.0 == 0.0, every NaN one value
            values = np.where(np.isnan(values), np.nan, values + 0.0).view(np.int64)
        rows = np.flatnonzero(req.valid) if req.has_valid else slice(None)
        codes = self.fact.codes[rows]
        pairs = factorize(np.ascontiguousarray(np.stack([codes, values[rows].astype(np.int64, copy=False)])))
        return np.bincount(codes[pairs.first_rows], minlength=self.num_groups).astype(np.int64)

    def reduce(self, req: _Request):
        if id(req) not in self._reduced:
            f = pgb.reduce_float if req.kind == "float" else pgb.reduce_int
            self._reduced[id(req)] = (req, f(req.values, req.valid, req.has_valid, self.fact))
        return self._reduced[id(req)][1]


def _aggregate(req: _Request | None, fn: str, reducer) -> pa.Array:
    if fn == "size" or (fn == "count" and not req.has_valid):
        return pa.array(reducer.sizes())
    if req.kind == "null" and fn != "n_unique":
        return pa.array(np.zeros(reducer.num_groups, np.int64)) if fn == "count" else pa.nulls(reducer.num_groups)
    if fn == "n_unique":
        return pa.array(reducer.n_unique(req))
    typ = req.typ
    if req.kind == "string":
        count, _, _, vmin, vmax = reducer.reduce(req)
        if fn == "count":
            return pa.array(count)
        codes = vmin if fn == "min" else vmax
        return req.uniq.take(pa.array(codes, mask=count == 0)).cast(typ)
    if req.kind == "float":
        count, vsum, vmin, vmax = reducer.reduce(req)
        empty = count == 0
        if fn == "count":
            return pa.array(count)
        if fn == "sum":
            return pa.array(vsum, mask=empty)
        if fn == "mean":
            return pa.array(vsum / np.maximum(count, 1), mask=empty)
        return pa.array(vmin if fn == "min" else vmax, mask=empty).cast(typ)
    temporal = temporal_storage(typ) is not None
    count, sum_hi, sum_lo, vmin, vmax = reducer.reduce(req)
    empty = count == 0
    if fn == "count":  # also the one aggregate of an "other" column
        return pa.array(count)
    if fn in ("min", "max"):
        v = vmin if fn == "min" else vmax
        if pa.types.is_decimal128(typ):
            return _from_words(v.view(np.uint64), v >> 63, ~empty, typ)
        if pa.types.is_boolean(typ):
            return pa.array(v.astype(bool), mask=empty)
        phys = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[typ.bit_width]
        if pa.types.is_unsigned_integer(typ):
            return pa.array(v, mask=empty).cast(typ)
        return pa.array(v.astype(phys.to_pandas_dtype()), mask=empty).view(typ) if temporal else \
            pa.array(v, mask=empty).cast(typ)
    if fn == "mean":
        total = sum_hi.astype(np.float64) * 2.0 ** 32 + sum_lo.astype(np.float64)
        scale = 10.0 ** typ.scale if pa.types.is_decimal128(typ) else 1.0
        return pa.array(total / np.maximum(count, 1) / scale, mask=empty)
    w0, w1 = pgb.exact_sum_words(sum_hi, sum_lo)
    if pa.types.is_decimal128(typ):
        return _from_words(w0, w1, ~empty, pa.decimal128(38, typ.scale))
    fits = (w1 == (w0.view(np.int64) >> 63))
    if not fits[~empty].all():
        raise ComputeError(f"the sum of column {req.name!r} overflows int64 in at least one group; "
                           f"cast the column to float64 or decimal128 first")
    return pa.array(w0.view(np.int64), mask=empty)

