"""Would the radix shuffle's scatter writing a peer's rows straight into the peer's memory (NVLink
stores, as NCCL 2.28's LSA pointers allow) beat the copy engines (issue 16)?  One process, two
GPUs with peer access, the job's pattern on each: four chunks of 2^27 int64 (key, payload) rows
partitioned by a 9-bit digit whose top bit names the GPU, then a finishing 9-bit pass of 2^28
rows for each table (two chunks a table) once its rows have arrived.

- local: every row to the GPU's own buffer, nothing exchanged (the passes' floor);
- ce: as the job now: every row local, each chunk's rows for the peer then copied by the copy
  engines (cudaMemcpyPeerAsync) on a stream of their own;
- lsa: the peer's rows written by the scatter into the peer's buffer; the first table's finishing
  pass after the second table's scatters, on the same stream;
- lsa-side: the same, the first table's finishing pass on a second stream from its arrival,
  beside the second table's scatters.

Min of RUNS wall times (both GPUs done).  ``python3 scripts/profile_lsa_scatter.py [log2 chunk] [runs]``

On two H200s (2026-11-27, 2^27 rows a chunk, min of 5): local 16.23 ms, ce 23.76, lsa 26.82,
lsa-side 26.94 (another call: 16.17 / 23.70 / 26.78 / 26.88): the scatter's stores over NVLink
cost 3 ms more than copies by the copy engines (cudaMemcpyPeerAsync here, slower than NCCL's
copy-engine all-gather of the job), so the shuffle does not write into its peers' windows.
"""

import sys
import time

import cupy as cp

from gpujoin.cuda.primitives import Digits, exclusive_scan, radix_histogram, radix_partition, scatter_placed

LOG = int(sys.argv[1]) if len(sys.argv) > 1 else 27
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
N, C, G = 1 << LOG, 4, 2
DIG = Digits(bits=9)
HALF = 256  # digits from here go to the other GPU


def setup(g):
    with cp.cuda.Device(g):
        rng = cp.random.default_rng(g)
        keys = [rng.integers(0, 1 << 62, N, dtype=cp.int64) for _ in range(C)]
        vals = [cp.arange(N, dtype=cp.int64) + c * N for c in range(C)]
        counts = [radix_histogram(k, [v], DIG, stable=False) for k, v in zip(keys, vals)]
        offs = [exclusive_scan(c) for c in counts]
        tiles = counts[0].size // 512
        split = [int(o[HALF * tiles]) for o in offs]  # rows for this GPU, then the peer's
        bufs = [cp.empty(4 * N, cp.int64) for _ in range(C)]  # keys [0, 2N), values [2N, 4N): block g of each
        fin = [(rng.integers(0, 1 << 62, 2 * N, dtype=cp.int64), cp.arange(2 * N, dtype=cp.int64)) for _ in range(2)]
        main, side, copy = (cp.cuda.Stream(non_blocking=True) for _ in range(3))
        return dict(keys=keys, vals=vals, offs=offs, tiles=tiles, split=split, bufs=bufs, fin=fin, main=main,
                    side=side, copy=copy)


def placed(s, g, c, peer_buf, lsa):
    o = s["offs"][c] + g * N  # block g
    if lsa:
        o[HALF * s["tiles"]:-1] += (peer_buf.data.ptr - s["bufs"][c].data.ptr) // 8
    return o


def run(S, mode):
    lsa = mode.startswith("lsa")
    offs = []
    for g in range(G):
        with cp.cuda.Device(g):
            offs.append([placed(S[g], g, c, S[1 - g]["bufs"][c], lsa) for c in range(C)])
    for g in range(G):
        cp.cuda.Device(g).synchronize()
    t0 = time.perf_counter()
    arrived = [[None] * C for _ in range(G)]  # event after chunk c of GPU g reached the peer
    for c in range(C):
        for g in range(G):
            s = S[g]
            with cp.cuda.Device(g):
                b = s["bufs"][c]
                with s["main"]:
                    scatter_placed(s["keys"][c], [s["vals"][c]], DIG, offs[g][c], b[:2 * N], [b[2 * N:]])
                done = s["main"].record()
                if mode == "ce":
                    s["copy"].wait_event(done)
                    lo, n = g * N + s["split"][c], N - s["split"][c]
                    pb = S[1 - g]["bufs"][c]
                    for at in (0, 2 * N):
                        cp.cuda.runtime.memcpyPeerAsync(pb.data.ptr + (at + lo) * 8, 1 - g, b.data.ptr + (at + lo) * 8,
                                                        g, n * 8, s["copy"].ptr)
                    done = s["copy"].record()
                arrived[g][c] = done
        if c == 1 or c == 3:
            for g in range(G):
                s = S[g]
                with cp.cuda.Device(g):
                    st = s["side"] if (mode == "lsa-side" and c == 1) else s["main"]
                    for e in (arrived[1 - g][c - 1], arrived[1 - g][c]):
                        st.wait_event(e)
                    if c == 3 and mode == "lsa-side":
                        st.wait_event(s["side"].record())
                    with st:
                        k, v = s["fin"][c // 2]
                        radix_partition(k, [v], Digits(bits=9, shift=9), bounds=False, stable=False)
    for g in range(G):
        with cp.cuda.Device(g):
            for st in ("main", "side", "copy"):
                S[g][st].synchronize()
    return time.perf_counter() - t0


def check(S):
    """Both exchanges leave the same rows where they should be."""
    got = {}
    for mode in ("ce", "lsa"):
        for g in range(G):
            with cp.cuda.Device(g):
                for c in range(C):
                    S[g]["bufs"][c].fill(-1)
                cp.cuda.Device(g).synchronize()
        run(S, mode)
        got[mode] = []
        for g in range(G):  # (its own rows in block g, the peer's in the peer's block; by the copy
            with cp.cuda.Device(g):  # engines block g also keeps the rows it sent)
                h, sp = 1 - g, [S[1 - g]["split"][c] for c in range(C)]
                got[mode].append([int(S[g]["bufs"][c][g * N:g * N + S[g]["split"][c]].sum())
                                  + int(S[g]["bufs"][c][h * N + sp[c]:(h + 1) * N].sum()) for c in range(C)])
    print("same rows:", got["ce"] == got["lsa"], flush=True)


def main():
    with cp.cuda.Device(1):
        cp.cuda.runtime.deviceEnablePeerAccess(0)
    with cp.cuda.Device(0):
        cp.cuda.runtime.deviceEnablePeerAccess(1)
    S = [setup(g) for g in range(G)]
    check(S)
    for mode in ("local", "ce", "lsa", "lsa-side"):
        run(S, mode)
    best = {m: [] for m in ("local", "ce", "lsa", "lsa-side")}
    for _ in range(RUNS):
        for m in best:
            best[m].append(run(S, m))
    for m, ts in best.items():
        print(f"{m:9} min {min(ts) * 1e3:7.2f} ms  all {[round(t * 1e3, 2) for t in ts]}", flush=True)


if __name__ == "__main__":
    main()
