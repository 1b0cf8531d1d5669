"""``gpujoin bench dist`` (under ``mpirun``): paper 001's random workload on the job's ranks.

Each rank makes its slice: ``rows`` build rows with unique int64 keys over the whole job (a
shuffled range) and the global row id as payload, and ``rows`` probe rows of which 30% draw a
build key of any rank (the match rate) and the rest keys no build row has.  The join's output
count is therefore known (the matching probe rows), and is checked.  Per phase (partition,
shuffle, local join) each rank's seconds; the job's time is the slowest rank's; the MPI
all-to-all bandwidth of the same ranks is measured first as the shuffle's ceiling.
"""

from __future__ import annotations

import os
import time

import numpy as np

from .runner import commit, device_name

MATCH_RATE = 0.3


def random_slice(rows: int, rank: int, size: int, seed: int = 1, ranks=None, xp=np):
    """(build, probe, matching probe rows) of one rank (or the concatenation of ``ranks``'
    slices: the whole job's tables for a one-GPU baseline): int64 keys, int64 global row ids;
    Arrow tables from NumPy, DeviceTables from CuPy (made on the GPU)."""
    ranks = [rank] if ranks is None else list(ranks)
    total = rows * size
    if xp is np:
        perm = np.random.default_rng(seed).permutation(total)  # every rank the same: unique keys
    else:
        perm = xp.random.RandomState(seed).permutation(total)
    parts = []
    for r in ranks:
        build_keys = perm[r * rows:(r + 1) * rows].astype(np.int64)
        if xp is np:
            rng = np.random.default_rng(seed * 1000 + r)
            hit, a, b = rng.random(rows) < MATCH_RATE, rng.integers(0, total, rows), rng.integers(0, total, rows)
        else:
            rng = xp.random.RandomState(seed * 1000 + r)
            hit, a, b = rng.random_sample(rows) < MATCH_RATE, rng.randint(0, total, rows), rng.randint(0, total, rows)
        probe_keys = xp.where(hit, a, total + b).astype(np.int64)
        ids = xp.arange(r * rows, (r + 1) * rows, dtype=np.int64)
        parts.append((build_keys, probe_keys, ids, int(hit.sum())))
    cat = (lambda i: parts[0][i]) if len(parts) == 1 else (lambda i: xp.concatenate([p[i] for p in parts]))
    hits = sum(p[3] for p in parts)
    if xp is np:
        import pyarrow as pa

        return pa.table({"k": cat(0), "build_id": cat(2)}), pa.table({"k": cat(1), "probe_id": cat(2)}), hits
    from ..cuda.table import DeviceTable

    return DeviceTable({"k": cat(0), "build_id": cat(2)}), DeviceTable({"k": cat(1), "probe_id": cat(2)}), hits


def single_gpu_join_s(make, comm, runs: int, **keys) -> float | None:
    """On rank 0: the in-core join of the whole job's tables on its one GPU (``make()``: (probe,
    build, output rows), DeviceTables; ``keys``: ``gpujoin.join``'s), seconds, the minimum of
    ``runs``: what the distributed join is measured against; None on other ranks."""
    import cupy as cp

    import gpujoin

    best = None
    if comm.rank == 0:
        probe, build, hits = make()
        for _ in range(runs):
            cp.cuda.get_current_stream().synchronize()
            t0 = time.perf_counter()
            out = gpujoin.join(probe, build, device="cuda", **keys)
            cp.cuda.get_current_stream().synchronize()
            dt = time.perf_counter() - t0
            if out.num_rows != hits:
                raise AssertionError(f"one-GPU join gave {out.num_rows:,} rows, want {hits:,}")
            best = dt if best is None else min(best, dt)
            del out
        del build, probe
        cp.get_default_memory_pool().free_all_blocks()
    comm.barrier()
    return best


def _flip(tables):
    build, probe, hits = tables
    return probe, build, hits


def _on_gpu(probe, build, hits):
    from ..cuda.table import DeviceTable

    return DeviceTable.from_arrow(probe), DeviceTable.from_arrow(build), hits


