// Grouped aggregation of paper 003 §2: HGB's global hash table of group ids and its shared- or
// global-memory aggregation, SGB's segmented reduction of sorted runs, PGB's per-partition
// shared-memory tables, and a HyperLogLog sketch that estimates the number of groups.
//
// Every aggregate column is described by 4 u64 words (see groupby/common.py): its values
// (i32, i64, f32, f64, or none: count rows), its validity bytes (or null), a meta word
// (type | accumulator flags << 8 | shared-memory offset << 32) and its global accumulators,
// one u64 row of g slots per flagged accumulator, in the order count, sum, sum_lo, min, max.
// Sums of 4-byte integers are exact int64; 8-byte integers sum (v >> 32) and (v & 0xffffffff)
// apart, each exact below 2^31 rows, so the host can form the exact 128-bit total; float
// sums are float64.  min and max work on an order-preserving u64 image of the value (floats:
// every NaN one value above +inf, as SQL orders them), so one integer atomic serves all types.
#include "common.cuh"

#define EMPTY_ROW 0xffffffffu
#define NACC 5
#define DESC 4
#define MAXC 2  // aggregate columns per hgb_aggregate launch (registers)

enum { T_I32 = 0, T_I64 = 1, T_F32 = 2, T_F64 = 3, T_NONE = 4 };
enum { A_COUNT = 0, A_SUM = 1, A_LO = 2, A_MIN = 3, A_MAX = 4 };

struct Col {
    const void* values;
    const u8* valid;
    int type;
    u32 flags;
    u32 soff;  // byte offset of this column's shared-memory accumulators
    u64* acc;
};

__device__ __forceinline__ Col load_col(const u64* __restrict__ d, int c) {
    const u64* p = d + (u64)c * DESC;
    Col col;
    col.values = (const void*)p[0];
    col.valid = (const u8*)p[1];
    const u64 meta = p[2];
    col.type = (int)(meta & 0xff);
    col.flags = (u32)((meta >> 8) & 0xff);
    col.soff = (u32)(meta >> 32);
    col.acc = (u64*)p[3];
    return col;
}

// Column specialization of the per-row kernels: SPEC = -1 reads every column's type and
// accumulator flags from its descriptor; SPEC = type | flags << 8 fixes them at compile time for
// every column, which then has no validity, so that each row's load and merges fold to the few
// instructions its type and accumulators need (kernels/__init__.py: GROUPBY_SPECS; chosen by
// groupby/common.py: column_spec).
template <int SPEC>
__device__ __forceinline__ Col spec_col(const u64* __restrict__ d, int c) {
    Col col = load_col(d, c);
    if (SPEC >= 0) {
        col.type = SPEC & 0xff;
        col.flags = (u32)(SPEC >> 8);
        col.valid = nullptr;
    }
    return col;
}

// Row of accumulator j among a column's flagged ones.
__device__ __forceinline__ u64 acc_row(u32 flags, int j) { return (u64)__popc(flags & ((1u << j) - 1u)); }

__device__ __forceinline__ bool has(u32 flags, int j) { return (flags >> j) & 1u; }

// A run of rows of one group, accumulated in registers.
struct Run {
    u64 count;
    i64 isum, lo;
    double fsum;
    u64 mn, mx;
};

__device__ __forceinline__ void run_reset(Run& r) {
    r.count = 0; r.isum = 0; r.lo = 0; r.fsum = 0.0; r.mn = ~0ull; r.mx = 0ull;
}

__device__ __forceinline__ void run_add(Run& r, const Col& c, u64 row) {
    if (c.valid && !c.valid[row]) return;
    r.count += 1;
    switch (c.type) {
    case T_I32: {
        const i32 v = ((const i32*)c.values)[row];
        r.isum += v;
        const u64 o = (u64)((u32)v ^ 0x80000000u);
        r.mn = min(r.mn, o); r.mx = max(r.mx, o);
        break;
    }
    case T_I64: {
        const i64 v = ((const i64*)c.values)[row];
        r.isum += v >> 32;
        r.lo += v & 0xffffffffll;
        const u64 o = (u64)v ^ 0x8000000000000000ull;
        r.mn = min(r.mn, o); r.mx = max(r.mx, o);
        break;
    }
    case T_F32: {
        const float v = ((const float*)c.values)[row];
        r.fsum += (double)v;
        const u32 b = (v != v) ? 0x7fc00000u : __float_as_uint(v);
        const u64 o = (b & 0x80000000u) ? (u64)(~b) : (u64)(b | 0x80000000u);
        r.mn = min(r.mn, o); r.mx = max(r.mx, o);
        break;
    }
    case T_F64: {
        const double v = ((const double*)c.values)[row];
        r.fsum += v;
        const u64 b = (v != v) ? 0x7ff8000000000000ull : (u64)__double_as_longlong(v);
        const u64 o = (b >> 63) ? ~b : (b | 0x8000000000000000ull);
        r.mn = min(r.mn, o); r.mx = max(r.mx, o);
        break;
    }
    default: break;  // T_NONE: rows are counted
    }
}

// One row's value as raw bits (4 or 8 bytes), false when null.  The per-row paths keep these
// instead of a Run, which halves their registers (and doubles the resident warps).
__device__ __forceinline__ bool load_raw(const Col& c, u64 row, u64& raw) {
    raw = 0;
    if (c.valid && !c.valid[row]) return false;
    if (c.type == T_I32 || c.type == T_F32) raw = ((const u32*)c.values)[row];
    else if (c.type == T_I64 || c.type == T_F64) raw = ((const u64*)c.values)[row];
    return true;
}

