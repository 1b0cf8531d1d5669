"""Host time of each step of the GPU group-by planner (issue 17 item 3): at 2^24 rows auto's
extra time over the chosen algorithm is host time (launches, Python, the sync), not device
work.  Launch-only steps run back to back on 2^12 keys (device work far below host work: wall
time a call is the host's), synchronizing steps each with its round trip; then resolve and the
algorithms at 2^24 rows, in random-order rounds (median); ``--2-24``: those only; ``--user``: auto
and the algorithm it chooses named, through gpujoin.group_by; ``--profiles``: then cProfile of
each algorithm alone."""

import random
import statistics
import sys
import time

import cupy as cp

from gpujoin.bench.workloads import GroupByWorkload, make_groupby
from gpujoin.cuda import primitives as prim
from gpujoin.cuda.groupby import run
from gpujoin.cuda.groupby.common import AggInput, estimate_groups, slot_bytes
from gpujoin.cuda.groupby.hgb import HashTable
from gpujoin.cuda.primitives import SAMPLES_OUT
from gpujoin.cuda.runtime import fits
from gpujoin.plan.auto import choose_group_by, hgb_groups_limits, resolve_gpu_group_by
from gpujoin.plan.calibrate import device_model
from gpujoin.plan.stats import GroupByEstimate, launch_sample


def per_call(label, fn, reps=2000):
    fn()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    cp.cuda.Device().synchronize()
    print(f"{label:58} {(time.perf_counter() - t0) / reps * 1e6:8.1f} us", flush=True)


def host_steps():
    t = make_groupby(GroupByWorkload(log2_rows=12, log2_groups=4), cp)
    k = t["k"]
    inputs = [AggInput(t["v0"], None, ("max",)), AggInput(t["v1"], None, ("max",))]
    dev = device_model()
    words = cp.zeros(SAMPLES_OUT + 2, cp.uint64)
    est = GroupByEstimate(int(k.size), 0, 4, [4, 4], slot_bytes(inputs), 0.0, "x", 0.0)
    per_call("empty loop", lambda: None)
    per_call("device_model()", device_model)
    per_call("slot_bytes(inputs)", lambda: slot_bytes(inputs))
    per_call("GroupByEstimate(...)", lambda: GroupByEstimate(int(k.size), 0, 4, [4, 4], 8, 0.0, "x", 0.0))
    per_call("hgb_groups_limits", lambda: hgb_groups_limits(est, dev))
    per_call("fits(1 MB)", lambda: fits(1 << 20))
    per_call("choose_group_by", lambda: choose_group_by(est, dev))
    per_call("cp.zeros(14, u64)", lambda: cp.zeros(SAMPLES_OUT + 2, cp.uint64))
    per_call("cp.empty(14, u64)", lambda: cp.empty(SAMPLES_OUT + 2, cp.uint64))
    per_call("memset_async of 14 u64", lambda: words.data.memset_async(0, words.nbytes))
    per_call("cp.full(4096, -2^31, int32)", lambda: cp.full(4096, -2**31, cp.int32))
    per_call("launch_sample (launch only)", lambda: launch_sample(k))
    per_call("launch_sample with 8,192 draws (launch only)", lambda: launch_sample(k, 8192))
    per_call("  its _strided", lambda: prim._strided(k, 4096, k.dtype))
    per_call("  its kernel()", lambda: prim.kernel("groupby.cu", "sample_counts<i32>"))
    per_call("launch_sample with draws and its read back", lambda: launch_sample(k, 8192)(), reps=500)
    per_call("HyperLogLog estimate_groups with its read back", lambda: estimate_groups(k), reps=500)
    per_call("HashTable(cap=28160, state=...) (launch only)",
             lambda: HashTable(k, cap=28160, state=words[SAMPLES_OUT:]))
    per_call("words.get()", lambda: words.get(), reps=500)
    per_call("resolve_gpu_group_by, 2^12 rows", lambda: resolve_gpu_group_by(k, inputs), reps=500)
    per_call("HashTable(estimate=16) with its sync, 2^12 rows", lambda: HashTable(k, 16), reps=500)
    per_call("run hgb, 2^12 rows", lambda: run("hgb", k, inputs, groups_estimate=16), reps=500)


