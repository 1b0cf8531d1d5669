"""Under mpirun: one pipelined device shuffle of two tables (2^LOG2N rows a rank, int64 key +
int64 payload each, chunks of 2^LOG2C rows) after a warm-up, its kernels and copies recorded by
CUPTI (PyTorch's profiler, which sees CuPy's and NCCL's kernels): when each ran on which stream
(ms from the first), so that one sees whether the chunks' partitions and NCCL groups overlap.
A third argument RADIX_BITS times the shuffle whose pass is the local PHJ's first
(``radix_shuffle.exchange_partitioned``, the first table finished on the way) instead: how long
each chunk's scatter takes beside NCCL's kernels, and alone under GPUJOIN_SHUFFLE_OVERLAP=0.
A fourth argument "join" traces the whole ``gpujoin.dist.join`` of the two tables instead (that
shuffle, then the local join), and lists where no kernel or copy ran on the GPU (the host's gaps)
and the local join's host steps (``host`` lines: when the host was in them, on the GPU's clock);
"single" traces rank 0's one-GPU ``gpujoin.join`` of every rank's rows instead (``auto``: what the
job is measured against, bench dist's baseline; RADIX_BITS ignored), kernel by kernel.

    mpirun -n 2 python3 scripts/timeline_shuffle.py LOG2N [LOG2C [RADIX_BITS [join|single]]]"""
import json
import os
import sys
import tempfile
import time

import cupy as cp
import torch.profiler as tp

from gpujoin.bench.dist import random_slice
from gpujoin.dist import Communicator
from gpujoin.dist import comm as comm_module
from gpujoin.dist import device_shuffle as ds
from gpujoin.dist.shuffle import SEED_FIRST

comm = Communicator.from_mpi()
n = 1 << int(sys.argv[1])
chunk = 1 << int(sys.argv[2]) if len(sys.argv) > 2 else ds.CHUNK_ROWS
radix_bits = int(sys.argv[3]) if len(sys.argv) > 3 else None
whole = len(sys.argv) > 4 and sys.argv[4] == "join"
single = len(sys.argv) > 4 and sys.argv[4] == "single"
if not single:
    build, probe, _ = random_slice(n, comm.rank, comm.size, xp=cp)
if single:  # (rank 0 joins every rank's rows alone, as bench dist's baseline; the others trace nothing)
    import gpujoin

    if comm.rank == 0:
        build, probe, _ = random_slice(n, 0, comm.size, ranks=range(comm.size), xp=cp)

    def shuffle():
        return gpujoin.join(probe, build, "k", device="cuda") if comm.rank == 0 else None
elif whole:
    from gpujoin.dist import join

    os.environ["GPUJOIN_SHUFFLE_CHUNK_ROWS"] = str(chunk)

    def shuffle():
        return join(probe, build, "k", comm=comm, shuffle="one-level", radix_bits=radix_bits)
elif radix_bits:
    from gpujoin.dist import radix_shuffle

    def shuffle():
        return radix_shuffle.exchange_partitioned([build, probe], ["k", "k"], comm, radix_bits, chunk_rows=chunk)
else:
    dests = [ds.destinations([t["k"]], SEED_FIRST, comm.size) for t in (build, probe)]

    def shuffle():
        return ds.exchange_many([build, probe], dests, comm, chunk_rows=chunk)
for _ in range(2):
    shuffle()
host = []  # (what, start, seconds) of each partition launch and NCCL post, on the host


def timed(what, fn):
    def call(*a, **k):
        t = time.perf_counter()
        r = fn(*a, **k)
        host.append((what, t, time.perf_counter() - t))
        return r
    return call


ds._Chunks.place = timed("place", ds._Chunks.place)
Communicator.post_device = timed("post", Communicator.post_device)
# the host's steps before the first byte moves: each table's histogram launch, the early chunk,
# the counts to the host, the counts' allgather, the layouts, the scatters' addresses
ds._Chunks.__init__ = timed("histogram", ds._Chunks.__init__)
ds._Chunks.early = timed("early", ds._Chunks.early)
ds._Chunks.prepare = timed("prepare", ds._Chunks.prepare)
cp.asnumpy = timed("asnumpy", cp.asnumpy)
Communicator.allgather = timed("allgather", Communicator.allgather)
comm_module.DeviceLayout.__init__ = timed("layout", comm_module.DeviceLayout.__init__)
if whole or single:  # the local join's host steps, as ranges in the GPU's trace ("user_annotation")
    import gpujoin.cuda.join as join_module
    from gpujoin.cuda.join import phj as phj_module
    from gpujoin.plan import auto as auto_module
    from gpujoin.plan import device_join as dj_module
    from gpujoin.plan import join as plan_join

    def ranged(what, fn):
        def call(*a, **k):
            with tp.record_function(what):
                r = fn(*a, **k)
            if what == "launch_plan":  # (its samples are read when the returned function is called)
                return ranged("plan_finish", r)
            return r
        return call

    import importlib

    from gpujoin.dist import radix_shuffle as rs_module
    from gpujoin.dist import registered as reg_module

    dist_join = importlib.import_module("gpujoin.dist.join")  # (gpujoin.dist.join is also the function)

    # (and the job's steps before and in the shuffle: its checks and collectives, the early
    # histograms, the copy engines' windows and layouts)
    for mod, name in ((plan_join, "execute_join"), (dj_module, "execute_device_join"),
                      (dj_module, "_execute_device_join"), (dj_module, "_partitioned"), (join_module, "run"),
                      (auto_module, "launch_gpu_join_plan"), (phj_module, "_phj"), (phj_module, "run_match"),
                      (dist_join, "_device_tables"), (dist_join, "_rescaled"), (dist_join, "_shuffle_radix_bits"),
                      (dist_join, "_early_counts"), (rs_module, "exchange_partitioned"), (rs_module, "count"),
                      (rs_module, "_block_layout"), (rs_module, "_check_room"), (reg_module, "windows"),
                      (rs_module, "received_table")):
        setattr(mod, name, ranged("launch_plan" if name == "launch_gpu_join_plan" else name, getattr(mod, name)))
