"""The GPU's union of string dictionaries (cuda.strings.union_codes) against Arrow's hash, its
64-bit collision fallback, and the DeviceTable joins that re-code through it.  Marker ``gpu``."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import gpujoin
from gpujoin.testing import assert_tables_equal

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")
if not gpujoin.backend.cuda_available():
    pytest.skip("no usable GPU", allow_module_level=True)

import gpujoin.cuda.strings as gs  # noqa: E402
from gpujoin.cuda.table import DeviceTable, unify_dictionaries  # noqa: E402


def _words(rng, n: int, vocabulary: int) -> list[str]:
    """Strings drawn with repeats: empty ones, non-ASCII ones, long ones, near-equal ones."""
    base = ["", "a", "ab", "ba", "ünïcode", "x" * 1000, "x" * 999 + "y", "\x00", "a\x00"]
    base += [f"w{i}" for i in range(vocabulary)]
    return [base[i] for i in rng.integers(0, len(base), n)]


@pytest.mark.parametrize("n", [1, 2, 1000, 70_000])
@pytest.mark.parametrize("large", [False, True])
def test_union_codes_match_arrows_hash(n, large):
    rng = np.random.default_rng(n)
    strings = pa.array(_words(rng, n, max(1, n // 3)), pa.large_string() if large else pa.string())
    cut = [0, n // 3, n // 3, n]  # as several dictionaries (an empty one among them)
    got = gs.union_codes([strings.slice(lo, hi - lo) for lo, hi in zip(cut, cut[1:])])
    assert got is not None
    union, code = got
    want = pc.dictionary_encode(strings)
    assert union.type == strings.type
    assert union.to_pylist() == want.dictionary.to_pylist()  # first appearance, both
    assert cp.asnumpy(code).tolist() == want.indices.to_pylist()


def test_union_codes_of_a_slice_and_of_nothing():
    strings = pa.array(["q", "p", "q", "r", "p"]).slice(1, 3)
    union, code = gs.union_codes([strings])
    assert union.to_pylist() == ["p", "q", "r"] and cp.asnumpy(code).tolist() == [0, 1, 2]
    union, code = gs.union_codes([strings, pa.array(["", "r"])])
    assert union.to_pylist() == ["p", "q", "r", ""] and cp.asnumpy(code).tolist() == [0, 1, 2, 3, 2]
    union, code = gs.union_codes([pa.array([], pa.string())])
    assert len(union) == 0 and code.size == 0


def test_a_hash_collision_is_caught_and_arrow_answers(monkeypatch):
    """Hashes made to collide (three values for many strings): union_codes sees that equal
    hashes hide different strings and says so; unify_dictionaries then takes Arrow's hash."""
    real = gs.string_hashes
    monkeypatch.setattr(gs, "string_hashes", lambda data, offsets, n: real(data, offsets, n) % np.uint64(3))
    strings = pa.array([f"s{i}" for i in range(50)])
    assert gs.union_codes([strings]) is None
    assert gs.union_codes([pa.array(["same"] * 9)]) is not None  # equal hashes of equal strings: fine
    monkeypatch.setattr(gs, "GPU_UNION_MIN", 0)
    a = DeviceTable.from_arrow(pa.table({"k": [f"s{i}" for i in range(40)]}))
    b = DeviceTable.from_arrow(pa.table({"k": [f"s{i}" for i in range(60, 20, -1)]}))
    ua, ub = unify_dictionaries([a, b], [[(0, "k"), (1, "k")]])
    assert ua.dictionaries["k"] is ub.dictionaries["k"]
    assert ua.to_arrow().column("k").to_pylist() == [f"s{i}" for i in range(40)]
    assert ub.to_arrow().column("k").to_pylist() == [f"s{i}" for i in range(60, 20, -1)]


@pytest.mark.parametrize("how", ["inner", "left", "full", "anti"])
def test_joins_of_large_dictionaries_recode_on_the_gpu(how, monkeypatch):
    """Dictionaries past GPU_UNION_MIN (the GPU's union), and small ones forced through it."""
    rng = np.random.default_rng(3)
    for n, vocabulary, force in ((200_000, 60_000, False), (300, 40, True)):
        if force:
            monkeypatch.setattr(gs, "GPU_UNION_MIN", 0)
        left = pa.table({"k": _words(rng, n, vocabulary), "a": np.arange(n)})
        right = pa.table({"k": _words(rng, n // 2, vocabulary)[::-1], "b": np.arange(n // 2)})
        dl, dr = DeviceTable.from_arrow(left), DeviceTable.from_arrow(right)
        assert not dl.dictionaries["k"].equals(dr.dictionaries["k"])
        want = gpujoin.join(left, right, "k", how=how, device="cpu")
        assert_tables_equal(gpujoin.join(dl, dr, "k", how=how).to_arrow(), want)
