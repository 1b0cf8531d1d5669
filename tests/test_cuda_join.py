"""GPU joins (every algorithm, every join type) against the CPU engine; GPU primitives against
NumPy.  Marker ``gpu``: run on a GPU machine with ``pytest -m gpu``."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import gpujoin
from gpujoin.plan.join import execute_join
from gpujoin.testing import assert_tables_equal

from strategies import join_pair

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")
if not gpujoin.backend.cuda_available():
    pytest.skip("no usable GPU", allow_module_level=True)

from gpujoin.cuda import primitives as prim  # noqa: E402
from gpujoin.cuda.join import ALGORITHMS as ALL_ALGORITHMS  # noqa: E402
from gpujoin.cuda.kernels import SCATTER_MINB  # noqa: E402
from gpujoin.cuda.table import DeviceTable  # noqa: E402

HOWS = ["inner", "left", "right", "full", "semi", "anti"]
#: The general equi-join algorithms; "bitmap" (semi/anti joins over [0, 2^32)) is tested apart.
ALGORITHMS = tuple(a for a in ALL_ALGORITHMS if a != "bitmap")


def fmix32(k):
    h = k.astype(np.uint32)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def fmix64_low(k):
    """common.cuh's hash_key of 8-byte keys: murmur3's 64-bit finalizer, low 32 bits."""
    h = k.astype(np.uint64)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h.astype(np.uint32)


# ---------------------------------------------------------------- primitives


@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 4097, 100_003])
@pytest.mark.parametrize("bits", [3, 8, 11, 16])
def test_radix_partition_is_a_stable_partition_on_hash_bits(n, bits):
    rng = np.random.default_rng(n + bits)
    keys = rng.integers(-1000, 1000, n).astype(np.int32)
    vals = np.arange(n, dtype=np.int64)
    small = rng.integers(0, 255, n).astype(np.uint8)
    k, (v, s), off = prim.radix_partition(cp.asarray(keys), [cp.asarray(vals), cp.asarray(small)],
                                          prim.Digits(bits=bits))
    digit = (fmix32(keys) & np.uint32((1 << bits) - 1)).astype(np.int64)
    order = np.argsort(digit, kind="stable")
    np.testing.assert_array_equal(cp.asnumpy(k), keys[order])
    np.testing.assert_array_equal(cp.asnumpy(v), vals[order])
    np.testing.assert_array_equal(cp.asnumpy(s), small[order])
    expected = np.searchsorted(digit[order], np.arange((1 << bits) + 1))
    np.testing.assert_array_equal(cp.asnumpy(off), expected)


@pytest.mark.parametrize("minb", SCATTER_MINB)
@pytest.mark.parametrize("bits,n", [(5, 3 * 4096 + 17), (8, 3 * 4096 + 17), (11, 100_003), (16, 3 * 4096 + 17),
                                    (16, 300_007), (20, 70_001)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_unstable_radix_partition_keeps_rows_whole(dtype, bits, n, minb, monkeypatch):
    # stable=False: every row (key and all columns) lands whole in its partition, in any order
    # within it; with columns of one width (one launch) the passes rank by atomics, most
    # significant digit first (each pass after the first within the partitions before it, many
    # of them empty here), with two widths stably.  Skewed keys: warps whose lanes share a digit.
    monkeypatch.setattr(prim, "SCATTER_MINB", minb)
    rng = np.random.default_rng(7)
    keys = np.where(rng.random(n) < 0.5, 42, rng.integers(-5000, 5000, n)).astype(dtype)
    ids = np.arange(n, dtype=np.uint32)
    cols = [ids, rng.integers(0, 1 << 31, n).astype(np.uint32)]
    h = (fmix32(keys) if dtype == np.int32 else fmix64_low(keys)) & np.uint32((1 << bits) - 1)
    for extra in ([], [np.arange(n, dtype=np.int64)]):
        k, moved, off = prim.radix_partition(cp.asarray(keys), [cp.asarray(c) for c in cols + extra],
                                             prim.Digits(bits=bits), stable=False)
        got_ids = cp.asnumpy(moved[0])
        np.testing.assert_array_equal(np.sort(got_ids), ids)
        np.testing.assert_array_equal(cp.asnumpy(k), keys[got_ids])
        for got, c in zip(moved[1:], cols[1:] + extra):
            np.testing.assert_array_equal(cp.asnumpy(got), c[got_ids])
        digit = h[got_ids]
        assert (np.diff(digit.astype(np.int64)) >= 0).all()
        np.testing.assert_array_equal(cp.asnumpy(off), np.searchsorted(digit, np.arange((1 << bits) + 1)))
    # the first pass's histogram handed over (PGB's way): the same partitions
    counts = prim.radix_histogram(cp.asarray(keys), [cp.asarray(c) for c in cols], prim.Digits(bits=bits),
                                  stable=False)
    k, moved, off2 = prim.radix_partition(cp.asarray(keys), [cp.asarray(c) for c in cols], prim.Digits(bits=bits),
                                          counts=counts, stable=False)
    np.testing.assert_array_equal(cp.asnumpy(off2), cp.asnumpy(off))
    np.testing.assert_array_equal(np.sort(cp.asnumpy(moved[0])), ids)


@pytest.mark.parametrize("bits,n", [(9, 100_003), (17, 300_007), (18, 200_003), (26, 70_001)])
@pytest.mark.parametrize("width", [4, 8])
def test_nine_bit_unstable_passes(bits, n, width, monkeypatch):
    # 17, 18 and 26 bits take 9-bit passes (9 + 8, 9 + 9, 9 + 9 + 8; a 9-bit one alone for 9):
    # the same partitions as 8-bit passes, every row whole; 8-byte keys and columns stage the most
    # shared memory (8192 x 18 bytes)
    from gpujoin.cuda import kernels

    rng = np.random.default_rng(bits)
    keys = cp.asarray(np.where(rng.random(n) < 0.3, 7, rng.integers(-2**40, 2**40, n)))
    ids = cp.arange(n, dtype=np.dtype(f"u{width}"))
    other = cp.asarray(rng.integers(0, 1 << 31, n).astype(f"u{width}"))
    k, (gid, got), off = prim.radix_partition(keys, [ids, other], prim.Digits(bits=bits), stable=False)
    monkeypatch.setattr(kernels, "UNSTABLE_PASS_BITS", 8)
    assert len(prim._passes(prim.Digits(bits=bits), True)) == -(-bits // 8)
    _, _, off8 = prim.radix_partition(keys, [ids, other], prim.Digits(bits=bits), stable=False)
    np.testing.assert_array_equal(cp.asnumpy(off), cp.asnumpy(off8))
    gid = cp.asnumpy(gid).astype(np.int64)
    np.testing.assert_array_equal(np.sort(gid), np.arange(n))
    np.testing.assert_array_equal(cp.asnumpy(k), cp.asnumpy(keys)[gid])
    np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(other)[gid])
    digit = fmix64_low(cp.asnumpy(k)) & np.uint32((1 << bits) - 1)
    assert (np.diff(digit.astype(np.int64)) >= 0).all()
    np.testing.assert_array_equal(cp.asnumpy(off), np.searchsorted(digit, np.arange((1 << bits) + 1)))


def test_value_range_matches_numpy():
    # one read of each column into one (min, max) pair: int32 and int64 together, the int64
    # extremes, a strided view, one row, and nothing
    rng = np.random.default_rng(5)
    a = rng.integers(-2**62, 2**62, 1_000_003)
    b = rng.integers(-2**31, 2**31 - 1, 77).astype(np.int32)
    assert prim.value_range([cp.asarray(a), cp.asarray(b)]) == (min(a.min(), b.min()), max(a.max(), b.max()))
    ext = np.array([5, np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0])
    assert prim.value_range([cp.asarray(ext)]) == (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
    assert prim.value_range([cp.asarray(b)[::3]]) == (b[::3].min(), b[::3].max())
    assert prim.value_range([cp.asarray(np.array([-7], np.int32))]) == (-7, -7)
    assert prim.value_range([cp.asarray(a)[:0]]) is None and prim.value_range([]) is None


def test_phj_with_nine_bit_passes_matches_eight_bit_passes(monkeypatch):
    # PHJ-TR and -UR at 17 radix bits (9 + 8, one pass fewer) give the pairs of 8-bit passes (8 + 8 + 1)
    from gpujoin.cuda import kernels
    from gpujoin.cuda.join.phj import phj

    rng = np.random.default_rng(3)
    rk = cp.asarray(rng.permutation(400_000).astype(np.int64))
    pk = cp.asarray(rng.integers(0, 600_000, 500_000).astype(np.int64))
    pay_r, pay_p = [cp.arange(rk.size, dtype=cp.int64)], [cp.arange(pk.size, dtype=cp.int64) * 3]

    def pairs(method, pass_bits):
        monkeypatch.setattr(kernels, "UNSTABLE_PASS_BITS", pass_bits)
        out = phj(rk, pk, pay_r, pay_p, "inner", method=method, radix_bits=17)
        b, p = cp.asnumpy(out.build_column(0)[0]), cp.asnumpy(out.probe_column(0)[0])
        order = np.lexsort((b, p))
        return b[order], p[order]

    hits = int(cp.isin(pk, rk).sum())
    for method in ("tr", "ur"):
        (b9, p9), (b8, p8) = pairs(method, 9), pairs(method, 8)
        assert b9.size == hits
        np.testing.assert_array_equal(b9, b8)
        np.testing.assert_array_equal(p9, p8)
        np.testing.assert_array_equal(cp.asnumpy(rk)[b9], cp.asnumpy(pk)[p9 // 3])


@pytest.mark.parametrize("n,bits,stable", [(0, 5, False), (1, 5, False), (4097, 5, False), (100_003, 11, False),
                                           (100_003, 16, True), (70_001, 20, False)])
def test_radix_partition_into_given_arrays(n, bits, stable):
    """out=: the last pass writes into the caller's arrays (views of one allocation, as the
    out-of-core pass 1 carves its cache), the same rows as a fresh partition; wrong dtypes or
    sizes are refused."""
    rng = np.random.default_rng(n)
    keys = cp.asarray(rng.integers(-5000, 5000, n).astype(np.int64))
    vals = cp.asarray(np.arange(n, dtype=np.int32))
    arena = cp.zeros(2 * (n * 12 + 512), cp.uint8)  # keys and values side by side, 256-aligned
    ko = arena[256:256 + n * 8].view(cp.int64)
    vo = arena[256 + -(-n * 8 // 256) * 256 + 256:][:n * 4].view(cp.int32)
    k, (v,), off = prim.radix_partition(keys, [vals], prim.Digits(bits=bits), stable=stable, out=(ko, [vo]))
    assert k.data.ptr == ko.data.ptr and v.data.ptr == vo.data.ptr
    k2, (v2,), off2 = prim.radix_partition(keys, [vals], prim.Digits(bits=bits), stable=stable)
    np.testing.assert_array_equal(cp.asnumpy(off), cp.asnumpy(off2))
    order, order2 = np.argsort(cp.asnumpy(v)), np.argsort(cp.asnumpy(v2))
    np.testing.assert_array_equal(cp.asnumpy(k)[order], cp.asnumpy(k2)[order2])
    np.testing.assert_array_equal(np.sort(cp.asnumpy(v)), np.arange(n))
    if stable:
        np.testing.assert_array_equal(cp.asnumpy(k), cp.asnumpy(k2))
    with pytest.raises(ValueError, match="out must match"):
        prim.radix_partition(keys, [vals], prim.Digits(bits=bits), out=(ko, [ko]))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_radix_sort_matches_numpy_stable_sort(dtype):
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    keys = np.concatenate([rng.integers(info.min, info.max, 50_000, dtype=dtype),
                           np.array([info.min, info.max, 0, -1, info.min], dtype)])
    vals = np.arange(keys.size, dtype=np.uint32)
    lo, hi = int(keys.min()), int(keys.max())
    k, (v,) = prim.radix_sort(cp.asarray(keys), [cp.asarray(vals)], lo, (hi - lo).bit_length())
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(cp.asnumpy(k), keys[order])
    np.testing.assert_array_equal(cp.asnumpy(v), vals[order])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("value", [None, np.uint32, np.float64])
@pytest.mark.parametrize("portions", [False, True])
def test_onesweep_sort_matches_numpy_stable_sort(dtype, value, portions, monkeypatch):
    from gpujoin.cuda import onesweep

    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    if portions:  # inputs of several portions (each a launch a pass, its starts from the one before)
        monkeypatch.setattr(onesweep, "PORTION", 2 * 8832 + 5)
    cases = {
        "extremes": np.concatenate([rng.integers(info.min, info.max, 60_000, dtype=dtype),
                                    np.array([info.min, info.max, 0, -1, info.min, info.max], dtype)]),
        "27 bits": rng.integers(0, 1 << 27, 70_001, dtype=dtype),
        "few, duplicated": rng.integers(-3, 4, 50_000, dtype=dtype),
        "all equal": np.full(40_000, -7, dtype),
        "one": np.array([5], dtype),
        "none": np.array([], dtype),
    }
    for name, keys in cases.items():
        vals = None if value is None else (np.arange(keys.size) * 1.5).astype(value)
        lo, hi = (int(keys.min()), int(keys.max())) if keys.size else (0, 0)
        end = onesweep.sort_bits(lo, hi, keys.dtype.itemsize)
        k, v = onesweep.onesweep_sort(cp.asarray(keys), None if vals is None else cp.asarray(vals), end)
        order = np.argsort(keys, kind="stable")
        np.testing.assert_array_equal(cp.asnumpy(k), keys[order], err_msg=name)
        if vals is None:
            assert v is None
        else:
            assert v.dtype == vals.dtype
            np.testing.assert_array_equal(cp.asnumpy(v), vals[order], err_msg=name)
    with pytest.raises(ValueError, match="onesweep_sort"):
        onesweep.onesweep_sort(cp.zeros(4, cp.int32), cp.zeros(4, cp.int16), 8)


def test_onesweep_sort_bits():
    from gpujoin.cuda.onesweep import sort_bits

    assert sort_bits(0, (1 << 27) - 1, 4) == 27
    assert sort_bits(5, 5, 8) == 0
    assert sort_bits(-5, 5, 4) == 32  # straddles 0: the sign bit differs
    assert sort_bits(-8, -1, 4) == 3
    assert sort_bits(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 8) == 64


@pytest.mark.parametrize("dtypes", [[], [np.int32], [np.int32, np.int64], [np.int32, np.float32],
                                    [np.uint8], [np.int16, np.uint8, np.float64, np.int32, np.uint16]])
def test_radix_sort_onesweep_or_passes_agree(dtypes, monkeypatch):
    """radix_sort's two routes (CUB's one-sweep, columns packed two to a word, and the stable
    passes) give the same rows, also where the key range straddles a power of two (the passes'
    route)."""
    from gpujoin.cuda.onesweep import packs

    rng = np.random.default_rng(6)
    for lo, hi in [(0, (1 << 20) - 1), (-100, 100), ((1 << 16) - 10, (1 << 16) + 10)]:
        keys = cp.asarray(rng.integers(lo, hi + 1, 30_000, dtype=np.int64).astype(np.int32))
        cols = [cp.asarray((rng.integers(0, 1 << 62, keys.size) >> 7).astype(d)) for d in dtypes]
        bits = (hi - lo).bit_length()
        out = []
        for flag in (True, False):
            monkeypatch.setattr(prim, "ONESWEEP", flag)
            k, vs = prim.radix_sort(keys, cols, lo, bits)
            assert [v.dtype for v in vs] == [c.dtype for c in cols]
            out.append([cp.asnumpy(k)] + [cp.asnumpy(v) for v in vs])
        for a, b in zip(*out):
            np.testing.assert_array_equal(a, b)
        order = np.argsort(cp.asnumpy(keys), kind="stable")
        for c, v in zip(cols, out[0][1:]):
            np.testing.assert_array_equal(v, cp.asnumpy(c)[order])
    assert packs([4, 8, 4, 1, 2]) == [[1], [0, 2], [4, 3]]


def test_gather_compact_and_merge_bounds():
    rng = np.random.default_rng(2)
    src = rng.random(1000)
    idx = rng.integers(-1, 1000, 5000)
    out, valid = prim.gather(cp.asarray(src), cp.asarray(idx), with_validity=True)
    np.testing.assert_array_equal(cp.asnumpy(valid).astype(bool), idx >= 0)
    np.testing.assert_array_equal(cp.asnumpy(out)[idx >= 0], src[idx[idx >= 0]])
    flags = (rng.random(100_000) < 0.3).astype(np.uint8)
    np.testing.assert_array_equal(cp.asnumpy(prim.compact(cp.asarray(flags), True)), np.flatnonzero(flags))
    np.testing.assert_array_equal(cp.asnumpy(prim.compact(cp.asarray(flags), False)), np.flatnonzero(flags == 0))
    a = np.sort(rng.integers(0, 100, 20_000)).astype(np.int64)
    b = np.sort(rng.integers(-5, 105, 30_000)).astype(np.int64)
    for upper, side in ((False, "left"), (True, "right")):
        got = prim.merge_bounds(cp.asarray(a), cp.asarray(b), upper)
        np.testing.assert_array_equal(cp.asnumpy(got), np.searchsorted(a, b, side=side))
    # the equal keys counted in the lower bounds' pass: runs of none, one, a few, thousands (the
    # gallop past the staged range), and at the ends of a
    a2 = np.sort(np.r_[rng.integers(0, 50, 3_000), np.full(5_000, 60), np.arange(61, 3_000), np.full(3, 4_000)])
    for aa, bb in ((a, b), (a2.astype(np.int64), np.sort(rng.integers(-3, 4_010, 20_000)).astype(np.int64))):
        lower, counts = prim.merge_bounds(cp.asarray(aa), cp.asarray(bb), False, counts=True)
        np.testing.assert_array_equal(cp.asnumpy(lower), np.searchsorted(aa, bb, "left"))
        want = np.searchsorted(aa, bb, "right") - np.searchsorted(aa, bb, "left")
        np.testing.assert_array_equal(cp.asnumpy(counts), want)


@pytest.mark.parametrize("case", ["unique", "runs", "hot", "none_match", "one", "empty_b", "empty_a"])
def test_merge_bounds_offsets_by_lookback(case):
    """merge_bounds(offsets=True): the equal counts' exclusive prefix sums and total from the merge
    pass itself (a block scan, then decoupled look-back over up to thousands of blocks)."""
    rng = np.random.default_rng(7)
    n = 3_000_000
    a, b = {
        "unique": (np.arange(n), rng.integers(0, n, n)),
        "runs": (rng.integers(0, n // 50, n), rng.integers(-5, n // 50 + 5, n // 3)),
        "hot": (np.r_[np.full(n // 2, 9), rng.integers(10, 1000, n // 2)], np.r_[np.full(5_000, 9), rng.integers(0, 1010, n)]),
        "none_match": (np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2)),
        "one": (np.array([4]), np.array([4])),
        "empty_b": (np.arange(10), np.array([], np.int64)),
        "empty_a": (np.array([], np.int64), np.arange(100_000)),
    }[case]
    for dt in (np.int32, np.int64):
        aa, bb = np.sort(a).astype(dt), np.sort(b).astype(dt)
        lower, offs = prim.merge_bounds(cp.asarray(aa), cp.asarray(bb), False, offsets=True)
        counts = np.searchsorted(aa, bb, "right") - np.searchsorted(aa, bb, "left")
        np.testing.assert_array_equal(cp.asnumpy(lower), np.searchsorted(aa, bb, "left"))
        np.testing.assert_array_equal(cp.asnumpy(offs), np.r_[0, np.cumsum(counts)])
    with pytest.raises(ValueError):
        prim.merge_bounds(cp.asarray(aa), cp.asarray(bb), False, counts=True, offsets=True)


@pytest.mark.parametrize("case", ["one_each", "mixed", "hot_row", "sparse", "one_row"])
def test_expand_matches_balances_any_multiplicities(case):
    """smj.expand (merge.cu: a load-balancing search over the rows' output ends and the output
    indices): every output row gets its probe row and its build row, whatever the counts: one a
    row, a mix with rows of none, one row holding most outputs (several blocks' tiles), matches
    far apart among empty rows, a single row."""
    from gpujoin.cuda.join import smj

    rng = np.random.default_rng(5)
    m = 1 if case == "one_row" else 50_000
    counts = {"one_each": np.ones(m), "mixed": rng.integers(0, 4, m),
              "hot_row": np.r_[rng.integers(0, 2, m - 1), 70_000],
              "sparse": (rng.random(m) < 0.001) * rng.integers(1, 9, m), "one_row": np.array([5_000])}[case]
    counts = counts.astype(np.int64)
    lower = rng.integers(0, 1_000, m).astype(np.int64)
    total = int(counts.sum())
    r = smj.MergeRanges(cp.zeros(1_100, cp.int64), cp.asarray(rng.integers(0, 9, m)), None, None,
                        cp.asarray(lower), cp.asarray(counts))
    r.offsets = prim.exclusive_scan(r.counts)
    assert r.total == total
    bsrc = cp.arange(1_100 + 70_000, dtype=cp.int64) * 3
    out_b, out_p, out_k = cp.empty(total, cp.int64), cp.empty(total, cp.int64), cp.empty(total, cp.int64)
    smj.expand(r, bsrc, None, out_b, out_p, out_k)
    rows = np.repeat(np.arange(m), counts)
    nth = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    np.testing.assert_array_equal(cp.asnumpy(out_p), rows)
    np.testing.assert_array_equal(cp.asnumpy(out_b), (lower[rows] + nth) * 3)
    np.testing.assert_array_equal(cp.asnumpy(out_k), cp.asnumpy(r.spk)[rows])


@pytest.mark.parametrize("n", [0, 1, 1023, 8192, 8193, 3 * 8192 + 5, 1024 * 8192 + 1])
@pytest.mark.parametrize("types", [(np.int32, np.int64), (np.int64, np.int64), (np.int32, np.int32)])
def test_exclusive_scan_matches_numpy(n, types):
    """scan.cu: one tile (one launch), several, and more tile sums than one block scans at once
    (1024 * 8192 + 1); the total after the prefix sums; counts as large as the
    total's type allows."""
    src, dst = types
    rng = np.random.default_rng(n)
    hi = min(np.iinfo(src).max, np.iinfo(dst).max // max(1, n))  # the total fits
    vals = rng.integers(0, hi, n).astype(src)
    got = cp.asnumpy(prim.exclusive_scan(cp.asarray(vals), dst))
    want = np.concatenate([[0], np.cumsum(vals, dtype=np.int64)]).astype(dst)
    assert got.dtype == dst
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n, segment", [(1, 1), (7, 3), (8192, 4096), (3 * 8192 + 5, 1000), (40000, 40000)])
def test_exclusive_scan_shifts_each_segment(n, segment):
    """exclusive_scan(shifts=, segment=): each segment's offsets (a shuffle's destination) moved
    by its own shift, negative ones too, in the scan's launch; the total by the last segment's;
    a shifts array too short for the values refused."""
    rng = np.random.default_rng(n)
    vals = rng.integers(0, 1000, n).astype(np.int32)
    k = -(-n // segment)
    shifts = rng.integers(-10**12, 10**12, k)
    got = cp.asnumpy(prim.exclusive_scan(cp.asarray(vals), shifts=cp.asarray(shifts), segment=segment))
    want = np.concatenate([[0], np.cumsum(vals, dtype=np.int64)])
    want[:n] += np.repeat(shifts, segment)[:n]
    want[n] += shifts[-1]
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="shifts"):
        prim.exclusive_scan(cp.asarray(vals), shifts=cp.asarray(shifts[:-1]), segment=segment)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_sum_into_adds_to_a_device_total(dtype):
    """sum_into: int64 sums of negative and positive values (int64's wrap-around, as numpy's)
    added to what the total holds, over empty, one-row and many-block inputs."""
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    total, want = cp.zeros((), cp.int64), np.int64(0)
    for n in (0, 1, 1000, 3 * 1024 * 132 * 4 + 7):
        vals = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        prim.sum_into(cp.asarray(vals), total)
        with np.errstate(over="ignore"):
            want = want + vals.sum(dtype=np.int64)
    assert int(total) == int(want)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_row_sums_total_the_first_rows(dtype):
    """row_sums: each of the first rows' int64 total (int64's wrap-around, as numpy's), of rows
    longer and shorter than a block, and none."""
    rng = np.random.default_rng(6)
    info = np.iinfo(dtype)
    for rows, more, cols in ((512, 0, 16_384), (3, 5, 1), (7, 1, 1_500), (0, 2, 9)):
        vals = rng.integers(info.min, info.max, (rows + more) * cols, dtype=dtype, endpoint=True)
        out = prim.row_sums(cp.asarray(vals), cols, cp.empty(rows, cp.int64))
        with np.errstate(over="ignore"):
            want = vals.reshape(rows + more, cols)[:rows].sum(axis=1, dtype=np.int64)
        np.testing.assert_array_equal(cp.asnumpy(out), want)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 8, 9, 20])
