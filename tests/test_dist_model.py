"""gpujoin dist model (issue 16 item 5): paper 001's phases at scales not run here."""

import math
from dataclasses import replace

import pytest

from gpujoin.cli import main
from gpujoin.dist import model as m


def test_phases_follow_the_bytes_and_messages():
    w = replace(m.RANDOM, left_rows=1e6, right_rows=1e6)
    r = m.predict(w, 16, 8, m.H200, "one-level")
    B = w.bytes
    assert r["phases"]["all-to-all"] == pytest.approx(max(B * 8 / 16 / m.H200.inter_Bps, B * 7 / 16 / m.H200.intra_Bps)
                                                      + 15 * m.H200.alpha_s)
    assert r["phases"]["compress"] == 0 and r["phases"]["local join"] == pytest.approx(2e6 / m.H200.join_tuples_per_s)
    assert r["tuples_per_s"] == pytest.approx(16 * 2e6 / r["total_s"])
    # one node: nothing crosses nodes, so compression changes nothing; one GPU: no all-to-all
    one_node = m.predict(replace(w, compression=4), 8, 8, m.H200)
    assert one_node["phases"]["compress"] == 0 and one_node["total_s"] == m.predict(w, 8, 8, m.H200)["total_s"]
    assert m.predict(w, 1, 8)["phases"]["all-to-all"] == 0
    # two-level: an extra partition pass and the NVLink stage, N - 1 + M - 1 messages
    two = m.predict(w, 16, 8, m.H200, "two-level")
    assert two["phases"]["partition"] == pytest.approx(2 * r["phases"]["partition"])


def test_compression_pays_across_nodes_and_crossover_moves_with_latency():
    fast = m.predict(replace(m.TPCH, compression=3.9), 1024, 8)["total_s"]
    assert fast < m.predict(m.TPCH, 1024, 8)["total_s"]
    c1 = m.crossover(512, 8, replace(m.H200, alpha_s=2e-6))
    c2 = m.crossover(512, 8, replace(m.H200, alpha_s=20e-6))
    assert 0 < c1 < c2 < math.inf  # dearer messages favour the two-level shuffle up to larger sizes
    a = m.alpha_for_crossover(25e6, 512, 8)
    assert m.crossover(512, 8, replace(m.H200, alpha_s=a)) == pytest.approx(25e6, rel=1e-3)
    assert m.crossover(512, 8, replace(m.H200, alpha_s=0.0)) == 0.0


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="multiple"):
        m.predict(m.RANDOM, 12, 8)
    with pytest.raises(ValueError, match="shuffle"):
        m.predict(m.RANDOM, 16, 8, shuffle="three-level")


def test_cli_prints_the_model_beside_the_paper(capsys):
    main(["dist", "model", "--gpus", "16,1024", "--inter-node-GBps", "10", "--compression-ratio", "3.9"])
    out = capsys.readouterr().out
    assert "Fig. 6" in out and "Fig. 9" in out and "crossover" in out and "1024" in out
