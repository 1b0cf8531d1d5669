"""Randomized distributed joins and group-bys (paper 001) against the one-process CPU engine,
under ``mpiexec``: rank 0 draws each case from a seed (``fuzz_device``'s tables: skew, heavy and
all-equal keys, int64 extremes, nulls, string and composite keys), which rank holds each row
(some ranks none), the join type, the shuffle (one- or two-level) and the compression ("none",
"cascaded": every message through paper 001's codec, "auto"); every rank joins or groups its rows
(``gpujoin.dist.join`` / ``gpujoin.dist.group_by``), and rank 0 checks the gathered result
exactly.  Prints each failing seed; a failure inside a collective ends every rank.

    mpiexec -n 4 python scripts/fuzz_dist.py [--seconds 120] [--first-seed 0] [--ranks-per-node 2]
        [--max-log2 13] [--device cpu|cuda]
"""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import gpujoin  # noqa: E402
from gpujoin.dist import Communicator, group_by, join  # noqa: E402
from gpujoin.testing import first_difference  # noqa: E402
from fuzz_device import AGGS, group_by_case, join_case  # noqa: E402
from mpi_dist_check import gathered, run_or_abort  # noqa: E402


def _arg(name: str, default, cast=int):
    return cast(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def draw(seed: int, ranks: int, max_log2: float):
    """(what, tables, on or by, how, shuffle, compression, owners) of case ``seed``, or None."""
    rng = np.random.default_rng(seed + 7)
    what = "join" if rng.random() < 0.6 else "group-by"
    if what == "join":
        case = join_case(seed, max_log2)
        if case is None:
            return None
        tables, on, how = case[0], case[1], case[2]
    else:
        t, on, *_ = group_by_case(seed, max_log2)
        tables, how = [t], None
    empty = int(rng.integers(0, ranks))  # a rank without rows still takes part in every exchange
    owners = [np.where(rng.random(t.num_rows) < 0.3, empty if empty else 0,
                       rng.integers(0, ranks, t.num_rows)) for t in tables]
    owners = [np.where(o == empty, 0, o) if ranks > 1 and rng.random() < 0.5 else o for o in owners]
    return (what, tables, on, how, str(rng.choice(["one-level", "two-level"])),
            str(rng.choice(["none", "none", "cascaded", "auto"])), owners)


def run(comm, case, device):
    what, tables, on, how, method, compression, owners = case
    mine = [t.take(np.flatnonzero(o == comm.rank)) for t, o in zip(tables, owners)]
    if what == "join":
        out = join(mine[0], mine[1], on, how=how, comm=comm, shuffle=method, compression=compression, device=device)
    else:
        out = group_by(mine[0], on, comm=comm, shuffle=method, compression=compression, device=device).agg(**AGGS)
    return gathered(comm, out)


def main():
    comm = Communicator.from_mpi(ranks_per_node=_arg("--ranks-per-node", None))
    device = _arg("--device", "cpu", str)
    if comm.rank:
        while (case := comm.comm.bcast(None)) is not None:
            run(comm, case, device)
        comm.barrier()
        return
    seconds, seed = _arg("--seconds", 120.0, float), _arg("--first-seed", 0)
    max_log2 = _arg("--max-log2", 13.0, float)
    end, done, failed = time.perf_counter() + seconds, {"join": 0, "group-by": 0}, []
    try:
        while time.perf_counter() < end:
            case = draw(seed, comm.size, max_log2)
            if case is not None:
                comm.comm.bcast(case)
                got = run(comm, case, device)
                what, tables, on, how = case[:4]
                want = (gpujoin.join(tables[0], tables[1], on, how=how, device="cpu") if what == "join" else
                        gpujoin.group_by(tables[0], on, device="cpu").agg(**AGGS))
                diff = first_difference(got, want, rel=1e-9)
                done[what] += 1
                if diff is not None:
                    failed.append(seed)
                    print(f"FAIL seed {seed}: {what} rows {[t.num_rows for t in tables]} how={how} "
                          f"shuffle={case[4]} compression={case[5]}\n  {diff[:1200]}", flush=True)
            seed += 1
    finally:
        comm.comm.bcast(None)
    comm.barrier()
    print(f"fuzz_dist: {comm.size} ranks ({comm.nodes} hosts), {done['join']} joins, {done['group-by']} group-bys, "
          f"seeds up to {seed - 1}; {len(failed)} failed: {failed[:30]}", flush=True)


if __name__ == "__main__":
    run_or_abort(main)