def test_device_words_writes_addresses(n):
    """device_words: up to WORDS_BY_ARGUMENT words by a kernel's arguments, more by a copy."""
    words = [(1 << 63) - 1 - 977 * i for i in range(n)]
    got = prim.device_words(words)
    assert got.dtype == cp.uint64 and got.size == n
    np.testing.assert_array_equal(cp.asnumpy(got), np.array(words, np.uint64))


# ---------------------------------------------------------------- joins through the API


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("key_type", ["int", "int32", "string", "composite"])
@settings(max_examples=10)
@given(data=st.data())
def test_gpu_join_matches_cpu_engine(algorithm, how, key_type, data):
    left, right = data.draw(join_pair(max_rows=60, key_type=key_type))
    on = ["k", "k2"] if key_type == "composite" else "k"
    nulls_equal = data.draw(st.booleans())
    want = gpujoin.join(left, right, on, how=how, nulls_equal=nulls_equal, device="cpu")
    got = gpujoin.join(left, right, on, how=how, nulls_equal=nulls_equal, device="cuda", algorithm=algorithm)
    assert_tables_equal(got, want)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case", ["all_equal", "zipf2", "one_row", "empty_build", "extremes", "wide"])
def test_gpu_join_skew_and_edge_cases(algorithm, case):
    rng = np.random.default_rng(7)
    if case == "all_equal":  # one build partition far larger than shared memory; 10k x 30 output
        lk, rk = np.full(30, 5), np.full(10_000, 5)
    elif case == "zipf2":
        # the hottest key holds ~60% of each side: 3,000 x 600 rows of output for it alone
        lk, rk = rng.zipf(2.0, 5_000) % 100_000, rng.zipf(2.0, 1_000) % 100_000
    elif case == "one_row":
        lk, rk = np.array([3]), np.array([3])
    elif case == "empty_build":
        lk, rk = np.arange(100), np.array([], np.int64)
    elif case == "extremes":
        ext = np.array([-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1], np.int64)
        lk, rk = rng.choice(ext, 5000), rng.choice(ext, 300)
    else:
        lk, rk = rng.integers(-(2**62), 2**62, 300_000), rng.integers(-(2**62), 2**62, 300_000)
        rk[:1000] = lk[:1000]
    left = pa.table({"k": lk.astype(np.int64), "a": np.arange(lk.size)})
    right = pa.table({"k": rk.astype(np.int64), "b": np.arange(rk.size) * 3})
    for how in HOWS:
        want = gpujoin.join(left, right, "k", how=how, device="cpu")
        got = gpujoin.join(left, right, "k", how=how, device="cuda", algorithm=algorithm)
        assert_tables_equal(got, want)


