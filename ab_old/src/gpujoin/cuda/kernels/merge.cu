// Merge path (Green, McColl, Bader, "GPU merge path", ICS 2012) over two sorted key arrays, as
// SMJ uses it (paper 003 §1.1): for every element of b, the number of elements of a that are
// smaller (upper == 0: its lower bound in a) or not greater (upper == 1: its upper bound).
// Thread t merges diagonals [t*items, (t+1)*items) of the merged sequence after finding its
// start by binary search along its first diagonal, so work per thread is the same whatever the
// key distribution.
#include "common.cuh"

template <typename K>
__device__ __forceinline__ bool take_a(K x, K y, int upper) { return upper ? (x <= y) : (x < y); }

// The number of a's elements among the first d of the merge of a and b.
template <typename K>
__device__ __forceinline__ i64 merge_path_search(const K* a, i64 na, const K* b, i64 nb, i64 d, int upper) {
    i64 lo = d > nb ? d - nb : 0, hi = d < na ? d : na;
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        if (take_a(a[mid], b[d - 1 - mid], upper)) lo = mid + 1; else hi = mid;
    }
    return lo;
}

#define MERGE_BLOCK 256
#define MERGE_ITEMS 8
#define MERGE_TILE (MERGE_BLOCK * MERGE_ITEMS)

// Block b merges diagonals [b*TILE, (b+1)*TILE): its ranges of a and b (merge_splits'
// searches, below), which it stages in shared memory (coalesced); each thread then searches its own diagonal
// there and merges MERGE_ITEMS steps, writing out[j] when it consumes b[j].  With `counts` (lower
// bounds only) also how many of a equal b[j]: from its lower bound, a[lo] and a[lo + 1] (most
// often in the staged range) tell none or one, and a gallop then a binary search find longer runs,
// so SMJ's ranges take one merge pass, not a lower and an upper one (2.0-2.1 ms each for 2^27 x
// 2^27 int32 keys on an H200; staging the bounds for coalesced writes gave 2.03: not kept).
template <typename K>
__device__ __forceinline__ K key_at(const K* a, const K* sa, i64 i0, int na_t, i64 i) {
    return (i >= i0 && i < i0 + na_t) ? sa[i - i0] : a[i];
}

template <typename K>
__device__ i64 equal_run(const K* a, i64 na, const K* sa, i64 i0, int na_t, i64 lo, K key) {
    if (lo >= na || key_at(a, sa, i0, na_t, lo) != key) return 0;
    if (lo + 1 >= na || key_at(a, sa, i0, na_t, lo + 1) != key) return 1;
    i64 step = 2;  // a[lo + step / 2] == key; gallop until a[lo + step] differs or ends
    while (lo + step < na && a[lo + step] == key) step <<= 1;
    i64 l = lo + step / 2, h = min(lo + step, na);  // a[l] == key, a[h] past the run (or h == na)
    while (h - l > 1) {
        const i64 mid = (l + h) >> 1;
        if (a[mid] == key) l = mid; else h = mid;
    }
    return h - lo;
}

// Decoupled look-back (Merrill and Garland, "Single-pass parallel prefix scan with decoupled
// look-back", 2016), by warp 0 of block `tile`: publishes the block's `aggregate`, sums the
// aggregates of the blocks before it back to the first inclusive prefix, publishes its own
// inclusive prefix and returns the exclusive one (to every lane of warp 0).  status[] words,
// zeroed before the launch: flag << 62 | value, flag 1 an aggregate, 2 an inclusive prefix (one
// 64-bit store, so the value and its flag are seen together).  Blocks start in index order, so
// the ones waited on are running or done.
#define LB_AGG (1ull << 62)
#define LB_INC (2ull << 62)
#define LB_VALUE ((1ull << 62) - 1)
__device__ i64 lookback_prefix(u64* status, i64 tile, i64 aggregate) {
    const int lane = threadIdx.x & 31;
    volatile u64* st = status;
    if (tile == 0) {
        if (lane == 0) st[0] = LB_INC | (u64)aggregate;
        return 0;
    }
    if (lane == 0) st[tile] = LB_AGG | (u64)aggregate;
    i64 prefix = 0;
    for (i64 base = tile - 1;; base -= 32) {
        const i64 idx = base - lane;  // lane 0 the nearest predecessor
        u64 w = idx >= 0 ? st[idx] : LB_INC;
        while (__any_sync(0xffffffffu, (w >> 62) == 0))
            if ((w >> 62) == 0) w = st[idx];
        const unsigned inc = __ballot_sync(0xffffffffu, (w >> 62) == 2);
        const int last = inc ? __ffs(inc) - 1 : 31;  // lanes up to the nearest inclusive prefix count
        i64 v = lane <= last ? (i64)(w & LB_VALUE) : 0;
        for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        prefix += v;
        if (inc) break;
    }
    if (lane == 0) st[tile] = LB_INC | (u64)(prefix + aggregate);
    return prefix;
}

