"""The join of host columns on the GPUs: placement (in core or out of core, one GPU or several)
and the executor that runs it: the Triton join on one GPU (paper 004), the hybrid join on
several (paper 000).  Both the columnar path (``host_join``) and the gather-map path
(``cuda.join.hash_join_maps``) come through here.
"""

from __future__ import annotations

import numpy as np

from .placement import Placement, plan_placement


def choose_gpus(gpus, single: Placement, algorithm: str) -> list[int] | None:
    """The GPUs of a join: those ``gpus`` names; else, for ``algorithm="hybrid"`` or a join that
    does not fit one GPU (``single`` is out of core; ``algorithm="triton"`` keeps one), every
    GPU of the host (paper 000: more GPUs only when one cannot hold the work); else None (the
    current GPU)."""
    from ..dist.devices import device_count, resolve_gpus

    ids = resolve_gpus(gpus)
    if ids is not None:
        return ids
    if algorithm in ("hybrid", "gsm") or (algorithm != "triton" and single.placement == "out-of-core"):
        n = device_count()
        return list(range(n)) if n > 1 else None
    return None


def place(rows: list[int], widths: list[int], budget: int, algorithm: str, gpus=None
          ) -> tuple[Placement, list[int] | None]:
    """(placement, device ids or None) of a join of relations of ``rows`` rows, ``widths`` bytes
    a row, under ``budget`` GPU bytes a GPU."""
    single = plan_placement(rows, widths, budget, force_out_of_core=algorithm in ("triton", "hybrid", "gsm"))
    ids = choose_gpus(gpus, single, algorithm)
    if ids is not None and len(ids) > 1:
        return plan_placement(rows, widths, budget, gpus=len(ids)), ids
    return single, ids


def transfer_model(rows: list[int], widths: list[int], placement: Placement, gpus: int) -> tuple[str, dict]:
    """Paper 000's choice among its equi-join algorithms from their transfer models (Eqs. 4-7:
    ``gsm`` sorts runs and merges them in log2(chunks) rounds, ``hybrid`` partitions once), and
    every prediction in seconds (``nl``, Eqs. 1-3, joins any θ: ``join_where``'s ring)."""
    from .calibrate import link_rates
    from .multi_gpu_cost import choose, measured_links

    # this host's links when `gpujoin calibrate` ran here; the inputs taken as page-locked
    d = max(1, gpus)
    links = measured_links({k: v for k, v in link_rates().items() if k != "host_in"}, d)
    r, s = (n * w for n, w in zip(rows, widths))
    m, n = (max(1, -(-k // max(1, placement.chunk_rows))) for k in rows)
    best, pred = choose(r, s, m, n, d, links)
    return best, pred


def inner_algorithm(algorithm: str) -> str:
    """The in-core join of each partition pair: paper 000's sort-merge for "hybrid", PHJ-TR for
    "triton" and "auto", else the algorithm named."""
    return {"hybrid": "smj-tr", "triton": "phj-tr", "auto": "phj-tr"}.get(algorithm, algorithm)


def stream_join(build_cols: list[np.ndarray], probe_cols: list[np.ndarray], mode: str, placement: Placement,
                gpus: list[int] | None, *, algorithm: str, memory_limit: int | None = None, **kw):
    """Run the placed join: ``gsm_join`` for ``algorithm="gsm"`` (inner joins), else
    ``hybrid_join`` on several GPUs, else ``triton_join`` on ``gpus[0]`` (or the current GPU).
    ``kw``: emit_keys, aggregate, streams, consumer, transfer_only."""
    import cupy as cp

    if algorithm == "gsm":
        return _gsm(build_cols, probe_cols, mode, placement, gpus or [cp.cuda.Device().id], memory_limit, **kw)
    if gpus is not None and len(gpus) > 1:
        from ..dist.hybrid import hybrid_join

        return hybrid_join(build_cols, probe_cols, mode, placement, gpus, algorithm=algorithm,
                           memory_limit=memory_limit, **kw)
    from ..outofcore.budget import gpu_memory_cap
    from ..outofcore.triton import triton_join

    with cp.cuda.Device(cp.cuda.Device().id if gpus is None else gpus[0]), gpu_memory_cap(memory_limit):
        return triton_join(build_cols, probe_cols, mode, placement, algorithm=algorithm, **kw)


def _gsm(build_cols, probe_cols, mode, placement, gpus, memory_limit, emit_keys=False, aggregate=None, streams=3,
         consumer=None, transfer_only=False):
    """The global sort-merge join (inner joins only: its output is the matching pairs)."""
    from ..dist.gsm import gsm_join

    if mode != "inner":
        raise ValueError(f"algorithm='gsm' answers inner joins (paper 000 §3.2), not this {mode} join; use "
                         f"algorithm='hybrid' or 'auto'")
    res = gsm_join(build_cols, probe_cols, placement.budget, gpus, emit_keys=emit_keys, aggregate=aggregate,
                   streams=streams, memory_limit=memory_limit, transfer_only=transfer_only)
    if consumer is not None:  # the pairs are computed whole, then handed over
        consumer(res.rows, res.key, res.build, res.probe)
        res.key, res.build, res.probe = None, [], []
    return res