__device__ __forceinline__ u64 ordered(int type, u64 raw) {
    switch (type) {
    case T_I32: return (u64)((u32)raw ^ 0x80000000u);
    case T_I64: return raw ^ 0x8000000000000000ull;
    case T_F32: {
        const u32 b = (((u32)raw & 0x7fffffffu) > 0x7f800000u) ? 0x7fc00000u : (u32)raw;  // NaN: one value
        return (b & 0x80000000u) ? (u64)(~b) : (u64)(b | 0x80000000u);
    }
    case T_F64: {
        const u64 b = ((raw & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) ? 0x7ff8000000000000ull : raw;
        return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
    }
    default: return 0;
    }
}

// One row's contribution to the sum accumulator (int64 or float64 bits) and to sum_lo.
__device__ __forceinline__ u64 raw_sum(int type, u64 raw) {
    switch (type) {
    case T_I32: return (u64)(i64)(i32)(u32)raw;
    case T_I64: return (u64)((i64)raw >> 32);
    case T_F32: return (u64)__double_as_longlong((double)__uint_as_float((u32)raw));
    default: return raw;
    }
}

// Merge one present row into shared (`narrow` 4-byte slots where narrow_acc) or global slots.
template <bool SHARED>
__device__ __forceinline__ void merge_raw(unsigned char* sbase, u64* gbase, u64 stride, u64 slot, const Col& c,
                                          u64 raw);

// Global accumulators: u64 slots, row j of a column at acc + acc_row(j) * stride.
__device__ __forceinline__ void g_merge(u64* base, u64 stride, const Col& c, const Run& r) {
    if (r.count == 0) return;
    const u32 f = c.flags;
    if (has(f, A_COUNT)) atomicAdd(base + acc_row(f, A_COUNT) * stride, r.count);
    if (has(f, A_SUM)) {
        u64* p = base + acc_row(f, A_SUM) * stride;
        if (c.type == T_F32 || c.type == T_F64) atomicAdd((double*)p, r.fsum);
        else atomicAdd(p, (u64)r.isum);
    }
    if (has(f, A_LO)) atomicAdd(base + acc_row(f, A_LO) * stride, (u64)r.lo);
    if (has(f, A_MIN)) atomicMin(base + acc_row(f, A_MIN) * stride, r.mn);
    if (has(f, A_MAX)) atomicMax(base + acc_row(f, A_MAX) * stride, r.mx);
}

// Store a run as the whole of a group (no other block holds rows of it).
__device__ __forceinline__ void g_store(u64* base, u64 stride, const Col& c, const Run& r) {
    const u32 f = c.flags;
    if (has(f, A_COUNT)) base[acc_row(f, A_COUNT) * stride] = r.count;
    if (has(f, A_SUM))
        base[acc_row(f, A_SUM) * stride] = (c.type == T_F32 || c.type == T_F64)
            ? (u64)__double_as_longlong(r.fsum) : (u64)r.isum;
    if (has(f, A_LO)) base[acc_row(f, A_LO) * stride] = (u64)r.lo;
    if (has(f, A_MIN)) base[acc_row(f, A_MIN) * stride] = r.mn;
    if (has(f, A_MAX)) base[acc_row(f, A_MAX) * stride] = r.mx;
}

// Shared-memory accumulators: one array of `stride` slots per flagged accumulator, 4 bytes
// wide for counts and for min/max of 4-byte values (native 32-bit shared atomics), else 8.
__device__ __forceinline__ bool narrow_acc(int type, int j) {
    return j == A_COUNT || ((j == A_MIN || j == A_MAX) && (type == T_I32 || type == T_F32));
}

// The arrays before accumulator j: 8 bytes a slot each, less 4 for the 4-byte ones (count, and
// min/max of 4-byte values).  Branch-free: the per-row merges compute it for every accumulator.
__device__ __forceinline__ u64 sacc_off(const Col& c, int j, u64 stride) {
    const u32 before = c.flags & ((1u << j) - 1u);
    const bool narrow_minmax = c.type == T_I32 || c.type == T_F32;
    const u32 narrow_mask = (1u << A_COUNT) | (narrow_minmax ? (1u << A_MIN) | (1u << A_MAX) : 0u);
    return (u64)(8u * __popc(before) - 4u * __popc(before & narrow_mask)) * stride;
}

__device__ __forceinline__ unsigned char* sacc(unsigned char* base, const Col& c, int j, u64 stride) {
    return base + sacc_off(c, j, stride);
}

// Identity values in one slot, and in slots [0, count).
__device__ __forceinline__ void s_init_one(unsigned char* base, u64 stride, u64 slot, const Col& c) {
#pragma unroll
    for (int j = 0; j < NACC; ++j) {
        if (!has(c.flags, j)) continue;
        unsigned char* p = sacc(base, c, j, stride);
        const u64 id = j == A_MIN ? ~0ull : 0ull;
        if (narrow_acc(c.type, j)) ((u32*)p)[slot] = (u32)id;
        else ((u64*)p)[slot] = id;
    }
}

__device__ __forceinline__ void s_init(unsigned char* base, u64 stride, u64 count, const Col& c) {
    for (u64 s = threadIdx.x; s < count; s += blockDim.x) s_init_one(base, stride, s, c);
}

__device__ __forceinline__ void s_merge(unsigned char* base, u64 stride, u64 slot, const Col& c, const Run& r) {
    if (r.count == 0) return;
    const u32 f = c.flags;
    if (has(f, A_COUNT)) atomicAdd((u32*)sacc(base, c, A_COUNT, stride) + slot, (u32)r.count);
    if (has(f, A_SUM)) {
        unsigned char* p = sacc(base, c, A_SUM, stride);
        if (c.type == T_F32 || c.type == T_F64) atomicAdd((double*)p + slot, r.fsum);
        else atomicAdd((u64*)p + slot, (u64)r.isum);
    }
    if (has(f, A_LO)) atomicAdd((u64*)sacc(base, c, A_LO, stride) + slot, (u64)r.lo);
    const bool narrow = c.type == T_I32 || c.type == T_F32;
    if (has(f, A_MIN)) {
        unsigned char* p = sacc(base, c, A_MIN, stride);
        if (narrow) atomicMin((u32*)p + slot, (u32)r.mn);
        else atomicMin((u64*)p + slot, r.mn);
    }
    if (has(f, A_MAX)) {
        unsigned char* p = sacc(base, c, A_MAX, stride);
        if (narrow) atomicMax((u32*)p + slot, (u32)r.mx);
        else atomicMax((u64*)p + slot, r.mx);
    }
}

// Read a shared slot back as a run (count 1 when counts are not tracked, so it is merged).
__device__ __forceinline__ void s_load(Run& r, unsigned char* base, u64 stride, u64 slot, const Col& c) {
    const u32 f = c.flags;
    run_reset(r);
    r.count = has(f, A_COUNT) ? (u64)((u32*)sacc(base, c, A_COUNT, stride))[slot] : 1ull;
    if (has(f, A_SUM)) {
        const u64 v = ((u64*)sacc(base, c, A_SUM, stride))[slot];
        if (c.type == T_F32 || c.type == T_F64) r.fsum = __longlong_as_double((i64)v);
        else r.isum = (i64)v;
    }
    if (has(f, A_LO)) r.lo = (i64)((u64*)sacc(base, c, A_LO, stride))[slot];
    const bool narrow = c.type == T_I32 || c.type == T_F32;
    if (has(f, A_MIN)) {
        unsigned char* p = sacc(base, c, A_MIN, stride);
        r.mn = narrow ? (u64)((u32*)p)[slot] : ((u64*)p)[slot];
        if (narrow && r.mn == 0xffffffffull) r.mn = ~0ull;  // the identity stays the identity
    }
    if (has(f, A_MAX)) {
        unsigned char* p = sacc(base, c, A_MAX, stride);
        r.mx = narrow ? (u64)((u32*)p)[slot] : ((u64*)p)[slot];
    }
}

template <bool SHARED>
__device__ __forceinline__ void merge_raw(unsigned char* sbase, u64* gbase, u64 stride, u64 slot, const Col& c,
                                          u64 raw) {
    const u32 f = c.flags;
    const bool fl = c.type == T_F32 || c.type == T_F64;
    const bool narrow = c.type == T_I32 || c.type == T_F32;
    if (has(f, A_COUNT)) {
        if (SHARED) atomicAdd((u32*)sacc(sbase, c, A_COUNT, stride) + slot, 1u);
        else atomicAdd(gbase + acc_row(f, A_COUNT) * stride + slot, 1ull);
    }
    if (has(f, A_SUM)) {
        u64* p = SHARED ? (u64*)sacc(sbase, c, A_SUM, stride) + slot : gbase + acc_row(f, A_SUM) * stride + slot;
        const u64 v = raw_sum(c.type, raw);
        if (fl) atomicAdd((double*)p, __longlong_as_double((i64)v));
        else atomicAdd(p, v);
    }
    if (has(f, A_LO)) {
        u64* p = SHARED ? (u64*)sacc(sbase, c, A_LO, stride) + slot : gbase + acc_row(f, A_LO) * stride + slot;
        atomicAdd(p, raw & 0xffffffffull);
    }
    if (has(f, A_MIN) || has(f, A_MAX)) {
        const u64 o = ordered(c.type, raw);
        if (has(f, A_MIN)) {
            if (SHARED && narrow) atomicMin((u32*)sacc(sbase, c, A_MIN, stride) + slot, (u32)o);
            else if (SHARED) atomicMin((u64*)sacc(sbase, c, A_MIN, stride) + slot, o);
            else atomicMin(gbase + acc_row(f, A_MIN) * stride + slot, o);
        }
        if (has(f, A_MAX)) {
            if (SHARED && narrow) atomicMax((u32*)sacc(sbase, c, A_MAX, stride) + slot, (u32)o);
            else if (SHARED) atomicMax((u64*)sacc(sbase, c, A_MAX, stride) + slot, o);
            else atomicMax(gbase + acc_row(f, A_MAX) * stride + slot, o);
        }
    }
}

// Is a loaded run the identity (no rows reached that slot)?
__device__ __forceinline__ bool run_empty(const Run& r, const Col& c) {
    if (has(c.flags, A_COUNT)) return r.count == 0;
    return r.isum == 0 && r.lo == 0 && r.fsum == 0.0 && r.mn == ~0ull && r.mx == 0ull;
}

// Column descriptors of a block, staged in shared memory when there are few.
#define SDESC 32
__device__ __forceinline__ const u64* stage_desc(const u64* __restrict__ desc, int ncols, u64* sdesc) {
    if (ncols > SDESC) return desc;
    for (int j = threadIdx.x; j < ncols * DESC; j += blockDim.x) sdesc[j] = desc[j];
    __syncthreads();
    return sdesc;
}

// ---------------------------------------------------------------- HyperLogLog

// regs[b] = max over keys hashing to register b of (leading zeros of the rest of the hash) + 1.
// HLL_ITEMS keys in flight per thread: one at a time, the sketch read 1 GB of keys at about
// 1.3 TB/s on an H200 (latency-bound).  With sub > 1 only every sub-th 32-byte sector of the keys
// is read (a planner's estimate at 1/sub of the bytes; each group of 64 rows or more in a row,
// or spread over the column, is still seen).
#define HLL_ITEMS 8
template <typename K>
__global__ void __launch_bounds__(256)
hll_sketch(const K* __restrict__ keys, i64 n, u32* __restrict__ regs, int sub, u32* __restrict__ finish) {
    __shared__ u32 r[1 << HLL_BITS];
    for (int j = threadIdx.x; j < (1 << HLL_BITS); j += blockDim.x) r[j] = 0;
    __syncthreads();
    constexpr i64 E = 32 / sizeof(K);  // keys a sector
    const i64 m = (n + E * sub - 1) / (E * sub) * E;  // positions of the sectors read
    const i64 S = (i64)gridDim.x * blockDim.x;
    for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < m; i0 += S * HLL_ITEMS) {
        K k[HLL_ITEMS];
        bool ok[HLL_ITEMS];
#pragma unroll
        for (int u = 0; u < HLL_ITEMS; ++u) {
            const i64 j = i0 + u * S, p = j / E * E * sub + j % E;
            ok[u] = j < m && p < n;
            k[u] = ok[u] ? keys[p] : (K)0;
        }
#pragma unroll
        for (int u = 0; u < HLL_ITEMS; ++u) {
            if (!ok[u]) continue;
            u32 b, rho;
            hll_update(k[u], b, rho);
            if (r[b] < rho) atomicMax(&r[b], rho);
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < (1 << HLL_BITS); j += blockDim.x)
        if (r[j] > ((volatile u32*)regs)[j]) atomicMax(&regs[j], r[j]);  // a read, and rarely an atomic
    if (!finish) return;
    // the last block to finish sums the registers (finish[0]: blocks done, zeroed; the sum of
    // 2^-r as a double at finish + 2, the empty registers at finish[1]), so that the estimate
    // costs the host 16 bytes instead of the registers
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&finish[0], 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    double sum = 0.0;
    u32 zeros = 0;
    for (int j = threadIdx.x; j < (1 << HLL_BITS); j += blockDim.x) {
        const u32 v = ((volatile u32*)regs)[j];
        sum += exp2(-(double)v);
        zeros += v == 0;
    }
    __shared__ double sums[32];
    __shared__ u32 zs[32];
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(FULL_MASK, sum, o);
    zeros = __reduce_add_sync(FULL_MASK, zeros);
    if ((threadIdx.x & 31) == 0) { sums[threadIdx.x >> 5] = sum; zs[threadIdx.x >> 5] = zeros; }
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        u32 z = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) { t += sums[w]; z += zs[w]; }
        finish[1] = z;
        *reinterpret_cast<double*>(finish + 2) = t;
    }
}

