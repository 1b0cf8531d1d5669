"""DeviceTable: columns in GPU memory, the input and output of device-resident joins and group-bys."""

from __future__ import annotations

from dataclasses import dataclass

import cupy as cp
import numpy as np
import pyarrow as pa

from ..table import decimal_to_int64, decoded, int64_to_decimal, is_string_type, without_views


@dataclass(frozen=True)
class HashPartitioning:
    """A DeviceTable's rows grouped by the top ``runs.bits`` bits of the ``radix_bits``-bit
    digit that PHJ partitions ``column`` on (the low bits of the murmur3 hash of the int32/int64
    key: cuda.join.phj), in the pieces ``runs`` (cuda.primitives.Runs) lists: what paper 001's
    shuffle leaves when its partition does the local join's first radix pass
    (dist.radix_shuffle.exchange_partitioned), so that the join partitions only the bits below.
    ``key`` is the key column's array it was made for: a table whose column was replaced since
    is not taken as partitioned.  ``ready``: a CUDA event after which the rows are in place, where
    the shuffle finished this table before its last work on the stream (a join's statistics may
    read it from another stream from then on), or None."""

    column: str
    radix_bits: int
    runs: object
    key: object
    ready: object = None


class DeviceTable:
    """Named columns on the GPU.

    Parameters
    ----------
    columns : dict of name -> CuPy array (n,), fixed-width (integers, floats, bool)
    validity : dict of name -> uint8/bool CuPy array (n,), 1 where the value is present;
        a column without an entry has no nulls
    types : dict of name -> pyarrow type to give the column on the host (default: from dtype).
        Dates and timestamps are stored as their int32/int64 counts, decimals (whose values fit
        64 bits) as int64 unscaled values, strings and binaries as int32 codes into ``dictionaries``.
    dictionaries : dict of name -> pyarrow string (or binary) array, the values of a string (or
        binary) column's codes (a code of i stands for ``dictionaries[name][i]``)
    partitioning : HashPartitioning, or None: how the rows are already grouped (set by a
        shuffle that did a join's first radix pass; a table made from this one does not keep it)
    """

    def __init__(self, columns: dict, validity: dict | None = None, types: dict | None = None,
                 dictionaries: dict | None = None, partitioning: HashPartitioning | None = None):
        self.columns = {name: cp.asarray(a) for name, a in columns.items()}
        lengths = {a.shape[0] for a in self.columns.values()} if self.columns else {0}
        if len(lengths) > 1 or any(a.ndim != 1 for a in self.columns.values()):
            raise ValueError(f"DeviceTable columns must be 1-D and of one length, got {sorted(lengths)}")
        self.validity = {k: v for k, v in (validity or {}).items() if v is not None}
        self.types = {k: v for k, v in (types or {}).items() if v is not None}
        self.dictionaries = {k: v for k, v in (dictionaries or {}).items() if v is not None}
        self.partitioning = partitioning

    @property
    def num_rows(self) -> int:
        return next(iter(self.columns.values())).shape[0] if self.columns else 0

    @property
    def column_names(self) -> list[str]:
        return list(self.columns)

    def __getitem__(self, name: str) -> cp.ndarray:
        return self.columns[name]

    def meta(self, name: str, out: str | None = None) -> tuple[dict, dict]:
        """({out: type}, {out: dictionary}) of column ``name``: what a derived column keeps."""
        out = name if out is None else out
        return ({out: self.types[name]} if name in self.types else {},
                {out: self.dictionaries[name]} if name in self.dictionaries else {})

    def select(self, names: list[str]) -> DeviceTable:
        """The columns ``names``, in that order (no copy)."""
        return DeviceTable({n: self.columns[n] for n in names},
                           {n: self.validity[n] for n in names if n in self.validity},
                           {n: self.types[n] for n in names if n in self.types},
                           {n: self.dictionaries[n] for n in names if n in self.dictionaries})

    def rename(self, mapping: dict[str, str]) -> DeviceTable:
        """The table with columns renamed by ``mapping`` (old -> new; no copy)."""
        m = lambda n: mapping.get(n, n)  # noqa: E731
        return DeviceTable({m(n): a for n, a in self.columns.items()}, {m(n): v for n, v in self.validity.items()},
                           {m(n): v for n, v in self.types.items()}, {m(n): v for n, v in self.dictionaries.items()})

    def with_column(self, name: str, values: cp.ndarray, type: pa.DataType | None = None) -> DeviceTable:
        """The table with column ``name`` added or replaced (values (n,) without nulls)."""
        out = self.select([n for n in self.columns if n != name])
        out.columns[name] = cp.asarray(values)
        if type is not None:
            out.types[name] = type
        return out

    def filter(self, mask: cp.ndarray) -> DeviceTable:
        """The rows where ``mask`` (bool (n,)) is true, in order."""
        rows = cp.flatnonzero(mask)
        if rows.size == self.num_rows:
            return self
        return DeviceTable({n: a[rows] for n, a in self.columns.items()},
                           {n: v[rows] for n, v in self.validity.items()}, self.types, self.dictionaries)

    @classmethod
    def from_arrow(cls, table: pa.Table) -> DeviceTable:
        """Copy a pyarrow table to the GPU: integer, float, bool, temporal, decimal128 (whose
        values fit 64 bits: any of precision <= 18), string, binary and all-null (Arrow's null
        type: int8 under an all-0 mask) columns; strings and binaries (UUIDs, digests: binary, large_binary, fixed_size_binary)
        are dictionary-encoded on the host first (views as large_string, large_binary).  Dictionary columns of strings or binaries keep their
        dictionary; dictionaries of other values (pandas' categoricals of numbers or dates) are
        decoded to their values, as the host path compares them (``table.decoded``).

        Raises TypeError for other column types (the message names the column).
        """
        cols, valid, types, dicts = {}, {}, {}, {}
        table = without_views(table)
        for name, col in zip(table.column_names, table.columns):
            t = col.type
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            if pa.types.is_dictionary(t) and not coded_type(t.value_type):
                arr = decoded(arr)
                t = arr.type
            if coded_type(t) or pa.types.is_dictionary(t):
                if not pa.types.is_dictionary(t):
                    arr = arr.dictionary_encode()
                dicts[name] = arr.dictionary
                t = arr.dictionary.type
                values = arr.indices.to_numpy(zero_copy_only=False) if not arr.null_count else \
                    arr.indices.fill_null(0).to_numpy(zero_copy_only=False)
                values = values.astype(np.int32)
            elif pa.types.is_decimal128(t):
                try:
                    values = decimal_to_int64(arr)
                except TypeError as e:
                    raise TypeError(f"column {name!r}: {e}: a DeviceTable holds decimals as int64; pass an Arrow "
                                    f"table, or cast to float64") from None
            elif pa.types.is_null(t):  # an all-null column (Arrow's type of no values): int8 under an all-0 mask
                values = np.zeros(len(arr), np.int8)
            elif (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                  or pa.types.is_temporal(t)):
                storage = arr.view(pa.int32() if t.bit_width == 32 else pa.int64()) if pa.types.is_temporal(t) \
                    else arr
                if arr.null_count:  # nulls become 0 under a validity mask (to_numpy would make floats)
                    storage = storage.fill_null(False if pa.types.is_boolean(t) else 0)
                values = storage.to_numpy(zero_copy_only=False)
                values = values.astype(np.uint8) if values.dtype == np.bool_ else values
            else:
                raise TypeError(f"column {name!r}: type {t} cannot live in a DeviceTable; only integer, float, "
                                f"bool, temporal, decimal128, string, binary and all-null columns can")
            if arr.null_count:
                valid[name] = cp.asarray(arr.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8))
            cols[name] = cp.asarray(values)
            types[name] = t
        return cls(cols, valid, types, dicts)

    def to_arrow(self, decode_strings: bool = True) -> pa.Table:
        """Copy to the host as a pyarrow table (nulls where validity is 0).

        String columns come back as strings, or with ``decode_strings=False`` as dictionary
        arrays over the same values (no per-row string copy: cheaper for long outputs).
        """
        arrays = []
        for name, a in self.columns.items():
            values = cp.asnumpy(a)
            valid = cp.asnumpy(self.validity[name]).astype(bool) if name in self.validity else None
            mask = None if valid is None else ~valid
            t = self.types.get(name)
            if name in self.dictionaries:
                arr = pa.DictionaryArray.from_arrays(pa.array(values, mask=mask), self.dictionaries[name])
                arr = arr.dictionary_decode() if decode_strings else arr
            elif t is not None and pa.types.is_decimal128(t):
                arr = int64_to_decimal(values, t, valid)
            elif t is not None and pa.types.is_null(t) and (valid is None and len(values) == 0 or
                                                            valid is not None and not valid.any()):
                arr = pa.nulls(len(values))  # (all null still: with values, from another part, their type)
            else:
                if t is not None and pa.types.is_boolean(t):
                    values = values.astype(bool)
                arr = pa.array(values, mask=mask)
                if t is not None and arr.type != t and not pa.types.is_null(t):
                    arr = arr.view(t) if pa.types.is_temporal(t) else arr.cast(t)
            arrays.append(arr)
        return pa.Table.from_arrays(arrays, names=list(self.columns))

    def __repr__(self) -> str:
        cols = ", ".join(f"{n}: {self.types.get(n, a.dtype)}{'?' if n in self.validity else ''}"
                         for n, a in self.columns.items())
        return f"DeviceTable({self.num_rows} rows; {cols})"


