"""Cost models against paper 003's formulas and numbers, the auto rules on synthetic statistics,
the statistics estimators, and explain() on the CPU (issue 5)."""

import math

import numpy as np
import pyarrow as pa
import pytest

import gpujoin
from gpujoin.backend import resolve_algorithm
from gpujoin.cli import main
from gpujoin.plan import auto, cost, stats
from gpujoin.testing import assert_tables_equal

A100, N = cost.A100, 2.0**28


def test_model_a_sort_and_permute_costs_are_the_papers():
    assert cost.sgb_sort_cost(N, A100) == pytest.approx(68 * N / A100.b_g)
    for g in (1, 2, 8, 16, 23, 24, 32, 1000):
        assert cost.sgb_permute_cost(N, g, A100) == pytest.approx((4 * min(24, g) + 8) * N / A100.b_g)
    assert [g for g in range(1, 64) if cost.sgb_tr_wins(N, g, A100)][0] == 16  # "GFTR wins when g >= 16"


def test_model_b_crossovers_are_the_papers():
    assert cost.phj_ur_gather_cost(1e6, A100) == pytest.approx(104e6 / A100.b_g)
    assert cost.phj_tr_cost(1e6, 5e5, A100) == pytest.approx((36e6 + 12 * 5e5) / A100.b_g)
    assert cost.phj_crossover(A100, 1) == pytest.approx(36 / 92)  # "mr > 0.39"
    assert cost.phj_crossover(A100, 2) == pytest.approx(0.196, abs=1e-3)  # "mr > 0.2"
    # this engine moves every column in the key's passes: 16 N a column, not 36 N
    assert cost.engine_phj_crossover(A100, 1) == 0.0
    assert cost.engine_phj_crossover(A100, 2) == pytest.approx(16 / 184)
    assert cost.engine_phj_crossover(A100, 2) < cost.engine_phj_crossover(A100, 6) < cost.phj_crossover(A100, 6)
    for p in range(2, 7):
        assert cost.phj_crossover(A100, p) == pytest.approx(36 * (p - 1) / (92 * p))


def test_model_c_encoding_cost_is_the_papers_formula():
    for g in (1.0, 2.0**10, 2.0**16, 2.0**22):
        b_m = A100.b_m(g * 8) / min(g, 24)
        expected = (4 * g + 8 * N) / A100.b_g + 8 * (N + g) / b_m
        assert cost.encoding_cost(N, g, A100, 4) == pytest.approx(expected)
    # C2 < C1 iff D < 16 p (4 - ceil(log2 g / 8)) N / B_G, for 4-byte keys
    for g, p in ((2.0**12, 1), (2.0**20, 3), (2.0**24, 10)):
        passes = math.ceil(math.log2(g) / 8)
        bound = 16 * p * (4 - passes) * N / A100.b_g
        assert cost.encoding_pays(N, g, p, 4, A100) == (cost.encoding_cost(N, g, A100, 4) < bound)


def test_table_2_regenerated_for_the_a100():
    t = dict(cost.table2(A100))
    k8 = dict(t[8])
    # 8-byte keys: exactly the paper's column
    assert all(k8[lg] == 1 for lg in range(0, 22))
    assert all(k8[lg] == 3 for lg in range(22, 27))
    assert (k8[27], k8[28]) == (4, 5)
    # 4-byte keys: the paper's first row exactly; its later rows print one column more than the
    # formula as the text gives it (3, 5, 14 against 2, 4, 13-14), recorded in docs/BENCHMARKS.md
    k4 = dict(t[4])
    assert all(k4[lg] == 1 for lg in range(0, 15))
    assert (k4[15], k4[16], k4[17], k4[22], k4[23], k4[24]) == (2, 2, 4, 4, 13, 14)
    assert k4[25] is None  # encoding never pays once the codes need as many passes as the keys