// ---------------------------------------------------------------- hash tables of keys

// Tables hold the keys themselves, an empty slot holding the smallest key value (the sentinel);
// rows whose key is the sentinel form a group of their own, kept outside the table, so no key
// value is lost.  Insertion is one CAS on the key; probing reads keys only (linear probing).
template <typename K> __device__ __forceinline__ K sentinel();
template <> __device__ __forceinline__ i32 sentinel<i32>() { return (i32)0x80000000u; }
template <> __device__ __forceinline__ i64 sentinel<i64>() { return (i64)0x8000000000000000ull; }

__device__ __forceinline__ i32 cas_key(i32* p, i32 expect, i32 k) { return atomicCAS(p, expect, k); }
__device__ __forceinline__ i64 cas_key(i64* p, i64 expect, i64 k) {
    return (i64)atomicCAS((u64*)p, (u64)expect, (u64)k);
}

// *count >= cap, read once for the lanes that ask together (one address read by every thread
// of a grid at once serializes in its L2 slice: 0.6 ms for the planner's capped build)
__device__ __forceinline__ bool past_cap(const u64* count, u64 cap) {
    const unsigned m = __activemask();
    const int leader = __ffs(m) - 1;
    u64 c = 0;
    if ((int)(threadIdx.x & 31) == leader) c = *(const volatile u64*)count;
    return __shfl_sync(m, c, leader) >= cap;
}

// atomicAdd(count, 1) for each lane that asks together, in one atomic: this lane's old value
__device__ __forceinline__ u64 count_one(u64* count) {
    const unsigned m = __activemask();
    const int lane = threadIdx.x & 31, leader = __ffs(m) - 1;
    u64 base = 0;
    if (lane == leader) base = atomicAdd(count, (u64)__popc(m));
    return __shfl_sync(m, base, leader) + __popc(m & ((1u << lane) - 1));
}

// Insert k (not the sentinel) at its first free slot from `s`: returns +1 when this call put it
// there (*slot: where), 0 when it was already there, -1 when `limit` probes found no room or,
// with `count`, when *count had reached `cap` (hgb_build's planner mode).
template <typename K>
__device__ __forceinline__ int insert_key(K* table, u32 mask, u32 s, K k, u32 limit, u32* slot,
                                          const u64* count = nullptr, u64 cap = 0) {
    const K empty = sentinel<K>();
    for (u32 probe = 0; probe <= limit; ++probe) {
        K cur = table[s];  // a stale empty only costs a CAS; a filled slot never changes
        if (cur == empty) {
            if (count && past_cap(count, cap)) return -1;  // a new key past the cap
            cur = cas_key(&table[s], empty, k);
            if (cur == empty) { *slot = s; return 1; }
        }
        if (cur == k) { *slot = s; return 0; }
        // past the cap every 8th step of a chain gives up: a table filled by keys in flight
        // would otherwise cost every probe its whole limit
        if (count && (probe & 7) == 7 && past_cap(count, cap)) return -1;
        s = (s + 1) & mask;
    }
    return -1;
}

// The slot holding key k, which must be in the table: k sits before the first empty slot of
// its chain, so the probe never passes an empty slot.
template <typename K>
__device__ __forceinline__ u32 slot_of(const K* __restrict__ table, u32 mask, K k) {
    u32 s = hash_key(k) & mask;
    while (table[s] != k) s = (s + 1) & mask;
    return s;
}

#define HGB_ROWS 4

// Rows i0 + u * S (u < HGB_ROWS) of column c as raw bits, those `want`ed; ok[u] false for the
// others, past n, or for a null.
__device__ __forceinline__ void load_rows(const Col& c, i64 n, i64 i0, i64 S, const bool (&want)[HGB_ROWS],
                                          u64 (&raw)[HGB_ROWS], bool (&ok)[HGB_ROWS]) {
#pragma unroll
    for (int u = 0; u < HGB_ROWS; ++u)
        ok[u] = want[u] && i0 + u * S < n && load_raw(c, (u64)(i0 + u * S), raw[u]);
}

// The dense group ids of rows i0 + u * S (u < HGB_ROWS; rows past n get sentinel_gid): their keys
// and first probes are loaded together, so the loads overlap.
template <typename K>
__device__ __forceinline__ void group_ids(const K* __restrict__ keys, i64 n, i64 i0, i64 S, const K* __restrict__ table,
                                          const i32* __restrict__ slot_gid, i32 sentinel_gid, u32 mask,
                                          u64 (&g)[HGB_ROWS]) {
    K k[HGB_ROWS], e[HGB_ROWS];
    u32 s[HGB_ROWS];
#pragma unroll
    for (int u = 0; u < HGB_ROWS; ++u) k[u] = i0 + u * S < n ? keys[i0 + u * S] : sentinel<K>();
#pragma unroll
    for (int u = 0; u < HGB_ROWS; ++u) {
        s[u] = hash_key(k[u]) & mask;
        e[u] = k[u] == sentinel<K>() ? k[u] : table[s[u]];
    }
#pragma unroll
    for (int u = 0; u < HGB_ROWS; ++u) {
        while (e[u] != k[u]) { s[u] = (s[u] + 1) & mask; e[u] = table[s[u]]; }
        g[u] = k[u] == sentinel<K>() ? (u64)(i64)sentinel_gid : (u64)slot_gid[s[u]];
    }
}

