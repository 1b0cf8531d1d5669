"""Key normalization: any supported key columns become one int64 key per row.

Every join and group-by algorithm works on int64 keys.  This module maps the user's key columns
(integers, dates, timestamps, decimals, floats, strings; one column or several) onto them:

- fixed-width types map to their physical value as int64 (floats canonicalized so that
  -0.0 == 0.0 and all NaNs are one value, as DuckDB compares them);
- strings are dictionary-encoded, with one dictionary shared by both sides of a join;
- several columns (or a decimal wider than 64 bits, or a nullable key whose nulls must compare
  equal) are factorized jointly into dense int64 codes, which is exact: equal tuples get equal
  codes and distinct tuples distinct ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..cpu.kernels import factorize
from ..errors import SchemaError
from ..table import decoded, is_string_type


def temporal_storage(t: pa.DataType) -> pa.DataType | None:
    """The integer type behind a date, time, timestamp or duration type (its counts of days or of
    its unit), or None for any other."""
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.int32()
    if pa.types.is_date64(t) or pa.types.is_time64(t) or pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return pa.int64()
    return None


def key_kind(t: pa.DataType) -> str | None:
    """The family a key type joins within, or None when it cannot be a key."""
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t) and not pa.types.is_float16(t):
        return "float"
    if pa.types.is_decimal128(t):
        return "decimal"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_time(t):  # (time32 with time64: promoted to the finer unit, as Arrow does)
        return "time"
    if pa.types.is_duration(t):
        return "duration"
    if pa.types.is_date64(t):
        return "date64"
    if pa.types.is_boolean(t):
        return "bool"
    if is_string_type(t):
        return "string"
    if is_binary_type(t):
        return "binary"
    return None


def is_binary_type(t: pa.DataType) -> bool:
    """Binary, large binary or fixed-size binary (UUIDs, digests): bytes compared as strings are."""
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


_COMPATIBLE = {
    frozenset({"integer"}), frozenset({"float"}), frozenset({"decimal"}), frozenset({"date"}),
    frozenset({"timestamp"}), frozenset({"bool"}), frozenset({"string"}), frozenset({"time"}),
    frozenset({"duration"}), frozenset({"date64"}), frozenset({"binary"}),
    frozenset({"integer", "float"}), frozenset({"integer", "decimal"}),
}


def promote_key_types(left_name: str, left_type: pa.DataType, right_name: str,
                      right_type: pa.DataType) -> pa.DataType:
    """The type both key columns are cast to, as Arrow promotes (int32 with int64 gives int64).

    Raises
    ------
    SchemaError
        The two types cannot be compared (an integer with a string), naming both columns.
    """
    # a dictionary-encoded key joins as its values (cast_key decodes it)
    left_type, right_type = (t.value_type if pa.types.is_dictionary(t) else t for t in (left_type, right_type))
    if pa.types.is_null(left_type) or pa.types.is_null(right_type):  # all-null column: takes the other's type
        other = right_type if pa.types.is_null(left_type) else left_type
        if pa.types.is_null(other):  # (both all-null: nulls of the narrowest integer, which match nothing)
            return pa.int8()
        return pa.large_string() if is_string_type(other) else \
            pa.large_binary() if is_binary_type(other) else other
    kinds = (key_kind(left_type), key_kind(right_type))
    for name, t, kind in ((left_name, left_type, kinds[0]), (right_name, right_type, kinds[1])):
        if kind is None:
            raise SchemaError(f"join key {name!r} has type {t}, which cannot be a join key; use an integer, "
                              f"float, decimal, date, time, timestamp, duration, bool, string or binary column")
    if frozenset(kinds) not in _COMPATIBLE:
        raise SchemaError(
            f"join keys {left_name!r} ({left_type}) and {right_name!r} ({right_type}) have incompatible "
            f"types; cast one of them so both are {kinds[0]} or both are {kinds[1]}"
        )
    if kinds[0] == "string":
        return pa.large_string()
    if kinds[0] == "binary":
        return pa.large_binary()
    if left_type == right_type:
        return left_type
    try:
        schema = pa.unify_schemas([pa.schema([("k", left_type)]), pa.schema([("k", right_type)])],
                                  promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:
        raise SchemaError(f"join keys {left_name!r} ({left_type}) and {right_name!r} ({right_type}) "
                          f"cannot be promoted to a common type: {exc}") from None
    return schema.field("k").type


def cast_key(name: str, arr: pa.Array, to: pa.DataType) -> pa.Array:
    """Cast a key column (a dictionary-encoded one decoded) to the promoted type; a value that
    does not fit is a SchemaError."""
    arr = decoded(arr)
    if arr.type == to:
        return arr
    try:
        return pc.cast(arr, to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"join key {name!r}: cannot cast {arr.type} to the common key type {to}: {exc}") from None


def _validity(arr: pa.Array) -> np.ndarray | None:
    return np.asarray(arr.is_valid()) if arr.null_count else None


def no_nulls(a: pa.Array) -> pa.Array:
    """``a`` with null slots zeroed (itself, not a copy, when it has none: Arrow's fill_null copies)."""
    return a.fill_null(0) if a.null_count else a


def decimal_words(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The low and high int64 words of a decimal128 column's values (strided views)."""
    words = np.frombuffer(arr.buffers()[1], np.int64)[2 * arr.offset: 2 * (arr.offset + len(arr))]
    return words[0::2], words[1::2]


def integer_view(arr: pa.Array) -> pa.Array:
    """The integers behind a date, time, timestamp or duration column (its counts of days or of
    its unit) or a boolean one (0/1), in the same order; any other column itself."""
    t = arr.type
    storage = temporal_storage(t)
    if storage is not None:
        return arr.view(storage)
    if pa.types.is_boolean(t):
        return arr.cast(pa.int8())
    return arr


def decimal64(arr: pa.Array) -> np.ndarray | None:
    """The int64 unscaled values of a decimal128 column when every value fits in 64 bits (null
    slots arbitrary), else None."""
    lo, hi = decimal_words(arr)
    valid = np.asarray(arr.is_valid()) if arr.null_count else slice(None)
    return np.ascontiguousarray(lo) if np.array_equal(hi[valid], (lo >> 63)[valid]) else None


def physical(arr: pa.Array) -> list[np.ndarray]:
    """The int64 column(s) whose equality is the key's equality (fixed-width types only).

    Slots that are null hold unspecified values; decimals give two columns (low and high words
    of the 128-bit value; ``encode_keys`` drops the high one when every value fits in 64 bits).
    """
    t = arr.type
    if pa.types.is_decimal128(t):
        return [np.ascontiguousarray(w) for w in decimal_words(arr)]
    if pa.types.is_floating(t):
        x = arr.cast(pa.float64()).to_numpy(zero_copy_only=False) + 0.0  # -0.0 + 0.0 == +0.0
        x = np.where(np.isnan(x), np.nan, x)  # one NaN bit pattern
        return [x.view(np.int64)]
    x = no_nulls(integer_view(arr)).to_numpy(zero_copy_only=False)
    if x.dtype == np.uint64:
        return [x.view(np.int64)]
    return [x.astype(np.int64, copy=False)]


def string_codes(arrays: list[pa.Array]) -> list[np.ndarray]:
    """Dictionary codes (int64) of several string (or binary) arrays under one shared dictionary."""
    wide = pa.large_binary() if is_binary_type(arrays[0].type) else pa.large_string()
    parts = [a.cast(wide) for a in arrays]
    enc = pa.concat_arrays(parts).dictionary_encode()
    codes = enc.indices.fill_null(0).to_numpy().astype(np.int64)
    out, start = [], 0
    for a in arrays:
        out.append(codes[start:start + len(a)])
        start += len(a)
    return out


@dataclass
class EncodedKeys:
    """One int64 key per row for each side (int32 when narrowed), and which rows have a non-null key."""

    keys: list[np.ndarray]
    valid: list[np.ndarray | None]


def _narrow_physical(t: pa.DataType) -> bool:
    """Keys of this type keep 4-byte physical values under ``encode_keys(narrow=True)``."""
    return (pa.types.is_date32(t) or t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16()))


def encode_keys(sides: list[list[pa.Array]], nulls_equal: bool, narrow: bool = False) -> EncodedKeys:
    """Encode the key columns of one or more sides jointly into int64 keys.

    Parameters
    ----------
    sides : list of sides, each a list of k Arrow arrays (the key columns, already of common types)
    nulls_equal : bool
        If True, null is a value like any other (nulls match nulls; a group-by's null group);
        if False, a row with a null in any key column is marked invalid.
    narrow : bool
        A single key column of at most 32-bit integers (or date32) comes back as int32, its
        values unchanged: half the bytes for the join's partitioning (no copy for int32).

    Returns
    -------
    EncodedKeys
        Equal key tuples (across all sides) get equal int64 keys, distinct ones distinct keys.
    """
    k = len(sides[0])
    columns: list[list[np.ndarray]] = [[] for _ in sides]  # per side, its physical int64 columns
    valid: list[np.ndarray | None] = [None for _ in sides]
    for c in range(k):
        arrs = [side[c] for side in sides]
        if is_string_type(arrs[0].type) or is_binary_type(arrs[0].type):
            phys = [[codes] for codes in string_codes(arrs)]
        elif narrow and k == 1 and _narrow_physical(arrs[0].type):
            phys = [[np.asarray(no_nulls(integer_view(a))).astype(np.int32, copy=False)] for a in arrs]
        else:
            phys = [physical(a) for a in arrs]
            if pa.types.is_decimal128(arrs[0].type) and all(
                    np.array_equal(p[1], p[0] >> 63) for p in phys):
                phys = [p[:1] for p in phys]  # every value fits in 64 bits
        null_flags = nulls_equal and any(a.null_count for a in arrs)
        for s, a in enumerate(arrs):
            v = _validity(a)
            if v is not None:
                phys[s] = [np.where(v, col, 0) for col in phys[s]]
                if not nulls_equal:
                    valid[s] = v if valid[s] is None else valid[s] & v
            if null_flags:  # every side gets the flag column, so the columns line up
                phys[s].append(np.zeros(len(a), np.int64) if v is None else (~v).astype(np.int64))
            columns[s].extend(phys[s])
    width = len(columns[0])
    if width == 1:
        return EncodedKeys([cols[0] for cols in columns], valid)
    sizes = [len(cols[0]) for cols in columns]
    stacked = np.empty((width, sum(sizes)), np.int64)
    for c in range(width):
        np.concatenate([cols[c] for cols in columns], out=stacked[c])
    codes = factorize(stacked).codes
    return EncodedKeys(list(np.split(codes, np.cumsum(sizes)[:-1])), valid)