// Block b merges diagonals [b*TILE, (b+1)*TILE) (see above).  With `offsets` (lower bounds
// only), also each b[j]'s first output row, the exclusive prefix sum of the equal counts, in
// the same pass (a block scan, then decoupled look-back over the blocks before: `status`, a
// zeroed word a block), and offsets[nb] the total: SMJ's separate scan of 2^27 counts took 1.3
// ms of its 15.7 on an H200.  `counts` may then be null.
// Where each block's diagonals start: splits[t] = merge_path_search at diagonal t * MERGE_TILE
// (capped at na + nb), t = 0..blocks, a thread each.  Searched inside merge_bounds, every block
// began with two 27-step chains of dependent global loads (at 2^27 + 2^27 keys), about 124
// waves of them one after another; here they all run at once.
template <typename K>
__global__ void __launch_bounds__(256)
merge_splits(const K* __restrict__ a, i64 na, const K* __restrict__ b, i64 nb, int upper, i64 blocks,
             i64* __restrict__ splits) {
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t <= blocks) splits[t] = merge_path_search(a, na, b, nb, min(t * MERGE_TILE, na + nb), upper);
}

template <typename K>
__global__ void __launch_bounds__(MERGE_BLOCK)
merge_bounds(const K* __restrict__ a, i64 na, const K* __restrict__ b, i64 nb, int upper,
             i64* __restrict__ out, i64* __restrict__ counts, i64* __restrict__ offsets, u64* __restrict__ status,
             const i64* __restrict__ splits) {
    __shared__ K sa[MERGE_TILE];
    __shared__ K sb[MERGE_TILE];
    __shared__ i64 split[2];
    __shared__ i64 warp_sums[MERGE_BLOCK / 32];
    __shared__ i64 block_prefix;
    const i64 total = na + nb;
    const i64 d0 = (i64)blockIdx.x * MERGE_TILE;
    const i64 d1 = min(d0 + MERGE_TILE, total);
    if (threadIdx.x < 2) split[threadIdx.x] = splits[blockIdx.x + threadIdx.x];
    __syncthreads();
    const i64 i0 = split[0], j0 = d0 - i0;
    const int na_t = (int)(split[1] - i0), nb_t = (int)((d1 - split[1]) - j0);
    for (int t = threadIdx.x; t < na_t; t += MERGE_BLOCK) sa[t] = a[i0 + t];
    for (int t = threadIdx.x; t < nb_t; t += MERGE_BLOCK) sb[t] = b[j0 + t];
    __syncthreads();
    const int dt = threadIdx.x * MERGE_ITEMS;
    const int n_t = na_t + nb_t;
    const bool count = counts || offsets;
    i64 eq[MERGE_ITEMS];  // this thread's b rows' equal counts, j = jstart + k
    int jstart = 0, taken = 0;
    if (dt < n_t) {
        int i = (int)merge_path_search(sa, (i64)na_t, sb, (i64)nb_t, (i64)dt, upper), j = dt - i;
        jstart = j;
        const int dend = min(dt + MERGE_ITEMS, n_t);
        for (int d = dt; d < dend; ++d) {
            if (j >= nb_t || (i < na_t && take_a(sa[i], sb[j], upper))) { ++i; continue; }
            out[j0 + j] = i0 + i;
            if (count) {
                const i64 c = equal_run(a, na, sa, i0, na_t, i0 + i, sb[j]);
                if (counts) counts[j0 + j] = c;
#pragma unroll
                for (int k = 0; k < MERGE_ITEMS; ++k)
                    if (k == taken) eq[k] = c;
                ++taken;
            }
            ++j;
        }
    }
    if (!offsets) return;
    // the block's exclusive scan of its threads' sums, then the blocks' prefix
    i64 mine = 0;
#pragma unroll
    for (int k = 0; k < MERGE_ITEMS; ++k)
        if (k < taken) mine += eq[k];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    i64 incl = mine;
    for (int o = 1; o < 32; o <<= 1) {
        const i64 v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        i64 w = lane < MERGE_BLOCK / 32 ? warp_sums[lane] : 0, wi = w;
        for (int o = 1; o < 32; o <<= 1) {
            const i64 v = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += v;
        }
        if (lane < MERGE_BLOCK / 32) warp_sums[lane] = wi - w;  // exclusive, by warp
        const i64 aggregate = __shfl_sync(0xffffffffu, wi, MERGE_BLOCK / 32 - 1);
        const i64 prefix = lookback_prefix(status, blockIdx.x, aggregate);
        if (lane == 0) {
            block_prefix = prefix;
            if (d1 == total) offsets[nb] = prefix + aggregate;
        }
    }
    __syncthreads();
    i64 at = block_prefix + warp_sums[warp] + incl - mine;
#pragma unroll
    for (int k = 0; k < MERGE_ITEMS; ++k)
        if (k < taken) {
            offsets[j0 + jstart + k] = at;
            at += eq[k];
        }
}