comm.barrier()
cp.cuda.Device().synchronize()
host.clear()
with tp.profile(activities=[tp.ProfilerActivity.CUDA] + ([tp.ProfilerActivity.CPU] if whole or single else [])) as prof:
    shuffle()
    cp.cuda.Device().synchronize()
path = os.path.join(tempfile.gettempdir(), f"shuffle_trace_{comm.rank}.json")
prof.export_chrome_trace(path)
events = [e for e in json.load(open(path))["traceEvents"]
          if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "user_annotation")]
ranges = [e for e in events if e["cat"] == "user_annotation"]
events = [e for e in events if e["cat"] != "user_annotation"]
events.sort(key=lambda e: e["ts"])
t0 = events[0]["ts"] if events else 0
end = max((e["ts"] + e["dur"] for e in events), default=0)
what = "the one-GPU join of every rank's rows" if single else f"chunks of 2^{chunk.bit_length() - 1} rows"
lines = [f"rank {comm.rank}, {what}: {(end - t0) / 1e3:.2f} ms first kernel to last"]
busy: dict = {}
for e in events:
    name = e["name"][:40]
    busy[name] = busy.get(name, 0.0) + e["dur"] / 1e3
    if e["dur"] >= 30:
        lines.append(f"  {(e['ts'] - t0) / 1e3:7.3f} +{e['dur'] / 1e3:6.3f}  s{e['args'].get('stream', '?'):<3} {name}")
for e in sorted(ranges, key=lambda e: e["ts"]):  # (host ranges, on the GPU's clock)
    lines.append(f"  {(e['ts'] - t0) / 1e3:7.3f} +{e['dur'] / 1e3:6.3f}  host {e['name'][:40]}")
idle, reach = [], t0  # spans of 50 us or more with nothing on the GPU
for e in events:
    if e["ts"] - reach >= 50:
        idle.append(f"{(reach - t0) / 1e3:.2f}+{(e['ts'] - reach) / 1e3:.2f}")
    reach = max(reach, e["ts"] + e["dur"])
lines.append("  GPU idle (ms from the first, ms): " + (", ".join(idle) or "none"))
host.sort(key=lambda h: h[1])
h0 = host[0][1] if host else 0
lines.append("  host calls (start ms from the first, ms): " + ", ".join(f"{w} {(t - h0) * 1e3:.2f}+{d * 1e3:.2f}"
                                                                      for w, t, d in host))
count: dict = {}
for e in events:
    count[e["name"][:40]] = count.get(e["name"][:40], 0) + 1
lines.append("  device time by name (ms, launches): " + ", ".join(
    f"{k} {v:.2f} x{count[k]}" for k, v in sorted(busy.items(), key=lambda x: -x[1])[:24]))
# the SMs' idle time: spans with no kernel running (copies aside), summed by length, so that the
# short gaps between kernels show beside the long ones
kernels = [e for e in events if e["cat"] == "kernel"]
spans, reach = [], kernels[0]["ts"] if kernels else 0
for e in kernels:
    if e["ts"] > reach:
        spans.append(e["ts"] - reach)
    reach = max(reach, e["ts"] + e["dur"])
sums = {b: sum(g for g in spans if lo <= g < hi) / 1e3 for b, (lo, hi) in
        {"<5us": (0, 5), "5-20us": (5, 20), "20-50us": (20, 50), ">=50us": (50, 1e12)}.items()}
short = sum(e["dur"] for e in kernels if e["dur"] < 30) / 1e3
lines.append("  SMs idle (no kernel; ms by gap length): " + ", ".join(f"{b} {v:.3f} ({sum(1 for g in spans if lo <= g < hi)})"
             for (b, v), (lo, hi) in zip(sums.items(), ((0, 5), (5, 20), (20, 50), (50, 1e12))))
             + f"; kernels under 30 us: {short:.3f} ms")
got = comm.allgather("\n".join(lines))
if comm.rank == 0:
    print("\n".join(got), flush=True)
