// CUB's one-sweep LSD radix sort (Adinets and Merrill, "Onesweep", 2022), as paper 003's own
// code sorts (cub::DeviceRadixSort; reading note 003: "[mine] RawModule kernels that include CUB
// headers").  CUB's device-wide dispatch is host code, which NVRTC does not compile, so these
// three kernels instantiate CUB's block-level agents (the headers CuPy carries, in CuPy's CCCL
// version) with CUB's own sm_90 tuning, and primitives.onesweep_sort launches them as CUB's
// dispatch does: one histogram of every pass's digits in one read of the keys, an exclusive scan
// of each pass's 256 counts, then one kernel a pass that ranks a tile, takes its digits' offsets
// by decoupled look-back over the tiles before it and scatters: no histogram pass a digit, no
// scan of tiles' counts between passes (partition.cu's stable passes need both).
#include <cub/agent/agent_radix_sort_histogram.cuh>
#include <cub/agent/agent_radix_sort_onesweep.cuh>
#include <cub/block/block_scan.cuh>

// CUB's OnesweepLargeKeyPolicy for sm_90 (device/dispatch/tuning/tuning_radix_sort.cuh), for
// 4- and 8-byte keys; V is cub::NullType to sort keys only.
template <typename K, typename V, typename O>
struct OnesweepTuning {
    static constexpr bool KEYS_ONLY = cuda::std::is_same_v<V, cub::NullType>;
    static constexpr int OFF64 = sizeof(O) == 8;
    using Dominant = cuda::std::conditional_t<(!KEYS_ONLY && sizeof(V) > sizeof(K)), V, K>;
    static constexpr int ITEMS =
        sizeof(K) == 4 ? (KEYS_ONLY ? 20 - OFF64 : (sizeof(V) < 8 ? (OFF64 ? 17 : 23) : (OFF64 ? 29 : 30)))
                       : (KEYS_ONLY || sizeof(V) < 8 ? 30 : 24);
    using Onesweep = cub::AgentRadixSortOnesweepPolicy<384, ITEMS, Dominant, 1, cub::RADIX_RANK_MATCH_EARLY_COUNTS_ANY,
                                                      cub::BLOCK_SCAN_RAKING_MEMOIZE, cub::RADIX_SORT_STORE_DIRECT, 8>;
    using Histogram = cub::AgentRadixSortHistogramPolicy<128, 16, 1, K, 8>;
};

// bins[pass * 256 + digit] += the keys whose digit of that pass it is, over bits [begin, end)
// (bins zeroed by the caller; any grid: blocks stride over the tiles)
template <typename K, typename O>
__global__ void __launch_bounds__(128) onesweep_histogram(O* bins, const K* keys, O n, int begin, int end) {
    using Agent = cub::detail::radix_sort::AgentRadixSortHistogram<typename OnesweepTuning<K, cub::NullType, O>::Histogram,
                                                                  false, K, O>;
    __shared__ typename Agent::TempStorage s;
    Agent(s, bins, keys, n, begin, end).Process();
}

// each pass's 256 counts to exclusive offsets in place (a block a pass)
template <typename O>
__global__ void __launch_bounds__(256) onesweep_exclusive_sum(O* bins) {
    using Scan = cub::BlockScan<O, 256>;
    __shared__ typename Scan::TempStorage s;
    O v = bins[blockIdx.x * 256 + threadIdx.x];
    Scan(s).ExclusiveSum(v, v);
    bins[blockIdx.x * 256 + threadIdx.x] = v;
}

// one pass over `n` rows (at most a portion of 2^28): `lookback` (a word per tile and digit) and
// `*ctr` (the tile counter) zeroed before; `bins_in` the digits' starts; the last tile writes
// the next portion's starts to `bins_out` (nullptr for the last portion)
template <typename K, typename V, typename O>
__global__ void __launch_bounds__(OnesweepTuning<K, V, O>::Onesweep::BLOCK_THREADS)
onesweep_pass(int* lookback, int* ctr, O* bins_out, const O* bins_in, K* keys_out,
                                                     const K* keys_in, V* values_out, const V* values_in, int n, int bit,
                                                     int bits) {
    using Agent = cub::detail::radix_sort::AgentRadixSortOnesweep<typename OnesweepTuning<K, V, O>::Onesweep, false, K, V,
                                                                  O, int>;
    __shared__ typename Agent::TempStorage s;
    Agent(s, lookback, ctr, bins_out, bins_in, keys_out, keys_in, values_out, values_in, n, bit, bits).Process();
}

// threads and rows of a tile of onesweep_pass<K, V, O>, for the launcher (CUB's policy after its
// scaling by the dominant type's size)
template <typename K, typename V, typename O>
__global__ void onesweep_tile(int* out) {
    using P = typename OnesweepTuning<K, V, O>::Onesweep;
    out[0] = P::BLOCK_THREADS;
    out[1] = P::BLOCK_THREADS * P::ITEMS_PER_THREAD;
}
