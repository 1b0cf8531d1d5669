"""Paper 001's shuffle of host tables between ranks: hash the keys, send each row to the rank its
hash names, receive the rows that hash here.

- :func:`key_hashes`: a 64-bit hash of each row's key columns that every rank computes alike
  (murmur3's 64-bit finalizer over the key's canonical int64 value; strings hashed over their
  UTF-8 bytes), seeded: paper 001 uses distinct seeds for the first-level partition, the
  second-level partition and the local join, so that each level's partitions are uniform in the
  next one's bits.
- :func:`exchange`: one all-to-all of a table's rows by destination rank, a size exchange first
  (``Communicator.alltoall_counts``) and the data as one Arrow IPC stream per destination (any
  column type, nulls included; the rank's own rows are its self-copy), in rounds of at most
  ``MAX_MESSAGE_BYTES`` a message.
- :func:`shuffle`: ``"one-level"`` (every rank to every rank), ``"two-level"`` (rail-aligned first:
  GPU y of each host to GPU y of the destination's host, then within the host, paper 001 §4.2),
  or ``"auto"`` (:func:`auto_method`: by the crossover of paper 001's model, ``dist.model``).

Host tables (Arrow) move over MPI here; tables in GPU memory (``DeviceTable``) through
``device_shuffle.exchange`` over NCCL, under the same one- and two-level plans.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa

from .comm import MAX_MESSAGE_BYTES, Communicator

#: Seeds of the first-level partition, the second-level partition and the local join.
SEED_FIRST, SEED_SECOND = 0x9747B28C, 0x85EBCA6B
SHUFFLES = ("auto", "one-level", "two-level")
COMPRESSIONS = ("none", "auto", "cascaded")
_M1, _M2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)


def fmix64(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finalizer (uint64 in, uint64 out): every input bit reaches every output bit."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(33)
        x *= _M1
        x ^= x >> np.uint64(33)
        x *= _M2
        x ^= x >> np.uint64(33)
    return x


def _string_hash(arr: pa.Array) -> np.ndarray:
    """A 64-bit polynomial hash of each string's UTF-8 bytes or binary value's bytes (the same on
    every rank), uint64."""
    arr = arr.cast(pa.large_binary())  # (the same buffers; bytes that are not UTF-8 too)
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.empty(0, np.uint8)
    lo, hi = int(offsets[0]), int(offsets[-1])
    lengths = np.diff(offsets)
    out = lengths.astype(np.uint64)
    if hi > lo:
        b = data[lo:hi].astype(np.uint64) + np.uint64(1)
        pos = np.arange(hi - lo, dtype=np.int64) - np.repeat(offsets[:-1] - lo, lengths)
        with np.errstate(over="ignore"):
            powers = np.cumprod(np.full(int(lengths.max()), np.uint64(0x100000001B3)), dtype=np.uint64)
            terms = b * powers[pos]
        starts = (offsets[:-1] - lo)[lengths > 0]
        sums = np.add.reduceat(terms, starts)
        with np.errstate(over="ignore"):
            out[lengths > 0] += sums
    return out


def key_hashes(columns: list[pa.Array], seed: int, nulls_as_zero: bool = False) -> np.ndarray:
    """uint64 hash of each row's key (``columns``, already cast to the types both sides share);
    null slots hash to unspecified values (the caller keeps those rows where they are), or with
    ``nulls_as_zero`` as a zero word of their column, whatever its type (``nulls_equal``: equal
    keys with nulls in the same places hash alike)."""
    from ..plan.keys import is_binary_type, physical
    from ..table import decoded, is_string_type

    h = np.full(len(columns[0]) if columns else 0, np.uint64(seed), np.uint64)
    for c in columns:
        c = decoded(c)  # (values hashed: each rank's dictionary codes its own way)
        if is_string_type(c.type) or is_binary_type(c.type):
            words = [_string_hash(c)]
        else:
            words = [w.view(np.uint64) for w in physical(c)]
        if nulls_as_zero and c.null_count:
            valid = np.asarray(c.is_valid())
            words = [np.where(valid, w, np.uint64(0)) for w in words]
        for w in words:
            with np.errstate(over="ignore"):
                h = fmix64(h * np.uint64(31) ^ w)
    return h


def destinations(hashes: np.ndarray, parts: int) -> np.ndarray:
    """Partition (0 .. parts - 1) of each hash, from its top 32 bits (multiply-shift: no modulo)."""
    return (((hashes >> np.uint64(32)) * np.uint64(parts)) >> np.uint64(32)).astype(np.int64)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


#: Arrow types whose columns the cascaded codec takes (integers without nulls).
_INTEGER_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32())


def compressible(table: pa.Table) -> list[str]:
    """The columns of ``table`` cascaded compression applies to: integers without nulls."""
    return [f.name for f in table.schema if f.type in _INTEGER_TYPES and table.column(f.name).null_count == 0]


def _column_stats(stats: dict, name: str) -> dict:
    """A compressed column's figures: its scheme, bytes before and after, seconds each way."""
    return stats.setdefault("compression", {}).setdefault(
        name, {"scheme": None, "raw_bytes": 0, "bytes": 0, "compress_s": 0.0, "decompress_s": 0.0})


