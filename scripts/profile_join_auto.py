"""auto's cost over the algorithm it chooses, for GPU joins at 2^24 rows a side (issue 17 item
3): resolve_gpu_join alone, and the join through ``execute_join`` with ``algorithm="auto"`` and
with the chosen algorithm named, one and two payload columns, in random-order rounds (median).
``--samples 16,17,18``: resolve_gpu_join and the auto join with the match ratio's build and
probe samples of 2^b keys each (stats.DEVICE_BUILD_SAMPLE / DEVICE_PROBE_SAMPLE), and the ratio
each measures at 30% and 10% of probe keys matching.  ``--host``: the host time of each step of
resolve_gpu_join (launch-only steps back to back on 2^12 keys, as profile_planner_host.py), and
the samples' launch's GPU time; ``--breakdown``: the auto and named joins' host time split at
resolve_gpu_join, the samples' launch and wait, and run (wrapped with time stamps, cold caches
as in a loop of joins); GPUJOIN_KERNEL_DEFINES adds -D options to the kernels'."""

import os
import random
import statistics
import sys
import time

import cupy as cp
import numpy as np

from gpujoin.bench.workloads import JoinWorkload, make_join
from gpujoin.plan import stats
from gpujoin.plan.auto import resolve_gpu_join
from gpujoin.plan.join import execute_join
from profile_planner_host import random_rounds  # (scripts/ is the script's directory)

if os.environ.get("GPUJOIN_KERNEL_DEFINES"):  # -D options: a variant of the kernels, compiled apart
    from gpujoin.cuda import kernels

    kernels.OPTIONS += tuple(os.environ["GPUJOIN_KERNEL_DEFINES"].split())


def main(rounds: int = 100) -> None:
    cases = []
    for p in (1, 2):
        r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=p), cp)
        pay_r, pay_s = [r[f"r{i}"] for i in range(p)], [s[f"s{i}"] for i in range(p)]
        algo = resolve_gpu_join(r["k"], s["k"], pay_r, pay_s).algorithm
        cases += [(f"{p} payload(s): resolve_gpu_join", lambda r=r, s=s, a=pay_r, b=pay_s: resolve_gpu_join(r["k"], s["k"], a, b)),
                  (f"{p} payload(s): join, auto", lambda r=r, s=s: execute_join(s, r, "k", algorithm="auto")),
                  (f"{p} payload(s): join, {algo}", lambda r=r, s=s, a=algo: execute_join(s, r, "k", algorithm=a))]
    # the samples' launch and wait as the auto join meets them: after other work (cold caches)
    from gpujoin.cuda import primitives as prim

    parts = {"launch": [], "wait": [], "wait after a 50 us spin": []}
    bk, pk = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=1), cp)
    size = stats.planner_sample(1 << 24, stats.DEVICE_BUILD_SAMPLE)

    def split(pause=False):
        t0 = time.perf_counter()
        pending = prim.launch_key_samples([bk["k"], pk["k"]], stats.SKEW_SAMPLE, (size, 0))
        t1 = time.perf_counter()
        if pause:  # the GPU's time alone: the host waits 50 us before it reads
            while time.perf_counter() - t1 < 50e-6:
                pass
        pending.result()
        t2 = time.perf_counter()
        parts["launch"].append(t1 - t0)
        parts["wait after a 50 us spin" if pause else "wait"].append(t2 - t1 - (50e-6 if pause else 0))
    cases += [("1 payload(s): samples' launch and wait", split),
              ("1 payload(s): samples' launch, 50 us, wait", lambda: split(True))]
    random_rounds(cases, rounds, 45)
    for k, v in parts.items():
        print(f"  cold {k}: median {statistics.median(v) * 1e6:.1f} us", flush=True)


def sample_sizes(bits: list[int], rounds: int = 60) -> None:
    for ratio in (0.3, 0.1):
        r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=2, match_ratio=ratio), cp)
        pay_r, pay_s = [r["r0"], r["r1"]], [s["s0"], s["s1"]]
        times = {b: [] for b in bits}
        got = {}
        for _ in range(rounds):
            random.shuffle(bits)
            for b in bits:
                stats.DEVICE_BUILD_SAMPLE = stats.DEVICE_PROBE_SAMPLE = 1 << b
                stats.DEVICE_SAMPLE_SHIFT = 24 - b
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                c = resolve_gpu_join(r["k"], s["k"], pay_r, pay_s)
                cp.cuda.Device().synchronize()
                times[b].append(time.perf_counter() - t0)
                got[b] = c.estimate.match_ratio
        for b in sorted(bits):
            print(f"match ratio {ratio}: samples 2^{b}: resolve_gpu_join {statistics.median(times[b]) * 1e3:.3f} ms, "
                  f"measured ratio {got[b]:.4f}", flush=True)


