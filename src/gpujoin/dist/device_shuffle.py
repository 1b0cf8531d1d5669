"""Paper 001's shuffle of tables in GPU memory (``DeviceTable``): the keys hashed on the GPU, the
rows partitioned by destination rank, the partitions exchanged over NCCL.

- :func:`destinations`: each row's rank, from the same hash as the host shuffle
  (``shuffle.key_hashes``: murmur3's 64-bit finalizer chained over the key columns' int64 values,
  seeded), computed by one elementwise kernel a key column; null keys stay on a given rank.
- :func:`unify_dictionaries`: string columns are int32 codes into a dictionary of each rank's own;
  before rows move, every rank re-codes its columns into one dictionary that all ranks agree on
  (the union of theirs, gathered over MPI), so that a code means the same string everywhere and
  the two key columns of a join share one dictionary, as the in-core device join needs.
- :func:`exchange`: the rows grouped by destination (paper 001's two-pass partition: a
  histogram, a prefix sum and a shared-memory-staged scatter of every column and validity mask,
  shuffle.cu; more than 256 ranks, gpujoin's radix partition), every rank's counts gathered over
  MPI, then chunk by chunk every column's messages in one NCCL group
  (``Communicator.post_device``), the next chunk partitioned meanwhile; the first chunk is
  partitioned while the host exchanges the counts (laid out from the counts on the GPU).
"""

from __future__ import annotations

import math
import os

import numpy as np

from .comm import Communicator

_FMIX = r"""
__device__ __forceinline__ unsigned long long fmix64(unsigned long long x) {
    x ^= x >> 33; x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33; x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33; return x;
}
"""
_kernels: dict = {}


def _kernel(name: str):
    """The elementwise kernels (made on first use: CuPy compiles them)."""
    if not _kernels:
        import cupy as cp

        # integer keys as their int64 value (sign- or zero-extended; uint64's bits as they are),
        # as shuffle.key_hashes has them on the host
        _kernels["mix"] = cp.ElementwiseKernel("uint64 h, T k", "uint64 o",
                                               "o = fmix64((h * 31ull) ^ (unsigned long long)(long long)k)",
                                               "gpujoin_hash_mix", preamble=_FMIX)
        for out in ("int32", "uint8"):
            _kernels[f"dest_{out}"] = cp.ElementwiseKernel(
                "uint64 h, T k, uint64 parts", f"{out} d",
                "d = (int)((((fmix64((h * 31ull) ^ (unsigned long long)(long long)k)) >> 32) * parts) >> 32)",
                f"gpujoin_hash_dest_{out}", preamble=_FMIX)
    return _kernels[name]


def key_hashes(columns: list, seed: int):
    """uint64 (n,) hash of each row's integer key columns (CuPy arrays (n,)), equal to
    ``shuffle.key_hashes`` of the same values on the host."""
    h = np.uint64(seed)  # a scalar the first kernel broadcasts
    for c in columns:
        h = _kernel("mix")(h, c)
    return h


def destinations(columns: list, seed: int, parts: int, valid=None, null_rank: int = 0):
    """Partition 0 .. parts - 1 of each row of the integer key ``columns`` (CuPy (n,)), the host
    shuffle's ``destinations(key_hashes(...))``: uint8 (n,) for at most 256 parts (a quarter of
    the bytes for the shuffle's histogram and scatter to read), else int32; rows where ``valid``
    (bool (n,)) is false go to ``null_rank``."""
    import cupy as cp

    h = np.uint64(seed) if len(columns) == 1 else key_hashes(columns[:-1], seed)
    d = _kernel("dest_uint8" if parts <= 256 else "dest_int32")(h, columns[-1], np.uint64(parts))
    if valid is not None:
        d = cp.where(valid, d, d.dtype.type(null_rank))
    return d


def unify_dictionaries(tables: list, groups: list[list[tuple[int, str]]], comm: Communicator) -> list:
    """``tables`` (DeviceTables) with each group of string columns (``(table index, column)``
    pairs) re-coded into one dictionary shared by the group and by every rank: the union of the
    group's dictionaries on all ranks, in rank order (so the same on each).  Every rank must call
    it with the same groups (a collective): cuda.table.unify_dictionaries over ``comm``."""
    from ..cuda.table import unify_dictionaries as unify

    return unify(tables, groups, comm)


def exchange(table, dest, comm: Communicator, stats: dict | None = None):
    """Send row i of ``table`` (DeviceTable) to rank ``dest[i]`` (CuPy (n,) integers, as
    :func:`destinations` gives them); returns the
    DeviceTable of the rows every rank sent here, in ``comm.DeviceLayout``'s order (a
    collective): :func:`exchange_many` of one table."""
    return exchange_many([table], [dest], comm, stats)[0]


