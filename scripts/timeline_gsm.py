"""Where GSM's time goes (issue 15: Eqs. 4-5 under-predict it on two GPUs): one global sort-merge
join of 2^n x 2^n int32 tuples in page-locked host memory recorded by CUPTI, on one GPU and on
every GPU.  For each phase (each call that spreads tasks over the GPUs: a relation's sorted
runs, each merge round, the join) and GPU: host-to-device and device-to-host bytes and busy
time, the time both directions were busy at once (what the duplex rate of Eqs. 4-5 assumes of
all of it), and the time neither was.

    python3 scripts/timeline_gsm.py [log2_n=29] [transfer_only=1]
"""

import os
import sys
import time

import numpy as np
import torch.profiler as tp

from gpujoin.bench.out_of_core import make_relations
from gpujoin.dist import gsm
from gpujoin.dist.devices import device_count
from gpujoin.outofcore.stream import pinned_host

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cupti  # noqa: E402

log2_n = int(sys.argv[1]) if len(sys.argv) > 1 else 29
transfer_only = (sys.argv[2] if len(sys.argv) > 2 else "1") == "1"
rk, rp, sk, sp = make_relations(log2_n, 42, item_bytes=4)
want = int(sp.sum(dtype=np.int64))
budget = 16 << 30
phase = [0]
orig = gsm._on_gpus


def labelled(gpus, tasks, *a, **k):
    """Each call of _on_gpus a phase of the trace, named by its order."""
    phase[0] += 1
    with tp.record_function(f"phase {phase[0]:02d} ({len(tasks)} tasks)"):
        return orig(gpus, tasks, *a, **k)


gsm._on_gpus = labelled


def report(g: int) -> None:
    join = lambda: gsm.gsm_join([rk, rp], [sk, sp], budget, list(range(g)), aggregate="sum",  # noqa: E731
                                memory_limit=budget, transfer_only=transfer_only)
    join()  # warm-up: pools, arenas, compiled kernels
    phase[0] = 0
    t0 = time.perf_counter()
    res, ev, _, ranges = cupti.record(join)
    wall = time.perf_counter() - t0
    assert transfer_only or res.total == want
    print(f"x{g}: {wall:.3f} s wall under the profiler, phases "
          f"{ {k: round(v, 4) for k, v in res.stats['phases'].items()} }", flush=True)
    windows = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ranges if e["name"].startswith("phase"))
    for lo, hi, name in windows:
        parts = []
        for d in range(g):
            mine = [e for e in ev if e["args"].get("device") == d and lo <= e["ts"] < hi]
            iv = {k: [(e["ts"], e["ts"] + e["dur"]) for e in mine if cupti.kind(e) == k] for k in ("HtoD", "DtoH")}
            nb = {k: sum(e["args"].get("bytes", 0) for e in mine if cupti.kind(e) == k) for k in iv}
            busy = {k: cupti.union(v) for k, v in iv.items()}
            overlap = cupti.both(iv["HtoD"], iv["DtoH"])
            either = cupti.union(iv["HtoD"] + iv["DtoH"])
            idle = cupti.gaps(iv["HtoD"] + iv["DtoH"], lo, hi)
            first = min((a for a, _ in iv["HtoD"] + iv["DtoH"]), default=lo)
            parts.append(f"GPU {d}: in {nb['HtoD'] / 1e9:.2f} GB {busy['HtoD'] / 1e3:.1f} ms"
                         f" ({nb['HtoD'] / max(busy['HtoD'], 1) / 1e3:.0f} GB/s busy), out {nb['DtoH'] / 1e9:.2f} GB "
                         f"{busy['DtoH'] / 1e3:.1f} ms ({nb['DtoH'] / max(busy['DtoH'], 1) / 1e3:.0f}), both "
                         f"{overlap / 1e3:.1f} ms, one only {(either - overlap) / 1e3:.1f} ms, none "
                         f"{sum(x[1] for x in idle) / 1e3:.1f} ms (first copy at +{(first - lo) / 1e3:.1f})")
        total = sum(e["args"].get("bytes", 0) for e in ev if lo <= e["ts"] < hi and cupti.kind(e) in ("HtoD", "DtoH"))
        print(f"  {name}: {(hi - lo) / 1e3:.1f} ms, {total / 1e9:.2f} GB both ways ({total / (hi - lo) / 1e3:.0f} GB/s)",
              flush=True)
        for p in parts:
            print("    " + p, flush=True)


with pinned_host(rk, rp, sk, sp):
    for g in sorted({1, device_count()}):
        report(g)
