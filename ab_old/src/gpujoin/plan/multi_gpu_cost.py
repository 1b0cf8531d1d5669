"""Paper 000's transfer-cost models (Eqs. 1-7) of its multi-GPU joins of host-resident tables.

Each model counts the bytes an algorithm moves between host and GPUs (and between GPUs) and
turns them into seconds with the links' bandwidths; in-core compute is left out, as in the
paper (§3.4: transfers dominate out of core).  Sizes are in bytes, bandwidths in bytes a second.

- ``nl`` (block nested loop, §3.1): R is split into M chunks; every R chunk meets all of S.
  Without peer-to-peer copies S is read from the host once per R chunk (Eq. 1: |R| + M|S|); with
  the ring, each S chunk is read from the host by one GPU and passed to the D - 1 others over
  peer links (Eq. 2: |R| + (M/D)|S| host bytes, M|S|(D - 1)/D peer bytes); with the D peer
  links working at once the peer term counts 1/D of that (Eq. 3).
- ``gsm`` (global sort-merge, §3.2): run generation reads and writes both tables (2(|R| + |S|)
  at the duplex rate), log2 M and log2 N merge rounds each read and write them again, and the
  final merge join reads them once (Eqs. 4-5).  Rounds of pairwise merges: ⌈log2 M⌉ where M is
  not a power of two (the paper's are).  Beyond the paper: each phase (the runs, each merge
  round, both relations' tasks together) is a pipeline on each GPU whose first upload and last
  download have nothing beside them on the link's other direction (its fill and drain), a
  term of a run's bytes a phase (:func:`pipeline_fill_seconds`).
- ``hybrid`` (radix partition, then per-partition sort-merge, §3.3): the partition pass reads
  and writes both tables (duplex), the join reads them once (Eqs. 6-7).

Where this project's hardware differs from the paper's one shared PCIe 3 tree: each GPU of an
H200 host has its own PCIe 5 x16 link, so the host term divides by D when the host's memory keeps
up (``host_links=D``); the paper's single tree is ``host_links=1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .placement import links_rate

ALGORITHMS = ("nl", "gsm", "hybrid")


@dataclass(frozen=True)
class Links:
    """Bandwidths of one machine, bytes a second: ``h2d`` one way between host and one GPU,
    ``duplex`` both ways at once (the paper measured 12 and 22 GB/s on PCIe 3), ``p2p`` one way
    between two GPUs; ``host_links`` how many GPUs reach the host at ``h2d`` at once;
    ``host_in`` the host's copy of pageable input into pinned staging buffers, all GPUs
    together (None: the inputs are page-locked, as paper 000's are, and the DMA reads them)."""

    h2d: float
    duplex: float
    p2p: float
    host_links: int = 1
    host_in: float | None = None


#: An H200 host (ANCHORS.md, docs/BENCHMARKS.md): pinned PCIe 5 55.3 GB/s each way, both ways at
#: once about twice that (the copy-out and copy-in streams overlapped at full rate), a device-to-
#: peer copy over NVLink 396 GB/s; each GPU on a link of its own.
H200_HOST = Links(h2d=55.3e9, duplex=110e9, p2p=396e9, host_links=8)


def measured_links(rates: dict, gpus: int) -> Links:
    """``Links`` of ``gpus`` GPUs from measured rates (bytes a second, as
    ``calibrate.link_rates`` and the benchmarks give them), the H200 host's where one is absent:
    ``pcie`` one GPU's host-to-device rate (``pcie_all`` every GPU's at once, shared out among
    several), ``p2p``, ``duplex_1`` / ``duplex_all`` both directions of one link / of every GPU's
    at once (shared out; twice the one-way rate without them), ``host_in`` the staging copy of
    pageable input, all GPUs together (absent or inf: the input is page-locked).  A GPU's share
    of an all-at-once rate is at most its own link's: the probes run on every GPU of the
    machine, and fewer GPUs split the same aggregate among fewer (on four H200s, 174 GB/s
    host-to-device over 2 GPUs would have been 87 GB/s a 55 GB/s link)."""
    d = max(1, gpus)
    links = H200_HOST
    pcie = links_rate(rates.get("pcie"), rates.get("pcie_all"), d)
    if pcie:
        links = replace(links, h2d=pcie / d, duplex=2 * pcie / d)
    if "p2p" in rates:
        links = replace(links, p2p=rates["p2p"])
    duplex = links_rate(rates.get("duplex_1"), rates.get("duplex_all"), d)
    if duplex:
        links = replace(links, duplex=duplex / d)
    if rates.get("host_in") and math.isfinite(rates["host_in"]):
        links = replace(links, host_in=rates["host_in"])
    return links


def transfer_bytes(algorithm: str, r: float, s: float, m: int, n: int, gpus: int, p2p: bool = True) -> dict:
    """Bytes moved by ``algorithm`` on |R| = ``r`` and |S| = ``s`` bytes split into ``m`` and ``n``
    chunks on ``gpus`` GPUs: {"host": one-way host bytes, "duplex": host bytes moved both ways at
    once, "p2p": peer bytes} (paper 000 Eqs. 1, 2, 4, 6).

    Raises
    ------
    ValueError
        An unknown algorithm, or fewer than one chunk or GPU.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown multi-GPU join {algorithm!r}; valid: {list(ALGORITHMS)}")
    if min(m, n, gpus) < 1:
        raise ValueError("chunk counts and GPUs must be at least 1")
    d = gpus
    if algorithm == "nl":
        if not p2p or d == 1:
            return {"host": r + m * s, "duplex": 0.0, "p2p": 0.0}  # Eq. 1
        return {"host": r + (m / d) * s, "duplex": 0.0, "p2p": m * s * (d - 1) / d}  # Eq. 2
    if algorithm == "gsm":
        merge = r * math.ceil(math.log2(m)) + s * math.ceil(math.log2(n))  # pairwise rounds
        return {"host": r + s, "duplex": 2 * (r + s) + 2 * merge, "p2p": 0.0}  # Eq. 4
    return {"host": r + s, "duplex": 2 * (r + s), "p2p": 0.0}  # Eq. 6


def transfer_seconds(algorithm: str, r: float, s: float, m: int, n: int, gpus: int, links: Links,
                     p2p: bool = True) -> float:
    """Seconds of ``transfer_bytes`` over ``links`` (paper 000 Eqs. 3, 5, 7): duplex bytes at the
    duplex rate (a read and a write overlap: half the bytes each way), one-way bytes at ``h2d``,
    both over min(gpus, host_links) host links; peer bytes over the D links of the ring at once.

    Pageable input (``links.host_in``): the first read of each input byte is bounded by the
    host's staging copy as well, not by the links alone (a term the paper, with pinned inputs,
    has no need of): ``nl``'s host reads are all of the input, GSM's run generation reads it
    once while writing the runs back."""
    b = transfer_bytes(algorithm, r, s, m, n, gpus, p2p)
    links_used = max(1, min(gpus, links.host_links))
    one_way, both = links.h2d * links_used, links.duplex * links_used
    if links.host_in and algorithm == "nl":
        one_way = min(one_way, links.host_in)
    host = b["host"] / one_way + b["duplex"] / both
    if links.host_in and algorithm == "gsm":  # run generation: max(read through staging, read + write)
        host += max(0.0, (r + s) / links.host_in - 2 * (r + s) / both)
    if algorithm == "gsm":
        host += pipeline_fill_seconds(r, s, m, n, gpus, links)
    peer = b["p2p"] / (links.p2p * gpus) if b["p2p"] else 0.0  # Eq. 3: D links in parallel
    return host + peer


def pipeline_fill_seconds(r: float, s: float, m: int, n: int, gpus: int, links: Links) -> float:
    """GSM's pipeline fill and drain (not in paper 000's Eqs. 4-5): in each phase a GPU uploads
    a task's rows and downloads them sorted or merged, task after task, the next upload beside
    the last download; its first upload and last download run alone, at the one-way rate, where
    Eq. 5 counts them at the duplex rate.  Tasks: a run (|R|/m or |S|/n bytes, the larger) in the
    first phase, half a run in each of the max(⌈log2 m⌉, ⌈log2 n⌉) merge rounds (both relations'
    in the same phases, as ``dist.gsm`` runs them); at most a GPU's share of the phase's bytes."""
    share = (r + s) / max(1, gpus)  # one way, a GPU, a phase
    run = max(r / max(1, m), s / max(1, n))
    rounds = max(math.ceil(math.log2(max(m, 1))), math.ceil(math.log2(max(n, 1))))
    alone = 1 / links.h2d - 1 / links.duplex  # a byte each way alone rather than beside the other
    return 2 * alone * (min(run, share) + rounds * min(run / 2, share))


def choose(r: float, s: float, m: int, n: int, gpus: int, links: Links, algorithms=ALGORITHMS,
           equi: bool = True) -> tuple[str, dict[str, float]]:
    """The algorithm with the least predicted transfer time, and every candidate's prediction;
    ``hybrid`` only answers equi-joins (and integer ranges), ``nl`` any θ."""
    cands = [a for a in algorithms if equi or a != "hybrid"]
    pred = {a: transfer_seconds(a, r, s, m, n, gpus, links) for a in cands}
    return min(pred, key=pred.get), pred


def nl_ring_gain(gpus: int) -> float:
    """Paper 000 §3.1's improvement of the ring over host reads, |R| ignored: D^2 / (2D - 1)."""
    return gpus * gpus / (2 * gpus - 1)
