"""Paper 000's transfer-cost models (Eqs. 1-7), issue 15 item 3's arithmetic."""

import math

import pytest

from gpujoin.plan import multi_gpu_cost as mc

PAPER = mc.Links(h2d=12e9, duplex=22e9, p2p=12e9, host_links=1)  # paper 000's PCIe 3 figures


def test_nl_ring_matches_eqs_1_to_3():
    r = s = 8e9
    m, d = 8, 4
    assert mc.transfer_bytes("nl", r, s, m, m, d, p2p=False)["host"] == r + m * s  # Eq. 1
    b = mc.transfer_bytes("nl", r, s, m, m, d)
    assert b["host"] == r + m / d * s and b["p2p"] == m * s * (d - 1) / d  # Eq. 2
    t = mc.transfer_seconds("nl", 0.0, s, m, m, d, PAPER)
    assert t == pytest.approx(m * s * (2 * d - 1) / d**2 / PAPER.h2d)  # Eq. 3
    no_ring = mc.transfer_seconds("nl", 0.0, s, m, m, d, PAPER, p2p=False)
    assert no_ring / t == pytest.approx(mc.nl_ring_gain(d))


def test_gsm_and_hybrid_match_eqs_4_to_7():
    r, s, m, n = 4e9, 8e9, 16, 32
    b = mc.transfer_bytes("gsm", r, s, m, n, 2)
    assert b["host"] + b["duplex"] == 3 * (r + s) + 2 * (r * math.log2(m) + s * math.log2(n))  # Eq. 4
    assert mc.transfer_seconds("gsm", r, s, m, n, 2, PAPER) == pytest.approx(
        (r + s) / PAPER.h2d + (2 * (r + s) + 2 * (r * 4 + s * 5)) / PAPER.duplex
        + mc.pipeline_fill_seconds(r, s, m, n, 2, PAPER))
    h = mc.transfer_bytes("hybrid", r, s, m, n, 2)
    assert h["host"] + h["duplex"] == 3 * (r + s)  # Eq. 6
    # Eq. 7 with the paper's footnote: duplex at 22 GB/s against 12 one way
    assert mc.transfer_seconds("hybrid", r, s, m, n, 2, PAPER) == pytest.approx((r + s) / 12e9 + 2 * (r + s) / 22e9)


def test_gsm_pipeline_fill_and_drain():
    """Each phase's first upload (a run, then half a run in each of the 5 merge rounds) and last
    download at the one-way rate instead of the duplex one; a GPU's share caps a task."""
    alone = 1 / PAPER.h2d - 1 / PAPER.duplex
    assert mc.pipeline_fill_seconds(4e9, 8e9, 16, 32, 2, PAPER) == pytest.approx(2 * alone * (0.25e9 + 5 * 0.125e9))
    # one run a relation on each of 4 GPUs: a GPU's phase is all fill and drain, its share at most
    assert mc.pipeline_fill_seconds(1e9, 1e9, 1, 1, 4, PAPER) == pytest.approx(2 * alone * 0.5e9)
    assert mc.pipeline_fill_seconds(1e9, 1e9, 1, 1, 1, mc.Links(10e9, 20e9, 1e9)) == pytest.approx(0.1)


def test_choice_prefers_hybrid_for_equi_joins_and_nl_is_the_theta_fallback():
    best, pred = mc.choose(16e9, 16e9, 32, 32, 2, mc.H200_HOST)
    assert best == "hybrid" and pred["hybrid"] < pred["gsm"] < pred["nl"]
    best, pred = mc.choose(16e9, 16e9, 32, 32, 2, mc.H200_HOST, equi=False)
    assert "hybrid" not in pred
    with pytest.raises(ValueError, match="unknown"):
        mc.transfer_bytes("ring", 1, 1, 1, 1, 1)


def test_planner_transfer_model_for_a_placed_join():
    from gpujoin.plan.placement import plan_placement
    from gpujoin.plan.streaming import transfer_model

    rows, widths = [1 << 31, 1 << 31], [8, 8]
    pl = plan_placement(rows, widths, 16 * 10**9, gpus=2)
    best, pred = transfer_model(rows, widths, pl, 2)
    assert best == "hybrid" and set(pred) == {"nl", "gsm", "hybrid"}
    # hybrid moves both tables once in and out (Eq. 6), GSM adds its merge rounds (Eq. 4)
    assert pred["hybrid"] < pred["gsm"] < pred["nl"]
    one = transfer_model(rows, widths, plan_placement(rows, widths, 16 * 10**9), 1)[1]
    assert one["hybrid"] > pred["hybrid"]  # two links