def host_steps() -> None:
    from gpujoin.cuda import primitives as prim
    from gpujoin.plan import cost
    from gpujoin.plan.auto import choose_join
    from gpujoin.plan.calibrate import device_model
    from profile_planner_host import per_call

    dev = device_model()
    for log2 in (12, 24):
        r, s = make_join(JoinWorkload(log2_r=log2, log2_s=log2, payloads=1), cp)
        bk, pk, pay_r, pay_s = r["k"], s["k"], [r["r0"]], [s["s0"]]
        big = 1 << 18
        est = stats.JoinEstimate(bk.size, pk.size, 4, [4], [4], None, None)
        if log2 == 12:
            out = cp.empty(prim.SAMPLES_OUT, cp.uint64)
            per_call("device_model()", device_model)
            per_call("JoinEstimate(...)", lambda: stats.JoinEstimate(bk.size, pk.size, 4, [4], [4], None, None))
            per_call("engine_phj_crossover", lambda: cost.engine_phj_crossover(dev, 1))
            per_call("choose_join", lambda: choose_join(est, dev))
            per_call("cp.empty(2^19, int32)", lambda: cp.empty(1 << 19, cp.int32))
            per_call("out.get()", out.get, reps=500)
            per_call("_scratch()", prim._scratch)
            per_call("the argument struct", lambda: np.array((1,) * 17 + (2,) * 8, prim.SAMPLE_ARGS)[()])
        per_call(f"2^{log2}: launch_key_samples, summaries (launch only)",
                 lambda: prim.launch_key_samples([bk, pk], stats.SKEW_SAMPLE))
        per_call(f"2^{log2}: launch_key_samples, multiplicity (launch only)",
                 lambda: prim.launch_key_samples([bk, pk], stats.SKEW_SAMPLE, (big, 0)))
        per_call(f"2^{log2}: key_samples, multiplicity (with its wait)",
                 lambda: prim.key_samples([bk, pk], stats.SKEW_SAMPLE, (big, 0)), reps=500)
        per_call(f"2^{log2}: device_join_samples, multiplicity", lambda: stats.device_join_samples(
            bk, pk, False, True), reps=500)
        per_call(f"2^{log2}: device_join_samples, match", lambda: stats.device_join_samples(
            bk, pk, True, True), reps=500)
        per_call(f"2^{log2}: resolve_gpu_join, 1 payload", lambda: resolve_gpu_join(bk, pk, pay_r, pay_s), reps=500)
        per_call(f"2^{log2}: resolve_gpu_join, 2 payloads", lambda: resolve_gpu_join(bk, pk, pay_r * 2, pay_s * 2),
                 reps=500)
        if log2 == 24:
            for what, m in (("multiplicity", (big, 0)), ("match", (big, big)), ("multiplicity 2^16", (1 << 16, 0))):
                launch, wait = [], []
                for _ in range(300):
                    cp.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    pending = prim.launch_key_samples([bk, pk], stats.SKEW_SAMPLE, m)
                    t1 = time.perf_counter()
                    pending.result()
                    t2 = time.perf_counter()
                    launch.append(t1 - t0)
                    wait.append(t2 - t1)
                print(f"  {what}: launch {statistics.median(launch) * 1e6:.1f} us, then the wait and read "
                      f"{statistics.median(wait) * 1e6:.1f} us", flush=True)
            gpu_time(bk, pk)


def gpu_time(bk, pk) -> None:
    """The GPU time of the samples' launch (events around it, queued behind a long kernel so
    that the host's launch time is not in it), by what it samples."""
    from gpujoin.cuda import primitives as prim

    junk = cp.empty(1 << 28, cp.uint32)
    for what, m in (("summaries only", None), ("multiplicity 2^14", (1 << 14, 0)), ("multiplicity 2^16", (1 << 16, 0)),
                    ("multiplicity 2^18", (1 << 18, 0)), ("match 2^16", (1 << 16, 1 << 16)),
                    ("match 2^17 / 2^18", (1 << 17, 1 << 18)), ("match 2^18", (1 << 18, 1 << 18))):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        gpu = []
        for _ in range(30):
            junk.fill(0)
            e0.record()
            pending = prim.launch_key_samples([bk, pk], stats.SKEW_SAMPLE, m)
            e1.record()
            pending.result()
            e1.synchronize()
            gpu.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
        print(f"  GPU time of the samples' launch, {what}: median {statistics.median(gpu):.1f} us", flush=True)


