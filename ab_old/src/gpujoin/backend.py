"""Devices and the algorithms each one offers."""

from __future__ import annotations

import importlib.util

#: Algorithms by device and operation, by their standard names (lower case).
_ALGORITHMS = {
    "cpu": {
        # cpu/join/phj.py: radix-partitioned hash join (default); merge.py: paper 002's parallel
        # merge join; bitmap.py: paper 002's bitmap joins (semi/anti joins of keys in [0, 2^32))
        "join": ["phj", "merge", "hash", "split", "bucket"],
        "group_by": ["pgb"],  # cpu/groupby/pgb.py: partitioned hash group-by
    },
    "cuda": {
        # cuda/join/: paper 003's PHJ (GFTR first: the default), SMJ, and the cuDF-style NPHJ
        # bitmap: paper 002's GPU bitmap join (semi/anti joins of keys in [0, 2^32))
        # triton: paper 004's out-of-core join of host data (outofcore/triton.py); hybrid:
        # paper 000's multi-GPU joins (dist/hybrid.py, dist/gsm.py: inner joins)
        "join": ["phj-tr", "phj-ur", "smj-tr", "smj-ur", "nphj", "bitmap", "triton", "hybrid", "gsm"],
        # cuda/groupby/: paper 003's HGB (the default), PGB and SGB
        "group_by": ["hgb", "pgb-tr", "pgb-ur", "sgb-tr", "sgb-de-tr", "sgb-ur"],
    },
}

#: The bitmap joins of paper 002 (CPU: hash, split, bucket; GPU: bitmap) answer semi and anti
#: joins only.
SEMI_ANTI_ONLY = frozenset({"hash", "split", "bucket", "bitmap"})
#: The GPU joins that stream host-resident tables (papers 004 and 000), not device tables.
HOST_STREAMING = frozenset({"triton", "hybrid", "gsm"})


def cuda_available() -> bool:
    """True when gpujoin's CUDA backend is present and a GPU with CuPy is usable."""
    if importlib.util.find_spec("gpujoin.cuda") is None:
        return False
    try:
        from .cuda import runtime  # type: ignore[attr-defined]

        return bool(runtime.device_count())
    except Exception:
        return False


def devices() -> list[str]:
    """Devices this process can run on, best first."""
    return (["cuda"] if cuda_available() else []) + ["cpu"]


def resolve_device(device: str, operation: str | None = None) -> str:
    """Map ``device`` ("auto", "cpu", "cuda") to the one that will run ``operation``.

    "auto" takes the best device that has an algorithm for ``operation`` ("join", "group_by").

    Raises
    ------
    ValueError
        An unknown device name.
    RuntimeError
        ``device="cuda"`` on a machine or build without the CUDA backend.
    """
    if device == "auto":
        return next(d for d in devices() if operation is None or _ALGORITHMS[d][operation])
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; use 'auto', 'cpu' or 'cuda'")
    if device == "cuda" and not cuda_available():
        raise RuntimeError(
            "device='cuda' is not available: this gpujoin has no usable CUDA backend (it needs an NVIDIA "
            "GPU, CuPy, and gpujoin's CUDA module); use device='cpu' or 'auto'"
        )
    if operation is not None and not _ALGORITHMS[device][operation]:
        raise RuntimeError(f"gpujoin has no {operation.replace('_', '-')} algorithm on device {device!r} yet; "
                           f"use device='cpu' or 'auto'")
    return device


def algorithms(device: str = "auto") -> dict[str, list[str]]:
    """The join and group-by algorithms available on ``device``, by standard name."""
    dev = resolve_device(device)
    return {op: list(names) for op, names in _ALGORITHMS[dev].items()}


def resolve_algorithm(operation: str, algorithm: str, device: str) -> str:
    """Check ``algorithm`` for ``operation`` on ``device``; "auto" picks the CPU default, and stays
    "auto" on the GPU, where plan/auto.py chooses per input.

    Raises
    ------
    ValueError
        An algorithm name unknown on this device, listing the valid ones.
    """
    names = _ALGORITHMS[device][operation]
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a str, got {type(algorithm).__name__}")
    algo = algorithm.lower()
    if algo == "auto":  # on the GPU the planner decides from statistics (plan/auto.py)
        return "auto" if device == "cuda" else names[0]
    if algo not in names:
        raise ValueError(f"unknown {operation.replace('_', '-')} algorithm {algorithm!r} for device "
                         f"{device!r}; valid: {['auto'] + names}")
    return algo
