// Hash-join match kernels: the shared-memory co-partition join of PHJ (paper 003 §1.4) and the
// global open-addressing table of NPHJ (paper 003 §1.5).
//
// Both emit the same output: for each match, out_b[o] = bsrc[build position] (or the position
// itself when bsrc is null), out_p[o] likewise for the probe side, and out_k[o] the key when
// out_k is not null.  Slots o come from one atomic per block and round on `counter`; writes past `cap` are
// dropped but still counted, so the caller re-runs with the exact capacity when the first guess
// was short.  bflag / pflag (when not null) mark matched build / probe rows for outer, semi and
// anti joins.
#include "common.cuh"

// Emit the matches of one probe row, found by walking its probe sequence twice (count, then write).
#define EMIT_MATCHES(WALK)                                                            \
    u32 c = 0;                                                                        \
    if (valid) { WALK(c += 1u) }                                                      \
    u64 o = block_claim(counter, c);                                                   \
    if (c) {                                                                          \
        if (pflag) pflag[s] = 1;                                                      \
        WALK({ if (o < cap) { out_b[o] = side_value(bsrc, bpos);                      \
                              out_p[o] = side_value(psrc, (u64)s);                    \
                              if (out_k) out_k[o] = k; }                              \
               if (bflag) bflag[bpos] = 1; ++o; })                                    \
    }

// Rows a thread of a phj_match block places in the bucket-sorted table (cap_build / blockDim).
#define PHJ_ROWS 8
// A probe row whose bucket holds more than PHJ_LONG build rows is walked by its whole warp.
#define PHJ_LONG 32

// One block per work unit: build rows [b0, b1) (at most `cap_build`, at most PHJ_ROWS a
// thread) of partition p, probe rows [s0, s1) (at most `probe_chunk`).  unit_off[p] is the first
// unit of partition p (P+1 entries).  The build rows are counting-sorted by bucket in shared
// memory (bstart: each bucket's first row, srow: each row's place in the unit), so a probe row's
// candidates are one contiguous range: a range longer than PHJ_LONG (a key of many build rows,
// issue 17) is counted and written by the probe row's whole warp, 32 candidates a step, instead
// of by one thread while the other 31 wait.
template <typename K, typename BV, typename PV>
__global__ void __launch_bounds__(512)
phj_match(const K* __restrict__ bk, const i64* __restrict__ boff, const K* __restrict__ pk,
          const i64* __restrict__ poff, const i64* __restrict__ unit_off, int P, int cap_build,
          int probe_chunk, int nbuckets, int radix_bits,
          const BV* __restrict__ bsrc, const PV* __restrict__ psrc, BV* __restrict__ out_b,
          PV* __restrict__ out_p, K* __restrict__ out_k, u64* counter, u64 cap,
          u8* __restrict__ bflag, u8* __restrict__ pflag) {
    extern __shared__ u64 smem[];
    K* skeys = reinterpret_cast<K*>(smem);
    u32* bstart = reinterpret_cast<u32*>(skeys + cap_build);  // nbuckets + 1
    u16* srow = reinterpret_cast<u16*>(bstart + nbuckets + 1);
    __shared__ i64 range[4];
    __shared__ u32 s_warp[32];

    if (threadIdx.x == 0) {
        const i64 u = blockIdx.x;
        int lo = 0, hi = P;  // largest p with unit_off[p] <= u
        while (hi - lo > 1) { int mid = (lo + hi) >> 1; if (unit_off[mid] <= u) lo = mid; else hi = mid; }
        const int p = lo;
        const i64 psize = poff[p + 1] - poff[p];
        const i64 nsc = (psize + probe_chunk - 1) / probe_chunk;
        const i64 c = u - unit_off[p];
        const i64 b0 = boff[p] + (c / nsc) * cap_build;
        const i64 s0 = poff[p] + (c % nsc) * probe_chunk;
        range[0] = b0; range[1] = min(b0 + cap_build, boff[p + 1]);
        range[2] = s0; range[3] = min(s0 + probe_chunk, poff[p + 1]);
    }
    for (int j = threadIdx.x; j <= nbuckets; j += blockDim.x) bstart[j] = 0;
    __syncthreads();
    const i64 b0 = range[0], s0 = range[2], s1 = range[3];
    const int nb = (int)(range[1] - b0);
    const u32 bmask = (u32)nbuckets - 1u;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // counting sort of the build rows by bucket: count (remembering each row's rank in its
    // bucket), exclusive scan of the counts, place
    K key[PHJ_ROWS];
    u32 bucket[PHJ_ROWS], rank[PHJ_ROWS];
#pragma unroll
    for (int r = 0; r < PHJ_ROWS; ++r) {
        const int j = threadIdx.x + r * blockDim.x;
        if (j < nb) {
            key[r] = bk[b0 + j];
            bucket[r] = (hash_key(key[r]) >> radix_bits) & bmask;
            rank[r] = atomicAdd(&bstart[bucket[r]], 1u);
        }
    }
    __syncthreads();
    {   // exclusive scan of bstart[0..nbuckets) in place, nbuckets / blockDim consecutive a thread
        const int per = (nbuckets + blockDim.x - 1) / blockDim.x, first = threadIdx.x * per;
        u32 sum = 0;
        for (int i = 0; i < per && first + i < nbuckets; ++i) sum += bstart[first + i];
        const u32 incl = warp_inclusive_sum<u32>(sum);
        if (lane == 31) s_warp[warp] = incl;
        __syncthreads();
        if (warp == 0) {
            const int nwarps = (blockDim.x + 31) >> 5;
            const u32 v = lane < nwarps ? s_warp[lane] : 0u;
            s_warp[lane] = warp_inclusive_sum<u32>(v) - v;
        }
        __syncthreads();
        u32 run = s_warp[warp] + incl - sum;
        for (int i = 0; i < per && first + i < nbuckets; ++i) {
            const u32 c = bstart[first + i];
            bstart[first + i] = run;
            run += c;
        }
        if (threadIdx.x == 0) bstart[nbuckets] = (u32)nb;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < PHJ_ROWS; ++r) {
        const int j = threadIdx.x + r * blockDim.x;
        if (j < nb) {
            const u32 at = bstart[bucket[r]] + rank[r];
            skeys[at] = key[r];
            srow[at] = (u16)j;
        }
    }
    __syncthreads();

    for (i64 r0 = s0; r0 < s1; r0 += blockDim.x) {  // block-uniform: block_claim syncs the block
        const i64 s = r0 + threadIdx.x;
        const bool valid = s < s1;
        const K k = valid ? pk[s] : (K)0;
        const u32 bk_ = (hash_key(k) >> radix_bits) & bmask;
        const u32 lo = valid ? bstart[bk_] : 0u, hi = valid ? bstart[bk_ + 1] : 0u;
        const bool wide = hi - lo > PHJ_LONG;
        u32 c = 0;
        if (!wide)
            for (u32 j = lo; j < hi; ++j) c += skeys[j] == k;
        for (u32 m = __ballot_sync(FULL_MASK, wide); m; m &= m - 1) {  // the warp counts each wide range
            const int L = __ffs(m) - 1;
            const u32 Llo = __shfl_sync(FULL_MASK, lo, L), Lhi = __shfl_sync(FULL_MASK, hi, L);
            const K Lk = __shfl_sync(FULL_MASK, k, L);
            u32 n = 0;
            for (u32 j = Llo + lane; j < Lhi; j += 32) n += skeys[j] == Lk;
            n = __reduce_add_sync(FULL_MASK, n);
            if (lane == L) c = n;
        }
        u64 o = block_claim(counter, c);
        if (c && pflag) pflag[s] = 1;
        if (!wide && c) {
            for (u32 j = lo; j < hi; ++j) {
                if (skeys[j] != k) continue;
                const u64 bpos = (u64)(b0 + srow[j]);
                if (o < cap) {
                    out_b[o] = side_value(bsrc, bpos);
                    out_p[o] = side_value(psrc, (u64)s);
                    if (out_k) out_k[o] = k;
                }
                if (bflag) bflag[bpos] = 1;
                ++o;
            }
        }
        for (u32 m = __ballot_sync(FULL_MASK, wide && c); m; m &= m - 1) {  // the warp writes each
            const int L = __ffs(m) - 1;
            const u32 Llo = __shfl_sync(FULL_MASK, lo, L), Lhi = __shfl_sync(FULL_MASK, hi, L);
            const K Lk = __shfl_sync(FULL_MASK, k, L);
            const i64 Ls = __shfl_sync(FULL_MASK, s, L);
            u64 Lo = __shfl_sync(FULL_MASK, o, L);
            for (u32 j0 = Llo; j0 < Lhi; j0 += 32) {
                const u32 j = j0 + lane;
                const bool hit = j < Lhi && skeys[j] == Lk;
                const u32 bal = __ballot_sync(FULL_MASK, hit);
                if (hit) {
                    const u64 at = Lo + __popc(bal & lanemask_lt());
                    const u64 bpos = (u64)(b0 + srow[j]);
                    if (at < cap) {
                        out_b[at] = side_value(bsrc, bpos);
                        out_p[at] = side_value(psrc, (u64)Ls);
                        if (out_k) out_k[at] = Lk;
                    }
                    if (bflag) bflag[bpos] = 1;
                }
                Lo += __popc(bal);
            }
        }
    }
}

