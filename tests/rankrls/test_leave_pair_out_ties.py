"""Leave-pair-out of object ranking with tied pairs excluded, and every group weighting, vs retraining."""
from __future__ import annotations

import numpy as np
import pytest
from kernel_reference import dual_objective_ref, kernel_ref, laplacian_pairs

import streamrank as sr
from streamrank.rankrls._dual import LeavePairOut, LeavePairOutExcludeTies


def _retrain(X, y, i, j, lam, kernel, params, gw, ties):
    keep = np.setdiff1d(np.arange(len(y)), [i, j])
    K = kernel_ref(X[keep], X[keep], kernel, **params)
    L = laplacian_pairs(np.zeros(len(keep), int), y[keep] if ties == "exclude" else None, gw, ties)
    A = dual_objective_ref(K, L, y[keep], lam)
    return kernel_ref(X[[i, j]], X[keep], kernel, **params) @ A


def _rel(a, b):
    return np.abs(np.asarray(a) - b).max() / max(np.abs(b).max(), 1e-12)


_KERNELS = [("rbf", dict(gamma=0.4)), ("linear", {}), ("poly", dict(degree=2, coef0=1.0, gamma=0.5))]
_GWS = ["pair", "query", "size"]
_LABELS = ["binary", "graded", "few-ties"]


@pytest.mark.parametrize("labels,gw,kernel,params", [
    pytest.param(labels, gw, kernel, params, id=f"{labels}-{gw}-{kernel}",
                 # the quick loop keeps the diagonal (each kernel, weighting and labelling once): 24 cells ~10 CPU-s
                 marks=() if a == b == c else pytest.mark.slow)
    for a, labels in enumerate(_LABELS) for b, gw in enumerate(_GWS) for c, (kernel, params) in enumerate(_KERNELS)])
def test_leave_pair_out_ties_excluded_equals_retraining(kernel, params, gw, labels, rng):
    n = 13
    X = rng.normal(size=(n, 3))
    if labels == "binary":
        y = rng.integers(0, 2, size=n).astype(float)
    elif labels == "graded":
        y = rng.integers(0, 4, size=n).astype(float)
    else:
        y = rng.normal(size=n)
        y[[2, 7, 9]] = y[4]
    m = sr.KernelRankRLS(kernel=kernel, alpha=0.3, group_weight=gw, ties="exclude", **params).fit(X, y)
    pairs = np.array([(i, j) for i in range(n) for j in range(n) if i != j])
    pairs = pairs[rng.choice(len(pairs), size=45, replace=False)]
    out = m.leave_pair_out(pairs)
    assert out.shape == (45, 2)
    for p, (i, j) in enumerate(pairs):
        assert _rel(out[p], _retrain(X, y, i, j, 0.3, kernel, params, gw, "exclude")) < 1e-8, (i, j)
    # another alpha, tied pairs included in the request, and the order of a pair
    tied = np.array([[a, b] for a in range(n) for b in range(n) if a != b and y[a] == y[b]][:3])
    out2 = m.leave_pair_out(tied, alpha=2.0)
    for p, (i, j) in enumerate(tied):
        assert _rel(out2[p], _retrain(X, y, i, j, 2.0, kernel, params, gw, "exclude")) < 1e-8
    np.testing.assert_allclose(m.leave_pair_out(tied[:, ::-1], alpha=2.0), out2[:, ::-1], rtol=1e-10, atol=1e-12)


def test_without_ties_equals_the_ties_included_formula(rng):
    n = 15
    X = rng.normal(size=(n, 2))
    y = rng.normal(size=n)                       # all distinct: no tied pair to exclude
    K = kernel_ref(X, X, "rbf", gamma=0.7)
    pairs = np.array([(i, j) for i in range(n) for j in range(i + 1, n)])
    for gw in ("pair", "query"):
        a = LeavePairOutExcludeTies(K, y, 0.2, group_weight=gw)(pairs)
        b = LeavePairOut(K, y, 0.2, group_weight=gw)(pairs)
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_chunks_and_all_tied(rng):
    n = 12
    X = rng.normal(size=(n, 2))
    y = rng.integers(0, 3, size=n).astype(float)
    K = kernel_ref(X, X, "rbf", gamma=0.5)
    pairs = np.array([(i, j) for i in range(n) for j in range(n) if i != j])
    lpo = LeavePairOutExcludeTies(K, y, 0.4)
    np.testing.assert_allclose(lpo(pairs, chunk=7), lpo(pairs), rtol=1e-12, atol=1e-14)
    assert lpo(np.zeros((0, 2), np.int64)).shape == (0, 2, 1)
    # every row tied: nothing to learn from, the held-out predictions are 0
    out = LeavePairOutExcludeTies(K, np.ones(n), 0.4)(pairs[:5])
    np.testing.assert_allclose(out, 0.0, atol=1e-12)


def test_bad_input(rng):
    X = rng.normal(size=(6, 2))
    with pytest.raises(NotImplementedError, match="one output"):
        LeavePairOutExcludeTies(np.eye(6), rng.normal(size=(6, 2)), 1.0)
    with pytest.raises(ValueError, match="at least 3"):
        LeavePairOutExcludeTies(np.eye(2), np.array([0.0, 1.0]), 1.0)
    y = rng.integers(0, 2, size=6).astype(float)
    qid = np.array([0, 0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match="object ranking"):
        sr.KernelRankRLS(ties="exclude").fit(X, y, qid).leave_pair_out([[0, 1]])
