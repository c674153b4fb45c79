"""normalize=: streamed moments against numpy, and each learner against itself fitted on pre-scaled features."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.normalize import FeatureMoments, Normalizer


def _data(seed=0, m=240, n=6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, n)) * [1, 10, 0.1, 3, 1, 1] + [0, 5, -2, 100, 0, 0]
    X[:, 5] = 7.0                                   # a constant feature: scale 1
    y = X[:, :5] @ [1.0, -0.1, 5.0, 0.2, 0.0] + rng.normal(size=m)
    q = np.repeat(np.arange(m // 8), 8)
    return X, y, q


def _prescaled(X, kind):
    if kind == "standard":
        o, s = X.mean(0), X.std(0)
    else:
        o, s = X.min(0), X.max(0) - X.min(0)
    return (X - o) / np.where(s > 0, s, 1.0)


@pytest.mark.parametrize("sparse", [False, True])
def test_moments_in_blocks_equal_numpy(sparse):
    rng = np.random.default_rng(1)
    A = sp.random(500, 7, density=0.3, random_state=rng, format="csr") * 4 - 0.0
    A.data -= 1.0                                    # negatives among the stored entries
    X = A if sparse else A.toarray()
    mom = FeatureMoments(7)
    for a, b in [(0, 3), (3, 250), (250, 251), (251, 500)]:
        part = FeatureMoments(7).update(X[a:b])
        mom.merge(part)
    D = A.toarray()
    np.testing.assert_allclose(mom.mean, D.mean(0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.sqrt(mom.m2 / mom.n), D.std(0), rtol=1e-10)
    np.testing.assert_array_equal(mom.min, D.min(0))
    np.testing.assert_array_equal(mom.max, D.max(0))
    norm = mom.normalizer("minmax")
    np.testing.assert_allclose(norm.transform(X), _prescaled(D, "minmax"), rtol=1e-12, atol=1e-12)


def test_normalizer_rejects_bad_values():
    with pytest.raises(ValueError, match="finite"):
        Normalizer("standard", [0.0, np.nan], [1.0, 1.0])
    with pytest.raises(ValueError, match="kind"):
        Normalizer("robust", [0.0], [1.0])
    with pytest.raises(ValueError, match="normalize must be one of"):
        sr.RankRLS(normalize="l2").fit(*_data())


@pytest.mark.parametrize("kind", ["standard", "minmax"])
def test_rankrls_primal_equals_fit_on_prescaled_features(kind):
    X, y, q = _data()
    m = sr.RankRLS(alpha=2.0, solver="primal", normalize=kind).fit(X, y, q, max_rows=50)
    ref = sr.RankRLS(alpha=2.0, solver="primal").fit(_prescaled(X, kind), y, q)
    np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(m.predict(X), ref.predict(_prescaled(X, kind)), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(m.predict(sp.csr_matrix(X)), m.predict(X), rtol=1e-10, atol=1e-10)
    alphas = [0.1, 1.0, 10.0]
    np.testing.assert_allclose(m.path(alphas), ref.path(alphas), rtol=1e-8, atol=1e-10)
    # exact leave-query-out predictions and LQO cross-validation, as on the pre-scaled features
    Xs = _prescaled(X, kind)
    np.testing.assert_allclose(m.leave_query_out(), ref.leave_query_out(), rtol=1e-8, atol=1e-9)
    ra = sr.RankRLS(alpha=2.0, normalize=kind).fit(X, y, q).cross_validate(alphas=[0.5, 5.0], folds="query")
    rb = sr.RankRLS(alpha=2.0).fit(Xs, y, q).cross_validate(alphas=[0.5, 5.0], folds="query")
    np.testing.assert_allclose(ra.scores, rb.scores, rtol=1e-8)
    # partial_fit in two calls = one fit (the moments merge like the statistics)
    p = sr.RankRLS(alpha=2.0, solver="primal", normalize=kind)
    p.partial_fit(X[:120], y[:120], q[:120]).partial_fit(X[120:], y[120:], q[120:])
    np.testing.assert_allclose(p.coef_, m.coef_, rtol=1e-8, atol=1e-10)


def test_rankrls_cg_and_cross_validation_with_normalize():
    X, y, q = _data(2)
    ref = sr.RankRLS(alpha=1.0, solver="primal").fit(_prescaled(X, "standard"), y, q)
    cg = sr.RankRLS(alpha=1.0, solver="cg", tol=1e-12, normalize="standard").fit(X, y, q)
    np.testing.assert_allclose(cg.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(cg.normalizer_.scale, X.std(0) + (X.std(0) == 0), rtol=1e-10)
    # the cg path (warm-started CG on the scaled operator) = the primal path on the pre-scaled features
    np.testing.assert_allclose(cg.path([0.1, 1.0, 10.0]), ref.path([0.1, 1.0, 10.0]), rtol=1e-7, atol=1e-9)
    # k-fold CV: scales of all rows, so it equals CV of the plain model on the pre-scaled features
    alphas = [0.01, 1.0, 100.0]
    a = sr.RankRLS(normalize="standard").fit(X, y, q)
    b = sr.RankRLS().fit(_prescaled(X, "standard"), y, q)
    ra = a.cross_validate(alphas=alphas, folds=3)
    rb = b.cross_validate(alphas=alphas, folds=3)
    np.testing.assert_allclose(ra.scores, rb.scores, rtol=1e-8)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("kind", ["standard", "minmax"])
@pytest.mark.parametrize("scoring", ["squared", "ndcg@5"])
def test_cg_cross_validation_with_normalize_equals_prescaled(kind, scoring):
    """cg k-fold CV with normalize= (fold models on the scales of all rows) = cg CV on pre-scaled features."""
    X, y, q = _data(7)
    Xs = _prescaled(X, kind)
    alphas = [0.01, 1.0, 100.0]
    args = dict(solver="cg", tol=1e-13, max_iter=200)
    a = sr.RankRLS(normalize=kind, **args)
    ra = a.cross_validate(sr.as_source(X, y, q), alphas=alphas, folds=3, scoring=scoring, max_rows=50)
    b = sr.RankRLS(**args)
    rb = b.cross_validate(sr.as_source(Xs, y, q), alphas=alphas, folds=3, scoring=scoring, max_rows=50)
    np.testing.assert_allclose(ra.scores, rb.scores, rtol=1e-8, atol=1e-12)
    assert ra.best_alpha == rb.best_alpha
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(a.predict(X), b.predict(Xs), rtol=1e-8, atol=1e-8)
    assert a.cv_info_["n_passes"] == b.cv_info_["n_passes"] + 1      # the pass that gathers the scales
    # and the primal CV of the same model agrees to the CG tolerance
    rp = sr.RankRLS(normalize=kind).cross_validate(sr.as_source(X, y, q), alphas=alphas, folds=3,
                                                   scoring=scoring)
    np.testing.assert_allclose(ra.scores, rp.scores, rtol=1e-7, atol=1e-10)


def test_saved_normalized_model_predicts_the_same(tmp_path):
    X, y, q = _data(3)
    m = sr.RankRLS(alpha=1.0, normalize="minmax").fit(X, y, q, feature_names=list("abcdef"))
    sr.save(m, tmp_path / "m.zarr")
    back = sr.load(tmp_path / "m.zarr")
    np.testing.assert_array_equal(back.predict(X), m.predict(X))
    assert back.normalizer_.kind == "minmax" and list(back.feature_names_in_) == list("abcdef")
    back.partial_fit(X[:40], y[:40], q[:40] + 1000)          # the saved moments keep merging
    assert back.stats_.moments.n == len(X) + 40


@pytest.mark.parametrize("kind", ["standard", "minmax"])
def test_pairwise_sgd_equals_fit_on_prescaled_features(kind, tmp_path):
    X, y, q = _data(4)
    m = sr.PairwiseSGDRanker(eta0=0.05, l1=1e-4, normalize=kind).fit(X, y, q, n_pairs=3000)
    ref = sr.PairwiseSGDRanker(eta0=0.05, l1=1e-4).fit(_prescaled(X, kind), y, q, n_pairs=3000)
    np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(m.predict(X), ref.predict(_prescaled(X, kind)), rtol=1e-8, atol=1e-8)
    sr.save(m, tmp_path / "p.zarr")
    np.testing.assert_array_equal(sr.load(tmp_path / "p.zarr").predict(X), m.predict(X))


@pytest.mark.parametrize("kind", ["standard", "minmax"])
@pytest.mark.parametrize("n_basis", [pytest.param(None, marks=pytest.mark.slow), 30])  # dual fit + LQO: ~1.5 CPU-s
def test_kernel_rankrls_equals_fit_on_prescaled_features(kind, n_basis):
    X, y, q = _data(5)
    X = X[:, :5]                                     # rbf on the constant column is fine, but keep it lean
    args = dict(kernel="rbf", gamma=0.2, alpha=0.5, n_basis=n_basis, random_state=3)
    m = sr.KernelRankRLS(normalize=kind, **args).fit(X, y, q)
    ref = sr.KernelRankRLS(**args).fit(_prescaled(X, kind), y, q)
    np.testing.assert_allclose(m.basis_, ref.basis_, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m.dual_coef_, ref.dual_coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(m.predict(X), ref.predict(_prescaled(X, kind)), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(m.leave_query_out(), ref.leave_query_out(), rtol=1e-7, atol=1e-9)
    # the moments of the sparse fit come from the basis-sampling pass: same scales as numpy's
    np.testing.assert_allclose(m.normalizer_.offset, (X.mean(0) if kind == "standard" else X.min(0)), rtol=1e-12)


def test_kernel_normalize_refused_where_moments_are_not_gathered():
    X, y, q = _data(6)
    from streamrank.rankrls._statistics import RankStatistics

    m = sr.KernelRankRLS(kernel="rbf", n_basis=5, normalize="standard")
    st = RankStatistics(5, 1)
    st.add_block(np.ones((4, 5)), np.arange(4.0), np.array([0, 4]))
    with pytest.raises(NotImplementedError, match="moments"):
        m.fit_basis_statistics(st, X[:5, :], sr.as_source(X, y, q), 100)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 2, 37])
def test_block_moments_kernel_against_numpy(dtype, rows):
    from streamrank._moments_kernels import block_moments

    rng = np.random.default_rng(rows)
    X = (rng.normal(size=(rows, 5)) * [1, 1e3, 1e-3, 1, 0] + [0, 1e6, 0, -5, 3]).astype(dtype)
    X.setflags(write=False)                                # zarr and dask hand out read-only blocks
    out = [np.empty(5) for _ in range(4)]
    block_moments(X, *out)
    X64 = X.astype(np.float64)
    np.testing.assert_allclose(out[0], X64.mean(0), rtol=1e-13)
    np.testing.assert_allclose(out[1], ((X64 - X64.mean(0)) ** 2).sum(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(out[2], X64.min(0))
    np.testing.assert_array_equal(out[3], X64.max(0))
    assert out[1][4] == 0.0                                 # a constant column has no spread
