"""CUPTI timelines for the profiling scripts: PyTorch's profiler records CuPy's kernels and copies
too.  :func:`record` runs a function under it and returns its device events and CUDA calls."""

import json
import os
import tempfile


def record(fn):
    """(result, device events, CUDA calls, ranges) of ``fn()``: chrome-trace events, each with
    ts/dur in µs and args (device, stream, bytes); ranges: ``torch.profiler.record_function``'s."""
    import torch.profiler as tp

    with tp.profile(activities=[tp.ProfilerActivity.CPU, tp.ProfilerActivity.CUDA]) as prof:
        out = fn()
    path = os.path.join(tempfile.gettempdir(), f"gpujoin_trace_{os.getpid()}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)["traceEvents"]
    os.unlink(path)
    ev = [e for e in trace if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    api = [e for e in trace if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    ranges = [e for e in trace if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    return out, ev, api, ranges


def kind(e) -> str:
    """kernel, memset, or the copy's direction (HtoD, DtoH, PtoP, DtoD)."""
    if e["cat"] != "gpu_memcpy":
        return "kernel" if e["cat"] == "kernel" else "memset"
    return next((k for k in ("HtoD", "DtoH", "PtoP", "DtoD") if k in e["name"]), "copy")


def union(iv: list) -> float:
    """Length covered by the intervals [(start, end)]."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(iv):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def merged(iv: list) -> list:
    """The intervals [(start, end)] merged where they overlap."""
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def both(iv1: list, iv2: list) -> float:
    """Length covered by both sets of intervals at once."""
    total, a, b = 0.0, merged(iv1), merged(iv2)
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def gaps(iv: list, lo: float, hi: float) -> list:
    """The idle stretches [(start, length)] of [lo, hi) that no interval covers."""
    out, end = [], lo
    for a, b in sorted(iv):
        if a > end:
            out.append((end, a - end))
        end = max(end, b)
    if hi > end:
        out.append((end, hi - end))
    return out