def _compression_summary(every: list[dict]) -> dict:
    """Per compressed column over the ranks: scheme, ratio, compress and decompress GB/s."""
    out: dict = {}
    for st in every:
        for name, c in (st.get("compression") or {}).items():
            o = out.setdefault(name, {"scheme": c["scheme"], "raw_bytes": 0, "bytes": 0, "compress_s": 0.0,
                                      "decompress_s": 0.0})
            for k in ("raw_bytes", "bytes", "compress_s", "decompress_s"):
                o[k] += c[k]
    for o in out.values():
        o["ratio"] = o["raw_bytes"] / o["bytes"] if o["bytes"] else None
        o["compress_GBps"] = o["raw_bytes"] / o["compress_s"] / 1e9 if o["compress_s"] else None
        o["decompress_GBps"] = o["raw_bytes"] / o["decompress_s"] / 1e9 if o["decompress_s"] else None
    return out


def tpch_slice(sf: float, rank: int, size: int):
    """(lineitem, orders, matching rows) of one rank for paper 001's TPC-H join: every size-th
    row group of lineitem (l_orderkey, l_quantity) and of orders (o_orderkey, o_orderpriority as
    int32 codes, as the paper casts it); every lineitem row has its order, so the job's output is
    lineitem's row count."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..io import read_share
    from ..tpch.data import ensure_data

    root = ensure_data(sf, progress=False)
    li = read_share(root / "lineitem.parquet", rank, size).select(["l_orderkey", "l_quantity"])
    od = read_share(root / "orders.parquet", rank, size).select(["o_orderkey", "o_orderpriority"])
    prio = od.column("o_orderpriority").combine_chunks().cast(pa.string())
    codes = pc.index_in(prio, value_set=pa.array(["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]))
    od = od.set_column(1, "o_orderpriority", codes.cast(pa.int32()))
    li = li.set_column(1, "l_quantity", li.column("l_quantity").cast(pa.float64()))
    return li, od, li.num_rows


def bench_dist(rows_list: list[int], shuffles: list[str], device: str, runs: int, log=print,
               workload: str = "random", sf: float = 1.0, compressions: list[str] = ("none",),
               placement: str = "host", ranks_per_node: int | None = None, emit=None,
               buckets: list = ("auto",), radix: list = ("auto",)) -> list[dict]:
    """Records (on rank 0) of the distributed join of the random workload (``rows_list`` rows a
    rank) or of TPC-H lineitem x orders at scale factor ``sf`` (paper 001's two workloads),
    with each shuffle and compression setting.

    ``placement="gpu"`` (``device="cuda"``): each rank's tables are in its GPU's memory (the
    random ones made there, TPC-H's read on the host and copied) and shuffled over NCCL; the
    NCCL all-to-all of 4 GiB a rank is measured first as the shuffle's ceiling, and rank 0
    times the in-core join of the whole job's tables on its one GPU.
    ``ranks_per_node`` k: ranks k*i .. k*i + k - 1 play host i (``Communicator.from_mpi``), so
    that one machine runs the two-level shuffle as several hosts (paper 001 §4.2).
    ``buckets``: each value of ``dist.join``'s ``buckets`` timed in turn (tables in GPU memory).
    ``emit(record)``: called on rank 0 with each record once made, so that the settings timed
    before one that fails are kept (on four H200s a failing compression setting had lost the
    whole run's records)."""
    from ..backend import resolve_device
    from ..dist.device_shuffle import chunk_rows_default
    from ..dist.join import default_communicator, join

    device = resolve_device(device, "join")
    comm = default_communicator()
    if ranks_per_node and comm.size > 1:
        from ..dist.comm import Communicator

        comm = Communicator.from_mpi(ranks_per_node=ranks_per_node)
    gpu = placement == "gpu"
    if gpu and device != "cuda":
        raise ValueError("--placement gpu joins with --device cuda")
    if comm.rank == 0:  # each step announced first: a step that stops shows in the log (two H100s, 2026-11-25)
        log(f"{comm.size} ranks: timing the {'NCCL' if gpu else 'MPI'} all-to-all ceiling")
    ceiling = comm.measure_alltoall_GBps(4 << 30, 5, device=True) if gpu else comm.measure_alltoall_GBps()
    if comm.rank == 0:
        log(f"{comm.size} ranks on {comm.nodes} host(s); {'NCCL' if gpu else 'MPI'} all-to-all {ceiling:.2f} GB/s "
            f"a rank")
    records, radix_env = [], os.environ.get("GPUJOIN_SHUFFLE_RADIX")
    sizes = rows_list if workload == "random" else [None]
    for rows in sizes:
        one_gpu = None
        if workload == "random":
            keys = dict(on="k")
            if gpu:
                import cupy as cp

                if comm.rank == 0:
                    log(f"{rows:,} rows a rank: the one-GPU join of the whole job on rank 0")
                one_gpu = single_gpu_join_s(lambda: _flip(random_slice(rows, 0, comm.size, ranks=range(comm.size),
                                                                        xp=cp)), comm, runs, **keys)
            build, probe, hits = random_slice(rows, comm.rank, comm.size, xp=cp if gpu else np)
        else:  # (the ranks take turns on ensure_data's lock: one generates the data)
            keys = dict(left_on="l_orderkey", right_on="o_orderkey")
            if gpu:
                if comm.rank == 0:
                    log(f"TPC-H SF {sf:g}: the one-GPU join of the whole job on rank 0")
                one_gpu = single_gpu_join_s(lambda: _on_gpu(*tpch_slice(sf, 0, 1)), comm, runs, **keys)
            probe, build, hits = tpch_slice(sf, comm.rank, comm.size)
            if gpu:
                probe, build, hits = _on_gpu(probe, build, hits)
        want = sum(comm.allgather(hits))
        total_rows = sum(comm.allgather(build.num_rows + probe.num_rows))
        for method, compression, nb, rx in [(m, c, b, x) for m in shuffles for c in compressions
                                            for b in (buckets if gpu else ["auto"]) for x in (radix if gpu else ["auto"])]:
            os.environ["GPUJOIN_SHUFFLE_RADIX"] = "0" if rx == "off" else "1"  # (dist.join reads it on every rank)
            best, phases, squeeze = None, None, None
            for _ in range(runs):
                comm.barrier()
                t0 = time.perf_counter()
                stats: dict = {}
                out = join(probe, build, comm=comm, shuffle=method, device=device, stats=stats,
                           compression=compression, buckets=nb, **keys)
                dt = max(comm.allgather(time.perf_counter() - t0))
                got = sum(comm.allgather(out.num_rows))
                if got != want:
                    raise AssertionError(f"dist join gave {got:,} rows, want {want:,}")
                every = comm.allgather(stats)
                if best is None or dt < best:  # paper 001 reports the minimum of its runs
                    best, phases = dt, {k: max(s[k] for s in every) for k in ("partition", "shuffle", "local_join")}
                    squeeze = _compression_summary(every)
                    sent = max(s.get("bytes_sent", 0) for s in every)
                    wire = max(s.get("wire_bytes_sent", s.get("bytes_sent", 0)) for s in every)
                    local = sorted({s["local_algorithm"] for s in every})
                    # each rank's own phases and build side: the job waits for the slowest (a rank
                    # that built on its other side had matched 0.5 ms slower, two H200s)
                    per_rank = [{"phases_s": {k: s[k] for k in ("partition", "shuffle", "local_join")},
                                 "rows_received": s.get("rows_received"), "build_side": s.get("local_build_side")}
                                for s in every]
                    ran_buckets = max(s.get("buckets", 1) for s in every)
                    radix_bits = every[0].get("shuffle_radix_bits")
                    timeline = [s.get("shuffle_timeline_ms") for s in every]
                del out
            if comm.rank == 0:
                work = ({"rows_per_rank": rows, "match_rate": MATCH_RATE} if workload == "random"
                        else {"tpch_sf": sf, "join": "lineitem x orders"})
                records.append({"benchmark": "dist", "engine": "gpujoin", "device": device_name(device),
                                "commit": commit(), "date": time.strftime("%Y-%m-%d"), "ranks": comm.size,
                                "hosts": comm.nodes, "shuffle": method, "compression": compression,
                                "workload": {"name": workload, **work}, "min_s": best,
                                "tuples_per_s": total_rows / best, "output_rows": want, "phases_s": phases,
                                "columns": squeeze, "correct": True, "placement": placement,
                                "local_algorithms": local, "ranks_detail": per_rank, "buckets": ran_buckets,
                                "shuffle_radix": rx,
                                "shuffle_radix_bits": radix_bits, "shuffle_timeline_ms": timeline,
                                ("nccl_alltoall_GBps" if gpu else "mpi_alltoall_GBps"): ceiling})
                if gpu:  # (with buckets the shuffle phase is only the first bucket's wait: no rate)
                    rate = sent / phases["shuffle"] / 1e9 if phases["shuffle"] and ran_buckets == 1 else None
                    records[-1].update({"bytes_sent_per_rank": sent, "wire_bytes_per_rank": wire, "shuffle_GBps": rate,
                                        "shuffle_over_ceiling": rate / ceiling if rate else None,
                                        "tuples_per_s_per_gpu": total_rows / best / comm.size,
                                        "one_gpu_s": one_gpu, "speedup_over_one_gpu": one_gpu / best,
                                        "shuffle_chunk_rows": chunk_rows_default()})
                    shuffled = f"shuffle {rate:.1f} GB/s a rank ({rate / ceiling:.0%} of NCCL's)" if rate else \
                        f"{ran_buckets} buckets"
                    log(f"  {shuffled}, one GPU {one_gpu * 1e3:.1f} ms: {one_gpu / best:.2f}x, "
                        f"{total_rows / best / comm.size / 1e9:.2f} G tuples/s a GPU")
                what = f"{rows:,} rows a rank" if workload == "random" else f"TPC-H SF {sf:g}"
                if emit is not None:
                    emit(records[-1])
                if timeline[0]:
                    from ..dist.radix_shuffle import timeline_summary

                    log(f"  shuffle timeline, ms after its start (rank by rank): {timeline}")
                    for r, tl in enumerate(timeline):
                        log(f"  rank {r}: {timeline_summary(tl)}")
                log(f"{what}, {method}, compression {compression}, radix pass in the shuffle "
                    f"{radix_bits or 'no'}: {best * 1e3:,.1f} ms, "
                    f"{total_rows / best / 1e9:.3f} G tuples/s (partition {phases['partition'] * 1e3:.1f}, "
                    f"shuffle {phases['shuffle'] * 1e3:.1f}, local join {phases['local_join'] * 1e3:.1f} ms)")
    if radix_env is None:  # (the caller's setting back)
        os.environ.pop("GPUJOIN_SHUFFLE_RADIX", None)
    else:
        os.environ["GPUJOIN_SHUFFLE_RADIX"] = radix_env
    return records


#: Paper 001 Table 1: the selector's configuration (RLEs, deltas, bit-packing) per shuffled column.
TABLE1 = {"o_orderkey": (2, 1, True), "o_orderpriority": (0, 0, True), "l_orderkey": (2, 1, True)}


def bench_compression(sf: float, log=print, device: str = "cpu", runs: int = 5) -> list[dict]:
    """The cascaded selector on TPC-H's shuffled columns (O_ORDERPRIORITY as int32 codes, as
    paper 001 casts it) beside paper 001's Table 1: scheme, ratio on the whole column, and the
    encode / decode GB/s of this host's NumPy codec (``device="cpu"``) or of nvCOMP's cascaded
    codec on the GPU under the selector's scheme (``device="cuda"``: the column in GPU memory,
    the median of ``runs`` timed with the device synchronized; the HBM copy rate of the same
    column measured beside, as the ceiling)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ..dist import cascaded
    from ..tpch.data import ensure_data

    root = ensure_data(sf, progress=False)
    orders = pq.read_table(root / "orders.parquet", columns=["o_orderkey", "o_orderpriority"])
    lineitem = pq.read_table(root / "lineitem.parquet", columns=["l_orderkey"])
    prio = orders.column("o_orderpriority").combine_chunks().cast(pa.string())
    codes = pc.index_in(prio, value_set=pc.unique(prio).sort()).to_numpy().astype(np.int32)
    cols = {"o_orderkey": orders.column("o_orderkey").to_numpy(), "o_orderpriority": codes,
            "l_orderkey": lineitem.column("l_orderkey").to_numpy()}
    records = []
    for name, col in cols.items():
        t0 = time.perf_counter()
        scheme, sample_ratio = cascaded.select(np, col)
        t1 = time.perf_counter()
        if device == "cuda":
            size, enc_s, dec_s, extra = _nvcomp_round_trip(name, col, scheme, runs)
        else:
            enc = cascaded.encode(np, col, scheme)
            t2 = time.perf_counter()
            back = cascaded.decode(np, enc)
            t3 = time.perf_counter()
            if not np.array_equal(back, col):
                raise AssertionError(f"cascaded {scheme} did not round-trip {name}")
            size, enc_s, dec_s, extra = len(cascaded.to_bytes(enc)), t2 - t1, t3 - t2, {}
        paper = TABLE1[name]
        rec = {"benchmark": "compression", "engine": "nvcomp" if device == "cuda" else "gpujoin",
               "device": device_name(device), "commit": commit(),
               "date": time.strftime("%Y-%m-%d"), "workload": {"tpch_sf": sf, "column": name, "rows": int(col.size),
                                                              "dtype": str(col.dtype)},
               "scheme": str(scheme), "config": [scheme.rle, scheme.delta, scheme.bitpack],
               "paper_config": list(paper), "matches_paper": (scheme.rle, scheme.delta, scheme.bitpack) == paper,
               "ratio": col.nbytes / size, "sample_ratio": sample_ratio, "select_s": t1 - t0,
               "compress_GBps": col.nbytes / enc_s / 1e9, "decompress_GBps": col.nbytes / dec_s / 1e9, **extra}
        records.append(rec)
        log(f"{name}: {scheme} (paper: RLE {paper[0]}, delta {paper[1]}, bitpack {paper[2]}) ratio {rec['ratio']:.2f}, "
            f"encode {rec['compress_GBps']:.2f} GB/s, decode {rec['decompress_GBps']:.2f} GB/s"
            + (f" (HBM copy {extra['copy_GBps']:.0f} GB/s)" if extra else ""))
    return records


def _nvcomp_round_trip(name: str, col: np.ndarray, scheme, runs: int) -> tuple[int, float, float, dict]:
    """(compressed bytes, encode seconds, decode seconds, {"copy_GBps"}) of ``col`` in GPU memory
    by nvCOMP under ``scheme``: medians of ``runs``, the device synchronized around each."""
    import cupy as cp

    from ..dist import cascaded

    d = cp.asarray(col)
    codec = cascaded.DeviceCodec(d.dtype, scheme)
    out = cp.empty_like(d)

    def timed(fn):
        ts = []
        for _ in range(runs + 1):
            cp.cuda.get_current_stream().synchronize()
            t0 = time.perf_counter()
            r = fn()
            cp.cuda.get_current_stream().synchronize()
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts[1:])), r

    enc_s, (buf, _, sizes) = timed(lambda: codec.encode([d]))
    dec_s, _ = timed(lambda: codec.decode([buf[:sizes[0]]], [out]))
    if not bool(cp.array_equal(out, d)):
        raise AssertionError(f"nvCOMP's cascaded codec under {scheme} did not round-trip {name}")
    copy_s, _ = timed(lambda: out.__setitem__(Ellipsis, d))
    return sizes[0], enc_s, dec_s, {"copy_GBps": 2 * d.nbytes / copy_s / 1e9}
