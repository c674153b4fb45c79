"""Leave-query-out, leave-pair-out and cross-validation of dual kernel RankRLS == retraining."""
from __future__ import annotations

import numpy as np
import pytest
from rankrls_testdata import make_groups
from kernel_reference import dual_objective_ref, groups_of, kernel_ref, laplacian_pairs

import streamrank as sr


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300)


def _retrain_predict(X, y, qid, keep, test, lam, kernel, params, gw, ties):
    K = kernel_ref(X[keep], X[keep], kernel, **params)
    L = laplacian_pairs(qid[keep], y[keep] if ties == "exclude" else None, gw, ties)
    A = dual_objective_ref(K, L, y[keep], lam)
    return kernel_ref(X[test], X[keep], kernel, **params) @ A


@pytest.mark.parametrize("kernel,params", [("rbf", dict(gamma=0.5)), ("linear", {})])
@pytest.mark.parametrize("group_weight,ties", [("pair", "include"), ("query", "exclude"), ("size", "include"),
                                               ("pair", "exclude")])
def test_leave_query_out_equals_retraining(rng, kernel, params, group_weight, ties):
    X, y, qid, _ = make_groups(rng, n_groups=6, n_features=3, levels=3)
    lam = 0.25
    m = sr.KernelRankRLS(kernel=kernel, alpha=lam, group_weight=group_weight, ties=ties, **params).fit(X, y, qid)
    lqo = m.leave_query_out()
    ref = np.empty_like(y)
    for U in groups_of(qid):
        keep = np.setdiff1d(np.arange(len(y)), U)
        ref[U] = _retrain_predict(X, y, qid, keep, U, lam, kernel, params, group_weight, ties)
    assert _rel(lqo, ref) < 1e-8
    # another alpha from the same decomposition
    lqo2 = m.leave_query_out(alpha=3.0)
    U = groups_of(qid)[2]
    keep = np.setdiff1d(np.arange(len(y)), U)
    assert _rel(lqo2[U], _retrain_predict(X, y, qid, keep, U, 3.0, kernel, params, group_weight, ties)) < 1e-8


def test_leave_query_out_multi_output(rng):
    X, y, qid, _ = make_groups(rng, n_groups=5, n_features=3, n_outputs=2)
    m = sr.KernelRankRLS(gamma=0.3, alpha=0.5).fit(X, y, qid)
    lqo = m.leave_query_out()
    assert lqo.shape == y.shape
    for U in groups_of(qid):
        keep = np.setdiff1d(np.arange(len(y)), U)
        assert _rel(lqo[U], _retrain_predict(X, y, qid, keep, U, 0.5, "rbf", dict(gamma=0.3), "pair",
                                             "include")) < 1e-8


@pytest.mark.parametrize("kernel,params", [("rbf", dict(gamma=0.3)), ("linear", {}),
                                           ("poly", dict(degree=2, coef0=1.0, gamma=0.5))])
@pytest.mark.parametrize("group_weight", ["pair", "query", "size"])
def test_leave_pair_out_equals_retraining(rng, kernel, params, group_weight):
    n = 14
    X = rng.normal(size=(n, 3))
    y = rng.integers(0, 3, size=n).astype(float)     # ties included: cost (21)
    lam = 0.6
    m = sr.KernelRankRLS(kernel=kernel, alpha=lam, group_weight=group_weight, **params).fit(X, y)
    all_pairs = np.array([(i, j) for i in range(n) for j in range(n) if i != j])
    pairs = all_pairs[rng.choice(len(all_pairs), size=40, replace=False)]
    out = m.leave_pair_out(pairs)
    assert out.shape == (40, 2)
    zero = np.zeros(n, dtype=int)
    for p, (i, j) in enumerate(pairs):
        keep = np.setdiff1d(np.arange(n), [i, j])
        ref = _retrain_predict(X, y, zero, keep, np.array([i, j]), lam, kernel, params, group_weight, "include")
        assert _rel(out[p], ref) < 1e-8, (i, j)


