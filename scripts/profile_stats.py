"""What auto's statistics cost (issue 17 item 3): each estimate on bench workloads, wall time
with the device synchronized, median of 7 after a warm-up; with ``--detail``, each step of the
join statistics alone at 2^24 rows instead; with ``--group-by`` the group-by's only, each
beside the chosen algorithm's own run; with ``--small`` where the time of auto's
group-by goes at 2^24 rows; with ``--hgb-cap`` the planner's capped HGB build
(HashTable.at_most) step by step, with its device time too."""

import statistics
import sys
import time

import cupy as cp
import numpy as np
from cupyx.profiler import benchmark

from gpujoin.bench.workloads import GroupByWorkload, JoinWorkload, make_groupby, make_join
from gpujoin.cuda.groupby import run
from gpujoin.cuda.groupby.common import AggInput
from gpujoin.cuda.primitives import count_found, frequent_keys, key_samples
from gpujoin.plan import stats
from gpujoin.cuda.groupby.common import hll_estimate
from gpujoin.cuda.groupby.hgb import HashTable
from gpujoin.plan.auto import choose_join, resolve_gpu_group_by, resolve_gpu_join
from gpujoin.plan.calibrate import device_model


def timed(label, fn, reps=7, gpu=False):
    """Wall time, device synchronized (and with ``gpu`` the device's own, cupyx's benchmark)."""
    fn()
    ts = []
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    dev = f" {statistics.median(benchmark(fn, n_repeat=reps, n_warmup=1).gpu_times[0]) * 1e3:8.3f} ms GPU" if gpu else ""
    print(f"{label:60} {statistics.median(ts) * 1e3:8.3f} ms{dev}", flush=True)


def hgb_cap():
    """The capped build where it overflows (uniform g = 2^16, 2^24) and where it counts (Zipf 2)."""
    for lg, z in ((16, 0.0), (16, 1.5), (12, 2.0), (24, 0.0)):
        k = make_groupby(GroupByWorkload(log2_rows=28, log2_groups=lg, zipf=z), cp)["k"]
        tag = f"2^28 rows, g=2^{lg} z={z}"
        timed(f"{tag}: sample", lambda: stats.sample(k), gpu=True)
        for cap in (28160, 450560):
            timed(f"{tag}: HashTable.at_most({cap})", lambda: HashTable.at_most(k, cap), gpu=True)


def detail():
    r, s = make_join(JoinWorkload(log2_r=24, log2_s=24), cp)
    bk, pk = r["k"], s["k"]
    timed("empty sync", lambda: None)
    timed("4096 strided sample to host", lambda: stats._to_host(stats._sample(bk, 4096)))
    h = stats._to_host(stats._sample(bk, 4096))
    timed("np.unique 4096", lambda: np.unique(h, return_counts=True))
    timed("cp.unique 4096 on the device", lambda: cp.unique(stats._sample(bk, 4096), return_counts=True))
    for size in (1 << 16, 1 << 18, 1 << 20):
        timed(f"sort a strided sample of {size}", lambda: cp.sort(stats._sample(bk, size)))
    timed("key_samples: build + probe summaries", lambda: key_samples([bk, pk]))
    timed("key_samples: summaries + 2^18 x 2^18 match", lambda: key_samples([bk, pk], 4096, (1 << 18, 1 << 18)))
    timed("stats.device_join_samples (match)", lambda: stats.device_join_samples(bk, pk, True))
    timed("resolve_gpu_join", lambda: resolve_gpu_join(bk, pk, [r["r0"]], [s["s0"]]))
    dev = device_model()
    est = resolve_gpu_join(bk, pk, [r["r0"]], [s["s0"]]).estimate
    timed("device_model()", device_model)
    timed("choose_join (the rules and cost model)", lambda: choose_join(est, dev))
    timed("cp.zeros(12) + .get()", lambda: cp.zeros(12, cp.uint64).get())
    timed("cp.full(2^19) + sync", lambda: cp.full(1 << 19, 0, cp.int32))
    g = make_groupby(GroupByWorkload(log2_rows=28, log2_groups=12, zipf=2.0), cp)["k"]
    timed("group-by 2^28: stats.sample (key_samples of one)", lambda: stats.sample(g))
    timed("group-by 2^28: estimate_groups 1/8", lambda: stats.estimate_groups(g, 8))
    timed("group-by 2^28: estimate_groups 1/16", lambda: stats.estimate_groups(g, 16))
    regs = cp.zeros(4096, cp.uint32)
    timed("hll_estimate (copy 16 KiB + NumPy)", lambda: hll_estimate(regs, 4, 1 << 28))
    timed("count_found 2^18 sample, 2^18 probe",
          lambda: count_found(stats._sample(bk, 1 << 18), stats._sample(pk, 1 << 18)))
    timed("match_ratio", lambda: stats.match_ratio(bk, pk))
    timed("repeated_share", lambda: stats.repeated_share(bk))
    timed("frequent_keys 2^14 sample", lambda: frequent_keys(pk, 4 * pk.size / 2**14, 1 << 14, 4, 4096, 0.05))


