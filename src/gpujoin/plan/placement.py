"""Placement: in core or out of core on one GPU, and the Triton join's sizes, from the budget.

Pure arithmetic on sizes (no GPU needed), so CI tests it.  The rules follow paper 004 §5.1:
pass 2 keeps about half of the budget for two partition pairs and their in-core join
(|R_i| + |S_i| + |R_j| + |S_j| < C/2), the cache takes what is left, and pass 1's fanout is
the smallest power of two whose average partition pair fits that half.
"""

from __future__ import annotations

from dataclasses import dataclass

#: GPU memory an in-core join takes per byte of its input pair, beyond the input itself: the
#: partitioned copies with the ping-pong buffer of a multi-pass radix partition, or both
#: partitioned sides with the match output (PHJ-TR's ``working_bytes``: 1.5x for 1:1 joins of
#: equal sides, up to 2x when the probe side dominates).  A join that still runs out of GPU
#: memory is joined in blocks by the streaming executor, not failed.
IN_CORE_FACTOR = 2.0
#: Pass 2 holds the pair being joined, the next pair being copied in, and the join's state.
PASS2_FACTOR = 6.0
#: Pass 1's chunk: two upload slots, the partitioned copy and the radix scatter's scratch.
PASS1_FACTOR = 5.0
#: Largest pass-1 chunk (more does not help a DMA, smaller chunks start the pipeline sooner, and
#: its two pinned staging slots are pinned once a process: about 0.4 s a GiB).
MAX_CHUNK_BYTES = 512 << 20
#: Rates of :meth:`Placement.predict`, bytes/s, measured on the GPU machines (docs/BENCHMARKS.md,
#: issues 14 and 15): pinned PCIe 5 each way; the host's copy of pageable input into pinned
#: staging on every thread while the GPU's DMA reads pinned memory (pass 1's condition;
#: ``calibrate.measure_links``' host_in_dma, 20-31 GB/s inside pass 1 on the H100 and H200
#: hosts); its copy out of the pinned slots into fresh pageable columns (the output); the in-core
#: joins of pass 2 over their input bytes (2^30 x 2^30 16-byte tuples: 0.1 s).
PCIE_BPS, HOST_IN_BPS, HOST_OUT_BPS, GPU_JOIN_BPS = 55e9, 30e9, 18e9, 300e9
#: One way between two GPUs of a host (the hybrid join's pass 2 reads the other GPUs' caches):
#: 391-393 GB/s measured between the two NVLink-connected (NV18) H200s of nvidia-h200-x2.
P2P_BPS = 390e9
#: The interpreter's time a partition pair of pass 2 takes (its fetch, the in-core join's CuPy
#: calls and launches, the SUM): the GPUs' threads take turns on one interpreter lock, so every
#: GPU's pairs add up.  Four H200s of one host, 2^31 x 2^31 int32 tuples in 32 pairs: pass 2
#: 0.129 s against 0.05 s of transfers at ed21da9 (4.0 ms a pair); 0.064 s against 0.047 at
#: 91539d6, whose host path batches copies through the driver and scans with scan.cu (at most
#: 2.0 ms a pair; docs/BENCHMARKS.md issue 18).
HOST_PAIR_S = 2.0e-3
#: Partitions a GPU at least, when several share a join: pairs of unequal size still balance.
MULTI_GPU_PARTITIONS = 8
#: Room left for CuPy's rounding, the kernels' counters and the output guess of one block
#: (an eighth of smaller budgets: the tests run with a few MiB).
SLACK = 64 << 20


