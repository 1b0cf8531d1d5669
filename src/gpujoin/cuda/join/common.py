"""What every GPU join algorithm shares: join modes, the output-capacity protocol of the match
kernels, and :class:`JoinOutput`, the matched pairs plus unmatched rows, materialized lazily.

Positions and spaces
--------------------
A side's *space* is the list of arrays its output columns are gathered from: the original
columns (GFUR, NPHJ) or their transformed copies (GFTR).  The match kernels emit, for each pair,
either a position in that space or, when the space holds a single column, that column's value
itself (early materialization, paper 003 §1: no gather at all for narrow joins).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cupy as cp
import numpy as np

from ..primitives import compact, gather
from ..runtime import out_of_memory

#: Join modes, as the CPU engine names them; the probe side is the one whose unmatched rows
#: ``probe_outer`` keeps and whose rows ``semi``/``anti`` select.
MODES = ("inner", "probe_outer", "full", "semi", "anti")


def needs_probe_flags(mode: str) -> bool:
    return mode in ("probe_outer", "full", "semi", "anti")


def needs_build_flags(mode: str) -> bool:
    return mode == "full"


def emits_pairs(mode: str) -> bool:
    return mode not in ("semi", "anti")


def position_dtype(n: int):
    """Positions into a side of n rows: uint32 while they fit, else uint64."""
    return cp.uint32 if n < 2**32 else cp.uint64


def pair_arrays(n: int, bdtype, pdtype, kdtype, what: str):
    """Uninitialized output arrays of ``n`` pairs: (out_b, out_p, out_k or None when kdtype is
    None).  Raises MemoryError naming ``what`` when they do not fit."""
    try:
        return cp.empty(n, bdtype), cp.empty(n, pdtype), (cp.empty(n, kdtype) if kdtype is not None else None)
    except cp.cuda.memory.OutOfMemoryError as e:
        raise out_of_memory(e, what) from None


def run_match(launch, cap: int, bdtype, pdtype, kdtype, what: str, extra: int = 0):
    """Run a match kernel with an output guess of ``cap`` rows, then once more with the exact
    size if the guess was short (the kernel counts every match, written or not).

    launch(out_b, out_p, out_k, counter, cap) starts the kernel.  Returns (out_b, out_p, out_k)
    of the exact length, views of allocations with room for ``extra`` rows more after them
    (``smj.append_ranges`` writes rows left to sort-merge there); out_k is None when kdtype is
    None.
    """
    counter = cp.zeros(1, cp.uint64)
    for _attempt in range(2):
        out_b, out_p, out_k = pair_arrays(cap + extra, bdtype, pdtype, kdtype, what)
        launch(out_b, out_p, out_k, counter, np.uint64(cap))
        total = int(counter.get()[0])
        if total <= cap:
            return out_b[:total], out_p[:total], (out_k[:total] if out_k is not None else None)
        cap = total
        counter.fill(0)
        del out_b, out_p, out_k
    raise AssertionError("the match kernel counted more rows on its second run")


@dataclass
class JoinOutput:
    """A GPU join's result: ``n_pairs`` matched pairs, then probe-only rows (unmatched probe rows
    of an outer join, or the rows a semi/anti join selects), then build-only rows (unmatched
    build rows of a full join).

    pairs_b / pairs_p: per pair, a position in the side's space, or (``direct_*``) the value of
    its single space column.  probe_only / build_only: positions in the spaces (int64).
    pair_keys: the join key of each pair (when the match kernel wrote it); key_b / key_p: the
    keys in each space's positions, for the coalesced key column.
    """

    space_b: list[cp.ndarray]
    space_p: list[cp.ndarray]
    pairs_b: cp.ndarray | None = None
    pairs_p: cp.ndarray | None = None
    direct_b: bool = False
    direct_p: bool = False
    probe_only: cp.ndarray | None = None
    build_only: cp.ndarray | None = None
    pair_keys: cp.ndarray | None = None
    key_b: cp.ndarray | None = None
    key_p: cp.ndarray | None = None
    params: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)

    @property
    def n_pairs(self) -> int:
        return 0 if self.pairs_p is None else int(self.pairs_p.size)

    @property
    def num_rows(self) -> int:
        return (self.n_pairs + (0 if self.probe_only is None else self.probe_only.size)
                + (0 if self.build_only is None else self.build_only.size))

    def _side(self, col: int, build: bool) -> tuple[cp.ndarray, cp.ndarray | None]:
        space = self.space_b if build else self.space_p
        pairs, direct = (self.pairs_b, self.direct_b) if build else (self.pairs_p, self.direct_p)
        src = space[col]
        parts, valid = [], []
        if pairs is not None:
            parts.append((pairs if direct else gather(src, pairs)[0]).view(src.dtype))
            valid.append(None)
        for rows, mine in ((self.probe_only, not build), (self.build_only, build)):
            if rows is None or rows.size == 0:
                continue
            if mine:
                parts.append(gather(src, rows)[0])
                valid.append(None)
            else:
                parts.append(cp.zeros(rows.size, src.dtype))
                valid.append(cp.zeros(rows.size, cp.uint8))
        if not parts:
            return cp.empty(0, src.dtype), None
        values = parts[0] if len(parts) == 1 else cp.concatenate(parts)
        if all(v is None for v in valid):
            return values, None
        mask = cp.concatenate([cp.ones(p.size, cp.uint8) if v is None else v for p, v in zip(parts, valid)])
        return values, mask

    def build_column(self, col: int) -> tuple[cp.ndarray, cp.ndarray | None]:
        """Output column ``col`` of the build space: (values, validity uint8 or None)."""
        return self._side(col, True)

    def probe_column(self, col: int) -> tuple[cp.ndarray, cp.ndarray | None]:
        return self._side(col, False)

    def key_column(self) -> cp.ndarray:
        """The coalesced key of every output row (never null)."""
        parts = []
        if self.pairs_p is not None:
            if self.pair_keys is None:
                raise ValueError("this join did not emit its keys")
            parts.append(self.pair_keys)
        if self.probe_only is not None and self.probe_only.size:
            parts.append(gather(self.key_p, self.probe_only)[0])
        if self.build_only is not None and self.build_only.size:
            parts.append(gather(self.key_b, self.build_only)[0])
        if not parts:
            return cp.empty(0, (self.key_p if self.key_p is not None else self.key_b).dtype)
        return parts[0] if len(parts) == 1 else cp.concatenate(parts)


def unmatched(mode: str, pflag: cp.ndarray | None, bflag: cp.ndarray | None):
    """(probe_only, build_only) positions from the match flags of ``mode``."""
    probe_only = build_only = None
    if mode in ("probe_outer", "full", "anti"):
        probe_only = compact(pflag, False)
    elif mode == "semi":
        probe_only = compact(pflag, True)
    if mode == "full":
        build_only = compact(bflag, False)
    return probe_only, build_only


def map_positions(rows: cp.ndarray | None, rowids: cp.ndarray) -> cp.ndarray | None:
    """Positions in a transformed side -> its original row ids (GFUR), as int64."""
    if rows is None:
        return None
    return gather(rowids, rows)[0].astype(cp.int64)


def direct_column(space: list[cp.ndarray]) -> cp.ndarray | None:
    """The column a match kernel can write itself (early materialization): the only one of its
    side, 4 or 8 bytes wide, viewed as unsigned words; None otherwise."""
    if len(space) == 1 and space[0].dtype.itemsize in (4, 8):
        return space[0].view(np.dtype(f"u{space[0].dtype.itemsize}"))
    return None
