"""cg RankRLS: ties='exclude' on groups cut across blocks, the warm-started path and k-fold CV.

Oracles: the all-pairs brute force (tests/reference/rankrls_reference.py) and
retraining the brute force per fold.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from rankrls_reference import brute_loss, brute_rankrls, pair_list
from rankrls_testdata import make_groups

import streamrank as sr
from streamrank.laplacian import laplacian_dense
from streamrank.rankrls import _split_groups, cg


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


@pytest.fixture(params=["cached", "two-pass-cache", "uncached"])
def cache_mode(request, monkeypatch):
    """The three ways a split group's class sums S_c are handled (see _split_groups.TieTable)."""
    n = {"cached": 1 << 20, "two-pass-cache": 70, "uncached": 0}[request.param]
    monkeypatch.setattr(_split_groups, "TIE_CACHE_ENTRIES", n)
    return request.param


def _ties_data(rng, n_outputs=None, n=40):
    X = rng.normal(size=(n, 4))
    y = np.round(rng.normal(size=(n,) if n_outputs is None else (n, n_outputs)), 1)  # many values, some tied
    return X, y


@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("sparse", [False, True])
def test_split_global_group_ties_exclude_equals_brute(gw, sparse, cache_mode, rng):
    X, y = _ties_data(rng)
    Xin = sp.csr_matrix(np.where(np.abs(X) < 0.4, 0, X)) if sparse else X
    w = brute_rankrls(Xin, y, [0, len(y)], 0.5, group_weight=gw, ties="exclude")
    for max_rows in (3, 7, 16):
        m = sr.RankRLS(alpha=0.5, solver="cg", group_weight=gw, ties="exclude", tol=1e-12).fit(
            Xin, y, None, max_rows=max_rows)
        assert rel(m.coef_, w) < 1e-8, max_rows
    op = cg.RankingOperator(sr.as_source(Xin, y), ties="exclude", group_weight=gw, max_rows=7)
    assert op.ties_table().cached == (cache_mode != "uncached")
    assert op.ties_table().n_passes == (2 if cache_mode == "two-pass-cache" else 1)


def test_split_group_ties_exclude_multi_output_and_groups(cache_mode, rng):
    """Two outputs (each its own tie classes) and several groups, one of them split."""
    X, y = _ties_data(rng, n_outputs=2, n=30)
    X2, y2, qid2, _ = make_groups(rng, n_groups=3, max_size=5, levels=2, n_outputs=2)
    X = np.vstack([X, X2])
    y = np.vstack([y, y2])
    qid = np.concatenate([np.zeros(30, np.int64), qid2 + 10])
    gp = np.concatenate(([0], np.flatnonzero(np.diff(qid)) + 1, [len(qid)]))
    w = brute_rankrls(X, y, gp, 0.3, ties="exclude", group_weight="size")
    m = sr.RankRLS(alpha=0.3, solver="cg", ties="exclude", group_weight="size", tol=1e-12).fit(
        X, y, qid, max_rows=8)
    assert m.coef_.shape == (4, 2) and rel(m.coef_, w) < 1e-8


@pytest.mark.parametrize("gw", ["pair", "query"])
def test_split_group_operator_diagonal_and_loss_exact(gw, cache_mode, rng):
    X, y = _ties_data(rng, n=25)
    L = laplacian_dense(np.array([0, len(y)]), y=y, group_weight=gw, ties="exclude")
    src = sr.as_source(X, y)
    V = rng.normal(size=(4, 3))
    np.testing.assert_allclose(cg.laplacian_pass(src, V, group_weight=gw, ties="exclude", max_rows=6),
                               X.T @ L @ X @ V, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(cg.laplacian_pass(src, None, group_weight=gw, ties="exclude", max_rows=6)[:, 0],
                               X.T @ L @ y, rtol=1e-10, atol=1e-10)
    d = cg.gram_diagonal(src, group_weight=gw, ties="exclude", max_rows=6)
    if cache_mode == "uncached":        # a preconditioner: the tied-class term is left out, never larger
        assert np.all(d <= np.diag(X.T @ L @ X) + 1e-10) and np.all(d > 0)
    else:
        np.testing.assert_allclose(d, np.diag(X.T @ L @ X), rtol=1e-10)
    w = rng.normal(size=4)
    r = y - X @ w
    np.testing.assert_allclose(cg.validation_loss(src, w, group_weight=gw, ties="exclude", max_rows=6),
                               [r @ L @ r], rtol=1e-10)


@settings(max_examples=25, deadline=None)
@given(max_rows=st.integers(1, 45), seed=st.integers(0, 1000), levels=st.sampled_from([0, 2, 4]),
       gw=st.sampled_from(["pair", "query", "size"]))
@pytest.mark.slow   # a hypothesis search over block budgets: ~1 s warm
def test_split_ties_exclude_any_block_budget(max_rows, seed, levels, gw):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(36, 3))
    y = rng.integers(0, levels, size=36).astype(float) if levels else np.round(rng.normal(size=36), 1)
    m = sr.RankRLS(alpha=0.5, solver="cg", ties="exclude", group_weight=gw, tol=1e-12).fit(
        X, y, None, max_rows=max_rows)
    want = brute_rankrls(X, y, [0, 36], 0.5, ties="exclude", group_weight=gw)
    assert rel(m.coef_, want) < 1e-8


