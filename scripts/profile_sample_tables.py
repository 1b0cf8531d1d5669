"""The planner's sample tables on the GPU, kernel by kernel (issue 17 item 3): where the
summary block's and the match stages' time goes.  Each variant timed in a CUDA graph of REPS
launches (no host gaps between them), minimum of 5.

--summary: one block of 1024 threads summarizing 4,096 int64 keys in a shared-memory table of
8,192 slots, as groupby.cu's sample_counts does (atomicCAS inserts), beside the loads alone,
plain stores (racy: timing only), and CAS variants.  --stage: 2^16 keys, one a thread, 64 blocks,
into a global table of 2^17 int64 slots, as match_stages does: CAS inserts, plain stores (racy),
lookups one slot a step or a 32-byte bucket a step.  Without an argument, both."""

import sys
from pathlib import Path

import cupy as cp
import numpy as np

import gpujoin.cuda.kernels

REPS = 100

# gpujoin's own types and hash (kernels/common.cuh)
COMMON = '''
#include "common.cuh"
#define SENT ((i64)0x8000000000000000ull)
'''
OPTIONS = ("-std=c++17", f"-I{Path(gpujoin.cuda.kernels.__file__).parent}")

SUMMARY_SRC = COMMON + r'''
template <int MODE>
__global__ void __launch_bounds__(1024) summ(const i64* __restrict__ keys, int n, i64 step, u64* out, u32 slots) {
    extern __shared__ __align__(16) unsigned char dyn[];
    i64* table = reinterpret_cast<i64*>(dyn);
    u32* t32 = reinterpret_cast<u32*>(dyn);
    u32* counts = reinterpret_cast<u32*>(dyn + slots * (MODE == 2 ? 4 : 8));
    __shared__ u32 tally[5];
    for (u32 j = threadIdx.x; j < slots; j += blockDim.x) {
        if (MODE == 2) t32[j] = 0; else table[j] = SENT;
        counts[j] = 0;
    }
    if (threadIdx.x < 5) tally[threadIdx.x] = threadIdx.x == 4 ? 0xffffffffu : 0u;
    __syncthreads();
    const u32 mask = slots - 1;
    u64 sink = 0;
    for (int base = 0; base < n; base += 8 * (int)blockDim.x) {
        i64 ks[8];
        if (MODE == 6 || MODE == 7) {
            u32 pos[8], pending = 0;
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int i = base + u * (int)blockDim.x + (int)threadIdx.x;
                pos[u] = 0;
                if (i < n) { ks[u] = keys[(i64)i * step]; pending |= 1u << u; }
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) if (pending >> u & 1u) pos[u] = hash_key(ks[u]) & mask;
            while (pending) {
                i64 got[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    if (!(pending >> u & 1u)) continue;
                    got[u] = MODE == 7 ? table[pos[u]] : SENT;
                    if (got[u] == SENT) got[u] = (i64)atomicCAS((u64*)&table[pos[u]], (u64)SENT, (u64)ks[u]);
                }
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    if (!(pending >> u & 1u)) continue;
                    if (got[u] == SENT || got[u] == ks[u]) { atomicAdd(&counts[pos[u]], 1u); pending &= ~(1u << u); }
                    else pos[u] = (pos[u] + 1) & mask;
                }
            }
            continue;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = base + u * (int)blockDim.x + (int)threadIdx.x;
            if (i < n) ks[u] = keys[(i64)i * step];
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            if (base + u * (int)blockDim.x + (int)threadIdx.x >= n) break;
            const i64 k = ks[u];
            if (MODE == 0) { sink += (u64)k; continue; }
            if (MODE == 2) {  // 32-bit fingerprints (hash | 1, never 0)
                const u32 f = hash_key(k) | 1u;
                u32 s = hash_key(k) & mask;
                while (true) {
                    u32 cur = t32[s];
                    if (cur == 0) { cur = atomicCAS(&t32[s], 0u, f); if (cur == 0) break; }
                    if (cur == f) break;
                    s = (s + 1) & mask;
                }
                atomicAdd(&counts[s], 1u);
                continue;
            }
            u32 s = hash_key(k) & mask;
            if (MODE == 5) {  // plain stores (racy; timing only)
                while (table[s] != SENT && table[s] != k) s = (s + 1) & mask;
                table[s] = k;
                atomicAdd(&counts[s], 1u);
                continue;
            }
            while (true) {
                i64 cur = table[s];
                if (cur == SENT) {
                    cur = (i64)atomicCAS((u64*)&table[s], (u64)SENT, (u64)k);
                    if (cur == SENT) break;
                }
                if (cur == k) break;
                s = (s + 1) & mask;
            }
            if (MODE != 3) atomicAdd(&counts[s], 1u);
        }
    }
    __syncthreads();
    if (MODE == 4) { if (threadIdx.x == 0) out[0] = sink; return; }
    u32 d = 0, rep = 0, top = 0, least = 0xffffffffu;
    for (u32 j = threadIdx.x; j < slots; j += blockDim.x) {
        const u32 c = counts[j];
        if (!c) continue;
        ++d; rep += c > 1 ? c : 0u; top = max(top, c); least = min(least, c);
    }
    d = __reduce_add_sync(FULL_MASK, d);
    rep = __reduce_add_sync(FULL_MASK, rep);
    top = __reduce_max_sync(FULL_MASK, top);
    least = __reduce_min_sync(FULL_MASK, least);
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&tally[1], d); atomicAdd(&tally[2], rep); atomicMax(&tally[3], top); atomicMin(&tally[4], least);
    }
    __syncthreads();
    if (threadIdx.x == 0) { out[0] = tally[1]; out[1] = tally[2]; out[2] = tally[3]; out[3] = tally[4] + sink; }
}
'''
STAGE_SRC = COMMON + r'''
template <int MODE>
__global__ void __launch_bounds__(1024) stage(const i64* __restrict__ keys, int n, i64 step, i64* table, u32 mask,
                                              u64* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (MODE == 9) {  // fill
        for (int j = i; j <= (int)mask; j += gridDim.x * blockDim.x) table[j] = SENT;
        return;
    }
    if (i >= n) return;
    const i64 k = keys[(i64)i * step];
    u32 s = hash_key(k) & mask;
    unsigned long long c = 0;
    if (MODE == 0) { c = (u64)k; }
    else if (MODE == 1) {  // CAS insert
        while (true) {
            i64 cur = table[s];
            if (cur == SENT) { cur = (i64)atomicCAS((u64*)&table[s], (u64)SENT, (u64)k); if (cur == SENT) { c = 1; break; } }
            if (cur == k) break;
            s = (s + 1) & mask;
        }
    } else if (MODE == 2) {  // CAS without the read first
        while (true) {
            i64 cur = (i64)atomicCAS((u64*)&table[s], (u64)SENT, (u64)k);
            if (cur == SENT) { c = 1; break; }
            if (cur == k) break;
            s = (s + 1) & mask;
        }
    } else if (MODE == 3) {  // plain store (racy)
        while (table[s] != SENT && table[s] != k) s = (s + 1) & mask;
        table[s] = k; c = 1;
    } else if (MODE == 5 || MODE == 6) {  // buckets of 4 slots (a 32-byte sector) read at once
        const u32 nb = (mask + 1) >> 2;
        u32 b = (hash_key(k) >> 2) & (nb - 1);
        while (true) {
            const longlong2* q = reinterpret_cast<const longlong2*>(table + 4 * (u64)b);
            const longlong2 x = __ldcg(q), y = __ldcg(q + 1);
            i64 e[4] = {x.x, x.y, y.x, y.y};
            int empty = -1; bool hit = false;
#pragma unroll
            for (int j = 0; j < 4; ++j) { hit |= e[j] == k; if (empty < 0 && e[j] == SENT) empty = j; }
            if (hit) { c = MODE == 6; break; }
            if (MODE == 6) { if (empty >= 0) break; b = (b + 1) & (nb - 1); continue; }
            if (empty < 0) { b = (b + 1) & (nb - 1); continue; }
            const i64 cur = (i64)atomicCAS((u64*)&table[4 * (u64)b + empty], (u64)SENT, (u64)k);
            if (cur == SENT) { c = 1; break; }
            if (cur == k) break;
            // another key took the slot: read the bucket again
        }
    } else if (MODE == 4) {  // probe (read only)
        while (true) { const i64 e = __ldcg(&table[s]); if (e == k) { c = 1; break; } if (e == SENT) break; s = (s + 1) & mask; }
    }
    for (int o = 16; o; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(out, c);
}
'''

