"""Intervention harvesting (issue 37): ratios by hand, CIs cover the truth, keys from feature rows, refusals."""
from __future__ import annotations

import numpy as np
import pytest

from streamrank.datasets.clicks import simulate_position_bias
from streamrank.position_bias import harvest_propensity, row_keys


def test_two_ranks_ratio_by_hand():
    """One pair of ranks: θ_2 = Σ m CTR_2 / Σ m CTR_1 with m = n1 n2 / (n1 + n2), computed by hand."""
    # doc 0: ranker 0 at rank 1 (4 imps, 2 clicks), ranker 1 at rank 2 (2 imps, 0 clicks)
    # doc 1: ranker 1 at rank 1 (2 imps, 2 clicks), ranker 0 at rank 2 (4 imps, 1 click)
    # doc 2: only ranker 0 at rank 1 and rank 2 (the same ranker: no intervention, left out)
    key = np.array([0] * 6 + [1] * 6 + [2, 2])
    ranker = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
    pos = np.array([1, 1, 1, 1, 2, 2, 1, 1, 2, 2, 2, 2, 1, 2])
    clicks = np.array([1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1.0])
    h = harvest_propensity(key=key, clicks=clicks, position=pos, ranker=ranker, confidence=0.9)
    m0, m1 = 4 * 2 / 6, 2 * 4 / 6
    s1, s2 = m0 * 0.5 + m1 * 1.0, m0 * 0.0 + m1 * 0.25
    assert h.theta[1] == pytest.approx(s2 / s1, rel=1e-12)
    assert h.pairs == [pytest.approx({"k": 1, "k2": 2, "ratio": s1 / s2, "se_log": h.pairs[0]["se_log"],
                                      "n_docs": 2})]
    assert h.lower[1] < h.theta[1] < h.upper[1] and h.lower[0] == h.upper[0] == 1.0


@pytest.mark.parametrize("eta", [0.5, 1.0, 2.0])
def test_harvest_recovers_theta_with_intervals(eta):
    log = simulate_position_bias(n_queries=300, n_sessions=20_000, n_rankers=4, n_features=4, eta=eta,
                                 random_state=int(eta * 10))
    h = harvest_propensity(key=log.doc, clicks=log.clicks, position=log.position, ranker=log.ranker,
                           max_rows=30_000)
    np.testing.assert_allclose(h.theta[:5], log.theta[:5], rtol=0.15)
    inside = (h.lower <= log.theta) & (log.theta <= h.upper)
    assert inside.sum() >= 8                     # 95 % intervals: most of the 10 ranks
    assert np.all(h.upper - h.lower >= 0) and np.all(h.upper[1:] > h.lower[1:])
    # the feature rows identify the (q, d) as well as the doc ids do
    h2 = harvest_propensity(log.X, clicks=log.clicks, position=log.position, ranker=log.ranker)
    np.testing.assert_allclose(h2.theta, h.theta, rtol=1e-12)
    # more logs, narrower intervals
    half = log.session < 10_000
    hh = harvest_propensity(key=log.doc[half], clicks=log.clicks[half], position=log.position[half],
                            ranker=log.ranker[half])
    assert np.all((h.upper - h.lower)[1:5] < (hh.upper - hh.lower)[1:5])


def test_row_keys_equal_rows_equal_keys():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    X[10] = X[3]
    X[11] = -0.0 * X[11]
    k = row_keys(X)
    assert k[10] == k[3] and np.unique(k).size == 49
    assert row_keys(np.zeros((1, 3)))[0] == k[11]
    import scipy.sparse as sp
    np.testing.assert_array_equal(row_keys(sp.csr_matrix(X)), k)
    np.testing.assert_array_equal(row_keys(X.astype(np.float32)), row_keys(X.astype(np.float32).astype(float)))


