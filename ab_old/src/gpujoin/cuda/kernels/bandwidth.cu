// Cache bandwidth microbenchmarks behind paper 003 Table 1's L1 and L2 ratios (plan/calibrate.py).
// Both read 16-byte words coalesced (a warp reads 512 contiguous bytes), as the paper's cache
// bandwidths are peak read rates; the address moves with the repetition so the compiler cannot
// fold repeated loads, and the XOR of everything read is stored only when it hits an unlikely
// value, so the loads cannot be dropped either.
#include "common.cuh"

// Each block re-reads its own window of `window` words (a power of two, small enough for L1)
// `reps` times: after the first pass every load hits L1.
extern "C" __global__ void read_l1(const uint4* __restrict__ src, u32 window, int reps, u32* __restrict__ out) {
    const uint4* w = src + (u64)blockIdx.x * window;
    const u32 mask = window - 1u;
    u32 acc = 0;
#pragma unroll 8
    for (int r = 0; r < reps; ++r) {
        const uint4 v = __ldca(w + ((threadIdx.x + (u32)r * 32u) & mask));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) out[threadIdx.x] = acc;
}

// All threads sweep an array of `words` words (a power of two, a fraction of L2) `reps` times,
// bypassing L1 (ld.global.cg): after the first sweep every load hits L2.
extern "C" __global__ void read_l2(const uint4* __restrict__ src, u64 words, int reps, u32* __restrict__ out) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 mask = words - 1u;
    u32 acc = 0;
#pragma unroll 8
    for (int r = 0; r < reps; ++r) {
        const uint4 v = __ldcg(src + ((t + (u64)r * threads) & mask));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) out[threadIdx.x] = acc;
}