def test_split_all_tied_global_group_learns_nothing(rng):
    X = rng.normal(size=(20, 3))
    m = sr.RankRLS(alpha=1.0, solver="cg", ties="exclude").fit(X, np.full(20, 2.0), None, max_rows=6)
    np.testing.assert_array_equal(m.coef_, 0.0)


def test_distributed_block_apply_still_refuses_split_ties_without_table(rng):
    X, y = _ties_data(rng, n=12)
    block = next(b for b in sr.as_source(X, y).blocks(max_rows=5, split_groups=True))
    with pytest.raises(NotImplementedError, match="TieTable"):
        _split_groups._block_apply(block, X[:5] @ np.ones((3 + 1, 1)), y[:5, None], "pair", "exclude", _split_groups._Open("pair"))


# ------------------------------------------------------------------------------ path
@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_cg_path_equals_fresh_fits_and_brute(ties, rng):
    X, y, qid, gp = make_groups(rng, n_groups=8, levels=3, n_outputs=2)
    Xs = sp.csr_matrix(X)
    alphas = [0.01, 1.0, 30.0, 0.3]
    m = sr.RankRLS(alpha=1.0, solver="cg", ties=ties, tol=1e-11).fit(Xs, y, qid, max_rows=7)
    P = m.path(alphas)
    assert P.shape == (4, 4, 2)
    for i, a in enumerate(alphas):
        fresh = sr.RankRLS(alpha=a, solver="cg", ties=ties, tol=1e-11).fit(Xs, y, qid, max_rows=7).coef_
        assert rel(P[i], fresh) < 1e-8
        assert rel(P[i], brute_rankrls(X, y, gp, a, ties=ties)) < 1e-8
    info = m.path_info_
    assert all(info["converged"]) and len(info["n_iter"]) == 4
    # warm starts: the whole path needs fewer passes than four cold fits
    cold = sum(sr.RankRLS(alpha=a, solver="cg", ties=ties, tol=1e-11).fit(Xs, y, qid).cg_info_["n_passes"]
               for a in alphas)
    assert info["n_passes"] < cold
    assert rel(m.coef_, brute_rankrls(X, y, gp, 1.0, ties=ties)) < 1e-8   # the model itself is unchanged


def test_cg_path_global_group_split_ties_and_1d(rng):
    X, y = _ties_data(rng, n=30)
    m = sr.RankRLS(solver="cg", ties="exclude", group_weight="query", tol=1e-12).fit(X, y, max_rows=8)
    P = m.path([0.01, 2.0])
    assert P.shape == (2, 4)
    for i, a in enumerate([0.01, 2.0]):
        assert rel(P[i], brute_rankrls(X, y, [0, 30], a, ties="exclude", group_weight="query")) < 1e-8
    assert m.path().shape == (31, 4)


