"""A model of paper 001's distributed join at scales this project cannot run (issue 16 item 5).

Per GPU the join partitions its slices, optionally compresses what crosses nodes, exchanges
partitions all-to-all, decompresses and joins locally (paper 001 §3-§5); nothing overlaps (§8).
The phases' times come from per-GPU kernel rates (measured on an H200 by default: see
``H200``) and the links' bandwidths and per-message latency given for the machine modelled:

- partition: ``bytes / shuffle_partition_Bps`` up to 256 destinations (the shuffle's one-launch
  partition by destination, ``device_shuffle._Chunks``), else ``passes(parts) * bytes /
  partition_Bps``, one radix pass per 8 bits;
- all-to-all: ``max(inter-node bytes / inter_Bps, intra-node bytes / intra_Bps) + messages * alpha``
  with ``(1 - 1/P)`` of the local bytes leaving a GPU, the share for peers on other nodes divided
  by the compression ratio (paper 001 §3.3's message counts: P - 1 per GPU for the one-level
  shuffle; N - 1 over the rail, then M - 1 over NVLink for the two-level one, §4);
- (de)compression of the inter-node bytes at ``compress_Bps`` / ``decompress_Bps``;
- local join of the received tuples at ``join_tuples_per_s``.

Throughput is every GPU's input tuples over the slowest (here: every) GPU's time, as the paper
reports it (input tuples per second).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from .device_shuffle import DEST_MAX_PARTS  # the most destinations one launch partitions for


@dataclass(frozen=True)
class Rates:
    """Per-GPU kernel rates (bytes or tuples a second) and link figures of one machine."""

    partition_Bps: float      # one radix-partition pass over tuple bytes (more than 256 ranks)
    shuffle_partition_Bps: float  # the partition by destination, up to 256 ranks: histogram and scatter
    join_tuples_per_s: float  # the in-core join over its input tuples
    compress_Bps: float       # cascaded compression of the bytes sent between nodes
    decompress_Bps: float
    intra_Bps: float          # all-to-all bytes sent per GPU within a node (NVLink)
    inter_Bps: float          # bytes a GPU sends to other nodes (its NIC; 200 Gb/s HDR = 25 GB/s)
    alpha_s: float            # time per message of an all-to-all (latency and setup)


#: Measured here (docs/BENCHMARKS.md, ANCHORS.md; one NVIDIA H200): a 16-bit radix partition of
#: 2^27 8-byte tuples in two 8-bit passes, 3.52 ms (610 GB/s a pass); the shuffle's partition by
#: destination of 2^28 rows of 16 bytes (4.3 GB), histogram 0.48 ms and scatter 3.0 ms, 1.2 TB/s
#: (two H200s, 2026-11-26, `scripts/timeline_shuffle.py 28 40`); PHJ-TR on 2^28 x 2^28
#: tuples of an 8-byte key and payload (paper 001's random workload as a rank of two gets it; 9-bit
#: radix passes, fc91943), 25.8 ms (20.8 G tuples/s; 14.8 on 2^27 x 2^27 of the wide workload
#: before); NCCL all-to-all between two
#: H200s, 337 GB/s sent per GPU at 4 GiB a rank.  Taken from paper 001 Fig. 9: (de)compression
#: (46 ms and 20 ms for the TPC-H slice of one A100, 146.48M x 12 + 585.94M x 8 bytes: 140 and
#: 320 GB/s; nvCOMP's cascaded codec measured 191 and 248 GB/s on L_ORDERKEY at SF 10 on an H100
#: here, docs/BENCHMARKS.md, not yet on an H200); the NIC (200 Gb/s HDR, the paper's; none here);
#: the per-message time (10 us, an assumption: see ``crossover``; ``measured_rates`` measures a
#: job's own).
H200 = Rates(partition_Bps=610e9, shuffle_partition_Bps=1.2e12, join_tuples_per_s=20.8e9, compress_Bps=140e9, decompress_Bps=320e9,
             intra_Bps=337e9, inter_Bps=25e9, alpha_s=10e-6)

RADIX_BITS_PER_PASS = 8


def measured_rates(comm, base: Rates = H200, device: bool = False) -> Rates:
    """``base`` with this job's links measured (a collective of every rank, once a
    communicator): host data over MPI, or (``device``) GPU data over NCCL, the shuffle's
    transport for tables in GPU memory.  ``inter_Bps`` the rail's all-to-all rate (GPU y of
    every host; or GPUJOIN_INTER_HOST_GBPS), ``intra_Bps`` the host's, ``alpha_s`` the time a
    message of an all-to-all of 8-byte messages takes (``Communicator.message_s``).  The kernel
    rates stay ``base``'s; the same on every rank (the slowest rail's and host's links)."""
    rail, host = comm.rail(), comm.host()
    inter = rail.link_GBps(device) * 1e9 if rail.size > 1 else base.inter_Bps
    intra = host.link_GBps(device) * 1e9 if host.size > 1 else base.intra_Bps
    # each rail and each host measured its own links: every rank takes the slowest, so that all
    # make the same choices from them (4 ranks as 2 hosts of 2 on two H200s deadlocked when the
    # rails' rates put the crossover on either side of the rows: one-level on some ranks,
    # two-level on the others)
    inter, intra = (min(v) for v in zip(*comm.allgather((inter, intra))))
    return replace(base, inter_Bps=inter, intra_Bps=intra, alpha_s=comm.message_s(device=device))


def _passes(parts: int) -> int:
    return max(1, math.ceil(math.log2(parts) / RADIX_BITS_PER_PASS)) if parts > 1 else 0


