"""Dual kernel RankRLS against the brute-force dense solve (all pairs explicit)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from rankrls_testdata import make_groups
from kernel_reference import dual_objective_ref, dual_ref, kernel_ref, laplacian_pairs

import streamrank as sr

KERNELS = [("rbf", dict(gamma=0.4)), ("linear", {}), ("poly", dict(gamma=0.5, degree=2, coef0=1.0))]


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300)


@pytest.mark.parametrize("kernel,params", KERNELS)
@pytest.mark.parametrize("group_weight", ["pair", "query", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_dual_equals_brute_force(rng, kernel, params, group_weight, ties):
    X, y, qid, _ = make_groups(rng, n_groups=5, n_features=3, levels=3)
    lam = 0.37
    m = sr.KernelRankRLS(kernel=kernel, alpha=lam, group_weight=group_weight, ties=ties, **params).fit(X, y, qid)
    K = kernel_ref(X, X, kernel, **params)
    L = laplacian_pairs(qid, y, group_weight, ties)
    # the normal equations K L K A + λ K A = K L y hold for any PSD K (linear: K singular here)
    A = dual_objective_ref(K, L, y, lam)
    Xt = rng.normal(size=(6, 3))
    assert _rel(m.predict(Xt), kernel_ref(Xt, X, kernel, **params) @ A) < 1e-8
    assert _rel(m.predict(X), K @ A) < 1e-8
    if kernel != "linear":   # K positive definite: A itself is unique
        assert _rel(m.dual_coef_, dual_ref(K, L, y, lam)) < 1e-8
    assert m.basis_.shape == X.shape and m.dual_coef_.shape == (X.shape[0],)


@pytest.mark.parametrize("group_weight", ["pair", "size"])
def test_multi_output_and_path(rng, group_weight):
    X, y, qid, _ = make_groups(rng, n_groups=4, n_features=3, n_outputs=3)
    m = sr.KernelRankRLS(kernel="rbf", gamma=0.7, alpha=1.0, group_weight=group_weight).fit(X, y, qid)
    K = kernel_ref(X, X, "rbf", gamma=0.7)
    L = laplacian_pairs(qid, None, group_weight)
    assert m.dual_coef_.shape == y.shape
    assert _rel(m.dual_coef_, dual_ref(K, L, y, 1.0)) < 1e-8
    alphas = [2.0 ** -10, 0.01, 1.0, 50.0, 2.0 ** 15]
    P = m.path(alphas)
    assert P.shape == (len(alphas),) + y.shape
    for a, A in zip(alphas, P):
        assert _rel(A, dual_ref(K, L, y, a)) < 1e-8
    # single column of a multi-output fit == single-output fit
    one = sr.KernelRankRLS(kernel="rbf", gamma=0.7, alpha=1.0, group_weight=group_weight).fit(X, y[:, 1], qid)
    assert _rel(one.dual_coef_, m.dual_coef_[:, 1]) < 1e-10
    assert one.path([0.5, 2.0]).shape == (2, X.shape[0])


def test_callable_kernel_equals_named(rng):
    X, y, qid, _ = make_groups(rng, n_groups=4, n_features=3)

    def rbf(A, B):
        return kernel_ref(A, B, "rbf", gamma=0.4)

    a = sr.KernelRankRLS(kernel=rbf, alpha=0.5).fit(X, y, qid)
    b = sr.KernelRankRLS(kernel="rbf", gamma=0.4, alpha=0.5).fit(X, y, qid)
    assert _rel(a.dual_coef_, b.dual_coef_) < 1e-8
    assert _rel(a.leave_query_out(), b.leave_query_out()) < 1e-8


def test_object_ranking_qid_none(rng):
    X = rng.normal(size=(15, 4))
    y = rng.normal(size=15)
    m = sr.KernelRankRLS(kernel="rbf", gamma=0.2, alpha=0.1).fit(X, y)
    K = kernel_ref(X, X, "rbf", gamma=0.2)
    assert _rel(m.dual_coef_, dual_ref(K, laplacian_pairs(np.zeros(15), None), y, 0.1)) < 1e-8


def test_linear_kernel_equals_primal_rankrls(rng):
    X, y, qid, _ = make_groups(rng, n_groups=6, n_features=4, levels=4, min_size=2)
    for gw in ("pair", "query"):
        for ties in ("include", "exclude"):
            k = sr.KernelRankRLS(kernel="linear", alpha=0.8, group_weight=gw, ties=ties).fit(X, y, qid)
            p = sr.RankRLS(alpha=0.8, group_weight=gw, ties=ties).fit(X, y, qid)
            Xt = rng.normal(size=(9, 4))
            assert _rel(k.predict(Xt), p.predict(Xt)) < 1e-8


def test_csr_and_source_inputs(rng):
    X, y, qid, _ = make_groups(rng, n_groups=4, n_features=6)
    X[X < 0.2] = 0.0
    dense = sr.KernelRankRLS(kernel="rbf", gamma=0.3, alpha=0.5).fit(X, y, qid)
    csr = sr.KernelRankRLS(kernel="rbf", gamma=0.3, alpha=0.5).fit(sp.csr_matrix(X), y, qid)
    src = sr.KernelRankRLS(kernel="rbf", gamma=0.3, alpha=0.5).fit(sr.as_source(X, y, qid))
    Xt = rng.normal(size=(5, 6))
    assert _rel(csr.predict(sp.csr_matrix(Xt)), dense.predict(Xt)) < 1e-10
    assert _rel(src.predict(Xt), dense.predict(Xt)) < 1e-12
    assert sp.issparse(csr.basis_)


def test_save_load_predicts_identically(rng, tmp_path):
    X, y, qid, _ = make_groups(rng, n_groups=4, n_features=3)
    for kw in (dict(kernel="rbf", gamma=0.5), dict(kernel="poly", degree=3, coef0=0.5),
               dict(kernel="rbf", n_basis=6, random_state=0), dict(kernel="linear", basis=X[:4])):
        m = sr.KernelRankRLS(alpha=0.3, **kw).fit(X, y, qid)
        sr.save(m, tmp_path / "m")
        m2 = sr.load(tmp_path / "m")
        Xt = rng.normal(size=(5, 3))
        np.testing.assert_array_equal(m2.predict(Xt), m.predict(Xt))
        if isinstance(m.basis, str):
            assert m2.get_params() == m.get_params()
        # the decomposition is recomputed from the saved data (tests/rankrls/test_kernel_persistence.py)
        np.testing.assert_allclose(m2.path([1.0, 4.0]), m.path([1.0, 4.0]), rtol=1e-10, atol=1e-12)
    m = sr.KernelRankRLS(kernel=lambda a, b: a @ b.T).fit(X, y, qid)
    with pytest.raises(ValueError, match="callable kernel cannot be saved"):
        sr.save(m, tmp_path / "c")


# ------------------------------------------------------------------ bad input
def test_non_psd_kernel_is_an_error(rng):
    X, y, qid, _ = make_groups(rng, n_groups=3, n_features=3, min_size=3)

    def neg(A, B):
        return -(A @ B.T) - 1.0

    with pytest.raises(ValueError, match="not positive semidefinite"):
        sr.KernelRankRLS(kernel=neg).fit(X, y, qid)
    with pytest.raises(ValueError, match="not positive semidefinite"):
        sr.KernelRankRLS(kernel="poly", degree=1, coef0=-50.0).fit(X, y, qid)
    # a semidefinite (singular) callable kernel is fine: no shift needed
    sr.KernelRankRLS(kernel=lambda a, b: a @ b.T).fit(X, y, qid)


@pytest.mark.parametrize("kw,match", [
    (dict(gamma=0.0), "gamma must be a finite number > 0"),
    (dict(gamma=-2.0), "gamma must be a finite number > 0"),
    (dict(alpha=0.0), "alpha"),
    (dict(n_basis=0), "n_basis must be None or an integer >= 1"),
    (dict(basis="kmeans"), "basis must be 'random'"),
    (dict(group_weight="rows"), "group_weight"),
    (dict(ties="drop"), "ties"),
    (dict(kernel="cosine"), "kernel must be one of"),
])
def test_bad_parameters(rng, kw, match):
    X, y, qid, _ = make_groups(rng, n_groups=3)
    with pytest.raises((ValueError, TypeError), match=match):
        sr.KernelRankRLS(**kw).fit(X, y, qid)


def test_bad_data(rng):
    X, y, qid, _ = make_groups(rng, n_groups=3, n_features=4)
    with pytest.raises(ValueError, match="n_basis=1000 exceeds the number of training rows"):
        sr.KernelRankRLS(n_basis=1000).fit(X, y, qid)
    Xn = X.copy()
    Xn[2, 1] = np.nan
    with pytest.raises(ValueError, match="row 2"):
        sr.KernelRankRLS().fit(Xn, y, qid)
    with pytest.raises(ValueError, match="y has"):
        sr.KernelRankRLS().fit(X, y[:-1], qid)
    m = sr.KernelRankRLS().fit(X, y, qid)
    with pytest.raises(ValueError, match="features"):
        m.predict(X[:, :2])
    with pytest.raises(sr.NotFittedError):
        sr.KernelRankRLS().predict(X)
    # ties="exclude" with several outputs: every output is solved apart (test_kernel_holdout.py,
    # test_sparse_rankrls.py)
    assert sr.KernelRankRLS(ties="exclude").fit(X, np.c_[y, y], qid).dual_coef_.shape == (len(y), 2)
    assert sr.KernelRankRLS(ties="exclude", n_basis=5, random_state=0).fit(
        X, np.c_[y, y], qid).dual_coef_.shape == (5, 2)


@pytest.mark.parametrize("group_weight", ["pair", "query", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_laplacian_root_pieces(rng, group_weight, ties):
    from streamrank.rankrls._dual import LaplacianRoot

    X, y, qid, gp = make_groups(rng, n_groups=6, levels=2, max_size=5)   # singletons and all-tied groups
    m = len(y)
    root = LaplacianRoot(gp, y, group_weight=group_weight, ties=ties)
    B = root.apply(np.eye(m))
    L = laplacian_pairs(qid, y, group_weight, ties)
    np.testing.assert_allclose(B, B.T, atol=1e-13)
    np.testing.assert_allclose(B @ B, L, atol=1e-12)
    Bp = root.pinv_apply(np.eye(m))
    E = root.null_cols(np.eye(m))
    np.testing.assert_allclose(E.T @ E, np.eye(E.shape[1]), atol=1e-12)
    np.testing.assert_allclose(Bp @ B + E @ E.T, np.eye(m), atol=1e-12)   # range ⊕ null space
    T = rng.normal(size=(E.shape[1], 3))
    np.testing.assert_allclose(root.null_expand_add(np.zeros((m, 3)), T), E @ T, atol=1e-13)
