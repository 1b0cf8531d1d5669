"""The join front end: arguments, keys, backend and algorithm, then output assembly (Polars semantics)."""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..backend import resolve_algorithm, resolve_device
from ..errors import ComputeError
from ..table import check_columns, combined, on_device, take, to_arrow_table
from .keys import cast_key, encode_keys, promote_key_types

HOWS = ("inner", "left", "right", "full", "semi", "anti", "cross")
VALIDATES = ("m:m", "1:m", "m:1", "1:1")


@dataclass
class JoinStats:
    """What a join did: phase times in seconds (transform, match, materialize), sizes, choices."""

    algorithm: str
    device: str
    how: str
    left_rows: int
    right_rows: int
    output_rows: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


def _as_list(x) -> list[str]:
    if x is None:
        return []
    return [x] if isinstance(x, str) else list(x)


def _resolve_keys(on, left_on, right_on, how) -> tuple[list[str], list[str]]:
    if how == "cross":
        if on is not None or left_on is not None or right_on is not None:
            raise ValueError("a cross join takes no join keys; drop 'on', 'left_on' and 'right_on'")
        return [], []
    if on is not None:
        if left_on is not None or right_on is not None:
            raise ValueError("cannot use 'on' in conjunction with 'left_on' or 'right_on'")
        left_on = right_on = on
    elif left_on is None or right_on is None:
        raise ValueError("give the join keys: 'on', or both 'left_on' and 'right_on'")
    lk, rk = _as_list(left_on), _as_list(right_on)
    if not lk:
        raise ValueError("the join needs at least one key column")
    if len(lk) != len(rk):
        raise ValueError(f"'left_on' has {len(lk)} columns and 'right_on' {len(rk)}; they must match")
    return lk, rk


#: The GPU and CPU engines' join mode of each join type (the probe side is the one kept).
JOIN_MODES = {"inner": "inner", "left": "probe_outer", "right": "probe_outer", "full": "full",
              "semi": "semi", "anti": "anti"}


#: The side ("left" or "right") that inner and full joins build on, where a caller has chosen
#: it for a whole job and the sides are within :data:`BUILD_SIDE_SPREAD` of each other
#: (``dist.join``: the side that the job's row counts, summed over the ranks, pick, as the
#: one-GPU join of the same tables would); None: each join's smaller side.  A rank's received
#: sides differ from the job's by the hash's noise: on two H200s, 2^28 rows a rank of paper
#: 001's random workload, the rank whose received probe side was 0.01% the smaller built on it
#: (keys drawn with repeats) and matched in 7.7 ms against the other rank's 7.2.
BUILD_SIDE: ContextVar[str | None] = ContextVar("BUILD_SIDE", default=None)
#: Sides further apart than this factor build on the smaller whatever BUILD_SIDE says (a rank
#: that skew has left with one side far the larger).
BUILD_SIDE_SPREAD = 2


def build_on_left(how: str, nl: int, nr: int) -> bool:
    """Whether the left table is the build side: always for right joins; for inner and full
    joins (where the join type leaves the choice) the side :data:`BUILD_SIDE` names where the
    sides are near in size, else the smaller; for the others the right."""
    if how in ("inner", "full"):
        side = BUILD_SIDE.get()
        if side is None or max(nl, nr) > BUILD_SIDE_SPREAD * min(nl, nr):
            return nl < nr
        return side == "left"
    return how == "right"


def _check_unique(keys: np.ndarray, valid, side: str, validate: str) -> None:
    k = keys if valid is None else keys[valid]
    if np.unique(k).size != k.size:
        raise ComputeError(f"join keys did not fulfill {validate} validation: the {side} keys are not unique")


