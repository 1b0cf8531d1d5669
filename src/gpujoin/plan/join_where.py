"""The θ-join front end: :func:`join_where`, Polars' ``DataFrame.join_where`` in meaning.

Predicates name columns as Polars does: a name of the left table is its column, else a name of
the right table, else a name ending in ``suffix`` whose stem is a right column; each predicate
compares one column of each table (written either way round).  Every compared type becomes an
order-preserving int64 (floats in Polars' total order: -0.0 equals 0.0, NaN equals NaN and
sorts above everything; strings by their UTF-8 bytes), and a row with a null in a compared
column matches nothing.  The pairs come from ``gpujoin.theta`` on the CPU (NumPy) or the GPU
(CuPy); the output is the left table's columns then the right's, clashing right names suffixed.
"""

from __future__ import annotations

import time
from contextlib import nullcontext

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..backend import resolve_device
from ..errors import ColumnNotFoundError, SchemaError
from ..expr import FLIPPED, Predicate, predicates_of
from ..outofcore.stream import Pairs, parallel_astype
from ..table import combined, to_arrow_table
from .join import JoinStats, _materialize
from .keys import cast_key, decimal64, integer_view, key_kind, no_nulls, physical, promote_key_types

ALGORITHMS = ("auto", "nlj", "band")
#: Candidate pairs a block on the CPU (about 64 bytes of temporaries each); on the GPU a 512th
#: of the budget in bytes, within these bounds.
CPU_BLOCK_PAIRS = 1 << 22
GPU_BLOCK_PAIRS = (1 << 16, 1 << 26)


def _side(name: str, lt: pa.Table, rt: pa.Table, suffix: str) -> tuple[str, str]:
    if name in lt.column_names:
        return "l", name
    if name in rt.column_names:
        return "r", name
    if suffix and name.endswith(suffix) and name[:-len(suffix)] in rt.column_names:
        return "r", name[:-len(suffix)]
    raise ColumnNotFoundError(f"join_where: column {name!r} is in neither table; the left has {lt.column_names}, "
                              f"the right {rt.column_names} (a right column may also be named with {suffix!r})")


def resolve(preds: list[Predicate], lt: pa.Table, rt: pa.Table, suffix: str) -> list[Predicate]:
    """Each predicate as (left column) op (right column)."""
    out = []
    for p in preds:
        (sa, a), (sb, b) = _side(p.left, lt, rt, suffix), _side(p.right, lt, rt, suffix)
        if sa == sb:
            which = "left" if sa == "l" else "right"
            raise ValueError(f"join_where predicate {p} compares two columns of the {which} table; compare a "
                             f"left column with a right one (a right column clashing with a left name is "
                             f"{p.right + suffix!r})")
        out.append(Predicate(a, p.op, b) if sa == "l" else Predicate(b, FLIPPED[p.op], a))
    return out


def _ordered(arr: pa.Array, memo: dict | None = None, alloc=None) -> np.ndarray:
    """int64 values whose order and equality are those of ``arr``'s values (null slots arbitrary);
    ``memo`` keeps the arrays already converted, so that a column in several predicates (a band
    join's ``lo <= a`` and ``a <= hi``) is converted once; ``alloc(n)`` gives the int64 array
    integer values are written into (page-locked memory for the GPUs' DMA)."""
    if memo is not None:
        key = (str(arr.type), arr.offset, len(arr), tuple(b.address if b else 0 for b in arr.buffers()))
        if key not in memo:
            memo[key] = (arr, _ordered(arr, alloc=alloc))  # the array kept: its buffers' addresses stay its own
        return memo[key][1]
    t = arr.type
    if pa.types.is_floating(t):  # the keys' bits (one zero, one NaN: above +inf), negative floats reversed
        bits = physical(arr)[0]
        return bits ^ ((bits >> 63) & np.int64(0x7FFFFFFFFFFFFFFF))
    if pa.types.is_decimal128(t):
        lo = decimal64(arr)
        if lo is None:
            raise SchemaError(f"join_where compares decimals of at most 18 digits; {t} holds larger values")
        return lo
    x = no_nulls(integer_view(arr)).to_numpy(zero_copy_only=False)
    if x.dtype == np.uint64:  # order of unsigned values as signed: flip the top bit
        return (x ^ np.uint64(1 << 63)).view(np.int64)
    # one core of the H200 host widened 2^24 values in 35 ms: every copy thread does it
    return parallel_astype(x, np.int64, None if alloc is None else alloc(x.size))