@pytest.mark.parametrize("dtype", [cp.int32, cp.int64])
def test_planner_samples_on_the_device(dtype):
    """Issue 17 item 3: count_found (the match ratio's hash table of a build sample), with
    repeated build keys, the sentinel key and strided samples; frequent_keys; the device and
    host match ratios."""
    from gpujoin.plan import stats

    low = np.iinfo(dtype).min
    build = cp.asarray([5, 5, 7, low, 9, 5], dtype=dtype)
    probe = cp.asarray([5, 7, 8, low, 5, 10, 9], dtype=dtype)
    assert prim.count_found(build, probe) == 5
    assert prim.count_found(build[:3], probe) == 3  # no sentinel key in the build sample
    assert prim.count_found(build[::2], probe[::3]) == 2  # strided views: 5, low, 9 in {5, 7, 9}
    assert prim.count_found(build[:0], probe) == 0
    # the stages of one launch over more blocks than an H200 holds at once (fill, then inserts,
    # then probes, each waiting for the one before), repeated on two streams: the same count
    # each time, and the stages' counters back at zero after every launch
    rng = np.random.default_rng(3)
    big_b = rng.integers(0, 1 << 21, 1 << 20).astype(dtype)
    big_p = rng.integers(0, 1 << 22, 3 << 19).astype(dtype)
    want = int(np.isin(big_p, big_b).sum())
    for stream in (cp.cuda.Stream.null, cp.cuda.Stream(non_blocking=True)):
        with stream:
            b_d, p_d = cp.asarray(big_b), cp.asarray(big_p)
            for _ in range(3):
                assert prim.count_found(b_d, p_d) == want
            got = prim.key_samples([b_d, p_d], 4096, (b_d.size, 0))  # the build's distinct keys only
            assert got.build_distinct == np.unique(big_b).size
            assert not prim._scratch().dev[12:15].any()
    keys = cp.concatenate([cp.full(3000, 4, dtype), cp.full(1000, low, dtype), cp.arange(4000, dtype=dtype)])
    assert cp.asnumpy(prim.frequent_keys(keys, 100, 1 << 12, 2)).tolist() == [low, 4]
    assert cp.asnumpy(prim.frequent_keys(keys, 100, 1 << 12, 2, top=1)).tolist() == [4]
    assert prim.frequent_keys(keys, 100, 1 << 12, 2, min_share=0.99) is None
    rng = np.random.default_rng(4)
    b = rng.permutation(1 << 22).astype(dtype)
    p = np.where(rng.random(1 << 22) < 0.3, rng.integers(0, 1 << 22, 1 << 22), -1 - np.arange(1 << 22)).astype(dtype)
    assert stats.match_ratio(b, p) == pytest.approx(0.3, abs=0.03)
    assert stats.match_ratio(cp.asarray(b), cp.asarray(p)) == pytest.approx(0.3, abs=0.03)


