"""Regression EM for the position-based click model (issue 37): dense references, monotone objective, recovery."""
from __future__ import annotations

import numpy as np
import pytest

import streamrank as sr
from streamrank.datasets.clicks import simulate_position_bias
from streamrank.position_bias import e_step, estimate_propensity_em, log_likelihood
from streamrank.position_bias._em import _chunks, _Pass, _sigmoid


def test_e_step_equals_enumeration_of_the_hidden_states():
    """P(E, R | c) by enumerating the four (E, R) states of every row, Bayes' rule by hand."""
    rng = np.random.default_rng(0)
    n = 200
    c = (rng.random(n) < 0.4).astype(float)
    t, g = rng.uniform(0.01, 1, n), rng.uniform(0.01, 0.99, n)
    e, r = e_step(c, t, g)
    for i in range(n):
        joint = {}
        for E in (0, 1):
            for R in (0, 1):
                p = (t[i] if E else 1 - t[i]) * (g[i] if R else 1 - g[i])
                joint[E, R] = p * (1.0 if (E and R) == bool(c[i]) else 0.0)
        z = sum(joint.values())
        assert e[i] == pytest.approx((joint[1, 0] + joint[1, 1]) / z, abs=1e-12)
        assert r[i] == pytest.approx((joint[0, 1] + joint[1, 1]) / z, abs=1e-12)
    ll = sum(np.log(t[i] * g[i]) if c[i] else np.log1p(-t[i] * g[i]) for i in range(n))
    assert log_likelihood(c, t, g) == pytest.approx(ll, rel=1e-12)


@pytest.mark.parametrize("max_rows", [7, 64, 1000])
def test_m_step_equals_dense_newton_step(max_rows):
    """θ = mean posterior per rank; (b, w) = one Newton step on Σ r̂ log γ + (1-r̂) log(1-γ) - λ/2 |w|², solved densely."""
    rng = np.random.default_rng(1)
    m, n, K, alpha = 150, 4, 6, 1e-3
    X = rng.normal(size=(m, n))
    pos = rng.integers(1, K + 1, size=m)
    c = (rng.random(m) < 0.3).astype(float)
    theta = np.sort(rng.uniform(0.2, 1, K))[::-1]
    theta[0] = 1.0
    w0, b0 = rng.normal(size=n) * 0.3, -0.5
    acc = _Pass(n, K)
    for Xb, cb, pb, _ in _chunks(X, c, pos, max_rows):
        acc.add(Xb, cb, pb, m, theta, w0, b0)
    acc.stats.check_complete()
    th, w, b = acc.m_step(theta, alpha, m)
    # dense reference
    g = _sigmoid(b0 + X @ w0)
    e, r = e_step(c, theta[pos - 1], g)
    ref_theta = np.array([e[pos == k].mean() for k in range(1, K + 1)])
    ref_theta[0] = 1.0
    np.testing.assert_allclose(th, ref_theta, rtol=0, atol=1e-12)
    A = np.column_stack([np.ones(m), X])
    grad = A.T @ (r - g) - alpha * m * np.r_[0.0, w0]
    H = A.T @ ((g * (1 - g))[:, None] * A) + alpha * m * np.diag(np.r_[0.0, np.ones(n)])
    step = np.linalg.solve(H, grad)
    np.testing.assert_allclose(np.r_[b, w], np.r_[b0, w0] + step, rtol=1e-8, atol=1e-10)
    assert acc.ll == pytest.approx(log_likelihood(c, theta[pos - 1], g), rel=1e-12)


@pytest.mark.parametrize("seed,eta", [(0, 0.5), (1, 1.0), (2, 2.0)])
def test_objective_never_decreases_and_theta_is_recovered(seed, eta):
    """Small logs of one deterministic ranker: the objective is monotone and θ_1..5 within 12 % of the truth."""
    log = simulate_position_bias(n_queries=300, n_sessions=8000, n_features=5, eta=eta, random_state=seed)
    seen = []
    em = estimate_propensity_em(log.X, clicks=log.clicks, position=log.position, alpha=0.0, max_rows=5000,
                                callback=lambda i, obj, th: seen.append(obj))
    assert em.converged and em.n_iter >= 3
    assert np.all(np.diff(em.objective) >= 0)
    assert np.all(np.diff(em.log_likelihood) >= 0)       # alpha=0: the objective is the log-likelihood
    assert seen == em.objective
    assert em.theta[0] == 1.0
    np.testing.assert_allclose(em.theta[:5], log.theta[:5], rtol=0.12)
    # naive CTR ratios are far off: the test can fail
    ctr = np.array([log.clicks[log.position == k].mean() for k in range(1, 6)])
    naive = np.max(np.abs(ctr / ctr[0] / log.theta[:5] - 1))
    assert naive > 0.1 and naive > 1.5 * np.max(np.abs(em.theta[:5] / log.theta[:5] - 1))


