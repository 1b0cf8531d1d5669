// Shared definitions of gpujoin's kernels: fixed-width types, hashing, warp helpers.
// NVRTC compiles these without the C++ standard library, hence the plain typedefs.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;
typedef unsigned short u16;
typedef unsigned char u8;

#define FULL_MASK 0xffffffffu

// murmur3 finalizers: bijective, so distinct 4-byte keys get distinct 32-bit hashes.
__device__ __forceinline__ u32 hash_key(i32 k) {
    u32 h = (u32)k;
    h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
    return h;
}
__device__ __forceinline__ u32 hash_key(i64 k) {
    u64 h = (u64)k;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull; h ^= h >> 33;
    return (u32)h;
}

// HyperLogLog (groupby.cu's hll_sketch, partition.cu's radix_histogram): 2^HLL_BITS registers.
#define HLL_BITS 12

__device__ __forceinline__ u64 mix64(u64 h) {
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull; h ^= h >> 33;
    return h;
}

// A key's HyperLogLog register and rank.  4-byte keys take the bijective 32-bit murmur3
// finalizer (one 32-bit multiply chain; the host applies the 32-bit large-range correction),
// 8-byte keys a 64-bit mix.
__device__ __forceinline__ void hll_update(i32 k, u32& b, u32& rho) {
    const u32 h = hash_key(k);
    b = h >> (32 - HLL_BITS);
    rho = __clz((h << HLL_BITS) | (1u << (HLL_BITS - 1))) + 1;
}
__device__ __forceinline__ void hll_update(i64 k, u32& b, u32& rho) {
    const u64 h = mix64((u64)k);
    b = (u32)(h >> (64 - HLL_BITS));
    rho = __clzll((h << HLL_BITS) | (1ull << (HLL_BITS - 1))) + 1;
}

__device__ __forceinline__ u32 lanemask_lt() {
    u32 m; asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m)); return m;
}

// Lanes of the warp whose `bits`-bit label equals this lane's (all lanes must call it; lanes
// with valid == false match only each other).  One ballot per bit, as CUB's MatchAny does; the
// radix passes built on __match_any_sync measured slower on an H200.
__device__ __forceinline__ u32 match_label(u32 label, bool valid, int bits) {
    u32 vmask = __ballot_sync(FULL_MASK, valid);
    u32 peers = valid ? vmask : ~vmask;
    for (int b = 0; b < bits; ++b) {
        const bool one = (label >> b) & 1u;
        const u32 m = __ballot_sync(FULL_MASK, one);
        peers &= one ? m : ~m;
    }
    return peers;
}

// Inclusive prefix sum over the 32 lanes of a warp (all lanes must call it).
template <typename T>
__device__ __forceinline__ T warp_inclusive_sum(T x) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        T y = __shfl_up_sync(FULL_MASK, x, d);
        if (lane >= d) x += y;
    }
    return x;
}

// Claim `c` consecutive output slots per thread with one atomic per block.  Every thread of the
// block must call it (block-uniform loops).  One atomic per warp on a single counter serialized
// millions of atomics at the L2 for a 2^27-row probe (PHJ's match took 5.6 ms; 3.0 ms this way).
__device__ __forceinline__ u64 block_claim(u64* counter, u32 c) {
    __shared__ u32 s_warp[32];
    __shared__ u64 s_base;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    u32 incl = warp_inclusive_sum<u32>(c);
    if (lane == 31) s_warp[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        u32 v = lane < nwarps ? s_warp[lane] : 0u;
        u32 inc = warp_inclusive_sum<u32>(v);
        s_warp[lane] = inc - v;
        if (lane == 31) s_base = inc ? atomicAdd(counter, (u64)inc) : 0ull;
    }
    __syncthreads();
    u64 o = s_base + s_warp[warp] + incl - c;
    __syncthreads();  // s_warp and s_base are reused by the next call
    return o;
}

// Output of a match: the build and probe sides' values, or their positions when `src` is null.
template <typename V>
__device__ __forceinline__ V side_value(const V* src, u64 pos) {
    return src ? src[pos] : (V)pos;
}
