// Exclusive prefix sums of int32/int64 counts into int32/int64 offsets, with the total after
// them: out[i] = in[0] + ... + in[i - 1] for i <= n.  Reduce-then-scan over tiles of SCAN_TILE:
// scan_reduce sums each tile, scan_sums scans the tile sums in one block, scan_down scans each
// tile from its sum; an input of one tile takes scan_down alone (sums = nullptr).
// (cupy.cumsum of the same took ~70 us of the interpreter's time and a cast and a subtraction
// after it; the radix partition and PHJ scan seven times a partition pair of the hybrid join's
// pass 2, whose GPU threads take turns on the interpreter lock.)
#include "common.cuh"

#define SCAN_BLOCK 1024
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_BLOCK * SCAN_ITEMS)

// Exclusive scan of one value a thread across the block; *total: the block's sum.
__device__ __forceinline__ i64 block_exclusive(i64 v, i64* total) {
    __shared__ i64 warp_sums[SCAN_BLOCK / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const i64 x = warp_inclusive_sum<i64>(v);
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        const i64 w = warp_inclusive_sum<i64>(lane < warps ? warp_sums[lane] : 0);
        if (lane < warps) warp_sums[lane] = w;
    }
    __syncthreads();
    const i64 before = warp ? warp_sums[warp - 1] : 0;
    *total = warp_sums[warps - 1];
    __syncthreads();  // warp_sums is the next call's
    return before + x - v;
}

template <typename In>
__global__ void __launch_bounds__(SCAN_BLOCK) scan_reduce(const In* __restrict__ in, i64 n, i64* __restrict__ sums) {
    const i64 base = (i64)blockIdx.x * SCAN_TILE + threadIdx.x;
    i64 s = 0;
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const i64 i = base + (i64)k * SCAN_BLOCK;  // coalesced
        if (i < n) s += (i64)in[i];
    }
    i64 total;
    block_exclusive(s, &total);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// sums[0, m) scanned in place (exclusive), sums[m] = their total.  One block.
__global__ void __launch_bounds__(SCAN_BLOCK) scan_sums(i64* __restrict__ sums, int m) {
    i64 carry = 0;
    for (int b = 0; b < m; b += SCAN_BLOCK) {
        const int i = b + threadIdx.x;
        i64 total;
        const i64 ex = block_exclusive(i < m ? sums[i] : 0, &total);
        if (i < m) sums[i] = carry + ex;
        carry += total;
    }
    if (threadIdx.x == 0) sums[m] = carry;
}

// Each warp scans 32 * SCAN_ITEMS consecutive values, lane l holding items l, l + 32, ... of
// them, so that every load and store of a warp is one coalesced line; the warps' totals then
// meet in one block scan.  (A thread's SCAN_ITEMS consecutive values, as before, strided each
// warp's accesses 32 or 64 bytes apart: 0.39 ms for the 33.5M counts of a 9-bit pass over 2^29
// rows on an H200, a fifth of the HBM's rate.)
// shifts (or nullptr): out[i] also gains shifts[i / segment], out[n] the last segment's (a
// shuffle's chunk moves each destination's offsets to its place: a CuPy addition a destination
// had read and written the offsets again, 22 us each at 2^27 rows on an H200).
template <typename In, typename Out>
__global__ void __launch_bounds__(SCAN_BLOCK) scan_down(const In* __restrict__ in, i64 n, const i64* __restrict__ sums,
                                                        Out* __restrict__ out, const i64* __restrict__ shifts,
                                                        i64 segment) {
    const int lane = threadIdx.x & 31;
    const i64 base = (i64)blockIdx.x * SCAN_TILE + (i64)(threadIdx.x >> 5) * (32 * SCAN_ITEMS) + lane;
    i64 v[SCAN_ITEMS], run = 0;  // v: each item's exclusive sum inside the warp's values
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const i64 i = base + 32 * k;
        const i64 x = i < n ? (i64)in[i] : 0;
        const i64 inc = warp_inclusive_sum<i64>(x);
        v[k] = run + inc - x;
        run += __shfl_sync(0xffffffffu, inc, 31);
    }
    i64 total;  // (lane 0 carries its warp's total: its exclusive sum is the warps' before it)
    const i64 before = __shfl_sync(0xffffffffu, block_exclusive(lane ? 0 : run, &total), 0)
                       + (sums ? sums[blockIdx.x] : 0);
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const i64 i = base + 32 * k;
        if (i < n) out[i] = (Out)(before + v[k] + (shifts ? shifts[i / segment] : 0));
    }
    if (threadIdx.x == 0 && blockIdx.x == gridDim.x - 1)
        out[n] = (Out)((sums ? sums[gridDim.x] : total) + (shifts ? shifts[(n - 1) / segment] : 0));
}

// total[0] += in[0] + ... + in[n - 1], one atomic a block: a SUM in one launch, added on the GPU
// to the sum of the blocks before (cupy's sum and the addition after it took ~120 us of the
// interpreter's time).
template <typename In>
__global__ void __launch_bounds__(SCAN_BLOCK) sum_into(const In* __restrict__ in, i64 n, i64* __restrict__ total) {
    i64 s = 0;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) s += (i64)in[i];
    i64 t;
    block_exclusive(s, &t);
    if (threadIdx.x == 0 && t) atomicAdd((u64*)total, (u64)t);
}

// out[r] = in[r * cols] + ... + in[r * cols + cols - 1] for each row r, a block a row: the rows'
// totals of a digit-major histogram (the radix shuffle's rows a destination; CuPy's sum over an
// axis and the concatenation after it took about 0.1 ms of the interpreter's time a table).
template <typename In>
__global__ void __launch_bounds__(SCAN_BLOCK) row_sums(const In* __restrict__ in, i64 cols, i64* __restrict__ out) {
    const In* row = in + (i64)blockIdx.x * cols;
    i64 s = 0;
    for (i64 i = threadIdx.x; i < cols; i += blockDim.x) s += (i64)row[i];
    i64 t;
    block_exclusive(s, &t);
    if (threadIdx.x == 0) out[blockIdx.x] = t;
}
