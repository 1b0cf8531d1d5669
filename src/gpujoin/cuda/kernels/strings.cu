// Strings of an Arrow large_string array in GPU memory (its bytes and int64 offsets): each one's
// 64-bit hash, and a count of the pairs (i, rep[i]) whose strings differ (cuda/strings.py's
// dictionary union: a 64-bit collision is found there, never trusted).
#include "common.cuh"

// FNV-1a over the bytes, seeded with the length, then murmur3's 64-bit finalizer (mix64): one
// thread a string (dictionary entries are short; a long one costs its thread alone).
__global__ void string_hash(const u8* __restrict__ data, const i64* __restrict__ offsets, i64 n,
                            u64* __restrict__ out) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 lo = offsets[i], hi = offsets[i + 1];
        u64 h = 0xcbf29ce484222325ull ^ (u64)(hi - lo);
        for (i64 j = lo; j < hi; ++j) h = (h ^ data[j]) * 0x100000001b3ull;
        out[i] = mix64(h);
    }
}

// mismatches[0] += the i whose string differs from string rep[i]'s (lengths, then bytes).
__global__ void strings_differ(const u8* __restrict__ data, const i64* __restrict__ offsets,
                               const i64* __restrict__ rep, i64 n, unsigned long long* __restrict__ mismatches) {
    u32 bad = 0;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 r = rep[i];
        if (r == i) continue;
        const i64 a = offsets[i], b = offsets[r], len = offsets[i + 1] - a;
        bool same = len == offsets[r + 1] - b;
        for (i64 j = 0; same && j < len; ++j) same = data[a + j] == data[b + j];
        bad += !same;
    }
    if (bad) atomicAdd(mismatches, (unsigned long long)bad);
}
