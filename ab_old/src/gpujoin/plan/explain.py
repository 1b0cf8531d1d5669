"""``gpujoin.explain``: the statistics, each candidate's predicted time, the choice and why, and
after a run the measured phases beside the prediction (paper 003 §3-§4's planner, made visible)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..backend import resolve_device
from ..table import check_columns, combined, on_device, to_arrow_table
from . import auto, stats as st
from .keys import cast_key, encode_keys, promote_key_types


@dataclass
class Plan:
    """A planned join or group-by; ``str(plan)`` renders it.

    operation : "join" or "group_by"; device : "cpu" or "cuda"; model : the device constants'
    source; statistics : the estimates; predicted : candidate -> seconds (GPU only); choice and
    reason; predicted_phases : the choice's phases (seconds, GPU only); after ``run=True``:
    measured_s (wall seconds), phases (seconds), result, and placement: in core or out of core,
    pass-1 radix bits, cache and spill bytes, bytes over PCIe each way, peak GPU memory.
    """

    operation: str
    device: str
    model: str
    statistics: dict
    predicted: dict[str, float]
    choice: str
    reason: str
    predicted_phases: dict[str, float] = field(default_factory=dict)
    measured_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    result: object = None
    placement: dict = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"{self.operation} on {self.device} (cost constants: {self.model})", "statistics:"]
        lines += [f"  {k:16} {_fmt(v)}" for k, v in self.statistics.items()]
        if self.predicted:
            lines.append("candidates (predicted):")
            for name, t in sorted(self.predicted.items(), key=lambda kv: kv[1]):
                mark = "*" if name == self.choice else " "
                lines.append(f"  {mark} {name:10} {t * 1e3:9.2f} ms")
        lines.append(f"choice: {self.choice} ({self.reason})")
        if self.measured_s is not None:
            pred = self.predicted.get(self.choice)
            vs = f" (predicted {pred * 1e3:.2f} ms)" if pred is not None else ""
            lines.append(f"measured: {self.measured_s * 1e3:.2f} ms{vs}")
            for k, v in self.phases.items():
                p = self.predicted_phases.get(k)
                lines.append(f"  {k:16} {v * 1e3:9.2f} ms" + (f"   (predicted {p * 1e3:.2f} ms)" if p is not None else ""))
        if self.placement:
            lines.append("placement:")
            for k, v in self.placement.items():
                if k.endswith("_bytes"):
                    v = f"{v / 2**30:.3f} GiB"
                elif k in ("phases", "predicted_phases"):
                    v = ", ".join(f"{a} {b * 1e3:.1f} ms" for a, b in v.items())
                lines.append(f"  {k:16} {_fmt(v)}")
        return "\n".join(lines)


#: What JoinStats.params / GroupByStats.params say of the placement (plan.placement, outofcore/).
PLACEMENT_KEYS = ("placement", "gpus", "algorithm", "pass1_bits", "chunk_rows", "budget_bytes", "cache_bytes",
                  "spill_bytes", "h2d_bytes", "d2h_bytes", "p2p_bytes", "peak_gpu_bytes", "split_partitions", "streams",
                  "phases", "predicted_phases", "transfer_model_s", "per_gpu")


def _placement(params: dict) -> dict:
    return {k: params[k] for k in PLACEMENT_KEYS if k in params}


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def explain(fn, *args, run: bool = False, **kwargs) -> Plan:
    """Plan ``fn(*args, **kwargs)`` for ``fn`` = :func:`gpujoin.join`, :func:`gpujoin.join_where` or
    :func:`gpujoin.group_by` (whose aggregates go in ``aggs={name: (column, function)}``); with ``run=True`` also run it
    with the chosen algorithm and record the result and its measured phases.

    Raises
    ------
    ValueError
        ``fn`` is none of join, join_where and group_by, or its arguments are invalid (as the call would).
    """
    name = getattr(fn, "__name__", "")
    if name == "join":
        return _explain_join(*args, run=run, **kwargs)
    if name == "join_where":
        return _explain_join_where(*args, run=run, **kwargs)
    if name == "group_by":
        return _explain_group_by(*args, run=run, **kwargs)
    raise ValueError(f"explain() takes gpujoin.join, gpujoin.join_where or gpujoin.group_by, got {fn!r}")


def _explain_join_where(left, right, *predicates, suffix="_right", algorithm="auto", device="auto", run=False,
                        **kw) -> Plan:
    """The θ-join's plan: which algorithm, on which column the band join sorts; with ``run``, the
    candidate pairs it walked against the rows it kept."""
    from ..expr import predicates_of
    from ..theta import band_plan
    from .join_where import ALGORITHMS, execute_join_where, resolve

    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown join_where algorithm {algorithm!r}; valid: {list(ALGORITHMS)}")
    lt, rt = to_arrow_table(left), to_arrow_table(right)
    preds = resolve(predicates_of(list(predicates)), lt, rt, suffix)
    driver = band_plan([p.op for p in preds], [p.right for p in preds])
    dev = resolve_device(device, "join")
    choice = "nlj" if algorithm == "nlj" or driver is None else "band"
    if algorithm != "auto":
        reason = "given by the caller"
    elif driver is None:
        reason = "no range or equality condition: the block nested loop tests every pair"
    else:
        reason = (f"the right column {preds[driver[0]].right!r} sorted; each left row's run of it searched, "
                  f"the other conditions filter")
    stats = {"left_rows": lt.num_rows, "right_rows": rt.num_rows,
             "predicates": "; ".join(f"left.{p.left} {p.op} right.{p.right}" for p in preds)}
    plan = Plan("join_where", dev, "none: the candidate pairs decide", stats, {}, choice, reason)
    if run:
        t0 = time.perf_counter()
        plan.result, jstats = execute_join_where(lt, rt, *predicates, suffix=suffix, algorithm=choice, device=dev,
                                                 **kw)
        plan.measured_s = time.perf_counter() - t0
        plan.phases = dict(jstats.phases)
        plan.statistics.update({"candidates": jstats.params["candidates"], "output_rows": jstats.output_rows})
    return plan


def _model(dev: str) -> tuple[str, object]:
    if dev != "cuda":
        return "none: the CPU engine has one algorithm per operation", None
    from .calibrate import device_model

    m = device_model()
    return f"{m.name}, {m.source}", m


def _choose(algorithm: str, model, rule, cpu_rule) -> auto.Choice:
    """The caller's algorithm (with the model's predictions), else the GPU rule, else the CPU's."""
    if algorithm != "auto":
        modelled = rule(model) if model is not None else auto.Choice("", "")
        return auto.Choice(algorithm, "given by the caller", modelled.predicted, modelled.phases)
    return rule(model) if model is not None else cpu_rule()


