"""Calibration of the running GPU for the cost models: the microbenchmarks behind paper 003 Table 1.

``calibrate()`` measures, with CUDA events (median of 5 after a warm-up):
- B_G: a device-to-device copy (bytes read + written per second);
- random and sorted gathers of 2^27 4-byte items from a 2 GiB array: each gather's time, less
  the sequential index read and output write (8 bytes an item at B_G), gives the bandwidth of
  its 4-byte random reads, and its ratio to B_G (Table 1's model: B_G = 24 B_R on the A100);
- L1 and L2 read bandwidth (kernels/bandwidth.cu): coalesced 16-byte reads that hit L1 (each
  block re-reads a 16 KiB window) or L2 (all threads sweep a power-of-two array of at most a
  quarter of L2, bypassing L1), as ratios to B_G (the paper's A100: 12 and 4.5).
``measure_links`` adds the host's links: pinned PCIe per GPU and on all at once, the staging
copy alone and beside the GPUs' DMA reads (pass 1's condition), and GPU-to-GPU copies (the multi-GPU models' rates, paper 000 §3.4).
The result is cached per GPU model in ``<cache>/calibration.json`` (the TPC-H cache folder) and
reused until ``calibrate(force=True)`` or ``gpujoin calibrate --force``.  A cache written before
the L1/L2 kernels existed (gathers from cache-sized arrays, which measured the gather kernel's
issue rate instead) keeps the paper's cache ratios until it is measured again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from .cost import A100, H200_ANCHORS, DeviceModel

N_ITEMS = 1 << 27


def cache_file() -> Path:
    from ..tpch.data import cache_dir

    return cache_dir() / "calibration.json"


def measure(n: int = N_ITEMS) -> dict:
    """Run the microbenchmarks on the current GPU; bandwidths in bytes/s, rates in items/s."""
    import cupy as cp

    from ..cuda.runtime import device_properties, event_time as _timed

    props = device_properties(cp.cuda.Device().id)
    src = cp.arange(n << 2, dtype=cp.uint32)  # 2 GiB
    dst = cp.empty(n << 2, dtype=cp.uint32)
    b_g = 2 * src.nbytes / _timed(lambda: cp.copyto(dst, src))
    rng = cp.random.default_rng(7)
    idx = rng.integers(0, src.size, n, dtype=cp.int64).astype(cp.int32)
    out = cp.empty(n, cp.uint32)
    random_rate = n / _timed(lambda: cp.take(src, idx, out=out))
    sorted_idx = cp.sort(idx)
    sorted_rate = n / _timed(lambda: cp.take(src, sorted_idx, out=out))
    cache_bw = cache_bandwidth(src, props)

    def ratio(rate):  # B_level / B_G from a gather rate (Table 1's model)
        per_item = 1.0 / rate - 8.0 / b_g
        return (4.0 / per_item) / b_g if per_item > 0 else float("inf")

    return {
        "name": props["name"], "b_g": b_g, "gather_random_items_per_s": random_rate,
        "gather_sorted_items_per_s": sorted_rate, "ratio_random": 1.0 / ratio(random_rate),
        **cache_bw, "ratio_l1": cache_bw["l1_bytes_per_s"] / b_g, "ratio_l2": cache_bw["l2_bytes_per_s"] / b_g,
        "l2_bytes": props["l2_bytes"],
    }


L1_WINDOW_BYTES, BLOCKS_PER_SM, THREADS = 16 * 1024, 8, 256


def cache_bandwidth(buf, props: dict) -> dict:
    """L1 and L2 read bandwidth (bytes/s) of the current GPU, read from ``buf`` (a CuPy array
    of at least sms * BLOCKS_PER_SM * L1_WINDOW_BYTES and L2/4 bytes), median of 5 runs."""
    import cupy as cp

    from ..cuda.runtime import event_time, kernel

    grid = props["sms"] * BLOCKS_PER_SM
    out = cp.empty(THREADS, cp.uint32)
    window = L1_WINDOW_BYTES // 16
    reps = 4096
    l1 = kernel("bandwidth.cu", "read_l1")
    t1 = event_time(lambda: l1((grid,), (THREADS,), (buf, np.uint32(window), np.int32(reps), out)))
    words = 1 << ((props["l2_bytes"] // 4 // 16).bit_length() - 1)
    l2 = kernel("bandwidth.cu", "read_l2")
    reps2 = 1024
    t2 = event_time(lambda: l2((grid,), (THREADS,), (buf, np.uint64(words), np.int32(reps2), out)))
    return {"l1_bytes_per_s": grid * THREADS * reps * 16 / t1, "l2_bytes_per_s": grid * THREADS * reps2 * 16 / t2,
            "l2_test_bytes": words * 16}


def measure_links(gpus: list[int], nbytes: int = 1 << 30, reps: int = 5) -> dict:
    """GB/s (decimal) of pinned host-to-device copies on each GPU alone and on every GPU at once
    (are the PCIe links independent?); the host's staging copy (pageable into pinned) alone and
    beside the GPUs' DMA reads; both directions of the link at once (``duplex``: host-to-device
    plus device-to-host bytes a second, one GPU and every GPU together); and device-to-device
    copies between the first two GPUs (the peer link), one way and both ways at once."""
    import cupy as cp

    from ..cuda.runtime import event_time
    from ..dist.devices import enable_peer_access, on_each
    from ..outofcore.stream import parallel_copy, pinned_empty

    host = pinned_empty(nbytes, np.uint8)
    host[:] = 1
    bufs, streams = {}, {}
    for g in gpus:
        with cp.cuda.Device(g):
            bufs[g] = (cp.empty(nbytes, cp.uint8), cp.empty(nbytes, cp.uint8))
            streams[g] = cp.cuda.Stream(non_blocking=True)
    h2d = lambda g, src=host: cp.cuda.runtime.memcpyAsync(bufs[g][0].data.ptr, src.ctypes.data,  # noqa: E731
                                                          nbytes, 1, streams[g].ptr)
    out = {}
    for g in gpus:
        with cp.cuda.Device(g):
            out[f"h2d_gpu{g}_GBps"] = nbytes / event_time(lambda: h2d(g), reps, streams[g]) / 1e9
    pins = [pinned_empty(nbytes, np.uint8) for _ in gpus]
    for p in pins:
        p[:] = 1
    # every GPU at once, each reading its own buffer as pass 1's chunks are, and all reading one
    # (the probe's earlier way: 154-174 GB/s on four H200s, a buffer each 173-190)
    for name, src_of in (("h2d_all_GBps", lambda i: pins[i]), ("h2d_all_one_buffer_GBps", lambda i: host)):
        t0 = time.perf_counter()
        on_each(gpus, lambda i: [h2d(gpus[i], src_of(i)) for _ in range(reps)] and streams[gpus[i]].synchronize())
        out[name] = len(gpus) * reps * nbytes / (time.perf_counter() - t0) / 1e9
    # the staging copy (pageable into pinned, the copy threads shared) with every GPU's thread at once
    src = np.ones(nbytes, np.uint8)
    for ids, name in (([gpus[0]], "host_in_1_GBps"), (gpus, "host_in_all_GBps")):
        t0 = time.perf_counter()
        on_each(ids, lambda i: [parallel_copy(pins[i], src) for _ in range(reps)])
        out[name] = len(ids) * reps * nbytes / (time.perf_counter() - t0) / 1e9
    # the same copy while each GPU's copy engine reads another pinned buffer, as in pass 1: on
    # some hosts the DMA's reads halve it (two H200s: 52 GB/s alone, 20-27 inside pass 1), on
    # others they leave it be (an H100 host: 34 alone, 31 inside pass 1)
    def under_dma(i):
        g = ids[i]
        with cp.cuda.Device(g):
            for _ in range(4 * reps):  # longer than the copies below at any host rate
                h2d(g)
            t = time.perf_counter()
            for _ in range(reps):
                parallel_copy(pins[i], src)
            dt = time.perf_counter() - t
            streams[g].synchronize()
        return dt

    for ids, name in (([gpus[0]], "host_in_dma_1_GBps"), (gpus, "host_in_dma_all_GBps")):
        out[name] = len(ids) * reps * nbytes / max(on_each(ids, under_dma)) / 1e9
    src = None  # noqa: F841 (freed before the joins run)
    # both directions of each link at once (pass 1 sends the spill out while chunks come in):
    # host-to-device and device-to-host on two streams, one GPU alone and every GPU at once
    back = {}  # each GPU's device-to-host stream

    def duplex(i):
        g = ids[i]
        with cp.cuda.Device(g):
            t = time.perf_counter()
            for _ in range(reps):
                h2d(g)
                cp.cuda.runtime.memcpyAsync(pins[i].ctypes.data, bufs[g][1].data.ptr, nbytes, 2, back[g].ptr)
            streams[g].synchronize()
            back[g].synchronize()
            return time.perf_counter() - t

    for g in gpus:
        with cp.cuda.Device(g):
            back[g] = cp.cuda.Stream(non_blocking=True)
    for ids, name in (([gpus[0]], "duplex_1_GBps"), (gpus, "duplex_all_GBps")):
        out[name] = 2 * len(ids) * reps * nbytes / max(on_each(ids, duplex)) / 1e9
    pins = None  # noqa: F841
    if len(gpus) > 1:
        a, b = gpus[:2]
        out["peer_access"] = enable_peer_access([a, b])[a, b]
        copy = lambda src, dst, s: cp.cuda.runtime.memcpyAsync(bufs[dst][1].data.ptr,  # noqa: E731
                                                               bufs[src][0].data.ptr, nbytes, 4, s.ptr)
        with cp.cuda.Device(b):
            out["p2p_GBps"] = nbytes / event_time(lambda: copy(a, b, streams[b]), reps, streams[b]) / 1e9
        t0 = time.perf_counter()
        on_each([a, b], lambda i: [copy((a, b)[1 - i], (a, b)[i], streams[(a, b)[i]]) for _ in range(reps)]
                and streams[(a, b)[i]].synchronize())
        out["p2p_bidirectional_GBps"] = 2 * reps * nbytes / (time.perf_counter() - t0) / 1e9
    bufs.clear()
    host = None  # noqa: F841 (freed before the joins run)
    for g in gpus:
        with cp.cuda.Device(g):
            cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()
    return out


def link_rates() -> dict:
    """The calibrated link rates for ``Placement.predict`` (bytes/s: ``pcie`` one GPU's pinned
    host-to-device copy, ``pcie_all`` every GPU's at once, ``p2p`` GPU to GPU, ``host_in`` the
    staging copy of one GPU's thread while that GPU's DMA reads pinned memory, ``duplex_1`` /
    ``duplex_all``) from the cache of this GPU model; {} when it holds none (the placement
    module's constants stand)."""
    try:
        import cupy as cp

        from ..cuda.runtime import device_properties

        links = _load().get(device_properties(cp.cuda.Device().id)["name"], {}).get("links") or {}
    except Exception:
        return {}
    out = {}
    if "h2d_gpu0_GBps" in links:
        out["pcie"] = links["h2d_gpu0_GBps"] * 1e9
    if "h2d_all_GBps" in links:
        out["pcie_all"] = links["h2d_all_GBps"] * 1e9
    if "p2p_GBps" in links:
        out["p2p"] = links["p2p_GBps"] * 1e9
    if "host_in_dma_1_GBps" in links:
        out["host_in"] = links["host_in_dma_1_GBps"] * 1e9
    for k in ("duplex_1", "duplex_all"):
        if f"{k}_GBps" in links:
            out[k] = links[f"{k}_GBps"] * 1e9
    return out


def _load() -> dict:
    f = cache_file()
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return {}


def calibrate(force: bool = False) -> dict:
    """The current GPU's calibration, measured now when ``force`` or not cached yet.

    Raises
    ------
    RuntimeError
        No usable GPU.
    """
    from ..backend import resolve_device
    from ..cuda.runtime import device_properties

    resolve_device("cuda")
    import cupy as cp

    name = device_properties(cp.cuda.Device().id)["name"]
    cached = _load()
    if name in cached and not force:
        return cached[name]
    result = measure()
    from ..dist.devices import device_count

    result["links"] = measure_links(list(range(max(1, device_count()))))
    cached[name] = result
    f = cache_file()
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(cached, indent=1))
    tmp.replace(f)  # never half a file
    _MODELS.clear()
    return result