// HGB stage 1 (paper 003 Algorithm 1): insert every key into the global table.  flags[0]: the
// table filled up (the caller retries larger); flags[1]: some key is the sentinel.  Each key
// that goes in takes the next dense group id from `groups` (one atomic a warp): slot_gid[its
// slot] and group_keys[id], so that no scan over the table and no compaction follow (ids in
// insertion order; each id is a claimed slot, so id < slots).
// With cap > 0 (the planner's exact group count up to cap, issue 17) flags[0] is also set by a
// (cap + 1)-th key; a thread stops at its first new key past the cap (insert_key reads the count
// before it claims a slot), so that on more groups the build reads little more than until it
// saw cap + 1 of them.  HashTable launches it first over a prefix of the keys with a small grid:
// a full grid's first keys (4 a thread) all go in before any count arrives (0.5 ms on an H100 at
// 2^16 groups against 0.09 for 264 blocks), and sizes the table for cap plus that grid's threads.
template <typename K>
__global__ void __launch_bounds__(256)
hgb_build(const K* __restrict__ keys, i64 n, K* __restrict__ table, u32 mask, u64* __restrict__ groups,
          int* __restrict__ flags, u64 cap, i32* __restrict__ slot_gid, K* __restrict__ group_keys) {
    if (cap) {  // a launch after one that passed the cap does nothing (one read a block)
        __shared__ int done;
        if (threadIdx.x == 0) done = ((volatile int*)flags)[0];
        __syncthreads();
        if (done) return;
    }
    bool full = false, saw_sentinel = false;
    // the first keys of every thread arrive before any count does, and may fill a table sized
    // for cap: with a cap, a chain of 128 slots also counts as full (at the table's load of at
    // most 0.45 below the cap, linear probing's chains stay far shorter)
    const u32 limit = cap ? min(mask, 127u) : mask;
    const i64 S = (i64)gridDim.x * blockDim.x;
    int round = 0;
    for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < n && !full; i0 += S * HGB_ROWS) {
        // past cap + 1 groups every thread stops within 32 rows: under skew a thread meets a key
        // new to the table only rarely, and stopping at its own first one read almost every key
        // (a Zipf 1.5 stream over 2^16 groups passes 28,160 of them in its first 2%)
        if (cap && (++round & 7) == 0 && past_cap(groups, cap + 1)) {
            full = true;
            break;
        }
        K k[HGB_ROWS];
#pragma unroll
        for (int u = 0; u < HGB_ROWS; ++u) k[u] = i0 + u * S < n ? keys[i0 + u * S] : sentinel<K>();
#pragma unroll
        for (int u = 0; u < HGB_ROWS; ++u) {
            if (k[u] == sentinel<K>()) { saw_sentinel |= i0 + u * S < n; continue; }
            u32 slot;
            const int r = insert_key(table, mask, hash_key(k[u]) & mask, k[u], limit, &slot, cap ? groups : nullptr, cap);
            if (r > 0) {
                const u64 id = count_one(groups);
                slot_gid[slot] = (i32)id;
                group_keys[id] = k[u];
                if (cap && id >= cap) full = true;
            }
            if (r < 0) full = true;
        }
    }
    if (full) atomicExch(&flags[0], 1);
    if (saw_sentinel) atomicExch(&flags[1], 1);
}

// An empty HGB table: its n slots filled with the sentinel and the build's state (state[0],
// state[1]) zeroed, in one launch (two cp.full and a cp.zeros cost 30-75 us of host time, a
// tenth of HGB at 2^24 rows on an H200).
template <typename K>
__global__ void __launch_bounds__(256)
hgb_clear(K* __restrict__ table, i64 n, u64* __restrict__ state) {
    if (blockIdx.x == 0 && threadIdx.x < 2) state[threadIdx.x] = 0;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        table[i] = sentinel<K>();
}

// codes[i] = ids[slot of keys[i]] (sentinel keys: sentinel_id); without ids, the slot itself.
template <typename K>
__global__ void __launch_bounds__(256)
hgb_lookup(const K* __restrict__ keys, i64 n, const K* __restrict__ table, const i32* __restrict__ ids,
           i32 sentinel_id, u32 mask, i32* __restrict__ codes) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const K k = keys[i];
        if (k == sentinel<K>()) { codes[i] = sentinel_id; continue; }
        const u32 s = slot_of(table, mask, k);
        codes[i] = ids ? ids[s] : (i32)s;
    }
}

// sample_counts' arguments, one struct passed by value: a launch's host time grows with its
// arguments (22 took 9-14 us of CuPy's on an H200 host, 3 about 5), and at 2^24 rows the
// planner's time is host time.  primitives.SAMPLE_ARGS is its NumPy twin (same order, aligned).
template <typename K>
struct SampleArgs {
    const K* keys0;
    const K* keys1;
    i64 step0, step1, random_rows1;
    unsigned long long* out;  // 12 words: the two summaries, then found, flags, distinct, unused
    const K* build;
    const K* probe;
    i64 bstep, bn, pstep, pn;
    K* table;                 // the match ratio's table of tslots keys (filled here), or null
    i64 tslots;
    u32* ctr;                 // 5 counters, zero at launch: the last block zeroes them again
    unsigned long long* host; // page-locked host words: out copied to host[0 .. 11], seq to host[15]; or null
    unsigned long long seq;
    int n0, n1, nsamples;
    u32 slots;
    int nfill, ninsert, nprobe, unused;
};
// the NumPy twin's size (tests/test_kernels_compile.py compares it, and the fields' order)
static_assert(sizeof(SampleArgs<i64>) == 168 && sizeof(SampleArgs<i32>) == 168, "SampleArgs: 168 bytes");

// Every block of sample_counts ends here: the last one zeroes the counters, then copies the 12
// words to the host's page-locked ones and the launch's seq after them (the host spins on it
// instead of a copy and a stream sync: 10-20 us of a 2^24-row join's planning).  Once the host
// sees seq, the counters are zero for its next launch, on any stream.
template <typename K>
__device__ __forceinline__ void samples_done(const SampleArgs<K>& a) {
    __syncthreads();
    if (threadIdx.x != 0) return;
    __threadfence();
    if (atomicAdd(&a.ctr[4], 1u) != gridDim.x - 1) return;
    __threadfence();
    for (int j = 0; j < 5; ++j) a.ctr[j] = 0;
    if (a.host) {
        const volatile unsigned long long* o = a.out;
        volatile unsigned long long* h = a.host;
        for (int j = 0; j < 12; ++j) h[j] = o[j];
        __threadfence_system();  // the counters and words before the number that says they are there
        h[15] = a.seq;
    }
}

#ifdef GPUJOIN_SAMPLE_TRACE
// -DGPUJOIN_SAMPLE_TRACE (scripts/profile_launch_cold.py --trace): each block's thread 0 prints
// when it started, got past its stage's wait and ended (the GPU's global timer, ns), and a
// summary block its phases
__device__ __forceinline__ unsigned long long trace_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define SAMPLE_TRACE(stage, ticket, t0, tw) \
    if (threadIdx.x == 0) printf("TRACE %d %d %llu %llu %llu\n", (int)(stage), (int)(ticket), t0, tw, trace_now())
#define SAMPLE_MARK(name) const unsigned long long name = trace_now()
#else
#define SAMPLE_TRACE(stage, ticket, t0, tw)
#define SAMPLE_MARK(name)
#endif

// The match ratio's table: buckets of MATCH_BUCKET bytes (a sector: 4 int64 or 8 int32 keys),
// read whole, not through L1 (written in this launch); linear probing from bucket to bucket.
#define MATCH_BUCKET 32
template <typename K>
__device__ __forceinline__ void load_bucket(const K* table, u32 bk, K (&e)[MATCH_BUCKET / sizeof(K)]) {
    union { uint4 v[2]; K k[MATCH_BUCKET / sizeof(K)]; } u;
    const uint4* q = reinterpret_cast<const uint4*>(table + (u64)bk * (MATCH_BUCKET / sizeof(K)));
    u.v[0] = __ldcg(q);
    u.v[1] = __ldcg(q + 1);
#pragma unroll
    for (int j = 0; j < (int)(MATCH_BUCKET / sizeof(K)); ++j) e[j] = u.k[j];
}

