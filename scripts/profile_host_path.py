"""The host side of the streaming path on this machine: pageable->pinned copies by thread count,
cudaHostRegister of a pageable array (pin in place) and DMA from it, against pinned DMA."""
import time

import cupy as cp
import numpy as np

from gpujoin.outofcore import stream

GiB = 1 << 30
src = np.ones(4 * GiB, np.uint8)
dst = stream.pinned_empty(GiB, np.uint8)
for threads in (1, 4, 8, 16):
    stream.COPY_THREADS = threads
    stream._pool = None
    stream.parallel_copy(dst, src[:GiB])
    t0 = time.perf_counter()
    for _ in range(3):
        stream.parallel_copy(dst, src[:GiB])
    print(f"pageable->pinned copy, {threads:2} threads: {3 * GiB / (time.perf_counter() - t0) / 1e9:.1f} GB/s")
dev = cp.empty(4 * GiB, cp.uint8)
s = cp.cuda.Stream(non_blocking=True)
for size in (GiB, 4 * GiB):
    a = np.ones(size, np.uint8)
    t0 = time.perf_counter()
    cp.cuda.runtime.hostRegister(a.ctypes.data, size, 0)
    t1 = time.perf_counter()
    cp.cuda.runtime.memcpyAsync(dev.data.ptr, a.ctypes.data, size, 1, s.ptr)
    s.synchronize()
    t2 = time.perf_counter()
    cp.cuda.runtime.memcpyAsync(dev.data.ptr, a.ctypes.data, size, 1, s.ptr)
    s.synchronize()
    t3 = time.perf_counter()
    cp.cuda.runtime.hostUnregister(a.ctypes.data)
    t4 = time.perf_counter()
    print(f"register {size / GiB:.0f} GiB: {(t1 - t0) * 1e3:.0f} ms ({size / (t1 - t0) / 1e9:.1f} GB/s), DMA "
          f"{size / (t2 - t1) / 1e9:.1f} then {size / (t3 - t2) / 1e9:.1f} GB/s, unregister {(t4 - t3) * 1e3:.0f} ms")
t0 = time.perf_counter()
p = stream.pinned_empty(4 * GiB, np.uint8)
p[::4096] = 1
print(f"alloc_pinned 4 GiB + touch: {(time.perf_counter() - t0) * 1e3:.0f} ms")