def breakdown(rounds: int = 100) -> None:
    """Where auto's extra time goes in a loop of joins: stamps at the wrapped functions' entries
    and exits, medians of each span over random-order rounds of auto and named joins."""
    import gpujoin.cuda.join as cjoin
    import gpujoin.plan.auto as auto
    from gpujoin.cuda import primitives as prim

    stamps: list = []

    def stamped(fn, label, result=None):
        def wrapped(*a, **k):
            stamps.append((label + "<", time.perf_counter()))
            try:
                out = fn(*a, **k)
                return out if result is None else stamped(out, result)  # (the function it returns too)
            finally:
                stamps.append((label + ">", time.perf_counter()))
        return wrapped

    def wrap(owner, name, label, result=None):
        setattr(owner, name, stamped(getattr(owner, name), label, result))

    import gpujoin.cuda.table as ctable
    import gpujoin.plan.device_join as dj
    from gpujoin.plan import stats as st

    wrap(auto, "launch_gpu_join_plan", "plan", result="finish")
    if hasattr(dj, "launch_gpu_join_plan"):  # (imported at device_join's top since f44d547)
        dj.launch_gpu_join_plan = auto.launch_gpu_join_plan
    steps = ((prim, "launch_key_samples", "launch"),
             (prim.PendingSamples, "words", "wait"), (auto, "choose_join", "rules"), (cjoin, "run", "run"),
             (dj, "_execute_device_join", "inner"), (ctable, "as_device_table", "tables"),
             (dj, "check_columns", "check"), (dj, "output_layout", "layout"), (dj, "to_key", "tokey"),
             (dj, "build_on_left", "side"), (prim, "_launch", "_launch"), (prim, "_scratch", "_scratch"),
             (st, "device_join_samples", "samples"))
    for owner, name, label in steps:
        wrap(owner, name, label)
    firsts = ("inner", "tables", "check", "layout", "tokey", "side")
    for p in (1, 2):
        r, s = make_join(JoinWorkload(log2_r=24, log2_s=24, payloads=p), cp)
        algo = auto.resolve_gpu_join(r["k"], s["k"], [r[f"r{i}"] for i in range(p)],
                                     [s[f"s{i}"] for i in range(p)]).algorithm
        spans: dict = {}
        for _ in range(rounds):
            order = ["auto", algo]
            random.shuffle(order)
            for a in order:
                cp.cuda.Device().synchronize()
                stamps.clear()
                t0 = time.perf_counter()
                execute_join(s, r, "k", algorithm=a)
                cp.cuda.Device().synchronize()
                end = time.perf_counter()
                t = {}
                for label, when in stamps:  # (the first entry, the last exit)
                    if label.endswith("<"):
                        t.setdefault(label, when)
                    else:
                        t[label] = when
                t.update(start=t0, end=end)
                for f in firsts:  # how far into the join each step starts
                    if f + "<" in t:
                        spans.setdefault((a if a == "auto" else "named", f"start -> {f}"), []).append(
                            t[f + "<"] - t0)
                pre = "plan<" if a == "auto" else "run<"
                for label, (x, y) in (("whole", ("start", "end")), ("before plan/run", ("start", pre)),
                                      ("plan (launch)", ("plan<", "plan>")), ("plan> -> finish<", ("plan>", "finish<")),
                                      ("finish", ("finish<", "finish>")), ("finish> -> run<", ("finish>", "run<")),
                                      ("start -> run", ("start", "run<")), ("  launch", ("launch<", "launch>")),
                                      ("  wait", ("wait<", "wait>")), ("  rules (choose_join)", ("rules<", "rules>")),
                                      ("  samples", ("samples<", "samples>")),
                                      ("    _scratch", ("_scratch<", "_scratch>")),
                                      ("    _launch", ("_launch<", "_launch>")),
                                      ("run", ("run<", "run>")), ("after run", ("run>", "end"))):
                    if x in t and y in t:
                        spans.setdefault((a if a == "auto" else "named", label), []).append(t[y] - t[x])
        print(f"{p} payload(s), {algo} named; median us over {rounds} rounds:")
        for (a, label), v in spans.items():
            print(f"  {a:6} {label:24} {statistics.median(v) * 1e6:9.1f}", flush=True)


if __name__ == "__main__":
    if "--breakdown" in sys.argv:
        breakdown()
    elif "--host" in sys.argv:
        host_steps()
    elif "--samples" in sys.argv:
        sample_sizes([int(b) for b in sys.argv[sys.argv.index("--samples") + 1].split(",")])
    else:
        main()
