"""The group-by front end's reductions run on the GPU, for host (Arrow) tables.

Same contract as ``groupby.CpuReducer`` (sizes, first rows, and per column the CPU engine's
count / exact sum halves / min / max arrays), computed by one GPU group-by over every
requested column at once, so that the output assembly, SQL null rules and type handling are
shared with the CPU engine.  A group's first row is the minimum of the row numbers, an
aggregate like the others.
"""

from __future__ import annotations

import numpy as np


class GpuReducer:
    """One GPU group-by (``algorithm`` of ``gpujoin.cuda.groupby``) of ``keys`` over ``requests``.

    keys : int32 or int64 (n,) host array, nulls already encoded as a value
    requests : the front end's prepared columns (int64 or float64 values, validity)

    Raises
    ------
    MemoryError
        The group-by does not fit in free GPU memory.
    """

    def __init__(self, algorithm: str, keys: np.ndarray, requests: list):
        import cupy as cp

        from ..cuda.groupby import AggInput, run

        n = keys.size
        rows = cp.arange(n, dtype=cp.int32 if n < 2**31 else cp.int64)
        inputs = [AggInput(rows, None, ("min",)), AggInput(None, None, ("count",))]
        for r in requests:
            ops = ("count", "sum", "min", "max") if r.kind in ("int", "float") else ("count", "min", "max")
            valid = cp.asarray(r.valid.view(np.uint8)) if r.has_valid else None
            inputs.append(AggInput(cp.asarray(r.values), valid, ops))
        dkeys = cp.asarray(keys)
        self.params = {}
        groups = None
        if algorithm == "auto":
            from .auto import resolve_gpu_group_by

            choice = resolve_gpu_group_by(dkeys, inputs[2:] or inputs)
            algorithm = choice.algorithm
            self.params["auto"] = choice.reason
            groups = choice.estimate.groups
        self.algorithm = algorithm
        out = run(algorithm, dkeys, inputs, groups_estimate=groups)
        self.num_groups = out.num_groups
        self.first_rows = cp.asnumpy(out.columns[0]["min"]).astype(np.int64)
        self._sizes = cp.asnumpy(out.columns[1]["count"])
        self._columns = {r.name: (r, out.columns[i + 2]) for i, r in enumerate(requests)}
        self.phases = out.phases
        self.params.update(out.params)

    def sizes(self) -> np.ndarray:
        return self._sizes

    def reduce(self, req):
        r, c = self._columns[req.name]
        import cupy as cp

        host = {k: cp.asnumpy(v) for k, v in c.items()}
        if r.kind == "float":
            return host["count"], host["sum"], host["min"], host["max"]
        zeros = np.zeros(self.num_groups, np.int64)
        return host["count"], host.get("sum", zeros), host.get("sum_lo", zeros), host["min"], host["max"]
