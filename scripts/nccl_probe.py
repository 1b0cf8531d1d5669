"""Probe of CuPy's NCCL bindings under mpirun: grouped send/recv all-to-all between the ranks."""
import time

import cupy as cp
from cupy.cuda import nccl
from mpi4py import MPI

w = MPI.COMM_WORLD
r, p = w.Get_rank(), w.Get_size()
cp.cuda.runtime.setDevice(r % cp.cuda.runtime.getDeviceCount())
print(r, "nccl version", nccl.get_version(), [a for a in dir(nccl) if not a.startswith("_")][:80], flush=True)
uid = w.bcast(nccl.get_unique_id() if r == 0 else None)
c = nccl.NcclCommunicator(p, uid, r)
print(r, [a for a in dir(c) if not a.startswith("_")], flush=True)
n = 1 << 28  # bytes per peer
s = cp.full(n * p, r, cp.uint8)
d = cp.empty(n * p, cp.uint8)
st = cp.cuda.Stream(non_blocking=True)
for it in range(4):
    w.Barrier()
    t0 = time.perf_counter()
    nccl.groupStart()
    for j in range(p):
        c.send(s.data.ptr + j * n, n, nccl.NCCL_UINT8, j, st.ptr)
        c.recv(d.data.ptr + j * n, n, nccl.NCCL_UINT8, j, st.ptr)
    nccl.groupEnd()
    st.synchronize()
    dt = time.perf_counter() - t0
    if r == 0:
        print(f"it {it}: {n * p / 2**30:.2f} GiB a rank, {dt * 1e3:.1f} ms, {n * (p - 1) / dt / 1e9:.1f} GB/s out of a rank",
              flush=True)
assert all(int(d[j * n]) == j for j in range(p))
print(r, "ok", flush=True)
