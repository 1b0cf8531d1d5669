"""Where a 2^24-row join's time goes, auto beside the algorithm it picks named (issue 17 item 3):
CUPTI timelines (PyTorch's profiler, ``scripts/cupti.py``) of a loop of calls through
``gpujoin.join`` on paper 001's random workload, one and two payload columns; for each call,
its wall time, when its first kernel starts, the GPU's busy time, the GPU's idle time between
its first and last kernels, and how long after its last kernel the call returns (microseconds,
medians over the recorded calls).  Without the profiler each kind of call is timed too (median of
random-order rounds), since CUPTI's callbacks add host time to every launch.

    PYTHONPATH=src python3 scripts/timeline_item3.py [log2 rows] [calls]
"""

import statistics
import sys

import cupy as cp
import torch.profiler as tp

sys.path.insert(0, "scripts")
from cupti import record, union  # noqa: E402
from profile_item3 import pairs  # noqa: E402
from profile_planner_host import random_rounds  # noqa: E402

LOG = int(sys.argv[1]) if len(sys.argv) > 1 else 24
CALLS = int(sys.argv[2]) if len(sys.argv) > 2 else 12


def cases():
    """(label, call) of auto and the named choice for the joins of profile_item3.pairs."""
    return [(f"{label.split(', ')[1]} {which}", fn) for label, auto, named in pairs(LOG) if "join" in label
            for which, fn in (("auto", auto), (label.rsplit(", ", 1)[1], named))]


def traced(calls):
    def loop():
        for i in range(CALLS):
            for label, fn in calls:
                cp.cuda.Device().synchronize()
                with tp.record_function(f"{label}#{i}"):
                    fn()
                    cp.cuda.Device().synchronize()
    _, ev, api, ranges = record(loop)
    rows = {}
    for r in ranges:
        label = r["name"].rsplit("#", 1)[0]
        a, b = r["ts"], r["ts"] + r["dur"]
        ks = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if a <= e["ts"] < b)
        if not ks:
            continue
        first, last = ks[0][0] - a, b - max(e for _, e in ks)
        busy = union(ks)
        rows.setdefault(label, []).append((r["dur"], first, busy, (max(e for _, e in ks) - ks[0][0]) - busy, last,
                                           len(ks)))
    return rows


def main():
    calls = cases()
    for _, fn in calls * 3:
        fn()
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), f"2^{LOG} rows a side", flush=True)
    print("  no profiler (60 random-order rounds):")
    random_rounds(list(calls), 60, width=24)
    rows = traced(calls)
    print("  traced (medians, us): wall, first kernel at, GPU busy, idle between kernels, "
          "after the last kernel, kernels")
    for label, rs in sorted(rows.items()):
        med = [statistics.median(x[i] for x in rs[2:]) for i in range(6)]
        print(f"  {label:20} wall {med[0]:8.1f}  first {med[1]:7.1f}  busy {med[2]:8.1f}  gaps {med[3]:7.1f}  "
              f"tail {med[4]:7.1f}  kernels {med[5]:.0f}", flush=True)


if __name__ == "__main__":
    main()
