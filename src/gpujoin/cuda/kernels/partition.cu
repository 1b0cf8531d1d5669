// Stable radix partition of (key, values...) on one digit of at most 8 bits per pass.
//
// The digit of a key is bits [shift, shift+bits) of either its murmur3 hash (partitioning for
// hash joins: skew in the key bits does not matter) or of (key - base) as an unsigned number
// (sorting: order-preserving when base is the minimum key).  One pass is a histogram kernel
// (per-tile digit counts, digit-major), an exclusive scan of those counts (CuPy's CUB scan),
// and a scatter kernel that ranks each tile stably in shared memory (warp ballots + per-warp
// counters, in memory order) and writes it out digit run by digit run, so global writes are
// coalesced.  The same offsets scatter any number of value columns to the same positions:
// that is what makes GFTR (paper 003 §1.4) correct.
#include "common.cuh"

#define PART_BLOCK 256
#define PART_ITEMS 16
#define PART_TILE (PART_BLOCK * PART_ITEMS)
#define PART_WARPS (PART_BLOCK / 32)
#define RADIX 256
#define NO_DIGIT 0xffffffffu

template <typename K>
__device__ __forceinline__ u32 digit_of(K k, int use_hash, i64 base, int shift, u32 mask) {
    if (use_hash) return (hash_key(k) >> shift) & mask;
    return (u32)(((u64)((i64)k - base)) >> shift) & mask;
}

// counts[d * nblocks + b] = number of keys of tile b (PART_BLOCK * ITEMS keys) whose digit is d
// (d < 256).  Each warp counts into its own shared counters (contention stays within a warp even
// for all-equal keys); blocks loop over the tiles.  With `sketch` (2^HLL_BITS registers, zeroed)
// the same read of the keys also feeds a HyperLogLog sketch of them (hll_sketch's), so that
// PGB learns the number of groups without a pass of its own.
template <typename K, int ITEMS>
__global__ void __launch_bounds__(PART_BLOCK)
radix_histogram(const K* __restrict__ keys, i64 n, int use_hash, i64 base, int shift, int bits,
                i32* __restrict__ counts, int nblocks, u32* __restrict__ sketch) {
    __shared__ u32 hist[PART_WARPS * RADIX];
    extern __shared__ u32 regs[];  // 2^HLL_BITS with a sketch, else none
    const u32 mask = (1u << bits) - 1u;
    if (sketch)
        for (int j = threadIdx.x; j < (1 << HLL_BITS); j += PART_BLOCK) regs[j] = 0;
    u32* my = hist + (threadIdx.x >> 5) * RADIX;
    for (int b = blockIdx.x; b < nblocks; b += gridDim.x) {
        for (int j = threadIdx.x; j < PART_WARPS * RADIX; j += PART_BLOCK) hist[j] = 0;
        __syncthreads();
        const i64 tile0 = (i64)b * PART_BLOCK * ITEMS;
        K key[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            i64 idx = tile0 + (i64)i * PART_BLOCK + threadIdx.x;
            key[i] = idx < n ? keys[idx] : (K)0;
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            i64 idx = tile0 + (i64)i * PART_BLOCK + threadIdx.x;
            if (idx < n) {
                atomicAdd(&my[digit_of(key[i], use_hash, base, shift, mask)], 1u);
                if (sketch) {
                    u32 r, rho;
                    hll_update(key[i], r, rho);
                    if (regs[r] < rho) atomicMax(&regs[r], rho);
                }
            }
        }
        __syncthreads();
        u32 total = 0;
#pragma unroll
        for (int w = 0; w < PART_WARPS; ++w) total += hist[w * RADIX + threadIdx.x];
        counts[(i64)threadIdx.x * nblocks + b] = (i32)total;
        __syncthreads();  // hist is zeroed again for the next tile
    }
    if (sketch)
        for (int j = threadIdx.x; j < (1 << HLL_BITS); j += PART_BLOCK)
            if (regs[j]) atomicMax(&sketch[j], regs[j]);
}

