// GPU bitmap join of paper 002 §5.2: a bitmap with one bit per key of a (bucket's) domain,
// built with atomicOr by one thread per build key, probed by one thread per probe key.
#include "common.cuh"

// Set bit (key & mask) for every key.
__global__ void bitmap_build(const u32* __restrict__ keys, i64 n, u32 mask, u32* __restrict__ bitmap) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const u32 x = keys[i] & mask;
        atomicOr(&bitmap[x >> 5], 1u << (x & 31));
    }
}

// Emit src[i] (or i when src is null) for every probe key whose bit is `want` (1: semi join and
// set intersection, 0: anti join).  Each block claims one contiguous output range per round
// (block_claim: a shared-memory scan and one atomicAdd), so a block's hits land together.
template <typename V>
__global__ void bitmap_probe(const u32* __restrict__ keys, i64 n, u32 mask, const u32* __restrict__ bitmap,
                             int want, const V* __restrict__ src, V* __restrict__ out, u64* counter) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 r0 = (i64)blockIdx.x * blockDim.x; r0 < n; r0 += stride) {  // block-uniform
        const i64 i = r0 + threadIdx.x;
        u32 c = 0;
        if (i < n) {
            const u32 x = keys[i] & mask;
            c = ((bitmap[x >> 5] >> (x & 31)) & 1u) == (u32)want;
        }
        const u64 o = block_claim(counter, c);
        if (c) out[o] = src ? src[i] : (V)i;
    }
}