#: Rows of one chunk of the pipelined shuffle: a chunk is partitioned while the one before it is
#: on the links.  On two H200s at 2^28 rows a rank of 16 bytes (scripts/profile_dist_shuffle.py
#: variants), chunks of 2^26 rows took 19.2-20.4 ms for both tables, of 2^25 20.8-22.0; once the
#: early chunk's group was posted before the host laid out the rest, 2^27 took 15.98 ms, 2^26
#: 17.62 and 2^25 19.8-20.1 (fewer groups, each beside one scatter fewer).  The environment
#: variable GPUJOIN_SHUFFLE_CHUNK_ROWS overrides it (the same on every rank), for measuring
#: other sizes in the benchmark (at 4 ranks a peer's message is half the 2-rank size).
CHUNK_ROWS = 1 << 27


def chunk_rows_default() -> int:
    """CHUNK_ROWS, or GPUJOIN_SHUFFLE_CHUNK_ROWS where set.

    Raises
    ------
    ValueError
        GPUJOIN_SHUFFLE_CHUNK_ROWS is not a positive whole number of rows.
    """
    given = os.environ.get("GPUJOIN_SHUFFLE_CHUNK_ROWS", "").strip()
    if not given:
        return CHUNK_ROWS
    try:
        value = float(given)  # "67108864" or "1e8"
    except ValueError:
        value = 0.0
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise ValueError(f"GPUJOIN_SHUFFLE_CHUNK_ROWS={given!r}: expected a positive number of rows (e.g. "
                         f"67108864 or 1e8); unset it for the default {CHUNK_ROWS:,}")
    return int(value)


