// Partition of a chunk of rows by destination rank, for the all-to-all shuffle (paper 001 §4:
// histogram, prefix sum, shared-memory-staged scatter), with at most DS_MAXP ranks.
//
// Unlike radix_scatter, the destination is given (one int32 a row, 0 .. parts-1, hashed before)
// and not moved; every column of one width moves in one launch; and the rows for this rank go
// straight to their place in the receive buffer (``own``), so that no self-copy follows.  A tile
// is ranked stably (row order within each destination: __match_any_sync gives a warp's rows of
// one destination, per-warp counts the rows of earlier warps), staged in shared memory in
// destination order, and written out destination run by destination run (coalesced).  The grid
// is persistent (blocks loop over tiles): NCCL's kernels of the chunk before find room on the
// SMs instead of queueing behind thousands of blocks.
#include "common.cuh"

#define DS_BLOCK 256
#define DS_ITEMS 16
#define DS_TILE (DS_BLOCK * DS_ITEMS)
#define DS_WARPS (DS_BLOCK / 32)
#define DS_MAXP 256

// counts[t * parts + d]: the rows of tile t (rows [t * DS_TILE, ...)) with destination d.
// D: the destinations' type (u8 up to 256 ranks: a quarter of int32's bytes to read).
template <typename D>
__global__ void __launch_bounds__(DS_BLOCK) dest_histogram(const D* __restrict__ dest, i64 n, int parts,
                                                           i32* __restrict__ counts) {
    __shared__ i32 c[DS_MAXP];
    for (int d = threadIdx.x; d < parts; d += DS_BLOCK) c[d] = 0;
    __syncthreads();
    const i64 row0 = (i64)blockIdx.x * DS_TILE;
    const int lane = threadIdx.x & 31;
    if (parts <= 32) {
        // a destination's bits by ballots: lane v counts the warp's rows for destination v
        // (__match_any_sync and a shared atomic a row took 0.48 ms for 2^28 rows on an H200).
        // Which rows a thread holds does not matter to the counts: a full tile of byte-wide
        // destinations is read 16 rows a thread in one 16-byte load (a byte a load left few
        // bytes in flight: latency-bound)
        const int bits = 32 - __clz(parts - 1);
        int mine = 0;
        u32 d16[DS_ITEMS / 4];
        const bool vec = sizeof(D) == 1 && row0 + DS_TILE <= n && ((u64)(dest + row0) & 15) == 0;
        if (vec) {
            const uint4 v = reinterpret_cast<const uint4*>(dest + row0)[threadIdx.x];
            d16[0] = v.x; d16[1] = v.y; d16[2] = v.z; d16[3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < DS_ITEMS; ++i) {
            const i64 r = row0 + i * DS_BLOCK + threadIdx.x;
            const bool in = vec || r < n;
            const u32 d = vec ? (d16[i >> 2] >> (8 * (i & 3))) & 0xffu : (r < n ? (u32)dest[r] : 0u);
            u32 match = __ballot_sync(FULL_MASK, in);
            for (int b = 0; b < bits; ++b) {
                const u32 m = __ballot_sync(FULL_MASK, (d >> b) & 1u);
                match &= ((lane >> b) & 1) ? m : ~m;
            }
            mine += __popc(match);
        }
        if (lane < parts && mine) atomicAdd(&c[lane], mine);
    } else {
#pragma unroll 4
        for (int i = 0; i < DS_ITEMS; ++i) {
            const i64 r = row0 + i * DS_BLOCK + threadIdx.x;
            const int d = r < n ? (int)dest[r] : -1;
            const u32 peers = __match_any_sync(FULL_MASK, d);
            if (d >= 0 && lane == __ffs(peers) - 1) atomicAdd(&c[d], __popc(peers));
        }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < parts; d += DS_BLOCK) counts[(i64)blockIdx.x * parts + d] = c[d];
}

// Rows [0, n) of a chunk (every pointer at the chunk's first row) to their destinations: the
// row of tile t that is the k-th of the tile's rows for d (in row order) goes to row
// base[d] + scan[d * stride + t] + k of column c's array for d: own[c] for d == me, else send[c]
// (scan: per destination, the exclusive sum over the chunk's tiles of dest_histogram's counts).
// in/send/own: ncols device addresses of W-wide columns.
//
// Warp w ranks rows [w * 512, (w + 1) * 512) of a tile on its own (a warp's rows of one
// destination from __match_any_sync, counts of its own), so that only the scan of the warps'
// counts waits for the whole block; every load of a thread's 16 rows is issued before any is used.
template <typename W, typename D>
__global__ void __launch_bounds__(DS_BLOCK) dest_scatter(const D* __restrict__ dest, i64 n, int parts, int me,
                                                         const i64* __restrict__ base, const i64* __restrict__ scan,
                                                         int stride, const u64* __restrict__ in,
                                                         const u64* __restrict__ send, const u64* __restrict__ own,
                                                         int ncols) {
    __shared__ W stage[DS_TILE];
    __shared__ u8 sdest[DS_TILE];
    __shared__ u16 wc[DS_WARPS][DS_MAXP];  // a warp's rows for d; then where they start in the stage
    __shared__ i64 place[DS_MAXP];         // global row of staged position 0 for d's run
    __shared__ i32 wsum[DS_WARPS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u32 below = (1u << lane) - 1;
    const int tiles = (int)((n + DS_TILE - 1) / DS_TILE);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const i64 row0 = (i64)t * DS_TILE;
        const int rows = (int)min((i64)DS_TILE, n - row0);
        const int mine0 = warp * (DS_ITEMS * 32) + lane;  // this thread's first row in the tile
        int dv[DS_ITEMS];
#pragma unroll
        for (int i = 0; i < DS_ITEMS; ++i) {
            const int r = mine0 + i * 32;
            dv[i] = r < rows ? (int)dest[row0 + r] : -1;
        }
        for (int d = lane; d < parts; d += 32) wc[warp][d] = 0;
        __syncwarp();
        int rk[DS_ITEMS];
#pragma unroll
        for (int i = 0; i < DS_ITEMS; ++i) {
            const int d = dv[i];
            const u32 peers = __match_any_sync(FULL_MASK, d);
            rk[i] = d >= 0 ? wc[warp][d] + __popc(peers & below) : 0;
            __syncwarp();
            if (d >= 0 && lane == __ffs(peers) - 1) wc[warp][d] += (u16)__popc(peers);
            __syncwarp();
        }
        __syncthreads();
        // per destination: the warps' counts into their starts, and the block's exclusive scan of
        // the totals over destinations (parts <= DS_BLOCK; a warp scan, then the warps' sums)
        int total = 0;
        if (threadIdx.x < parts) {
#pragma unroll
            for (int w = 0; w < DS_WARPS; ++w) {
                const int c = wc[w][threadIdx.x];
                wc[w][threadIdx.x] = (u16)total;
                total += c;
            }
        }
        int x = total;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(FULL_MASK, x, o);
            if (lane >= o) x += y;
        }
        if (lane == 31) wsum[warp] = x;
        __syncthreads();
        if (warp == 0) {
            int s = lane < DS_WARPS ? wsum[lane] : 0;
#pragma unroll
            for (int o = 1; o < DS_WARPS; o <<= 1) {
                const int y = __shfl_up_sync(FULL_MASK, s, o);
                if (lane >= o) s += y;
            }
            if (lane < DS_WARPS) wsum[lane] = s;
        }
        __syncthreads();
        if (threadIdx.x < parts) {
            const int d = threadIdx.x;
            const int first = x - total + (warp ? wsum[warp - 1] : 0);
            place[d] = base[d] + scan[(i64)d * stride + t] - first;
#pragma unroll
            for (int w = 0; w < DS_WARPS; ++w) wc[w][d] = (u16)(wc[w][d] + first);
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < DS_ITEMS; ++i) {
            if (dv[i] >= 0) {
                rk[i] += wc[warp][dv[i]];
                sdest[rk[i]] = (u8)dv[i];
            }
        }
        for (int c = 0; c < ncols; ++c) {
            const W* __restrict__ src = reinterpret_cast<const W*>(in[c]) + row0;
            W v[DS_ITEMS];
#pragma unroll
            for (int i = 0; i < DS_ITEMS; ++i)
                if (dv[i] >= 0) v[i] = src[mine0 + i * 32];
#pragma unroll
            for (int i = 0; i < DS_ITEMS; ++i)
                if (dv[i] >= 0) stage[rk[i]] = v[i];
            __syncthreads();
            W* const to_peer = reinterpret_cast<W*>(send[c]);
            W* const to_me = reinterpret_cast<W*>(own[c]);
            for (int j = threadIdx.x; j < rows; j += DS_BLOCK) {
                const int d = sdest[j];
                (d == me ? to_me : to_peer)[place[d] + j] = stage[j];
            }
            __syncthreads();
        }
    }
}
