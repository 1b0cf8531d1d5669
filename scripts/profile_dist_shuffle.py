"""Under mpirun: where the NCCL shuffle's time goes, one step at a time (each synchronized):
destinations, the radix partition by rank, the NCCL group, the self-copy; 2^LOG2N rows a rank
of int64 key + int64 payload."""
import sys
import time

import cupy as cp
import numpy as np

from gpujoin.bench.dist import random_slice
from gpujoin.dist import Communicator
from gpujoin.dist import device_shuffle as ds
from gpujoin.dist.shuffle import SEED_FIRST


def timed(comm, fn, reps=3):
    best = None
    for _ in range(reps):
        comm.barrier()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        out = fn()
        cp.cuda.Device().synchronize()
        dt = max(comm.allgather(time.perf_counter() - t0))
        best = dt if best is None else min(best, dt)
    return best, out


comm = Communicator.from_mpi()
n = 1 << int(sys.argv[1])
build, probe, _ = random_slice(n, comm.rank, comm.size, xp=cp)
if sys.argv[2:3] == ["variants"]:
    # the pipelined shuffle of both tables under its knobs, taking turns (min of 5 each)
    import itertools
    import os

    dests = [ds.destinations([t["k"]], SEED_FIRST, comm.size) for t in (build, probe)]
    sent = sum(int(t.num_rows) * 16 for t in (build, probe)) * (comm.size - 1) // comm.size
    # env lists: BLOCKS (blocks an SM), SIDE (side streams), EARLY (the first chunk partitioned
    # during the count exchange), CHUNKS (log2 rows)
    env = lambda name, default: os.environ.get(name, default).split(",")  # noqa: E731
    knobs = list(itertools.product(env("BLOCKS", "4"), env("SIDE", "1,2"), env("EARLY", "0,1"),
                                   [int(c) for c in env("CHUNKS", "26")]))
    ceiling = comm.measure_alltoall_GBps(4 << 30, 5, device=True)
    if comm.rank == 0:
        print(f"NCCL all-to-all of 4 GiB a rank: {ceiling:.0f} GB/s out of a rank", flush=True)
    best = {}
    for _ in range(5):
        for knob in knobs:
            b, side, early, c = knob
            os.environ.update(GPUJOIN_SHUFFLE_SIDE_STREAMS=side, GPUJOIN_SHUFFLE_EARLY=early)
            ds.DEST_BLOCKS_PER_SM = int(b)
            t, _ = timed(comm, lambda: ds.exchange_many([build, probe], dests, comm, chunk_rows=1 << c), reps=1)
            best[knob] = min(t, best.get(knob, t))
    if comm.rank == 0:
        for (b, side, early, c), t in sorted(best.items(), key=lambda x: x[1]):
            print(f"blocks/SM {b} side streams {side} early {early} chunks 2^{c}: "
                  f"{t * 1e3:.2f} ms ({sent / t / 1e9:.0f} GB/s out of a rank, {t and sent / t / 1e9 / ceiling:.0%})",
                  flush=True)
    sys.exit(0)
cols = [build["k"], build["build_id"]]
t, dest = timed(comm, lambda: ds.destinations([build["k"]], SEED_FIRST, comm.size))
log = []
log.append(f"destinations {t * 1e3:.2f} ms")
t, parted = timed(comm, lambda: ds._partition(cols, dest, comm.size))
log.append(f"partition {t * 1e3:.2f} ms ({sum(c.nbytes for c in cols) / t / 1e9:.0f} GB/s of columns)")
send = cp.asnumpy(cp.bincount(dest, minlength=comm.size)).astype(np.int64)
recv = comm.alltoall_counts(send)
t, _ = timed(comm, lambda: comm.alltoall_counts(send))
log.append(f"count exchange {t * 1e3:.3f} ms")
t, got = timed(comm, lambda: comm.alltoallv_device(parted, send, recv))
sent = int(send.sum() - send[comm.rank]) * 16
log.append(f"alltoallv_device {t * 1e3:.2f} ms ({sent / t / 1e9:.0f} GB/s out of a rank)")
t, _ = timed(comm, lambda: comm.alltoallv_device(parted[:1], send, recv))
log.append(f"alltoallv_device, key column only {t * 1e3:.2f} ms ({sent / 2 / t / 1e9:.0f} GB/s out of a rank)")
t, _ = timed(comm, lambda: [comm.alltoallv_device([c], send, recv) for c in parted])
log.append(f"alltoallv_device, one group a column {t * 1e3:.2f} ms ({sent / t / 1e9:.0f} GB/s out of a rank)")
flat = cp.concatenate([c.view(cp.uint8) for c in parted])
t, _ = timed(comm, lambda: comm.alltoallv_device([flat], np.array([flat.size // 2] * 2), np.array([flat.size // 2] * 2)))
log.append(f"alltoallv_device, one byte buffer of the same size, halves {t * 1e3:.2f} ms "
           f"({flat.size / 2 / t / 1e9:.0f} GB/s out of a rank)")
side = cp.cuda.Stream(non_blocking=True)
t, _ = timed(comm, lambda: comm.alltoallv_device(parted, send, recv, self_stream=side))
log.append(f"alltoallv_device, self-copy beside {t * 1e3:.2f} ms ({sent / t / 1e9:.0f} GB/s out of a rank)")
t, _ = timed(comm, lambda: [c.copy() for c in parted])
log.append(f"copy of the partitioned columns {t * 1e3:.2f} ms")
t, _ = timed(comm, lambda: ds.exchange(build, dest, comm))
log.append(f"exchange (one table) {t * 1e3:.2f} ms ({sent / t / 1e9:.0f} GB/s)")
pdest = ds.destinations([probe["k"]], SEED_FIRST, comm.size)
for log2c in (23, 24, 25, 26, 40):
    t, _ = timed(comm, lambda: ds.exchange_many([build, probe], [dest, pdest], comm, chunk_rows=1 << log2c))
    log.append(f"exchange_many (two tables), chunks of 2^{log2c} rows {t * 1e3:.2f} ms ({2 * sent / t / 1e9:.0f} GB/s)")
if comm.rank == 0:
    print("\n".join(log), flush=True)