def test_a_wide_joins_plan_reads_a_ready_build_side_on_its_own_stream():
    # build_ready (a shuffle's build side, finished while the probe side was still on the
    # links): a wide join's build sample taken on the planner's stream from that event, while
    # the current stream has more work queued; the same statistics and choice as the whole
    # launch's, for unique and for heavy build keys, and the next launch on the current stream
    # (read before it) sound
    from gpujoin.plan.auto import launch_gpu_join_plan

    rng = np.random.default_rng(8)
    for heavy in (False, True):
        build = np.where(rng.random(1 << 20) < (0.5 if heavy else 0), 7, rng.permutation(1 << 20))
        b, p = cp.asarray(build.astype(np.int64)), cp.asarray(rng.integers(0, 1 << 21, 1 << 21))
        whole = launch_gpu_join_plan(b, p, [8], [8])()
        ready = cp.cuda.get_current_stream().record()
        busy = cp.sort(cp.asarray(rng.random(1 << 24)))  # (queued after the event, on the current stream)
        early = launch_gpu_join_plan(b, p, [8], [8], build_ready=ready)()
        assert early.algorithm == whole.algorithm == ("smj-tr" if heavy else "phj-tr")
        assert early.estimate.build_repeated == whole.estimate.build_repeated
        assert early.estimate.heavy_build == whole.estimate.heavy_build == heavy
        assert launch_gpu_join_plan(b, p, [8], [8])().algorithm == whole.algorithm
        del busy


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_key_samples_summarize_like_numpy(dtype):
    # the planner's device samples (issue 17 item 3): every summary equals np.unique's of the
    # same strided sample, with the sentinel key, all-equal, empty, strided and mixed-width keys
    from gpujoin.plan import stats

    rng = np.random.default_rng(11)
    low = np.iinfo(dtype).min
    cases = [rng.integers(0, 50, 100_003), np.full(9_000, 7), rng.permutation(1 << 20), np.zeros(0),
             np.where(rng.random(30_001) < 0.2, low, rng.zipf(1.5, 30_001)), np.arange(5), [low, low, 3]]
    for case in cases:
        keys = np.asarray(case).astype(dtype)
        want = stats.sample(keys)
        assert stats.sample(cp.asarray(keys)) == want, case
        assert stats.sample(cp.asarray(keys)).groups == want.groups
    wide = rng.integers(-(1 << 40), 1 << 40, 50_000)
    got = prim.key_samples([cp.asarray(wide[::3].copy()), cp.asarray(wide)[::2]], 4096, (1 << 12, 1 << 12))
    assert got.sizes == (4096, 4096)
    b, p = wide[::3][::4][:4096], wide[::2][::6][:4096]
    assert got.found == int(np.isin(p, b).sum())
    for row, smp in zip(got.summaries, (b, p)):
        assert stats._summary(row, smp.size) == stats.Sample.of_counts(np.unique(smp, return_counts=True)[1])
    keys = cp.asarray(rng.integers(0, 1000, 20_000).astype(dtype))
    small = cp.asarray(rng.integers(0, 1000, 20_000).astype(np.int32))
    b_s, p_s, ratio = stats.device_join_samples(keys, small, True)  # int32 probe against int64 build keys too
    assert (b_s, p_s) == (stats.sample(cp.asnumpy(keys)), stats.sample(cp.asnumpy(small)))
    assert ratio == stats.match_ratio(cp.asnumpy(keys), cp.asnumpy(small).astype(dtype)) == 1.0
    assert stats.device_join_samples(keys[:0], small, True)[2] == 0.0
    with pytest.raises(ValueError, match="at most"):
        prim.key_samples([keys], 8192)