def test_cg_path_after_load_needs_source(tmp_path, rng):
    X, y, qid, gp = make_groups(rng, n_groups=5)
    m = sr.RankRLS(solver="cg", tol=1e-11).fit(sp.csr_matrix(X), y, qid)
    sr.save(m, tmp_path / "m")
    m2 = sr.load(tmp_path / "m")
    with pytest.raises(ValueError, match="source="):
        m2.path([1.0])
    P = m2.path([0.5], source=sr.as_source(sp.csr_matrix(X), y, qid))
    assert rel(P[0], brute_rankrls(X, y, gp, 0.5)) < 1e-8
    with pytest.raises(ValueError, match="features"):
        m2.path([0.5], source=sr.as_source(X[:, :3], y, qid))
    with pytest.raises(ValueError, match="alphas"):
        m.path([0.0])


# ------------------------------------------------------------------------ refusals
def test_cg_partial_fit_and_leave_query_out_refuse_with_reason(rng):
    X, y, qid, _ = make_groups(rng, n_groups=5)
    m = sr.RankRLS(solver="cg").fit(X, y, qid)
    with pytest.raises(NotImplementedError, match="primal.*mergeable"):
        m.partial_fit(X, y, qid)
    with pytest.raises(NotImplementedError, match=r"never\s+forms|folds=k"):
        m.leave_query_out()
    with pytest.raises(NotImplementedError, match="folds='query'"):
        m.cross_validate(None, [1.0], folds="query")


# --------------------------------------------------------------------- cross-validation
def _brute_cv(X, y, qid, gp, alphas, k, ties, gw="pair"):
    from streamrank.rankrls.selection import fold_of

    fold = fold_of(qid, k)
    held = np.zeros((len(alphas),) + y.shape)
    for f in range(k):
        te = fold == f
        if not te.any():
            continue
        tr = ~te
        gtr = np.concatenate(([0], np.flatnonzero(np.diff(qid[tr])) + 1, [tr.sum()]))
        for i, a in enumerate(alphas):
            w = brute_rankrls(X[tr], y[tr], gtr, a, ties=ties, group_weight=gw)
            held[i, te] = X[te] @ w
    return held


# k+1 cg fits each: ~2 CPU-s (exclude-query: 5.6 s wall under load 15); the quick loop keeps the multi-output
# k-fold below, which checks the same retraining with ties excluded
@pytest.mark.parametrize("ties,gw", [pytest.param("include", "pair", marks=pytest.mark.slow),
                                     pytest.param("exclude", "query", marks=pytest.mark.slow)])
def test_cg_kfold_scores_equal_per_fold_retraining(ties, gw, rng):
    X, y, qid, gp = make_groups(rng, n_groups=12, levels=3, min_size=2)
    Xs = sp.csr_matrix(X)
    alphas = [0.01, 1.0, 100.0]
    held = _brute_cv(X, y, qid, gp, alphas, 3, ties, gw)
    npairs = len(pair_list(gp, y, ties=ties))
    m = sr.RankRLS(solver="cg", ties=ties, group_weight=gw, tol=1e-12)
    res = m.cross_validate(sr.as_source(Xs, y, qid), alphas, folds=3, scoring="squared", max_rows=7)
    want = [brute_loss(h, y, gp, ties=ties, group_weight=gw) / npairs for h in held]
    np.testing.assert_allclose(res.scores, want, rtol=1e-8)
    assert res.best_alpha == alphas[int(np.argmin(want))] and m.best_alpha_ == res.best_alpha
    assert m.solver_ == "cg" and rel(m.coef_, brute_rankrls(X, y, gp, res.best_alpha, ties=ties,
                                                            group_weight=gw)) < 1e-8
    assert m.cv_info_["n_iter"].shape == (3, 3) and m.cv_info_["n_passes"] > 0
    res = m.cross_validate(None, alphas, folds=3, scoring="disagreement", max_rows=7)
    np.testing.assert_allclose(res.scores, [sr.metrics.disagreement(y, h, qid) for h in held], atol=1e-12)
    res = m.cross_validate(None, alphas, folds=3, scoring="ndcg@3", max_rows=7)
    want = [sr.metrics.ndcg(y, h, qid, k=3) for h in held]
    np.testing.assert_allclose(res.scores, want, rtol=1e-9)
    assert res.best_index == int(np.argmax(want))


