"""Composite keys packed into one int64 key (plan/pack_keys.py), on NumPy arrays: the same code
packs CuPy arrays for device-resident joins and group-bys."""

import numpy as np
import pytest

from gpujoin.plan.pack_keys import pack_keys


def test_pack_is_exact_and_unpacks():
    rng = np.random.default_rng(0)
    a = rng.integers(-(2**40), 2**40, 5000)
    b = rng.integers(0, 3, 5000).astype(np.int32)
    c = rng.integers(-5, 5, 5000).astype(np.int16)
    (packed,), how = pack_keys([[a, b, c]], ["a", "b", "c"])
    assert packed.dtype == np.int64 and how.bits == [41, 2, 4]
    # equal tuples <=> equal packed keys
    tuples = np.stack([a, b, c], axis=1)
    assert np.unique(tuples, axis=0).shape[0] == np.unique(packed).size
    back = how.unpack(packed)
    for got, want in zip(back, (a, b, c)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_both_sides_share_one_encoding():
    left = [np.array([1, 2, 3, 2**40], np.int64), np.array([0, 1, 0, 1], np.int32)]
    right = [np.array([3, 1, -7], np.int64), np.array([0, 0, 1], np.int32)]
    (pl, pr), how = pack_keys([left, right], ["k", "j"])
    assert how.lows == [-7, 0]
    assert set(pl.tolist()) & set(pr.tolist()) == {pl[0], pl[2]}  # (1, 0) and (3, 0) on both sides
    for side, packed in ((left, pl), (right, pr)):
        for got, want in zip(how.unpack(packed), side):
            np.testing.assert_array_equal(got, want)


def test_extremes_and_empty_sides():
    edge = np.array([-(2**61), 2**61 - 1, 0], np.int64)  # a range of 62 bits, and 1 bit beside it: 63
    flag = np.array([1, 0, 1], np.int8)
    (packed,), how = pack_keys([[edge, flag]], ["x", "y"])
    assert how.bits == [62, 1] and packed.min() >= 0
    for got, want in zip(how.unpack(packed), (edge, flag)):
        np.testing.assert_array_equal(got, want)
    full = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max], np.int64)
    with pytest.raises(ValueError, match="x: 64 bits, y: 1 bits"):
        pack_keys([[full, np.array([0, 1])]], ["x", "y"])
    with pytest.raises(ValueError, match="2\\*\\*63-1"):
        pack_keys([[np.array([2**63], np.uint64), np.array([0])]], ["u", "v"])
    (pe, pn), how = pack_keys([[np.empty(0, np.int64), np.empty(0, np.int32)],
                               [np.array([5], np.int64), np.array([2], np.int32)]], ["a", "b"])
    assert pe.size == 0 and [c.tolist() for c in how.unpack(pn)] == [[5], [2]]
