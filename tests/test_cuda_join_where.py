"""join_where on the GPU (CuPy) against the CPU engine: both algorithms, every operator, blocks
smaller than the output.  Marker ``gpu``."""

import operator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import gpujoin
from gpujoin import col
from gpujoin.testing import assert_tables_equal

from strategies import theta_tables

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")
if not gpujoin.backend.cuda_available():
    pytest.skip("no usable GPU", allow_module_level=True)

OPS = ["<", "<=", ">", ">=", "==", "!="]


_F = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}


def _pred(a, op, b):
    return _F[op](col(a), col(b))


@pytest.fixture(params=[False, True], ids=["one-block", "small-blocks"])
def blocks(request, monkeypatch):
    """Small blocks also fill page-locked pair segments of 150 (several segments, a table chunk
    each: the pairs are read where they lie)."""
    if request.param:
        import gpujoin.plan.join_where as jw
        from gpujoin.outofcore.stream import PairColumns

        monkeypatch.setattr(jw, "GPU_BLOCK_PAIRS", (97, 97))
        monkeypatch.setattr(PairColumns, "SEGMENT_PAIRS", 150)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("algorithm", ["nlj", "band"])
def test_gpu_matches_cpu(op, algorithm, blocks):
    if algorithm == "band" and op == "!=":
        pytest.skip("the band join needs a range or equality condition")
    rng = np.random.default_rng(3)
    left = pa.table({"t": pa.array(rng.integers(0, 60, 500), mask=rng.random(500) < 0.05), "f": rng.random(500),
                     "s": pa.array([str(x) for x in rng.integers(0, 30, 500)])})
    lo = rng.integers(0, 60, 300)
    right = pa.table({"lo": lo, "hi": lo + 5, "g": rng.random(300), "s": [str(x) for x in rng.integers(0, 30, 300)]})
    for preds in ([("t", op, "lo")], [("t", op, "lo"), ("t", "<=", "hi")], [("s", op, "s_right"), ("f", "<", "g")]):
        p = [_pred(*x) for x in preds]
        want = gpujoin.join_where(left, right, *p, device="cpu")
        got = gpujoin.join_where(left, right, *p, device="cuda", algorithm=algorithm)
        assert_tables_equal(got, want)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=3))
def test_gpu_random_tables(data, ops):
    left, right = data.draw(theta_tables(len(ops), max_rows=30))
    p = [_pred(f"a{i}", op, f"b{i}") for i, op in enumerate(ops)]
    assert_tables_equal(gpujoin.join_where(left, right, *p, device="cuda"),
                        gpujoin.join_where(left, right, *p, device="cpu"))
