// Radix partition of (key, values...) on one digit per pass: at most 8 bits for the stable passes,
// 9 for the unstable ones (radix_scatter_unstable's 512 threads own a digit each).
//
// The digit of a key is bits [shift, shift+bits) of either its murmur3 hash (partitioning for
// hash joins: skew in the key bits does not matter) or of (key - base) as an unsigned number
// (sorting: order-preserving when base is the minimum key).  One pass is a histogram kernel
// (per-tile digit counts, digit-major), an exclusive scan of those counts (scan.cu),
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
#define RADIX_MAX 512  // digits of a 9-bit unstable pass
#define NO_DIGIT 0xffffffffu
#define UNSTABLE_TILE 8192  // radix_scatter_unstable's tile, whatever its BLOCK

// use_hash 2: murmur3 of the key xor a seed, a hash independent of the unseeded one that the
// in-core joins, group-bys and HyperLogLog sketches use, so that the out-of-core pass 1 leaves
// their bits uniform inside each of its partitions (paper 001 seeds each level apart too).
#define PASS1_SEED 0x2545F4914F6CDD1DLL
// use_hash 3: paper 001's partition by destination rank fused with the local join's first
// (most significant) radix digit: rank << b1 | bits [shift, shift + b1) of the unseeded hash,
// base = parts | b1 << 32.  The rank is the device shuffle's (dist/device_shuffle.destinations
// of one key column: murmur3's 64-bit finalizer of SHUFFLE_SEED * 31 ^ key, multiply-shifted
// into parts), SHUFFLE_SEED being dist.shuffle.SEED_FIRST.
#define SHUFFLE_SEED 0x9747B28CULL
// FUSED: use_hash 3 compiled in (the radix shuffle's instances, `..., true>`), else left out: its
// 64-bit mix beside the others had cost the narrow unstable scatter its registers (80 -> 64 with
// spills, ptxas at sm_90) and PHJ-TR 5.9 -> 7.3 ms of partitioning at 2^27 int32 pairs (H200).
// digit_cache (FUSED instances; null: none): the histogram stores each row's digit (u16, row
// order) and the scatter reads it back instead of hashing the key twice again: over 2^27 int64
// pairs on an H200, 2.06-2.15 ms against 2.31-2.40 hashing and the plain pass's 1.84-1.86 (a
// block an SM leaves the digits' phase unhidden; storing only the rank, 2.23, was slower), and
// 1.86-1.87 with the keys prefetched while the digits are read.
template <typename K, bool FUSED = false>
__device__ __forceinline__ u32 digit_of(K k, int use_hash, i64 base, int shift, u32 mask) {
    if constexpr (FUSED) {
        const int b1 = (int)(base >> 32);
        const u64 h = mix64((SHUFFLE_SEED * 31ull) ^ (u64)(i64)k);
        const u32 rank = (u32)(((h >> 32) * (u64)(u32)base) >> 32);
        return rank << b1 | ((hash_key(k) >> shift) & ((1u << b1) - 1u));
    } else {
        if (use_hash == 2) return (hash_key((K)(k ^ (K)PASS1_SEED)) >> shift) & mask;
        if (use_hash) return (hash_key(k) >> shift) & mask;
        return (u32)(((u64)((i64)k - base)) >> shift) & mask;
    }
}

// Which rows tile b covers and where its digit counts go.  Global (tile_start null): rows
// [b * tile, ...), digit d's count at counts[d * nblocks + b].  Segmented (an MSD pass after the
// first, paper 003 §1.2's multi-pass partition read most-significant digit first): the rows are
// nseg partitions of the previous passes (seg_off, nseg + 1 offsets), each cut into its own
// tiles from its start (tile_start: the exclusive sum of each partition's tile count, nseg + 1
// entries), and partition p's counts are digit-major inside its own block of 256 * T_p, so one
// exclusive scan of the whole array gives every (partition, digit, tile) its global offset, in
// the order of the combined digits.  `radix` counts a tile has: 256, or 512 for a 9-bit pass.
// A partition may also lie in `runs` pieces (rows grouped by their top digits per source: a
// shuffle's received messages, dist/radix_shuffle.py): then seg_off holds the start of each of
// the nseg = partitions x runs pieces (partition-major), run_end their ends, tile_start each
// piece's first tile, and the counts stay per partition (the tiles of its pieces in turn), so
// one scan still orders the output by (partition, digit) across the sources.
// False past the last tile.
struct TileMap {
    i64 row0;
    int n;
    i64 count0;  // counts index of digit 0; digit d at count0 + d * stride
    int stride;
};
__device__ __forceinline__ bool tile_of(int b, int tile, i64 n, int nblocks, const i64* __restrict__ seg_off,
                                        const i32* __restrict__ tile_start, int nseg, int radix,
                                        const i64* __restrict__ run_end, int runs, TileMap& t) {
    if (!tile_start) {
        t.row0 = (i64)b * tile;
        t.n = (int)min((i64)tile, n - t.row0);
        t.count0 = b;
        t.stride = nblocks;
        return b < nblocks;
    }
    if (b >= tile_start[nseg]) return false;
    int lo = 0, hi = nseg;  // the last p with tile_start[p] <= b
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (tile_start[mid] <= b) lo = mid; else hi = mid;
    }
    t.row0 = seg_off[lo] + (i64)(b - tile_start[lo]) * tile;
    t.n = (int)min((i64)tile, (run_end ? run_end[lo] : seg_off[lo + 1]) - t.row0);
    const int p0 = lo - lo % runs;  // the partition's first piece
    t.stride = tile_start[p0 + runs] - tile_start[p0];
    t.count0 = (i64)tile_start[p0] * radix + (b - tile_start[p0]);
    return true;
}