def _message(piece: pa.Table, schemes: dict, stats: dict | None) -> bytes:
    """One destination's rows: Arrow IPC of the other columns, then each compressed column."""
    import time

    from . import cascaded

    if not schemes:
        return b"\0" + _ipc(piece)
    parts = [_ipc(piece.drop_columns(list(schemes)))]
    for name, scheme in schemes.items():
        t0 = time.perf_counter()
        col = piece.column(name).to_numpy()
        parts.append(cascaded.to_bytes(cascaded.encode(np, col, scheme)))
        if stats is not None:
            c = _column_stats(stats, name)
            c["scheme"] = str(scheme)
            c["raw_bytes"] += col.nbytes
            c["bytes"] += len(parts[-1])
            c["compress_s"] += time.perf_counter() - t0
    head = json.dumps(list(schemes)).encode()
    return b"\1" + struct.pack("<QQ", len(head), len(parts)) + head + \
        b"".join(struct.pack("<Q", len(p)) + p for p in parts)


def _read_message(buf: bytes, schema: pa.Schema, stats: dict | None) -> pa.Table:
    import time

    from . import cascaded

    if buf[:1] == b"\0":
        return pa.ipc.open_stream(pa.py_buffer(buf[1:])).read_all()
    hlen, nparts = struct.unpack_from("<QQ", buf, 1)
    names = json.loads(buf[17:17 + hlen])
    pos, parts = 17 + hlen, []
    for _ in range(nparts):
        (n,) = struct.unpack_from("<Q", buf, pos)
        parts.append(buf[pos + 8:pos + 8 + n])
        pos += 8 + n
    rest = pa.ipc.open_stream(pa.py_buffer(parts[0])).read_all()
    cols = {}
    for name, blob in zip(names, parts[1:]):
        t0 = time.perf_counter()
        cols[name] = pa.array(cascaded.from_bytes(blob), schema.field(name).type)
        if stats is not None:
            _column_stats(stats, name)["decompress_s"] += time.perf_counter() - t0
    return pa.table([cols[f.name] if f.name in cols else rest.column(f.name) for f in schema], schema=schema)


def compression_pays(ratio: float, encode_GBps: float, decode_GBps: float, link_GBps: float) -> bool:
    """Whether a column goes faster compressed: compressing it, sending ``1 / ratio`` of its
    bytes and decompressing them, against sending it as it is, at these rates (GB/s of the raw
    column; nothing overlapped, as paper 001 §8 models the phases)."""
    return 1 / link_GBps > 1 / encode_GBps + 1 / (ratio * link_GBps) + 1 / decode_GBps


def _schemes(table: pa.Table, link_GBps: float | None, stats: dict | None) -> dict:
    """The scheme of each :func:`compressible` column of ``table`` that ``cascaded.select``
    shrinks; with ``link_GBps``, only those whose compression pays at that link rate and the
    codec's rates timed on the selector's sample (:func:`compression_pays`), the others in
    ``stats["compression_not_paying"]``."""
    import time

    from . import cascaded

    schemes = {}
    for name in compressible(table):
        col = table.column(name).to_numpy()
        scheme, ratio = cascaded.select(np, col)
        if scheme == cascaded.Scheme():
            continue
        if link_GBps is not None:
            sample = col[:cascaded.SAMPLE]
            t0 = time.perf_counter()
            enc = cascaded.encode(np, sample, scheme)
            t1 = time.perf_counter()
            cascaded.decode(np, enc)
            t2 = time.perf_counter()
            rates = (sample.nbytes / max(t1 - t0, 1e-9) / 1e9, sample.nbytes / max(t2 - t1, 1e-9) / 1e9)
            if not compression_pays(ratio, *rates, link_GBps):
                if stats is not None:
                    stats.setdefault("compression_not_paying", {})[name] = {
                        "scheme": str(scheme), "ratio": ratio, "encode_GBps": rates[0], "decode_GBps": rates[1],
                        "link_GBps": link_GBps}
                continue
        schemes[name] = scheme
    return schemes


