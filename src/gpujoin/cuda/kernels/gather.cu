// Gather (out[i] = src[idx[i]], a negative index giving a null) and stream compaction.
#include "common.cuh"

template <typename V, typename I>
__global__ void gather(const V* __restrict__ src, const I* __restrict__ idx, u64 n, V* __restrict__ out,
                       u8* __restrict__ valid) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const I j = idx[i];
        const bool ok = !((I)j < (I)0);  // always true for unsigned I
        out[i] = ok ? src[(u64)j] : (V)0;
        if (valid) valid[i] = ok ? 1 : 0;
    }
}

#define COMPACT_BLOCK 256
#define COMPACT_ITEMS 16
#define COMPACT_TILE (COMPACT_BLOCK * COMPACT_ITEMS)

// Stream compaction in two passes: per-tile counts of flags[i] == want, then (after an exclusive
// scan of the counts) each tile writes the positions of its selected rows, in order.
__device__ __forceinline__ u32 tile_select(const u8* flags, i64 n, int want, i64 first, u32* bits) {
    u32 c = 0;
    *bits = 0;
#pragma unroll
    for (int i = 0; i < COMPACT_ITEMS; ++i) {
        i64 idx = first + i;
        if (idx < n && (flags[idx] != 0) == (want != 0)) { *bits |= 1u << i; ++c; }
    }
    return c;
}

__global__ void __launch_bounds__(COMPACT_BLOCK)
compact_count(const u8* __restrict__ flags, i64 n, int want, i64* __restrict__ counts) {
    __shared__ u32 wsum[COMPACT_BLOCK / 32];
    const i64 first = (i64)blockIdx.x * COMPACT_TILE + (i64)threadIdx.x * COMPACT_ITEMS;
    u32 bits;
    u32 c = tile_select(flags, n, want, first, &bits);
    u32 incl = warp_inclusive_sum<u32>(c);
    if ((threadIdx.x & 31) == 31) wsum[threadIdx.x >> 5] = incl;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 s = 0;
        for (int w = 0; w < COMPACT_BLOCK / 32; ++w) s += wsum[w];
        counts[blockIdx.x] = (i64)s;
    }
}

template <typename I>
__global__ void __launch_bounds__(COMPACT_BLOCK)
compact_write(const u8* __restrict__ flags, i64 n, int want, const i64* __restrict__ offsets,
              I* __restrict__ out) {
    __shared__ u32 wsum[COMPACT_BLOCK / 32];
    const int warp = threadIdx.x >> 5;
    const i64 first = (i64)blockIdx.x * COMPACT_TILE + (i64)threadIdx.x * COMPACT_ITEMS;
    u32 bits;
    u32 c = tile_select(flags, n, want, first, &bits);
    u32 incl = warp_inclusive_sum<u32>(c);
    if ((threadIdx.x & 31) == 31) wsum[warp] = incl;
    __syncthreads();
    u64 o = (u64)offsets[blockIdx.x] + incl - c;
    for (int w = 0; w < warp; ++w) o += wsum[w];
    for (int i = 0; i < COMPACT_ITEMS; ++i)
        if (bits & (1u << i)) out[o++] = (I)(first + i);
}