// counts[d * nblocks + b] = number of keys of tile b (PART_BLOCK * ITEMS keys) whose digit is d
// (d < radix: 256, or 512 for a 9-bit pass).  Each warp counts into its own shared counters
// (contention stays within a warp even for all-equal keys); blocks loop over the tiles.  With
// `sketch` (2^HLL_BITS registers, zeroed) the same read of the keys also feeds a HyperLogLog
// sketch of them (hll_sketch's), so that PGB learns the number of groups without a pass of its own.
template <typename K, int ITEMS, bool FUSED = false>
__global__ void __launch_bounds__(PART_BLOCK)
radix_histogram(const K* __restrict__ keys, i64 n, int use_hash, i64 base, int shift, int bits, int radix,
                i32* __restrict__ counts, int nblocks, u32* __restrict__ sketch,
                const i64* __restrict__ seg_off, const i32* __restrict__ tile_start, int nseg,
                const i64* __restrict__ run_end, int runs, u16* __restrict__ digit_cache) {
    __shared__ u32 hist[PART_WARPS * RADIX_MAX];
    extern __shared__ u32 regs[];  // 2^HLL_BITS with a sketch, else none
    const u32 mask = (1u << bits) - 1u;
    if (sketch)
        for (int j = threadIdx.x; j < (1 << HLL_BITS); j += PART_BLOCK) regs[j] = 0;
    u32* my = hist + (threadIdx.x >> 5) * radix;
    TileMap t;
    for (int b = blockIdx.x; tile_of(b, PART_BLOCK * ITEMS, n, nblocks, seg_off, tile_start, nseg, radix, run_end, runs, t);
         b += gridDim.x) {
        for (int j = threadIdx.x; j < PART_WARPS * radix; j += PART_BLOCK) hist[j] = 0;
        __syncthreads();
        const K* __restrict__ tkeys = keys + t.row0;
        K key[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int row = i * PART_BLOCK + threadIdx.x;
            key[i] = row < t.n ? tkeys[row] : (K)0;
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            if (i * PART_BLOCK + (int)threadIdx.x < t.n) {
                const u32 d = digit_of<K, FUSED>(key[i], use_hash, base, shift, mask);
                atomicAdd(&my[d], 1u);
                if constexpr (FUSED)
                    if (digit_cache) digit_cache[t.row0 + i * PART_BLOCK + threadIdx.x] = (u16)d;
                if (sketch) {
                    u32 r, rho;
                    hll_update(key[i], r, rho);
                    if (regs[r] < rho) atomicMax(&regs[r], rho);
                }
            }
        }
        __syncthreads();
        for (int d = threadIdx.x; d < radix; d += PART_BLOCK) {
            u32 total = 0;
#pragma unroll
            for (int w = 0; w < PART_WARPS; ++w) total += hist[w * radix + d];
            counts[t.count0 + (i64)d * t.stride] = (i32)total;
        }
        __syncthreads();  // hist is zeroed again for the next tile
    }
    if (sketch)
        for (int j = threadIdx.x; j < (1 << HLL_BITS); j += PART_BLOCK)
            if (regs[j] > ((volatile u32*)sketch)[j]) atomicMax(&sketch[j], regs[j]);  // rarely an atomic
}

// The staging word of a digit: one byte up to 8 bits, two for 9 (no <type_traits> under NVRTC).
template <bool WIDE> struct DigitWord { typedef u8 type; };
template <> struct DigitWord<true> { typedef u16 type; };