def comparable(lname: str, larr: pa.Array, rname: str, rarr: pa.Array,
               memo: dict | None = None, alloc=None) -> tuple[np.ndarray, np.ndarray]:
    """The two columns of one predicate as order-preserving int64 arrays (see :func:`_ordered`;
    ``memo``: one dict over the predicates of a join, each column converted once; ``alloc``: where
    integer columns are written).

    Raises
    ------
    SchemaError
        The types cannot be compared (Polars: an integer with a float, a string with a number).
    """
    larr, rarr = (a.dictionary_decode() if pa.types.is_dictionary(a.type) else a for a in (larr, rarr))
    kinds = {key_kind(larr.type), key_kind(rarr.type)}
    if None in kinds or len(kinds) > 1 and not (pa.types.is_null(larr.type) or pa.types.is_null(rarr.type)):
        raise SchemaError(f"join_where cannot compare {lname!r} ({larr.type}) with {rname!r} ({rarr.type}); "
                          f"cast one of them to the other's type")
    typ = promote_key_types(lname, larr.type, rname, rarr.type)
    larr, rarr = cast_key(lname, larr, typ), cast_key(rname, rarr, typ)
    if pa.types.is_large_string(typ) or pa.types.is_large_binary(typ):  # ranks in the sorted union of both
        uniq = pc.unique(pa.concat_arrays([larr, rarr])).drop_null()
        uniq = uniq.take(pc.sort_indices(uniq))
        return tuple(pc.index_in(a, value_set=uniq).fill_null(0).to_numpy().astype(np.int64) for a in (larr, rarr))
    return _ordered(larr, memo, alloc), _ordered(rarr, memo, alloc)


def _valid_rows(arrays: list[pa.Array], n: int) -> np.ndarray | None:
    """Rows with no null in any compared column (None: all of them)."""
    valid = None
    for a in arrays:
        if a.null_count:
            v = np.asarray(a.is_valid())
            valid = v if valid is None else valid & v
    return None if valid is None else np.flatnonzero(valid)


def join_where(left, right, *predicates, suffix: str = "_right", algorithm: str = "auto", device: str = "auto",
               memory_limit=None, gpus=None) -> pa.Table:
    """Inner join of ``left`` and ``right`` on a conjunction of column comparisons (Polars'
    ``DataFrame.join_where``; see :func:`execute_join_where`)."""
    return execute_join_where(left, right, *predicates, suffix=suffix, algorithm=algorithm, device=device,
                              memory_limit=memory_limit, gpus=gpus)[0]


#: Candidate pairs of a nested-loop join from which ``gpus=None`` spreads it over every GPU of
#: the host (the ring moves |S| (D - 1) times over peer links: far less than the pairs cost).
RING_AUTO_PAIRS = 1 << 32


