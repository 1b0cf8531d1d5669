"""Ways for a result in GPU memory to reach fresh pageable host columns (issue 14's
materialized mode, the ring's pairs): through pinned slots and a host copy (the Downloader),
after the columns are faulted in, or by DMA straight into the columns once they are registered
with CUDA in place.  Prints the time of each step and GB/s.

    PYTHONPATH=src python scripts/probe_host_output.py [GiB]
"""
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import numpy as np

from gpujoin.outofcore import stream

GiB = 1 << 30
_mm = (getattr(np, "_core", None) or np.core).multiarray
size = int(float(sys.argv[1]) * GiB) if len(sys.argv) > 1 else 8 * GiB
dev = cp.arange(size // 8, dtype=cp.int64)
rt = cp.cuda.runtime
threads = stream.COPY_THREADS
st = stream.Streams(3)


def show(name, steps):
    total = sum(t for _, t in steps)
    parts = ", ".join(f"{k} {t * 1e3:.0f} ms" for k, t in steps)
    print(f"{name:58} {total * 1e3:7.0f} ms {size / total / 1e9:6.1f} GB/s  ({parts})", flush=True)


def check(a):
    assert a[0] == 0 and a[-1] == size // 8 - 1 and a[size // 16] == size // 16


def slots(name, prefault=False, huge=True):
    _mm._set_madvise_hugepage(huge)
    t0 = time.perf_counter()
    a = np.empty(size // 8, np.int64)
    steps = []
    if prefault:
        n = a.size
        b = np.linspace(0, n, threads + 1).astype(np.int64)
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(lambda i: a[b[i]:b[i + 1]].fill(0), range(threads)))
        steps.append(("fault", time.perf_counter() - t0))
    t1 = time.perf_counter()
    dl = stream.Downloader(st)
    dl.get([dev], outs=[a])
    steps.append(("slots", time.perf_counter() - t1))
    check(a)
    show(name, steps)
    _mm._set_madvise_hugepage(True)


def registered(name, piece=256 << 20, prefault=False):
    a = np.empty(size // 8, np.int64)
    base, n = a.ctypes.data, a.nbytes
    steps = []
    t0 = time.perf_counter()
    if prefault:
        b = np.linspace(0, a.size, threads + 1).astype(np.int64)
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(lambda i: a[b[i]:b[i + 1]].fill(0), range(threads)))
        steps.append(("fault", time.perf_counter() - t0))
        t0 = time.perf_counter()
    cuts = list(range(0, n, piece))
    if piece >= n:
        rt.hostRegister(base, n, 0)
    else:
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(lambda lo: rt.hostRegister(base + lo, min(piece, n - lo), 0), cuts))
    steps.append(("register", time.perf_counter() - t0))
    t0 = time.perf_counter()
    for lo in cuts:  # one DMA a registration: a copy may not span two of them
        rt.memcpyAsync(base + lo, dev.data.ptr + lo, min(piece, n - lo), rt.memcpyDeviceToHost, st.copy_out.ptr)
    st.copy_out.synchronize()
    steps.append(("DMA", time.perf_counter() - t0))
    t0 = time.perf_counter()
    if piece >= n:
        rt.hostUnregister(base)
    else:
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(lambda lo: rt.hostUnregister(base + lo), cuts))
    steps.append(("unregister", time.perf_counter() - t0))
    check(a)
    show(name, steps)


def pinned_pool(name):
    t0 = time.perf_counter()
    a = stream.pinned_empty(size // 8, np.int64)
    t1 = time.perf_counter()
    rt.memcpyAsync(a.ctypes.data, dev.data.ptr, a.nbytes, rt.memcpyDeviceToHost, st.copy_out.ptr)
    st.copy_out.synchronize()
    t2 = time.perf_counter()
    check(a)
    show(name, [("cudaHostAlloc", t1 - t0), ("DMA", t2 - t1)])


def touch(a, nthreads, stride=4096):
    """Fault ``a`` in: one byte a page, from ``nthreads`` threads."""
    u = a.reshape(-1).view(np.uint8)
    b = (np.linspace(0, u.size // stride, nthreads + 1).astype(np.int64)) * stride
    with ThreadPoolExecutor(nthreads) as ex:
        list(ex.map(lambda i: u[b[i]:b[i + 1]:stride].fill(0), range(nthreads)))


def beside_staging(name, fault_threads):
    """pass 1's staging copy (pageable to pinned, all threads) while ``fault_threads`` fault the
    output in (0: the copy alone), then the slots' copy into the faulted output."""
    src = np.ones(size, np.uint8)
    pin = stream.pinned_empty(256 << 20, np.uint8)
    out = np.empty(size // 8, np.int64)
    done = {}

    def fault():
        t = time.perf_counter()
        touch(out, fault_threads)
        done["fault"] = time.perf_counter() - t

    t0 = time.perf_counter()
    with ThreadPoolExecutor(1) as ex:
        f = ex.submit(fault) if fault_threads else None
        for lo in range(0, size, pin.size):
            stream.parallel_copy(pin, src[lo:lo + pin.size])
        staging = time.perf_counter() - t0
        if f:
            f.result()
    t1 = time.perf_counter()
    stream.Downloader(st).get([dev], outs=[out])
    slots_t = time.perf_counter() - t1
    check(out)
    show(name, [("staging", staging), ("fault (beside)", done.get("fault", 0) * 0), ("slots", slots_t)])
    print(f"{'':58} fault alone took {done.get('fault', 0) * 1e3:.0f} ms of it", flush=True)


print(open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip(),
      "| defrag:", open("/sys/kernel/mm/transparent_hugepage/defrag").read().strip(),
      "| numpy madvise:", _mm._get_madvise_hugepage(), "| threads:", threads, flush=True)
if len(sys.argv) > 2 and sys.argv[2] == "beside":
    for rnd in range(2):
        for ft in (0, 2, 4, 8, 16):
            beside_staging(f"staging copy, {ft} threads faulting the output beside", ft)
    sys.exit()
for rnd in range(2):
    print(f"-- round {rnd}, {size / GiB:.0f} GiB", flush=True)
    slots("slots (Downloader), np.empty, MADV_HUGEPAGE")
    slots("slots, np.empty without MADV_HUGEPAGE", huge=False)
    slots("slots, columns faulted first by threads", prefault=True)
    t = time.perf_counter(); a = np.empty(size // 8, np.int64); touch(a, threads)
    show("fault only, a byte a page, by threads", [("touch", time.perf_counter() - t)]); del a
    registered("registered in 256 MiB pieces by threads, DMA", piece=256 << 20)
    registered("registered in 1 GiB pieces by threads, DMA", piece=GiB)
    registered("registered whole, one call, DMA", piece=size)
    registered("faulted by threads, registered in pieces, DMA", prefault=True)
    if rnd == 0:
        pinned_pool("cudaHostAlloc (fresh), DMA")
print("AnonHugePages:", [ln for ln in open("/proc/meminfo") if "AnonHuge" in ln][0].split()[1], "kB")
