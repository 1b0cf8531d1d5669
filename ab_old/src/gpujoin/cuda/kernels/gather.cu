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

// out[0] = min(out[0], every a[i]), out[1] = max(out[1], every a[i]) as int64: the value range
// of a key column in one read (SMJ's and SGB's sort bits), four values a thread in flight, one
// atomic pair a warp; out starts at (INT64_MAX, INT64_MIN) and several columns may share it.
template <typename K>
__global__ void __launch_bounds__(256) value_range(const K* __restrict__ a, i64 n, long long* __restrict__ out) {
    long long lo = 0x7fffffffffffffffll, hi = (long long)0x8000000000000000ull;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
        K v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = i + u * stride < n ? a[i + u * stride] : a[i];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            lo = min(lo, (long long)v[u]);
            hi = max(hi, (long long)v[u]);
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        lo = min(lo, __shfl_down_sync(FULL_MASK, lo, o));
        hi = max(hi, __shfl_down_sync(FULL_MASK, hi, o));
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMin(&out[0], lo);
        atomicMax(&out[1], hi);
    }
}