// Scatter tile b's keys (if write_keys) and each value column to offsets[d * nblocks + b] + rank.
// NV: value columns staged together (one barrier round and one write loop for the key and NV
// columns, at NV tiles of shared memory); PF: the first NV columns' loads are issued with the
// keys', before the ranking, and each later round's before the write-out of the round before,
// at NV * PART_ITEMS registers; MINB: minimum resident blocks per SM
// asked of the register allocator.  Shared memory: PART_TILE * (sizeof(K) + NV * sizeof(V) + 1)
// bytes, dynamic.
//
// Registers hold one packed word per item (rank in the tile | digit << 16), not the keys: an H200
// profile of the version that kept key, digit and rank arrays showed 524,288 local-memory spill
// requests per 2^27-row pass under the 64-register cap.  Keys are re-read (L1 hits) when staged.
template <typename K, typename V, int NV, int PF, int MINB>
__global__ void __launch_bounds__(PART_BLOCK, MINB)
radix_scatter(const K* __restrict__ kin, K* __restrict__ kout, i64 n, int use_hash, i64 base,
              int shift, int bits, const i64* __restrict__ offsets, int nblocks,
              const u64* __restrict__ vin_ptrs, const u64* __restrict__ vout_ptrs, int nvals,
              int write_keys) {
    __shared__ u32 whist[PART_WARPS * RADIX];
    __shared__ u32 local_start[RADIX];
    __shared__ i64 gbase[RADIX];
    __shared__ u32 wsum[PART_WARPS];
    extern __shared__ __align__(16) unsigned char dyn[];
    K* skey = reinterpret_cast<K*>(dyn);
    V* sval = reinterpret_cast<V*>(dyn + PART_TILE * sizeof(K));  // NV tiles
    u8* stage_digit = dyn + PART_TILE * (sizeof(K) + NV * sizeof(V));

    const u32 mask = (1u << bits) - 1u;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const i64 tile0 = (i64)blockIdx.x * PART_TILE;
    // warp-striped: warp w owns a contiguous run of the tile, item i of lane l at w0 + 32 i + l,
    // so ranking item by item within a warp follows memory order (stability)
    const i64 w0 = tile0 + (i64)warp * 32 * PART_ITEMS;

    for (int j = threadIdx.x; j < PART_WARPS * RADIX; j += PART_BLOCK) whist[j] = 0;
    // this tile's output offset of digit threadIdx.x: a strided read of the digit-major scan,
    // issued first so that its latency hides behind the tile's loads
    const i64 my_offset = threadIdx.x <= mask ? offsets[(i64)threadIdx.x * nblocks + blockIdx.x] : 0;
    u32 packed[PART_ITEMS];  // digit << 16 | rank, then the tile position; NO_DIGIT past the end
    V val[PF ? NV : 1][PART_ITEMS];
#pragma unroll
    for (int i = 0; i < PART_ITEMS; ++i) {
        i64 idx = w0 + 32 * i + lane;
        packed[i] = idx < n ? digit_of(kin[idx], use_hash, base, shift, mask) : NO_DIGIT;
        if (PF)
#pragma unroll
            for (int c = 0; c < NV; ++c)
                if (c < nvals && idx < n) val[c][i] = reinterpret_cast<const V*>(vin_ptrs[c])[idx];
    }
    __syncthreads();
    u32* my = whist + warp * RADIX;
#pragma unroll
    for (int i = 0; i < PART_ITEMS; ++i) {
        const u32 d = packed[i];
        const u32 peers = match_label(d, d != NO_DIGIT, bits);
        u32 r = 0;
        if (d != NO_DIGIT) r = my[d] + __popc(peers & lanemask_lt());
        __syncwarp();
        if (d != NO_DIGIT && lane == 31 - __clz(peers)) my[d] += __popc(peers);
        __syncwarp();
        if (d != NO_DIGIT) packed[i] = d << 16 | r;
    }
    __syncthreads();
    // per digit: exclusive scan over warps, then over digits (thread t owns digit t)
    {
        const u32 d = threadIdx.x;
        u32 run = 0;
#pragma unroll
        for (int w = 0; w < PART_WARPS; ++w) {
            u32 c = whist[w * RADIX + d];
            whist[w * RADIX + d] = run;
            run += c;
        }
        u32 incl = warp_inclusive_sum<u32>(run);
        if (lane == 31) wsum[warp] = incl;
        __syncthreads();
        u32 before = 0;
#pragma unroll
        for (int w = 0; w < PART_WARPS; ++w) before += (w < warp) ? wsum[w] : 0u;
        u32 start = before + incl - run;
        local_start[d] = start;
        gbase[d] = my_offset - (i64)start;
    }
    __syncthreads();
    // final tile position of each item
#pragma unroll
    for (int i = 0; i < PART_ITEMS; ++i) {
        const u32 p = packed[i];
        if (p != NO_DIGIT) {
            const u32 d = p >> 16;
            const u32 pos = (p & 0xffffu) + local_start[d] + my[d];
            packed[i] = pos;
            stage_digit[pos] = (u8)d;
        }
    }
    const int tile_n = (int)min((i64)PART_TILE, n - tile0);
    // the key and columns [c0, c0 + NV) per round: stage them, then write them out digit run by
    // digit run (coalesced); keys are staged from a re-read of the (cached) tile
    for (int c0 = 0; c0 < nvals || (c0 == 0 && write_keys); c0 += NV) {
        const bool keys_now = c0 == 0 && write_keys;
        if (c0 > 0) __syncthreads();  // the stage is free again
#pragma unroll
        for (int c = 0; c < NV; ++c) {
            if (c0 + c >= nvals) break;
            const V* __restrict__ vin = reinterpret_cast<const V*>(vin_ptrs[c0 + c]);
#pragma unroll
            for (int i = 0; i < PART_ITEMS; ++i)
                if (packed[i] != NO_DIGIT)
                    sval[c * PART_TILE + packed[i]] = PF ? val[PF ? c : 0][i] : vin[w0 + 32 * i + lane];
            if (PF && c0 + NV + c < nvals) {  // the next round's loads fly during this one's write-out
                const V* __restrict__ vnext = reinterpret_cast<const V*>(vin_ptrs[c0 + NV + c]);
#pragma unroll
                for (int i = 0; i < PART_ITEMS; ++i) {
                    const i64 idx = w0 + 32 * i + lane;
                    if (idx < n) val[PF ? c : 0][i] = vnext[idx];
                }
            }
        }
        if (keys_now)
#pragma unroll
            for (int i = 0; i < PART_ITEMS; ++i)
                if (packed[i] != NO_DIGIT) skey[packed[i]] = kin[w0 + 32 * i + lane];
        __syncthreads();
        V* vout[NV];
#pragma unroll
        for (int c = 0; c < NV; ++c) vout[c] = c0 + c < nvals ? reinterpret_cast<V*>(vout_ptrs[c0 + c]) : nullptr;
        for (int j = threadIdx.x; j < tile_n; j += PART_BLOCK) {
            const i64 o = gbase[stage_digit[j]] + j;
            if (keys_now) kout[o] = skey[j];
#pragma unroll
            for (int c = 0; c < NV; ++c)
                if (vout[c]) vout[c][o] = sval[c * PART_TILE + j];
        }
    }
}

