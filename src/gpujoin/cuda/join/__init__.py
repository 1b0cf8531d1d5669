"""Single-GPU equi-join algorithms of paper 003: NPHJ, PHJ-UR/TR, SMJ-UR/TR, behind one call."""

from __future__ import annotations

import numpy as np

from .common import MODES, JoinOutput

#: Algorithms by their standard names (lower case), best default first.
ALGORITHMS = ("phj-tr", "phj-ur", "smj-tr", "smj-ur", "nphj", "bitmap")


def run(algorithm: str, build_keys, probe_keys, build_payloads, probe_payloads, mode: str = "inner", *,
        emit_keys: bool = False, radix_bits: int | None = None, runs=None) -> JoinOutput:
    """Run GPU join ``algorithm`` (one of ALGORITHMS) on device arrays; see ``phj.phj``
    (``runs``: PHJ's only, ignored by the others: any row order joins alike)."""
    if mode not in MODES:
        raise ValueError(f"unknown join mode {mode!r}; valid: {list(MODES)}")
    if build_keys.dtype != probe_keys.dtype:
        raise TypeError(f"build and probe keys must share a dtype, got {build_keys.dtype} and {probe_keys.dtype}")
    if algorithm in ("phj-tr", "phj-ur"):
        from .phj import phj

        return phj(build_keys, probe_keys, build_payloads, probe_payloads, mode, method=algorithm[-2:],
                   emit_keys=emit_keys, radix_bits=radix_bits, runs=runs)
    if algorithm in ("smj-tr", "smj-ur"):
        from .smj import smj

        return smj(build_keys, probe_keys, build_payloads, probe_payloads, mode, method=algorithm[-2:],
                   emit_keys=emit_keys)
    if algorithm == "bitmap":
        from .bitmap import bitmap_join

        return bitmap_join(build_keys, probe_keys, build_payloads, probe_payloads, mode)
    if algorithm == "nphj":
        from .nphj import nphj

        return nphj(build_keys, probe_keys, build_payloads, probe_payloads, mode, emit_keys=emit_keys)
    raise ValueError(f"unknown GPU join algorithm {algorithm!r}; valid: {list(ALGORITHMS)}")


def hash_join_maps(algorithm: str, build_keys: np.ndarray, build_rows: np.ndarray, probe_keys: np.ndarray,
                   probe_rows: np.ndarray, mode: str, radix_bits: int | None = None, memory_limit: int | None = None,
                   params: dict | None = None, streams: int = 3, gpus=None):
    """The CPU engine's ``hash_join`` contract, run on the GPU: host int64 keys and row ids in,
    host int64 gather maps (probe_idx, build_idx or None; -1 for no partner) out.

    The planner places the join (``plan.placement``): in core when keys, row ids and the join's
    state fit the GPU memory budget (``memory_limit`` bytes, else the free memory), else, or
    with ``algorithm="triton"``, out of core through the Triton join (``outofcore/triton.py``),
    whose partition pairs ``algorithm`` joins (PHJ-TR for "triton"), or over several GPUs
    through paper 000's hybrid join (``gpus``, or ``algorithm="hybrid"``: see
    ``plan.streaming.choose_gpus``).  ``params`` receives the placement and the out-of-core
    statistics.

    An in-core join whose output does not fit the budget (the placement knows the inputs only)
    runs again out of core.

    Raises
    ------
    MemoryError
        The budget cannot hold the out-of-core working set, or host memory the spill or output.
    """
    from ...outofcore.budget import gpu_budget, gpu_memory_cap
    from ...plan.streaming import inner_algorithm, place, stream_join, transfer_model

    both = [k for k in (build_keys, probe_keys) if k.size]
    narrow = all(k.min() >= -2**31 and k.max() < 2**31 for k in both)
    kdt = np.int32 if narrow else np.int64
    bk, pk = build_keys.astype(kdt, copy=False), probe_keys.astype(kdt, copy=False)
    params = {} if params is None else params
    with gpu_memory_cap(memory_limit):
        placement, ids = place([bk.size, pk.size], [bk.itemsize + build_rows.itemsize,
                                                    pk.itemsize + probe_rows.itemsize],
                               gpu_budget(memory_limit), algorithm, gpus)
        params["placement"] = placement.placement
        if ids is not None and len(ids) > 1:
            params["transfer_model_s"] = transfer_model([bk.size, pk.size], [bk.itemsize + build_rows.itemsize,
                                                                             pk.itemsize + probe_rows.itemsize],
                                                        placement, len(ids))[1]
        if placement.placement == "in-core" and ids is None:
            try:
                return _in_core_maps(algorithm, bk, build_rows, pk, probe_rows, mode, radix_bits)
            except MemoryError:  # (the retry outside this clause: its traceback would pin the failed arrays)
                pass
            # the inputs fit, their output did not (many-to-many keys: the placement cannot know
            # it): out of core, where a partition pair's block splits until its output fits
            placement, ids = place([bk.size, pk.size], [bk.itemsize + build_rows.itemsize,
                                                        pk.itemsize + probe_rows.itemsize],
                                   gpu_budget(memory_limit), "triton", gpus)
            params["placement"] = placement.placement
            params["in_core_output_did_not_fit"] = True
        res = stream_join([bk, build_rows], [pk, probe_rows], mode, placement, ids,
                          algorithm=inner_algorithm(algorithm), memory_limit=memory_limit, streams=streams)
    params.update(res.stats)

    def rows(column):
        values, valid = column
        values = values.astype(np.int64, copy=False)
        return values if valid is None else np.where(valid, values, -1)

    return rows(res.probe[0]), (rows(res.build[0]) if mode not in ("semi", "anti") else None)


def _in_core_maps(algorithm, bk, build_rows, pk, probe_rows, mode, radix_bits):
    import cupy as cp

    out = run(algorithm, cp.asarray(bk), cp.asarray(pk), [cp.asarray(build_rows)], [cp.asarray(probe_rows)], mode,
              radix_bits=radix_bits)

    def rows(column):
        values, valid = column
        if valid is not None:
            values = cp.where(valid.astype(cp.bool_), values, -1)
        return cp.asnumpy(values).astype(np.int64, copy=False)

    probe_idx = rows(out.probe_column(0))
    build_idx = rows(out.build_column(0)) if mode not in ("semi", "anti") else None
    return probe_idx, build_idx
