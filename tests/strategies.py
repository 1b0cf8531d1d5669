"""Hypothesis strategies for key columns that stress joins: duplicates, nulls, skew, extremes."""

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
EXTREMES = [INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX]


@st.composite
def int_keys(draw, n, domain=None, nulls=True):
    """n int64 keys: from a small domain (duplicates), extremes, or one value (all equal)."""
    kind = draw(st.sampled_from(["small", "extreme", "equal", "wide", "zipf"]))
    if kind == "small":
        d = domain or draw(st.integers(1, 12))
        vals = draw(st.lists(st.integers(0, d - 1), min_size=n, max_size=n))
    elif kind == "extreme":
        vals = draw(st.lists(st.sampled_from(EXTREMES), min_size=n, max_size=n))
    elif kind == "equal":
        vals = [draw(st.sampled_from(EXTREMES + [42]))] * n
    elif kind == "zipf":
        seed = draw(st.integers(0, 2**32 - 1))
        vals = list(np.random.default_rng(seed).zipf(1.5, n) % 50)
    else:
        vals = draw(st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=n, max_size=n))
    if nulls and draw(st.booleans()):
        mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        vals = [None if m else v for v, m in zip(vals, mask)]
    return [None if v is None else int(v) for v in vals]


@st.composite
def join_pair(draw, max_rows=30, key_type="int"):
    """(left, right) Arrow tables with key columns k (and k2 for composite), row ids and payloads."""
    nl = draw(st.integers(0, max_rows))
    nr = draw(st.integers(0, max_rows))
    d = draw(st.integers(1, 12))
    tables = []
    for n, prefix in ((nl, "l"), (nr, "r")):
        cols = {}
        if key_type == "int":
            cols["k"] = pa.array(draw(int_keys(n, domain=d)), pa.int64())
        elif key_type == "int32":
            cols["k"] = pa.array(draw(st.lists(st.one_of(st.none(), st.integers(-3, 3)), min_size=n, max_size=n)),
                                 pa.int32() if prefix == "l" else pa.int64())
        elif key_type == "string":
            words = ["", "a", "b", "ab", "ba", "été", "x" * 20]
            cols["k"] = pa.array(draw(st.lists(st.one_of(st.none(), st.sampled_from(words)), min_size=n, max_size=n)),
                                 pa.string() if prefix == "l" else pa.large_string())
        elif key_type == "composite":
            cols["k"] = pa.array(draw(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=n, max_size=n)),
                                 pa.int64())
            cols["k2"] = pa.array(draw(st.lists(st.one_of(st.none(), st.sampled_from(["p", "q", "r"])),
                                                min_size=n, max_size=n)), pa.string())
        cols[f"{prefix}id"] = pa.array(np.arange(n, dtype=np.int64))
        cols["v"] = pa.array(draw(st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=n, max_size=n)),
                             pa.int64())
        tables.append(pa.table(cols))
    return tables[0], tables[1]


@st.composite
def theta_tables(draw, predicates, max_rows=25):
    """(left, right) Arrow tables with int64 columns a0.. and b0.. (one pair a predicate) for
    join_where, each of up to ``max_rows`` rows of ``int_keys``."""
    nl, nr = draw(st.integers(0, max_rows)), draw(st.integers(0, max_rows))
    left = pa.table({f"a{i}": pa.array(draw(int_keys(nl)), pa.int64()) for i in range(predicates)})
    right = pa.table({f"b{i}": pa.array(draw(int_keys(nr)), pa.int64()) for i in range(predicates)})
    return left, right


def join_tables(case: str, n: int, seed: int = 3):
    """Left (k int64, lv int32) and right (k int64, rv float64) tables for the GPU's streaming
    joins: "uniform" (unique build keys, a quarter of probe keys unmatched), "zipf" (probe keys
    Zipf 1.5: the hottest ~38% of them), "extremes" (int64's ends and neighbours)."""
    rng = np.random.default_rng(seed)
    if case == "uniform":
        lk, rk = rng.permutation(n), rng.integers(0, n + n // 4, n)
    elif case == "zipf":
        lk, rk = rng.permutation(n // 2), rng.zipf(1.5, n) % (n // 2)
    elif case == "extremes":
        ext = np.array(EXTREMES, np.int64)
        lk, rk = np.concatenate([ext, rng.integers(-(2**62), 2**62, n // 2)]), rng.choice(ext, n)
    else:
        raise ValueError(case)
    left = pa.table({"k": pa.array(lk, pa.int64()), "lv": pa.array(rng.integers(-9, 9, len(lk)), pa.int32())})
    right = pa.table({"k": pa.array(rk, pa.int64()), "rv": pa.array(rng.random(len(rk)))})
    return left, right


def pk_fk_arrays(n: int, seed: int = 5):
    """(R keys, R payloads, S keys, S payloads), n rows each: R's keys a permutation of 0..n-1
    (unique), S's drawn from them (every S row matches one R row), payloads of 40 bits."""
    rng = np.random.default_rng(seed)
    rk = rng.permutation(n).astype(np.int64)
    rp = rng.integers(0, 1 << 40, n)
    sk = rng.integers(0, n, n).astype(np.int64)
    sp = rng.integers(0, 1 << 40, n)
    return rk, rp, sk, sp