// Asynchronous copies global -> shared (sm_80+): 16 bytes, no registers on the way.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// `count` items of `size` bytes from global `src` (16-byte aligned) to shared `dst`: 16-byte
// asynchronous copies, the last partial chunk item by item.
__device__ __forceinline__ void copy_async(unsigned char* dst, const unsigned char* src, int count, int size) {
    const int bytes = count * size, chunks = bytes >> 4;
    for (int c = threadIdx.x; c < chunks; c += PART_BLOCK) cp_async16(dst + 16 * c, src + 16 * c);
    for (int b = (chunks << 4) + threadIdx.x; b < bytes; b += PART_BLOCK) dst[b] = src[b];
}

// Issue tile t's copies (T rows of the key and nvals value columns) into `buf` as one group.
template <typename K, typename V>
__device__ __forceinline__ void load_tile_async(const K* kin, const unsigned char* const* vin, i64 n, int T,
                                                int nvals, int t, unsigned char* buf) {
    const i64 tile0 = (i64)t * T;
    const int cnt = (int)min((i64)T, n - tile0);
    copy_async(buf, reinterpret_cast<const unsigned char*>(kin + tile0), cnt, sizeof(K));
    for (int c = 0; c < nvals; ++c)
        copy_async(buf + T * (sizeof(K) + c * sizeof(V)), vin[c] + tile0 * sizeof(V), cnt, sizeof(V));
    cp_async_commit();
}