@pytest.mark.parametrize("bits,unstable,widths", [
    (0, True, []), (5, True, [5]), (8, True, [8]), (9, True, [9]), (9, False, [8, 1]), (16, True, [8, 8]),
    (17, True, [9, 8]), (17, False, [8, 8, 1]), (18, True, [9, 9]), (19, True, [8, 8, 3]), (26, True, [9, 9, 8]),
])
def test_radix_pass_widths(bits, unstable, widths):
    # unstable passes take 9 bits only where that saves a pass (each pass moves every column)
    from gpujoin.cuda.kernels import pass_count, pass_widths

    assert pass_widths(bits, unstable) == widths
    assert pass_count(bits, unstable) == len(widths)
    assert cost.partition_cost(1, 4, 8, bits, cost.H200_ANCHORS, unstable) == pytest.approx(
        len(widths) * 20 / cost.H200_ANCHORS.b_g)


def test_h200_constants_from_anchors():
    assert cost.ratio_from_gather(4.064e12, 38.8e9) == pytest.approx(24.2, abs=0.05)
    assert cost.H200_ANCHORS.b_r == pytest.approx(4.064e12 / 24.2)


def test_group_by_rule_follows_figure_21():
    dev = cost.H200_ANCHORS
    est = lambda g, hot=0.0, slot=8: stats.GroupByEstimate(2**28, g, 4, [4, 4], slot, 0.0, "sample", hot)  # noqa: E731
    assert auto.choose_group_by(est(16), dev).algorithm == "hgb"
    assert auto.choose_group_by(est(2**14), dev).algorithm == "hgb"  # fits one 1024-thread block
    assert auto.choose_group_by(est(20174, 0.9), dev).algorithm == "hgb"  # Zipf 2 over 2^16: few groups drawn
    assert auto.choose_group_by(est(2**16), dev).algorithm == "pgb-tr"
    assert auto.choose_group_by(est(2**24), dev).algorithm == "pgb-tr"
    assert auto.choose_group_by(est(2**16, 0.12), dev).algorithm == "pgb-tr"  # uniform: birthday repeats only
    skewed = auto.choose_group_by(est(2**16, 0.55), dev)  # Zipf 1: HGB's hot groups in shared memory
    assert skewed.algorithm == "hgb" and "hot" in skewed.reason
    assert auto.choose_group_by(est(2**16, 0.9), dev).algorithm == "hgb"  # Zipf 1.5
    assert auto.choose_group_by(est(2**24, 0.9), dev).algorithm == "pgb-tr"  # accumulators past L2
    # Table 2 with the H200's measured cache ratios: at g = 2^10 encoding pays from 2 + 1 columns
    # of values for 4-byte keys (SGB-TR measured 24.1 against 25.8 ms with two, H200), from 1 + 1 for 8-byte keys
    ordered = auto.choose_group_by(est(2**10), dev, ordered=True)
    assert ordered.algorithm == "sgb-tr"
    wide = stats.GroupByEstimate(2**28, 2**10, 8, [4, 4], 8, 0.0)
    assert auto.choose_group_by(wide, dev, ordered=True).algorithm == "sgb-de-tr"
    one_col = stats.GroupByEstimate(2**28, 2**10, 4, [4], 4, 0.0)
    assert auto.choose_group_by(one_col, dev, ordered=True).algorithm == "sgb-tr"
    assert set(skewed.predicted) == {"hgb", "pgb-tr", "pgb-ur", "sgb-tr", "sgb-de-tr", "sgb-ur"}


def test_build_multiplicity_from_a_samples_distinct_keys():
    """The m for which m-row keys leave ``distinct`` distinct keys in a uniform sample."""
    rows, sampled = 2**26, 2**18
    f = sampled / rows
    for m in (1, 2, 3, 4, 8, 100):
        distinct = round(rows / m * (1 - (1 - f) ** m))
        assert stats.build_multiplicity(rows, sampled, distinct) == pytest.approx(m, rel=0.01)
    assert stats.build_multiplicity(1000, 1000, 250) == pytest.approx(4)  # the whole build: exact
    assert stats.build_multiplicity(10, 10, 10) == 1.0
    assert stats.build_multiplicity(0, 0, 0) == 1.0