def test_leave_pair_out_multi_output_and_other_alpha(rng):
    n = 10
    X = rng.normal(size=(n, 2))
    y = rng.normal(size=(n, 2))
    m = sr.KernelRankRLS(gamma=1.0, alpha=0.1).fit(X, y)
    pairs = np.array([[0, 9], [4, 3], [2, 7]])
    out = m.leave_pair_out(pairs, alpha=2.0)
    assert out.shape == (3, 2, 2)
    zero = np.zeros(n, dtype=int)
    for p, (i, j) in enumerate(pairs):
        keep = np.setdiff1d(np.arange(n), [i, j])
        ref = _retrain_predict(X, y, zero, keep, np.array([i, j]), 2.0, "rbf", dict(gamma=1.0), "pair", "include")
        assert _rel(out[p], ref) < 1e-8


def test_leave_pair_out_bad_input(rng):
    X, y, qid, _ = make_groups(rng, n_groups=3, min_size=2)
    grouped = sr.KernelRankRLS().fit(X, y, qid)
    with pytest.raises(ValueError, match="object ranking .*3 query groups"):
        grouped.leave_pair_out([[0, 1]])
    flat = sr.KernelRankRLS().fit(X, y)
    with pytest.raises(ValueError, match="outside"):
        flat.leave_pair_out(np.array([[0, len(y)]]))
    with pytest.raises(ValueError, match="same row twice"):
        flat.leave_pair_out(np.array([[1, 1]]))
    with pytest.raises(ValueError, match="shape"):
        flat.leave_pair_out(np.array([0, 1]))
    # ties="exclude" is exact now: tests/rankrls/test_leave_pair_out_ties.py
    with pytest.raises(ValueError, match="at least 2 query groups"):
        flat.leave_query_out()


@pytest.mark.parametrize("scoring", ["squared", "disagreement", "ndcg@3"])
def test_cross_validate_by_query_and_kfold(rng, scoring):
    X, y, qid, _ = make_groups(rng, n_groups=8, n_features=3, levels=3, min_size=2)
    alphas = [0.01, 0.3, 10.0]
    m = sr.KernelRankRLS(gamma=0.5)
    res = m.cross_validate((X, y, qid), alphas, folds="query", scoring=scoring)
    assert res.scores.shape == (3,) and res.best_alpha in alphas and m.best_alpha_ == res.best_alpha
    for ai, a in enumerate(alphas):
        assert _rel(m.cv_predictions_[ai], m.leave_query_out(alpha=a)) < 1e-12
    # refit at the best alpha == a fresh fit
    fresh = sr.KernelRankRLS(gamma=0.5, alpha=res.best_alpha).fit(X, y, qid)
    assert _rel(m.dual_coef_, fresh.dual_coef_) < 1e-12
    # k-fold: each fold's held-out predictions == retraining without the fold's queries
    res3 = m.cross_validate(sr.as_source(X, y, qid), alphas, folds=3, scoring=scoring)
    from streamrank.rankrls.selection import fold_of
    gq = np.unique(qid)
    fog = dict(zip(gq.tolist(), fold_of(gq, 3).tolist()))
    rowfold = np.array([fog[q] for q in qid])
    for f in range(3):
        test = np.flatnonzero(rowfold == f)
        if test.size == 0:
            continue
        keep = np.flatnonzero(rowfold != f)
        ref = _retrain_predict(X, y, qid, keep, test, alphas[1], "rbf", dict(gamma=0.5), "pair", "include")
        assert _rel(m.cv_predictions_[1][test], ref) < 1e-8
    if scoring == "squared":
        assert not res3.greater_is_better


@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_cross_validate_squared_score_is_the_heldout_pair_loss(rng, ties):
    X, y, qid, _ = make_groups(rng, n_groups=6, n_features=3, levels=3, min_size=2)
    m = sr.KernelRankRLS(gamma=0.5, group_weight="query", ties=ties)
    res = m.cross_validate((X, y, qid), [0.1, 1.0], folds="query", scoring="squared")
    L = laplacian_pairs(qid, y, "query", ties)
    n_pairs = sum(1 for U in groups_of(qid) for a in U for b in U if a < b and (ties == "include" or y[a] != y[b]))
    for ai in range(2):
        r = y - m.cv_predictions_[ai]
        assert abs(res.scores[ai] - r @ L @ r / n_pairs) < 1e-10 * max(1.0, abs(res.scores[ai]))