def test_key_samples_launched_again_are_kept_and_sound():
    # the same arrays sampled again reuse their packed launch (primitives._Packed): the answers
    # follow the arrays' contents as they are now, a grown table of the match stages packs
    # anew, and copies (strided views, other dtypes) are never kept
    from gpujoin.plan import stats

    rng = np.random.default_rng(12)
    b = cp.asarray(rng.integers(0, 1 << 16, 1 << 20).astype(np.int32))
    p = cp.asarray(rng.integers(0, 1 << 17, 1 << 20).astype(np.int32))

    def want(size, match):
        bh, ph = cp.asnumpy(b), cp.asnumpy(p)
        bs, ps = bh[::bh.size // match[0]][:match[0]], ph[::ph.size // match[1]][:match[1]]
        return int(np.isin(ps, bs).sum()), np.unique(bs).size

    scratch = prim._scratch()
    first = prim.key_samples([b, p], 4096, (1 << 14, 1 << 14))
    packed = dict(scratch.packed)
    again = prim.key_samples([b, p], 4096, (1 << 14, 1 << 14))
    assert (again.found, again.build_distinct) == (first.found, first.build_distinct) == want(4096, (1 << 14, 1 << 14))
    assert (again.summaries == first.summaries).all() and scratch.packed == packed  # (no new packing)
    b[:] = cp.asarray(rng.integers(0, 1 << 10, 1 << 20).astype(np.int32))  # new contents, same array
    got = prim.key_samples([b, p], 4096, (1 << 14, 1 << 14))
    assert (got.found, got.build_distinct) == want(4096, (1 << 14, 1 << 14))
    assert stats.sample(b) == stats.sample(cp.asnumpy(b))
    big = prim.key_samples([b, p], 4096, (1 << 19, 1 << 18))  # a table past the kept one: it grows
    assert (big.found, big.build_distinct) == want(4096, (1 << 19, 1 << 18))
    got = prim.key_samples([b, p], 4096, (1 << 14, 1 << 14))  # packed before the table grew: anew
    assert (got.found, got.build_distinct) == want(4096, (1 << 14, 1 << 14))
    view = b[::2]
    kept = len(scratch.packed)
    got = prim.key_samples([view, p], 4096, (1 << 12, 1 << 12))
    bs = cp.asnumpy(view)[::view.size // 4096][:4096]
    assert got.build_distinct == np.unique(bs).size and len(scratch.packed) == kept
    del b, p  # new arrays, perhaps at the same addresses: sampled as they are
    b = cp.asarray(rng.integers(0, 1 << 12, 1 << 20).astype(np.int32))
    p = cp.asarray(rng.integers(0, 1 << 12, 1 << 20).astype(np.int32))
    got = prim.key_samples([b, p], 4096, (1 << 14, 1 << 14))
    assert (got.found, got.build_distinct) == want(4096, (1 << 14, 1 << 14))
    assert not scratch.dev[12:15].any()


@pytest.mark.parametrize("algorithm", ["phj-tr", "phj-ur", "nphj"])
@pytest.mark.parametrize("case", ["all_equal", "zipf2", "many_to_many", "extremes"])
def test_heavy_build_keys_take_the_sort_merge_path(algorithm, case, monkeypatch):
    """Oversized PHJ build partitions and NPHJ's heavy keys join by sort-merge (issue 17); tiny
    thresholds put both paths in one join, at every join type."""
    from gpujoin.cuda.join import nphj, phj, run

    monkeypatch.setattr(phj, "OVERSIZED_BUILD", 16)
    monkeypatch.setattr(nphj, "HEAVY_SAMPLE", 256)
    monkeypatch.setattr(nphj, "HEAVY_ROWS", 24)
    rng = np.random.default_rng(11)
    if case == "all_equal":
        lk, rk = np.full(300, 5), np.full(200, 5)
    elif case == "zipf2":
        lk, rk = rng.zipf(2.0, 3_000) % 5_000, rng.zipf(2.0, 2_000) % 5_000
    elif case == "many_to_many":
        lk, rk = rng.integers(0, 300, 2_000), np.concatenate([rng.integers(0, 300, 1_500), np.full(500, 7)])
    else:
        ext = np.array([-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1], np.int64)
        lk, rk = rng.choice(ext, 400), np.concatenate([rng.choice(ext, 100), rng.integers(-50, 50, 900)])
    left = pa.table({"k": lk.astype(np.int64), "a": np.arange(lk.size)})
    right = pa.table({"k": rk.astype(np.int64), "b": np.arange(rk.size) * 3})
    kw = {"radix_bits": 6} if algorithm != "nphj" else {}
    for how in HOWS:
        want = gpujoin.join(left, right, "k", how=how, device="cpu")
        got, _ = execute_join(left, right, "k", how=how, device="cuda", algorithm=algorithm, **kw)
        assert_tables_equal(got, want)
    out = run(algorithm, cp.asarray(rk), cp.asarray(lk), [cp.arange(rk.size)], [cp.arange(lk.size)], "inner", **kw)
    assert out.params.get("oversized_partitions", 0) + out.params.get("heavy_build_rows", 0) > 0
    assert out.n_pairs == int((np.unique(lk, return_counts=True)[1][np.isin(np.unique(lk), rk)]
                               * np.unique(rk, return_counts=True)[1][np.isin(np.unique(rk), lk)]).sum())


@pytest.mark.parametrize("heavy_rows", [40, 1_000])
def test_phj_oversized_pairs_follow_the_match_in_place_or_grown(heavy_rows, monkeypatch):
    """PHJ's match is launched before its units and oversized partitions are read; the sort-merge
    pairs of the oversized ones go after the match's, in its allocation (40 heavy rows) or in
    arrays of the sum (1,000: more pairs than probe rows), keys emitted too."""
    from gpujoin.cuda.join import phj

    monkeypatch.setattr(phj, "OVERSIZED_BUILD", 16)
    rng = np.random.default_rng(5)
    bk = np.concatenate([np.arange(1_000, 1_500), np.full(heavy_rows, 7)]).astype(np.int64)
    pk = np.concatenate([rng.integers(0, 2_000, 3_000), [7, 7, 7]]).astype(np.int64)
    out = phj.phj(cp.asarray(bk), cp.asarray(pk), [cp.arange(bk.size)], [cp.arange(pk.size)], "inner",
                  emit_keys=True, radix_bits=6)
    assert out.params["oversized_partitions"] >= 1 and out.params["work_units"] > 0
    got = sorted(zip(cp.asnumpy(out.pairs_b).tolist(), cp.asnumpy(out.pairs_p).tolist(),
                     cp.asnumpy(out.pair_keys).tolist()))
    want = sorted((i, j, int(pk[j])) for j in range(pk.size) for i in np.flatnonzero(bk == pk[j]).tolist())
    assert got == want and len(want) >= 3 * heavy_rows


# ---------------------------------------------------------------- device-resident tables


def _device_pair(rng, nl, nr, domain, key_dtype):
    left = pa.table({
        "k": pa.array(rng.integers(0, domain, nl).astype(key_dtype)),
        "x": pa.array(rng.integers(-9, 9, nl).astype(np.int32), mask=rng.random(nl) < 0.1),
        "f": pa.array(rng.random(nl)),
        "b": pa.array(rng.random(nl) < 0.5),
        "s": pa.array(rng.integers(0, 100, nl).astype(np.int16)),
    })
    right = pa.table({
        "k": pa.array(rng.integers(0, domain, nr).astype(key_dtype)),
        "y": pa.array(rng.integers(0, 2**40, nr)),
        "d": pa.array(rng.integers(0, 20000, nr).astype(np.int32)).view(pa.date32()),
    })
    return left, right


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("how", HOWS + ["cross"])
@pytest.mark.parametrize("shape", [(2000, 3000, 500, np.int32), (5000, 200, 10_000, np.int64), (0, 50, 10, np.int32),
                                   (70_000, 90_000, 2**20, np.int64)])
def test_device_tables_match_cpu_engine(algorithm, how, shape):
    nl, nr, domain, kdt = shape
    if how == "cross" and nl * nr > 10**6:
        pytest.skip("cross join output too large for a test")
    left, right = _device_pair(np.random.default_rng(nl + nr), nl, nr, domain, kdt)
    on = None if how == "cross" else "k"
    want = gpujoin.join(left, right, on, how=how, device="cpu")
    out = gpujoin.join(DeviceTable.from_arrow(left), DeviceTable.from_arrow(right), on, how=how,
                       device="cuda", algorithm=algorithm)
    assert isinstance(out, DeviceTable)
    assert_tables_equal(out.to_arrow(), want)


def test_device_dict_of_cupy_arrays_and_layout():
    r = {"k": cp.arange(10, dtype=cp.int32), "r0": cp.arange(10, dtype=cp.int32) * 2}
    s = {"k": cp.asarray([1, 1, 3, 11], dtype=cp.int32), "s0": cp.asarray([5, 6, 7, 8], dtype=cp.int32)}
    out = gpujoin.join(s, r, "k")
    assert out.column_names == ["k", "s0", "r0"]
    t = out.to_arrow().sort_by("s0")
    assert t.to_pydict() == {"k": [1, 1, 3], "s0": [5, 6, 7], "r0": [2, 2, 6]}


def test_device_errors_are_clear():
    r = {"k": cp.arange(4, dtype=cp.int64)}
    with pytest.raises(gpujoin.ColumnNotFoundError, match="nope"):
        gpujoin.join(r, r, "nope")
    with pytest.raises(gpujoin.SchemaError, match="'k'.*'kf'"):
        gpujoin.join(r, {"kf": cp.arange(4, dtype=cp.float64)}, left_on="k", right_on="kf")
    with pytest.raises(RuntimeError, match="GPU memory"):
        gpujoin.join(r, r, "k", device="cpu")
    with pytest.raises(gpujoin.ComputeError, match="1:1"):
        gpujoin.join({"k": cp.asarray([1, 1])}, r, "k", validate="1:1")
    # auto's samples are launched before the validate check: the failed join reads them, and the
    # next join on this thread plans and joins as usual
    with pytest.raises(gpujoin.ComputeError, match="1:1"):
        gpujoin.join({"k": cp.asarray([1, 1, 2]), "v": cp.arange(3)}, r, "k", validate="1:1", algorithm="auto")
    out = gpujoin.join({"k": cp.asarray([1, 1, 2]), "v": cp.arange(3)}, r, "k", algorithm="auto")
    assert sorted(out.to_arrow().column("v").to_pylist()) == [0, 1, 2]
    # and with null keys (int32/int64 keys): a null key matches nothing, or with nulls_equal=True
    # a null key (test_cuda_device_tables.py); the samples read
    nulls = DeviceTable.from_arrow(pa.table({"k": pa.array([1, None, 3], pa.int64()), "v": [7, 8, 9]}))
    out = gpujoin.join(nulls, nulls, "k", algorithm="auto", nulls_equal=True).to_arrow()
    assert sorted(zip(out.column("k").to_pylist(), out.column("v").to_pylist()), key=str) == [
        (1, 7), (3, 9), (None, 8)]
    out = gpujoin.join(r, nulls, "k", how="left", algorithm="auto").to_arrow()
    assert sorted(out.column("v").to_pylist(), key=str) == [7, 9, None, None]
    out = gpujoin.join({"k": cp.asarray([3, 0], cp.int32), "v": cp.arange(2)}, r, "k", algorithm="auto")
    assert sorted(out.to_arrow().column("v").to_pylist()) == [0, 1]  # (int32 against int64 keys)


def test_from_arrow_decodes_other_dictionaries_and_views():
    """pandas' categoricals of numbers and dates (dictionaries of non-strings) live in a DeviceTable
    as their values, string_view columns and dictionaries of them as strings (both were refused);
    joined on such a key as the host path joins them; list columns refused, by name."""
    t = pa.table({
        "k": pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 1, 0, 0], pa.int8()), pa.array([10, 20, 30])),
        "d": pa.DictionaryArray.from_arrays(pa.array([1, 0, 0, 1, 1, None], pa.int32()), pa.array([5, 6], pa.date32())),
        "s": pa.array(["a", "bb", None, "a", "c", "a string longer than twelve bytes"], pa.string_view()),
        "sd": pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, None, 1, 0], pa.int32()),
                                             pa.array(["x", "y"], pa.string_view()))})
    plain = pa.table({"k": pa.array([10, 20, 30, 20, 10, 10]), "d": pa.array([6, 5, 5, 6, 6, None], pa.date32()),
                      "s": pa.array(["a", "bb", None, "a", "c", "a string longer than twelve bytes"], pa.large_string()),
                      "sd": pa.array(["x", "y", "x", None, "y", "x"], pa.large_string())})
    dt = DeviceTable.from_arrow(t)
    assert_tables_equal(dt.to_arrow(), plain)
    right = pa.table({"k": pa.DictionaryArray.from_arrays(pa.array([2, 0, 1], pa.int16()), pa.array([30, 10, 40])),
                      "w": [1, 2, 3]})
    for how in ("inner", "left", "anti"):
        got = gpujoin.join(dt, DeviceTable.from_arrow(right), "k", how=how)
        assert_tables_equal(got.to_arrow(), gpujoin.join(plain, right, "k", how=how, device="cpu"))
    with pytest.raises(TypeError, match="column 'b'.*list"):
        DeviceTable.from_arrow(pa.table({"b": pa.array([[1]], pa.list_(pa.int64()))}))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_join_larger_than_memory_raises_memory_error(algorithm, monkeypatch):
    import gpujoin.cuda.runtime as rt

    monkeypatch.setattr(rt, "free_bytes", lambda: 1 << 20)
    # rt.fits takes what CuPy's pool holds free first, and free_all_blocks cannot return the free
    # part of a chunk that an earlier test's live array shares (on one xdist worker it held more
    # than the join needs): only the patched free memory counts here
    monkeypatch.setattr(rt, "fits", lambda need: need <= rt.free_bytes())
    r = {"k": cp.arange(1 << 20, dtype=cp.int32)}
    with pytest.raises(MemoryError, match="GiB"):
        gpujoin.join(r, r, "k", algorithm=algorithm)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("payloads", [1, 2])
