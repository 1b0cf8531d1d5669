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

// Block b merges diagonals [b*TILE, (b+1)*TILE): two global searches find its ranges of a and
// b, which it stages in shared memory (coalesced); each thread then searches its own diagonal
// there and merges MERGE_ITEMS steps, writing out[j] when it consumes b[j].
template <typename K>
__global__ void __launch_bounds__(MERGE_BLOCK)
merge_bounds(const K* __restrict__ a, i64 na, const K* __restrict__ b, i64 nb, int upper,
             i64* __restrict__ out) {
    __shared__ K sa[MERGE_TILE];
    __shared__ K sb[MERGE_TILE];
    __shared__ i64 split[2];
    const i64 total = na + nb;
    const i64 d0 = (i64)blockIdx.x * MERGE_TILE;
    const i64 d1 = min(d0 + MERGE_TILE, total);
    if (threadIdx.x < 2) split[threadIdx.x] = merge_path_search(a, na, b, nb, threadIdx.x ? d1 : d0, upper);
    __syncthreads();
    const i64 i0 = split[0], j0 = d0 - i0;
    const int na_t = (int)(split[1] - i0), nb_t = (int)((d1 - split[1]) - j0);
    for (int t = threadIdx.x; t < na_t; t += MERGE_BLOCK) sa[t] = a[i0 + t];
    for (int t = threadIdx.x; t < nb_t; t += MERGE_BLOCK) sb[t] = b[j0 + t];
    __syncthreads();
    const int dt = threadIdx.x * MERGE_ITEMS;
    const int n_t = na_t + nb_t;
    if (dt >= n_t) return;
    int i = (int)merge_path_search(sa, (i64)na_t, sb, (i64)nb_t, (i64)dt, upper), j = dt - i;
    const int dend = min(dt + MERGE_ITEMS, n_t);
    for (int d = dt; d < dend; ++d) {
        if (j >= nb_t || (i < na_t && take_a(sa[i], sb[j], upper))) ++i;
        else { out[j0 + j] = i0 + i; ++j; }
    }
}

// Expand per-probe match ranges into output pairs: sorted probe row j matches sorted build rows
// [lower[j], lower[j] + offsets[j+1] - offsets[j]).  Output row o finds its probe row by binary
// search over the offsets, so one hot key does not leave a single thread all the work (the cost
// is the output's, whatever the multiplicities).  bperm / pperm (null: identity) map a sorted
// row to its position in its side's space; out_k (when not null) gets the key, pkeys[j].  SMJ
// expands whole sorted sides; PHJ the sorted rows of its oversized partitions.
template <typename K, typename BV, typename PV>
__global__ void expand_matches(const i64* __restrict__ lower, const i64* __restrict__ offsets, i64 m,
                               u64 total, const K* __restrict__ pkeys, const i64* __restrict__ bperm,
                               const i64* __restrict__ pperm, const BV* __restrict__ bsrc,
                               const PV* __restrict__ psrc, BV* __restrict__ out_b, PV* __restrict__ out_p,
                               K* __restrict__ out_k) {
    for (u64 o = (u64)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (u64)gridDim.x * blockDim.x) {
        i64 lo = 0, hi = m;  // largest j with offsets[j] <= o
        while (hi - lo > 1) { i64 mid = (lo + hi) >> 1; if ((u64)offsets[mid] <= o) lo = mid; else hi = mid; }
        const i64 b = lower[lo] + (i64)(o - (u64)offsets[lo]);
        out_b[o] = side_value(bsrc, (u64)(bperm ? bperm[b] : b));
        out_p[o] = side_value(psrc, (u64)(pperm ? pperm[lo] : lo));
        if (out_k) out_k[o] = pkeys[lo];
    }
}