def arrow_type(table: DeviceTable, name: str) -> pa.DataType | None:
    """The Arrow type of ``table``'s column ``name``: its ``types`` entry, a dictionary column's
    values' type, else its dtype's; None for a dtype Arrow has no type of."""
    if name in table.types:
        return table.types[name]
    if name in table.dictionaries:
        return table.dictionaries[name].type
    try:
        return pa.from_numpy_dtype(table[name].dtype)
    except (pa.ArrowNotImplementedError, NotImplementedError, TypeError):
        return None


def coded_type(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` lives in a DeviceTable as int32 codes into a dictionary:
    strings and binaries (Arrow's view types are cast to large ones first)."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t))


def _union_type(column_names: list, dictionaries: list) -> pa.DataType:
    """The one type of a group's dictionaries' union: large_string or string, large_binary or
    binary, or the group's fixed_size_binary where all are of that one width.

    Raises TypeError where the group mixes strings with binaries."""
    strings = [is_string_type(d.type) for d in dictionaries]
    if any(strings) and not all(strings):
        raise TypeError(f"columns {column_names}: strings joined or stacked with binary values; cast one side "
                        f"(pyarrow.compute.cast) so that both are strings or both binary")
    if all(strings):
        return pa.large_string() if any(pa.types.is_large_string(d.type) for d in dictionaries) else pa.string()
    first = dictionaries[0].type
    if pa.types.is_fixed_size_binary(first) and all(d.type == first for d in dictionaries):
        return first
    return pa.large_binary() if any(pa.types.is_large_binary(d.type) for d in dictionaries) else pa.binary()


def one_value(t: pa.DataType) -> pa.Array:
    """A dictionary of one value of string or binary type ``t`` (an empty string, or a
    fixed_size_binary's zero bytes): what an all-null column's codes index where its dictionary
    is empty."""
    if is_string_type(t):
        return pa.array([""], t)
    return pa.array([b"\0" * t.byte_width if pa.types.is_fixed_size_binary(t) else b""], t)


def key_validity(table: DeviceTable, names: list[str]):
    """bool (n,) rows of ``table`` whose columns ``names`` are all present, or None (no nulls)."""
    valid = None
    for n in names:
        v = table.validity.get(n)
        if v is not None:
            v = v.astype(bool)
            valid = v if valid is None else valid & v
    return valid


def as_device_table(x) -> DeviceTable:
    return x if isinstance(x, DeviceTable) else DeviceTable(x)


def unify_dictionaries(tables: list[DeviceTable], groups: list[list[tuple[int, str]]], comm=None) -> list:
    """``tables`` with each group of string (or binary) columns (``(table index, column)`` pairs)
    re-coded into one dictionary that the group shares: the union of the group's dictionaries, in
    order, so that equal strings have equal int32 codes (a join's keys, a concatenation's parts).

    ``comm`` (a ``gpujoin.dist.Communicator``: its ``rank`` and ``allgather``) widens the union
    to the group's dictionaries on every rank, in rank order, so that it is the same on each;
    then every rank must call it with the same groups (a collective).  A column whose codes
    already mean the union's (the first dictionary, without repeats) keeps its codes: only the
    dictionary is replaced.  The dictionaries' union is found on the GPU (cuda.strings.union_codes:
    their bytes copied, hashed, sorted; Arrow's host hash for a few thousand strings, or where a
    64-bit hash collides); the codes are re-coded by one gather of (n,) int32 on the GPU.

    Raises
    ------
    TypeError
        A column of a group that is not a string column (on some rank), or a group of strings
        and binaries.
    """
    import pyarrow.compute as pc

    from .strings import GPU_UNION_MIN, union_codes

    tables = list(tables)
    for group in groups:
        mine = [tables[i].dictionaries.get(c) for i, c in group]
        if any(d is None for d in mine):
            raise TypeError(f"columns {[c for _, c in group]}: a string column on one side only, or on some ranks "
                            f"only; give both sides and every rank string columns there")
        ranks = comm.allgather(mine) if comm is not None else [mine]
        every = [d for ds in ranks for d in ds]
        if all(d is every[0] for d in every):
            continue  # one dictionary already
        kind = _union_type([c for _, c in group], every)
        # the union (first appearance, so the first dictionary keeps its codes) and each entry's
        # code in it: hashed on the GPU (cuda.strings), else one host hash pass (Arrow's memo
        # table; pc.unique, then pc.index_in a column, took 2.6x as long)
        hashed = pa.binary() if pa.types.is_fixed_size_binary(kind) else kind  # (the hash reads offsets)
        every, got = [d.cast(hashed) for d in every], None
        if sum(len(d) for d in every) >= GPU_UNION_MIN and not any(d.null_count for d in every):
            got = union_codes(every)  # (None: a 64-bit collision)
        if got is None:
            enc = pc.dictionary_encode(pa.concat_arrays(every), null_encoding="encode")
            got = enc.dictionary, cp.asarray(enc.indices.to_numpy(zero_copy_only=False).astype(np.int32))
        union, code = got
        if union.type != kind:  # (fixed_size_binary of one width: hashed as binary, kept as it was)
            union = union.cast(kind)
        start = sum(len(d) for ds in ranks[:comm.rank if comm is not None else 0] for d in ds)
        for (i, c), local in zip(group, mine):
            t = tables[i]
            remap, start = code[start:start + len(local)], start + len(local)
            out = t.select(t.column_names)  # the same columns, in order; this one re-coded
            if not bool((remap == cp.arange(remap.size, dtype=cp.int32)).all()):
                codes = t.columns[c]
                # a null slot's code may be anything: clip it into range (its value is never read)
                new = remap[cp.clip(codes, 0, max(0, remap.size - 1))] if remap.size else codes
                out.columns[c] = new.astype(codes.dtype, copy=False)
            out.dictionaries[c] = union
            tables[i] = out
    return tables


def concat_tables(tables: list[DeviceTable]) -> DeviceTable:
    """One DeviceTable of ``tables``' rows, in order: the same columns in each (the first's
    types kept; a string column's parts re-coded into one dictionary where theirs differ,
    :func:`unify_dictionaries`); a column with nulls in some part gets a mask, all-valid in the
    others.

    Raises
    ------
    ValueError
        No tables, or tables whose column names differ.
    TypeError
        A column that is a string column in some parts only.
    """
    if not tables:
        raise ValueError("concat_tables needs at least one table")
    names = tables[0].column_names
    for t in tables[1:]:
        if t.column_names != names:
            raise ValueError(f"concat_tables: column names differ: {names} and {t.column_names}")
    if len(tables) == 1:
        return tables[0]
    tables = unify_dictionaries(tables, [[(i, n) for i in range(len(tables))] for n in names
                                         if any(n in t.dictionaries for t in tables)])
    cols = {n: cp.concatenate([t.columns[n] for t in tables]) for n in names}
    validity = {n: cp.concatenate([t.validity[n].astype(cp.uint8, copy=False) if n in t.validity
                                   else cp.ones(t.num_rows, cp.uint8) for t in tables])
                for n in names if any(n in t.validity for t in tables)}
    return DeviceTable(cols, validity, dict(tables[0].types), dict(tables[0].dictionaries))
