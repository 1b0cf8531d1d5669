"""``install()``, called first by the CPU checks of DeviceTable code (tests/device_*_check.py,
each run in a process of its own): NumPy installed as CuPy, so that the host-side bookkeeping
of device tables, joins and group-bys runs without a GPU (no kernel can).  ``compare`` and
``finish``: those checks' tally of differences from the CPU engine."""

import sys
import types

import numpy as np


def install() -> None:
    cupy = types.ModuleType("cupy")
    cupy.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    cupy.asnumpy = np.asarray
    cupy.cuda = types.SimpleNamespace(Device=lambda *a: types.SimpleNamespace(synchronize=lambda: None, id=0))
    sys.modules["cupy"], sys.modules["cupyx"] = cupy, types.ModuleType("cupyx")


def compare(got, want, what: str, failures: list, rel: float = 0.0) -> None:
    """``failures`` gains ``what`` and the first difference where the tables differ."""
    from gpujoin.testing import first_difference

    diff = first_difference(got, want, rel=rel)
    if diff is not None:
        failures.append(f"{what}: {diff[:400]}")


def finish(failures: list, done: str) -> None:
    """Print the first failures and fail, or print ``done``."""
    for f in failures[:20]:
        print(f)
    assert not failures, f"{len(failures)} differ from the CPU engine's"
    print(done)
