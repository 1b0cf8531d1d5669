"""``install()``, called first by the CPU checks of DeviceTable code (tests/device_*_check.py,
each run in a process of its own): NumPy installed as CuPy, so that the host-side bookkeeping
of device tables, joins and group-bys runs without a GPU (no kernel can)."""

import sys
import types

import numpy as np


def install() -> None:
    cupy = types.ModuleType("cupy")
    cupy.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    cupy.asnumpy = np.asarray
    cupy.cuda = types.SimpleNamespace(Device=lambda *a: types.SimpleNamespace(synchronize=lambda: None, id=0))
    sys.modules["cupy"], sys.modules["cupyx"] = cupy, types.ModuleType("cupyx")
