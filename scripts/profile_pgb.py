"""Run PGB-TR on 2^LOG2N rows (4-byte keys uniform over 2^LG groups, MAX of two int32 columns)
REPS times after a warm-up, for nsys's per-kernel summary (device check aid):
python3 scripts/profile_pgb.py [LOG2N=28] [LG=16] [REPS=5] [ALGO=pgb-tr]."""

import sys

import cupy as cp

from gpujoin.cuda.groupby import AggInput, run

log2n, lg, reps = (int(a) for a in (sys.argv[1:4] + ["28", "16", "5"][len(sys.argv[1:4]):]))
algo = sys.argv[4] if len(sys.argv) > 4 else "pgb-tr"
rng = cp.random.default_rng(0)
n = 1 << log2n
keys = rng.integers(0, 1 << lg, n, dtype=cp.int32)
inputs = [AggInput(rng.integers(0, 1 << 30, n, dtype=cp.int32), None, ("max",)) for _ in range(2)]
run(algo, keys, inputs)
cp.cuda.Device().synchronize()
start, stop = cp.cuda.Event(), cp.cuda.Event()
times = []
for _ in range(reps):
    start.record()
    out = run(algo, keys, inputs)
    stop.record()
    stop.synchronize()
    times.append(cp.cuda.get_elapsed_time(start, stop))
print(f"{algo} 2^{log2n} rows g=2^{lg}: " + " ".join(f"{t:.2f}" for t in times) + " ms; phases", out.phases)
