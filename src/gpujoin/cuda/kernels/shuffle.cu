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
__global__ void __launch_bounds__(DS_BLOCK) dest_histogram(const i32* __restrict__ dest, i64 n, int parts,
                                                                       i32* __restrict__ counts) {
    __shared__ i32 c[DS_MAXP];
    for (int d = threadIdx.x; d < parts; d += DS_BLOCK) c[d] = 0;
    __syncthreads();
    const i64 row0 = (i64)blockIdx.x * DS_TILE;
    const int lane = threadIdx.x & 31;
#pragma unroll 4
    for (int i = 0; i < DS_ITEMS; ++i) {
        const i64 r = row0 + i * DS_BLOCK + threadIdx.x;
        const int d = r < n ? dest[r] : -1;
        const u32 peers = __match_any_sync(FULL_MASK, d);
        if (d >= 0 && lane == __ffs(peers) - 1) atomicAdd(&c[d], __popc(peers));
    }
    __syncthreads();
    for (int d = threadIdx.x; d < parts; d += DS_BLOCK) counts[(i64)blockIdx.x * parts + d] = c[d];
}

// Rows [0, n) of a chunk (every pointer at the chunk's first row) to their destinations: the
// row of tile t that is the k-th of the tile's rows for d (in row order) goes to row
// base[d] + scan[d * stride + t] + k of column c's array for d: own[c] for d == me, else send[c]
// (scan: per destination, the exclusive sum over the chunk's tiles of dest_histogram's counts).
// in/send/own: ncols device addresses of W-wide columns.
template <typename W>
__global__ void __launch_bounds__(DS_BLOCK) dest_scatter(const i32* __restrict__ dest, i64 n, int parts, int me,
                                                         const i64* __restrict__ base, const i64* __restrict__ scan,
                                                         int stride, const u64* __restrict__ in,
                                                         const u64* __restrict__ send, const u64* __restrict__ own,
                                                         int ncols) {
    __shared__ W stage[DS_TILE];
    __shared__ u8 sdest[DS_TILE];
    __shared__ u8 wc[DS_WARPS][DS_MAXP];  // a warp's rows for d in one round (at most 32)
    __shared__ i32 run[DS_MAXP];          // the tile's rows for d ranked so far
    __shared__ i32 first[DS_BLOCK];       // where d's rows start in the staged tile
    __shared__ i64 place[DS_MAXP];        // global row of staged position 0 for d's run
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u32 below = (1u << lane) - 1;
    const int tiles = (int)((n + DS_TILE - 1) / DS_TILE);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const i64 row0 = (i64)t * DS_TILE;
        const int rows = (int)min((i64)DS_TILE, n - row0);
        for (int d = threadIdx.x; d < parts; d += DS_BLOCK) {
            run[d] = 0;
#pragma unroll
            for (int w = 0; w < DS_WARPS; ++w) wc[w][d] = 0;
        }
        __syncthreads();
        int myd[DS_ITEMS], myr[DS_ITEMS];
#pragma unroll
        for (int i = 0; i < DS_ITEMS; ++i) {
            const int r = i * DS_BLOCK + threadIdx.x;
            const int d = r < rows ? dest[row0 + r] : -1;
            const u32 peers = __match_any_sync(FULL_MASK, d);
            const bool lead = d >= 0 && lane == __ffs(peers) - 1;
            if (lead) wc[warp][d] = (u8)__popc(peers);
            __syncthreads();
            int rank = 0;
            if (d >= 0) {
                rank = run[d] + __popc(peers & below);
                for (int w = 0; w < warp; ++w) rank += wc[w][d];
            }
            __syncthreads();
            if (lead) {
                atomicAdd(&run[d], __popc(peers));
                wc[warp][d] = 0;
            }
            myd[i] = d;
            myr[i] = rank;
        }
        __syncthreads();
        // exclusive prefix sum of run[] (parts <= DS_BLOCK): Hillis-Steele in first[]
        const int mine = threadIdx.x < parts ? run[threadIdx.x] : 0;
        first[threadIdx.x] = mine;
        __syncthreads();
        for (int off = 1; off < DS_BLOCK; off <<= 1) {
            const int add = threadIdx.x >= off ? first[threadIdx.x - off] : 0;
            __syncthreads();
            first[threadIdx.x] += add;
            __syncthreads();
        }
        first[threadIdx.x] -= mine;
        __syncthreads();
        if (threadIdx.x < parts) {
            const int d = threadIdx.x;
            place[d] = base[d] + scan[(i64)d * stride + t] - first[d];
        }
#pragma unroll
        for (int i = 0; i < DS_ITEMS; ++i)
            if (myd[i] >= 0) sdest[first[myd[i]] + myr[i]] = (u8)myd[i];
        for (int c = 0; c < ncols; ++c) {
            const W* __restrict__ src = reinterpret_cast<const W*>(in[c]) + row0;
#pragma unroll
            for (int i = 0; i < DS_ITEMS; ++i)
                if (myd[i] >= 0) stage[first[myd[i]] + myr[i]] = src[i * DS_BLOCK + threadIdx.x];
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