def execute_join_where(left, right, *predicates, suffix="_right", algorithm="auto", device="auto",
                       memory_limit=None, gpus=None) -> tuple[pa.Table, JoinStats]:
    """:func:`gpujoin.join_where`, returning ``(result, JoinStats)``.

    Parameters
    ----------
    left, right : any table gpujoin takes (Arrow, pandas, Polars, dicts of arrays, record batches)
    predicates : ``gpujoin.col("a") < gpujoin.col("b")`` (or ``<=``, ``>``, ``>=``, ``==``, ``!=``),
        Polars expressions of that form, ``&`` of them, or several
    suffix : appended to right column names that clash with left ones (and names them in predicates)
    algorithm : "auto" (the band join when a range or equality condition exists, else the
        nested loop), "band" (sort-based band join), "nlj" (block nested loop, any θ)
    device : "auto", "cpu" or "cuda"
    memory_limit : GPU bytes the pairs' blocks may take (bytes or e.g. "8GB"), each GPU's
    gpus : a number of GPUs or a list of device ids: the rows are joined by paper 000's
        peer-to-peer ring over them (``dist.nested_loop.ring_join``: each GPU keeps a chunk of the
        left rows and the right rows' chunks pass from GPU to GPU); default one GPU, every GPU
        of the host for a nested loop of at least ``RING_AUTO_PAIRS`` pairs

    Returns
    -------
    pyarrow.Table: the left columns, then the right ones; rows in unspecified order.

    Raises
    ------
    ColumnNotFoundError, SchemaError, ValueError, TypeError
        An unknown column, incomparable types, a predicate on one table or not of two columns.
    MemoryError
        The output would not fit in host memory (raised before it is built, naming its size).

    References
    ----------
    Paper 000 §3.1 (the block nested-loop join for any θ) and §3.2 (range conditions on sorted
    runs); Polars ``DataFrame.join_where`` for the semantics.
    """
    pins: list = []  # page-locked arenas of the compared columns, handed back for reuse at the end
    try:
        return _execute_join_where(left, right, predicates, suffix, algorithm, device, memory_limit, gpus, pins)
    finally:
        for arena in pins:
            arena.close()


