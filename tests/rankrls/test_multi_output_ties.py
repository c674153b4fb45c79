"""Linear RankRLS, primal, ties="exclude" with several outputs: one G_k = XᵀL_kX per output.

Every output has its own tie classes, so its own Laplacian L_k; everything is
checked against the all-pairs brute force (rankrls_reference) per output.
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
from streamrank.rankrls._statistics import EigenPath, RankStatistics, block_statistics


def rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


def tied_data(rng, n_groups=6, n_outputs=3, **kw):
    """Integer levels (many ties, different per output), an all-tied group in output 1 only, a one-row group."""
    X, y, qid, gp = make_groups(rng, n_groups=n_groups, n_outputs=n_outputs, levels=3, min_size=2, **kw)
    y[gp[1]:gp[2], 1] = 2.0
    y[gp[1], 0] = 0.0
    y[gp[1] + 1, 0] = 1.0                        # the same group is not all tied in output 0
    X = np.vstack([X, rng.normal(size=(1, X.shape[1]))])
    y = np.vstack([y, np.arange(n_outputs, dtype=float)[None]])
    qid = np.append(qid, qid.max() + 7)
    gp = np.append(gp, len(y))
    return X, y, qid, gp


@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("sparse", [False, True])
def test_fit_equals_brute_per_output(gw, sparse, rng):
    X, y, qid, gp = tied_data(rng)
    X = X.astype(np.float32).astype(np.float64)          # exact in float32: stored as float32 below
    Xf = sp.csr_matrix(X) if sparse else X.astype(np.float32)
    m = sr.RankRLS(alpha=0.3, ties="exclude", group_weight=gw, solver="primal").fit(Xf, y, qid, max_rows=7)
    W = brute_rankrls(X, y, gp, 0.3, ties="exclude", group_weight=gw)
    assert m.coef_.shape == (4, 3)
    assert rel(m.coef_, W) < 1e-8
    for k in range(3):  # each column is the single-output model of that column
        mk = sr.RankRLS(alpha=0.3, ties="exclude", group_weight=gw).fit(X, y[:, k], qid)
        assert rel(m.coef_[:, k], mk.coef_) < 1e-10
    st_ = m.stats_
    assert st_.per_output and st_.G.shape == (3, 4, 4)
    assert list(st_.pairs_per_output) == [len(pair_list(gp, y[:, k], ties="exclude")) for k in range(3)]
    assert st_.n_pairs == sum(st_.pairs_per_output)


def test_statistics_refuse_without_per_output():
    with pytest.raises(NotImplementedError, match="own tie classes"):
        RankStatistics(3, 2, ties="exclude")
    assert not RankStatistics(3, 2, ties="include", per_output=True).per_output
    assert not RankStatistics(3, 1, ties="exclude", per_output=True).per_output


def test_partial_fit_in_pieces(rng):
    X, y, qid, gp = tied_data(rng, n_groups=8)
    m = sr.RankRLS(alpha=0.4, ties="exclude", group_weight="query")
    cuts = [0, gp[2], gp[3], gp[7], len(y)]
    for a, b in zip(cuts[:-1], cuts[1:]):
        m.partial_fit(X[a:b], y[a:b], qid[a:b])
    assert rel(m.coef_, brute_rankrls(X, y, gp, 0.4, ties="exclude", group_weight="query")) < 1e-8
    with pytest.raises(ValueError, match="output column"):
        m.partial_fit(X[:3], y[:3, :2], [1, 1, 1])


@pytest.mark.slow   # 25 hypothesis cuttings, a fit each: 2.6 s wall under load 11; the fixed cuttings above stay quick
@settings(max_examples=25, deadline=None)
@given(max_rows=st.integers(1, 25), seed=st.integers(0, 10_000), global_group=st.booleans(),
       gw=st.sampled_from(["pair", "query", "size"]))
def test_any_block_cutting(max_rows, seed, global_group, gw):
    """Pieces of split groups (incl. one global group cut across blocks), any order of merging."""
    rng = np.random.default_rng(seed)
    X, y, qid, gp = make_groups(rng, n_groups=4, max_size=8, n_outputs=2, levels=3)
    if global_group:
        qid, gp = None, np.array([0, len(y)])
    W = brute_rankrls(X, y, gp, 0.5, ties="exclude", group_weight=gw)
    m = sr.RankRLS(alpha=0.5, ties="exclude", group_weight=gw, solver="primal")
    assert rel(m.fit(sr.as_source(X, y, qid), max_rows=max_rows).coef_, W) < 1e-8
    # block statistics merged in reverse order (what a dask reduction may do)
    parts = [block_statistics(b, ties="exclude", group_weight=gw, per_output=True)
             for b in sr.as_source(X, y, qid).blocks(max_rows=max_rows, split_groups=True, prefetch=False)]
    tot = parts[-1]
    for p in parts[-2::-1]:
        tot = tot + p
    assert tot.is_complete
    np.testing.assert_allclose(tot.G, m.stats_.G, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(tot.B, m.stats_.B, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(tot.yLy, m.stats_.yLy, rtol=1e-10)


def test_path_equals_fresh_fits(rng):
    X, y, qid, gp = tied_data(rng)
    m = sr.RankRLS(alpha=1.0, ties="exclude").fit(X, y, qid)
    alphas = [1e-3, 0.5, 20.0]
    P = m.path(alphas)
    assert P.shape == (3, 4, 3)
    for i, a in enumerate(alphas):
        assert rel(P[i], brute_rankrls(X, y, gp, a, ties="exclude")) < 1e-8
    ep = EigenPath(m.stats_.G, m.stats_.B)
    assert len(ep.parts) == 3 and not ep.shared
    with pytest.raises(NotImplementedError, match="per-output"):
        ep.inverse(1.0)


@pytest.mark.parametrize("gw", ["pair", "size"])
def test_leave_query_out_equals_retraining(gw, rng):
    X, y, qid, gp = tied_data(rng, n_groups=5)
    m = sr.RankRLS(alpha=0.3, group_weight=gw, ties="exclude").fit(X, y, qid, max_rows=9)
    P = m.leave_query_out()
    assert P.shape == y.shape
    for g in range(len(gp) - 1):
        keep = np.ones(len(y), bool)
        keep[gp[g]:gp[g + 1]] = False
        Wg = brute_rankrls(X[keep], y[keep], gp_without(gp, g), 0.3, group_weight=gw, ties="exclude")
        np.testing.assert_allclose(P[~keep], X[~keep] @ Wg, rtol=1e-8, atol=1e-10)


def gp_without(gp, g):
    sizes = np.delete(np.diff(gp), g)
    return np.concatenate(([0], np.cumsum(sizes)))


@pytest.mark.parametrize("scoring", ["squared", "disagreement"])
def test_kfold_scores_equal_retraining(scoring, rng):
    from streamrank.rankrls.selection import fold_of

    X, y, qid, gp = make_groups(rng, n_groups=12, levels=3, min_size=2, n_outputs=2)
    alphas = [0.01, 1.0, 100.0]
    fold = fold_of(qid, 3)
    held = np.zeros((len(alphas),) + y.shape)
    for f in range(3):
        te = fold == f
        keep_gp = np.concatenate(([0], np.cumsum([n for g, n in enumerate(np.diff(gp)) if not te[gp[g]]])))
        for i, a in enumerate(alphas):
            held[i, te] = X[te] @ brute_rankrls(X[~te], y[~te], keep_gp, a, ties="exclude")
    m = sr.RankRLS(ties="exclude")
    res = m.cross_validate(sr.as_source(X, y, qid), alphas, folds=3, scoring=scoring, max_rows=10)
    if scoring == "squared":
        npairs = np.array([len(pair_list(gp, y[:, k], ties="exclude")) for k in range(2)])
        want = np.array([brute_loss(h, y, gp, ties="exclude") / npairs for h in held])   # (a, v)
    else:
        want = np.array([[sr.metrics.disagreement(y[:, k], h[:, k], qid) for k in range(2)] for h in held])
    np.testing.assert_allclose(res.scores_per_output, want, rtol=1e-8)
    np.testing.assert_allclose(res.scores, want.mean(axis=1), rtol=1e-8)
    assert rel(m.coef_, brute_rankrls(X, y, gp, res.best_alpha, ties="exclude")) < 1e-8


def test_query_folds_equal_leave_query_out(rng):
    X, y, qid, gp = tied_data(rng, n_groups=5)
    m = sr.RankRLS(ties="exclude")
    res = m.cross_validate(sr.as_source(X, y, qid), [0.1, 10.0], folds="query", scoring="squared")
    P = sr.RankRLS(alpha=0.1, ties="exclude").fit(X, y, qid).leave_query_out()
    npairs = np.array([len(pair_list(gp, y[:, k], ties="exclude")) for k in range(3)])
    np.testing.assert_allclose(res.scores_per_output[0], brute_loss(P, y, gp, ties="exclude") / npairs,
                               rtol=1e-8)


def test_persistence_roundtrip(tmp_path, rng):
    X, y, qid, gp = tied_data(rng)
    m = sr.RankRLS(alpha=0.3, ties="exclude").fit(X, y, qid)
    m.cross_validate(sr.as_source(X, y, qid), [0.3, 3.0], folds=2)
    sr.save(m, tmp_path / "m")
    m2 = sr.load(tmp_path / "m")
    assert m2.stats_.per_output
    np.testing.assert_allclose(m2.path([0.7]), m.path([0.7]), rtol=1e-12)
    np.testing.assert_array_equal(m2.stats_.pairs_per_output, m.stats_.pairs_per_output)
    # continue after loading: the same model as fitting everything at once
    X2, y2, qid2, gp2 = tied_data(rng)
    m2.alpha = 0.3
    m2.partial_fit(X2, y2, qid2 + 1000)
    Xa, ya = np.vstack([X, X2]), np.vstack([y, y2])
    gpa = np.concatenate([gp, gp[-1] + gp2[1:]])
    assert rel(m2.coef_, brute_rankrls(Xa, ya, gpa, 0.3, ties="exclude")) < 1e-8
