"""Join predicates for :func:`gpujoin.join_where`: ``gpujoin.col("t") >= gpujoin.col("start")``,
or the same written with Polars expressions.

A predicate compares one column of each table with ``<``, ``<=``, ``>``, ``>=``, ``==`` or
``!=``; ``&`` joins predicates into a conjunction (as does passing several).  Only plain columns
take part: arithmetic inside a predicate is not supported (compute the column first).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: Comparison operators, and the operator that states the same comparison with its sides swapped.
OPS = ("<", "<=", ">", ">=", "==", "!=")
FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_POLARS_OPS = {"Lt": "<", "LtEq": "<=", "Gt": ">", "GtEq": ">=", "Eq": "==", "NotEq": "!=", "EqValidity": "==",
               "NotEqValidity": "!="}


@dataclass(frozen=True)
class Predicate:
    """``left op right`` between two column names (which table each names is resolved later)."""

    left: str
    op: str
    right: str

    def __and__(self, other) -> Conjunction:
        return Conjunction([self]) & other

    def __str__(self) -> str:
        return f"col({self.left!r}) {self.op} col({self.right!r})"


@dataclass(frozen=True)
class Conjunction:
    """Predicates that must all hold."""

    predicates: list

    def __and__(self, other) -> Conjunction:
        return Conjunction(self.predicates + predicates_of(other))


class Col:
    """A column by name, for comparisons: ``col("a") < col("b")`` is a :class:`Predicate`."""

    def __init__(self, name: str):
        if not isinstance(name, str):
            raise TypeError(f"col() takes a column name, got {type(name).__name__}")
        self.name = name

    def _cmp(self, op: str, other) -> Predicate:
        if not isinstance(other, Col):
            raise TypeError(f"join_where compares two columns; col({self.name!r}) {op} {other!r} compares a "
                            f"column with a {type(other).__name__} (filter the table first)")
        return Predicate(self.name, op, other.name)

    def __lt__(self, other):
        return self._cmp("<", other)

    def __le__(self, other):
        return self._cmp("<=", other)

    def __gt__(self, other):
        return self._cmp(">", other)

    def __ge__(self, other):
        return self._cmp(">=", other)

    def __eq__(self, other):  # noqa: D105 - a predicate, as in Polars
        return self._cmp("==", other)

    def __ne__(self, other):
        return self._cmp("!=", other)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"col({self.name!r})"


def col(name: str) -> Col:
    """The column ``name`` of either table of a :func:`gpujoin.join_where` (Polars' ``pl.col``)."""
    return Col(name)


def _from_polars(expr) -> list[Predicate]:
    """Predicates of a Polars expression: comparisons of two plain columns, joined by ``&``."""
    try:
        tree = json.loads(expr.meta.serialize(format="json"))
    except Exception as exc:  # noqa: BLE001 - any failure means the expression is not one we read
        raise ValueError(f"cannot read the Polars predicate {expr}: {exc}") from None

    def walk(node) -> list[Predicate]:
        b = node.get("BinaryExpr") if isinstance(node, dict) else None
        if b is not None and b["op"] in ("And", "LogicalAnd"):
            return walk(b["left"]) + walk(b["right"])
        if b is not None and b["op"] in _POLARS_OPS:
            left, right = b["left"], b["right"]
            if isinstance(left, dict) and isinstance(right, dict) and "Column" in left and "Column" in right:
                return [Predicate(left["Column"], _POLARS_OPS[b["op"]], right["Column"])]
        raise ValueError(f"join_where takes comparisons (<, <=, >, >=, ==, !=) of two plain columns joined by &; "
                         f"{expr} is not one (compute derived columns first)")

    return walk(tree)


def predicates_of(p) -> list[Predicate]:
    """A predicate, a conjunction, a Polars expression, or a list of them, as a flat list."""
    if isinstance(p, Predicate):
        return [p]
    if isinstance(p, Conjunction):
        return list(p.predicates)
    if isinstance(p, (list, tuple)):
        return [q for x in p for q in predicates_of(x)]
    if type(p).__module__.startswith("polars"):
        return _from_polars(p)
    if isinstance(p, bool):
        raise TypeError("a predicate evaluated to a bool: compare gpujoin.col(...) objects, not column names")
    raise TypeError(f"join_where predicates are gpujoin.col(...) or polars comparisons, got {type(p).__name__}")