def join(left, right, on: str | Sequence[str] | None = None, *, left_on=None, right_on=None,
         how: str = "inner", suffix: str = "_right", nulls_equal: bool = False,
         validate: str = "m:m", coalesce: bool | None = None, algorithm: str = "auto",
         device: str = "auto", memory_limit: int | str | None = None, sink=None, gpus=None) -> pa.Table:
    """Join two tables on equal keys (see :func:`execute_join`, which also returns its stats).

    ``memory_limit`` (bytes, or a string such as ``"16GB"``; default ``GPUJOIN_MEMORY_LIMIT``,
    else the GPU's free memory) caps the GPU memory the join takes: past it the GPU joins host
    tables out of core (``algorithm="triton"``, paper 004), and a join of tables already in GPU
    memory raises ``MemoryError``.

    ``sink`` (a callable taking one ``pyarrow.RecordBatch``) receives the output in batches, and
    the join returns an empty table of the output's schema.  On the GPU with integer keys and
    fixed-width columns (the streaming path) each batch is handed over as it leaves the GPU, so
    the output never needs host memory as a whole (``gpujoin join -o`` writes it this way);
    elsewhere the gather maps are computed whole and the output is built and handed over a
    batch of ``SINK_BATCH_ROWS`` rows at a time (host memory holds the maps and one batch).

    ``gpus`` (a number of GPUs, or a list of device ids; host inputs, ``device="cuda"``) spreads
    the join over several GPUs of this host with paper 000's hybrid join (``dist/hybrid.py``),
    ``memory_limit`` then capping each GPU.  By default one GPU joins, and every GPU of the host
    when the join does not fit one GPU's budget (``algorithm="triton"`` keeps one).
    """
    return execute_join(left, right, on, left_on=left_on, right_on=right_on, how=how, suffix=suffix,
                        nulls_equal=nulls_equal, validate=validate, coalesce=coalesce,
                        algorithm=algorithm, device=device, memory_limit=memory_limit, sink=sink, gpus=gpus)[0]


#: Rows of a batch of the output that the host path builds and hands to a ``sink`` at a time.
SINK_BATCH_ROWS = 1 << 20