// The match ratio's stages (issue 17 item 3), run by sample_counts' blocks past the samples in
// the order of a ticket (ctr[0]): tickets below nfill fill the table (tslots keys) with the
// sentinel key and zero out[8 ... 11]; the next ninsert put the distinct build sample keys
// build[i * bstep] (i < bn) in it, out[10] += how many were new (the build multiplicity) and the
// high int32 of out[9] set when the sentinel key is among them; the rest count in out[8] the
// probe sample keys probe[i * pstep] (i < pn) that it holds.  A stage waits until the previous
// stage's blocks are done (ctr[1], ctr[2]); those took their tickets first, so they are running
// or done, and no block waits on one that cannot be scheduled (the order CUB's decoupled
// look-back relies on): one launch, no grid-wide barrier, no co-residency.  Three launches had
// cost the planner more host time than the GPU spends here (2^24 rows, docs/BENCHMARKS.md).
template <typename K>
__device__ __forceinline__ void match_stages(const SampleArgs<K>& a) {
    const K* __restrict__ build = a.build;
    const K* __restrict__ probe = a.probe;
    K* table = a.table;
    unsigned long long* out = a.out;
    u32* ctr = a.ctr;
    const i64 bstep = a.bstep, bn = a.bn, pstep = a.pstep, pn = a.pn, tslots = a.tslots;
    const int nfill = a.nfill, ninsert = a.ninsert, nprobe = a.nprobe;
    __shared__ int ticket;
#ifdef GPUJOIN_SAMPLE_TRACE
    const unsigned long long t0 = trace_now();
#endif
    if (threadIdx.x == 0) ticket = (int)atomicAdd(&ctr[0], 1u);
    __syncthreads();
    const int t = ticket;
    const int stage = t < nfill ? 0 : t < nfill + ninsert ? 1 : 2;
    const int b = stage == 0 ? t : stage == 1 ? t - nfill : t - nfill - ninsert;
    const int nb = stage == 0 ? nfill : stage == 1 ? ninsert : nprobe;
    if (stage) {
        if (threadIdx.x == 0) {
            const volatile u32* done = &ctr[stage];
            const u32 need = stage == 1 ? (u32)nfill : (u32)ninsert;
            while (*done < need) __nanosleep(64);
            __threadfence();
        }
        __syncthreads();
    }
#ifdef GPUJOIN_SAMPLE_TRACE
    const unsigned long long tw = trace_now();
#endif
    const u32 bmask = (u32)(tslots / (MATCH_BUCKET / sizeof(K)) - 1);
    volatile int* sentinel_seen = reinterpret_cast<volatile int*>(out + 9) + 1;
    if (stage == 0) {
        if (t == 0 && threadIdx.x < 4) out[8 + threadIdx.x] = 0;
        for (i64 j = (i64)b * blockDim.x + threadIdx.x; j < tslots; j += (i64)nb * blockDim.x) table[j] = sentinel<K>();
    } else {
        // one sample key a thread: an insert or a lookup is a chain of dependent L2 round trips,
        // and four keys a thread (their loads in flight together) took 109 us against 62 at
        // 2^18 keys a side on an H200
        const K* __restrict__ keys = stage == 1 ? build : probe;
        const i64 step = stage == 1 ? bstep : pstep, n = stage == 1 ? bn : pn;
        const bool has = stage == 2 && *sentinel_seen != 0;
        unsigned long long count = 0;  // new distinct keys (inserts) or keys found (probes)
        for (i64 i = (i64)b * blockDim.x + threadIdx.x; i < n; i += (i64)nb * blockDim.x) {
            const K k = keys[i * step];
            if (k == sentinel<K>()) {
                if (stage == 1) *sentinel_seen = 1;
                else count += has;
                continue;
            }
            // buckets of 32 bytes, each read in one round trip: a lookup of one slot a step
            // walked chains as long as the longest in its warp (2^16 keys a side on an H200:
            // the probes 11-17 us, in buckets 5-6; the inserts' CAS alike either way)
            for (u32 bk = hash_key(k) & bmask; ; bk = (bk + 1) & bmask) {
                K e[MATCH_BUCKET / sizeof(K)];
                load_bucket(table, bk, e);
                int hit = 0, free = -1;
#pragma unroll
                for (int j = 0; j < (int)(MATCH_BUCKET / sizeof(K)); ++j) {
                    hit |= e[j] == k;
                    if (free < 0 && e[j] == sentinel<K>()) free = j;
                }
                if (hit) { count += stage == 2; break; }
                if (free < 0) continue;  // a full bucket: the next
                if (stage == 2) break;   // a free slot ends the chain: not there
                // the first free slot; a CAS lost to this key is a hit, to another key a new read
                const K cur = cas_key(&table[(u64)bk * (MATCH_BUCKET / sizeof(K)) + free], sentinel<K>(), k);
                if (cur == sentinel<K>()) { ++count; break; }
                if (cur == k) break;
                bk = (bk - 1) & bmask;  // (the same bucket again)
            }
        }
        for (int o = 16; o; o >>= 1) count += __shfl_xor_sync(FULL_MASK, count, o);
        if ((threadIdx.x & 31) == 0 && count) atomicAdd(&out[stage == 1 ? 10 : 8], count);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(&ctr[stage + 1], 1u);
    }
    SAMPLE_TRACE(stage + 1, t, t0, tw);
}

// A sample's key counts, summarized: block b < nsamples (at most 2) reads keys_b[i * step_b]
// (i < n_b <= slots / 2) into a shared-memory table of `slots` (a power of two) and writes
// out[4 b ...] = distinct keys, rows of keys seen more than once, the largest count, the
// smallest count (0s for no keys): what the planner reads from a sample (top key's share,
// repeated share, whether every group was seen twice), in one launch for both sides of a join,
// without the sample leaving the GPU.  With random_rows1 > 0, block 1 draws its n_1 rows at
// random (with replacement, a fixed seed) from keys1[0 .. random_rows1): the group-by planner's
// test of more groups than a bound, which a strided sample of sorted keys would fail
// (stats.more_groups_than).  The blocks past the samples run match_stages (with a table).
// Dynamic shared memory: slots * (sizeof(K) + 4) bytes.
template <typename K>
__global__ void __launch_bounds__(1024)
sample_counts(const SampleArgs<K> a) {
#ifdef GPUJOIN_SAMPLE_TRACE
    const unsigned long long t0 = trace_now();
    const long long c0 = clock64();  // (cycles over ns: the SM's clock while the block ran)
#endif
    if ((int)blockIdx.x >= a.nsamples) {
        match_stages(a);
        samples_done(a);
        return;
    }
    unsigned long long* out = a.out;
    const u32 slots = a.slots;
    extern __shared__ __align__(16) unsigned char dyn[];
    K* table = reinterpret_cast<K*>(dyn);
    u32* counts = reinterpret_cast<u32*>(dyn + slots * sizeof(K));
    __shared__ u32 tally[5];  // sentinel rows, distinct, repeated rows, largest, smallest
    const K* __restrict__ keys = blockIdx.x ? a.keys1 : a.keys0;
    const i64 step = blockIdx.x ? a.step1 : a.step0;
    const int n = blockIdx.x ? a.n1 : a.n0;
    const i64 random_rows = blockIdx.x ? a.random_rows1 : 0;
    for (u32 j = threadIdx.x; j < slots; j += blockDim.x) { table[j] = sentinel<K>(); counts[j] = 0; }
    if (threadIdx.x < 5) tally[threadIdx.x] = threadIdx.x == 4 ? 0xffffffffu : 0u;
    __syncthreads();
    SAMPLE_MARK(t_init);
#ifdef GPUJOIN_SAMPLE_TRACE
    unsigned long long t_fetched = 0;
#endif
    // up to 8 rows a thread loaded before any is counted: a sample's loads in flight together
    for (int base = 0; base < n; base += 8 * (int)blockDim.x) {
        K ks[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = base + u * (int)blockDim.x + (int)threadIdx.x;
            // a random row: the high word of a 64-bit hash of i times the rows
            if (i < n) ks[u] = keys[random_rows > 0 ? (i64)__umul64hi(mix64((u64)i + 0x9E3779B97F4A7C15ull),
                                                                    (u64)random_rows)
                                                    : (i64)i * step];
        }
#ifdef GPUJOIN_SAMPLE_TRACE
        {  // every thread's loads in (used, so waited for), then the time: loads apart from inserts
            K sink = 0;
            for (int u = 0; u < 8; ++u)
                if (base + u * (int)blockDim.x + (int)threadIdx.x < n) sink ^= ks[u];
            if (sink == (K)0x5bd1e995) atomicAdd(&tally[0], 0u);
            __syncthreads();
            if (!t_fetched) t_fetched = trace_now();
        }
#endif
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            if (base + u * (int)blockDim.x + (int)threadIdx.x >= n) break;
            const K k = ks[u];
            if (k == sentinel<K>()) { atomicAdd(&tally[0], 1u); continue; }
            u32 slot;
            insert_key(table, slots - 1u, hash_key(k) & (slots - 1u), k, slots - 1u, &slot);
            atomicAdd(&counts[slot], 1u);
        }
    }
    SAMPLE_MARK(t_loaded);  // (thread 0's: its keys in)
    __syncthreads();
    SAMPLE_MARK(t_counted);
    u32 d = 0, rep = 0, top = 0, least = 0xffffffffu;
    for (u32 j = threadIdx.x; j <= slots; j += blockDim.x) {
        const u32 c = j < slots ? counts[j] : tally[0];  // the sentinel key's count last
        if (!c) continue;
        ++d;
        rep += c > 1 ? c : 0u;
        top = max(top, c);
        least = min(least, c);
    }
    d = __reduce_add_sync(FULL_MASK, d);
    rep = __reduce_add_sync(FULL_MASK, rep);
    top = __reduce_max_sync(FULL_MASK, top);
    least = __reduce_min_sync(FULL_MASK, least);
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&tally[1], d);
        atomicAdd(&tally[2], rep);
        atomicMax(&tally[3], top);
        atomicMin(&tally[4], least);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long* o = out + 4 * blockIdx.x;
        o[0] = tally[1];
        o[1] = tally[2];
        o[2] = tally[3];
        o[3] = tally[1] ? tally[4] : 0u;
    }