def test_random_draws_bound_the_groups_whatever_their_frequencies():
    """more_groups_than never says "more" for keys of at most ``groups`` groups (uniform, Zipf,
    one hot key, fewer groups), and says it for 2^16 uniform groups against 28,160 (issue 17)."""
    rng = np.random.default_rng(5)
    cap, draws = 28_160, stats.GROUP_DRAWS
    population = {
        "uniform at the bound": np.full(cap, 1 / cap),
        "zipf 0.5": (lambda w: w / w.sum())(1 / np.arange(1, cap + 1) ** 0.5),
        "one hot key": np.append(np.full(cap - 1, 0.5 / (cap - 1)), 0.5),
        "fewer groups": np.full(cap // 2, 2 / cap),
    }
    for name, p in population.items():
        got = [np.unique(rng.choice(p.size, draws, p=p)).size for _ in range(40)]
        assert max(got) < stats.distinct_bound(cap, draws), name
        assert not stats.more_groups_than(stats.Sample(draws, max(got)), cap), name
    many = [np.unique(rng.integers(0, 1 << 16, draws)).size for _ in range(40)]
    assert all(stats.more_groups_than(stats.Sample(draws, d), cap) for d in many)
    assert not stats.more_groups_than(None, cap) and not stats.more_groups_than(stats.Sample(), cap)
    assert stats.distinct_bound(cap, draws) == pytest.approx(7558, abs=1)
    assert stats.distinct_bound(1, 10) > 1 and not stats.more_groups_than(stats.Sample(10, 1), 1)


def test_host_keys_many_to_many_take_smj_tr():
    """Host keys joined on the GPU (auto's host branch): uniform keys of 8 build rows each are
    counted in a sorted 2^16-key sample and go to SMJ-TR, with one payload column too; unique
    keys and 8-byte keys stay with PHJ-TR (issue 17)."""
    from gpujoin.plan.auto import resolve_gpu_join

    rng = np.random.default_rng(4)
    big = 1 << 21
    many = rng.permutation(np.repeat(np.arange(big // 8, dtype=np.int32), 8))
    probe = rng.integers(0, big // 8, big, dtype=np.int32)
    for pay in ([np.ones(big, np.int32)], [np.ones(big, np.int32)] * 2):
        choice = resolve_gpu_join(many, probe, pay, pay)
        assert choice.algorithm == "smj-tr" and 7 < choice.estimate.build_multiplicity < 9, choice.reason
        assert choice.estimate.match_ratio is None  # not needed once the keys are many-to-many
        unique = resolve_gpu_join(rng.permutation(big).astype(np.int32), probe, pay, pay)
        assert unique.algorithm != "smj-tr" and unique.estimate.build_multiplicity < 1.1
    wide = resolve_gpu_join(many.astype(np.int64), probe.astype(np.int64), pay, pay)
    assert wide.algorithm == "phj-tr" and wide.estimate.build_multiplicity is None
    assert stats.multiplicity(np.zeros(0, np.int32)) == 1.0
    assert stats.multiplicity(np.repeat(np.arange(100), 4)) == pytest.approx(4)  # every key sampled: exact
    # an empty side (found by scripts/fuzz_device.py: a strided sample of no rows divided by zero)
    none, some = np.zeros(0, np.int32), np.arange(13_054, dtype=np.int32)
    for b, p in ((none, some), (some, none), (none, none)):
        choice = resolve_gpu_join(b, p, [np.ones(b.size, np.int32)] * 2, [np.ones(p.size, np.int32)] * 2)
        assert choice.algorithm in ("phj-tr", "phj-ur", "smj-tr"), choice.reason
    assert stats.host_build_sample(none).size == 0 and stats.sample_match_ratio(none, 0, some) == 0.0


def test_join_rule_follows_section_4():
    dev = cost.H200_ANCHORS
    est = lambda mr, k=4, pw=4, share=0.0: stats.JoinEstimate(2**27, 2**27, k, [pw, pw], [pw, pw], mr, share)  # noqa: E731
    assert auto.choose_join(est(1.0), dev).algorithm == "phj-tr"
    assert auto.choose_join(est(0.125), dev).algorithm == "phj-tr"  # this engine's crossover: 9% for two columns
    assert auto.choose_join(est(0.05), dev).algorithm == "phj-ur"
    assert auto.choose_join(est(0.05, k=8), dev).algorithm == "phj-tr"
    assert auto.choose_join(est(0.05, pw=8), dev).algorithm == "phj-tr"
    assert auto.choose_join(est(0.05, share=0.1), dev).algorithm == "phj-tr"
    heavy = est(1.0, k=8)
    heavy.build_repeated = 0.35  # Zipf z = 1 build keys of a many-to-many join
    assert heavy.heavy_build and auto.choose_join(heavy, dev).algorithm == "smj-tr"
    many = est(1.0)
    many.build_multiplicity = 8.0  # uniform keys, 8 build rows a key (2^26 over 2^23)
    assert many.many_to_many and auto.choose_join(many, dev).algorithm == "smj-tr"
    many.build_multiplicity = 3.0  # keys of 2 rows on average drawn at random: PHJ-TR still the faster
    assert not many.many_to_many and auto.choose_join(many, dev).algorithm == "phj-tr"
    # the reasons, formatted when first read (and the match ratio's kept), say what decided: the
    # side of the crossover as measured, not as rounded for print
    tail = "model (b)'s crossover 9% for 2 payload column(s)"
    assert auto.choose_join(est(0.0861), dev).reason == f"match ratio 9% < {tail}"
    assert auto.choose_join(est(0.3), dev).reason == f"match ratio 30% >= {tail}"
    assert "not measured" in auto.choose_join(est(None), dev).reason
    assert "35% of a build sample" in auto.choose_join(heavy, dev).reason
    assert "8.0 build rows a key" in auto.choose_join(stats.JoinEstimate(8, 8, 4, [4], [4], build_multiplicity=8.0),
                                                     dev).reason
    choice = auto.choose_join(est(1.0), dev)
    ranked = choice.predicted
    assert min(ranked, key=ranked.get) == "phj-tr" and max(ranked, key=ranked.get) == "nphj"
    assert set(choice.phases["phj-tr"]) == {"transform", "match", "materialize"}  # as the joins time them
    assert sum(choice.phases["phj-tr"].values()) == pytest.approx(ranked["phj-tr"])


def test_auto_stays_auto_on_the_gpu_only():
    assert resolve_algorithm("join", "auto", "cpu") == "phj"
    assert resolve_algorithm("join", "AUTO", "cuda") == "auto"
    assert resolve_algorithm("group_by", "auto", "cuda") == "auto"


def test_planner_sketch_reads_fewer_sectors_of_more_rows():
    assert stats.hll_sub(1 << 28) == stats.HLL_SUB == 16 and stats.hll_sub(1 << 23) == 2
    assert stats.hll_sub(1000) == stats.hll_sub(stats.HLL_SUB_ROWS - 1) == 1


def test_statistics_estimates():
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 50_000, 1 << 20)
    g, method = stats.estimate_groups(keys)
    assert method == "sample (GEE)" and 0.5 * 50_000 < g < 2 * 50_000
    assert stats.estimate_groups(np.arange(100))[0] == 100
    build = rng.permutation(1 << 20)
    probe = np.where(rng.random(1 << 20) < 0.5, rng.integers(0, 1 << 20, 1 << 20), -5 - rng.integers(0, 9, 1 << 20))
    assert stats.match_ratio(build, probe) == pytest.approx(0.5, abs=0.05)
    assert stats.match_ratio(build[:0], probe) == 0.0
    # the planner's host samples: one sorted build sample of 2^14 keys (1/64 of the rows) for the
    # multiplicity and the match ratio (about 128 hits at 0.5: within 0.15 by far)
    sample = stats.host_build_sample(build)
    assert sample.size == stats.DEVICE_SAMPLE_MIN and (np.diff(sample) >= 0).all()
    assert stats.sample_match_ratio(sample, build.size, probe) == pytest.approx(0.5, abs=0.15)
    assert stats.multiplicity(build, sample) == pytest.approx(1.0, abs=0.01)
    assert stats.sample_match_ratio(sample[:0], build.size, probe) == 0.0
    zipf = np.minimum(rng.zipf(1.5, 1 << 18), 1 << 16)
    assert stats.top_share(zipf) > stats.SKEW_SHARE > stats.top_share(rng.integers(0, 1 << 16, 1 << 18))


def test_heavy_build_keys_and_sampled_groups():
    """Issue 17: the small sample finds heavy build keys, hot groups, and a few groups without
    the sketch."""
    from gpujoin.bench.workloads import GroupByWorkload, make_groupby

    rng = np.random.default_rng(6)
    n = 1 << 22
    uniform_m2m = rng.integers(0, n // 8, n)  # 8 rows a key: not heavy
    zipf_build = rng.permutation(1 << 20)[np.minimum(rng.zipf(1.2, n), 1 << 20) - 1]
    assert stats.repeated_share(rng.permutation(n)) == 0.0
    assert stats.repeated_share(uniform_m2m) < stats.HEAVY_BUILD_SHARE < stats.repeated_share(zipf_build)
    assert stats.repeated_share(np.full(70_000, 3)) == 1.0 and stats.repeated_share(np.zeros(0)) == 0.0
    est = stats.estimate_join(zipf_build, uniform_m2m, [4], [4])
    assert est.heavy_build and est.as_dict()["heavy_build"]
    few = stats.estimate_group_by(rng.integers(0, 16, n), [4], 8)
    assert (few.groups, few.method) == (16, "sample (every group seen twice)")
    many = stats.estimate_group_by(rng.integers(0, 1 << 16, n), [4], 8)
    assert many.method == "sample (GEE)" and many.groups > 2**15  # the sketch (GEE on the host) took over
    assert not many.hot and many.as_dict()["hot"] is False  # uniform over 2^16: birthday repeats only
    zipf1 = make_groupby(GroupByWorkload(log2_rows=22, log2_groups=16, zipf=1.0), np)["k"]
    hot = stats.estimate_group_by(zipf1, [4], 8)
    assert hot.hot and hot.hot_share > 0.4  # Zipf z = 1 over 2^16 keys
    assert stats.sample_groups(np.array([5, 1])) is None and stats.sample_groups(np.zeros(0, np.int64)) is None


def test_explain_join_and_group_by_on_the_cpu():
    rng = np.random.default_rng(1)
    left = pa.table({"k": rng.integers(0, 1000, 5000), "a": rng.random(5000)})
    right = pa.table({"k": np.arange(1000), "b": rng.random(1000)})
    plan = gpujoin.explain(gpujoin.join, left, right, on="k", device="cpu", run=True)
    assert plan.choice == "phj" and plan.device == "cpu" and plan.statistics["match_ratio"] == pytest.approx(1.0)
    assert_tables_equal(plan.result, gpujoin.join(left, right, on="k", device="cpu"))
    text = str(plan)
    assert "choice: phj" in text and "measured:" in text and "match_ratio" in text
    gplan = gpujoin.explain(gpujoin.group_by, left, "k", aggs={"s": ("a", "sum")}, device="cpu", run=True)
    assert gplan.choice == "pgb" and 500 < gplan.statistics["groups"] <= 1000
    assert_tables_equal(gplan.result, gpujoin.group_by(left, "k", device="cpu").agg(s=("a", "sum")), rel=1e-12)
    with pytest.raises(ValueError, match="explain"):
        gpujoin.explain(print, left)
    cross = gpujoin.explain(gpujoin.join, left.slice(0, 3), right.slice(0, 4), how="cross", device="cpu", run=True)
    assert cross.choice == "cross" and cross.result.num_rows == 12
    strings = pa.table({"s": ["x", "y", "x"], "n": [1, 1, 2], "v": [1, 2, 3]})
    assert gpujoin.explain(gpujoin.group_by, strings, ["s", "n"], aggs={"m": ("s", "max")}, device="cpu",
                           run=True).result.num_rows == 3


def test_cli_explain_and_calibrate(tmp_path, capsys):
    t = pa.table({"k": [1, 2, 2, 3], "v": [1.0, 2.0, 3.0, 4.0]})
    import pyarrow.parquet as pq

    pq.write_table(t, tmp_path / "t.parquet")
    main(["group-by", str(tmp_path / "t.parquet"), "--by", "k", "--agg", "s=v:sum", "--device", "cpu", "--explain",
          "-o", str(tmp_path / "g.parquet")])
    assert "choice: pgb" in capsys.readouterr().err
    assert pq.read_table(tmp_path / "g.parquet").num_rows == 3
    main(["join", str(tmp_path / "t.parquet"), str(tmp_path / "t.parquet"), "--on", "k", "--device", "cpu",
          "--explain", "-o", str(tmp_path / "j.parquet")])
    assert "choice: phj" in capsys.readouterr().err
    if not gpujoin.backend.cuda_available():
        with pytest.raises(SystemExit) as exc:
            main(["calibrate"])
        assert exc.value.code == 2
        assert "cuda" in capsys.readouterr().err
