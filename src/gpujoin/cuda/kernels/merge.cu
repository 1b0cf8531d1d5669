// Merge path (Green, McColl, Bader, "GPU merge path", ICS 2012) over two sorted key arrays, as
// SMJ uses it (paper 003 §1.1): for every element of b, the number of elements of a that are
// smaller (upper == 0: its lower bound in a) or not greater (upper == 1: its upper bound).
// Thread t merges diagonals [t*items, (t+1)*items) of the merged sequence after finding its
// start by binary search along its first diagonal, so work per thread is the same whatever the
// key distribution.
#include "common.cuh"

template <typename K>
__device__ __forceinline__ bool take_a(K x, K y, int upper) { return upper ? (x <= y) : (x < y); }

template <typename K>
__global__ void merge_bounds(const K* __restrict__ a, i64 na, const K* __restrict__ b, i64 nb,
                             int upper, int items, i64* __restrict__ out) {
    const i64 total = na + nb;
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 d0 = t * items;
    if (d0 >= total) return;
    i64 lo = d0 > nb ? d0 - nb : 0, hi = d0 < na ? d0 : na;
    while (lo < hi) {  // the number of a's elements among the first d0 of the merge
        i64 mid = (lo + hi) >> 1;
        if (take_a(a[mid], b[d0 - 1 - mid], upper)) lo = mid + 1; else hi = mid;
    }
    i64 i = lo, j = d0 - lo;
    const i64 d1 = min(d0 + items, total);
    for (i64 d = d0; d < d1; ++d) {
        if (j >= nb || (i < na && take_a(a[i], b[j], upper))) ++i;
        else { out[j] = i; ++j; }
    }
}

// Expand per-probe match ranges into output pairs: probe row j matches build rows
// [lower[j], lower[j] + offsets[j+1] - offsets[j]).  Output row o finds its probe row by binary
// search over the offsets, so one hot key does not leave a single thread all the work.
template <typename K, typename BV, typename PV>
__global__ void expand_matches(const i64* __restrict__ lower, const i64* __restrict__ offsets, i64 m,
                               u64 total, const K* __restrict__ bkeys,
                               const BV* __restrict__ bsrc, const PV* __restrict__ psrc,
                               BV* __restrict__ out_b, PV* __restrict__ out_p, K* __restrict__ out_k) {
    for (u64 o = (u64)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (u64)gridDim.x * blockDim.x) {
        i64 lo = 0, hi = m;  // largest j with offsets[j] <= o
        while (hi - lo > 1) { i64 mid = (lo + hi) >> 1; if ((u64)offsets[mid] <= o) lo = mid; else hi = mid; }
        const u64 bpos = (u64)(lower[lo] + (i64)(o - (u64)offsets[lo]));
        out_b[o] = side_value(bsrc, bpos);
        out_p[o] = side_value(psrc, (u64)lo);
        if (out_k) out_k[o] = bkeys[bpos];
    }
}