#ifdef GPUJOIN_SAMPLE_TRACE
    if (threadIdx.x == 0)
        printf("PHASES %d %llu %llu %llu %llu %lld %llu\n", (int)blockIdx.x, t_init - t0, t_loaded - t0,
               t_counted - t0, trace_now() - t0, clock64() - c0, t_fetched - t0);
#endif
    SAMPLE_TRACE(0, blockIdx.x, t0, t0);
    samples_done(a);
}

// HGB stage 2: every row finds its dense group id (slot_gid of its slot; sentinel_gid for the
// sentinel key), or reads it from `gids` when given, and updates each column's accumulators: in
// shared memory when `use_smem` (the groups' slots fit, `copies` copies of them so that the warps
// of a block contend less at small g; `sstride` slots per accumulator array), flushed to global
// memory with one atomic per touched slot; else straight into global memory.  With `slice` > 0
// the groups are cut in slices of `slice` ids, block (x, y) keeps slice y in shared memory and
// skips the rows of other slices: gridDim.y passes over the rows instead of global atomics,
// for groups that fit a few blocks' shared memory.  With `hot` > 0 (and no slice), only ids below
// `hot` (the frequent keys', numbered first) are kept in shared memory, the others go straight
// to global memory: a hot group costs shared atomics, not one L2 address's serialized atomics
// from every row.  Each thread takes HGB_ROWS rows at a time
// and loads all their keys, slots and values before its atomics, so the loads overlap.
// (1024, 1): the register cap of (256, 4), and room for one 1024-thread block an SM when a
// slice takes most of the SM's shared memory.
template <typename K, int SPEC>
__global__ void __launch_bounds__(1024, 1)
hgb_aggregate(const K* __restrict__ keys, i64 n, const K* __restrict__ table, const i32* __restrict__ slot_gid,
              i32 sentinel_gid, u32 mask, const i32* __restrict__ gids, const u64* __restrict__ desc, int ncols,
              u64 groups, int use_smem, int copies, u64 sstride, u64 slice, u64 hot) {
    extern __shared__ __align__(16) unsigned char smem[];
    Col cols[MAXC];
#pragma unroll
    for (int c = 0; c < MAXC; ++c)
        if (c < ncols) cols[c] = spec_col<SPEC>(desc, c);
    const u64 lo = slice ? (u64)blockIdx.y * slice : 0;
    const u64 in_slice = slice ? (lo < groups ? min(slice, groups - lo) : 0) : groups;
    const u64 in_smem = hot ? hot : in_slice;  // ids kept in shared memory (when use_smem)
    const u64 slots = in_smem * (u64)copies;
    if (use_smem) {
#pragma unroll
        for (int c = 0; c < MAXC; ++c)
            if (c < ncols) s_init(smem + cols[c].soff, sstride, slots, cols[c]);
        __syncthreads();
    }
    const u64 copy = (u64)((threadIdx.x >> 5) % copies);
    const i64 S = (i64)gridDim.x * blockDim.x;
    for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < n; i0 += S * HGB_ROWS) {
        u64 g[HGB_ROWS];
        if (gids) {
#pragma unroll
            for (int u = 0; u < HGB_ROWS; ++u) g[u] = i0 + u * S < n ? (u64)(i64)gids[i0 + u * S] : 0;
        } else {
            group_ids(keys, n, i0, S, table, slot_gid, sentinel_gid, mask, g);
        }
        bool want[HGB_ROWS];
#pragma unroll
        for (int u = 0; u < HGB_ROWS; ++u) {
            g[u] -= lo;  // unsigned: ids below the slice wrap past in_slice
            want[u] = g[u] < in_slice;
        }
#pragma unroll
        for (int c = 0; c < MAXC; ++c) {
            if (c >= ncols) break;
            u64 raw[HGB_ROWS];
            bool ok[HGB_ROWS];
            load_rows(cols[c], n, i0, S, want, raw, ok);
#pragma unroll
            for (int u = 0; u < HGB_ROWS; ++u) {
                if (!ok[u]) continue;
                if (use_smem && g[u] < in_smem)
                    merge_raw<true>(smem + cols[c].soff, nullptr, sstride, g[u] * copies + copy, cols[c], raw[u]);
                else
                    merge_raw<false>(nullptr, cols[c].acc, groups, g[u], cols[c], raw[u]);  // lo is 0 here
            }
        }
    }
    if (!use_smem) return;
    __syncthreads();
    for (u64 s = threadIdx.x; s < slots; s += blockDim.x) {
#pragma unroll
        for (int c = 0; c < MAXC; ++c) {
            if (c >= ncols) break;
            Run r;
            s_load(r, smem + cols[c].soff, sstride, s, cols[c]);
            if (!run_empty(r, cols[c])) g_merge(cols[c].acc + lo + s / copies, groups, cols[c], r);
        }
    }
}

// ---------------------------------------------------------------- HGB over a thread block cluster

// Hopper's distributed shared memory: the blocks of a cluster can address each other's shared
// memory, so CL blocks hold CL times the groups one block can.  Reductions go to the owner
// block's slot by its shared::cluster address (PTX mapa + red).
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ u32 map_rank(u32 saddr, u32 rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(saddr), "r"(rank));
    return r;
}