def timed(launch):
    """Per-iteration GPU time of `launch` (some launches), captured REPS times in a CUDA graph:
    no host launch gaps."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        launch()
        stream.synchronize()
        stream.begin_capture()
        for _ in range(REPS):
            launch()
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        best = []
        for _ in range(5):
            e0.record(stream)
            graph.launch(stream)
            e1.record(stream)
            e1.synchronize()
            best.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / REPS)
    return min(best)


# A summary by sorting instead (CUB's BlockRadixSort of (hash, key) pairs, then the runs' heads):
# the sort's time, for the choice between it and the CAS inserts
SORT_SRC = COMMON + r'''
#include <cub/block/block_radix_sort.cuh>
template <int ITEMS>
__global__ void __launch_bounds__(1024) sorted_summary(const i64* __restrict__ keys, int n, i64 step, u64* out) {
    using Sort = cub::BlockRadixSort<u32, 1024, ITEMS, i64>;
    static_assert(sizeof(typename Sort::TempStorage) <= 160 * 1024, "temp storage");
    extern __shared__ __align__(16) unsigned char dyn[];
    auto& tmp = *reinterpret_cast<typename Sort::TempStorage*>(dyn);
    __shared__ u32 last_h[1024];
    __shared__ i64 last_k[1024];
    __shared__ u32 heads;
    u32 h[ITEMS];
    i64 k[ITEMS];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
        const int i = threadIdx.x * ITEMS + u;
        k[u] = i < n ? keys[(i64)i * step] : SENT;
        h[u] = i < n ? hash_key(k[u]) : 0xffffffffu;
    }
    if (threadIdx.x == 0) heads = 0;
    Sort(tmp).Sort(h, k);
    last_h[threadIdx.x] = h[ITEMS - 1];
    last_k[threadIdx.x] = k[ITEMS - 1];
    __syncthreads();
    u32 mine = 0;
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
        const int i = threadIdx.x * ITEMS + u;
        if (i >= n) break;
        const u32 ph = u ? h[u - 1] : (threadIdx.x ? last_h[threadIdx.x - 1] : ~h[0]);
        const i64 pk = u ? k[u - 1] : (threadIdx.x ? last_k[threadIdx.x - 1] : k[0]);
        mine += ph != h[u] || pk != k[u];
    }
    atomicAdd(&heads, mine);
    __syncthreads();
    if (threadIdx.x == 0) out[0] = heads;
}
'''


def sorted_summary() -> None:
    from gpujoin.cuda.kernels import cccl_include

    mod = cp.RawModule(code=SORT_SRC, options=(*OPTIONS, *cccl_include()),
                       name_expressions=["sorted_summary<4>", "sorted_summary<8>"])
    rng = np.random.default_rng(1)
    big = cp.asarray(rng.permutation(1 << 24).astype(np.int64))
    out = cp.zeros(8, cp.uint64)
    nop = cp.RawKernel("extern \"C\" __global__ void nop(){}", "nop")
    base = timed(lambda: nop((1,), (1024,), ()))
    for items, n in ((4, 4096), (8, 8192)):
        f = mod.get_function(f"sorted_summary<{items}>")
        smem = 160 * 1024
        f.max_dynamic_shared_size_bytes = smem
        near = big[:n].copy()
        for where, keys, step in (("in L2", near, 1), ("strided 2^24", big, (1 << 24) // n)):
            t = timed(lambda: f((1,), (1024,), (keys, np.int32(n), np.int64(step), out), shared_mem=smem))
            print(f"summary by sorting, {n} keys {where:13} {t:6.2f} us, {t - base:6.2f} over an empty kernel; "
                  f"distinct {int(out[0])}")


def summary() -> None:
    names = [f"summ<{m}>" for m in range(8)]
    mod = cp.RawModule(code=SUMMARY_SRC, options=OPTIONS, name_expressions=names)
    labels = {0: "loads only", 1: "CAS inserts + counts (sample_counts)", 2: "32-bit fingerprints' CAS + counts",
              3: "CAS inserts, no counts", 4: "CAS inserts, no count pass", 5: "plain stores + counts",
              6: "CAS, a thread's keys at once", 7: "the same, read first"}
    rng = np.random.default_rng(1)
    big = cp.asarray(rng.permutation(1 << 24).astype(np.int64))
    near = big[:4096].copy()
    out = cp.zeros(8, cp.uint64)
    slots = 8192
    nop = cp.RawKernel("extern \"C\" __global__ void nop(){}", "nop")
    base = timed(lambda: nop((1,), (1024,), ()))
    print(f"empty kernel: {base:6.2f} us a launch")
    for m, label in labels.items():
        f = mod.get_function(names[m])
        smem = slots * 12
        f.max_dynamic_shared_size_bytes = smem
        for where, keys, step, threads in (("in L2", near, 1, 1024), ("strided 2^24", big, 4096, 1024),
                                           ("in L2, 256 threads", near, 1, 256)):
            t = timed(lambda: f((1,), (threads,), (keys, np.int32(4096), np.int64(step), out, np.uint32(slots)),
                                shared_mem=smem))
            print(f"summary {label:36} {where:20} {t:6.2f} us, {t - base:6.2f} over an empty kernel")


def stage() -> None:
    modes = {0: "load only", 1: "CAS insert (read first)", 2: "CAS insert (CAS first)", 3: "plain store (racy)",
             4: "lookup, a slot a step", 5: "CAS insert, 32-byte buckets", 6: "lookup, a bucket a step"}
    names = [f"stage<{m}>" for m in (*modes, 9)]
    mod = cp.RawModule(code=STAGE_SRC, options=OPTIONS, name_expressions=names)
    rng = np.random.default_rng(1)
    big = cp.asarray(rng.permutation(1 << 24).astype(np.int64))
    near = big[: 1 << 16].copy()
    table = cp.empty(1 << 17, cp.int64)
    out = cp.zeros(1, cp.uint64)
    mask = np.uint32((1 << 17) - 1)
    fill = mod.get_function("stage<9>")

    def args_fill():
        fill((32,), (1024,), (near, np.int32(0), np.int64(1), table, mask, out))
    tf = timed(args_fill)
    print(f"fill (32 blocks) {tf:6.2f} us")
    for m, label in modes.items():
        f = mod.get_function(f"stage<{m}>")
        for where, keys, step in (("in L2", near, 1), ("strided 2^24", big, 256)):
            def both():
                args_fill()
                if m in (4, 6):  # a filled table to look up: its inserts first
                    mod.get_function("stage<1>" if m == 4 else "stage<5>")(
                        (64,), (1024,), (keys, np.int32(1 << 16), np.int64(step), table, mask, out))
                f((64,), (1024,), (keys, np.int32(1 << 16), np.int64(step), table, mask, out))
            t = timed(both)
            print(f"stage {label:30} {where:13} {t:6.2f} us with the fill{' and inserts' if m in (4, 6) else ''}; "
                  f"{t - tf:6.2f} over the fill")


if __name__ == "__main__":
    if "--sort" in sys.argv:
        sorted_summary()
        sys.exit()
    if "--stage" not in sys.argv:
        summary()
    if "--summary" not in sys.argv:
        stage()
