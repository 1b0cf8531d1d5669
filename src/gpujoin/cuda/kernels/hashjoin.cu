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

#define NIL16 0xffffu
#define NIL32 0xffffffffu

// Emit the matches of one probe row, found by walking a chain twice (count, then write).
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

// Work units: build rows [b0, b1) (at most `cap_build`) of partition p, probe rows [s0, s1) (at
// most `probe_chunk`).  unit_off[p] is the first unit of partition p (P+1 entries), *units their
// number.  Each block takes units one at a time from *work (zeroed before the launch) until
// none is left, so that the grid (a few blocks an SM) is launched before the host knows how
// many units there are: reading that count first had left the GPU idle 0.2-0.5 ms a join.
template <typename K, typename BV, typename PV>
__global__ void __launch_bounds__(512)
phj_match(const K* __restrict__ bk, const i64* __restrict__ boff, const K* __restrict__ pk,
          const i64* __restrict__ poff, const i64* __restrict__ unit_off, const i64* __restrict__ units,
          u64* work, int P, int cap_build, int probe_chunk, int nbuckets, int radix_bits,
          const BV* __restrict__ bsrc, const PV* __restrict__ psrc, BV* __restrict__ out_b,
          PV* __restrict__ out_p, K* __restrict__ out_k, u64* counter, u64 cap,
          u8* __restrict__ bflag, u8* __restrict__ pflag) {
    extern __shared__ u64 smem[];
    K* skeys = reinterpret_cast<K*>(smem);
    u32* head = reinterpret_cast<u32*>(skeys + cap_build);
    u16* next = reinterpret_cast<u16*>(head + nbuckets);
    __shared__ i64 range[4];
    const i64 n_units = *units;

    for (;;) {
        if (threadIdx.x == 0) {
            const i64 u = (i64)atomicAdd(reinterpret_cast<unsigned long long*>(work), 1ull);
            if (u >= n_units) {
                range[0] = -1;
            } else {
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
        }
        __syncthreads();  // (also: every thread is done with the unit before's table)
        const i64 b0 = range[0], s0 = range[2], s1 = range[3];
        if (b0 < 0) return;
        const int nb = (int)(range[1] - b0);
        for (int j = threadIdx.x; j < nbuckets; j += blockDim.x) head[j] = NIL32;
        __syncthreads();
        const u32 bmask = (u32)nbuckets - 1u;
        for (int j = threadIdx.x; j < nb; j += blockDim.x) {
            K k = bk[b0 + j];
            skeys[j] = k;
            u32 old = atomicExch(&head[(hash_key(k) >> radix_bits) & bmask], (u32)j);
            next[j] = (u16)(old == NIL32 ? NIL16 : old);
        }
        __syncthreads();

        for (i64 r0 = s0; r0 < s1; r0 += blockDim.x) {  // block-uniform: block_claim syncs the block
            const i64 s = r0 + threadIdx.x;
            const bool valid = s < s1;
            K k = valid ? pk[s] : (K)0;
            u32 h = head[(hash_key(k) >> radix_bits) & bmask];
#define PHJ_WALK(ACTION)                                                              \
            for (u32 j = h; j != NIL32; j = (next[j] == NIL16 ? NIL32 : (u32)next[j]))    \
                if (skeys[j] == k) { const u64 bpos = (u64)(b0 + j); ACTION; }
            EMIT_MATCHES(PHJ_WALK)
#undef PHJ_WALK
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