def at_2_24():
    cases = []
    for lg in (4, 16):
        t = make_groupby(GroupByWorkload(log2_rows=24, log2_groups=lg), cp)
        k = t["k"]
        inputs = [AggInput(t["v0"], None, ("max",)), AggInput(t["v1"], None, ("max",))]
        c = resolve_gpu_group_by(k, inputs)
        algo, g = c.algorithm, c.estimate.groups_for(c.algorithm)

        def auto(k=k, inputs=inputs):
            c = resolve_gpu_group_by(k, inputs)
            return run(c.algorithm, k, inputs, groups_estimate=c.estimate.groups_for(c.algorithm), table=c.table)

        cases += [(f"2^24 g=2^{lg} auto", auto),
                  (f"2^24 g=2^{lg} resolve", lambda k=k, inputs=inputs: resolve_gpu_group_by(k, inputs)),
                  (f"2^24 g=2^{lg} {algo} alone", lambda k=k, inputs=inputs, a=algo, g=g:
                   run(a, k, inputs, groups_estimate=g))]
    random_rounds(cases, 100)


def user_2_24():
    """auto beside the algorithm it chooses, named, through gpujoin.group_by on device arrays (the
    path a user takes: auto's extra time is the planner's), 2^24 rows, two MAX columns."""
    import gpujoin

    cases = []
    for lg in (4, 16):
        t = make_groupby(GroupByWorkload(log2_rows=24, log2_groups=lg), cp)
        aggs = dict(m0=("v0", "max"), m1=("v1", "max"))
        algo = resolve_gpu_group_by(t["k"], [AggInput(t["v0"], None, ("max",)),
                                             AggInput(t["v1"], None, ("max",))]).algorithm
        for a in ("auto", algo):
            cases.append((f"2^24 g=2^{lg} gpujoin.group_by, {a}",
                          lambda t=t, a=a: gpujoin.group_by(t, "k", algorithm=a).agg(**aggs)))
    random_rounds(cases, 100)


def random_rounds(cases: list, rounds: int, width: int = 58) -> None:
    """Each (label, function) of ``cases`` once to warm up, then ``rounds`` rounds in random
    order, the device synchronized around each call; prints each label's median and quartiles."""
    times = {label: [] for label, _ in cases}
    for _, fn in cases:
        fn()
    for _ in range(rounds):
        random.shuffle(cases)
        for label, fn in cases:
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            fn()
            cp.cuda.Device().synchronize()
            times[label].append(time.perf_counter() - t0)
    for label in sorted(times):
        q = statistics.quantiles(times[label], n=4)
        print(f"{label:{width}} {statistics.median(times[label]) * 1e3:8.3f} ms (quartiles {q[0] * 1e3:.3f}-"
              f"{q[2] * 1e3:.3f})", flush=True)




def stamped_resolve(keys, inputs, st):
    """resolve_gpu_group_by's steps (as in plan/auto.py) with a stamp after each."""
    from gpujoin.plan.auto import GroupByEstimate as GE
    from gpujoin.plan.stats import GROUP_DRAWS, more_groups_than

    st("start")
    read = launch_sample(keys, GROUP_DRAWS if keys.size > GROUP_DRAWS else 0)
    st("launch_sample with the random draws")
    widths = [i.values.dtype.itemsize for i in inputs if i.values is not None]
    dev = device_model()
    est = GE(int(keys.size), 0, keys.dtype.itemsize, widths, slot_bytes(inputs), 0.0, "s", 0.0)
    cap = max(1, hgb_groups_limits(est, dev)[0])
    st("estimate, cap (the device counts the sample)")
    smp, draws = read()
    st("read(): the wait for the sample's words")
    est.top_share, est.hot_share = smp.top_share, smp.repeated_share
    _, top = hgb_groups_limits(est, dev)
    more = more_groups_than(draws, top)
    st("read the sample, the draws' test")
    t = None
    if more:
        est.groups, est.sketched = top + 1, 0.0
    else:
        fits(4 * HashTable.nbytes(cap, keys.dtype.itemsize, capped=True))
        t = HashTable(keys, cap=cap)
        st("HashTable(cap): the capped build, its state read back")
        est.groups = cap + 1 if t.overflow else t.num_groups
    choice = choose_group_by(est, dev)
    choice.estimate, choice.table = est, t
    st("choose_group_by")
    return choice