def test_halving_keeps_a_bad_start_monotone():
    """A far-off warm start (θ flat, a wrong relevance model): every accepted objective is >= the one before."""
    from streamrank.position_bias import PositionBiasEM

    log = simulate_position_bias(n_queries=100, n_sessions=2000, n_features=3, eta=2.0, random_state=5)
    bad = PositionBiasEM(theta=np.ones(10), coef=np.array([4.0, -4.0, 4.0]), intercept=3.0, objective=[],
                         log_likelihood=[], n_iter=0, n_passes=0, converged=False, n_impressions=0, alpha=0)
    em = estimate_propensity_em(log.X, clicks=log.clicks, position=log.position, init=bad, n_positions=10,
                                max_iter=40)
    assert np.all(np.diff(em.objective) >= 0)
    assert em.n_passes >= em.n_iter


def test_store_equals_arrays_and_warm_start(tmp_path):
    """Streamed from a GroupStore (click/position columns) = the same rows in memory; a warm start converges faster."""
    log = simulate_position_bias(n_queries=80, n_sessions=1500, n_features=4, eta=1.0, random_state=3)
    store = sr.GroupStore.create(tmp_path / "c.zarr", 4, row_columns=("click", "position"))
    store.append(log.X, log.clicks, log.session, click=log.clicks, position=log.position)
    store = sr.GroupStore.open(tmp_path / "c.zarr")
    X32 = log.X.astype(np.float32).astype(np.float64)
    a = estimate_propensity_em(store, max_iter=6, max_rows=1000)
    b = estimate_propensity_em(X32, clicks=log.clicks, position=log.position, max_iter=6)
    np.testing.assert_allclose(a.theta, b.theta, rtol=1e-9)
    np.testing.assert_allclose(a.coef, b.coef, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(a.objective, b.objective, rtol=1e-10)
    # row spans of the store = the same rows in memory
    spans = [(0, 3000), (4500, 9000)]
    keep = np.r_[0:3000, 4500:9000]
    sa = estimate_propensity_em(store, max_iter=4, max_rows=999, rows=spans)
    sb = estimate_propensity_em(X32[keep], clicks=log.clicks[keep], position=log.position[keep], max_iter=4)
    np.testing.assert_allclose(sa.theta, sb.theta, rtol=1e-9)
    np.testing.assert_allclose(sa.objective, sb.objective, rtol=1e-10)
    with pytest.raises(ValueError, match="sorted disjoint"):
        estimate_propensity_em(store, rows=[(10, 5)])
    full = estimate_propensity_em(store)
    again = estimate_propensity_em(store, init=full)
    assert again.converged and again.n_passes < full.n_passes / 2
    np.testing.assert_allclose(again.theta, full.theta, atol=2e-3)


def test_errors_name_the_problem(tmp_path):
    X = np.zeros((3, 2))
    with pytest.raises(ValueError, match="both clicks= and position="):
        estimate_propensity_em(X, clicks=[0, 1, 0])
    with pytest.raises(ValueError, match="beyond n_positions=2"):
        estimate_propensity_em(X, clicks=[0, 1, 0], position=[1, 2, 3], n_positions=2,
                               init=estimate_propensity_em(X, clicks=[0, 1, 1], position=[1, 1, 2], max_iter=1))
    with pytest.raises(ValueError, match=r"clicks\[1\] = 2.0"):
        estimate_propensity_em(X, clicks=[0, 2, 0], position=[1, 2, 3])
    store = sr.GroupStore.create(tmp_path / "s.zarr", 2, row_columns=("click",))
    with pytest.raises(ValueError, match="keeps no 'position' column"):
        estimate_propensity_em(store)
    with pytest.raises(TypeError, match="GroupStore with 'click' and 'position'"):
        estimate_propensity_em(X)


def test_overrelaxed_and_plain_em_meet():
    """Over-relaxation only changes the path: the same fixed point as plain EM, in fewer passes, both monotone."""
    log = simulate_position_bias(n_queries=200, n_sessions=3000, n_features=4, eta=1.0, random_state=9)
    plain = estimate_propensity_em(log.X, clicks=log.clicks, position=log.position, overrelax=1.0, tol=1e-10,
                                   max_iter=400)
    fast = estimate_propensity_em(log.X, clicks=log.clicks, position=log.position, tol=1e-10, max_iter=400)
    assert plain.converged and fast.converged and fast.n_passes < plain.n_passes
    assert np.all(np.diff(plain.objective) >= 0) and np.all(np.diff(fast.objective) >= 0)
    np.testing.assert_allclose(fast.theta, plain.theta, atol=2e-3)
    assert fast.objective[-1] >= plain.objective[-1] - 1e-6 * abs(plain.objective[-1])


def test_csr_features_equal_dense():
    import scipy.sparse as sp

    log = simulate_position_bias(n_queries=60, n_sessions=500, n_features=6, eta=1.0, random_state=4)
    X = log.X.copy()
    X[np.abs(X) < 0.8] = 0.0                                  # about half the entries zero
    a = estimate_propensity_em(X, clicks=log.clicks, position=log.position, max_iter=5, max_rows=900)
    b = estimate_propensity_em(sp.csr_matrix(X), clicks=log.clicks, position=log.position, max_iter=5,
                               max_rows=900)
    np.testing.assert_allclose(b.theta, a.theta, rtol=1e-10)
    np.testing.assert_allclose(b.coef, a.coef, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(b.objective, a.objective, rtol=1e-12)