def small():
    """Where the time of auto's group-by goes at 2^24 rows (and 2^28): wall times of auto, its
    statistics and the chosen algorithm alone, in rounds of one run each in a random order
    (median of 30); then cProfile of the statistics, then each case's kernels' device time
    (CUPTI through PyTorch's profiler, which sees CuPy's kernels too, and slows later launches)."""
    import cProfile
    import pstats
    import random

    all_cases = []
    for rows, lg in ((24, 4), (24, 16), (28, 4)):
        t = make_groupby(GroupByWorkload(log2_rows=rows, log2_groups=lg), cp)
        inputs = [AggInput(t["v0"], None, ("max",)), AggInput(t["v1"], None, ("max",))]
        choice = resolve_gpu_group_by(t["k"], inputs)
        groups = choice.estimate.groups_for(choice.algorithm)
        tag = f"2^{rows} g=2^{lg}"

        def auto(k=t["k"], inputs=inputs):
            c = resolve_gpu_group_by(k, inputs)
            return run(c.algorithm, k, inputs, groups_estimate=c.estimate.groups_for(c.algorithm), table=c.table)

        all_cases += [(f"{tag} auto: resolve, then the choice with its table", auto),
                      (f"{tag} resolve_gpu_group_by", lambda k=t["k"], inputs=inputs: resolve_gpu_group_by(k, inputs)),
                      (f"{tag} stats.sample", lambda k=t["k"]: stats.sample(k)),
                      (f"{tag} {choice.algorithm} alone", lambda k=t["k"], inputs=inputs, a=choice.algorithm, g=groups:
                       run(a, k, inputs, groups_estimate=g))]
    times = {label: [] for label, _ in all_cases}
    for fn in (f for _, f in all_cases):
        fn()
    order = list(all_cases)
    for _ in range(30):
        random.shuffle(order)
        for label, fn in order:
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            fn()
            cp.cuda.Device().synchronize()
            times[label].append(time.perf_counter() - t0)
    for label, _ in all_cases:
        print(f"{label:62} {statistics.median(times[label]) * 1e3:7.3f} ms", flush=True)
    for label, fn in all_cases:
        if "resolve" in label and "2^24" in label:
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(200):
                fn()
            pr.disable()
            print(label)
            pstats.Stats(pr).sort_stats("tottime").print_stats(16)
    import torch.profiler as tp

    for label, fn in all_cases:
        with tp.profile(activities=[tp.ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fn()
            cp.cuda.Device().synchronize()
        evs = [e for e in prof.key_averages() if e.device_time_total > 0]
        print(f"{label}: kernels and copies {sum(e.device_time_total for e in evs) / 20e3:.3f} ms of device time a run")
        for e in sorted(evs, key=lambda e: -e.device_time_total)[:4]:
            print(f"    {e.device_time_total / 20:8.1f} us  x{e.count // 20:<3} {e.key[:90]}")


if "--small" in sys.argv:
    small()
    sys.exit(0)
if "--hgb-cap" in sys.argv:
    hgb_cap()
    sys.exit(0)
if "--detail" in sys.argv:
    detail()
    sys.exit(0)
for w in () if "--group-by" in sys.argv else (JoinWorkload(log2_r=27, log2_s=27), JoinWorkload(log2_r=24, log2_s=24),
          JoinWorkload(log2_r=26, log2_s=26, distinct_keys=1 << 24, build_zipf=1.0)):
    r, s = make_join(w, cp)
    bk, pk = r["k"], s["k"]
    tag = f"join 2^{w.log2_r}" + (" mm zipf-build" if w.build_zipf else "")
    timed(f"{tag}: repeated_share(build)", lambda: stats.repeated_share(bk))
    timed(f"{tag}: match_ratio", lambda: stats.match_ratio(bk, pk))
    timed(f"{tag}: top_share(probe)", lambda: stats.top_share(pk))
    timed(f"{tag}: resolve_gpu_join (all auto does)", lambda: resolve_gpu_join(bk, pk, [r["r0"]], [s["s0"]]))
    print("  chose", resolve_gpu_join(bk, pk, [r["r0"]], [s["s0"]]).algorithm)
for w in (GroupByWorkload(log2_rows=28, log2_groups=4), GroupByWorkload(log2_rows=28, log2_groups=12, zipf=2.0),
          GroupByWorkload(log2_rows=28, log2_groups=16), GroupByWorkload(log2_rows=24, log2_groups=4),
          GroupByWorkload(log2_rows=24, log2_groups=16)):
    t = make_groupby(w, cp)
    inputs = [AggInput(t["v0"], None, ("max",)), AggInput(t["v1"], None, ("max",))]
    tag = f"group-by 2^{w.log2_rows} g=2^{w.log2_groups} zipf={w.zipf}"
    timed(f"{tag}: HyperLogLog (estimate_groups)", lambda: stats.estimate_groups(t["k"]))
    timed(f"{tag}: HyperLogLog over 1/{stats.HLL_SUB} of the keys", lambda: stats.estimate_groups(t["k"], stats.HLL_SUB))
    timed(f"{tag}: resolve_gpu_group_by (all auto does)", lambda: resolve_gpu_group_by(t["k"], inputs))
    choice = resolve_gpu_group_by(t["k"], inputs)
    print("  chose", choice.algorithm, choice.estimate.method)
    groups = choice.estimate.groups_for(choice.algorithm)
    timed(f"{tag}: {choice.algorithm} itself", lambda: run(choice.algorithm, t["k"], inputs, groups_estimate=groups))