// Exclusive scan of a tile's digit counts, NHIST sets of NDIG (per warp, or one for the block):
// counts[w * NDIG + d] becomes where set w's rows of digit d start among the digit's rows,
// local_start[d] where digit d starts in the tile, gbase[d] my_offset - local_start[d] (my_offset:
// thread d's global offset of digit d).  Every thread of the block calls it (it holds a barrier);
// thread d < NDIG owns digit d.
template <int NHIST, int NDIG = RADIX>
__device__ __forceinline__ void scan_digits(u32* counts, u32* local_start, i64* gbase, u32* wsum, i64 my_offset) {
    const u32 d = threadIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    u32 run = 0;
    if (d < NDIG)
#pragma unroll
        for (int w = 0; w < NHIST; ++w) {
            u32 c = counts[w * NDIG + d];
            counts[w * NDIG + d] = run;
            run += c;
        }
    u32 incl = warp_inclusive_sum<u32>(run);
    if (lane == 31 && warp < NDIG / 32) wsum[warp] = incl;
    __syncthreads();
    if (d < NDIG) {
        u32 before = 0;
#pragma unroll
        for (int w = 0; w < NDIG / 32; ++w) before += (w < warp) ? wsum[w] : 0u;
        u32 start = before + incl - run;
        local_start[d] = start;
        gbase[d] = my_offset - (i64)start;
    }
}