__device__ __forceinline__ void red_add32(u32 a, u32 v) {
    asm volatile("red.shared::cluster.add.u32 [%0], %1;" :: "r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void red_add64(u32 a, u64 v) {
    asm volatile("red.shared::cluster.add.u64 [%0], %1;" :: "r"(a), "l"(v) : "memory");
}
__device__ __forceinline__ void red_addf64(u32 a, double v) {
    asm volatile("red.shared::cluster.add.f64 [%0], %1;" :: "r"(a), "d"(v) : "memory");
}
__device__ __forceinline__ void red_min32(u32 a, u32 v) {
    asm volatile("red.shared::cluster.min.u32 [%0], %1;" :: "r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void red_max32(u32 a, u32 v) {
    asm volatile("red.shared::cluster.max.u32 [%0], %1;" :: "r"(a), "r"(v) : "memory");
}
// 64-bit min/max by compare-and-swap: red.shared::cluster.{min,max}.u64 lost updates on an H200
// (tests/test_cuda_groupby.py), while the 32-bit ones and the adds did not.
__device__ __forceinline__ u64 cas64(u32 a, u64 expect, u64 v) {
    u64 old;
    asm volatile("atom.shared::cluster.cas.b64 %0, [%1], %2, %3;" : "=l"(old) : "r"(a), "l"(expect), "l"(v) : "memory");
    return old;
}
__device__ __forceinline__ u64 ld_cluster64(u32 a) {
    u64 v;
    asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ void red_min64(u32 a, u64 v) {
    u64 cur = ld_cluster64(a);
    while (v < cur) {
        const u64 old = cas64(a, cur, v);
        if (old == cur) break;
        cur = old;
    }
}
__device__ __forceinline__ void red_max64(u32 a, u64 v) {
    u64 cur = ld_cluster64(a);
    while (v > cur) {
        const u64 old = cas64(a, cur, v);
        if (old == cur) break;
        cur = old;
    }
}

// merge_raw into the shared memory of another block of the cluster: `base` is the
// shared::cluster address of that block's accumulators of column c.
__device__ __forceinline__ void merge_raw_remote(u32 base, u64 stride, u64 slot, const Col& c, u64 raw) {
    const u32 f = c.flags;
    const bool narrow = c.type == T_I32 || c.type == T_F32;
    if (has(f, A_COUNT)) red_add32(base + (u32)(sacc_off(c, A_COUNT, stride) + slot * 4), 1u);
    if (has(f, A_SUM)) {
        const u32 a = base + (u32)(sacc_off(c, A_SUM, stride) + slot * 8);
        const u64 v = raw_sum(c.type, raw);
        if (c.type == T_F32 || c.type == T_F64) red_addf64(a, __longlong_as_double((i64)v));
        else red_add64(a, v);
    }
    if (has(f, A_LO)) red_add64(base + (u32)(sacc_off(c, A_LO, stride) + slot * 8), raw & 0xffffffffull);
    if (has(f, A_MIN) || has(f, A_MAX)) {
        const u64 o = ordered(c.type, raw);
        if (has(f, A_MIN)) {
            const u32 a = base + (u32)(sacc_off(c, A_MIN, stride) + slot * (narrow ? 4 : 8));
            if (narrow) red_min32(a, (u32)o); else red_min64(a, o);
        }
        if (has(f, A_MAX)) {
            const u32 a = base + (u32)(sacc_off(c, A_MAX, stride) + slot * (narrow ? 4 : 8));
            if (narrow) red_max32(a, (u32)o); else red_max64(a, o);
        }
    }
}

// HGB stage 2 when the groups' slots fit in the shared memory of CL blocks but not of one:
// block `rank` of each cluster owns groups [rank * slice, (rank + 1) * slice); every row's
// update goes to its group's owner; each block then flushes its slice to global memory.
template <typename K, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(512, 2)
hgb_aggregate_cluster(const K* __restrict__ keys, i64 n, const K* __restrict__ table,
                      const i32* __restrict__ slot_gid, i32 sentinel_gid, u32 mask, const u64* __restrict__ desc,
                      int ncols, u64 groups, u64 slice, u64 sstride) {
    extern __shared__ __align__(16) unsigned char smem[];
    Col cols[MAXC];
#pragma unroll
    for (int c = 0; c < MAXC; ++c)
        if (c < ncols) cols[c] = load_col(desc, c);
    const u32 rank = cluster_rank();
#pragma unroll
    for (int c = 0; c < MAXC; ++c)
        if (c < ncols) s_init(smem + cols[c].soff, sstride, slice, cols[c]);
    cluster_sync();  // every block's slots are initialized before anyone reduces into them
    const u32 sbase = (u32)__cvta_generic_to_shared(smem);
    const i64 S = (i64)gridDim.x * blockDim.x;
    for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < n; i0 += S * HGB_ROWS) {
        u64 g[HGB_ROWS];
        group_ids(keys, n, i0, S, table, slot_gid, sentinel_gid, mask, g);
        bool want[HGB_ROWS];
#pragma unroll
        for (int u = 0; u < HGB_ROWS; ++u) want[u] = true;
        u32 owner[HGB_ROWS];
        u64 local[HGB_ROWS];
#pragma unroll
        for (int u = 0; u < HGB_ROWS; ++u) {
            owner[u] = (u32)(g[u] / slice);
            local[u] = g[u] - (u64)owner[u] * slice;
            owner[u] = map_rank(sbase, owner[u] < CL ? owner[u] : 0);
        }
#pragma unroll
        for (int c = 0; c < MAXC; ++c) {
            if (c >= ncols) break;
            u64 raw[HGB_ROWS];
            bool ok[HGB_ROWS];
            load_rows(cols[c], n, i0, S, want, raw, ok);
#pragma unroll
            for (int u = 0; u < HGB_ROWS; ++u)
                if (ok[u]) merge_raw_remote(owner[u] + cols[c].soff, sstride, local[u], cols[c], raw[u]);
        }
    }
    cluster_sync();  // every update has landed, and no block exits while others write to it
    for (u64 s = threadIdx.x; s < slice; s += blockDim.x) {
        const u64 g = (u64)rank * slice + s;
        if (g >= groups) break;
#pragma unroll
        for (int c = 0; c < MAXC; ++c) {
            if (c >= ncols) break;
            Run r;
            s_load(r, smem + cols[c].soff, sstride, s, cols[c]);
            if (!run_empty(r, cols[c])) g_merge(cols[c].acc + g, groups, cols[c], r);
        }
    }
}

// ---------------------------------------------------------------- SGB: segmented reduction

#define SR_BLOCK 256
#define SR_ITEMS 16
#define SR_TILE (SR_BLOCK * SR_ITEMS)

// One column of rows already ordered by group: gid[i] is the dense, non-decreasing group id of
// position i, and the value of position i is values[index ? index[i] : i] (an index: GFUR, the
// values still in input order; none: GFTR, the values moved with their keys).  Each thread
// reduces 16 consecutive positions in registers, run by run, into the tile's shared slots;
// groups inside a tile are stored whole, the two at its edges merged with atomics.
template <typename I>
__global__ void __launch_bounds__(SR_BLOCK)
sorted_reduce(const i32* __restrict__ gid, i64 n, const I* __restrict__ index, const u64* __restrict__ desc,
              u64 acc_stride) {
    extern __shared__ __align__(16) unsigned char smem[];
    const Col c = load_col(desc, 0);
    const i64 tile0 = (i64)blockIdx.x * SR_TILE;
    const i64 tile_n = min((i64)SR_TILE, n - tile0);
    const i32 ga = gid[tile0], gb = gid[tile0 + tile_n - 1];
    const u64 span = (u64)(gb - ga) + 1;
    s_init(smem, SR_TILE, span, c);
    __syncthreads();
    Run r;
    run_reset(r);
    i32 cur = -1;
    const i64 first = tile0 + (i64)threadIdx.x * SR_ITEMS;
    for (int j = 0; j < SR_ITEMS; ++j) {
        const i64 i = first + j;
        if (i >= tile0 + tile_n) break;
        const i32 g = gid[i];
        if (g != cur) {
            if (cur >= 0) s_merge(smem, SR_TILE, (u64)(cur - ga), c, r);
            run_reset(r);
            cur = g;
        }
        run_add(r, c, index ? (u64)index[i] : (u64)i);
    }
    if (cur >= 0) s_merge(smem, SR_TILE, (u64)(cur - ga), c, r);
    __syncthreads();
    for (u64 s = threadIdx.x; s < span; s += SR_BLOCK) {
        Run t;
        s_load(t, smem, SR_TILE, s, c);
        const u64 g = (u64)ga + s;
        if (g == (u64)ga || g == (u64)gb) g_merge(c.acc + g, acc_stride, c, t);
        else g_store(c.acc + g, acc_stride, c, t);
    }
}

// ---------------------------------------------------------------- PGB

// PGB's probe of its shared-memory table: linear probing from an even home slot that reads two
// 4-byte keys per load (the warp waits for its longest probe, and at 2^20 groups partitions fill
// the table to about half); 8-byte keys probe one slot at a time (insert_key).
__device__ __forceinline__ int pgb_probe(i32* table, u32 mask, u32 s, i32 k, u32* slot) {
    const i32 empty = sentinel<i32>();
    s &= ~1u;
    for (u32 probe = 0; probe <= mask; probe += 2) {
        const u64 pair = reinterpret_cast<const u64*>(table)[s >> 1];
        const i32 lo = (i32)(u32)pair, hi = (i32)(u32)(pair >> 32);
        if (lo == k) { *slot = s; return 0; }
        if (lo == empty) return insert_key(table, mask, s, k, mask - probe, slot);
        if (hi == k) { *slot = s + 1; return 0; }
        if (hi == empty) return insert_key(table, mask, s + 1, k, mask - probe, slot);
        s = (s + 2) & mask;
    }
    return -1;
}
__device__ __forceinline__ int pgb_probe(i64* table, u32 mask, u32 s, i64 k, u32* slot) {
    return insert_key(table, mask, s, k, mask, slot);
}

#define PGB_BLOCK 512
#define PGB_ROWS 8

// One block per partition of rows already radix-partitioned on their key hash (offsets: P + 1
// starts), in one pass over the partition: each row's key goes into a shared-memory table of
// 2^tbl_bits keys and the row merges at once into the accumulators of its table slot (slot
// 2^tbl_bits holds the sentinel key's group; `sstride` = 2^tbl_bits + 2 slots per accumulator
// array, set to identity before the pass).  The block then numbers the used slots by a block-wide
// scan, claims that many output slots with one atomic and stores every group whole: no group
// spans two partitions.  A partition with more than max_groups groups or row_limit rows, or
// whose groups do not fit in the output's capacity, is listed in spill_parts for the caller to
// aggregate another way (paper 003 §2.6 proposes hash or sort group-by for such partitions).  Counting the groups in a pass of their own first (the
// paper's order) read every key twice; one pass measured faster on an H200.
template <typename K, typename I, int SPEC>
__global__ void __launch_bounds__(PGB_BLOCK, 2)
pgb_aggregate(const K* __restrict__ keys, const i64* __restrict__ offsets, int P, const I* __restrict__ index,
              const u64* __restrict__ desc, int ncols, int tbl_bits, u32 max_groups, u64 sstride, i64 row_limit,
              K* __restrict__ out_keys, u64 capacity, u64* __restrict__ group_counter, u64* __restrict__ filled,
              i32* __restrict__ spill_parts, i32* __restrict__ spill_count) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ u64 sdesc[SDESC * DESC];
    __shared__ u32 ng, sentinel_seen;  // sentinel_seen: EMPTY_ROW until a row has the sentinel key
    __shared__ int ovf;
    const u32 TBL = 1u << tbl_bits, tmask = TBL - 1u;
    K* skey = (K*)smem;
    const K empty = sentinel<K>();
    const u64* d = stage_desc(desc, ncols, sdesc);
    for (int p = blockIdx.x; p < P; p += gridDim.x) {
        const i64 start = offsets[p], end = offsets[p + 1];
        if (start == end) continue;
        if (end - start > row_limit) {
            if (threadIdx.x == 0) spill_parts[atomicAdd(spill_count, 1)] = p;
            continue;
        }
        __syncthreads();  // the previous partition's last reads of the table and ng are done
        for (u32 s = threadIdx.x; s < TBL; s += PGB_BLOCK) skey[s] = empty;
        for (int ci = 0; ci < ncols; ++ci) {
            const Col c = spec_col<SPEC>(d, ci);
            s_init(smem + c.soff, sstride, TBL + 1, c);
        }
        if (threadIdx.x == 0) { ng = 0; ovf = 0; sentinel_seen = EMPTY_ROW; }
        __syncthreads();
        // every thread runs every round (rows past the end idle), so that each warp can be
        // brought back together after every probe: diverged probe loops otherwise kept warps
        // at about 3 active threads (ncu, H200) through the merges that follow
        for (i64 r0 = start; r0 < end; r0 += PGB_BLOCK * PGB_ROWS) {
            if (__any_sync(FULL_MASK, *(volatile int*)&ovf)) break;  // the partition spills anyway
            const i64 i0 = r0 + threadIdx.x;
            K k[PGB_ROWS];
            u32 slot[PGB_ROWS];
#pragma unroll
            for (int u = 0; u < PGB_ROWS; ++u) k[u] = i0 + u * PGB_BLOCK < end ? keys[i0 + u * PGB_BLOCK] : empty;
#pragma unroll
            for (int u = 0; u < PGB_ROWS; ++u) {
                slot[u] = EMPTY_ROW;
                if (i0 + u * PGB_BLOCK < end) {
                    if (k[u] == empty) {  // the sentinel key's group: counted by whoever sees it first
                        slot[u] = TBL;
                        if (sentinel_seen == EMPTY_ROW && atomicCAS(&sentinel_seen, EMPTY_ROW, 0u) == EMPTY_ROW)
                            if (atomicAdd(&ng, 1u) >= max_groups) ovf = 1;
                    } else {
                        const int r = pgb_probe(skey, tmask, (hash_key(k[u]) * 0x9E3779B1u) >> (32 - tbl_bits),
                                                k[u], &slot[u]);
                        if (r > 0) {
                            if (atomicAdd(&ng, 1u) >= max_groups) ovf = 1;
                        } else if (r < 0) {
                            ovf = 1;
                            slot[u] = EMPTY_ROW;
                        }
                    }
                }
                __syncwarp();
            }
            for (int ci = 0; ci < ncols; ++ci) {
                const Col c = spec_col<SPEC>(d, ci);
                u64 raw[PGB_ROWS];
                bool ok[PGB_ROWS];
#pragma unroll
                for (int u = 0; u < PGB_ROWS; ++u) {
                    const i64 i = i0 + u * PGB_BLOCK;
                    ok[u] = slot[u] != EMPTY_ROW && load_raw(c, index ? (u64)index[i] : (u64)i, raw[u]);
                }
#pragma unroll
                for (int u = 0; u < PGB_ROWS; ++u)
                    if (ok[u]) merge_raw<true>(smem + c.soff, nullptr, sstride, slot[u], c, raw[u]);
                __syncwarp();
            }
        }
        __syncthreads();
        if (ovf) {
            if (threadIdx.x == 0) spill_parts[atomicAdd(spill_count, 1)] = p;
            continue;
        }
        // thread t numbers the used slots among its run of slots [t * per, (t + 1) * per)
        const u32 per = (TBL + PGB_BLOCK) / PGB_BLOCK;  // TBL + 1 slots with the sentinel's
        const u32 s0 = threadIdx.x * per, s1 = min(s0 + per, TBL + 1);
        u32 used = 0;
        for (u32 s = s0; s < s1; ++s) used += s < TBL ? skey[s] != empty : sentinel_seen != EMPTY_ROW;
        u64 o = block_claim(group_counter, used);
        // thread 0's o is the block's first slot: past the capacity, groups [o, ...) stay unfilled
        if (threadIdx.x == 0 && o + ng > capacity) {
            ovf = 1;
            atomicMin(filled, o);
        }
        __syncthreads();
        if (ovf) {
            if (threadIdx.x == 0) spill_parts[atomicAdd(spill_count, 1)] = p;
            continue;
        }
        for (u32 s = s0; s < s1; ++s) {
            if (!(s < TBL ? skey[s] != empty : sentinel_seen != EMPTY_ROW)) continue;
            out_keys[o] = s < TBL ? skey[s] : empty;
            for (int ci = 0; ci < ncols; ++ci) {
                const Col c = spec_col<SPEC>(d, ci);
                Run t;
                s_load(t, smem + c.soff, sstride, s, c);
                g_store(c.acc + o, capacity, c, t);
            }
            ++o;
        }
    }
}
