"""Single-GPU group-by algorithms of paper 003 §2: HGB, SGB-UR/TR/DE-TR, PGB-UR/TR, behind one call."""

from __future__ import annotations

from .common import AggInput, GroupByOutput

#: Algorithms by their standard names (lower case), the default first.
ALGORITHMS = ("hgb", "pgb-tr", "pgb-ur", "sgb-tr", "sgb-de-tr", "sgb-ur")


def run(algorithm: str, keys, inputs: list[AggInput], *, radix_bits: int | None = None,
        groups_estimate: int | None = None, table=None) -> GroupByOutput:
    """Run GPU group-by ``algorithm`` (one of ALGORITHMS) over int32/int64 device ``keys``
    (no nulls) and the aggregate ``inputs``; see ``hgb.hgb``, ``sgb.sgb``, ``pgb.pgb``.
    ``groups_estimate``: the planner's estimate of the groups, which HGB and PGB then do not
    measure again; ``table``: HGB's stage 1 when the planner built it (a capped hgb.HashTable)."""
    if algorithm == "hgb":
        from .hgb import hgb

        return hgb(keys, inputs, groups_estimate, table)
    if algorithm in ("sgb-tr", "sgb-ur", "sgb-de-tr"):
        from .sgb import sgb

        return sgb(keys, inputs, method=algorithm[4:])
    if algorithm in ("pgb-tr", "pgb-ur"):
        from .pgb import pgb

        return pgb(keys, inputs, method=algorithm[4:], radix_bits=radix_bits, groups_estimate=groups_estimate)
    raise ValueError(f"unknown GPU group-by algorithm {algorithm!r}; valid: {list(ALGORITHMS)}")


__all__ = ["ALGORITHMS", "AggInput", "GroupByOutput", "run"]