// NPHJ build: insert build rows into a linear-probing table of 2^k slots (a multimap:
// duplicate keys take their own slots): rows[0..n) when rows is not null, else rows 0..n-1.
// slot_row starts all -1.
template <typename K>
__global__ void nphj_build(const K* __restrict__ bk, i64 n, const i64* __restrict__ rows, K* __restrict__ slot_key,
                           i32* __restrict__ slot_row, u64 mask) {
    for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (i64)gridDim.x * blockDim.x) {
        const i64 i = rows ? rows[j] : j;
        const K k = bk[i];
        u64 t = (u64)hash_key(k) & mask;
        while (atomicCAS(&slot_row[t], -1, (i32)i) != -1) t = (t + 1) & mask;
        slot_key[t] = k;
    }
}

template <typename K, typename BV, typename PV>
__global__ void nphj_probe(const K* __restrict__ pk, i64 n, const K* __restrict__ slot_key,
                           const i32* __restrict__ slot_row, u64 mask,
                           const BV* __restrict__ bsrc, const PV* __restrict__ psrc,
                           BV* __restrict__ out_b, PV* __restrict__ out_p, K* __restrict__ out_k,
                           u64* counter, u64 cap, u8* __restrict__ bflag, u8* __restrict__ pflag) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 r0 = (i64)blockIdx.x * blockDim.x; r0 < n; r0 += stride) {  // block-uniform
        const i64 s = r0 + threadIdx.x;
        const bool valid = s < n;
        const K k = valid ? pk[s] : (K)0;
        const u64 t0 = (u64)hash_key(k) & mask;
#define NPHJ_WALK(ACTION)                                                             \
        for (u64 t = t0; ; t = (t + 1) & mask) {                                      \
            const i32 r = slot_row[t];                                                \
            if (r < 0) break;                                                         \
            if (slot_key[t] == k) { const u64 bpos = (u64)r; ACTION; }                \
        }
        EMIT_MATCHES(NPHJ_WALK)
#undef NPHJ_WALK
    }
}