def test_leave_pair_out_chunks_and_all_pairs(rng):
    from streamrank.kernels import kernel_matrix
    from streamrank.rankrls._dual import LeavePairOut

    n = 9
    X = rng.normal(size=(n, 2))
    y = rng.normal(size=n)
    m = sr.KernelRankRLS(gamma=0.5, alpha=0.2).fit(X, y)
    pairs = np.column_stack(np.triu_indices(n, 1))             # all m(m-1)/2 pairs
    full = m.leave_pair_out(pairs)
    lpo = LeavePairOut(kernel_matrix(X, kernel="rbf", gamma=0.5), y, 0.2)
    np.testing.assert_allclose(lpo(pairs, chunk=4)[:, :, 0], full, rtol=1e-12, atol=1e-14)
    # swapping the pair swaps the predictions
    np.testing.assert_allclose(m.leave_pair_out(pairs[:, ::-1]), full[:, ::-1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("group_weight", ["pair", "query", "size"])
def test_ties_excluded_with_several_outputs_equals_brute_force(rng, group_weight):
    """ties="exclude" and two outputs: each column has its own Laplacian (its own tie classes).
    Fit, path, leave-query-out and k-fold scores equal the per-output brute force."""
    X, _, qid, _ = make_groups(rng, n_groups=6, n_features=3, levels=3)
    Y = np.column_stack([rng.integers(0, 3, len(qid)), rng.integers(0, 2, len(qid))]).astype(float)
    lam, kern = 0.4, dict(gamma=0.5)
    m = sr.KernelRankRLS(alpha=lam, group_weight=group_weight, ties="exclude", **kern).fit(X, Y, qid)
    K = kernel_ref(X, X, "rbf", **kern)
    for k in range(2):
        L = laplacian_pairs(qid, Y[:, k], group_weight, "exclude")
        assert _rel(K @ m.dual_coef_[:, k], K @ dual_objective_ref(K, L, Y[:, k], lam)) < 1e-8
        assert _rel(K @ m.path([2.5])[0][:, k], K @ dual_objective_ref(K, L, Y[:, k], 2.5)) < 1e-8
    lqo = m.leave_query_out()
    assert lqo.shape == Y.shape
    for U in groups_of(qid):
        keep = np.setdiff1d(np.arange(len(qid)), U)
        for k in range(2):
            ref = _retrain_predict(X, Y[:, k], qid, keep, U, lam, "rbf", kern, group_weight, "exclude")
            assert _rel(lqo[U, k], ref) < 1e-8
    cv = m.cross_validate(alphas=[0.1, 1.0], folds="query", scoring="squared")
    assert cv.scores_per_output.shape[-1] == 2 and np.isfinite(cv.scores).all()


def test_leave_pair_out_ties_excluded_several_outputs(rng):
    """Object ranking, ties excluded, two outputs: each column equals retraining without the two rows."""
    n = 12
    X = rng.normal(size=(n, 3))
    Y = np.column_stack([rng.integers(0, 3, n), rng.integers(0, 2, n)]).astype(float)
    lam, kern = 0.6, dict(gamma=0.5)
    m = sr.KernelRankRLS(alpha=lam, ties="exclude", **kern).fit(X, Y)
    pairs = np.array([(0, 1), (3, 7), (11, 2), (5, 4)])
    out = m.leave_pair_out(pairs)
    assert out.shape == (4, 2, 2)
    q = np.zeros(n, dtype=int)
    for p, (i, j) in enumerate(pairs):
        keep = np.setdiff1d(np.arange(n), [i, j])
        for k in range(2):
            ref = _retrain_predict(X, Y[:, k], q, keep, np.array([i, j]), lam, "rbf", kern, "pair", "exclude")
            assert _rel(out[p, :, k], ref) < 1e-8


def test_ties_excluded_several_outputs_survive_save_load(rng, tmp_path):
    X, _, qid, _ = make_groups(rng, n_groups=5, n_features=3, levels=3)
    Y = np.column_stack([rng.integers(0, 3, len(qid)), rng.integers(0, 2, len(qid))]).astype(float)
    m = sr.KernelRankRLS(alpha=0.4, ties="exclude", gamma=0.5).fit(X, Y, qid)
    sr.save(m, tmp_path / "m")
    loaded = sr.load(tmp_path / "m")
    assert _rel(loaded.path([0.3, 3.0]), m.path([0.3, 3.0])) < 1e-10
    assert _rel(loaded.leave_query_out(), m.leave_query_out()) < 1e-10
