"""Composite integer keys of device-resident tables packed into one int64 key.

Each key column takes the bits of its value range (max - min + 1) over every table that is
joined or grouped; when the ranges fit in 63 bits together, ``sum((k_i - min_i) << shift_i)``
is one exact int64 key with the same equalities as the tuple of columns (no hashing, so no
verification pass), and it unpacks back into the columns.  DuckDB packs group keys the same
way for its perfect-hash aggregate.  Wider ranges raise: those keys go through Arrow tables,
whose composite keys are hashed and verified (paper 003 §2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PackedKeys:
    """How key columns were packed: per column its minimum, bit offset, width and dtype."""

    lows: list[int]
    shifts: list[int]
    bits: list[int]
    dtypes: list[np.dtype]

    def unpack(self, packed) -> list:
        """The key columns (arrays of their dtypes, of packed's array module) from packed int64 keys (n,)."""
        xp = _module(packed)
        out = []
        for lo, shift, bits, dt in zip(self.lows, self.shifts, self.bits, self.dtypes):
            part = (packed >> shift) & xp.int64((1 << bits) - 1) if bits else xp.zeros_like(packed)
            out.append((part + xp.int64(lo)).astype(dt, copy=False))
        return out


def _module(a):
    """NumPy or CuPy: the array module of ``a`` (CuPy is imported only for its arrays)."""
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def pack_keys(sides: list[list], names: list[str]) -> tuple[list, PackedKeys]:
    """Pack each side's key columns (``sides[s][i]``: CuPy (or NumPy) integer arrays (n_s,), no
    nulls, column i named ``names[i]``) into one int64 array per side.

    Raises
    ------
    ValueError
        The value ranges need more than 63 bits together (the message gives each column's
        bits), or a column holds values above 2**63 - 1.
    """
    xp = _module(sides[0][0])

    lows, highs = [], []  # exact integer ends (one host read each: a few columns)
    for i in range(len(names)):
        cols = [side[i] for side in sides if side[i].size]
        if not cols:
            lows.append(0)
            highs.append(0)
            continue
        lows.append(min(int(c.min()) for c in cols))
        highs.append(max(int(c.max()) for c in cols))
    if highs and max(highs) >= 2**63:
        raise ValueError(f"key column {names[int(np.argmax(highs))]!r} holds values above 2**63-1, which cannot be "
                         f"packed into one GPU key; pass Arrow tables")
    bits = [(hi - lo).bit_length() for lo, hi in zip(lows, highs)]
    if sum(bits) > 63:
        widths = ", ".join(f"{n}: {b} bits" for n, b in zip(names, bits))
        raise ValueError(f"the composite key ({widths}) spans more than 63 bits, so it cannot be packed into one "
                         f"GPU key; pass Arrow tables, whose composite keys are hashed and verified")
    shifts = [int(x) for x in np.cumsum([0] + bits[:-1])]
    packed = []
    for side in sides:
        n = side[0].size
        acc = xp.zeros(n, xp.int64)
        for c, lo, shift in zip(side, lows, shifts):
            acc |= (c.astype(xp.int64) - xp.int64(lo)) << shift
        packed.append(acc)
    dtypes = [np.result_type(*[side[i].dtype for side in sides]) for i in range(len(names))]
    dtypes = [dt if dt.kind in "iub" else np.dtype(np.int64) for dt in dtypes]  # (uint64, int64) -> int64
    return packed, PackedKeys(lows, shifts, bits, dtypes)
