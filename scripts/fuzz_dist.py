"""Randomized distributed joins and group-bys (paper 001) against the one-process CPU engine,
under ``mpiexec``: rank 0 draws each case from a seed (``fuzz_device``'s tables: skew, heavy and
all-equal keys, int64 extremes, nulls, string and composite keys), which rank holds each row
(some ranks none), the join type, the shuffle (one- or two-level) and the compression ("none",
"cascaded": every message through paper 001's codec, "auto"); every rank joins or groups its rows
(``gpujoin.dist.join`` / ``gpujoin.dist.group_by``), and rank 0 checks the gathered result
exactly.  Prints each failing seed; a failure inside a collective ends every rank.

With ``--device-tables`` (GPU ranks) half the cases give each rank its rows as a DeviceTable
(strings dictionary-encoded on each rank apart; rows with a null key left out in odd seeds'
cases, kept in even ones'): the rows are hashed on the GPUs and shuffled over NCCL (or through the host where
ranks share a GPU), the local joins and group-bys run in GPU memory.

    mpiexec -n 4 python scripts/fuzz_dist.py [--seconds 120] [--first-seed 0] [--ranks-per-node 2]
        [--max-log2 13] [--device cpu|cuda] [--device-tables]
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


def _args():
    import argparse

    ap = argparse.ArgumentParser(description="Randomized distributed joins and group-bys against the "
                                             "one-process CPU engine (run under mpiexec).")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--ranks-per-node", type=int, default=None, help="play the ranks as hosts of this many")
    ap.add_argument("--max-log2", type=float, default=13.0, help="the largest tables' log2 rows (default 13)")
    ap.add_argument("--device", default="cpu", help="where each rank joins host tables: cpu (default) or cuda")
    ap.add_argument("--device-tables", action="store_true",
                    help="half the cases' rows as DeviceTables on each rank's GPU (shuffled over NCCL)")
    return ap.parse_args()


def _device_form(what, tables, on) -> bool:
    """Whether the case runs as DeviceTables: the one-process device join or
    group-by takes it (composite keys must pack into 63 bits, a documented ValueError else;
    every rank's rows are a subset, so then each rank's fit too)."""
    from gpujoin.cuda.table import DeviceTable

    dev = [DeviceTable.from_arrow(t) for t in tables]
    try:
        if what == "join":
            gpujoin.join(dev[0], dev[1], on)
        else:
            gpujoin.group_by(dev[0], on).agg(n=(on[0], "count"))
    except ValueError as e:
        if "63 bits" in str(e) or "cannot be packed" in str(e):
            return False
        raise
    return True


def draw(seed: int, ranks: int, max_log2: float, device_tables: bool = False):
    """(what, tables, on or by, how, shuffle, compression, owners, device form) of case ``seed``,
    or None."""
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
    device = device_tables and rng.random() < 0.5
    if device:  # null keys kept in even seeds' (they match nothing, a group of their own), left out in odd ones'
        names = [on] if isinstance(on, str) else on
        if seed % 2:
            tables = [t.filter(np.logical_and.reduce([np.asarray(t[n].is_valid()) for n in names])) for t in tables]
        device = _device_form(what, tables, on)
    empty = int(rng.integers(0, ranks))  # a rank without rows still takes part in every exchange
    owners = [np.where(rng.random(t.num_rows) < 0.3, empty if empty else 0,
                       rng.integers(0, ranks, t.num_rows)) for t in tables]
    owners = [np.where(o == empty, 0, o) if ranks > 1 and rng.random() < 0.5 else o for o in owners]
    # PHJ's radix bits named in some device joins: where the tables take it (one int key of one
    # dtype, no validity masks, other columns of one width, one level, no compression), the
    # shuffle's pass is then the local join's first (dist.radix_shuffle; the planner's own bits
    # at these sizes save no pass, so the fuzz would never reach it)
    method = str(rng.choice(["one-level", "two-level"]))
    compression = str(rng.choice(["none", "none", "cascaded", "auto"]))
    bits = int(rng.choice([0, 0, 10, 12])) if device and what == "join" else 0
    if bits:  # (the radix shuffle is one level, uncompressed: the other cases cover the rest)
        method, compression = "one-level", "none"
    return what, tables, on, how, method, compression, owners, device, bits


def run(comm, case, device, stats=None):
    what, tables, on, how, method, compression, owners, device_form, bits = case
    mine = [t.take(np.flatnonzero(o == comm.rank)) for t, o in zip(tables, owners)]
    if device_form:
        from gpujoin.cuda.table import DeviceTable

        mine, device = [DeviceTable.from_arrow(t) for t in mine], "cuda"
    if what == "join":
        out = join(mine[0], mine[1], on, how=how, comm=comm, shuffle=method, compression=compression, device=device,
                   stats=stats, **({"radix_bits": bits} if bits else {}))
    else:
        out = group_by(mine[0], on, comm=comm, shuffle=method, compression=compression, device=device).agg(**AGGS)
    return gathered(comm, out.to_arrow() if hasattr(out, "to_arrow") else out)


def main():
    args = _args()
    comm = Communicator.from_mpi(ranks_per_node=args.ranks_per_node)
    device = args.device
    if comm.rank:
        while (case := comm.comm.bcast(None)) is not None:
            run(comm, case, device)
        comm.barrier()
        return
    seconds, seed, max_log2 = args.seconds, args.first_seed, args.max_log2
    end, done, failed = time.perf_counter() + seconds, {"join": 0, "group-by": 0}, []
    forms = {"host": 0, "device": 0, "radix bits named": 0, "radix shuffle": 0}
    try:
        while time.perf_counter() < end:
            case = draw(seed, comm.size, max_log2, args.device_tables)
            if case is not None:
                comm.comm.bcast(case)
                job: dict = {}
                got = run(comm, case, device, job)
                what, tables, on, how = case[:4]
                want = (gpujoin.join(tables[0], tables[1], on, how=how, device="cpu") if what == "join" else
                        gpujoin.group_by(tables[0], on, device="cpu").agg(**AGGS))
                diff = first_difference(got, want, rel=1e-9)
                done[what] += 1
                forms["device" if case[7] else "host"] += 1
                forms["radix bits named"] += bool(case[8])
                forms["radix shuffle"] += bool(job.get("shuffle_radix_bits"))  # (its pass the local join's first)
                if diff is not None:
                    failed.append(seed)
                    print(f"FAIL seed {seed}: {what} rows {[t.num_rows for t in tables]} how={how} "
                          f"shuffle={case[4]} compression={case[5]} device tables={case[7]} radix_bits={case[8]}\n"
                          f"  {diff[:1200]}",
                          flush=True)
            seed += 1
    finally:
        comm.comm.bcast(None)
    comm.barrier()
    print(f"fuzz_dist: {comm.size} ranks ({comm.nodes} hosts), {done['join']} joins, {done['group-by']} group-bys "
          f"({forms['device']} of them as DeviceTables, {forms['radix bits named']} with PHJ's radix bits named, "
          f"{forms['radix shuffle']} through the radix shuffle), seeds up to {seed - 1}; {len(failed)} failed: "
          f"{failed[:30]}", flush=True)


if __name__ == "__main__":
    run_or_abort(main)
