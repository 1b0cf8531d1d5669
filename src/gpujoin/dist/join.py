"""Paper 001's distributed repartitioned join and group-by, SPMD: every rank calls
:func:`join` (or :func:`group_by`) with its slice of the tables and gets back its slice of the
result.

Both sides are hash-partitioned on the join key (``shuffle.key_hashes`` with the first-level
seed), each row sent to the rank its hash names (``shuffle.shuffle``: one or two levels), and each
rank joins what it received with gpujoin's engine (``gpujoin.join``: the planner's in-core
algorithm on the rank's GPU, or the CPU engine).  Rows of equal keys meet on one rank, so every
join type keeps its meaning: inner, left, right, full, semi and anti (a row without a partner is
on exactly one rank, which emits it once).  Rows with a null key never match: they stay on their
rank (and are emitted there by the outer and anti joins); with ``nulls_equal=True`` they hash with
each null read as a zero, so that equal keys with nulls in the same places meet on one rank (a
single key's null rows all on one, as the group-by's null group).  ``how="cross"`` is not a
repartitioned join and is refused.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from ..table import combined, to_arrow_table
from . import radix_shuffle
from .comm import Communicator
from .shuffle import SEED_FIRST, destinations, key_hashes, shuffle_many
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


def _destinations(table: pa.Table, names: list[str], types: list, comm: Communicator,
                  null_rank: int | None) -> np.ndarray:
    """Each row's rank: its key's first-level hash, or ``null_rank`` for a null in any key column
    (None: nulls hashed as zeros, :func:`_null_rank`)."""
    from ..plan.keys import cast_key

    cols = [cast_key(n, combined(table, n), t) for n, t in zip(names, types)]
    if null_rank is None:
        return destinations(key_hashes(cols, SEED_FIRST, nulls_as_zero=True), comm.size)
    dest = destinations(key_hashes(cols, SEED_FIRST), comm.size)
    valid = None
    for c in cols:
        if c.null_count:
            v = np.asarray(c.is_valid())
            valid = v if valid is None else valid & v
    if valid is not None:
        dest[~valid] = null_rank
    return dest


def _key_types(lt: pa.Table, rt: pa.Table, lk: list[str], rk: list[str], comm: Communicator) -> list:
    """The promoted key types, checked to agree on every rank, with the tables' columns
    (:func:`_schemas`), in one collective."""
    from ..plan.keys import promote_key_types

    types = [promote_key_types(a, lt.schema.field(a).type, b, rt.schema.field(b).type) for a, b in zip(lk, rk)]
    _same_on_every_rank(types + _schemas(lt, rt), comm, HOST_COLUMNS)
    return types


#: What :func:`_key_types`' check names, in the error where the ranks' differ.
HOST_COLUMNS = "key types or columns (table.column: Arrow type)"


def _schemas(*tables: pa.Table) -> list[str]:
    """Each host table's columns' names and Arrow types, in order: what every rank's must equal
    (a rank concatenates the rows it receives with its own schema: a rank whose columns differ
    failed there alone, and the others waited for it in the next collective)."""
    return [f"{i}.{f.name} {f.type}" for i, t in enumerate(tables) for f in t.schema]


def _same_on_every_rank(names: list, comm: Communicator, what: str) -> None:
    """Check that ``names`` (types or their names, columns), as strings, are every rank's: a
    rank whose keys had other types would hash them differently and send equal keys to
    different ranks.

    Raises
    ------
    TypeError
        On every rank where some rank's differ, naming ``what`` and every rank's ``names``.
    """
    seen = comm.allgather([str(t) for t in names])
    if any(s != seen[0] for s in seen):
        raise TypeError(f"the ranks' {what} differ ({seen}); give every rank slices of the same schema")


def _host_table(x) -> pa.Table:
    """A rank's slice as an Arrow table (tables in GPU memory copied to the host: what the CLI's
    checks read)."""
    from ..table import on_device

    if on_device(x):
        from ..cuda.table import as_device_table

        return as_device_table(x).to_arrow()
    return to_arrow_table(x)


def _check_how(how: str) -> None:
    """ValueError for a join type a repartitioned join cannot answer."""
    if how not in HOWS:
        raise ValueError(f"dist.join answers how in {list(HOWS)}, got {how!r} (a cross join is not repartitioned)")


def _null_rank(comm: Communicator, kwargs: dict) -> int | None:
    """Where a row with a null key goes: nowhere (it matches nothing: this rank), or with
    ``nulls_equal`` (None) where its key hashes with each null read as a zero, on both sides
    alike: equal keys, nulls in the same places, meet on one rank, and a composite key's rows with
    a null in one column spread over the ranks as the others do (they had all gone to rank 0).
    (A zero and a null may share a rank; the local join tells them apart.)"""
    return None if kwargs.get("nulls_equal", False) else comm.rank


def check_inputs(left, right, on=None, left_on=None, right_on=None, how: str = "inner"):
    """(left table, right table, left keys, right keys), or the error this rank's join would
    raise before it talks to the other ranks (``gpujoin dist join`` runs it on every rank first,
    so that a bad argument stops every rank with its message)."""
    from ..plan.join import _resolve_keys
    from ..table import check_columns

    _check_how(how)
    lt, rt = _host_table(left), _host_table(right)
    lk, rk = _resolve_keys(on, left_on, right_on, how)
    check_columns(lt, lk, "left")
    check_columns(rt, rk, "right")
    return lt, rt, lk, rk


#: Rows of one table a rank's local join takes at once under ``buckets="auto"`` on more than two
#: ranks: more and the rows are shuffled and joined in hash buckets of about this many.  Two H200s
#: (docs/BENCHMARKS.md), since PHJ's 9-bit radix passes: 1 bucket is the fastest at 2^27, 2^28
#: and 2^29 rows a rank (44.1 ms at 2^28 against 46.0 for 2 and 48.8 for 4): half of a rank's
#: rows cross NVLink in 15.6 ms while its local join takes 25.8, and a bucket's join beside the
#: NCCL groups runs slower than alone.  Four H200s: 3/4 of the rows cross, at 62% of the
#: all-to-all's rate, in about the local join's time, and 2 buckets at 2^28 rows a rank took
#: 53.6 ms against 59.8 for 1 and 59.8 for 4.
BUCKET_ROWS = 1 << 27


def join(left, right, on=None, *, left_on=None, right_on=None, how: str = "inner", suffix: str = "_right",
         comm: Communicator | None = None, shuffle: str = "auto", compression: str = "none", device: str = "auto",
         buckets: int | str = "auto", stats: dict | None = None, **kwargs) -> pa.Table:
    """This rank's slice of the join of every rank's ``left`` and ``right`` slices.

    Parameters
    ----------
    left, right : this rank's rows (any table ``gpujoin.join`` takes): host tables are shuffled
        over MPI, tables in GPU memory (both sides) over NCCL
    on, left_on, right_on, how, suffix : as :func:`gpujoin.join` (``how`` not "cross")
    comm : the ranks (default: ``default_communicator()``)
    shuffle : "auto", "one-level" or "two-level" (``shuffle.shuffle``)
    compression : "none", "auto" (the integer columns of messages to other hosts, paper 001;
        for host tables only those whose compression pays at the link's rate) or "cascaded" (of
        every message to another rank): ``cascaded``'s codec, scheme per column (tables in GPU
        memory: nvCOMP's, on the GPU; see ``shuffle.shuffle_many``)
    device : where each rank joins its rows ("auto", "cpu", "cuda")
    buckets : tables in GPU memory: each rank's rows shuffled and joined in this many hash
        buckets (each bucket's join runs as soon as its rows have arrived, while the links carry
        the next: ``device_shuffle.exchange_buckets``); "auto": where the shuffle is
        one-level over NCCL without compression on more than two ranks: ceil(rows / BUCKET_ROWS)
        for the most rows a rank has of one table, else 1 (shuffle everything, then join once, as
        paper 001).  Host tables: ignored.  With one bucket, one int32/int64 key column, no
        validity masks and each table's other columns of one width, the one-level shuffle's
        partition also does the local PHJ's first radix pass where that saves one
        (``radix_shuffle``: "shuffle_radix_bits" in ``stats``; GPUJOIN_SHUFFLE_RADIX=0 turns it
        off).
    stats : a dict that receives the phases' seconds and the rows sent and received (with
        buckets, "shuffle" is the time until the first bucket's rows have arrived and
        "local_join" the rest; with the radix pass in the shuffle, "shuffle" includes the first
        table's remaining passes, run while the second is on the links, "partition" the
        histograms where they were launched before the ranks agreed ("shuffle_counted_early":
        DeviceTables, NCCL made by an earlier join of the communicator, every rank's tables
        about as large as this one's), and
        "shuffle_timeline_ms" when each chunk was partitioned and sent; "shuffle_copy_engine"
        the tables that went by NCCL's copy engines, which arrive wholly partitioned (0: the
        first shuffled, the job's build side; 1: the other);
        "local_build_side" the side this rank's local join built on: for inner and full joins
        the side the whole job's row counts pick where this rank's sides are near in size,
        ``plan.join.BUILD_SIDE``)
    kwargs : passed to ``gpujoin.join`` (``nulls_equal=True``: a row with a null key goes where
        its key hashes with each null read as a zero)

    Returns
    -------
    pyarrow.Table (a DeviceTable for inputs in GPU memory): this rank's output rows, the columns
    of ``gpujoin.join``'s output.

    Raises
    ------
    ValueError
        ``how="cross"``, an unknown shuffle or compression (raised by the
        shuffle, on every rank alike), ``buckets`` neither "auto" nor a whole number from 1.
    ImportError
        ``compression="cascaded"`` of tables in GPU memory without nvCOMP.
    TypeError
        The ranks' key types or columns (names, types) differ, or some ranks pass tables in GPU
        memory and others host tables, or one side is in GPU memory and the other not.
    MemoryError
        A rank's shuffle of tables in GPU memory would not fit in its free GPU memory (every rank
        raises it, before data moves).

    References
    ----------
    Paper 001 (Gao et al., scaling joins to a thousand GPUs) §3-§4.
    """
    from ..plan.join import execute_join

    comm = comm or default_communicator()
    if _on_device(left, right, comm):
        return _device_join(left, right, on, left_on, right_on, how, suffix, comm, shuffle, compression, device,
                            buckets, stats, kwargs)
    t0 = time.perf_counter()
    lt, rt, lk, rk = check_inputs(left, right, on, left_on, right_on, how)
    types = _key_types(lt, rt, lk, rk, comm)
    nr = _null_rank(comm, kwargs)
    ld, rd = _destinations(lt, lk, types, comm, nr), _destinations(rt, rk, types, comm, nr)
    t1 = time.perf_counter()
    sent: dict = {}
    lt2, rt2 = shuffle_rows(lt, ld, comm, shuffle, compression, sent), shuffle_rows(rt, rd, comm, shuffle,
                                                                                    compression, sent)
    t2 = time.perf_counter()
    with _job_build_side(how, comm.allgather_array(np.array([lt.num_rows, rt.num_rows], np.int64))):
        out, jstats = execute_join(lt2, rt2, on, left_on=left_on, right_on=right_on, how=how, suffix=suffix,
                                   device=device, **kwargs)
    if stats is not None:
        stats.update({"partition": t1 - t0, "shuffle": t2 - t1, "local_join": time.perf_counter() - t2,
                      "rows_in": (lt.num_rows, rt.num_rows), "rows_received": (lt2.num_rows, rt2.num_rows),
                      "rows_out": out.num_rows, "local_algorithm": jstats.algorithm, "ranks": comm.size,
                      "local_build_side": jstats.params.get("build_side"),
                      "compression": sent.get("compression", {}),
                      "compression_not_paying": sent.get("compression_not_paying", {})})
    return out


@contextmanager
def _job_build_side(how: str, sizes: np.ndarray):
    """The local joins inside build on the side that the whole job's row counts pick
    (``sizes``: each rank's (left rows, right rows)), alike on every rank whose sides are near in
    size and as the one-GPU join of the same tables would (``plan.join.BUILD_SIDE``)."""
    from ..plan.join import BUILD_SIDE, build_on_left

    nl, nr = (int(x) for x in np.asarray(sizes).reshape(-1, 2).sum(axis=0))
    token = BUILD_SIDE.set("left" if build_on_left(how, nl, nr) else "right")
    try:
        yield
    finally:
        BUILD_SIDE.reset(token)


def _on_device(left, right, comm: Communicator) -> bool:
    """Whether this job's tables are in GPU memory (every rank's, and both sides)."""
    from ..table import on_device

    mine = (on_device(left), on_device(right))
    if mine[0] != mine[1]:
        raise TypeError("one side is in GPU memory and the other on the host: pass both as DeviceTables "
                        "(DeviceTable.from_arrow) or both as host tables")
    if len(set(comm.allgather(mine[0]))) > 1:
        raise TypeError("some ranks pass tables in GPU memory and others host tables; give every rank the same kind")
    return mine[0]


def _sync() -> None:
    import cupy as cp

    cp.cuda.get_current_stream().synchronize()


def _mark():
    """A CUDA event recorded on the current stream (a phase's bound)."""
    import cupy as cp

    return cp.cuda.get_current_stream().record()


def _elapsed_s(a, b) -> float:
    """Seconds between two recorded events (both passed)."""
    import cupy as cp

    return cp.cuda.get_elapsed_time(a, b) / 1e3


def _device_tables(tables: list, keys: list[list[str]], comm: Communicator) -> list:
    """The DeviceTables of ``tables``, checked (columns, key types the same on every rank) and
    with their string columns re-coded into dictionaries shared by every rank (the i-th key of
    every table in one dictionary)."""
    tables, types = _checked_tables(tables, keys)
    _same_on_every_rank(types, comm, COLUMNS)
    return _unified(tables, keys, comm)


def _checked_tables(tables: list, keys: list[list[str]]) -> tuple[list, list[str]]:
    """The DeviceTables of ``tables``, their columns checked, and what every rank's must equal
    (no collective): each key's dtype and Arrow type, where its stored integers' meaning hangs on
    it (decimal(10,2) on one rank and decimal(10,3) on another would hash 1.00 and 1.000 apart),
    then every other column's name, dtype and coding or Arrow type (the shuffle moves columns by
    position, each rank reads what it receives in its own types, and the ranks unify string
    columns' dictionaries by name: other columns on some rank would send other bytes, be read
    as other values, or leave the ranks waiting in different collectives)."""
    from ..cuda.table import arrow_type, as_device_table
    from ..table import check_columns

    tables = [as_device_table(t) for t in tables]
    for t, k, side in zip(tables, keys, ("left", "right")):
        check_columns(t, k, side if len(tables) > 1 else "input")
    keyed = [f"key gpu {t[n].dtype} {_coded(t, n) or arrow_type(t, n)}" for t, k in zip(tables, keys) for n in k]
    others = [f"{i}.{n} {t[n].dtype} {_coded(t, n) or arrow_type(t, n)}" for i, (t, k) in enumerate(zip(tables, keys))
              for n in t.column_names if n not in k]
    return tables, keyed + others


def _unified(tables: list, keys: list[list[str]], comm: Communicator) -> list:
    """``tables`` with their string columns re-coded into dictionaries shared by every rank (a
    collective, as ``device_shuffle.unify_dictionaries``)."""
    from .device_shuffle import unify_dictionaries

    groups = [[(i, k[j]) for i, k in enumerate(keys)] for j in range(len(keys[0]))]
    groups = [g for g in groups if any(n in tables[i].dictionaries for i, n in g)]
    for i, t in enumerate(tables):
        groups += [[(i, n)] for n in t.column_names if n in t.dictionaries and n not in keys[i]]
    return unify_dictionaries(tables, groups, comm)


#: What :func:`_checked_tables`' list names, in the error where the ranks' differ.
COLUMNS = "key types or columns (key: dtype, Arrow type; table.column: dtype, coding or Arrow type)"


def _types_hash(types: list[str]) -> int:
    """An int64 of ``types`` (the same on every rank for the same names: Python's own ``hash``
    of a string differs between processes)."""
    import hashlib

    return int.from_bytes(hashlib.blake2b("\0".join(types).encode(), digest_size=8).digest(), "little", signed=True)


def _zero_nulls(t, names: list[str]) -> list:
    """DeviceTable ``t``'s key columns ``names`` with their null slots zeroed (what a masked slot
    holds is anything): hashed so, equal keys with nulls in the same places meet."""
    import cupy as cp

    return [t[n] if n not in t.validity else cp.where(t.validity[n].astype(bool), t[n], t[n].dtype.type(0))
            for n in names]


def _rescaled(lt, lk: list[str], rt, rk: list[str]):
    """``plan.device_join.rescale_keys`` before the shuffle, so that the ranks hash keys of two
    decimal scales or time units in the type they are compared in (1.00 and 1.000 meet on one
    rank): (lt, rt, scaled, None), or the tables as given and the message of the SchemaError
    raised where a value does not fit 64 bits so (raised on every rank by :func:`_raise_failed`
    once the ranks have shared whether theirs failed)."""
    from ..errors import SchemaError
    from ..plan.device_join import rescale_keys

    try:
        return (*rescale_keys(lt, lk, rt, rk), None)
    except SchemaError as err:
        return lt, rt, None, str(err)


def _raise_failed(any_failed: bool, failed: str | None, comm: Communicator) -> None:
    """Where some rank's :func:`_rescaled` failed (``any_failed``, every rank's flag gathered),
    the SchemaError naming the first such rank and its message, on every rank (a collective
    then)."""
    from ..errors import SchemaError

    if any_failed:
        for rank, message in enumerate(comm.allgather(failed)):
            if message is not None:
                raise SchemaError(f"rank {rank}: {message}")


def _coded(t, name: str) -> str:
    """What DeviceTable ``t``'s column ``name`` codes: "string", "binary" or nothing."""
    from ..table import is_string_type

    d = t.dictionaries.get(name)
    return "" if d is None else "string" if is_string_type(d.type) else "binary"


def _bucket_count(buckets, method: str, compression: str, comm: Communicator, rows: int) -> int:
    """The local join's hash buckets (:func:`join`'s ``buckets``) for tables in GPU memory
    shuffled by ``method`` (resolved: "one-level" or "two-level"); ``rows`` the most any rank
    has of one table."""
    if buckets == "auto":
        ok = method == "one-level" and compression == "none" and comm.size > 2
        return max(1, -(-rows // BUCKET_ROWS)) if ok else 1
    if isinstance(buckets, bool) or not isinstance(buckets, (int, np.integer)) or buckets < 1:
        raise ValueError(f"buckets must be 'auto' or a whole number from 1, got {buckets!r}")
    if buckets > 1 and (method != "one-level" or compression != "none"):
        return 1  # (the buckets ride the one-level pipeline; two levels and compression exchange whole tables)
    return int(buckets)


def _shuffle_radix_bits(eligible: bool, rows, how: str, comm: Communicator, kwargs: dict):
    """The local PHJ's radix bits where the shuffle's partition can do its first pass and that
    saves one (dist.radix_shuffle: one int32/int64 key column of one dtype, no validity masks,
    each table's other columns of one width, PHJ chosen by the planner or named, ranks on GPUs
    of their own), else None; GPUJOIN_SHUFFLE_RADIX=0 turns it off.  ``eligible``: every rank's
    :func:`_radix_eligible`; ``rows``: the left and right tables' rows on all ranks.  Every rank
    calls it with the same arguments and gets the same answer (NCCL's making, on first use, is
    a collective).  The bits are PHJ's own for a rank's expected share of the build side
    (``radix_bits`` when given)."""
    if not (eligible and comm.size > 1 and comm.nccl() is not None):
        return None
    return _radix_bits(how, int(rows[0]), int(rows[1]), comm.size, kwargs)


def _radix_eligible(lt, rt, lk: list[str], rk: list[str], kwargs: dict) -> bool:
    """This rank's part of :func:`_shuffle_radix_bits`' test (no collective): one key column of
    one dtype in both tables, each ``radix_shuffle.eligible``, PHJ chosen or named, the radix
    shuffle not turned off."""
    import os

    return (os.environ.get("GPUJOIN_SHUFFLE_RADIX", "1") != "0" and len(lk) == 1
            and kwargs.get("algorithm", "auto") in ("auto", "phj-tr", "phj-ur")
            and lk[0] in lt.columns and rk[0] in rt.columns and lt[lk[0]].dtype == rt[rk[0]].dtype
            and radix_shuffle.eligible(lt, lk[0]) and radix_shuffle.eligible(rt, rk[0]))


def _radix_bits(how: str, nl: int, nr: int, parts: int, kwargs: dict) -> int | None:
    """PHJ's radix bits for a rank's share of the build side of ``nl`` x ``nr`` rows over
    ``parts`` ranks (``radix_bits`` when given), where the shuffle's pass saves one, else None."""
    from ..cuda.join.phj import partition_bits
    from ..plan.join import build_on_left

    build = nl if build_on_left(how, nl, nr) else nr
    bits = partition_bits(-(-build // parts), kwargs.get("radix_bits") or None)
    return bits if radix_shuffle.saves_a_pass(parts, bits) else None


def _early_counts(left, right, lk: list[str], rk: list[str], how: str, comm: Communicator, shuffle: str,
                  compression: str, buckets, kwargs: dict):
    """``radix_shuffle.count`` launched before the job's checks and collectives, on what this
    rank's own tables suggest they will agree (every rank's slices as large as its own), or
    None: the GPU counts while the ranks agree (their checks and allgathers had left it idle
    about 0.4 ms of a 29 ms job on two H200s).  Local: no collective, and only once NCCL is made
    (its making is one); a wrong guess costs the histograms' time, the shuffle counting again."""
    from ..cuda.table import DeviceTable

    P = comm.size
    if not (isinstance(left, DeviceTable) and isinstance(right, DeviceTable) and P > 1 and comm.nccl_made
            and compression == "none"
            and (shuffle == "one-level" or (shuffle == "auto" and (comm.nodes < 2 or comm.local_size < 2)))
            and _radix_eligible(left, right, lk, rk, kwargs)):
        return None
    rows = max(left.num_rows, right.num_rows)
    if not (buckets == 1 or (buckets == "auto" and _bucket_count("auto", "one-level", "none", comm, rows) == 1)):
        return None
    nl, nr = left.num_rows * P, right.num_rows * P
    bits = _radix_bits(how, nl, nr, P, kwargs)
    if bits is None:
        return None
    tables, keys = _build_first([left, right], [lk[0], rk[0]], how, nl, nr)
    try:
        return radix_shuffle.count(tables, keys, P, bits, radix_shuffle.chunk_count(rows))
    except MemoryError:  # (CuPy's OutOfMemoryError too: the shuffle counts again, or says what it needs)
        return None


def _build_first(pair: list, keys: list, how: str, nl: int, nr: int) -> tuple[list, list]:
    """``pair`` (left, right) and their ``keys``, the build side first (for ``nl`` and ``nr``
    rows in the whole job, as ``_job_build_side`` picks it): the radix shuffle finishes its
    first table while the other is on the links, so that the local join's statistics can read
    the build side before the shuffle ends (``HashPartitioning.ready``)."""
    from ..plan.join import build_on_left

    return (pair, keys) if build_on_left(how, nl, nr) else (pair[::-1], keys[::-1])


def _device_join(left, right, on, left_on, right_on, how, suffix, comm, shuffle, compression, device, buckets,
                 stats, kwargs):
    """:func:`join` of tables in GPU memory: hashed and partitioned on each rank's GPU, shuffled
    over NCCL, joined in GPU memory (``gpujoin.join`` on DeviceTables), in hash buckets."""
    from ..cuda.table import DeviceTable, concat_tables, key_validity
    from ..plan.join import _resolve_keys, coalesced, execute_join, output_layout
    from . import device_shuffle
    from .shuffle import auto_method

    _check_how(how)
    if buckets != "auto":
        _bucket_count(buckets, "one-level", "none", comm, 0)  # (a bad value raised before any collective)
    # the phases' bounds are CUDA events, not syncs: the host lays out each phase while the GPU
    # ends the one before (a sync between the shuffle and the local join left the GPU idle about
    # 0.9 ms of a 42 ms job on two H200s while the host planned the join)
    _sync()
    marks = [_mark()]
    lk, rk = _resolve_keys(on, left_on, right_on, how)
    early = _early_counts(left, right, lk, rk, how, comm, shuffle, compression, buckets, kwargs)
    tables, types = _checked_tables([left, right], [lk, rk])
    coded, unified = any(t.dictionaries for t in tables), False
    while True:
        lt, rt, scaled, failed = _rescaled(tables[0], lk, tables[1], rk)
        # each rank's rows, and those whose keys are all present: the device join builds on the
        # side with fewer of those (plan.device_join._join_present_keys), null keys joined apart
        valid = [key_validity(lt, lk), key_validity(rt, rk)]
        present = [t.num_rows if v is None else int(v.sum()) for t, v in zip((lt, rt), valid)]
        # (with whether this rank's tables can take the radix shuffle, whether its keys'
        # rescaling failed, whether it has string columns and its key types' hash: three
        # collectives fewer before the shuffle, whose first pass waits for the host's way
        # through them)
        sizes = comm.allgather_array(np.array([lt.num_rows, rt.num_rows, *present,
                                               failed is None and _radix_eligible(lt, rt, lk, rk, kwargs),
                                               failed is not None, coded, _types_hash(types)], np.int64))
        if unified or not (sizes[:, 6].any() or (sizes[:, 7] != sizes[0, 7]).any()):
            break
        # some rank's string columns, or other columns: compared by name (every rank raises
        # where they differ), the dictionaries unified, the sizes gathered again
        _same_on_every_rank(types, comm, COLUMNS)
        tables, unified = _unified(tables, [lk, rk], comm), True
    _raise_failed(bool(sizes[:, 5].any()), failed, comm)
    rows = int(sizes[:, :2].max())
    if shuffle == "auto":
        uniform = comm.nodes < 2 or len(set(comm.allgather(comm.local_size))) == 1
        shuffle = auto_method(comm, rows, uniform, device=True)
    B = _bucket_count(buckets, shuffle, compression, comm, rows)
    bits = _shuffle_radix_bits(sizes[:, 4].all(), sizes[:, :2].sum(axis=0), how, comm, kwargs) if (
        B == 1 and shuffle == "one-level" and compression == "none") else None
    if bits is None:
        nr = _null_rank(comm, kwargs)
        ld, rd = [device_shuffle.bucket_destinations([t[n] for n in k] if nr is not None else _zero_nulls(t, k),
                                                     SEED_FIRST, comm.size, B, nr, v if nr is not None else None)
                  for t, k, v in ((lt, lk, valid[0]), (rt, rk, valid[1]))]
    marks.append(_mark())
    moved: dict = {}
    counted, early = (early if bits is not None else None), None  # (a wrong guess's digits let go)
    if bits is not None:  # the shuffle's partition is the local join's first radix pass
        nl, nr = (int(x) for x in sizes[:, 2:4].sum(axis=0))
        tables, keys = _build_first([lt, rt], [lk[0], rk[0]], how, nl, nr)
        got = radix_shuffle.exchange_partitioned(tables, keys, comm, bits, moved, counted=counted, most_rows=rows)
        parts = iter([got if tables[0] is lt else got[::-1]])
    elif B > 1:
        parts = device_shuffle.exchange_buckets([lt, rt], [ld, rd], comm, B, moved)
    else:
        parts = iter([shuffle_many([lt, rt], [ld, rd], comm, shuffle, compression, moved)])
    ld = rd = counted = None  # (the digits go once the shuffle's passes have read them)
    outs, received = [], [0, 0]
    with _job_build_side(how, sizes[:, 2:4]):
        for lt2, rt2 in parts:  # each bucket joined as it arrives (one bucket: the whole tables)
            if len(marks) == 2:
                marks.append(_mark())
            out, jstats = execute_join(lt2, rt2, on, left_on=left_on, right_on=right_on, how=how, suffix=suffix,
                                       device=device, **kwargs)
            outs.append(out)
            received = [received[0] + lt2.num_rows, received[1] + rt2.num_rows]
            del lt2, rt2
    # (device="cpu" joins on the host: Arrow tables)
    out = pa.concat_tables(outs) if isinstance(outs[0], pa.Table) else concat_tables(outs)
    if scaled:  # (each side's own key columns back in their own values and types)
        from ..plan.device_join import unscale_keys

        layout = output_layout(lt.column_names, rt.column_names, lk, rk, how, suffix,
                               coalesced(how, kwargs.get("coalesce")))
        if isinstance(out, pa.Table):
            out = unscale_keys(DeviceTable.from_arrow(out), scaled, layout).to_arrow()
        else:
            out = unscale_keys(out, scaled, layout)
    marks.append(_mark())
    _sync()
    if stats is not None:
        (partition, shuffle_s, local_join) = (_elapsed_s(a, b) for a, b in zip(marks, marks[1:]))
        stats.update({"partition": partition, "shuffle": shuffle_s, "local_join": local_join,
                      "rows_in": (lt.num_rows, rt.num_rows), "rows_received": tuple(received),
                      "buckets": moved.get("buckets", 1), "shuffle_radix_bits": bits,
                      "local_partitioned_bits": jstats.params.get("partitioned_bits"),
                      "local_build_side": jstats.params.get("build_side"),
                      "shuffle_timeline_ms": (radix_shuffle.timeline_ms(moved["shuffle_marks"])
                                              if "shuffle_marks" in moved else None),
                      "shuffle_copy_engine": moved.get("shuffle_copy_engine", []),
                      "shuffle_counted_early": moved.get("shuffle_counted_early", False),
                      "rows_out": out.num_rows, "local_algorithm": jstats.algorithm, "ranks": comm.size,
                      "bytes_sent": moved.get("bytes_sent", 0), "transport": "nccl",
                      # (compressed messages count their compressed bytes)
                      "wire_bytes_sent": moved.get("wire_bytes_sent", 0),
                      "compression": moved.get("compression", {})})
    return out


def group_by(table, by, *, comm: Communicator | None = None, shuffle: str = "auto", compression: str = "none",
             device: str = "auto", algorithm: str = "auto", stats: dict | None = None):
    """This rank's groups of the group-by of every rank's ``table`` slice: rows hash-partitioned on
    the key columns ``by`` (a null read as a zero: a group's rows, nulls in the same places, on
    one rank), then grouped locally (a table in GPU memory is shuffled over NCCL and grouped on
    the rank's GPU).
    Finish with ``.agg(...)`` as :func:`gpujoin.group_by` (every aggregate works: a group's rows
    are all on one rank).  ``shuffle`` and ``compression`` as :func:`join`'s; ``stats`` receives
    the shuffle's (bytes, each compressed column's figures), the phases' seconds ("partition":
    the destinations, "shuffle") and the rows ("rows_in", "rows_received").

    Raises
    ------
    TypeError
        The ranks' key types or columns (names, types) differ.
    ValueError
        An unknown shuffle or compression.
    ImportError
        ``compression="cascaded"`` of a table in GPU memory without nvCOMP.
    """
    from ..plan.groupby import GroupBy
    from ..table import check_columns

    comm = comm or default_communicator()
    by = [by] if isinstance(by, str) else list(by)
    t0 = time.perf_counter()
    if _on_device(table, table, comm):  # in GPU memory: hashed there, shuffled over NCCL
        from . import device_shuffle

        (t,) = _device_tables([table], [by], comm)
        dest = device_shuffle.destinations(_zero_nulls(t, by), SEED_FIRST, comm.size)
        if stats is not None:  # (the phases timed: the destinations' kernels finished)
            _sync()
    else:
        t = _host_table(table)
        check_columns(t, by, "input")
        _same_on_every_rank([t.schema.field(b).type for b in by] + _schemas(t), comm, HOST_COLUMNS)
        dest = destinations(key_hashes([combined(t, b) for b in by], SEED_FIRST, nulls_as_zero=True), comm.size)
    t1 = time.perf_counter()
    got = shuffle_rows(t, dest, comm, shuffle, compression, stats)
    if stats is not None:
        if not isinstance(got, pa.Table):
            _sync()
        stats.update({"partition": t1 - t0, "shuffle": time.perf_counter() - t1, "rows_in": t.num_rows,
                      "rows_received": got.num_rows, "ranks": comm.size})
    return GroupBy(got, by, algorithm=algorithm, device=device)