#: device_model's results by GPU name and by device number: the planner asks once per call, the
#: file is read once.
_MODELS: dict[str | int, DeviceModel] = {}


def device_model() -> DeviceModel:
    """The cost models' constants for the current GPU: its cached calibration, else ANCHORS.md's H200."""
    try:
        import cupy as cp

        dev = cp.cuda.runtime.getDevice()
    except Exception:
        return H200_ANCHORS
    got = _MODELS.get(dev)  # (by device number first: the planner asks each call, 5 us cold by name)
    if got is None:
        from ..cuda.runtime import device_properties

        name = device_properties(dev)["name"]
        if name not in _MODELS:
            _MODELS[name] = _device_model(name)
        got = _MODELS[dev] = _MODELS[name]
    return got


def _device_model(name: str) -> DeviceModel:
    c = _load().get(name)
    if not c:
        return H200_ANCHORS
    # a cache from before the L1/L2 kernels holds gather rates instead: the paper's ratios stand
    caches = "l1_bytes_per_s" in c
    l1, l2 = c["ratio_l1"], c["ratio_l2"]
    return DeviceModel(name, c["b_g"], c["ratio_random"], l1 if caches else A100.ratio_l1,
                       l2 if caches else A100.ratio_l2, l2_bytes=c["l2_bytes"],
                       source="gpujoin calibrate" + ("" if caches else " (cache ratios: paper 003's A100)"))