def _host_keys(table, names) -> np.ndarray:
    """One int64/int32 key per row of a host table's key columns (as the planner encodes them)."""
    return encode_keys([[combined(table, n) for n in names]], nulls_equal=True, narrow=True).keys[0]


def _explain_join(left, right, on=None, *, left_on=None, right_on=None, how="inner", device="auto",
                  algorithm="auto", run=False, **kw) -> Plan:
    from .join import _resolve_keys, build_on_left, execute_join

    dev = resolve_device("cuda" if on_device(left) or on_device(right) else device, "join")
    lk, rk = _resolve_keys(on, left_on, right_on, how)
    if how == "cross":
        plan = Plan("join", dev, _model(dev)[0], {"how": how}, {}, "cross",
                    "a cross join pairs every row with every row: no statistics to weigh")
        if run:
            t0 = time.perf_counter()
            plan.result, stats = execute_join(left, right, how=how, device=dev, **kw)
            plan.measured_s = time.perf_counter() - t0
            plan.phases = dict(stats.phases)
        return plan
    if on_device(left) or on_device(right):
        from ..cuda.table import as_device_table

        lt, rt = as_device_table(left), as_device_table(right)
        lkeys, rkeys = lt[lk[0]], rt[rk[0]]
        lw = [lt[c].dtype.itemsize for c in lt.column_names if c not in lk]
        rw = [rt[c].dtype.itemsize for c in rt.column_names if c not in rk]
    else:
        lt, rt = to_arrow_table(left), to_arrow_table(right)
        check_columns(lt, lk, "left")
        check_columns(rt, rk, "right")
        types = [promote_key_types(a, lt.schema.field(a).type, b, rt.schema.field(b).type) for a, b in zip(lk, rk)]
        enc = encode_keys([[cast_key(a, combined(lt, a), t) for a, t in zip(lk, types)],
                           [cast_key(b, combined(rt, b), t) for b, t in zip(rk, types)]], False, narrow=True)
        lkeys, rkeys = enc.keys
        lw, rw = [4], [4]  # host tables join on the GPU through row ids (gather maps)
    build_left = build_on_left(how, lkeys.size, rkeys.size)
    bk, pk, bw, pw = (lkeys, rkeys, lw, rw) if build_left else (rkeys, lkeys, rw, lw)
    est = st.estimate_join(bk, pk, bw, pw)
    from .join import _auto_cpu_join

    model_name, model = _model(dev)
    choice = _choose(algorithm, model, lambda m: auto.choose_join(est, m), lambda: auto.Choice(
        _auto_cpu_join(how, lkeys, rkeys), "the CPU engine's rule: phj, or bucket for semi/anti joins of 8M+ "
        "probe rows with keys in [0, 2^32)"))
    plan = Plan("join", dev, model_name, {"how": how, "build_side": "left" if build_left else "right",
                                          **est.as_dict()}, choice.predicted, choice.algorithm, choice.reason,
                choice.phases.get(choice.algorithm, {}))
    if run:
        t0 = time.perf_counter()
        plan.result, stats = execute_join(left, right, on, left_on=left_on, right_on=right_on, how=how,
                                          device=dev, algorithm=choice.algorithm, **kw)
        plan.measured_s = time.perf_counter() - t0
        plan.phases = dict(stats.phases)
        plan.placement = _placement(stats.params)
    return plan