def test_pageable_input_bounds_the_first_read_by_the_staging_copy():
    """Links.host_in (pageable input): nl's host reads go at the lesser of the links and the
    staging copy; GSM's run generation at the lesser of its duplex pass and the copy; pinned
    input (None) is the paper's Eqs. as they are."""
    import dataclasses

    r, s, m, n, d = 4e9, 8e9, 4, 8, 2
    fast = mc.Links(h2d=50e9, duplex=90e9, p2p=300e9, host_links=d)
    slow = dataclasses.replace(fast, host_in=30e9)
    nl = mc.transfer_bytes("nl", r, s, m, n, d)
    assert mc.transfer_seconds("nl", r, s, m, n, d, slow) == pytest.approx(nl["host"] / 30e9 + nl["p2p"] / (d * 300e9))
    extra = (r + s) / 30e9 - 2 * (r + s) / (d * 90e9)
    assert extra > 0 and mc.transfer_seconds("gsm", r, s, m, n, d, slow) == pytest.approx(
        mc.transfer_seconds("gsm", r, s, m, n, d, fast) + extra)
    # a staging copy faster than the links changes nothing
    quick = dataclasses.replace(fast, host_in=1e12)
    for algo in ("nl", "gsm", "hybrid"):
        assert mc.transfer_seconds(algo, r, s, m, n, d, quick) == mc.transfer_seconds(algo, r, s, m, n, d, fast)


def test_planner_model_takes_the_measured_duplex_rate(monkeypatch):
    """transfer_model: with `gpujoin calibrate`'s duplex probes cached, both directions at once
    go at the measured rate (one GPU's, or each GPU's share of all at once), not twice one way."""
    import gpujoin.plan.calibrate as cal
    from gpujoin.plan.placement import plan_placement
    from gpujoin.plan.streaming import transfer_model

    rows, widths = [1 << 30, 1 << 30], [8, 8]
    pl = plan_placement(rows, widths, 16 * 10**9, gpus=2)
    monkeypatch.setattr(cal, "link_rates", lambda: {"pcie": 55e9, "p2p": 390e9})
    twice = transfer_model(rows, widths, pl, 2)[1]
    monkeypatch.setattr(cal, "link_rates", lambda: {"pcie": 55e9, "p2p": 390e9, "duplex_1": 100e9, "duplex_all": 150e9})
    measured = transfer_model(rows, widths, pl, 2)[1]
    r = s = (1 << 30) * 8
    # hybrid: 2(|R| + |S|) both ways over two links, at 75 GB/s each instead of 110
    assert measured["hybrid"] - twice["hybrid"] == pytest.approx(2 * (r + s) / 150e9 - 2 * (r + s) / 220e9)
    assert measured["nl"] == twice["nl"]  # one way only


def test_measured_links_share_of_an_aggregate_is_at_most_one_link():
    """Rates probed on every GPU of a four-GPU machine, used for two: each GPU's share of the
    aggregate is capped by its own link's rate; for four the aggregate's quarter stands."""
    from gpujoin.plan.multi_gpu_cost import measured_links

    rates = {"pcie": 55e9, "pcie_all": 174e9, "duplex_1": 100e9, "duplex_all": 170e9, "p2p": 395e9}
    two, four, one = measured_links(rates, 2), measured_links(rates, 4), measured_links(rates, 1)
    assert (two.h2d, two.duplex) == (55e9, 85e9)
    assert (four.h2d, four.duplex) == (174e9 / 4, 170e9 / 4)
    assert (one.h2d, one.duplex) == (55e9, 100e9)
    only_all = measured_links({"pcie_all": 174e9}, 2)
    assert only_all.h2d == 87e9  # no single-link probe: the aggregate's share alone


def test_placement_pass1_is_bounded_by_every_link_at_once():
    """Placement.predict on four GPUs: the inputs come in at the rate measured for all links
    at once when that is below four single links, and the spill's duplex bound likewise."""
    from gpujoin.plan.placement import plan_placement

    n = 1 << 31
    pl = plan_placement([n, n], [8, 8], 16 * 10**9, gpus=4, force_out_of_core=True)
    base = {"pcie": 55e9, "host_in": float("inf"), "gpu_join": float("inf")}
    alone = pl.predict(0, base)["pass1"]
    shared = pl.predict(0, {**base, "pcie_all": 174e9})["pass1"]
    assert alone == pytest.approx(pl.input_bytes / 220e9) and shared == pytest.approx(pl.input_bytes / 174e9)
    duplex = pl.predict(0, {**base, "pcie_all": 174e9, "duplex_1": 100e9, "duplex_all": 170e9})["pass1"]
    assert duplex == pytest.approx((pl.input_bytes + pl.spill_bytes) / 170e9)
    one = plan_placement([n, n], [8, 8], 16 * 10**9, force_out_of_core=True)
    assert one.predict(0, {**base, "pcie_all": 174e9})["pass1"] == pytest.approx(one.input_bytes / 55e9)