@pytest.mark.slow   # k cg fits and k retrainings: ~1.5 CPU-s
def test_cg_kfold_multi_output_with_a_split_group(rng):
    """A group larger than the block budget is split; its fold's model is trained or scored across pieces."""
    X, y, qid, gp = make_groups(rng, n_groups=9, max_size=12, min_size=9, n_outputs=2)
    alphas = [0.1, 10.0]
    held = _brute_cv(X, y, qid, gp, alphas, 3, "include")
    npairs = len(pair_list(gp, y[:, 0]))
    m = sr.RankRLS(solver="cg", tol=1e-12)
    res = m.cross_validate(sr.as_source(sp.csr_matrix(X), y, qid), alphas, folds=3, max_rows=5)
    want = np.array([brute_loss(h, y, gp) / npairs for h in held])          # (alphas, outputs)
    np.testing.assert_allclose(res.scores_per_output, want, rtol=1e-8)
    res = m.cross_validate(None, alphas, folds=3, scoring="ndcg@4", max_rows=5)
    want = [[sr.metrics.ndcg(y[:, o], h[:, o], qid, k=4) for o in range(2)] for h in held]
    np.testing.assert_allclose(res.scores_per_output, want, rtol=1e-9)


def test_cg_kfold_bad_input(rng):
    X, y, qid, _ = make_groups(rng, n_groups=3)
    m = sr.RankRLS(solver="cg")
    with pytest.raises(ValueError, match="at least 5 groups"):
        m.cross_validate(sr.as_source(X, y, qid), [1.0], folds=5)
    with pytest.raises(ValueError, match="folds"):
        m.cross_validate(sr.as_source(X, y, qid), [1.0], folds=1)
    with pytest.raises(ValueError, match="alphas"):
        m.cross_validate(sr.as_source(X, y, qid), [-1.0], folds=2)


def test_validation_source_with_split_group_and_ties_excluded(rng):
    """Early stopping reads a held-out global group in pieces; its losses are the exact held-out losses."""
    X, y = _ties_data(rng, n=30)
    Xv, yv = _ties_data(rng, n=17)
    seen = []
    m = sr.RankRLS(alpha=0.1, solver="cg", ties="exclude", tol=1e-14, max_iter=6)
    m.fit(X, y, None, max_rows=4, validation=sr.as_source(Xv, yv), patience=50,
          callback=lambda it, r, W: seen.append(W.copy()))
    losses = m.cg_info_["validation_losses"]
    assert len(losses) == len(seen) == m.n_iter_
    for W, lv in zip(seen, losses):
        assert np.isclose(lv, brute_loss(Xv @ W, yv, [0, 17], ties="exclude"), rtol=1e-10)


def test_cg_kfold_multi_output_ties_excluded_equals_retraining_and_primal(rng):
    X, y, qid, gp = make_groups(rng, n_groups=10, levels=3, min_size=3, n_outputs=2)
    alphas = [0.05, 5.0]
    held = _brute_cv(X, y, qid, gp, alphas, 3, "exclude")
    npairs = np.array([len(pair_list(gp, y[:, o], ties="exclude")) for o in range(2)])
    m = sr.RankRLS(solver="cg", ties="exclude", tol=1e-12)
    res = m.cross_validate(sr.as_source(sp.csr_matrix(X), y, qid), alphas, folds=3, max_rows=6)
    want = np.array([brute_loss(h, y, gp, ties="exclude") / npairs for h in held])
    np.testing.assert_allclose(res.scores_per_output, want, rtol=1e-8)
    primal = sr.RankRLS(solver="primal", ties="exclude").cross_validate(sr.as_source(X, y, qid), alphas, folds=3)
    np.testing.assert_allclose(res.scores_per_output, primal.scores_per_output, rtol=1e-8)


@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_operator_reuses_split_group_sums_exactly(ties, rng):
    """The second and later products use the split groups' S_g recorded by the first one."""
    X, y = _ties_data(rng, n=23)
    L = laplacian_dense(np.array([0, 23]), y=y, ties=ties)
    op = cg.RankingOperator(sr.as_source(sp.csr_matrix(X), y), ties=ties, max_rows=5, alpha=0.5)
    for _ in range(3):
        V = rng.normal(size=(4, 2))
        np.testing.assert_allclose(op.matmat(V), X.T @ L @ X @ V + 0.5 * V, rtol=1e-10, atol=1e-10)
    assert list(op._split_sums) == [0]
