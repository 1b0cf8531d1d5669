"""Paper 001's distributed repartitioned join and group-by, SPMD: every rank calls
:func:`join` (or :func:`group_by`) with its slice of the tables and gets back its slice of the
result.

Both sides are hash-partitioned on the join key (``shuffle.key_hashes`` with the first-level
seed), each row sent to the rank its hash names (``shuffle.shuffle``: one or two levels), and each
rank joins what it received with gpujoin's engine (``gpujoin.join``: the planner's in-core
algorithm on the rank's GPU, or the CPU engine).  Rows of equal keys meet on one rank, so every
join type keeps its meaning: inner, left, right, full, semi and anti (a row without a partner is
on exactly one rank, which emits it once).  Rows with a null key never match: they stay on their
rank (and are emitted there by the outer and anti joins).  ``how="cross"`` is not a repartitioned
join and is refused.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from ..table import combined, to_arrow_table
from .comm import Communicator
from .shuffle import SEED_FIRST, destinations, key_hashes
from .shuffle import shuffle as shuffle_rows  # the functions take a parameter named shuffle

HOWS = ("inner", "left", "right", "full", "semi", "anti")


def default_communicator() -> Communicator:
    """The job's ranks: MPI's when mpi4py is installed and the process runs under a launcher
    with more than one rank, else one rank."""
    try:
        from mpi4py import MPI
    except ImportError:
        return Communicator.single()
    if MPI.COMM_WORLD.Get_size() == 1:
        return Communicator.single()
    return Communicator.from_mpi()


def _destinations(table: pa.Table, names: list[str], types: list, comm: Communicator) -> np.ndarray:
    """Each row's rank: its key's first-level hash, or this rank for a null key."""
    from ..plan.keys import cast_key

    cols = [cast_key(n, combined(table, n), t) for n, t in zip(names, types)]
    dest = destinations(key_hashes(cols, SEED_FIRST), comm.size)
    valid = None
    for c in cols:
        if c.null_count:
            v = np.asarray(c.is_valid())
            valid = v if valid is None else valid & v
    if valid is not None:
        dest[~valid] = comm.rank
    return dest


def _key_types(lt: pa.Table, rt: pa.Table, lk: list[str], rk: list[str], comm: Communicator) -> list:
    """The promoted key types, checked to agree on every rank."""
    from ..plan.keys import promote_key_types

    types = [promote_key_types(a, lt.schema.field(a).type, b, rt.schema.field(b).type) for a, b in zip(lk, rk)]
    return _same_on_every_rank(types, comm)


def _same_on_every_rank(types: list, comm: Communicator) -> list:
    """``types``, checked to be every rank's: a rank whose keys had other types would hash them
    differently and send equal keys to different ranks."""
    seen = comm.allgather([str(t) for t in types])
    if any(s != seen[0] for s in seen):
        raise TypeError(f"the ranks' key types differ ({seen}); give every rank slices of the same schema")
    return types


def _host_table(x) -> pa.Table:
    """A rank's slice as an Arrow table: tables in GPU memory (a DeviceTable, a dict of CuPy
    arrays) are copied to the host, where the MPI shuffle moves rows (the NCCL all-to-all of
    device columns is not built yet)."""
    from ..table import on_device

    if on_device(x):
        from ..cuda.table import as_device_table

        return as_device_table(x).to_arrow()
    return to_arrow_table(x)


def check_inputs(left, right, on=None, left_on=None, right_on=None, how: str = "inner", nulls_equal: bool = False):
    """(left table, right table, left keys, right keys), or the error this rank's join would
    raise before it talks to the other ranks (``gpujoin dist join`` runs it on every rank first,
    so that a bad argument stops every rank with its message)."""
    from ..plan.join import _resolve_keys
    from ..table import check_columns

    if how not in HOWS:
        raise ValueError(f"dist.join answers how in {list(HOWS)}, got {how!r} (a cross join is not repartitioned)")
    if nulls_equal:
        raise ValueError("dist.join keeps null keys on their rank: nulls_equal=True would need them on one rank")
    lt, rt = _host_table(left), _host_table(right)
    lk, rk = _resolve_keys(on, left_on, right_on, how)
    check_columns(lt, lk, "left")
    check_columns(rt, rk, "right")
    return lt, rt, lk, rk


def join(left, right, on=None, *, left_on=None, right_on=None, how: str = "inner", suffix: str = "_right",
         comm: Communicator | None = None, shuffle: str = "auto", compression: str = "none", device: str = "auto",
         stats: dict | None = None, **kwargs) -> pa.Table:
    """This rank's slice of the join of every rank's ``left`` and ``right`` slices.

    Parameters
    ----------
    left, right : this rank's rows (any table ``gpujoin.join`` takes; tables in GPU memory are
        copied to the host for the MPI shuffle)
    on, left_on, right_on, how, suffix : as :func:`gpujoin.join` (``how`` not "cross")
    comm : the ranks (default: ``default_communicator()``)
    shuffle : "auto", "one-level" or "two-level" (``shuffle.shuffle``)
    compression : "none", "auto" (the integer columns of messages to other hosts, paper 001) or
        "cascaded" (of every message to another rank): ``cascaded``'s codec, scheme per column
    device : where each rank joins its rows ("auto", "cpu", "cuda")
    stats : a dict that receives the phases' seconds and the rows sent and received
    kwargs : passed to ``gpujoin.join`` (``nulls_equal`` excepted: null keys stay on their rank)

    Returns
    -------
    pyarrow.Table: this rank's output rows, the columns of ``gpujoin.join``'s output.

    Raises
    ------
    ValueError
        ``how="cross"``, ``nulls_equal=True``, an unknown shuffle or compression (raised by the
        shuffle, on every rank alike).
    TypeError
        The ranks' key types differ.

    References
    ----------
    Paper 001 (Gao et al., scaling joins to a thousand GPUs) §3-§4.
    """
    from ..plan.join import execute_join

    comm = comm or default_communicator()
    t0 = time.perf_counter()
    lt, rt, lk, rk = check_inputs(left, right, on, left_on, right_on, how, kwargs.get("nulls_equal", False))
    types = _key_types(lt, rt, lk, rk, comm)
    ld, rd = _destinations(lt, lk, types, comm), _destinations(rt, rk, types, comm)
    t1 = time.perf_counter()
    sent: dict = {}
    lt2, rt2 = shuffle_rows(lt, ld, comm, shuffle, compression, sent), shuffle_rows(rt, rd, comm, shuffle,
                                                                                    compression, sent)
    t2 = time.perf_counter()
    out, jstats = execute_join(lt2, rt2, on, left_on=left_on, right_on=right_on, how=how, suffix=suffix,
                               device=device, **kwargs)
    if stats is not None:
        stats.update({"partition": t1 - t0, "shuffle": t2 - t1, "local_join": time.perf_counter() - t2,
                      "rows_in": (lt.num_rows, rt.num_rows), "rows_received": (lt2.num_rows, rt2.num_rows),
                      "rows_out": out.num_rows, "local_algorithm": jstats.algorithm, "ranks": comm.size,
                      "compression": sent.get("compression", {})})
    return out


def group_by(table, by, *, comm: Communicator | None = None, shuffle: str = "auto", device: str = "auto",
             algorithm: str = "auto"):
    """This rank's groups of the group-by of every rank's ``table`` slice: rows hash-partitioned on
    the key columns ``by`` (null keys on rank 0: they form one group), then grouped locally.
    Finish with ``.agg(...)`` as :func:`gpujoin.group_by` (every aggregate works: a group's rows
    are all on one rank).

    Raises
    ------
    TypeError
        The ranks' key types differ.
    """
    from ..plan.groupby import GroupBy
    from ..table import check_columns

    comm = comm or default_communicator()
    t = _host_table(table)
    by = [by] if isinstance(by, str) else list(by)
    check_columns(t, by, "input")
    _same_on_every_rank([t.schema.field(b).type for b in by], comm)
    cols = [combined(t, b) for b in by]
    dest = destinations(key_hashes(cols, SEED_FIRST), comm.size)
    for c in cols:  # a null key is one group: its rows go to rank 0 together
        if c.null_count:
            dest[~np.asarray(c.is_valid())] = 0
    return GroupBy(shuffle_rows(t, dest, comm, shuffle), by, algorithm=algorithm, device=device)