// Scatter tile b's keys (if write_keys) and each value column to offsets[d * nblocks + b] + rank,
// ranking the tile in memory order (stable: warp ballots, one per digit bit, as CUB's MatchAny).
// S: the staging word (4 bytes when keys and values fit, halving shared memory); MINB: minimum
// resident blocks per SM asked of the register allocator.
//
// Registers hold one packed word per item (rank in the tile | digit << 16), not the keys: an H200
// profile of the version that kept key, digit and rank arrays showed 524,288 local-memory spill
// requests per 2^27-row pass under the 64-register cap.  4-byte keys are kept in shared memory
// as loaded, 8-byte ones re-read from global memory when staged.
// Each value column's loads are issued before the previous column's write-out (the first with
// the keys), so their latency overlaps the ranking and the stores instead of following a barrier.
template <typename K, typename V, typename S, int MINB>
__global__ void __launch_bounds__(PART_BLOCK, MINB)
radix_scatter(const K* __restrict__ kin, K* __restrict__ kout, i64 n, int use_hash, i64 base,
              int shift, int bits, const i64* __restrict__ offsets, int nblocks,
              const u64* __restrict__ vin_ptrs, const u64* __restrict__ vout_ptrs, int nvals,
              int write_keys) {
    __shared__ u32 whist[PART_WARPS * RADIX];
    __shared__ u32 local_start[RADIX];
    __shared__ i64 gbase[RADIX];
    __shared__ u32 wsum[RADIX / 32];
    __shared__ S stage[PART_TILE];
    __shared__ u8 stage_digit[PART_TILE];
    // 4-byte keys with a 4-byte stage: the tile's keys also kept in shared memory as loaded (16
    // KiB more, 47 KiB in all), so that staging them does not read them again from global
    // memory (an ncu profile showed an L1 hit rate of 10% on that re-read)
    constexpr bool RAW = sizeof(K) == 4 && sizeof(S) == 4;
    __shared__ K raw[RAW ? PART_TILE : 1];

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
    u32 packed[PART_ITEMS];  // digit << 16 | rank, or NO_DIGIT past the end
    V val[PART_ITEMS];
    const V* __restrict__ vin = nvals ? reinterpret_cast<const V*>(vin_ptrs[0]) : nullptr;
    const int r0 = warp * 32 * PART_ITEMS + lane;  // item i's row in the tile: r0 + 32 i
#pragma unroll
    for (int i = 0; i < PART_ITEMS; ++i) {
        i64 idx = w0 + 32 * i + lane;
        const K k = idx < n ? kin[idx] : (K)0;
        packed[i] = idx < n ? digit_of(k, use_hash, base, shift, mask) : NO_DIGIT;
        if (RAW) raw[RAW ? r0 + 32 * i : 0] = k;
        if (vin && idx < n) val[i] = vin[idx];
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
    scan_digits<PART_WARPS>(whist, local_start, gbase, wsum, my_offset);
    __syncthreads();
    // final tile position of each item; keys staged from a re-read of the (cached) tile
    K* skey = reinterpret_cast<K*>(stage);
#pragma unroll
    for (int i = 0; i < PART_ITEMS; ++i) {
        const u32 p = packed[i];
        if (p != NO_DIGIT) {
            const u32 d = p >> 16;
            const u32 pos = (p & 0xffffu) + local_start[d] + my[d];
            packed[i] = pos;
            stage_digit[pos] = (u8)d;
            if (write_keys) skey[pos] = RAW ? raw[RAW ? r0 + 32 * i : 0] : kin[w0 + 32 * i + lane];
        }
    }
    __syncthreads();
    const int tile_n = (int)min((i64)PART_TILE, n - tile0);
    if (write_keys)
        for (int j = threadIdx.x; j < tile_n; j += PART_BLOCK) kout[gbase[stage_digit[j]] + j] = skey[j];
    V* sval = reinterpret_cast<V*>(stage);
    for (int v = 0; v < nvals; ++v) {
        V* __restrict__ vout = reinterpret_cast<V*>(vout_ptrs[v]);
        __syncthreads();  // the stage is free again
#pragma unroll
        for (int i = 0; i < PART_ITEMS; ++i)
            if (packed[i] != NO_DIGIT) sval[packed[i]] = val[i];
        if (v + 1 < nvals) {  // the next column's loads fly during the barrier and the stores
            const V* __restrict__ vnext = reinterpret_cast<const V*>(vin_ptrs[v + 1]);
#pragma unroll
            for (int i = 0; i < PART_ITEMS; ++i) {
                i64 idx = w0 + 32 * i + lane;
                if (idx < n) val[i] = vnext[idx];
            }
        }
        __syncthreads();
        for (int j = threadIdx.x; j < tile_n; j += PART_BLOCK) vout[gbase[stage_digit[j]] + j] = sval[j];
    }
}

// The same scatter with the tile ranked by shared atomics on the block's counters, in whatever
// order they land (unstable: for a first LSD pass, or a partition that needs no order within a
// partition), tiles of 8192 rows, BLOCK threads (512 of 16 rows, or 1024 of 8 where 8-byte
// columns leave room for one block an SM: kernels.unstable_block; more warps an SM, runs of 32
// rows a digit, half the tiles' counters, no per-warp counters to scan).  On one H200, PGB-TR at g = 2^16 took
// 6.30-7.01 ms with it against 7.51-8.30 with the same ranking on 4096-row tiles; the joins keep
// stable passes (the 4096-row version cost the narrow PHJ-TR 0.3 ms, and this one was not
// measured there).  The first value column's loads are issued with the keys',
// before the ranking, each later column's before the write-out of the one before; one loop
// writes the key and the first column.  DBITS: the most digit bits it takes, 8 or 9 (a thread a
// digit; a 9-bit digit is staged in 2 bytes).  Shared memory (dynamic):
// UNSTABLE_TILE * (sizeof(K) + sizeof(V) + DBITS / 8) bytes.
template <typename K, typename V, int DBITS, int BLOCK, bool FUSED = false>
__global__ void __launch_bounds__(BLOCK)
radix_scatter_unstable(const K* __restrict__ kin, K* __restrict__ kout, i64 n, int use_hash, i64 base,
                       int shift, int bits, const i64* __restrict__ offsets, int nblocks,
                       const u64* __restrict__ vin_ptrs, const u64* __restrict__ vout_ptrs, int nvals,
                       int write_keys, const i64* __restrict__ seg_off, const i32* __restrict__ tile_start,
                       int nseg, const i64* __restrict__ run_end, int runs,
                       const u16* __restrict__ digit_cache) {
    constexpr int TILE = UNSTABLE_TILE, ITEMS = TILE / BLOCK, NDIG = 1 << DBITS;
    static_assert(NDIG <= BLOCK && NDIG <= RADIX_MAX, "a thread a digit");
    using D = typename DigitWord<(DBITS > 8)>::type;
    TileMap t;
    if (!tile_of(blockIdx.x, TILE, n, nblocks, seg_off, tile_start, nseg, NDIG, run_end, runs, t)) return;  // the whole block
    __shared__ u32 hist[NDIG];
    __shared__ u32 local_start[NDIG];
    __shared__ i64 gbase[NDIG];
    __shared__ u32 wsum[NDIG / 32];
    extern __shared__ __align__(16) unsigned char dyn[];
    K* skey = reinterpret_cast<K*>(dyn);
    V* sval = reinterpret_cast<V*>(dyn + TILE * sizeof(K));
    D* stage_digit = reinterpret_cast<D*>(dyn + TILE * (sizeof(K) + sizeof(V)));

    const u32 mask = (1u << bits) - 1u;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const i64 tile0 = t.row0;
    const int tile_n = t.n;
    const int w0 = warp * 32 * ITEMS + lane;  // item i of lane l of warp w: row w0 + 32 i of the tile
    const K* __restrict__ tkin = kin + tile0;

    for (int j = threadIdx.x; j < NDIG; j += BLOCK) hist[j] = 0;
    // this tile's output offset of digit threadIdx.x: a strided read of the digit-major scan,
    // issued first so that its latency hides behind the tile's loads
    const i64 my_offset = threadIdx.x <= mask ? offsets[t.count0 + (i64)threadIdx.x * t.stride] : 0;
    u32 packed[ITEMS];  // digit << 16 | rank, then the tile position; NO_DIGIT past the end
    V val[ITEMS];
    const V* __restrict__ vin = nvals ? reinterpret_cast<const V*>(vin_ptrs[0]) + tile0 : nullptr;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int row = w0 + 32 * i;
        if constexpr (FUSED) {  // (the histogram's digits where it kept them: two hashes a key spared)
            if (row >= tile_n) {
                packed[i] = NO_DIGIT;
            } else if (digit_cache) {
                packed[i] = digit_cache[tile0 + row];
                // the keys' first read is the staging loop's, after the ranking: fetched meanwhile
                // (2^27 int64 pairs, H200: 2.02-2.05 -> 1.86-1.87 ms; to L1 the same, less steady)
                asm volatile("prefetch.global.L2 [%0];" :: "l"(tkin + row));
            } else {
                packed[i] = digit_of<K, true>(tkin[row], use_hash, base, shift, mask);
            }
        } else
            packed[i] = row < tile_n ? digit_of<K>(tkin[row], use_hash, base, shift, mask) : NO_DIGIT;
        if (vin && row < tile_n) val[i] = vin[row];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
        if (packed[i] != NO_DIGIT) packed[i] = packed[i] << 16 | atomicAdd(&hist[packed[i]], 1u);
    __syncthreads();
    scan_digits<1, NDIG>(hist, local_start, gbase, wsum, my_offset);
    __syncthreads();
    // final tile position of each item; keys staged from a re-read of the (cached) tile, the
    // first column from registers
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const u32 p = packed[i];
        if (p != NO_DIGIT) {
            const u32 d = p >> 16;
            const u32 pos = (p & 0xffffu) + local_start[d];
            packed[i] = pos;
            stage_digit[pos] = (D)d;
            if (write_keys) skey[pos] = tkin[w0 + 32 * i];
            if (vin) sval[pos] = val[i];
        }
    }
    for (int v = 0; v < nvals || (v == 0 && write_keys); ++v) {
        if (v > 0) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (packed[i] != NO_DIGIT) sval[packed[i]] = val[i];
        }
        if (v + 1 < nvals) {  // the next column's loads fly during the barrier and the stores
            const V* __restrict__ vnext = reinterpret_cast<const V*>(vin_ptrs[v + 1]) + tile0;
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (w0 + 32 * i < tile_n) val[i] = vnext[w0 + 32 * i];
        }
        __syncthreads();
        const bool keys_now = v == 0 && write_keys;
        V* __restrict__ vout = v < nvals ? reinterpret_cast<V*>(vout_ptrs[v]) : nullptr;
        for (int j = threadIdx.x; j < tile_n; j += BLOCK) {
            const i64 o = gbase[stage_digit[j]] + j;
            if (keys_now) kout[o] = skey[j];
            if (vout) vout[o] = sval[j];
        }
        __syncthreads();  // the stage is free again
    }
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

