"""Paper 000 §3.1's block nested-loop join on D GPUs: the peer-to-peer ring's schedule.

R is cut into M chunks and S into N chunks.  GPUs take R chunks D at a time (GPU g the g-th of
the group); for each stage, every GPU reads a different S chunk from host memory and joins it with
its R chunk, then D - 1 ring rounds pass each S chunk to the next GPU, (g + 1) mod D, which joins
it in turn; after a stage every GPU of the group has met the stage's D S chunks.  S crosses PCIe
once per R group (M/D times, not M), and the peer links carry the rest (Eqs. 2-3).  The paper's
Algorithm 1 has confused indices; this follows its prose.  When M or N is not a multiple of D,
the last group or stage has fewer chunks: only GPUs that hold an R chunk join, and a stage with
fewer S chunks than GPUs passes empty slots round the ring (no transfer, no join).

:func:`ring_schedule` is the schedule alone, so that tests can check it covers every chunk pair
once; the executor that moves chunks through the streaming path and joins them with the in-core
algorithms (issue 15) follows it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """What GPU ``gpu`` does in one round: join R chunk ``r`` with S chunk ``s``, which came from
    the host (``source`` None) or from GPU ``source`` over a peer link."""

    gpu: int
    r: int
    s: int
    source: int | None


def ring_schedule(m: int, n: int, gpus: int) -> list[list[Step]]:
    """The rounds of the ring join of M R chunks and N S chunks on ``gpus`` GPUs: each round a
    list of the steps the GPUs run at once (at most one each).

    Raises
    ------
    ValueError
        Fewer than one chunk or GPU.
    """
    if min(m, n, gpus) < 1:
        raise ValueError(f"the ring needs at least one R chunk, S chunk and GPU, got {m}, {n}, {gpus}")
    rounds: list[list[Step]] = []
    for base in range(0, m, gpus):
        active = min(gpus, m - base)  # GPUs holding an R chunk in this group
        for first in range(0, n, active):
            held = [first + g if first + g < n else None for g in range(active)]  # read from the host
            rounds.append([Step(g, base + g, held[g], None) for g in range(active) if held[g] is not None])
            for _ in range(active - 1):
                held = [held[(g - 1) % active] for g in range(active)]  # from the previous GPU
                rounds.append([Step(g, base + g, held[g], (g - 1) % active)
                               for g in range(active) if held[g] is not None])
    return [r for r in rounds if r]