def execute_join(left, right, on=None, *, left_on=None, right_on=None, how="inner", suffix="_right",
                 nulls_equal=False, validate="m:m", coalesce=None, algorithm="auto", device="auto",
                 radix_bits: int | None = None, memory_limit=None, sink=None, gpus=None) -> tuple[pa.Table, JoinStats]:
    """:func:`gpujoin.join`, returning ``(result, JoinStats)``; ``radix_bits`` overrides the fanout."""
    from ..outofcore.budget import resolve_memory_limit

    limit = resolve_memory_limit(memory_limit)  # a bad size fails before any work
    _check_gpus(gpus, device)
    if sink is not None and not callable(sink):
        raise TypeError(f"sink must be a callable taking a pyarrow.RecordBatch, got {type(sink).__name__}")
    if how not in HOWS:
        raise ValueError(f"unknown join type how={how!r}; valid: {list(HOWS)}")
    if validate not in VALIDATES:
        raise ValueError(f"unknown validate={validate!r}; valid: {list(VALIDATES)}")
    if on_device(left) or on_device(right):
        from .device_join import execute_device_join

        if sink is not None:
            raise TypeError("sink= takes the output of host inputs; a join of tables in GPU memory returns a "
                            "DeviceTable (call .to_arrow() on it, or pass host tables)")
        if gpus is not None:
            raise TypeError("gpus= spreads a join of host inputs over GPUs; tables already in GPU memory are "
                            "joined on their GPU (pass host tables to use several)")

        return execute_device_join(left, right, on, left_on=left_on, right_on=right_on, how=how, suffix=suffix,
                                   nulls_equal=nulls_equal, validate=validate, coalesce=coalesce,
                                   algorithm=algorithm, device=device, radix_bits=radix_bits,
                                   memory_limit=limit)
    lt, rt = to_arrow_table(left), to_arrow_table(right)
    lk, rk = _resolve_keys(on, left_on, right_on, how)
    check_columns(lt, lk, "left")
    check_columns(rt, rk, "right")
    dev = resolve_device(device, "join")
    algo = resolve_algorithm("join", algorithm, dev)
    if algo == "gsm" and how != "inner":
        raise ValueError(f"algorithm='gsm' (paper 000's global sort-merge join) answers inner joins, not "
                         f"how={how!r}; use algorithm='hybrid' or 'auto'")
    coalesce = coalesced(how, coalesce)
    stats = JoinStats(algo, dev, how, lt.num_rows, rt.num_rows)
    if dev == "cuda":  # integer keys, fixed-width outputs: the columns themselves stream through the GPU
        from .host_join import columnar_gpu_join, eligible

        if eligible(lt, rt, lk, rk, how, validate, suffix, coalesce):
            return columnar_gpu_join(lt, rt, lk, rk, how, suffix, coalesce, algo, limit, stats, sink, gpus), stats
    t0 = time.perf_counter()

    if how == "cross":
        nl, nr = lt.num_rows, rt.num_rows
        if sink is None:
            _check_output(nl * nr, lt, rt, lt.column_names, rt.column_names, "the cross join")
        else:  # (built a batch at a time below: its gather maps must fit)
            from ..outofcore.budget import check_host

            check_host(16 * nl * nr, f"the cross join's gather maps of {nl * nr:,} rows", "filter the inputs")
        lidx = np.repeat(np.arange(nl, dtype=np.int64), nr)
        ridx = np.tile(np.arange(nr, dtype=np.int64), nl)
        stats.phases["transform"] = stats.phases["match"] = 0.0
        types = []
    else:
        types = [promote_key_types(a, lt.schema.field(a).type, b, rt.schema.field(b).type)
                 for a, b in zip(lk, rk)]
        lcols = [cast_key(a, combined(lt, a), t) for a, t in zip(lk, types)]
        rcols = [cast_key(b, combined(rt, b), t) for b, t in zip(rk, types)]
        enc = encode_keys([lcols, rcols], nulls_equal, narrow=True)
        (lkeys, rkeys), (lvalid, rvalid) = enc.keys, enc.valid
        if validate in ("1:1", "1:m"):
            _check_unique(lkeys, lvalid, "left", validate)
        if validate in ("1:1", "m:1"):
            _check_unique(rkeys, rvalid, "right", validate)
        if algorithm.lower() == "auto" and dev == "cpu":
            algo = stats.algorithm = _auto_cpu_join(how, lkeys, rkeys)
        t1 = time.perf_counter()
        stats.phases["transform"] = t1 - t0
        from ..outofcore.budget import OUTPUT_ROW_BYTES

        # the match's check of its output rows counts the columns that will be built from them
        # (with a sink, a batch at a time: the maps alone must fit)
        token = OUTPUT_ROW_BYTES.set(0 if sink is not None else int(_row_bytes(
            lt, rt, lt.column_names, [] if how in ("semi", "anti") else rt.column_names)))
        try:
            lidx, ridx = _match(lkeys, lvalid, rkeys, rvalid, how, radix_bits, stats, dev, algo, limit, gpus)
        finally:
            OUTPUT_ROW_BYTES.reset(token)
        stats.phases["match"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    rcols = rt.column_names if ridx is not None else []
    if sink is None:
        _check_output(lidx.size, lt, rt, lt.column_names, rcols, "the join")
        out = _materialize(lt, rt, lk, rk, types, lidx, ridx, how, suffix, coalesce)
    else:  # built and handed over a batch of the gather maps at a time: host memory holds one batch
        _check_output(min(lidx.size, SINK_BATCH_ROWS), lt, rt, lt.column_names, rcols, "a batch of the join", True)
        for lo in range(0, max(lidx.size, 1), SINK_BATCH_ROWS):
            part = _materialize(lt, rt, lk, rk, types, lidx[lo:lo + SINK_BATCH_ROWS],
                                None if ridx is None else ridx[lo:lo + SINK_BATCH_ROWS], how, suffix, coalesce)
            for b in part.to_batches():
                sink(b)
        out = part.schema.empty_table()
    stats.phases["materialize"] = time.perf_counter() - t2
    stats.output_rows = int(lidx.size)
    return out, stats


#: Probe rows from which ``auto`` answers a CPU semi/anti join with paper 002's ``bucket`` join
#: (keys in [0, 2^32)): at 8M keys a side it matched or beat ``phj`` on 1 to 16 threads, at 4M it
#: lost on one thread (docs/BENCHMARKS.md, issue 6); below, zeroing its 512 MiB bitmap dominates.
BITMAP_AUTO_MIN_ROWS = 1 << 23


def _auto_cpu_join(how: str, lkeys: np.ndarray, rkeys: np.ndarray) -> str:
    """The CPU join ``algorithm="auto"`` runs: ``bucket`` for large semi and anti joins whose keys
    fit its bitmap's domain, else ``phj`` (every join type)."""
    if how not in ("semi", "anti") or lkeys.size < BITMAP_AUTO_MIN_ROWS:
        return "phj"
    in_domain = all(k.size == 0 or (int(k.min()) >= 0 and (k.dtype == np.int32 or int(k.max()) < 1 << 32))
                    for k in (lkeys, rkeys))
    return "bucket" if in_domain else "phj"



def _row_bytes(lt: pa.Table, rt: pa.Table, lcols: list[str], rcols: list[str]) -> float:
    """Bytes an output row of these columns takes (each column's average)."""
    return sum(lt.column(c).nbytes / max(1, lt.num_rows) for c in lcols) + \
        sum(rt.column(c).nbytes / max(1, rt.num_rows) for c in rcols)


def _check_output(rows: int, lt: pa.Table, rt: pa.Table, lcols: list[str], rcols: list[str], what: str,
                  sink: bool = False) -> None:
    """MemoryError before ``rows`` output rows of these columns are built when host memory cannot
    hold them (bytes a row: each column's average; rather a clear error than the kernel's OOM killer)."""
    from ..outofcore.budget import check_host

    check_host(int(rows * _row_bytes(lt, rt, lcols, rcols)), f"{what}'s output of {rows:,} rows",
               "filter the inputs, select fewer columns" + (" (a sink's batch)" if sink else
                                                            ", ask for less (how='semi'), or pass sink= to have it "
                                                            "built and handed over a batch at a time"))


def _check_gpus(gpus, device: str) -> None:
    """``gpus=`` asks for GPUs: not with device="cpu"; a bad count or id fails before any work."""
    if gpus is None:
        return
    if device == "cpu":
        raise ValueError(f"gpus={gpus!r} asks for GPUs but device='cpu'; drop gpus= or use device='cuda'")
    from ..dist.devices import resolve_gpus

    resolve_gpus(gpus)


def _rows(valid, n) -> np.ndarray:
    dtype = np.int32 if n < 2**31 else np.int64  # row ids: half the bytes below 2^31 rows
    return np.arange(n, dtype=dtype) if valid is None else np.flatnonzero(valid).astype(dtype)


def _join_function(device: str, algorithm: str, memory_limit: int | None = None, params: dict | None = None,
                   gpus=None):
    """The gather-map join ``algorithm`` runs on ``device`` (the CPU engine's ``hash_join`` contract)."""
    from functools import partial

    if device == "cuda":
        from ..cuda.join import hash_join_maps

        return partial(hash_join_maps, algorithm, memory_limit=memory_limit, params=params, gpus=gpus)
    if algorithm == "merge":
        from ..cpu.join.merge import merge_join

        return merge_join
    if algorithm in ("hash", "split", "bucket"):
        from ..cpu.join.bitmap import bitmap_join

        return partial(bitmap_join, algorithm)
    from ..cpu.join.phj import hash_join

    return hash_join


def _match(lkeys, lvalid, rkeys, rvalid, how, radix_bits, stats, device="cpu", algorithm="phj", memory_limit=None,
           gpus=None):
    """Gather maps (left_idx, right_idx), -1 for no partner; rows with a null key never match."""
    nl, nr = lkeys.size, rkeys.size
    lrows, rrows = _rows(lvalid, nl), _rows(rvalid, nr)
    lk = lkeys if lvalid is None else lkeys[lrows]
    rk = rkeys if rvalid is None else rkeys[rrows]
    build_left = build_on_left(how, nl, nr)
    stats.params["build_side"] = "left" if build_left else "right"
    mode = JOIN_MODES[how]
    if device == "cuda" and algorithm == "auto":  # decided from both sides' statistics
        from .auto import resolve_gpu_join

        bk, pk, brows, prows = (lk, rk, lrows, rrows) if build_left else (rk, lk, rrows, lrows)
        choice = resolve_gpu_join(bk, pk, [brows], [prows])
        algorithm = stats.algorithm = choice.algorithm
        stats.params["auto"] = choice.reason
    hash_join = _join_function(device, algorithm, memory_limit, stats.params, gpus)
    kw = {"radix_bits": radix_bits} if algorithm in ("phj", "phj-tr", "phj-ur", "triton") else {}
    if build_left:
        ridx, lidx = hash_join(lk, lrows, rk, rrows, mode, **kw)
    else:
        lidx, ridx = hash_join(rk, rrows, lk, lrows, mode, **kw)
    # rows whose key is null are unmatched rows of the outer sides (and anti-join rows)
    keep_left = how in ("left", "full", "anti")
    keep_right = how in ("right", "full")
    extra_l = np.flatnonzero(~lvalid) if (lvalid is not None and keep_left) else np.empty(0, np.int64)
    extra_r = np.flatnonzero(~rvalid) if (rvalid is not None and keep_right) else np.empty(0, np.int64)
    if extra_l.size or extra_r.size:
        lidx = np.concatenate([lidx, extra_l, np.full(extra_r.size, -1, np.int64)])
        if ridx is not None:
            ridx = np.concatenate([ridx, np.full(extra_l.size, -1, np.int64), extra_r])
    return lidx, ridx


def coalesced(how: str, coalesce: bool | None) -> bool:
    """Whether a join's key columns come out coalesced into one: ``coalesce``, or by default (None)
    for every join type but a full join, as Polars does."""
    return how != "full" if coalesce is None else bool(coalesce)


def output_layout(lnames, rnames, lk, rk, how, suffix, coalesce) -> list[tuple[str, str, str, bool]]:
    """Columns of a join's output as ``polars.DataFrame.join`` lays them out.

    Returns (side "l"/"r", input name, output name, coalesced-key) per output column; a
    coalesced key column holds the (promoted) key of every output row, whichever side has it.
    """
    if how in ("semi", "anti"):
        return [("l", n, n, False) for n in lnames]
    keyed = coalesce and how != "cross"
    drop_left = set(lk) if (how == "right" and keyed) else set()
    drop_right = set(rk) if (how != "right" and keyed) else set()
    layout, taken = [], set()
    for name in lnames:
        if name in drop_left:
            continue
        layout.append(("l", name, name, keyed and name in lk))
        taken.add(name)
    for name in rnames:
        if name in drop_right:
            continue
        key = how == "right" and keyed and name in rk
        out = name if key else (name + suffix if name in taken else name)
        if out in taken:
            raise ValueError(f"column {out!r} would appear twice in the join output; "
                             f"rename a column or choose another suffix")
        taken.add(out)
        layout.append(("r", name, out, key))
    return layout


def _materialize(lt, rt, lk, rk, types, lidx, ridx, how, suffix, coalesce) -> pa.Table:
    """Take the output rows of both sides and lay out their columns as Polars does."""
    if how in ("semi", "anti"):
        return take(lt, lidx)
    layout = output_layout(lt.column_names, rt.column_names, lk, rk, how, suffix, coalesce)
    # gather only the columns the output keeps (the full join's coalesce also reads right keys)
    lneed = [n for n in lt.column_names if any(s == "l" and n == name for s, name, _, _ in layout)]
    rneed = [n for n in rt.column_names if any(s == "r" and n == name for s, name, _, _ in layout)
             or (how == "full" and coalesce and n in rk)]
    lout, rout = take(lt.select(lneed), lidx), take(rt.select(rneed), ridx)
    names, cols = [], []
    for side, name, out, key in layout:
        col = (lout if side == "l" else rout).column(name)
        if key:
            i = (lk if side == "l" else rk).index(name)
            col = col.cast(types[i])
            if how == "full":
                col = pc.coalesce(col, rout.column(rk[i]).cast(types[i]))
        names.append(out)
        cols.append(col)
    return pa.Table.from_arrays(cols, names=names)