def _width(t) -> int:
    """Bytes of a column's values on the GPU: 4 up to 32-bit types, else 8 (strings: int64 codes)."""
    try:
        return 4 if t.bit_width <= 32 else 8
    except ValueError:  # variable width
        return 8


def _slot_bytes(widths: dict[str, int], aggs: dict) -> int:
    """Shared-memory accumulator bytes a group needs, about (cuda/groupby/common.slot_bytes, by
    function; an 8-byte column's sum counted with the low-word sum of 8-byte integers)."""
    need: dict[str, set] = {}
    for col, fn in aggs.values():
        need.setdefault(col, set()).update({"sum": {"sum"}, "mean": {"sum", "count"}, "count": {"count"},
                                            "size": {"count"}, "min": {"min"}, "max": {"max"}}[fn])
    total = 0
    for col, accs in need.items():
        w = widths.get(col, 4)
        total += sum(4 if a == "count" or (a in ("min", "max") and w <= 4) else 8 for a in accs)
        total += 8 if "sum" in accs and w == 8 else 0
    return max(total, 4)


def _explain_group_by(table, by, *, aggs: dict, device="auto", algorithm="auto", run=False,
                      memory_limit=None, gpus=None) -> Plan:
    from .groupby import GroupBy

    by = [by] if isinstance(by, str) else list(by)
    if on_device(table):
        from ..cuda.table import as_device_table

        t = as_device_table(table)
        dev = resolve_device("cuda", "group_by")
        keys = t[by[0]]
        widths = {c: t[c].dtype.itemsize for c in t.column_names}
    else:
        t = to_arrow_table(table)
        check_columns(t, by, "input")
        dev = resolve_device(device, "group_by")
        keys = _host_keys(t, by)
        widths = {f.name: _width(f.type) for f in t.schema}
    value_widths = [widths.get(c, 4) for c, fn in aggs.values() if c is not None]
    est = st.estimate_group_by(keys, value_widths, _slot_bytes(widths, aggs))
    model_name, model = _model(dev)
    choice = _choose(algorithm, model, lambda m: auto.choose_group_by(est, m),
                     lambda: auto.Choice("pgb", "the CPU engine's one group-by"))
    plan = Plan("group_by", dev, model_name, {"by": ", ".join(by), **est.as_dict()}, choice.predicted,
                choice.algorithm, choice.reason, choice.phases.get(choice.algorithm, {}))
    if run:
        t0 = time.perf_counter()
        gb = GroupBy(table, by, algorithm=choice.algorithm, device=dev, memory_limit=memory_limit, gpus=gpus)
        plan.result = gb.agg(**aggs)
        plan.measured_s = time.perf_counter() - t0
        plan.phases = dict(gb.stats.phases)
        plan.placement = _placement(gb.stats.params)
    return plan