def stamped_hgb(keys, inputs, st):
    from gpujoin.cuda.groupby import hgb as H
    from gpujoin.cuda.groupby.common import GroupByOutput, decode
    from gpujoin.cuda.runtime import PhaseTimer

    st("start")
    timer = PhaseTimer()
    st("PhaseTimer (a sync)")
    table = HashTable(keys, 16)
    st("HashTable(estimate) with its sync")
    timer.mark("group_ids")
    st("mark (a sync)")
    accs = H.aggregate(table, keys, inputs)
    st("aggregate")
    cols = [decode(inp, a) for inp, a in zip(inputs, accs)]
    st("decode")
    timer.mark("aggregate")
    st("mark (a sync)")
    out = GroupByOutput(table.group_keys, cols, timer.phases, {"table_slots": table.mask + 1, "hot_groups": table.hot})
    st("output")
    return out


def stamps(label, fn, reps=500, rows=12, groups=4):
    t = make_groupby(GroupByWorkload(log2_rows=rows, log2_groups=groups), cp)
    k = t["k"]
    inputs = [AggInput(t["v0"], None, ("max",)), AggInput(t["v1"], None, ("max",))]
    acc, last = {}, [0]

    def st(name):
        now = time.perf_counter_ns()
        if name != "start":
            acc[name] = acc.get(name, 0) + now - last[0]
        last[0] = time.perf_counter_ns()

    fn(k, inputs, st)
    acc.clear()
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        fn(k, inputs, st)
    print(label)
    for name, ns in acc.items():
        print(f"    {name:54} {ns / reps / 1e3:8.1f} us")
    print(f"    {'total':54} {sum(acc.values()) / reps / 1e3:8.1f} us", flush=True)


def profiles():
    """cProfile of each algorithm alone at 2^24 rows: where its host time goes."""
    import cProfile
    import pstats

    for lg, algo in ((4, "hgb"), (16, "pgb-tr")):
        t = make_groupby(GroupByWorkload(log2_rows=24, log2_groups=lg), cp)
        inputs = [AggInput(t["v0"], None, ("max",)), AggInput(t["v1"], None, ("max",))]
        g = resolve_gpu_group_by(t["k"], inputs).estimate.groups_for(algo)
        run(algo, t["k"], inputs, groups_estimate=g)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(100):
            run(algo, t["k"], inputs, groups_estimate=g)
        pr.disable()
        print(f"{algo} alone, 2^24 rows, g = 2^{lg} (100 runs)")
        pstats.Stats(pr).sort_stats("tottime").print_stats(18)


if __name__ == "__main__" and "--user" in sys.argv:  # auto and its choice through gpujoin.group_by
    user_2_24()
elif __name__ == "__main__" and "--2-24" in sys.argv:  # only auto and the algorithms at 2^24 rows
    at_2_24()
elif __name__ == "__main__":
    host_steps()
    stamps("resolve_gpu_group_by's steps, 2^12 rows, g = 2^4", stamped_resolve)
    stamps("hgb's steps, 2^12 rows, g = 2^4", stamped_hgb)
    stamps("resolve_gpu_group_by's steps, 2^24 rows, g = 2^4", stamped_resolve, 200, 24, 4)
    stamps("resolve_gpu_group_by's steps, 2^24 rows, g = 2^16", stamped_resolve, 200, 24, 16)
    stamps("hgb's steps, 2^24 rows, g = 2^4", stamped_hgb, 200, 24, 4)
    at_2_24()
    if "--profiles" in sys.argv:
        profiles()
