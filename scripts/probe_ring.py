"""The ring's transfer-only mode (paper 000 Fig. 8) on each GPU alone and on all of them, the
band join's columns (2^LOG2N rows a side) page-locked: whether a GPU reads the same host
memory slower than another (the host's NUMA nodes), and where a GPU's time goes."""
import statistics
import sys
import time

import cupy as cp
import numpy as np

from gpujoin.dist.nested_loop import ring_join
from gpujoin.outofcore.stream import pinned_host

n = 1 << int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 24
rng = np.random.default_rng(1)
a = rng.integers(0, 1 << 40, n)
lo = rng.integers(0, 1 << 40, n)
hi = lo + 4
d = cp.cuda.runtime.getDeviceCount()
with pinned_host(a, lo, hi):
    for ids in [[g] for g in range(d)] + [list(range(d))]:
        times, st = [], None
        for r in range(4):
            t0 = time.perf_counter()
            _, st = ring_join([a, a], [lo, hi], [">=", "<="], None, ids, transfer_only=True)
            if r:
                times.append(time.perf_counter() - t0)
        moved = st["h2d_bytes"] + st["p2p_bytes"]
        print(f"GPUs {ids}: {statistics.median(times) * 1e3:.2f} ms (min {min(times) * 1e3:.2f}); "
              f"{st['h2d_bytes'] / 1e9:.3f} GB from the host, {st['p2p_bytes'] / 1e9:.3f} GB GPU to GPU, "
              f"{moved / 1e9 / min(times):.1f} GB/s; per GPU setup ms "
              f"{[round((g.get('started_s', 0) + g['setup_s']) * 1e3, 2) for g in st['per_gpu']]}; chunks in place at ms "
              f"{[[round(x * 1e3, 2) for x in g['in_place_s']] for g in st['per_gpu']]}", flush=True)