def exchange_many(tables: list, dests: list, comm: Communicator, stats: dict | None = None,
                  chunk_rows: int | None = None, compress=None) -> list:
    """:func:`exchange` of several tables (a join's two sides), pipelined in chunks of
    ``chunk_rows`` (default :func:`chunk_rows_default`): each chunk's rows to every rank are counted first (one histogram launch a
    table; every rank's counts gathered over MPI, so that each rank lays out its receive buffers
    before any data moves), then chunk c + 1 is partitioned by destination on a side stream
    while chunk c's NCCL group is on the links (:class:`_Chunks`: one launch a chunk, this
    rank's own rows written straight into the receive buffer).
    Every rank must pass the same number of tables, with the same columns; a validity mask that
    some rank has travels from every rank (all-valid where absent).

    ``compress(j)``: whether the messages to rank j are compressed (paper 001 §5: the integer
    columns and validity masks, each under the scheme ``cascaded.select`` picks from a sample of
    this rank's column, by nvCOMP's cascaded codec; a column that no scheme shrinks goes as it
    is).  Compressed sizes are known only once compressed, so then each table is partitioned
    whole and sent in one exchange (:func:`_exchange_compressed`), rows grouped by source rank,
    instead of the pipeline.  ``stats["compression"]``: per column, its scheme, bytes before and
    after, seconds to compress and decompress (the device synchronized).

    Memory on the GPU: each table's partitioned copy and its received rows beside the inputs.

    Raises
    ------
    MemoryError
        On every rank, before data moves, when some rank's partitioned copies and received rows
        would not fit in its free GPU memory.
    ImportError
        Compression asked for and nvCOMP not installed.
    """
    import cupy as cp

    from ..cuda.runtime import free_bytes

    if comm.size == 1:
        return list(tables)
    chunk_rows = chunk_rows or chunk_rows_default()
    P, me = comm.size, comm.rank
    zipped = [] if compress is None else [j for j in range(P) if j != me and compress(j)]
    # each tile's rows to every rank counted first, the GPU busy while the ranks agree on the
    # tables' shapes (an MPI round trip)
    plans = [_Chunks(None, d, P) for d in dests]
    every, cols_of = _columns(tables, comm, bool(zipped))
    row = [sum(c.dtype.itemsize for c in cols) for _, cols in cols_of]
    # every rank cuts each table into the same number of chunks (its largest slice's), each
    # chunk's rows to every rank counted before any moves
    for i, (p, (_, cols)) in enumerate(zip(plans, cols_of)):
        p.cut(max(1, -(-max(e[i][1] for e in every) // chunk_rows)), cols)
    compressed = any(e[0][2] for e in every)  # some rank compresses: every rank takes that path
    pipelined = not compressed and comm.nccl() is not None
    # the first chunk partitioned while the host exchanges the counts (it had waited for them:
    # 0.7 ms of the 4 before the first byte moved at 2^28 rows a rank on two H200s)
    early = plans[0].early() if pipelined and os.environ.get("GPUJOIN_SHUFFLE_EARLY", "1") == "1" else 0
    units = [(i, c) for i, p in enumerate(plans) for c in range(len(p.bounds))]
    cnt = cp.asnumpy(cp.concatenate([p.counts for p in plans])).astype(np.int64).reshape(len(units), P)
    starts = np.cumsum(cnt, axis=1) - cnt
    # one collective: every rank's counts and free GPU memory (within its pool's cap, where a
    # memory_limit holds one: past it an allocation would fail on that rank alone while the
    # others wait in NCCL), so that each rank lays out what it receives and all agree on
    # whether every rank has room
    everyone = comm.allgather_array(np.append(cnt.ravel(), free_bytes() + early))  # no pickling: 0.1 ms
    all_cnt = [(r[:-1].reshape(cnt.shape), int(r[-1])) for r in everyone]
    their_cnt = np.stack([c[:, me] for c, _ in all_cnt], axis=1)
    their_starts = np.stack([(np.cumsum(c, axis=1) - c)[:, me] for c, _ in all_cnt], axis=1)
    of = [[u for u, (i, _) in enumerate(units) if i == t] for t in range(len(tables))]
    for r, (_, room) in enumerate(all_cnt):
        need = sum(w * (every[r][i][1] + sum(int(c[us, r].sum()) for c, _ in all_cnt))
                   for i, (w, us) in enumerate(zip(row, of)))
        if need > room:
            raise MemoryError(f"the shuffle on rank {r} needs about {need / 2**30:.2f} GiB of GPU memory for its "
                              f"partitioned copies and the rows it receives, {room / 2**30:.2f} GiB is free: use "
                              f"more ranks, or host tables (the MPI shuffle)")
    if stats is not None:
        for us, r in zip(of, row):
            sent = int((cnt[us].sum() - cnt[us, me].sum()) * r)
            stats["bytes_sent"] = stats.get("bytes_sent", 0) + sent
            if not compressed:  # (a compressed exchange counts what its messages hold)
                stats["wire_bytes_sent"] = stats.get("wire_bytes_sent", 0) + sent
            stats["bytes_received"] = stats.get("bytes_received", 0) + int(
                (their_cnt[us].sum() - their_cnt[us, me].sum()) * r)
    if compressed:
        got_cols = [_exchange_compressed(cols, t.column_names + [f"{n}.validity" for n in vnames], d,
                                         cnt[us].sum(axis=0), their_cnt[us].sum(axis=0), zipped, comm, stats)
                    for t, (vnames, cols), d, us in zip(tables, cols_of, dests, of)]
    elif not pipelined:  # ranks share a GPU: a table at a time, through the host
        got_cols = [comm.alltoallv_device(_partition(cols, d, P), cnt[us].sum(axis=0), their_cnt[us].sum(axis=0))
                    for (_, cols), d, us in zip(cols_of, dests, of)]
    else:
        got_cols = _pipelined(plans, of, cols_of, cnt, starts, their_starts, their_cnt, comm)
    return [_table(t, vnames, g) for t, (vnames, _), g in zip(tables, cols_of, got_cols)]


def _columns(tables: list, comm: Communicator, flag: bool = False) -> tuple[list, list]:
    """(every rank's (validity names, rows, ``flag``) per table, per table (the validity names
    some rank has, the columns then those validity masks as uint8, all-valid where absent)): a
    mask that some rank has travels from every rank (one collective)."""
    import cupy as cp

    every = comm.allgather([(sorted(t.validity), t.num_rows, flag) for t in tables])
    cols_of = []
    for i, t in enumerate(tables):
        vnames = [n for n in t.column_names if any(n in e[i][0] for e in every)]
        cols_of.append((vnames, [t.columns[n] for n in t.column_names] +
                        [t.validity[n] if n in t.validity else cp.ones(t.num_rows, cp.uint8) for n in vnames]))
    return every, cols_of


def _table(t, vnames: list, got: list):
    """The DeviceTable of received columns ``got`` (``t``'s columns, then the masks ``vnames``)."""
    from ..cuda.table import DeviceTable

    k = len(t.column_names)
    return DeviceTable(dict(zip(t.column_names, got[:k])), dict(zip(vnames, got[k:])), dict(t.types),
                       dict(t.dictionaries))


def bucket_destinations(columns: list, seed: int, parts: int, buckets: int, rank: int, valid=None):
    """:func:`destinations` into ``parts * buckets`` hash buckets, bucket-major: row i's rank is
    d[i] % parts and its bucket d[i] // parts (equal keys: one rank, one bucket); rows where
    ``valid`` is false go to ``rank`` (their own: null keys that match nothing), in bucket 0.
    uint8 up to 256 buckets in all."""
    return destinations(columns, seed, parts * buckets, valid, rank)


def exchange_buckets(tables: list, dests: list, comm: Communicator, buckets: int, stats: dict | None = None):
    """:func:`exchange_many` in ``buckets`` hash buckets, each handed over as it arrives: yields
    per bucket, in order, the list of DeviceTables (one a table) of the rows every rank sent here
    in that bucket, the current stream ordered after their arrival, while the later buckets'
    NCCL groups run on.  ``dests``: :func:`bucket_destinations` of each table.

    Each table is partitioned once into ranks x buckets runs (one histogram and one scatter
    launch a column width, shuffle.cu), and every bucket's NCCL group is posted at once, the
    first table's before the second's partition ends; the caller works on bucket b (a rank's
    local join: its rows a fraction of the whole, each bucket's keys its own) while the links
    carry the next (issue 16: the shuffle under the local join rather than before it).

    Every rank passes the same tables and buckets; ranks that share a GPU (no NCCL), more than
    DEST_MAX_PARTS ranks x buckets, or a send buffer that does not fit take
    :func:`exchange_many` and yield its tables as one bucket.

    Raises
    ------
    MemoryError
        On every rank, before data moves, as :func:`exchange_many`.
    """
    import cupy as cp

    from ..cuda.runtime import free_bytes
    from .comm import DeviceLayout

    P, me, B = comm.size, comm.rank, buckets
    whole = P == 1 or comm.nccl() is None or P * B > DEST_MAX_PARTS
    if not whole:
        _, cols_of = _columns(tables, comm)
        plans = [_Chunks(cols, d, P * B, k=1) for (_, cols), d in zip(cols_of, dests)]
        # every row, this rank's too, into its table's send buffer, laid out on the GPU
        sent = [p.early() for p in plans]
        whole = not all(sent[i] or not tables[i].num_rows for i in range(len(tables)))
        whole = bool(comm.allgather_array(np.array([int(whole)], np.int64)).max())  # every rank alike
    if stats is not None:
        stats["buckets"] = 1 if whole else B
    if whole:
        yield exchange_many(tables, [d if P == 1 else (d % P).astype(d.dtype) for d in dests], comm, stats)
        return
    cnt = cp.asnumpy(cp.concatenate([p.counts for p in plans])).astype(np.int64)  # (tables, B * P)
    everyone = comm.allgather_array(np.append(cnt.ravel(), free_bytes()))  # (the send buffers are made)
    counts = everyone[:, :-1].reshape(P, len(tables), B, P)  # rank, table, bucket, destination
    rows = [sum(c.dtype.itemsize for c in cols) for _, cols in cols_of]
    for r, room in enumerate(everyone[:, -1]):
        need = sum(w * int(counts[:, i, :, r].sum()) for i, w in enumerate(rows))
        if need > int(room):
            raise MemoryError(f"the shuffle on rank {r} needs about {need / 2**30:.2f} GiB of GPU memory for the "
                              f"rows it receives, {int(room) / 2**30:.2f} GiB is free: use more ranks, or host "
                              f"tables (the MPI shuffle)")
    units = bucket_units(counts, me)
    if stats is not None:
        for i, w in enumerate(rows):
            own = int(counts[me, i, :, me].sum())
            sent = (int(counts[me, i].sum()) - own) * w  # (uncompressed: the wire carries as much)
            for key in ("bytes_sent", "wire_bytes_sent"):
                stats[key] = stats.get(key, 0) + sent
            stats["bytes_received"] = stats.get("bytes_received", 0) + (int(counts[:, i, :, me].sum()) - own) * w
    # NCCL's groups on the highest-priority stream, or (GPUJOIN_SHUFFLE_NCCL_PRIORITY=0) one of
    # normal priority, whose blocks then queue behind the local joins' rather than ahead of them
    main = cp.cuda.get_current_stream()
    net = _net_stream() if os.environ.get("GPUJOIN_SHUFFLE_NCCL_PRIORITY", "1") == "1" else _side_streams(2)[1]
    lays, outs = {}, {}
    for (i, b), unit in units.items():
        lays[i, b] = DeviceLayout(me, [unit]).unit(0)
        outs[i, b] = [cp.empty(int(unit[3].sum()), c.dtype) for c in cols_of[i][1]]
    for p in plans:
        if p.buf is None:  # an empty table: nothing partitioned
            p.buf = [c[:0] for c in p.cols]
    net.wait_event(main.record())  # (the receive buffers may reuse blocks the main stream still reads)
    arrived = []
    for b in range(B):  # every group posted now, in bucket order, a table's after its partition
        for i, p in enumerate(plans):
            if b == 0 and p.early_done is not None:
                net.wait_event(p.early_done)
            sends, recvs, _ = lays[i, b]
            with net:
                comm.post_device(p.sent(0), outs[i, b], sends, recvs)
        arrived.append(net.record())
    for p in plans:  # this rank's own rows are in the send buffers once partitioned
        if p.early_done is not None:
            main.wait_event(p.early_done)
    try:
        for b in range(B):
            main.wait_event(arrived[b])
            for i, p in enumerate(plans):  # this rank's rows of the bucket to their place
                src, dst, n = lays[i, b][2]
                for x, o in zip(p.sent(0), outs[i, b]):
                    o[dst:dst + n] = x[src:src + n]
            yield [_table(t, vnames, outs.pop((i, b))) for i, (t, (vnames, _)) in enumerate(zip(tables, cols_of))]
    finally:
        # the send buffers go back to the pool only once every group has read them
        main.wait_event(net.record())


def bucket_units(counts: np.ndarray, me: int) -> dict:
    """Per (table, bucket), the all-to-all unit of rank ``me`` as ``comm.DeviceLayout`` takes it:
    (its send starts (P,), its send counts (P,), each rank's send start of its rows for ``me``
    (P,), each rank's count for ``me`` (P,)), int64 rows.  ``counts``: int64 (P ranks, tables,
    B, P), every rank's rows of each table, bucket and destination rank; each rank's send
    buffer holds a table's rows bucket-major (bucket b's rows to rank r at run b * P + r)."""
    P, T, B, _ = counts.shape
    flat = counts.reshape(P, T, B * P)
    starts = (np.cumsum(flat, axis=2) - flat).reshape(counts.shape)  # every rank's run starts
    return {(i, b): (starts[me, i, b], counts[me, i, b], starts[:, i, b, me].copy(), counts[:, i, b, me].copy())
            for i in range(T) for b in range(B)}


def _exchange_compressed(cols: list, names: list[str], dest, sc: np.ndarray, rc: np.ndarray, zipped: list[int],
                         comm: Communicator, stats: dict | None) -> list:
    """One table's columns ``cols`` (CuPy, rows to rank j: ``sc[j]``; from rank j: ``rc[j]``)
    exchanged with the messages to the ranks ``zipped`` compressed: partitioned by ``dest``,
    each compressible column's messages to those ranks compressed in one nvCOMP batch, the
    byte size of every message exchanged over MPI, the messages (compressed or as they are)
    in one NCCL group, then the compressed ones decompressed into place.  Returns the received
    columns, rows grouped by source rank."""
    import time

    import cupy as cp

    from . import cascaded
    from .comm import _starts
    from .shuffle import _column_stats

    P, me = comm.size, comm.rank
    parts = _partition(cols, dest, P)
    ss, rs = _starts(sc), _starts(rc)
    stream = cp.cuda.get_current_stream()
    # per column: {peer: compressed bytes (a view of one buffer)} and the raw bytes they hold
    packed = []
    for c, part, name in zip(cols, parts, names):
        peers = [j for j in zipped if sc[j]]
        scheme = cascaded.device_select(c) if peers and cascaded.device_compressible(c.dtype) else cascaded.Scheme()
        if scheme == cascaded.Scheme():
            packed.append({})
            continue
        stream.synchronize()
        t0 = time.perf_counter()
        buf, offsets, sizes = cascaded.DeviceCodec(c.dtype, scheme).encode(
            [part[ss[j]:ss[j] + sc[j]] for j in peers])
        packed.append({j: buf[o:o + n] for j, o, n in zip(peers, offsets, sizes)})
        if stats is not None:
            st = _column_stats(stats, name)
            st["scheme"] = str(scheme)
            st["raw_bytes"] += int(sum(sc[j] for j in peers)) * c.dtype.itemsize
            st["bytes"] += int(sum(sizes))
            st["compress_s"] += time.perf_counter() - t0
    # each message's size: compressed bytes, or -1 (the rows as they are)
    theirs = comm.comm.alltoall([[p[j].nbytes if j in p else -1 for p in packed] for j in range(P)])
    outs = [cp.empty(int(rc.sum()), c.dtype) for c in cols]
    sends, recvs, unpack = [], [], []
    for k, (part, out) in enumerate(zip(parts, outs)):
        sizes = [(j, theirs[j][k]) for j in range(P) if j != me and theirs[j][k] >= 0]
        offsets = np.cumsum([0] + [-(-n // cascaded.ALIGN) * cascaded.ALIGN for _, n in sizes])
        inbox = cp.empty(int(offsets[-1]), cp.uint8)
        where = {j: (int(o), n) for (j, n), o in zip(sizes, offsets)}
        for j in range(P):
            if j == me:
                continue
            sends.append((j, packed[k][j] if j in packed[k] else part[ss[j]:ss[j] + sc[j]].view(cp.uint8)))
            if j in where:
                o, n = where[j]
                recvs.append((j, inbox[o:o + n]))
                unpack.append((k, inbox[o:o + n], out[rs[j]:rs[j] + rc[j]]))
            else:
                recvs.append((j, out[rs[j]:rs[j] + rc[j]].view(cp.uint8)))
        out[rs[me]:rs[me] + rc[me]] = part[ss[me]:ss[me] + sc[me]]
    comm.exchange_messages(sends, recvs)
    if stats is not None:  # the bytes that left this rank, compressed or not
        stats["wire_bytes_sent"] = stats.get("wire_bytes_sent", 0) + sum(int(m.nbytes) for _, m in sends)
    for k in sorted({k for k, _, _ in unpack}):
        blobs, places = [b for kk, b, _ in unpack if kk == k], [o for kk, _, o in unpack if kk == k]
        stream.synchronize()
        t0 = time.perf_counter()
        cascaded.DeviceCodec(outs[k].dtype, cascaded.Scheme()).decode(blobs, places)
        stream.synchronize()
        if stats is not None:
            _column_stats(stats, names[k])["decompress_s"] += time.perf_counter() - t0
    return outs


def _pipelined(plans: list, of: list, cols_of: list, cnt, starts, their_starts, their_cnt, comm: Communicator) -> list:
    """Each table's chunks (``plans``: :class:`_Chunks`; ``of[i]``: table i's units, in order)
    partitioned on side streams, taking turns, and each chunk's NCCL group on its own stream
    once its partition is done, posted right after the next chunk's partition is launched
    (posted after all of them, the groups had waited for the host to launch every partition:
    5 ms at 2^28 rows a rank in chunks of 2^25 on two H200s); returns each table's received
    columns (the current stream waits for all of it)."""
    import cupy as cp

    from .comm import DeviceLayout

    main = cp.cuda.get_current_stream()
    # partitions on side streams taking turns (GPUJOIN_SHUFFLE_SIDE_STREAMS; with the first
    # chunk partitioned early, one did best: 18.4 against 19.0 ms at 2^28 rows a rank on two
    # H200s), NCCL's groups on a stream of the highest priority (GPUJOIN_SHUFFLE_NCCL_PRIORITY),
    # whose blocks the SMs then take first (19.2 against 20.3 ms)
    side = _side_streams(int(os.environ.get("GPUJOIN_SHUFFLE_SIDE_STREAMS", "1")))
    net = _net_stream() if os.environ.get("GPUJOIN_SHUFFLE_NCCL_PRIORITY", "1") == "1" else main
    net.wait_event(main.record())
    msgs, outs = [], []

    def lay_out(i):
        us = of[i]
        lay = DeviceLayout(comm.rank, [(starts[u], cnt[u], their_starts[u], their_cnt[u]) for u in us])
        msgs.append([lay.unit(k) for k in range(len(us))])  # (sends, recvs, own)
        outs.append([cp.empty(lay.rows, c.dtype) for c in cols_of[i][1]])

    def post(i, k, part, done):
        net.wait_event(done)
        sends, recvs, _ = msgs[i][k]
        with net:
            comm.post_device(part, outs[i], sends, recvs)

    lay_out(0)
    early = plans[0].early_done is not None
    if early:
        # partitioned already: its group goes first, before the other tables are laid out and
        # the scatters' addresses copied (the host's exchange, not the GPU, had held the first
        # byte back: 0.6-0.7 ms after the early chunk's scatter at 2^28 rows a rank)
        post(0, 0, plans[0].sent(0), plans[0].early_done)
    for i in range(1, len(of)):
        lay_out(i)
    for p, m, out, us in zip(plans, msgs, outs, of):
        p.prepare(out, [starts[u] for u in us], [own[1] for _, _, own in m], [cnt[u][comm.rank] for u in us], comm.rank)
    ready = main.record()  # the scatters' addresses are on the GPU
    todo = [(i, k) for i, us in enumerate(of) for k in range(len(us))]
    posted = []

    for q in range(len(todo) + 1):
        if q < len(todo):
            i, k = todo[q]
            s = side[q % len(side)]
            s.wait_event(ready)
            if q == 0 and early:  # (posted above) this rank's rows copied to their place
                with s:
                    plans[0].place(0, outs[0])
                posted.append(None)
                continue
            with s:
                posted.append((plans[i].place(k, outs[i]), s.record()))
        if q and posted[q - 1] is not None:
            post(*todo[q - 1], *posted[q - 1])
    for s in side + [net]:
        main.wait_event(s.record())
    # the send buffers go back to the memory pool only once the NCCL groups have read them
    main.synchronize()
    return outs


#: Most ranks that one launch partitions a chunk for (shuffle.cu: dest_scatter); beyond, the
#: radix partition's passes and a self-copy.
DEST_MAX_PARTS = 256
DEST_TILE = 4096  # shuffle.cu's DS_TILE
#: dest_scatter's persistent grid, in blocks an SM (GPUJOIN_SHUFFLE_BLOCKS_PER_SM)
DEST_BLOCKS_PER_SM = int(os.environ.get("GPUJOIN_SHUFFLE_BLOCKS_PER_SM", "4"))


def chunk_bounds(n: int, k: int, tile: int = DEST_TILE) -> list[tuple[int, int]]:
    """``k`` row ranges [lo, hi) covering rows 0 .. n - 1 in order, each starting on a
    ``tile``-row boundary and of one size but the last ones (shorter or empty): every rank cuts
    its slice into the same number of chunks, and a chunk's tiles are the table's (one
    histogram launch over the table counts them all).

    Raises
    ------
    ValueError
        ``k`` below 1.
    """
    if k < 1:
        raise ValueError(f"chunks must be at least 1, got {k}")
    step = -(-(-(-n // k)) // tile) * tile
    return [(min(n, c * step), min(n, (c + 1) * step)) for c in range(k)]


class _Chunks:
    """One table's rows (``cols``, CuPy (n,) each) cut into ``k`` chunks of whole tiles, and
    every chunk's rows to each of ``parts`` ranks counted (``counts``: int64 CuPy (k, parts));
    :meth:`place` partitions chunk c by destination (``dest``: uint8 or int32 (n,)).

    Up to DEST_MAX_PARTS ranks, one histogram launch over the table and one scatter a chunk
    and column width (shuffle.cu), this rank's rows written straight into the receive buffer;
    more ranks, gpujoin's radix partition (passes of 8 bits) of each chunk and a self-copy."""

    def __init__(self, cols: list | None, dest, parts: int, k: int | None = None):
        """The histogram of every tile's rows to each rank launched; :meth:`cut` into ``k``
        chunks then (at once when ``k`` is given; ``cols`` may come with the cut)."""
        import cupy as cp

        from ..cuda.runtime import kernel

        n = int(dest.size)
        self.direct = parts <= DEST_MAX_PARTS
        small = self.direct and dest.dtype == cp.uint8
        self.cols, self.dest, self.parts = cols, dest if small else dest.astype(cp.int32, copy=False), parts
        self.buf, self.early_done = None, None
        self.dtype = "u8" if small else "i32"
        if self.direct:  # a row of counts a tile: the chunks, cut later, are whole tiles
            self.tiles = cp.zeros((-(-n // DEST_TILE), parts), cp.int32)
            if n:
                kernel("shuffle.cu", f"dest_histogram<{self.dtype}>")((self.tiles.shape[0],), (256,),
                                                       (self.dest, np.int64(n), np.int32(parts), self.tiles))
        if k is not None:
            self.cut(k)

    def cut(self, k: int, cols: list | None = None) -> None:
        """``k`` chunks of whole tiles (``bounds``) and each chunk's rows to every rank
        (``counts``), from the tiles' histogram (the radix path: counted here)."""
        import cupy as cp

        if cols is not None:
            self.cols = cols
        parts, n = self.parts, int(self.dest.size)
        self.bounds = chunk_bounds(n, k)
        if not self.direct:  # (a radix histogram counts one pass's 8 bits: more ranks take more)
            self.counts = cp.stack([cp.bincount(self.dest[lo:hi], minlength=parts).astype(cp.int64)
                                    for lo, hi in self.bounds])
            return
        per = -(-self.bounds[0][1] // DEST_TILE)  # tiles a chunk (the first is the longest)
        counts = self.tiles
        if k * per > counts.shape[0]:  # the last chunks' missing tiles count nothing
            counts = cp.zeros((k * per, parts), cp.int32)
            counts[:self.tiles.shape[0]] = self.tiles
        a = counts[:k * per].reshape(k, per, parts)
        self.counts = a.sum(axis=1, dtype=cp.int64)
        # per chunk and destination, each tile's first row among the chunk's rows for it
        self.scan = cp.ascontiguousarray((cp.cumsum(a, axis=1, dtype=cp.int64) - a).transpose(0, 2, 1))
        self.per = per

    def prepare(self, out: list, send_starts: list, own_rows: list, own_counts: list, me: int) -> None:
        """Before :meth:`place`: the receive buffer ``out`` (a CuPy array a column), each
        chunk's send starts (int64 (parts,): where its rows to each rank start in its send
        buffer), where its own rows go in ``out`` and how many they are; the scatter's
        addresses copied to the GPU in one go (a copy a launch would wait on the stream's
        earlier partitions)."""
        import cupy as cp

        self.me, self.own, self.own_counts = me, own_rows, own_counts
        self.send_starts = send_starts
        if not self.direct:
            return
        n = int(self.dest.size)
        if self.buf is None:
            self.buf = [cp.empty(n, c.dtype) for c in self.cols]  # chunk c's send buffer: rows [lo, hi)
        base = np.array(send_starts, np.int64).reshape(len(self.bounds), self.parts)
        base[:, me] = own_rows
        lo = np.array([b[0] for b in self.bounds], np.uint64)[:, None]
        words, self.groups = self._pointers(lo, out, base.size)  # the addresses follow the bases
        self.dev = cp.asarray(np.concatenate([base.view(np.uint64).ravel(), words]))

    def _pointers(self, lo, own: list, first: int) -> tuple[np.ndarray, list]:
        """(uint64 words, groups): per column width, (chunks, 3 * columns) addresses, the
        input's, the send buffer's and ``own``'s, at each chunk's first row (``lo``: uint64
        (chunks, 1)), ``own``'s at row 0, one width after the other; groups (width, columns,
        the width's first word in an array where ``words`` start at word ``first``)."""
        from ..cuda.primitives import _width_groups

        words, groups, at = [], [], first
        for width, idx in _width_groups(self.cols).items():
            addr = lambda arrays, shift: (np.array([a.data.ptr for a in arrays], np.uint64)[None, :]  # noqa: E731
                                          + shift * np.uint64(width))
            ptrs = np.concatenate([addr([self.cols[i] for i in idx], lo), addr([self.buf[i] for i in idx], lo),
                                   addr([own[i] for i in idx], np.zeros_like(lo))], axis=1)
            words.append(ptrs.ravel())
            groups.append((width, len(idx), at))
            at += ptrs.size
        return np.concatenate(words), groups

    def sent(self, c: int) -> list:
        """Chunk c's send buffer (a CuPy array a column, rows to rank 0 first)."""
        lo, hi = self.bounds[c]
        return [b[lo:hi] for b in self.buf]

    def early(self) -> int:
        """Launch chunk 0's partition on the first side stream before the counts reach the host:
        every row of it, this rank's too, into the send buffer, laid out from the counts on the
        GPU (``place(0)`` then only copies this rank's rows to their place).  Returns the bytes
        of send buffer it allocated (0: not launched, the table empty or the radix path, or the
        buffers not fitting the GPU before the memory check that every rank makes)."""
        import cupy as cp

        from ..cuda.runtime import fits

        n = int(self.dest.size)
        need = n * sum(c.dtype.itemsize for c in self.cols)
        if not self.direct or not n or not fits(need):
            return 0
        try:
            self.buf = [cp.empty(n, c.dtype) for c in self.cols]
        except cp.cuda.memory.OutOfMemoryError:  # (fragmented): no early chunk, rather than this
            return 0                             # rank failing alone before the others' allgather
        s = _side_streams(1)[0]
        with s:  # the addresses copied before the stream waits for the histograms
            words, groups = self._pointers(np.zeros((1, 1), np.uint64), self.buf, 0)
            flat = cp.asarray(words)
        s.wait_event(cp.cuda.get_current_stream().record())
        with s:
            base = cp.cumsum(self.counts[0]) - self.counts[0]
            self._scatter(0, -1, base, flat, groups)
            self.early_done = s.record()
        return need

    def _scatter(self, c: int, me: int, base, dev, groups: list) -> None:
        """dest_scatter of chunk c, a launch a column width: ``base`` int64 (parts,) where its
        rows to each rank start, ``dev`` the addresses (:meth:`_pointers`' of every chunk from
        each of ``groups``' offsets: (width, columns, first word)); ``me`` -1: no rows go to
        ``own``."""
        import cupy as cp

        from ..cuda.primitives import word_type
        from ..cuda.runtime import device_properties, kernel

        lo, hi = self.bounds[c]
        n = hi - lo
        if not n:
            return
        # a persistent grid (not a block a tile): fewer blocks ahead of NCCL's in the queue;
        # throttled to 64, 32 or 16 blocks after the first chunk it fell behind NCCL
        # (20.3, 23.3, 40.5 ms against 18.6 at 2^28 rows a rank on two H200s)
        # (and leaving 8 or 24 of 132 SMs to NCCL's groups changed nothing: 18.5-18.6 ms)
        grid = min(-(-n // DEST_TILE), device_properties(cp.cuda.Device().id)["sms"] * DEST_BLOCKS_PER_SM)
        for width, m, at in groups:
            row = dev[at + c * 3 * m: at + (c + 1) * 3 * m]
            kernel("shuffle.cu", f"dest_scatter<{word_type(np.dtype(f'u{width}'))}, {self.dtype}>")(
                (grid,), (256,), (self.dest[lo:hi], np.int64(n), np.int32(self.parts), np.int32(me), base,
                                  self.scan[c], np.int32(self.per), row[:m], row[m:2 * m], row[2 * m:], np.int32(m)))

    def place(self, c: int, out: list) -> list:
        """Launch chunk c's partition on the current stream: this rank's rows into ``out`` (at
        their place), the others' into the chunk's send buffer, returned (a CuPy array a column,
        rows to rank 0 first, laid out by the send starts given to :meth:`prepare`)."""
        import cupy as cp

        lo, hi = self.bounds[c]
        if c == 0 and self.early_done is not None:
            cp.cuda.get_current_stream().wait_event(self.early_done)
        elif self.direct:
            P = self.parts
            self._scatter(c, self.me, self.dev[c * P:(c + 1) * P].view(cp.int64), self.dev, self.groups)
            return self.sent(c)
        # the radix path, or an early chunk 0 (partitioned already: this stream waited for it):
        # this rank's rows copied to their place
        part = (_partition([x[lo:hi] for x in self.cols], self.dest[lo:hi], self.parts) if not self.direct
                else self.sent(c))
        src, dst, rows = int(self.send_starts[c][self.me]), int(self.own[c]), int(self.own_counts[c])
        for x, o in zip(part, out):
            o[dst:dst + rows] = x[src:src + rows]
        return part


_streams: dict = {}


def _side_streams(k: int) -> list:
    """``k`` streams of the current GPU, the same ones every call: CuPy's memory pool keeps the
    blocks freed on a stream for that stream's next allocations, so new streams on every call
    would allocate afresh (cudaMalloc, and cudaFree's synchronization) and strand the old blocks."""
    import cupy as cp

    have = _streams.setdefault(cp.cuda.Device().id, [])
    while len(have) < k:
        have.append(cp.cuda.Stream(non_blocking=True))
    return have[:k]


def _net_stream(use: str = "net"):
    """The current GPU's stream of the highest priority for NCCL's groups (CUDA clamps the
    priority asked into the device's range; CuPy lacks cudaDeviceGetStreamPriorityRange); another
    such stream a ``use``."""
    import cupy as cp

    key = (use, cp.cuda.Device().id)
    if key not in _streams:
        _streams[key] = cp.cuda.Stream(non_blocking=True, priority=-(1 << 20))
    return _streams[key]


def _digits(parts: int):
    from ..cuda.primitives import Digits

    return Digits(max(1, (parts - 1).bit_length()), 0, False, 0)  # the destination's low bits, in order


def _partition(cols: list, dest, parts: int) -> list:
    """The columns grouped by destination (rows to rank 0 first, in input order): radix-partition
    passes on the ceil(log2 parts) bits of ``dest``."""
    import cupy as cp

    from ..cuda.primitives import radix_partition

    if not dest.size:
        return cols
    return radix_partition(dest.astype(cp.int32, copy=False), cols, _digits(parts), bounds=False)[1]
