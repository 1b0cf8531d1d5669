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
    memory_limit : GPU bytes it may take (None: the free memory); past it the group-by runs out
        of core (``outofcore/groupby.py``), as it does when the rows fit in core and the groups'
        state does not
    first_rows : also find each group's first row (to take key columns that were encoded);
        without it ``first_rows`` is None and ``group_keys`` holds the keys themselves, which
        saves a row-number column (8 bytes a row out of core: generated, moved, partitioned)

    Attributes
    ----------
    group_keys : (groups,) host array of each group's key; first_rows : int64 (groups,) or None

    Raises
    ------
    MemoryError
        The group-by does not fit in free GPU memory.
    """

    def __init__(self, algorithm: str, keys: np.ndarray, requests: list, memory_limit: int | None = None,
                 first_rows: bool = True, gpus=None):
        import cupy as cp

        from ..dist.devices import resolve_gpus
        from ..outofcore.budget import gpu_memory_cap

        self._memory_limit = memory_limit
        ids = resolve_gpus(gpus)
        one = ids[0] if ids is not None and len(ids) == 1 else cp.cuda.Device().id  # gpus=[k]: on GPU k
        with cp.cuda.Device(one), gpu_memory_cap(memory_limit):
            self._init(algorithm, keys, requests, memory_limit, first_rows, gpus)

    def _init(self, algorithm, keys, requests, memory_limit, first_rows, gpus):
        from ..outofcore.budget import gpu_budget
        from .streaming import place

        n = keys.size
        rows_dtype = np.int32 if n <= 2**31 else np.int64  # row numbers up to n - 1
        lead = 1 if first_rows else 0  # aggregates before the count: the first row's "min"
        host = [(None, None, ("count",))]
        if first_rows:  # out of core the row numbers travel with the rows; in core they are made on the GPU
            host.insert(0, (np.arange(n, dtype=rows_dtype), None, ("min",)))
        for r in requests:
            ops = ("count", "sum", "min", "max") if r.kind in ("int", "float") else ("count", "min", "max")
            host.append((r.values, r.valid.view(np.uint8) if r.has_valid else None, ops))
        width = keys.itemsize + sum((0 if v is None else v.itemsize) + (0 if m is None else 1) for v, m, _ in host)
        placement, ids = place([n], [width], gpu_budget(memory_limit), algorithm, gpus)
        self.params = {"placement": placement.placement}
        if placement.placement == "out-of-core" and n:
            self._out_of_core(algorithm, keys, host, placement, ids, memory_limit, first_rows, lead, requests)
            return
        try:
            self._in_core(algorithm, keys, host, requests, first_rows, lead, rows_dtype)
            return
        except MemoryError:  # (the retry outside this clause: its traceback would pin the failed arrays)
            pass
        # the rows fit, the groups' state did not (the placement knows the rows only): out of core,
        # where each partition holds a share of the groups
        placement, ids = place([n], [width], gpu_budget(memory_limit), "triton", gpus)
        self.params = {"placement": placement.placement, "in_core_state_did_not_fit": True}
        self._out_of_core(algorithm, keys, host, placement, ids, memory_limit, first_rows, lead, requests)

    def _out_of_core(self, algorithm, keys, host, placement, ids, memory_limit, first_rows, lead, requests):
        from ..outofcore.groupby import group_by_out_of_core

        # n_unique partition by partition (a group's rows all land in one), beside the others
        host = host[:lead + 1] + [(v, m, ops + ("n_unique",) if r.distinct else ops)
                                  for (v, m, ops), r in zip(host[lead + 1:], requests)]
        if ids is not None and len(ids) > 1:
            from ..dist.groupby import group_by_multi_gpu

            gkeys, cols, stats = group_by_multi_gpu(algorithm, keys, host, placement, ids,
                                                    memory_limit=memory_limit)
        else:
            gkeys, cols, stats = group_by_out_of_core(algorithm, keys, host, placement)
        self.params.update(stats)
        self.algorithm = "out-of-core " + "+".join(stats["partition_algorithms"])
        self.num_groups = int(gkeys.size)
        self.group_keys = gkeys
        self.first_rows = cols[0]["min"].astype(np.int64) if first_rows else None
        self._sizes = cols[lead]["count"]
        self._columns = {r.name: (r, cols[i + lead + 1]) for i, r in enumerate(requests)}
        self.phases = stats["phases"]

    def _in_core(self, algorithm, keys, host, requests, first_rows, lead, rows_dtype):
        import cupy as cp

        from ..cuda.groupby import AggInput, run

        n = keys.size
        inputs = ([AggInput(cp.arange(n, dtype=rows_dtype), None, ("min",))] if first_rows else []) + \
            [AggInput(None if v is None else cp.asarray(v), None if m is None else cp.asarray(m), ops)
             for v, m, ops in host[lead:]]
        dkeys = cp.asarray(keys)
        groups = table = None
        if algorithm == "auto":
            from .auto import resolve_gpu_group_by

            choice = resolve_gpu_group_by(dkeys, inputs[lead + 1:] or inputs)
            algorithm = choice.algorithm
            self.params["auto"] = choice.reason
            groups, table = choice.estimate.groups_for(algorithm), choice.table
        self.algorithm = algorithm
        out = run(algorithm, dkeys, inputs, groups_estimate=groups, table=table)
        if any(r.distinct for r in requests):  # (n_unique's sorts read them: one copy for every column)
            self._device_keys = dkeys, out.keys
        self.num_groups = out.num_groups
        self.group_keys = cp.asnumpy(out.keys)
        self.first_rows = cp.asnumpy(out.columns[0]["min"]).astype(np.int64) if first_rows else None
        self._sizes = cp.asnumpy(out.columns[lead]["count"])
        self._columns = {r.name: (r, {k: cp.asnumpy(v) for k, v in out.columns[i + lead + 1].items()})
                         for i, r in enumerate(requests)}
        self.phases = out.phases
        self.params.update(out.params)

    def sizes(self) -> np.ndarray:
        return self._sizes

    def n_unique(self, req) -> np.ndarray:
        """Distinct non-null values of ``req`` per group, int64 (groups,), sorted on the GPU
        (cuda.groupby.distinct; the CPU twin: CpuReducer.n_unique)."""
        import cupy as cp

        from ..cuda.groupby.distinct import count_distinct

        if req.kind == "null" or not self.num_groups:
            return np.zeros(self.num_groups, np.int64)
        counted = self._columns[req.name][1].get("n_unique")
        if counted is not None:  # (out of core: counted partition by partition)
            return counted.astype(np.int64, copy=False)
        from ..outofcore.budget import gpu_memory_cap

        keys, group_keys = self._device_keys
        with cp.cuda.Device(keys.device.id), gpu_memory_cap(self._memory_limit):  # (where the group-by ran)
            valid = cp.asarray(req.valid) if req.has_valid else None
            return cp.asnumpy(count_distinct(keys, cp.asarray(req.values), valid, group_keys))

    def reduce(self, req):
        r, host = self._columns[req.name]
        if r.kind == "float":
            return host["count"], host["sum"], host["min"], host["max"]
        zeros = np.zeros(self.num_groups, np.int64)
        return host["count"], host.get("sum", zeros), host.get("sum_lo", zeros), host["min"], host["max"]
