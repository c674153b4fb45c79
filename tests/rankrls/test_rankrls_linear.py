"""Linear RankRLS (primal and cg) against the brute-force pair solve (tests/reference)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from rankrls_testdata import make_groups
from hypothesis import given, settings
from hypothesis import strategies as st
from rankrls_reference import brute_edges, brute_rankrls

import streamrank as sr


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("sparse", [False, True])
def test_primal_equals_brute(gw, ties, sparse, rng):
    X, y, qid, gp = make_groups(rng, n_groups=6, levels=3)
    Xin = sp.csr_matrix(np.where(np.abs(X) < 0.5, 0, X)) if sparse else X
    w = brute_rankrls(Xin, y, gp, 0.7, group_weight=gw, ties=ties)
    m = sr.RankRLS(alpha=0.7, solver="primal", group_weight=gw, ties=ties).fit(Xin, y, qid, max_rows=8)
    assert m.coef_.shape == (4,) and m.solver_ == "primal"
    assert rel(m.coef_, w) < 1e-8
    np.testing.assert_allclose(m.predict(Xin), np.asarray(Xin @ w).ravel(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("gw", ["pair", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("sparse", [False, True])
def test_cg_equals_brute(gw, ties, sparse, rng):
    X, y, qid, gp = make_groups(rng, n_groups=6, levels=3, n_outputs=2)
    Xin = sp.csr_matrix(np.where(np.abs(X) < 0.5, 0, X)) if sparse else X
    w = brute_rankrls(Xin, y, gp, 0.7, group_weight=gw, ties=ties)
    res = []
    m = sr.RankRLS(alpha=0.7, solver="cg", group_weight=gw, ties=ties, tol=1e-10).fit(
        Xin, y, qid, max_rows=8, callback=lambda it, r, W: res.append(r))
    assert m.solver_ == "cg" and m.coef_.shape == (4, 2)
    assert rel(m.coef_, w) < 1e-7
    assert len(res) == m.n_iter_ and res[-1] <= 1e-10


def test_cg_global_group_split_across_blocks(rng):
    X, y, _, _ = make_groups(rng, n_groups=4, max_size=9)
    w = brute_rankrls(X, y, [0, len(y)], 0.3)
    m = sr.RankRLS(alpha=0.3, solver="cg", tol=1e-11).fit(X, y, None, max_rows=5)
    assert rel(m.coef_, w) < 1e-8
    # the operator also drives scipy's own cg
    import scipy.sparse.linalg as sl

    from streamrank.rankrls.cg import RankingOperator
    op = RankingOperator(sr.as_source(X, y), alpha=0.3, max_rows=5)
    x, info = sl.cg(op, op.rhs()[:, 0], rtol=1e-12)
    assert info == 0 and rel(x, w) < 1e-8


def test_cg_validation_early_stopping(rng):
    X, y, qid, _ = make_groups(rng, n_groups=30, n_features=20, max_size=6)
    Xv, yv, qv, _ = make_groups(rng, n_groups=10, n_features=20, max_size=6)
    m = sr.RankRLS(alpha=1e-6, solver="cg", tol=1e-14, max_iter=200)
    m.fit(X, y, qid, validation=sr.as_source(Xv, yv, qv), patience=2)
    info = m.cg_info_
    assert len(info["validation_losses"]) == m.n_iter_
    if info["stopped_early"]:
        assert min(info["validation_losses"]) == info["validation_losses"][info["best_iteration"] - 1]


def test_auto_solver(rng):
    X, y, qid, _ = make_groups(rng)
    assert sr.RankRLS().fit(X, y, qid).solver_ == "primal"
    assert sr.RankRLS().fit(sp.csr_matrix(X), y, qid).solver_ == "cg"


def test_multi_output_and_qid_none(rng):
    X, y, qid, gp = make_groups(rng, n_outputs=3)
    m = sr.RankRLS(alpha=0.2).fit(X, y, qid)
    assert m.coef_.shape == (4, 3)
    assert rel(m.coef_, brute_rankrls(X, y, gp, 0.2)) < 1e-8
    m = sr.RankRLS(alpha=0.2).fit(X, y[:, 0])
    assert rel(m.coef_, brute_rankrls(X, y[:, 0], [0, len(y)], 0.2)) < 1e-8
    # ties="exclude" with several outputs: one G per output (tests/rankrls/test_multi_output_ties.py)
    m = sr.RankRLS(alpha=0.2, ties="exclude", solver="primal").fit(X, y, qid)
    assert rel(m.coef_, brute_rankrls(X, y, gp, 0.2, ties="exclude")) < 1e-8


def test_partial_fit_pieces_equals_fit(rng):
    X, y, qid, gp = make_groups(rng, n_groups=9, levels=4)
    m = sr.RankRLS(alpha=0.4, ties="exclude", group_weight="query")
    cuts = [0, gp[2], gp[3], gp[7], len(y)]
    for a, b in zip(cuts[:-1], cuts[1:]):
        m.partial_fit(X[a:b], y[a:b], qid[a:b])
    w = brute_rankrls(X, y, gp, 0.4, ties="exclude", group_weight="query")
    assert rel(m.coef_, w) < 1e-8
    with pytest.raises(ValueError, match="5 features, but RankRLS was fitted with 4"):
        m.partial_fit(np.ones((3, 5)), np.arange(3.0), [1, 1, 1])


@settings(max_examples=25, deadline=None)
@given(max_rows=st.integers(1, 40), seed=st.integers(0, 1000), global_group=st.booleans())
def test_any_block_budget_same_model(max_rows, seed, global_group):
    rng = np.random.default_rng(seed)
    X, y, qid, gp = make_groups(rng, n_groups=5, max_size=8, levels=3)
    if global_group:
        qid, gp = None, [0, len(y)]
    m = sr.RankRLS(alpha=0.5, ties="exclude").fit(X, y, qid, max_rows=max_rows)
    assert rel(m.coef_, brute_rankrls(X, y, gp, 0.5, ties="exclude")) < 1e-8


@settings(max_examples=15, deadline=None)
@given(max_rows=st.integers(1, 40), seed=st.integers(0, 1000), global_group=st.booleans(),
       gw=st.sampled_from(["pair", "query", "size"]))
def test_cg_any_block_budget(max_rows, seed, global_group, gw):
    rng = np.random.default_rng(seed)
    X, y, qid, gp = make_groups(rng, n_groups=5, max_size=8)
    if global_group:
        qid, gp = None, [0, len(y)]
    m = sr.RankRLS(alpha=0.5, solver="cg", group_weight=gw, tol=1e-12).fit(X, y, qid, max_rows=max_rows)
    assert rel(m.coef_, brute_rankrls(X, y, gp, 0.5, group_weight=gw)) < 1e-8


def test_path_equals_fresh_fits(rng):
    X, y, qid, _ = make_groups(rng, n_outputs=2)
    alphas = [1e-3, 0.1, 1.0, 30.0]
    P = sr.RankRLS().fit(X, y, qid).path(alphas)
    assert P.shape == (4, 4, 2)
    for i, a in enumerate(alphas):
        assert rel(P[i], sr.RankRLS(alpha=a).fit(X, y, qid).coef_) < 1e-8
    assert sr.RankRLS().fit(X, y[:, 0], qid).path().shape == (31, 4)


@pytest.mark.parametrize("gw,ties", [("pair", "include"), ("query", "exclude"), ("size", "include")])
def test_leave_query_out_equals_retraining(gw, ties, rng):
    X, y, qid, gp = make_groups(rng, n_groups=5, levels=3, min_size=2)
    m = sr.RankRLS(alpha=0.3, group_weight=gw, ties=ties).fit(X, y, qid, max_rows=9)
    P = m.leave_query_out()
    for g in range(5):
        keep = np.ones(len(y), bool)
        keep[gp[g]:gp[g + 1]] = False
        mg = sr.RankRLS(alpha=0.3, group_weight=gw, ties=ties).fit(X[keep], y[keep], qid[keep])
        np.testing.assert_allclose(P[~keep], mg.predict(X[~keep]), rtol=1e-8, atol=1e-10)


def test_leave_query_out_multi_output(rng):
    X, y, qid, gp = make_groups(rng, n_groups=4, n_outputs=2)
    P = sr.RankRLS(alpha=0.3).fit(X, y, qid).leave_query_out(sr.as_source(X, y, qid))
    keep = qid != qid[0]
    np.testing.assert_allclose(P[~keep], sr.RankRLS(alpha=0.3).fit(X[keep], y[keep], qid[keep]).predict(X[~keep]),
                               rtol=1e-8, atol=1e-10)


def _retrain_cv(X, y, qid, alphas, k, **params):
    from streamrank.rankrls.selection import fold_of

    fold = fold_of(qid, k)
    held = np.zeros((len(alphas), len(y)))
    for f in range(k):
        te = fold == f
        if not te.any():
            continue
        for i, a in enumerate(alphas):
            held[i, te] = sr.RankRLS(alpha=a, **params).fit(X[~te], y[~te], qid[~te]).predict(X[te])
    return held


def test_kfold_scores_equal_retraining(rng):
    from rankrls_reference import brute_loss, pair_list

    X, y, qid, gp = make_groups(rng, n_groups=12, levels=3, min_size=2)
    alphas = [0.01, 1.0, 100.0]
    held = _retrain_cv(X, y, qid, alphas, 3, ties="exclude")
    m = sr.RankRLS(ties="exclude")
    res = m.cross_validate(sr.as_source(X, y, qid), alphas, folds=3, scoring="squared", max_rows=10)
    npairs = len(pair_list(gp, y, ties="exclude"))
    want = [brute_loss(h, y, gp, ties="exclude") / npairs for h in held]
    np.testing.assert_allclose(res.scores, want, rtol=1e-8)
    assert res.best_alpha == alphas[int(np.argmin(want))] and m.best_alpha_ == res.best_alpha
    assert rel(m.coef_, sr.RankRLS(alpha=res.best_alpha, ties="exclude").fit(X, y, qid).coef_) < 1e-8
    res = m.cross_validate(sr.as_source(X, y, qid), alphas, folds=3, scoring="disagreement")
    want = [sr.metrics.disagreement(y, h, qid) for h in held]
    np.testing.assert_allclose(res.scores, want, rtol=1e-10)
    res = m.cross_validate(sr.as_source(X, y, qid), alphas, folds=3, scoring="ndcg@3")
    want = [sr.metrics.ndcg(y, h, qid, k=3) for h in held]
    np.testing.assert_allclose(res.scores, want, rtol=1e-10)
    assert res.best_index == int(np.argmax(want))


def test_query_folds_equal_leave_query_out(rng):
    X, y, qid, gp = make_groups(rng, n_groups=6, levels=3, min_size=2)
    m = sr.RankRLS().fit(X, y, qid)
    res = m.cross_validate(None, [0.1, 10.0], folds="query", scoring="ndcg@5")
    want = [sr.metrics.ndcg(y, sr.RankRLS(alpha=a).fit(X, y, qid).leave_query_out(), qid, k=5) for a in (0.1, 10.0)]
    np.testing.assert_allclose(res.scores, want, rtol=1e-10)


@pytest.mark.parametrize("cost", ["unit", "magnitude", "normalized"])
def test_fit_edges(cost, rng):
    X = rng.normal(size=(12, 3))
    E = rng.integers(0, 12, size=(25, 2))
    E = E[E[:, 0] != E[:, 1]]
    mag = rng.uniform(0.2, 3.0, size=len(E))
    m = sr.RankRLS(alpha=0.6).fit_edges(X, E, mag, cost=cost)
    assert rel(m.coef_, brute_edges(X, E, mag, 0.6, cost)) < 1e-8
    ms = sr.RankRLS(alpha=0.6).fit_edges(sp.csr_matrix(X), E, mag, cost=cost)
    assert rel(ms.coef_, m.coef_) < 1e-10


def test_fit_edges_scoring_graph_equals_groups(rng):
    """All within-group pairs as edges with magnitude y_h - y_j and cost (21) == fit on groups."""
    X, y, qid, gp = make_groups(rng, n_groups=3)
    E = [(i, j) for g in range(3) for i in range(gp[g], gp[g + 1]) for j in range(i + 1, gp[g + 1])]
    mag = [y[i] - y[j] for i, j in E]
    a = sr.RankRLS(alpha=0.5).fit_edges(X, E, mag, cost="magnitude").coef_
    assert rel(a, sr.RankRLS(alpha=0.5).fit(X, y, qid).coef_) < 1e-10


def test_bad_inputs(rng):
    X, y, qid, gp = make_groups(rng)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity at row 3"):
        sr.RankRLS().fit(Xn, y, qid)
    for a in (0, -1.0, np.inf):
        with pytest.raises(ValueError, match="alpha"):
            sr.RankRLS(alpha=a).fit(X, y, qid)
    with pytest.raises(ValueError, match="empty input"):
        sr.RankRLS().fit(np.zeros((0, 4)), np.zeros(0))
    with pytest.raises(ValueError, match="solver"):
        sr.RankRLS(solver="newton").fit(X, y, qid)
    with pytest.raises(ValueError, match="edges row 0"):
        sr.RankRLS().fit_edges(X, [[0, 99]])
    with pytest.raises(ValueError, match="magnitude 0"):
        sr.RankRLS().fit_edges(X, [[0, 1]], [0.0], cost="normalized")
    with pytest.raises(ValueError, match="cost"):
        sr.RankRLS().fit_edges(X, [[0, 1]], cost="hinge")
    with pytest.raises(ValueError, match="folds"):
        sr.RankRLS().cross_validate(sr.as_source(X, y, qid), folds=1)
    with pytest.raises(ValueError, match="scoring"):
        sr.RankRLS().cross_validate(sr.as_source(X, y, qid), scoring="ndcg@x")
    with pytest.raises(ValueError, match="at least 5 groups"):
        sr.RankRLS().cross_validate(sr.as_source(X, y), folds=5)
    with pytest.raises(sr.NotFittedError):
        sr.RankRLS().predict(X)
    m = sr.RankRLS(solver="cg").fit(X, y, qid)
    with pytest.raises(NotImplementedError, match="solver='cg'"):   # cg path/CV: test_cg_ties_path_cv.py
        m.partial_fit(X, y, qid)


def test_one_row_groups_and_all_tied_groups(rng):
    X, y, qid, gp = make_groups(rng, n_groups=4, min_size=2)
    w = sr.RankRLS(ties="exclude").fit(X, y, qid).coef_
    # a one-row group contributes nothing
    X1 = np.vstack([X, rng.normal(size=(1, 4))])
    m1 = sr.RankRLS(ties="exclude").fit(X1, np.append(y, 5.0), np.append(qid, 999))
    assert rel(m1.coef_, w) < 1e-12
    # an all-tied group contributes nothing with ties="exclude"
    X2 = np.vstack([X, rng.normal(size=(3, 4))])
    m2 = sr.RankRLS(ties="exclude").fit(X2, np.append(y, [2.0, 2.0, 2.0]), np.append(qid, [999] * 3))
    assert rel(m2.coef_, w) < 1e-12
    # only all-tied groups: zero model
    m3 = sr.RankRLS(ties="exclude").fit(X, np.ones(len(y)), qid)
    np.testing.assert_allclose(m3.coef_, 0, atol=1e-12)


def test_persistence_and_partial_fit_after_load(tmp_path, rng):
    X, y, qid, gp = make_groups(rng, n_groups=10)
    half = gp[5]
    m = sr.RankRLS(alpha=0.5, group_weight="size")
    m.cross_validate(sr.as_source(X[:half], y[:half], qid[:half]), [0.5, 2.0], folds=2)
    sr.save(m, tmp_path / "m")
    m2 = sr.load(tmp_path / "m")
    np.testing.assert_array_equal(m2.coef_, m.coef_)
    assert len(m2.fold_stats_) == 2
    m2.partial_fit(X[half:], y[half:], qid[half:])
    full = sr.RankRLS(alpha=m.alpha, group_weight="size").fit(X, y, qid)
    assert rel(m2.coef_, full.coef_) < 1e-10
    # fold statistics continued too: CV of the whole data from the loaded model's folds
    folds_full = sr.RankRLS(alpha=m.alpha, group_weight="size")
    folds_full.cross_validate(sr.as_source(X, y, qid), [0.5, 2.0], folds=2)
    for a, b in zip(m2.fold_stats_, folds_full.fold_stats_):
        np.testing.assert_allclose(a.G, b.G, rtol=1e-12, atol=1e-12)


@pytest.mark.slow   # dask graphs: ~1 s warm
def test_dask_in_dask_out(rng):
    da = pytest.importorskip("dask.array")
    X, y, qid, gp = make_groups(rng, n_groups=8)
    dX = da.from_array(X, chunks=(7, 4))
    m = sr.RankRLS(alpha=0.5).fit(dX, da.from_array(y, chunks=7), da.from_array(qid, chunks=7))
    assert rel(m.coef_, brute_rankrls(X, y, gp, 0.5)) < 1e-8
    p = m.predict(dX)
    assert hasattr(p, "compute") and np.allclose(p.compute(), X @ m.coef_)


def test_group_store_source(tmp_path, rng):
    X, y, qid, gp = make_groups(rng, n_groups=8)
    store = sr.GroupStore.create(tmp_path / "s", n_features=4)
    store.append(X[: gp[4]], y[: gp[4]], qid[: gp[4]])
    store.append(X[gp[4]:], y[gp[4]:], qid[gp[4]:])
    m = sr.RankRLS(alpha=0.5).fit(store, max_rows=9)
    # the store keeps X in float32
    assert rel(m.coef_, brute_rankrls(X.astype(np.float32), y, gp, 0.5)) < 1e-8


def test_cg_model_roundtrip(tmp_path, rng):
    X, y, qid, _ = make_groups(rng, n_outputs=2)
    m = sr.RankRLS(solver="cg", tol=1e-10).fit(sp.csr_matrix(X), y, qid)
    sr.save(m, tmp_path / "cg")
    m2 = sr.load(tmp_path / "cg")
    np.testing.assert_array_equal(m2.predict(X), m.predict(X))
    assert m2.solver_ == "cg" and m2.n_iter_ == m.n_iter_ and not hasattr(m2, "stats_")


def test_two_step_contract_and_clone(rng):
    """statistics_of_block over shuffled split blocks, summed, then fit_statistics == fit."""
    from sklearn.base import clone

    X, y, qid, gp = make_groups(rng, n_groups=6)
    src = sr.as_source(X, y, qid)
    est = sr.RankRLS(alpha=0.3, group_weight="query")
    parts = [est.statistics_of_block(b) for b in src.blocks(max_rows=4, shuffle=True, random_state=3,
                                                             split_groups=True)]
    tot = parts[0]
    for p in parts[1:]:
        tot += p
    est.fit_statistics(tot, y_1d=True)
    assert rel(est.coef_, brute_rankrls(X, y, gp, 0.3, group_weight="query")) < 1e-8
    c = clone(est)
    assert c.get_params() == est.get_params() and not hasattr(c, "coef_")