def test_refusals():
    log = simulate_position_bias(n_queries=30, n_sessions=300, eta=1.0, random_state=0)   # one ranker
    with pytest.raises(ValueError, match="no \\(q, d\\) was shown at two ranks by different rankers"):
        harvest_propensity(key=log.doc, clicks=log.clicks, position=log.position, ranker=log.ranker)
    with pytest.raises(ValueError, match="give key="):
        harvest_propensity(clicks=log.clicks, position=log.position, ranker=log.ranker)
    with pytest.raises(ValueError, match="confidence"):
        harvest_propensity(key=log.doc, clicks=log.clicks, position=log.position, ranker=log.ranker, confidence=1)
    # rank 3 only ever shown by one ranker: not linked to rank 1
    key, ranker = np.array([0, 0, 1]), np.array([0, 1, 0])
    with pytest.raises(ValueError, match="rank 3 is linked to rank 1 by no chain"):
        harvest_propensity(key=key, clicks=np.array([1, 1, 1.0]), position=np.array([1, 2, 3]), ranker=ranker)


def test_store_ranker_column_streams_like_arrays(tmp_path):
    """A GroupStore's ranker column: harvest streamed block by block = in memory with the true doc ids."""
    import streamrank as sr

    log = simulate_position_bias(n_queries=50, n_sessions=3000, n_rankers=3, n_features=3, random_state=2)
    s = sr.GroupStore.create(tmp_path / "c.zarr", 3, row_columns=("click", "position", "ranker"))
    s.append(log.X, log.clicks, log.session, click=log.clicks, position=log.position, ranker=log.ranker)
    got = harvest_propensity(sr.GroupStore.open(tmp_path / "c.zarr"), max_rows=700)
    want = harvest_propensity(key=log.doc, clicks=log.clicks, position=log.position, ranker=log.ranker)
    np.testing.assert_allclose(got.theta, want.theta, rtol=1e-12)
    np.testing.assert_allclose(got.upper, want.upper, rtol=1e-12)
    with pytest.raises(ValueError, match=r"ranker\[0\] = -1"):
        s.append(log.X[:10], log.clicks[:10], log.session[:10], click=log.clicks[:10], position=log.position[:10],
                 ranker=np.full(10, -1))


def test_simulate_clicks_with_several_logging_rankers():
    """A 2-D logging score: each session served by one ranker (its own top k), recorded in ClickLog.ranker."""
    from streamrank.datasets.clicks import simulate_clicks

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=60).astype(float)
    qid = np.repeat(np.arange(6), 10)
    S = rng.normal(size=(60, 3))
    log = simulate_clicks(y, qid, S, k=4, n_sessions=300, random_state=1)
    assert set(np.unique(log.ranker)) == {0, 1, 2}
    for s in (0, 1, 299, 300, 1799):
        rows = log.row[log.session == s]
        r = int(log.ranker[log.session == s][0])
        g = qid[rows[0]]
        want = np.flatnonzero(qid == g)[np.argsort(-S[qid == g, r], kind="stable")[:4]]
        np.testing.assert_array_equal(rows, want)
        np.testing.assert_array_equal(log.position[log.session == s], [1, 2, 3, 4])
    one = simulate_clicks(y, qid, S[:, 0], k=4, n_sessions=5, random_state=1)
    assert np.all(one.ranker == 0)
    h = harvest_propensity(key=log.row, clicks=log.clicks, position=log.position, ranker=log.ranker)
    assert h.theta[0] == 1.0 and h.theta.shape == (4,)
    with pytest.raises(ValueError, match="logging_score has shape"):
        simulate_clicks(y, qid, S[:10])


def test_counts_merged_in_many_steps_equal_one_merge():
    from streamrank.position_bias._harvest import _Counts

    rng = np.random.default_rng(3)
    chunks = [(rng.integers(0, 50, 40).astype(np.uint64), rng.integers(0, 3, 40), rng.integers(1, 5, 40),
               (rng.random(40) < 0.3).astype(float)) for _ in range(30)]
    many, once = _Counts(), _Counts()
    many.min_buffer, once.min_buffer = 7, 10 ** 9
    merges = 0
    for ch in chunks:
        before = many.cells.size
        many.add(*ch)
        once.add(*ch)
        merges += many.cells.size != before
    many.merge()
    once.merge()
    assert merges > 3
    np.testing.assert_array_equal(many.cells, once.cells)
    np.testing.assert_array_equal(many.n, once.n)
    np.testing.assert_allclose(many.c, once.c)
    assert many.n.sum() == 30 * 40
