"""Fill Numba's and CuPy's on-disk kernel caches in one process before pytest's workers start.

A fresh GPU machine has neither cache: each xdist worker then compiled the CPU engine's Numba
functions for every type signature its tests met (about 35 s of a test's 50 s, measured on an
H200 host), and every worker paid it again, so that tests/test_cuda_join.py did not finish in
270 s on four GPUs.  Compiled once here, the workers load them (under a second a test).
Usage: python3 scripts/warm_caches.py [cpu|cuda]   (cuda also warms the GPU algorithms)
"""

import sys
import time
import warnings

sys.path.insert(0, "tests")

from hypothesis.errors import NonInteractiveExampleWarning  # noqa: E402

import gpujoin  # noqa: E402
from strategies import join_pair  # noqa: E402
from test_groupby import groupby_table  # noqa: E402

HOWS = ("inner", "left", "right", "full", "semi", "anti")
AGGS = {"sv": ("v", "sum"), "cv": ("v", "count"), "n": (None, "size"), "mn": ("v", "min"), "mx": ("v", "max"),
        "av": ("v", "mean"), "sf": ("f", "sum"), "mnf": ("f", "min"), "mxf": ("f", "max"), "af": ("f", "mean"),
        "cf": ("f", "count"), "ms": ("s", "max"), "mns": ("s", "min"), "cs": ("s", "count")}


def main(device: str = "cuda", examples: int = 4) -> None:
    warnings.simplefilter("ignore", NonInteractiveExampleWarning)
    devices = [("cpu", None)]
    if device == "cuda":
        from gpujoin.cuda.groupby import ALGORITHMS as GB
        from gpujoin.cuda.join import ALGORITHMS as JOINS

        devices += [("cuda", a) for a in JOINS if a != "bitmap"]
    t0 = time.perf_counter()
    for key_type in ("int", "int32", "string", "composite"):
        on = ["k", "k2"] if key_type == "composite" else "k"
        for _ in range(examples):
            left, right = join_pair(max_rows=60, key_type=key_type).example()
            for how in HOWS:
                for dev, algo in devices:
                    kw = {"algorithm": algo} if algo else {}
                    gpujoin.join(left, right, on, how=how, device=dev, **kw)
    for _ in range(examples):
        table = groupby_table(max_rows=60).example()
        for by in (["k"], ["s"], ["k", "s"]):
            gpujoin.group_by(table, by, device="cpu").agg(**AGGS)
            for algo in (GB if device == "cuda" else ()):
                gpujoin.group_by(table, by, device="cuda", algorithm=algo).agg(**AGGS)
    print(f"caches warmed ({device}) in {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cuda")