#define ASYNC_MAX_COLS 8

// The same partition as radix_scatter, for tiles of PART_BLOCK * ITEMS rows, with the tile's key
// and value columns (at most ASYNC_MAX_COLS of one width, 16-byte aligned) brought into shared
// memory by asynchronous copies, two tiles in flight per block: while a block ranks and writes out
// tile t, tile t + gridDim.x is on its way (blocks loop over the tiles).  The ranking is
// radix_scatter's (warp ballots, memory order); instead of staging each column in digit order, it
// records for each output position of the tile the row it comes from (`src`, 2 bytes), and one
// loop writes the key and every column from the tile in place.  The registers radix_scatter
// spends on loads in flight (its 80 a thread allow 3 blocks an SM) are not needed here.
// Shared memory (dynamic): 2 * T * (sizeof(K) + nvals * sizeof(V)) + 3 * T bytes.
template <typename K, typename V, int ITEMS>
__global__ void __launch_bounds__(PART_BLOCK)
radix_scatter_async(const K* __restrict__ kin, K* __restrict__ kout, i64 n, int use_hash, i64 base,
                    int shift, int bits, const i64* __restrict__ offsets, int ntiles,
                    const u64* __restrict__ vin_ptrs, const u64* __restrict__ vout_ptrs, int nvals,
                    int write_keys) {
    constexpr int T = PART_BLOCK * ITEMS;
    __shared__ u32 whist[PART_WARPS * RADIX];
    __shared__ u32 local_start[RADIX];
    __shared__ i64 gbase[RADIX];
    __shared__ u32 wsum[PART_WARPS];
    __shared__ const unsigned char* s_vin[ASYNC_MAX_COLS];
    __shared__ V* s_vout[ASYNC_MAX_COLS];
    extern __shared__ __align__(16) unsigned char dyn[];
    const int row_bytes = sizeof(K) + nvals * sizeof(V);
    u16* src = reinterpret_cast<u16*>(dyn + 2 * T * row_bytes);
    u8* sdigit = reinterpret_cast<u8*>(src + T);
    if (threadIdx.x < nvals) {
        s_vin[threadIdx.x] = reinterpret_cast<const unsigned char*>(vin_ptrs[threadIdx.x]);
        s_vout[threadIdx.x] = reinterpret_cast<V*>(vout_ptrs[threadIdx.x]);
    }
    __syncthreads();

    const u32 mask = (1u << bits) - 1u;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if ((int)blockIdx.x < ntiles) load_tile_async<K, V>(kin, s_vin, n, T, nvals, blockIdx.x, dyn);
    int it = 0;
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x, ++it) {
        unsigned char* buf = dyn + (it & 1) * T * row_bytes;
        const K* skey = reinterpret_cast<const K*>(buf);
        const i64 tile0 = (i64)t * T;
        const int tile_n = (int)min((i64)T, n - tile0);
        __syncthreads();  // the other buffer's last tile is written out: refill it
        if (t + (int)gridDim.x < ntiles) load_tile_async<K, V>(kin, s_vin, n, T, nvals, t + gridDim.x, dyn + ((it + 1) & 1) * T * row_bytes);
        else cp_async_commit();  // an empty group keeps wait_group<1> meaning "tile t is in"
        const i64 my_offset = threadIdx.x <= mask ? offsets[(i64)threadIdx.x * ntiles + t] : 0;
        for (int j = threadIdx.x; j < PART_WARPS * RADIX; j += PART_BLOCK) whist[j] = 0;
        cp_async_wait<1>();
        __syncthreads();
        // rank: warp w owns rows [w * 32 * ITEMS, (w + 1) * 32 * ITEMS) of the tile, item i of
        // lane l at row 32 i + l of that run, so ranking item by item follows memory order
        const int r0 = warp * 32 * ITEMS;
        u32 packed[ITEMS];
        u32* my = whist + warp * RADIX;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int row = r0 + 32 * i + lane;
            packed[i] = row < tile_n ? digit_of(skey[row], use_hash, base, shift, mask) : NO_DIGIT;
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const u32 d = packed[i];
            const u32 peers = match_label(d, d != NO_DIGIT, bits);
            u32 r = 0;
            if (d != NO_DIGIT) r = my[d] + __popc(peers & lanemask_lt());
            __syncwarp();
            if (d != NO_DIGIT && lane == 31 - __clz(peers)) my[d] += __popc(peers);
            __syncwarp();
            if (d != NO_DIGIT) packed[i] = d << 16 | r;
        }
        __syncthreads();
        {  // per digit: exclusive scan over warps, then over digits (thread t owns digit t)
            const u32 d = threadIdx.x;
            u32 run = 0;
#pragma unroll
            for (int w = 0; w < PART_WARPS; ++w) {
                u32 c = whist[w * RADIX + d];
                whist[w * RADIX + d] = run;
                run += c;
            }
            u32 incl = warp_inclusive_sum<u32>(run);
            if (lane == 31) wsum[warp] = incl;
            __syncthreads();
            u32 before = 0;
#pragma unroll
            for (int w = 0; w < PART_WARPS; ++w) before += (w < warp) ? wsum[w] : 0u;
            u32 start = before + incl - run;
            local_start[d] = start;
            gbase[d] = my_offset - (i64)start;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const u32 p = packed[i];
            if (p != NO_DIGIT) {
                const u32 d = p >> 16;
                const u32 pos = (p & 0xffffu) + local_start[d] + my[d];
                src[pos] = (u16)(r0 + 32 * i + lane);
                sdigit[pos] = (u8)d;
            }
        }
        __syncthreads();
        for (int j = threadIdx.x; j < tile_n; j += PART_BLOCK) {
            const i64 o = gbase[sdigit[j]] + j;
            const int s = src[j];
            if (write_keys) kout[o] = skey[s];
            for (int c = 0; c < nvals; ++c)
                s_vout[c][o] = reinterpret_cast<const V*>(buf + T * (sizeof(K) + c * sizeof(V)))[s];
        }
    }
    cp_async_wait<0>();
}

// Partition offsets of an array already ordered by its digit (bits [shift, shift+bits) of the
// hash or of key - base): offsets[q] = first position of partition q, offsets[2^bits] = n.  Each boundary
// between runs fills the offsets of the empty partitions in between, so every entry is written
// exactly once.
template <typename K>
__global__ void partition_bounds(const K* __restrict__ keys, i64 n, int use_hash, i64 base, int shift,
                                 int bits, i64* __restrict__ offsets) {
    const u32 mask = bits >= 32 ? 0xffffffffu : (1u << bits) - 1u;
    const i64 P = (i64)mask + 1;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        i64 r = digit_of(keys[i], use_hash, base, shift, mask);
        i64 prev = i > 0 ? (i64)digit_of(keys[i - 1], use_hash, base, shift, mask) : -1;
        for (i64 q = prev + 1; q <= r; ++q) offsets[q] = i;
        if (i == n - 1)
            for (i64 q = r + 1; q <= P; ++q) offsets[q] = n;
    }
}