def _partition_s(parts: int, nbytes: float, rates: Rates) -> float:
    """Seconds to group ``nbytes`` of tuples by ``parts`` destinations."""
    if parts <= 1:
        return 0.0
    if parts <= DEST_MAX_PARTS:
        return nbytes / rates.shuffle_partition_Bps
    return _passes(parts) * nbytes / rates.partition_Bps


@dataclass(frozen=True)
class Workload:
    """Rows per GPU of each table and their bytes a row (key and payload), and the compression
    ratio of what crosses nodes (1: none)."""

    left_rows: float
    right_rows: float
    left_bytes: int = 16
    right_bytes: int = 16
    compression: float = 1.0

    @property
    def tuples(self) -> float:
        return self.left_rows + self.right_rows

    @property
    def bytes(self) -> float:
        return self.left_rows * self.left_bytes + self.right_rows * self.right_bytes


#: Paper 001's workloads: the random one (8-byte key and payload, 500M rows a table per GPU;
#: Figs. 6, 9) and TPC-H SF100k lineitem x orders (per GPU 585.94M lineitem keys of 8 bytes and
#: 146.48M orders of an 8-byte key and 4-byte priority; Figs. 8, 9).
RANDOM = Workload(500e6, 500e6)
TPCH = Workload(146.48e6, 585.94e6, 12, 8)


def predict(w: Workload, gpus: int, gpus_per_node: int, rates: Rates = H200, shuffle: str = "one-level") -> dict:
    """Seconds of each phase on every GPU, their total, and the input tuples a second.

    Raises
    ------
    ValueError
        ``gpus`` not a multiple of ``gpus_per_node``, or an unknown ``shuffle``.
    """
    if gpus < 1 or gpus_per_node < 1 or gpus % min(gpus, gpus_per_node):
        raise ValueError(f"--gpus ({gpus}) must be a positive multiple of --gpus-per-node ({gpus_per_node}), "
                         f"or fewer GPUs than a node has")
    if shuffle not in ("one-level", "two-level"):
        raise ValueError(f"unknown shuffle {shuffle!r}; use one-level or two-level")
    P, M = gpus, min(gpus_per_node, gpus)
    N = P // M
    B, c = w.bytes, w.compression
    compressed = c != 1.0
    phases: dict[str, float] = {}
    if shuffle == "one-level":
        inter = B * (P - M) / P  # to GPUs of other nodes (compressed), and to this node's peers
        intra = B * (M - 1) / P
        phases["partition"] = _partition_s(P, B, rates)
        phases["compress"] = inter / rates.compress_Bps if compressed else 0.0
        phases["all-to-all"] = max(inter / c / rates.inter_Bps, intra / rates.intra_Bps) + (P - 1) * rates.alpha_s
        phases["decompress"] = inter / rates.decompress_Bps if compressed else 0.0
    else:
        inter = B * (N - 1) / N  # rail-aligned: to GPU y of every other node
        intra = B * (M - 1) / M  # then within the node over NVLink, uncompressed
        phases["partition"] = _partition_s(N, B, rates) + _partition_s(M, B, rates)
        phases["compress"] = inter / rates.compress_Bps if compressed else 0.0
        phases["all-to-all"] = (inter / c / rates.inter_Bps + (N - 1) * rates.alpha_s if N > 1 else 0.0) + \
            (intra / rates.intra_Bps + (M - 1) * rates.alpha_s if M > 1 else 0.0)
        phases["decompress"] = inter / rates.decompress_Bps if compressed else 0.0
    phases["local join"] = w.tuples / rates.join_tuples_per_s
    total = sum(phases.values())
    return {"phases": phases, "total_s": total, "tuples_per_s": P * w.tuples / total,
            "gb_per_s": P * B / total / 1e9}


def crossover(gpus: int, gpus_per_node: int, rates: Rates = H200, lo: float = 1e3, hi: float = 1e11) -> float:
    """Rows a table per GPU (random workload) above which the one-level shuffle is faster than
    the two-level one (paper 001 Fig. 7: about 25M at 512 GPUs); 0 when the one-level shuffle
    is faster at every size, infinity when the two-level one is."""
    def gap(rows):  # > 0 while the two-level shuffle is the faster
        w = replace(RANDOM, left_rows=rows, right_rows=rows)
        return predict(w, gpus, gpus_per_node, rates, "one-level")["total_s"] - \
            predict(w, gpus, gpus_per_node, rates, "two-level")["total_s"]

    if gap(lo) <= 0:
        return 0.0
    if gap(hi) > 0:
        return math.inf
    for _ in range(80):  # bisection in log space
        mid = math.sqrt(lo * hi)
        if (gap(mid) > 0) == (gap(lo) > 0):
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def alpha_for_crossover(rows: float, gpus: int, gpus_per_node: int, rates: Rates = H200) -> float | None:
    """The per-message time that puts the crossover at ``rows`` (paper 001: 25M at 512 GPUs),
    or None when no time in [1 ns, 10 ms] does."""
    lo, hi = 1e-9, 1e-2
    cross = lambda a: crossover(gpus, gpus_per_node, replace(rates, alpha_s=a))  # noqa: E731
    if not cross(lo) <= rows <= cross(hi):
        return None
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if cross(mid) < rows:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


#: Paper 001's published figures the model is compared with.
PAPER = {
    "fig6_random_1024_one_level_tuples_per_s": 667e9,
    "fig7_crossover_rows_512": 25e6,
    "fig8_tpch_1024_uncompressed_tuples_per_s": 1015e9,
    "fig8_tpch_1024_compressed_tuples_per_s": 1793e9,
    "fig9_all_to_all_uncompressed_s": 0.648,
    "fig9_all_to_all_compressed_s": 0.167,
}


def rates_dict(rates: Rates) -> dict:
    return asdict(rates)
