"""Ways for pageable host data to reach the GPU without the staging copy (issue 14's pass-1
ceiling): cudaHostRegister in place from several threads at once, and, where the driver runs in
HMM mode, a kernel reading pageable memory directly.  Prints GB/s for each."""
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import numpy as np

GB = 1e9


def register_rate(total: int, threads: int, piece: int) -> float:
    a = np.ones(total // 8, np.int64)  # touched: as a user's array is
    rt = cp.cuda.runtime
    base = a.ctypes.data
    n = total // piece

    def reg(i):
        rt.hostRegister(base + i * piece, piece, 1)  # portable

    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(reg, range(n)))
    dt = time.perf_counter() - t
    for i in range(n):
        rt.hostUnregister(base + i * piece)
    return total / dt / GB


def hmm_read(total: int) -> str:
    """A kernel summing a pageable NumPy array through its host pointer (HMM only)."""
    a = np.ones(total // 8, np.int64)
    k = cp.RawKernel(r'''
    extern "C" __global__ void s(const long long* p, long long n, unsigned long long* out) {
      long long acc = 0;
      for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc += p[i];
      atomicAdd(out, (unsigned long long)acc);
    }''', "s")
    out = cp.zeros(1, cp.uint64)
    res = []
    for _ in range(3):
        out[:] = 0
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        k((1056,), (512,), (a.ctypes.data, np.int64(a.size), out))
        cp.cuda.Device().synchronize()
        res.append(time.perf_counter() - t)
    ok = int(out.get()[0]) == a.size
    return f"HMM kernel read: {', '.join(f'{total / r / GB:.1f}' for r in res)} GB/s (first touch, then again), correct={ok}"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "hmm":
        print(hmm_read(int(sys.argv[2])))
        sys.exit(0)
    print(subprocess.run(["bash", "-c", "nvidia-smi -q | grep -i -E 'addressing|driver version'"],
                         capture_output=True, text=True).stdout)
    total = 8 << 30
    for threads, piece in ((1, 1 << 30), (4, 1 << 30), (8, 1 << 30), (8, 256 << 20), (16, 256 << 20)):
        print(f"cudaHostRegister {total >> 30} GiB, {threads} threads, {piece >> 20} MiB pieces: "
              f"{register_rate(total, threads, piece):.1f} GB/s", flush=True)
    r = subprocess.run([sys.executable, __file__, "hmm", str(4 << 30)], capture_output=True, text=True, timeout=120)
    print(r.stdout.strip() or r.stderr.strip()[-400:])
