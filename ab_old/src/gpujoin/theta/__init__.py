"""θ-joins: the block nested-loop join (any conjunction of comparisons) and the sort-based band
join (range and equality conditions), behind :func:`gpujoin.join_where`.

Both are written once over an array module ``xp`` (NumPy for the CPU engine, CuPy for the GPU):
they are sorts, binary searches, gathers and comparisons of whole arrays, which both modules
provide, so the CPU and GPU engines share one implementation instead of twins (ARCHITECTURE.md
places in-core joins per backend; for these array-level algorithms one module serves both).
Their inputs are each predicate's two columns as order-preserving int64 values (the front end,
``plan/join_where.py``, maps every type to them), without nulls.
"""

from .band import band_join, band_plan
from .nlj import ThetaPairs, compare, nested_loop_join

ALGORITHMS = ("nlj", "band")

__all__ = ["ALGORITHMS", "ThetaPairs", "band_join", "band_plan", "compare", "nested_loop_join"]