// The number of ends[] elements among the first d of the merge of ends (nondecreasing, na of
// them) and the output indices b0, b0 + 1, ... (nb of them, never stored), an end taken first
// when it is <= the index: the merge path of a load-balancing search.
__device__ __forceinline__ i64 ends_search(const i64* ends, i64 na, i64 b0, i64 nb, i64 d) {
    i64 lo = d > nb ? d - nb : 0, hi = d < na ? d : na;
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        if (ends[mid] <= b0 + d - 1 - mid) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Expand per-probe match ranges into output pairs: sorted probe row j matches sorted build rows
// [lower[j], lower[j] + offsets[j+1] - offsets[j]).  A load-balancing search (merge path over
// the rows' output ends offsets[1..m] and the output indices 0..total-1, as moderngpu's): block
// b takes diagonals [b*TILE, (b+1)*TILE) of that merge, so every block and thread does the same
// work whatever the multiplicities (one hot key, or rows of no match), and each output finds its
// probe row in shared memory: a binary search over the offsets an output row (27 dependent
// loads at 2^27 rows) took 4.9 ms of SMJ-TR's 2^27 join on one H200.  bperm / pperm (null:
// identity) map a sorted row to its position in its side's space; out_k (when not null) gets
// the key, pkeys[j].  SMJ expands whole sorted sides; PHJ the sorted rows of its oversized
// partitions.
// expand_matches' block starts, as merge_splits: splits[t] = ends_search at diagonal t * MERGE_TILE.
__global__ void __launch_bounds__(256)
ends_splits(const i64* __restrict__ offsets, i64 m, i64 total, i64 blocks, i64* __restrict__ splits) {
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t <= blocks) splits[t] = ends_search(offsets + 1, m, 0, total, min(t * MERGE_TILE, m + total));
}

template <typename K, typename BV, typename PV>
__global__ void __launch_bounds__(MERGE_BLOCK)
expand_matches(const i64* __restrict__ lower, const i64* __restrict__ offsets, i64 m, i64 total,
               const K* __restrict__ pkeys, const i64* __restrict__ bperm, const i64* __restrict__ pperm,
               const BV* __restrict__ bsrc, const PV* __restrict__ psrc, BV* __restrict__ out_b,
               PV* __restrict__ out_p, K* __restrict__ out_k, const i64* __restrict__ splits) {
    __shared__ i64 se[MERGE_TILE];
    __shared__ int srow[MERGE_TILE];  // each of the tile's outputs' probe row, less i0
    __shared__ i64 split[2];
    const i64* ends = offsets + 1;
    const i64 d0 = (i64)blockIdx.x * MERGE_TILE, d1 = min(d0 + MERGE_TILE, m + total);
    if (threadIdx.x < 2) split[threadIdx.x] = splits[blockIdx.x + threadIdx.x];
    __syncthreads();
    const i64 i0 = split[0], j0 = d0 - i0;
    const int na_t = (int)(split[1] - i0), nb_t = (int)((d1 - split[1]) - j0);
    for (int t = threadIdx.x; t < na_t; t += MERGE_BLOCK) se[t] = ends[i0 + t];
    __syncthreads();
    // each thread's MERGE_ITEMS diagonals give its outputs' rows; the outputs are then written a
    // thread an output, so each store is coalesced (written a thread's run of outputs each, the
    // 65,567-equal-keys join took 117 ms: its 4.3 G outputs are almost all of one row a tile)
    const int dt = threadIdx.x * MERGE_ITEMS, n_t = na_t + nb_t;
    if (dt < n_t) {
        int i = (int)ends_search(se, na_t, j0, nb_t, dt), j = dt - i;
        const int dend = min(dt + MERGE_ITEMS, n_t);
        for (int d = dt; d < dend; ++d) {
            if (j >= nb_t || (i < na_t && se[i] <= j0 + j)) { ++i; continue; }
            srow[j++] = i;
        }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < nb_t; t += MERGE_BLOCK) {
        const i64 o = j0 + t, row = i0 + srow[t];  // output o is probe row row's (o - offsets[row])-th
        const i64 b = lower[row] + (o - offsets[row]);
        out_b[o] = side_value(bsrc, (u64)(bperm ? bperm[b] : b));
        out_p[o] = side_value(psrc, (u64)(pperm ? pperm[row] : row));
        if (out_k) out_k[o] = pkeys[row];
    }
}