def exchange(table: pa.Table, dest: np.ndarray, comm: Communicator, compress=None,
             stats: dict | None = None, link_GBps: float | None = None) -> pa.Table:
    """Send row i of ``table`` to rank ``dest[i]`` (int64 (n,)); returns the rows every rank sent
    here (in rank order), with ``table``'s schema.  Every rank calls it (a collective).

    ``compress(j)``: whether the messages to rank j are compressed (cascaded codec, each
    :func:`compressible` column under the scheme ``cascaded.select`` picks from this rank's
    column; with ``link_GBps``, only the columns whose compression pays at that rate);
    ``stats`` receives each column's scheme, bytes before and after, and seconds."""
    schemes = {}
    if compress is not None and any(compress(j) for j in range(comm.size) if j != comm.rank):
        schemes = _schemes(table, link_GBps, stats)
    order = np.argsort(dest, kind="stable")
    counts = np.bincount(dest, minlength=comm.size).astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    row_bytes = table.nbytes / max(1, table.num_rows) + 1
    mine = int(counts.max(initial=0) * row_bytes // (MAX_MESSAGE_BYTES // 2)) + 1
    rounds = max(comm.allgather(mine))  # every rank runs the same rounds
    got: list[pa.Table] = []
    for r in range(rounds):
        pieces = []
        for j in range(comm.size):
            lo, hi = bounds[j], bounds[j + 1]
            a, b = lo + (hi - lo) * r // rounds, lo + (hi - lo) * (r + 1) // rounds
            piece = table.take(pa.array(order[a:b]))
            use = schemes if j != comm.rank and compress is not None and compress(j) else {}
            pieces.append(_message(piece, use, stats))
        send_counts = np.array([len(p) for p in pieces], np.int64)
        recv_counts = comm.alltoall_counts(send_counts)
        buf = np.frombuffer(b"".join(pieces), np.uint8) if send_counts.sum() else np.empty(0, np.uint8)
        recv = comm.alltoallv(buf, send_counts, recv_counts)
        pos = 0
        for c in recv_counts:
            got.append(_read_message(recv[pos:pos + c].tobytes(), table.schema, stats))
            pos += int(c)
    return pa.concat_tables(got).combine_chunks() if got else table.schema.empty_table()


def auto_method(comm: Communicator, rows: int, uniform: bool = True, rates=None, device: bool = False) -> str:
    """Paper 001's choice: the two-level shuffle below the crossover of its model (few rows a
    GPU: the one-level shuffle's P messages a rank cost more in latency than the second pass
    costs in bytes), the one-level one above it; one level on one host or with one rank a host.

    ``rates``: the model's ``Rates``; by default ``model.measured_rates(comm, device=device)``,
    its links calibrated on this job's ranks for host data (MPI) or GPU data (``device``:
    NCCL), a collective once a communicator."""
    if comm.nodes < 2 or comm.local_size < 2 or not uniform:
        return "one-level"
    from .model import crossover, measured_rates

    rates = measured_rates(comm, device=device) if rates is None else rates
    return "two-level" if rows < crossover(comm.size, comm.local_size, rates) else "one-level"


def shuffle(table, dest, comm: Communicator, method: str = "auto",
            compression: str = "none", stats: dict | None = None):
    """:func:`shuffle_many` of one table."""
    return shuffle_many([table], [dest], comm, method, compression, stats)[0]


def shuffle_many(tables: list, dests: list, comm: Communicator, method: str = "auto",
                 compression: str = "none", stats: dict | None = None) -> list:
    """Each table's rows to the ranks of ``dests``: :func:`exchange` directly (one level) or
    through the rail then the host (two levels: the inter-host traffic is rail-aligned, the
    rest stays on each host's links).  Every rank passes the same number of tables.

    ``tables``: pyarrow Tables (``dests`` int64 NumPy (n,), moved over MPI) or DeviceTables
    (``dests`` int32 CuPy (n,), moved over NCCL by ``device_shuffle.exchange_many``, which
    partitions one table while the previous one is on the links).
    ``compression``: "none"; "cascaded" (every message to another rank); "auto" (messages to
    other hosts only: paper 001 compresses the inter-node traffic, where links are slowest).
    DeviceTables are compressed on the GPU by nvCOMP's cascaded codec (``cascaded.DeviceCodec``,
    190-250 GB/s on an H100, far above any host's NIC); without nvCOMP installed, "auto" sends
    them uncompressed (``stats["compression_skipped"]`` says why) and "cascaded" raises
    ImportError.  Host tables under "auto" compress only the columns where it pays
    (:func:`compression_pays`) at the inter-host link's rate (``Communicator.link_GBps`` of the
    communicator carrying those messages: measured once, or GPUJOIN_INTER_HOST_GBPS set on every
    rank) and their codec's rate on the selector's sample: the NumPy codec's 0.1-0.9 GB/s pays
    only on links slower than that.

    Raises
    ------
    ValueError
        An unknown ``method``, or two levels on hosts with different numbers of ranks.
    ImportError
        ``compression="cascaded"`` of DeviceTables without nvCOMP.
    """
    if method not in SHUFFLES:
        raise ValueError(f"unknown shuffle {method!r}; valid: {list(SHUFFLES)}")
    if compression not in COMPRESSIONS:
        raise ValueError(f"unknown compression {compression!r}; valid: {list(COMPRESSIONS)}")
    device = not all(isinstance(t, pa.Table) for t in tables)
    if device and compression != "none":
        from .cascaded import nvcomp_missing

        # every rank alike: one rank without nvCOMP turns it off for all (the paths must agree)
        missing = [(r, why) for r, why in enumerate(comm.allgather(nvcomp_missing())) if why]
        have = not missing
        if not have and compression == "cascaded":
            raise ImportError(f"compression='cascaded' of tables in GPU memory needs nvCOMP on every rank; on rank "
                              f"{missing[0][0]}: {missing[0][1]}; or use compression='none'")
        if not have:
            if stats is not None:
                stats["compression_skipped"] = f"nvCOMP is not installed on every rank (rank {missing[0][0]})"
            compression = "none"
    if device:
        from .device_shuffle import exchange_many

        move = lambda ts, ds, c, compress, st: exchange_many(ts, ds, c, st, compress=compress)  # noqa: E731
    else:
        def move(ts, ds, c, compress, st):
            # "auto": the link's rate decides which columns pay (measured on c, a collective, when
            # its messages cross hosts at all)
            link = c.link_GBps() if compression == "auto" and compress is not None and c.nodes > 1 else None
            return [exchange(t, d, c, compress, st, link) for t, d in zip(ts, ds)]
    layout = comm.allgather((comm.node, comm.local_rank, comm.local_size))
    node_of = np.array([n for n, _, _ in layout], np.int64)
    remote = {"none": None, "cascaded": lambda j: True,
              "auto": lambda j: node_of[j] != comm.node}[compression]
    uniform = len({s for _, _, s in layout}) == 1
    if method == "auto":  # the links measured: MPI's for host tables, NCCL's for tables in GPU memory
        method = auto_method(comm, max(comm.allgather(max(t.num_rows for t in tables))), uniform, device=device)
    if method == "one-level" or comm.size == 1:
        return move(tables, dests, comm, remote, stats)
    if not uniform:
        raise ValueError("the two-level shuffle needs the same number of ranks on every host; use 'one-level'")
    local_of = np.array([lr for _, lr, _ in layout], np.int64)
    rail = comm.rail()  # its rank j is host j: every message but the self-copy crosses hosts
    step = _DeviceSteps() if device else _HostSteps
    first = move([step.with_dest(t, d) for t, d in zip(tables, dests)], [step.lookup(node_of, d) for d in dests],
                 rail, None if remote is None else (lambda j: True), stats)
    return move([step.without_dest(f) for f in first], [step.lookup(local_of, step.dest(f)) for f in first],
                comm.host(), (lambda j: True) if compression == "cascaded" else None, stats)


_DEST = "__gpujoin_dest"


class _HostSteps:
    """The two-level shuffle's carrying of each row's final rank, on Arrow tables."""

    @staticmethod
    def with_dest(table, dest):
        return table.append_column(_DEST, pa.array(dest, pa.int64()))

    @staticmethod
    def lookup(of: np.ndarray, dest):
        return of[dest]

    @staticmethod
    def dest(table):
        return table.column(_DEST).to_numpy()

    @staticmethod
    def without_dest(table):
        return table.drop_columns([_DEST])


class _DeviceSteps:
    """The same on DeviceTables (``dest`` a CuPy array)."""

    def __init__(self):
        import cupy as cp

        self.cp = cp

    def with_dest(self, table, dest):
        return table.with_column(_DEST, dest.astype(self.cp.int32, copy=False))

    def lookup(self, of: np.ndarray, dest):
        return self.cp.asarray(of.astype(np.int32))[dest]

    def dest(self, table):
        return table[_DEST]

    def without_dest(self, table):
        return table.select([n for n in table.column_names if n != _DEST])
