"""Paper 002's CPU joins (merge; the bitmap joins hash, split, bucket) against the CPU engine's
PHJ and DuckDB, including the degenerate cases of a set intersection."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import gpujoin
from gpujoin.cpu.join.bitmap import membership
from gpujoin.cpu.join.merge import merge_join
from gpujoin.testing import assert_tables_equal
from strategies import join_pair
from test_join import HOWS, duckdb_pairs, gpujoin_pairs

BITMAP = ["hash", "split", "bucket"]


@pytest.mark.parametrize("key_type,keys", [("int", ["k"]), ("string", ["k"]), ("composite", ["k", "k2"])])
@pytest.mark.parametrize("how", HOWS)
@settings(max_examples=25)
@given(data=st.data())
def test_merge_join_matches_duckdb(duck, key_type, keys, how, data):
    left, right = data.draw(join_pair(key_type=key_type))
    nulls_equal = data.draw(st.booleans())
    got = gpujoin_pairs(left, right, keys, how, nulls_equal, device="cpu", algorithm="merge")
    assert_tables_equal(got, duckdb_pairs(duck, left, right, keys, how, nulls_equal), check_names=False)


@st.composite
def domain_pair(draw):
    """Tables whose keys lie in [0, 2^32): small domains, the domain's ends, nulls."""
    ends = [0, 1, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
    tables = []
    for prefix in ("l", "r"):
        n = draw(st.integers(0, 40))
        keys = draw(st.lists(st.one_of(st.none(), st.integers(0, 9), st.sampled_from(ends)), min_size=n, max_size=n))
        tables.append(pa.table({"k": pa.array(keys, pa.int64()), f"{prefix}id": pa.array(np.arange(n))}))
    return tables


@pytest.mark.parametrize("algorithm", BITMAP)
@pytest.mark.parametrize("how", ["semi", "anti"])
@settings(max_examples=30)
@given(pair=domain_pair())
def test_bitmap_joins_match_duckdb(duck, algorithm, how, pair):
    left, right = pair
    got = gpujoin_pairs(left, right, ["k"], how, False, device="cpu", algorithm=algorithm)
    assert_tables_equal(got, duckdb_pairs(duck, left, right, ["k"], how, False), check_names=False)


@pytest.mark.parametrize("algorithm", BITMAP)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", ["empty_build", "empty_probe", "no_overlap", "full_overlap", "ends", "random"])
def test_set_intersection_degenerate_cases(algorithm, threads, case):
    rng = np.random.default_rng(11)
    u = rng.choice(2**32, 20_000, replace=False).astype(np.uint32)
    r, s = {
        "empty_build": (u[:0], u[:100]), "empty_probe": (u[:100], u[:0]),
        "no_overlap": (u[:10_000], u[10_000:]), "full_overlap": (u[:10_000], rng.permutation(u[:10_000])),
        "ends": (np.array([0, 2**32 - 1, 7], np.uint32), np.array([2**32 - 1, 0, 8, 2**31], np.uint32)),
        "random": (u[:15_000], u[5_000:]),
    }[case]
    got = membership(algorithm, r, s, threads=threads)
    np.testing.assert_array_equal(got, np.isin(s, r))


@pytest.mark.parametrize("threads", [1, 2])
def test_merge_join_unique_keys_and_threads(threads):
    rng = np.random.default_rng(5)
    u = rng.choice(2**32, 30_000, replace=False).astype(np.int64)
    r, s = u[:20_000], rng.permutation(u[10_000:])
    p, b = merge_join(r, np.arange(r.size), s, np.arange(s.size), "inner", threads=threads)
    assert np.array_equal(r[b], s[p]) and p.size == 10_000


def test_bitmap_joins_refuse_what_they_cannot_answer():
    t = pa.table({"k": [1, 2]})
    with pytest.raises(ValueError, match="semi and anti joins only"):
        gpujoin.join(t, t, "k", how="inner", algorithm="bucket")
    with pytest.raises(ValueError, match=r"\[0, 2\^32\)"):
        gpujoin.join(pa.table({"k": [-5]}), t, "k", how="semi", algorithm="hash")
    with pytest.raises(ValueError, match="threads=99"):
        membership("bucket", np.zeros(1, np.uint32), np.zeros(1, np.uint32), threads=99)
    assert "merge" in gpujoin.algorithms("cpu")["join"]


def test_auto_picks_bucket_only_for_large_semi_anti_joins_in_its_domain(monkeypatch):
    from gpujoin.plan import join as plan_join
    from gpujoin.plan.join import execute_join

    monkeypatch.setattr(plan_join, "BITMAP_AUTO_MIN_ROWS", 4)
    left = pa.table({"k": pa.array([1, 2, 3, 2**32 - 1, None], pa.int64())})
    right = pa.table({"k": pa.array([2, 2**32 - 1, 9], pa.int64())})
    for how, want in (("semi", [2, 2**32 - 1]), ("anti", [1, 3, None])):
        out, stats = execute_join(left, right, "k", how=how)
        assert stats.algorithm == "bucket" and sorted(out["k"].to_pylist(), key=str) == sorted(want, key=str)
    assert execute_join(left, right, "k", how="inner")[1].algorithm == "phj"
    negative = pa.table({"k": pa.array([-1, 2, 3, 4, 5], pa.int64())})
    assert execute_join(negative, right, "k", how="semi")[1].algorithm == "phj"
    monkeypatch.setattr(plan_join, "BITMAP_AUTO_MIN_ROWS", 1 << 23)
    assert execute_join(left, right, "k", how="semi")[1].algorithm == "phj"


@pytest.mark.parametrize("algorithm,how", [("merge", h) for h in HOWS]
                         + [(a, h) for a in BITMAP for h in ("semi", "anti")])
def test_paper002_joins_match_the_cpu_engine(algorithm, how):
    """Larger random inputs than the DuckDB tests, against gpujoin's own PHJ."""
    rng = np.random.default_rng(len(algorithm) * 7 + len(how))
    n = 50_000
    keys = rng.integers(0, 2**32, n // 3)
    left = pa.table({"k": pa.array(rng.choice(keys, n), mask=rng.random(n) < 0.05), "lid": np.arange(n)})
    right = pa.table({"k": rng.choice(np.concatenate([keys, rng.integers(0, 2**32, 1000)]), n // 2),
                      "rid": np.arange(n // 2)})
    want = gpujoin.join(left, right, "k", how=how, algorithm="phj")
    assert_tables_equal(gpujoin.join(left, right, "k", how=how, algorithm=algorithm), want)