def test_2e27_join_checksums(algorithm, payloads):
    """|R| = |S| = 2^27 PK-FK join (paper 003's default), checked by row count and checksums."""
    n = 1 << 27
    rng = cp.random.default_rng(3)
    rk = cp.random.RandomState(3).permutation(n).astype(cp.int32)
    sk = rng.integers(0, n, n, dtype=cp.int32)
    r = {"k": rk, **{f"r{i}": rng.integers(0, 1 << 20, n, dtype=cp.int32) for i in range(payloads)}}
    s = {"k": sk, **{f"s{i}": rng.integers(0, 1 << 20, n, dtype=cp.int32) for i in range(payloads)}}
    out = gpujoin.join(s, r, "k", algorithm=algorithm)
    assert out.num_rows == n
    by_key = cp.empty(n, cp.int32)
    for i in range(payloads):
        by_key[rk] = r[f"r{i}"]
        assert int(out[f"r{i}"].astype(cp.int64).sum()) == int(by_key[sk].astype(cp.int64).sum())
        assert int(out[f"s{i}"].astype(cp.int64).sum()) == int(s[f"s{i}"].astype(cp.int64).sum())
    assert int(out["k"].astype(cp.int64).sum()) == int(sk.astype(cp.int64).sum())
    del out
    cp.get_default_memory_pool().free_all_blocks()


