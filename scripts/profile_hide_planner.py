"""Would auto's planner time hide behind PHJ-TR's first GPU work?  PHJ-TR named, with a host spin
of D seconds (default 90e-6, the planner's host time at 2^24 rows) before it starts ("before")
and after its build partition is launched ("after"), beside the plain named join and auto, on
paper 001's random workload at 2^24 and 2^25 rows a side, one and two payload columns; medians
of 60 random-order rounds, three times.

On an H200 (2026-11-27) "before" cost what auto costs (+90-110 us) and "after" nothing, so the
planner's time would hide behind a build partition launched first.  A speculative partition
built on that (launched before the samples were read, dropped where the rules pick another
algorithm) took auto from 1.06-1.08 to 1.015-1.05 of PHJ-TR at 2^24, but cost 0.9-1.0 ms on
many-to-many joins that SMJ-TR wins (2^24 rows over 2^21 keys: auto 1.29x SMJ-TR), and was not
kept (docs/BENCHMARKS.md, issue 17 item 3).

    PYTHONPATH=src python3 scripts/profile_hide_planner.py [D]
"""

import random
import statistics
import sys
import time

import cupy as cp

import gpujoin
import gpujoin.cuda.join.phj as phj
from gpujoin.bench.workloads import JoinWorkload, make_join

D = float(sys.argv[1]) if len(sys.argv) > 1 else 90e-6
state = {"mode": None, "done": False}
_partition, _phj = phj.radix_partition, phj._phj


def spin() -> None:
    end = time.perf_counter() + D
    while time.perf_counter() < end:
        pass


def partition(*a, **k):
    out = _partition(*a, **k)
    if state["mode"] == "after" and not state["done"]:  # (the build side's: PHJ's first)
        state["done"] = True
        spin()
    return out


def join(*a, **k):
    if state["mode"] == "before":
        spin()
    return _phj(*a, **k)


def main() -> None:
    phj.radix_partition, phj._phj = partition, join
    calls = {"named": (None, "phj-tr"), "auto": (None, "auto"), "before": ("before", "phj-tr"),
             "after": ("after", "phj-tr")}
    for log2 in (24, 25):
        for payloads in (1, 2):
            r, s = make_join(JoinWorkload(log2_r=log2, log2_s=log2, payloads=payloads), cp)

            def call(name):
                state["mode"], state["done"] = calls[name][0], False
                gpujoin.join(s, r, "k", algorithm=calls[name][1])
            for name in calls:
                call(name)
            for _ in range(3):
                times = {name: [] for name in calls}
                for _ in range(60):
                    order = list(calls)
                    random.shuffle(order)
                    for name in order:
                        cp.cuda.Device().synchronize()
                        t0 = time.perf_counter()
                        call(name)
                        cp.cuda.Device().synchronize()
                        times[name].append(time.perf_counter() - t0)
                print(f"2^{log2} {payloads} payload(s), spin {D * 1e6:.0f} us: "
                      + "  ".join(f"{n} {statistics.median(v) * 1e6:.0f}" for n, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