// Partition offsets after a segmented (MSD) pass of `bits` bits over nparts partitions: partition
// q = p << bits | d starts where the scan put tile 0 of digit d of partition p (offs: the exclusive
// scan of radix_histogram's segmented counts, `radix` a tile), or at part_off[p] when p has no
// tiles (empty); offsets[nparts << bits] = n.  One thread an entry, so the bounds cost no read of
// the keys.  A partition in `runs` pieces (tile_of) has tiles tile_start[p * runs] .. [(p + 1) * runs].
__global__ void segment_bounds(const i64* __restrict__ offs, const i64* __restrict__ part_off,
                               const i32* __restrict__ tile_start, int nparts, int runs, int bits, int radix,
                               i64 n, i64* __restrict__ offsets) {
    const i64 total = (i64)nparts << bits;
    for (i64 q = (i64)blockIdx.x * blockDim.x + threadIdx.x; q <= total; q += (i64)gridDim.x * blockDim.x) {
        if (q == total) { offsets[q] = n; continue; }
        const int p = (int)(q >> bits), d = (int)(q & ((1 << bits) - 1));
        const i32 t0 = tile_start[(i64)p * runs], tiles = tile_start[(i64)(p + 1) * runs] - t0;
        offsets[q] = tiles ? offs[(i64)t0 * radix + (i64)d * tiles] : part_off[p];
    }
}
