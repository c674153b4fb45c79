"""Kernel blocks (streamrank.kernels) against an entry-by-entry reference."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from kernel_reference import kernel_ref

from streamrank.kernels import check_kernel, kernel_diag, kernel_matrix, kernel_rows

KERNELS = [("linear", {}), ("rbf", {"gamma": 0.3}), ("poly", {"gamma": 0.5, "degree": 3, "coef0": 1.0}),
           ("poly", {"gamma": 2.0, "degree": 2, "coef0": 0.0})]


def _data(rng, dtype=np.float64, sparse=False):
    X = rng.normal(size=(7, 5)).astype(dtype)
    Z = rng.normal(size=(4, 5)).astype(dtype)
    X[2] = 0.0                      # an empty row
    if sparse:
        X[X < 0.3] = 0.0
        Z[Z < 0.3] = 0.0
        return sp.csr_matrix(X), sp.csr_matrix(Z)
    return X, Z


@pytest.mark.parametrize("kernel,params", KERNELS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["dense", "csr", "mixed"])
def test_kernel_matrix_matches_reference(rng, kernel, params, dtype, layout):
    X, Z = _data(rng, dtype, sparse=layout != "dense")
    if layout == "mixed":
        Z = Z.toarray()
    K = kernel_matrix(X, Z, kernel=kernel, **params)
    ref = kernel_ref(X, Z, kernel, **params)
    assert K.dtype == np.float64 and K.shape == (7, 4)
    tol = 1e-12 if dtype == np.float64 else 1e-12  # products in float64 of float32 values are exact enough
    np.testing.assert_allclose(K, ref, rtol=1e-10, atol=tol * np.abs(ref).max())
    Ks = kernel_matrix(X, None, kernel=kernel, **params)
    np.testing.assert_array_equal(Ks, Ks.T)
    np.testing.assert_allclose(Ks, kernel_ref(X, X, kernel, **params), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kernel_diag(X, kernel=kernel, **params), np.diag(Ks), rtol=1e-12, atol=1e-14)


def test_rbf_exact_diagonal_and_read_only(rng):
    X = rng.normal(size=(6, 3)) * 100.0    # large norms: cancellation in ‖x‖² + ‖x‖² − 2x·x
    X.setflags(write=False)
    K = kernel_matrix(X, kernel="rbf", gamma=1e-3)
    np.testing.assert_array_equal(np.diag(K), 1.0)
    assert np.all(K <= 1.0) and np.all(K >= 0.0)


def test_callable_kernel_and_rows(rng):
    X, Z = _data(rng)

    def lin(A, B):
        return A @ B.T

    spec = check_kernel(lin)
    np.testing.assert_allclose(spec(X, Z), X @ Z.T)
    coef = rng.normal(size=4)
    np.testing.assert_allclose(kernel_rows(spec, X, Z, coef, max_entries=5), (X @ Z.T) @ coef)
    with pytest.raises(ValueError, match="callable kernel returned shape"):
        kernel_matrix(X, Z, kernel=lambda a, b: np.zeros((2, 2)))
    with pytest.raises(ValueError, match="NaN"):
        kernel_matrix(X, Z, kernel=lambda a, b: np.full((a.shape[0], b.shape[0]), np.nan))


def test_empty_inputs():
    X = np.zeros((0, 3))
    Z = np.ones((2, 3))
    assert kernel_matrix(X, Z, kernel="rbf").shape == (0, 2)
    assert kernel_matrix(sp.csr_matrix(X), Z, kernel="poly").shape == (0, 2)


@pytest.mark.parametrize("kw,match", [
    ({"kernel": "sigmoid"}, "kernel must be one of"),
    ({"kernel": "rbf", "gamma": 0.0}, "gamma must be a finite number > 0"),
    ({"kernel": "rbf", "gamma": -1.0}, "gamma must be a finite number > 0"),
    ({"kernel": "poly", "gamma": np.inf}, "gamma"),
    ({"kernel": "poly", "degree": 0}, "degree must be an integer >= 1"),
    ({"kernel": "poly", "degree": 1.5}, "degree must be an integer >= 1"),
    ({"kernel": "poly", "coef0": np.nan}, "coef0"),
])
def test_bad_kernel_parameters(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        check_kernel(**kw)


def test_feature_mismatch(rng):
    with pytest.raises(ValueError, match="features"):
        kernel_matrix(rng.normal(size=(3, 2)), rng.normal(size=(3, 4)), kernel="linear")


@pytest.mark.parametrize("kernel,params", KERNELS + [(lambda A, B: np.asarray(
    (A @ B.T).toarray() if sp.issparse(A) and sp.issparse(B) else A @ B.T) ** 2, {})])
@pytest.mark.parametrize("layout", ["dense", "csr"])
def test_kernel_matrix_into_out_view(rng, kernel, params, layout):
    """out= (the first columns of a wider buffer, as RankStatistics.workspace gives) = a fresh block."""
    X, Z = _data(rng, np.float32, sparse=layout == "csr")
    W = np.full((7, 6), np.nan)
    got = kernel_matrix(X, Z, kernel=kernel, out=W[:, :4], **params)
    assert got.base is W or got is W[:, :4] or np.shares_memory(got, W)
    np.testing.assert_array_equal(W[:, :4], kernel_matrix(X, Z, kernel=kernel, **params))
    assert np.isnan(W[:, 4:]).all()
    W2 = np.full((7, 9), np.nan)
    kernel_matrix(X, None, kernel=kernel, out=W2[:, :7], **params)
    np.testing.assert_array_equal(W2[:, :7], kernel_matrix(X, None, kernel=kernel, **params))
    with pytest.raises(ValueError, match="out must be"):
        kernel_matrix(X, Z, kernel=kernel, out=np.zeros((7, 5)), **params)
    with pytest.raises(ValueError, match="out must be"):
        kernel_matrix(X, Z, kernel=kernel, out=np.zeros((7, 8))[:, ::2], **params)
    # Fortran-contiguous out (what RankStatistics.workspace gives): filled through its transpose
    F = np.full((7, 5), np.nan, order="F")
    kernel_matrix(X, Z, kernel=kernel, out=F[:, :4], **params)
    np.testing.assert_allclose(F[:, :4], kernel_matrix(X, Z, kernel=kernel, **params), rtol=1e-13, atol=1e-15)
    assert np.isnan(F[:, 4]).all()
    F2 = np.full((7, 7), np.nan, order="F")
    kernel_matrix(X, None, kernel=kernel, out=F2, **params)
    np.testing.assert_array_equal(F2, F2.T)
    np.testing.assert_allclose(F2, kernel_matrix(X, None, kernel=kernel, **params), rtol=1e-13, atol=1e-15)


# ------------------------------------------------------------- KernelColumns
@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly", "callable"])
@pytest.mark.parametrize("kind", ["float32", "float64", "csr", "readonly"])
def test_kernel_columns_equal_kernel_matrix(kernel, kind, rng):
    """cols(X, out) and cols.into_rows(X, A, r0) write exactly k(X, Z), into rows of a wider buffer."""
    import scipy.sparse as sp

    from streamrank.kernels import KernelColumns, check_kernel, kernel_matrix

    X = rng.normal(size=(7, 4))
    Z = rng.normal(size=(5, 4))
    if kind == "float32":
        X = X.astype(np.float32)
    elif kind == "csr":
        X[X < 0.3] = 0.0
        X = sp.csr_matrix(X)
    elif kind == "readonly":
        X.setflags(write=False)
    k = (lambda A, B: kernel_matrix(A, B, kernel="rbf", gamma=0.3) + 1.0) if kernel == "callable" else kernel
    spec = check_kernel(k, gamma=0.3, degree=3, coef0=1.0)
    ref = spec(X, Z)
    cols = KernelColumns(spec, Z)
    A = np.full((10, 6), np.nan)
    cols.into_rows(X, A, 2)
    np.testing.assert_allclose(A[2:9, :5], ref, rtol=1e-14, atol=1e-14)
    assert np.isnan(A[:2]).all() and np.isnan(A[9:]).all() and np.isnan(A[:, 5]).all()
    B = np.full((7, 6), np.nan)
    assert cols(X, B[:, :5]) is not None
    np.testing.assert_allclose(B[:, :5], ref, rtol=1e-14, atol=1e-14)
    F = np.full((7, 5), np.nan, order="F")                  # any layout works for __call__
    np.testing.assert_allclose(cols(X, F), ref, rtol=1e-14, atol=1e-14)
    cols.into_rows(X[:0], A, 0)                              # an empty block writes nothing


def test_kernel_columns_errors(rng):
    from streamrank.kernels import KernelColumns, check_kernel

    cols = KernelColumns(check_kernel("rbf"), rng.normal(size=(5, 4)))
    with pytest.raises(ValueError, match="shape"):
        cols(rng.normal(size=(3, 4)), np.empty((3, 4)))
    with pytest.raises(ValueError, match="features"):
        cols(rng.normal(size=(3, 2)), np.empty((3, 5)))
    with pytest.raises(ValueError, match="C-contiguous"):
        cols.into_rows(rng.normal(size=(3, 4)), np.empty((3, 5), order="F"), 0)
    with pytest.raises(ValueError, match="rows"):
        cols.into_rows(rng.normal(size=(3, 4)), np.empty((3, 5)), 1)