# ---------------------------------------------------------------- paper 002's GPU bitmap join

from gpujoin.cuda.join.bitmap import probe_hits  # noqa: E402
from test_cpu_joins import domain_pair  # noqa: E402


@pytest.mark.parametrize("bucket_bits", [0, 4, 8])
@pytest.mark.parametrize("case", ["empty_build", "empty_probe", "no_overlap", "full_overlap", "ends", "random"])
def test_gpu_bitmap_set_intersection(bucket_bits, case):
    rng = np.random.default_rng(3)
    u = rng.choice(2**32, 200_000, replace=False).astype(np.uint32)
    r, s = {
        "empty_build": (u[:0], u[:100]), "empty_probe": (u[:100], u[:0]),
        "no_overlap": (u[:100_000], u[100_000:]), "full_overlap": (u[:100_000], rng.permutation(u[:100_000])),
        "ends": (np.array([0, 2**32 - 1, 7], np.uint32), np.array([2**32 - 1, 0, 8, 2**31], np.uint32)),
        "random": (u[:150_000], u[50_000:]),
    }[case]
    for want in (True, False):
        pos = cp.asnumpy(probe_hits(cp.asarray(r), cp.asarray(s), want, bucket_bits=bucket_bits))
        np.testing.assert_array_equal(np.sort(pos), np.flatnonzero(np.isin(s, r) == want))
    keys = cp.asnumpy(probe_hits(cp.asarray(r), cp.asarray(s), bucket_bits=bucket_bits, emit_keys=True))
    np.testing.assert_array_equal(np.sort(keys), np.sort(s[np.isin(s, r)]))


