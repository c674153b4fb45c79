"""IPS from clicks (issue 23): row weights with ties='exclude' equal the explicit IPS edge list."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamrank as sr
from streamrank.clicks import (estimate_propensity, ips_edges, ips_weights, position_based_propensity,
                               propensity_at)


def click_logs(rng, n_queries=8, k=7, n_features=4):
    sizes = rng.integers(2, k + 1, size=n_queries)
    m = int(sizes.sum())
    X = rng.normal(size=(m, n_features))
    qid = np.repeat(np.arange(n_queries) * 5 + 2, sizes)
    position = np.concatenate([np.arange(1, s + 1) for s in sizes])
    clicks = (rng.random(m) < 0.35).astype(float)
    return X, clicks, qid, position


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), clip=st.sampled_from([None, 0.2, 0.5]), max_rows=st.integers(7, 40))
def test_ips_weights_equal_explicit_edges(seed, clip, max_rows):
    """Σ over (clicked i, unclicked j) of (1/p_i)(1 - (f_i - f_j))²: weights + ties='exclude' == fit_edges."""
    rng = np.random.default_rng(seed)
    X, clicks, qid, position = click_logs(rng)
    p = position_based_propensity(7, eta=1.0)
    w = ips_weights(clicks, position, p, clip=clip)
    E, ew = ips_edges(clicks, qid, position, p, clip=clip)
    if len(E) == 0:
        return
    a = sr.RankRLS(alpha=0.7, ties="exclude").fit(X, clicks, qid, sample_weight=w, max_rows=max_rows)
    b = sr.RankRLS(alpha=0.7).fit_edges(X, E, weights=ew)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-8, atol=1e-10)
    # the edge list itself, pair by pair
    pp = np.maximum(p[position - 1], clip or 0.0)
    for (i, j), c in zip(E, ew):
        assert clicks[i] == 1 and clicks[j] == 0 and qid[i] == qid[j]
        assert c == pytest.approx(1.0 / pp[i])
    n_pairs = sum(int(((clicks == 1) & (qid == q)).sum() * ((clicks == 0) & (qid == q)).sum())
                  for q in np.unique(qid))
    assert len(E) == n_pairs


def test_ips_edges_against_brute_objective():
    rng = np.random.default_rng(1)
    """fit_edges(weights=) minimises the weighted edge objective (dense solve of the explicit pairs)."""
    X, clicks, qid, position = click_logs(rng)
    p = position_based_propensity(7, eta=0.7)
    E, ew = ips_edges(clicks, qid, position, p)
    D = X[E[:, 0]] - X[E[:, 1]]
    ref = np.linalg.solve(D.T @ (ew[:, None] * D) + 0.3 * np.eye(4), D.T @ ew)
    got = sr.RankRLS(alpha=0.3).fit_edges(X, E, weights=ew).coef_
    np.testing.assert_allclose(got, ref, rtol=1e-10)


def test_propensity_lookup_and_clipping():
    p = np.array([1.0, 0.5, 0.25, 0.01])
    pos = np.array([1, 4, 2, 4])
    np.testing.assert_allclose(propensity_at(pos, p), [1.0, 0.01, 0.5, 0.01])
    np.testing.assert_allclose(propensity_at(pos, p, clip=0.1), [1.0, 0.1, 0.5, 0.1])
    np.testing.assert_allclose(propensity_at(pos, lambda k: 1.0 / k), [1.0, 0.25, 0.5, 0.25])
    np.testing.assert_allclose(ips_weights([1, 1, 0, 0], pos, p, clip=0.1), [1.0, 10.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"position\[1\] = 4 but propensity has 3 entries"):
        propensity_at(pos, p[:3])
    with pytest.raises(ValueError, match=r"position\[0\] = 0"):
        propensity_at(np.array([0, 1]), p)
    with pytest.raises(ValueError, match=r"clicks\[1\] = 2.0"):
        ips_weights([0, 2], np.array([1, 2]), p)
    with pytest.raises(ValueError, match="propensities must be in"):
        propensity_at(np.array([1]), np.array([0.0]))
    with pytest.raises(ValueError, match="clip must be"):
        propensity_at(pos, p, clip=0.0)


def test_estimate_propensity_from_randomized_logs():
    """Uniformly shuffled top-k, position-based clicks: CTR(k)/CTR(1) recovers p(k) (large sample)."""
    rng = np.random.default_rng(3)
    k, n_q = 6, 40_000
    p_true = position_based_propensity(k, eta=1.0)
    rel = rng.random((n_q, k)) < 0.4                                    # relevance of the shown docs
    pos = np.argsort(rng.random((n_q, k)), axis=1) + 1                  # random order
    clicks = (rel & (rng.random((n_q, k)) < p_true[pos - 1])).astype(float)
    est = estimate_propensity(clicks.ravel(), pos.ravel())
    np.testing.assert_allclose(est, p_true, atol=0.03)
    with pytest.raises(ValueError, match="rank 3 was never shown"):
        estimate_propensity([1, 0], np.array([1, 2]), n_positions=3)


def test_simulate_clicks_position_based_model():
    """Top-k of the logging score, 1-based positions, sessions as groups; click rates follow p(r)·attract."""
    from streamrank.datasets.clicks import simulate_clicks

    y = np.array([0, 2, 1, 0, 2, 1, 0, 0, 1.0])
    qid = np.array([1, 1, 1, 1, 1, 2, 2, 2, 2])
    score = np.array([5, 4, 3, 2, 1, 1, 2, 3, 4.0])
    log = simulate_clicks(y, qid, score, k=3, eta=1.0, noise=0.1, n_sessions=20_000, random_state=0)
    first = log.session == 0
    np.testing.assert_array_equal(log.row[first], [0, 1, 2])
    np.testing.assert_array_equal(log.position[first], [1, 2, 3])
    np.testing.assert_array_equal(log.row[log.session == 20_000], [8, 7, 6])
    assert log.n_sessions == 40_000 and len(log.row) == 40_000 * 3
    attract = 0.1 + 0.9 * (2.0 ** y - 1) / 3.0
    for r, pos in [(0, 1), (1, 2), (2, 3), (8, 1), (6, 3)]:
        rate = log.clicks[log.row == r].mean()
        assert rate == pytest.approx(attract[r] / pos, abs=0.015)
    rnd = simulate_clicks(y, qid, score, k=3, n_sessions=50, randomize=True, random_state=1)
    for s in range(50):
        assert set(rnd.row[rnd.session == s]) == {0, 1, 2}
    assert len({tuple(rnd.row[rnd.session == s]) for s in range(50)}) > 1
    with pytest.raises(ValueError, match="logging_score"):
        simulate_clicks(y, qid, score[:-1])