def _execute_join_where(left, right, predicates, suffix, algorithm, device, memory_limit, gpus, pins):
    from ..outofcore.budget import check_host, gpu_budget, gpu_memory_cap, host_available, resolve_memory_limit
    from ..theta import band_join, band_plan, nested_loop_join

    from .join import _check_gpus

    limit = resolve_memory_limit(memory_limit)
    _check_gpus(gpus, device)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown join_where algorithm {algorithm!r}; valid: {list(ALGORITHMS)}")
    preds = predicates_of(list(predicates))
    if not preds:
        raise ValueError("join_where needs at least one predicate; for every pair use join(..., how='cross')")
    lt, rt = to_arrow_table(left), to_arrow_table(right)
    preds = resolve(preds, lt, rt, suffix)
    dev = resolve_device(device, "join")
    t0 = time.perf_counter()
    larrs = [combined(lt, p.left) for p in preds]
    rarrs = [combined(rt, p.right) for p in preds]
    memo: dict = {}
    alloc = _page_locked(pins) if dev == "cuda" else None
    cols = [comparable(p.left, la, p.right, ra, memo, alloc) for p, la, ra in zip(preds, larrs, rarrs)]
    lrows, rrows = _valid_rows(larrs, lt.num_rows), _valid_rows(rarrs, rt.num_rows)
    lcols = [c[0] if lrows is None else c[0][lrows] for c in cols]
    rcols = [c[1] if rrows is None else c[1][rrows] for c in cols]
    ops = [p.op for p in preds]
    driver = band_plan(ops, [p.right for p in preds])
    if algorithm == "band" and driver is None:
        raise ValueError("the band join needs a range or equality condition (<, <=, >, >=, ==); use 'nlj'")
    algo = "nlj" if algorithm == "nlj" or driver is None else "band"
    stats = JoinStats(algo, dev, "inner", lt.num_rows, rt.num_rows)
    stats.phases["transform"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    width = lt.nbytes / max(1, lt.num_rows) + rt.nbytes / max(1, rt.num_rows) + 16  # output bytes a row
    ids = _ring_gpus(gpus, dev, algo, len(lcols[0]) * len(rcols[0])) if lcols else None
    if ids is not None:
        from ..dist.nested_loop import ring_join

        block = int(min(GPU_BLOCK_PAIRS[1], max(GPU_BLOCK_PAIRS[0], gpu_budget(limit) // 512)))
        pairs, ring = ring_join(lcols, rcols, ops, driver if algo == "band" else None, ids,
                                block_pairs=block, memory_limit=limit)
        with pairs:
            stats.algorithm = f"ring ({algo})"
            stats.params.update({"candidates": sum(g["candidates"] for g in ring["per_gpu"]), "block_pairs": block,
                                 "predicates": [str(p) for p in preds], **ring})
            check_host(int(len(pairs) * width), f"join_where's output of {len(pairs):,} rows",
                       "add a condition that narrows the pairs, or compare fewer rows")
            return _finish(lt, rt, pairs, lrows, rrows, suffix, stats, t1)
    if dev == "cuda":
        import cupy as xp

        from ..outofcore.stream import Downloader, PairColumns, Streams

        # the pairs leave through pinned slots on the copy-out stream while the next block is
        # found on the compute stream (blocks copied one by one with cp.asnumpy and then
        # concatenated made the match phase of 2^24 x 2^24 rows 1.34 s, against 0.18 s so)
        st = Streams(3)
        cap, on_stream = gpu_memory_cap(limit), st.compute
    else:
        xp, cap, on_stream = np, nullcontext(), nullcontext()
    with cap, on_stream:
        least, most = GPU_BLOCK_PAIRS
        block = CPU_BLOCK_PAIRS if dev == "cpu" else int(min(most, max(least, gpu_budget(limit) // 512)))
        lx, rx = [xp.asarray(c) for c in lcols], [xp.asarray(c) for c in rcols]
        pairs = (band_join(xp, lx, rx, ops, driver, block) if algo == "band"
                 else nested_loop_join(xp, lx, rx, ops, block))
        stats.params.update({"candidates": pairs.bound, "block_pairs": block, "predicates": [str(p) for p in preds]})
        what = "join_where's output"
        hint = "add a condition that narrows the pairs, or compare fewer rows"
        bound = pairs.bound
        if bound * width > host_available():  # the candidates could not all be kept: count the output exactly
            bound = sum(int(a.size) for a, _ in pairs.blocks())
            what = f"join_where's output of {bound:,} rows"
        check_host(int(bound * width), what, hint)
        if xp is np:
            blocks = list(pairs.blocks())  # one segment: the CPU's blocks are small
            found = Pairs([tuple(np.concatenate([blk[i] for blk in blocks]) if blocks else np.empty(0, np.int64)
                                 for i in (0, 1))])
        else:
            out = PairColumns(Downloader(st), "join_where")
            try:
                for a, b in pairs.blocks():
                    out.add(a, b, bound)
            except BaseException:
                out.close()
                raise
            found = out.finish()
    with found:
        return _finish(lt, rt, found, lrows, rrows, suffix, stats, t1)


def _page_locked(pins: list):
    """``alloc(n)``: an int64 array of n items in a page-locked arena appended to ``pins``: the
    compared columns the GPUs read, so that their DMA needs no staging copy (the ring's input
    had moved at 25 GB/s through staging on two H200s, against PCIe's 55)."""
    from ..outofcore.stream import HostArena

    def alloc(n: int) -> np.ndarray:
        pins.append(HostArena(8 * n + 256))
        return pins[-1].take(n, np.int64)
    return alloc


def _ring_gpus(gpus, dev: str, algo: str, pairs: int) -> list[int] | None:
    """The GPUs of the ring: those ``gpus`` names (even one: the ring on one GPU is its
    baseline); by default every GPU for a nested loop of ``RING_AUTO_PAIRS`` pairs or more."""
    from ..dist.devices import device_count, resolve_gpus

    if dev != "cuda":
        return None
    ids = resolve_gpus(gpus)
    if ids is None and algo == "nlj" and pairs >= RING_AUTO_PAIRS and device_count() > 1:
        ids = list(range(device_count()))
    return ids


def _finish(lt, rt, pairs, lrows, rrows, suffix, stats, t1):
    """The output of ``pairs`` (row numbers of the compared, null-free rows: ``lrows`` and
    ``rrows`` map them back to the tables'), a table chunk a segment: the segments are read
    where they lie (page-locked arenas), not concatenated first."""
    stats.phases["match"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    parts = []
    for lidx, ridx in pairs.segments or [(np.empty(0, np.int64), np.empty(0, np.int64))]:
        if lrows is not None:
            lidx = lrows[lidx]
        if rrows is not None:
            ridx = rrows[ridx]
        parts.append(_materialize(lt, rt, [], [], [], lidx, ridx, "cross", suffix, False))
    out = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    stats.phases["materialize"] = time.perf_counter() - t2
    stats.output_rows = out.num_rows
    return out, stats