@pytest.mark.parametrize("how", ["semi", "anti"])
@settings(max_examples=20)
@given(pair=domain_pair())
def test_gpu_bitmap_join_matches_cpu_engine(how, pair):
    left, right = pair
    want = gpujoin.join(left, right, "k", how=how, device="cpu")
    got = gpujoin.join(left, right, "k", how=how, device="cuda", algorithm="bitmap")
    assert_tables_equal(got, want)
    dl = DeviceTable.from_arrow(left.filter(left["k"].is_valid()))
    dr = DeviceTable.from_arrow(right.filter(right["k"].is_valid()))
    out = gpujoin.join(dl, dr, "k", how=how, algorithm="bitmap").to_arrow()
    assert_tables_equal(out, gpujoin.join(dl.to_arrow(), dr.to_arrow(), "k", how=how, device="cpu"))


def test_gpu_bitmap_join_refuses_other_joins():
    t = {"k": cp.arange(4, dtype=cp.int64)}
    with pytest.raises(ValueError, match="semi and anti"):
        gpujoin.join(t, t, "k", how="inner", algorithm="bitmap")
    with pytest.raises(ValueError, match=r"\[0, 2\^32\)"):
        gpujoin.join({"k": cp.asarray([-1])}, t, "k", how="semi", algorithm="bitmap")
