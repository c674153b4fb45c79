"""Issue 23's Public API contract: ``fit(X, y, qid, sample_weight=None)`` on every learner that can honour it,
a clear error from the one that cannot, and per-query weights (:func:`streamrank.clicks.query_weights`).

Each weighted fit is checked against the brute-force weighted all-pairs objective (dense solve, 1e-8) or against
the weighted source it is documented to equal (same numbers)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.clicks import ips_weights, query_weights
from streamrank.io.weighted import with_weights


def _data(seed=0, sizes=(7, 5, 9, 6), n=4):
    rng = np.random.default_rng(seed)
    m = int(sum(sizes))
    X = rng.normal(size=(m, n))
    y = rng.integers(0, 3, size=m).astype(float)
    qid = np.repeat(np.arange(len(sizes)) * 10 + 3, sizes)
    w = rng.uniform(0.0, 2.5, size=m)
    return X, y, qid, w


def _L(qid, pair_weight, y=None):
    """Σ_g Σ_{i<j in g} pw(i, j) (e_i − e_j)(e_i − e_j)ᵀ (tied pairs dropped when y is given)."""
    m = len(qid)
    L = np.zeros((m, m))
    for i in range(m):
        for j in range(i + 1, m):
            if qid[i] != qid[j] or (y is not None and y[i] == y[j]):
                continue
            c = pair_weight(i, j)
            L[i, i] += c
            L[j, j] += c
            L[i, j] -= c
            L[j, i] -= c
    return L


def _solve(X, y, L, alpha):
    return np.linalg.solve(X.T @ L @ X + alpha * np.eye(X.shape[1]), X.T @ L @ y)


@pytest.mark.parametrize("cls", [sr.RankRLS, sr.KernelRankRLS, sr.PairwiseSGDRanker])
def test_fit_signature_is_the_contract(cls):
    params = list(inspect.signature(cls.fit).parameters)
    assert params[2:5] == ["y", "qid", "sample_weight"], params
    assert inspect.signature(cls.fit).parameters["sample_weight"].default is None


@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("solver", ["primal", "cg"])
def test_rankrls_every_solver_equals_brute_force(solver, ties):
    X, y, qid, w = _data(1)
    L = _L(qid, lambda i, j: w[i] * w[j], y if ties == "exclude" else None)
    m = sr.RankRLS(alpha=0.8, solver=solver, ties=ties, tol=1e-14, max_iter=300).fit(
        X, y, qid, sample_weight=w, max_rows=4)          # cg: groups cut in pieces too
    np.testing.assert_allclose(m.coef_, _solve(X, y, L, 0.8), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_kernel_exact_sample_weight_equals_brute_force(ties):
    """KernelRankRLS(kernel="linear") with sample_weight: predictions = X w* of the weighted brute force."""
    X, y, qid, w = _data(2)
    L = _L(qid, lambda i, j: w[i] * w[j], y if ties == "exclude" else None)
    ref = _solve(X, y, L, 0.5)
    m = sr.KernelRankRLS(kernel="linear", alpha=0.5, ties=ties).fit(X, y, qid, sample_weight=w)
    Xt = np.random.default_rng(3).normal(size=(6, X.shape[1]))
    np.testing.assert_allclose(m.predict(Xt), Xt @ ref, rtol=1e-8, atol=1e-10)
    plain = sr.KernelRankRLS(kernel="linear", alpha=0.5, ties=ties).fit(X, y, qid)
    assert np.abs(plain.predict(Xt) - m.predict(Xt)).max() > 1e-3


def test_kernel_sample_weight_equals_the_weighted_source():
    """sample_weight= is the weighted source, for the exact dual and sparse RankRLS (n_basis)."""
    X, y, qid, w = _data(4)
    for kw in (dict(), dict(n_basis=8, random_state=0)):
        a = sr.KernelRankRLS(kernel="rbf", gamma=0.3, alpha=0.5, **kw).fit(X, y, qid, sample_weight=w)
        b = sr.KernelRankRLS(kernel="rbf", gamma=0.3, alpha=0.5, **kw).fit(with_weights(sr.as_source(X, y, qid), w))
        np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)
        c = sr.KernelRankRLS(kernel="rbf", gamma=0.3, alpha=0.5, **kw).fit(X, y, qid)
        assert np.abs(a.dual_coef_ - c.dual_coef_).max() > 1e-6
    with pytest.raises(ValueError, match="sample_weight"):
        sr.KernelRankRLS(kernel="linear").fit(X, y, qid, sample_weight=w[:-1])
    with pytest.raises(ValueError, match="already carries row weights"):
        sr.KernelRankRLS(kernel="linear").fit(with_weights(sr.as_source(X, y, qid), w), sample_weight=w)


def test_pairwise_sgd_sample_weight_equals_the_weighted_source():
    """fit/partial_fit(sample_weight=) = the same fit on the weighted source (same sampled pairs, same steps)."""
    X, y, qid, w = _data(5, sizes=(12, 9, 15))
    a = sr.PairwiseSGDRanker(eta0=0.05, random_state=3).fit(X, y, qid, sample_weight=w, n_pairs=300)
    b = sr.PairwiseSGDRanker(eta0=0.05, random_state=3).fit(with_weights(sr.as_source(X, y, qid), w), n_pairs=300)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    c = sr.PairwiseSGDRanker(eta0=0.05, random_state=3).fit(X, y, qid, n_pairs=300)
    assert np.abs(a.coef_ - c.coef_).max() > 1e-4
    p = sr.PairwiseSGDRanker(eta0=0.05, random_state=3)
    q = sr.PairwiseSGDRanker(eta0=0.05, random_state=3)
    for _ in range(2):
        p.partial_fit(X, y, qid, 100, sample_weight=w)
        q.partial_fit(with_weights(sr.as_source(X, y, qid), w), n_pairs=100)
    np.testing.assert_array_equal(p.coef_, q.coef_)
    with pytest.raises(ValueError, match=r"sample_weight\[3\]"):
        sr.PairwiseSGDRanker().fit(X, y, qid, sample_weight=np.r_[w[:3], -1.0, w[4:]])


def test_sparse_sgd_ranker_refuses_sample_weight():
    """SparseSGDRanker steps on tuples: it cannot honour row weights and says so (not a silent unweighted fit)."""
    rng = np.random.default_rng(0)
    Q = sp.random(20, 5, density=0.5, format="csr", random_state=1)
    Dp = sp.random(20, 5, density=0.5, format="csr", random_state=2)
    Dn = sp.random(20, 5, density=0.5, format="csr", random_state=3)
    est = sr.SparseSGDRanker()
    with pytest.raises(NotImplementedError, match="does not take sample_weight.*PairwiseSGDRanker"):
        est.partial_fit(Q, Dp, Dn, sample_weight=rng.random(20))
    assert not hasattr(est, "_W") or est._W is None          # nothing was learned
    with pytest.raises(NotImplementedError, match="does not take sample_weight"):
        est.fit(object(), sample_weight=np.ones(3))
    est.partial_fit(Q, Dp, Dn, sample_weight=None)             # None is the unweighted fit


def test_ips_sample_weight_on_every_learner_is_the_ips_objective():
    """fit(X, clicks, qid, sample_weight=ips_weights(...)) with ties="exclude": pair (clicked i, unclicked j)
    weighs 1/p(pos_i), every other pair 0 — brute force for RankRLS (primal, cg) and the exact kernel."""
    rng = np.random.default_rng(9)
    X = rng.normal(size=(36, 4))
    qid = np.repeat([5, 1, 7], 12)
    position = np.tile(np.arange(1, 13), 3)
    clicks = (rng.random(36) < 0.35).astype(float)
    p = 1.0 / np.arange(1, 13)
    w = ips_weights(clicks, position, p, clip=0.2)
    pw = lambda i, j: (1 / max(p[position[i] - 1], 0.2) if clicks[i] else 1 / max(p[position[j] - 1], 0.2))  # noqa: E731
    L = _L(qid, pw, clicks)
    ref = _solve(X, clicks, L, 0.3)
    for m in (sr.RankRLS(alpha=0.3, ties="exclude"),
              sr.RankRLS(alpha=0.3, ties="exclude", solver="cg", tol=1e-14, max_iter=300)):
        np.testing.assert_allclose(m.fit(X, clicks, qid, sample_weight=w, max_rows=5).coef_, ref,
                                   rtol=1e-8, atol=1e-10)
    k = sr.KernelRankRLS(kernel="linear", alpha=0.3, ties="exclude").fit(X, clicks, qid, sample_weight=w)
    np.testing.assert_allclose(k.predict(X), X @ ref, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("gw", ["pair", "query", "size"])
def test_query_weights_give_every_pair_of_a_query_its_weight(gw):
    """Per-query weights a_g: w_i = √a_g makes every pair of query g weigh a_g·s_g (brute force, 1e-8),
    for the primal, cg on cut groups and the exact kernel; the dict form equals the array form."""
    X, y, qid, _ = _data(6)
    a = np.array([0.5, 2.0, 0.0, 3.5])
    groups = [3, 13, 23, 33]
    sizes = {g: int((qid == g).sum()) for g in groups}
    s = {"pair": lambda n: 1.0, "query": lambda n: 2.0 / (n * (n - 1)), "size": lambda n: 1.0 / n}[gw]
    L = _L(qid, lambda i, j: a[groups.index(qid[i])] * s(sizes[qid[i]]))
    ref = _solve(X, y, L, 0.4)
    w = query_weights(qid, a)
    np.testing.assert_array_equal(w, query_weights(qid, dict(zip(groups, a))))
    for m in (sr.RankRLS(alpha=0.4, group_weight=gw),
              sr.RankRLS(alpha=0.4, group_weight=gw, solver="cg", tol=1e-14, max_iter=300)):
        np.testing.assert_allclose(m.fit(X, y, qid, sample_weight=w, max_rows=4).coef_, ref, rtol=1e-8, atol=1e-10)
    k = sr.KernelRankRLS(kernel="linear", alpha=0.4, group_weight=gw).fit(X, y, qid, sample_weight=w)
    np.testing.assert_allclose(k.predict(X), X @ ref, rtol=1e-8, atol=1e-10)


def test_query_weights_refuse_bad_input():
    qid = np.array([4, 4, 2, 2, 2])
    with pytest.raises(ValueError, match="2 queries"):
        query_weights(qid, [1.0])
    with pytest.raises(ValueError, match="query id 2"):
        query_weights(qid, {4: 1.0})
    with pytest.raises(ValueError, match="query 2 is -1.0"):
        query_weights(qid, [1.0, -1.0])
    with pytest.raises(ValueError, match="contiguous|reappear|separate"):
        query_weights(np.array([1, 2, 1]), [1.0, 1.0])