def slack(budget: int) -> int:
    return min(SLACK, budget // 8)


def links_rate(one: float | None, every: float | None, gpus: int) -> float | None:
    """Bytes/s that ``gpus`` GPUs' links carry at once: that many times one link's rate
    (``one``), at most the rate probed on every GPU of the machine at once (``every``: the host
    shares its memory; four H200s took 174 GB/s in, not 4 x 55.5); None when neither is known."""
    known = [x for x in (one and gpus * one, every if gpus > 1 else None) if x]
    return min(known) if known else None
MAX_PASS1_BITS = 16


@dataclass
class Placement:
    """The planner's answer for one join or group-by of host data on one GPU.

    placement : "in-core" or "out-of-core"
    budget : GPU bytes the operation may use
    bits : pass-1 radix bits (0 in core: one partition)
    chunk_rows : rows a pass-1 chunk holds (of the wider side)
    cache_bytes : partitioned bytes kept in each GPU's memory; the rest spills to pinned host memory
    input_bytes : bytes of both inputs (keys and carried columns)
    gpus : GPUs that share the work (paper 000's hybrid join: each partitions every gpus-th
        chunk into its own cache, then joins its share of the partition pairs); budget, cache
        and chunk are each GPU's
    """

    placement: str
    budget: int
    bits: int
    chunk_rows: int
    cache_bytes: int
    input_bytes: int
    gpus: int = 1

    @property
    def spill_bytes(self) -> int:
        return max(0, self.input_bytes - self.gpus * self.cache_bytes)

    def predict(self, output_bytes: int = 0, rates: dict | None = None) -> dict[str, float]:
        """Seconds of pass 1 and pass 2 on the streaming path: the inputs cross once at the
        slower of the GPUs' PCIe links and the host's staging copy, the spill comes back over
        PCIe, the cached pieces of the other GPUs cross the peer links, the GPUs join each
        partition pair, and ``output_bytes`` leave through the pinned slots into host columns
        (paper 004's transfer-bound model, paper 000's Eqs. 4-5 for the peer reads).  ``rates``
        (bytes/s) overrides this module's: ``pcie`` (one GPU's link), ``host_in`` (the staging
        copy with every GPU's thread copying at once, each GPU's DMA reading pinned memory
        meanwhile: ``measure_links``' host_in_dma; the copy's rate alone predicted 35-49% too
        little on two H200s, whose DMA reads halved it; inf for page-locked input, read in
        place), ``pcie_all`` (every GPU's host-to-device copies at once, bytes/s summed),
        ``host_out``, ``p2p``, ``gpu_join`` (inf: the transfer-only time), and
        ``duplex_1`` / ``duplex_all`` (both directions of the links at once, bytes each way
        summed, one GPU / every GPU together: ``measure_links``' duplex), which bound pass 1
        when its spill leaves while the chunks come in (two H100s, pinned input: pass 1 moved
        70 GB/s both ways on one GPU, 56 a GPU on two, against 52.6 GB/s one way); without
        them that term is left out.  Pass 2 takes at least its pairs' host time
        (``host_pair``, seconds a pair: ``HOST_PAIR_S``; not in the transfer-only time), which
        no GPU count divides: one interpreter lock."""
        r = {"pcie": PCIE_BPS, "host_in": HOST_IN_BPS, "host_out": HOST_OUT_BPS, "p2p": P2P_BPS,
             "gpu_join": GPU_JOIN_BPS, "host_pair": HOST_PAIR_S, **(rates or {})}
        d = self.gpus  # each GPU its own link; the host's copies and memory are shared
        pass1 = self.input_bytes / min(links_rate(r["pcie"], r.get("pcie_all"), d), r["host_in"])
        duplex = links_rate(r.get("duplex_1"), r.get("duplex_all"), d)
        if duplex:  # the spill goes out over the same links while the input comes in
            pass1 = max(pass1, (self.input_bytes + self.spill_bytes) / duplex)
        # a partition's cached pieces are spread over the GPUs: (d - 1)/d of them cross a peer link
        p2p = (self.input_bytes - self.spill_bytes) * (d - 1) / d / (d * r["p2p"])
        pass2 = self.spill_bytes / (d * r["pcie"]) + p2p + self.input_bytes / (d * r["gpu_join"])
        if self.bits and r["gpu_join"] != float("inf"):  # every GPU's pairs in turn on the host
            pass2 = max(pass2, (1 << self.bits) * r["host_pair"])
        return {"pass1": pass1, "pass2": pass2 + output_bytes / min(d * r["pcie"], r["host_out"])}


def plan_placement(rows: list[int], widths: list[int], budget: int, *, bits: int | None = None,
                   cache_bytes: int | None = None, chunk_rows: int | None = None,
                   force_out_of_core: bool = False, gpus: int = 1) -> Placement:
    """Place an operation over relations of ``rows[i]`` rows of ``widths[i]`` bytes each.

    Parameters
    ----------
    rows, widths : per relation (R, S of a join; the one input of a group-by), rows and bytes
        a row (key plus carried columns)
    budget : GPU memory the operation may use, bytes
    bits, cache_bytes, chunk_rows : overrides of the computed pass-1 fanout, cache and chunk
    force_out_of_core : partition even when the whole fits (``algorithm="triton"``)
    gpus : GPUs sharing the work, ``budget`` each (more than 1: always partitioned, into at
        least ``MULTI_GPU_PARTITIONS`` partitions a GPU so that their pairs balance)

    Raises
    ------
    MemoryError
        The operation must be partitioned (it does not fit in core, or is forced out of core or
        onto several GPUs) and the budget cannot hold even one chunk of a few rows and its
        in-core join.
    """
    total = sum(r * w for r, w in zip(rows, widths))
    widest = max(widths) if widths else 1
    half, room = budget // 2, slack(budget)
    least = 8 * PASS2_FACTOR * widest * 1024
    fits = total * IN_CORE_FACTOR + total + room <= budget
    # (the working set bounds the streaming path only: rows that fit in core run there under any
    # budget; a group-by of 2 rows under 4 MB raised this before)
    if budget < least and (force_out_of_core or not fits or gpus > 1):
        raise MemoryError(f"a GPU memory budget of {budget / 2**20:.2f} MiB cannot hold the out-of-core working "
                          f"set of rows of {widest} bytes (at least {least / 2**20:.2f} MiB); raise memory_limit")
    if bits is None:
        bits = 0
        if force_out_of_core or not fits or gpus > 1:
            per_partition = max(1, (half - room) // PASS2_FACTOR)
            while bits < MAX_PASS1_BITS and (total >> bits) > per_partition:
                bits += 1
            least_bits = 1 if gpus == 1 else (MULTI_GPU_PARTITIONS * gpus - 1).bit_length()
            bits = min(MAX_PASS1_BITS, max(bits, least_bits))
    placement = "in-core" if bits == 0 else "out-of-core"
    if chunk_rows is None:
        chunk_rows = max(1024, min(MAX_CHUNK_BYTES, int((half - room) // PASS1_FACTOR)) // widest)
    if cache_bytes is None:
        cache_bytes = total if bits == 0 else max(0, budget - half - room)
    cache_bytes = max(0, min(int(cache_bytes), total))
    return Placement(placement, budget, bits, int(chunk_rows), cache_bytes, total, gpus)


def cached_chunks(nchunks: int, chunk_bytes: list[int], cache_bytes: int) -> list[bool]:
    """Which pass-1 chunks stay in GPU memory: interleaved with the spilled ones in proportion
    to the cache's share (paper 004 §5.3, Fig. 12: the link stays evenly busy in pass 2),
    never more bytes than ``cache_bytes``."""
    total = sum(chunk_bytes)
    if total == 0:
        return [True] * nchunks
    frac = min(1.0, cache_bytes / total)
    out, used = [], 0
    for c in range(nchunks):
        want = int((c + 1) * frac) > int(c * frac) or frac >= 1.0
        take = want and used + chunk_bytes[c] <= cache_bytes
        used += chunk_bytes[c] if take else 0
        out.append(take)
    return out
