"""numba loops of streamrank._kernel_kernels against plain numpy, serial == parallel."""
from __future__ import annotations

import numpy as np
import pytest

from streamrank import _kernel_kernels as kk


def _rbf_np(D, nx, nz, gamma, same):
    d = nx[:, None] + nz[None, :] - 2.0 * D
    d = np.maximum(d, 0.0)
    if same:
        np.fill_diagonal(d, 0.0)
    return -gamma * d


@pytest.mark.parametrize("shape", [(0, 0), (0, 3), (3, 0), (1, 1), (5, 7), (300, 300)])
@pytest.mark.parametrize("fn", [kk.rbf_exponent_from_dot, kk.rbf_exponent_from_dot_parallel])
def test_rbf_exponent_from_dot(rng, shape, fn):
    X = rng.normal(size=(shape[0], 4))
    Z = X if shape[0] == shape[1] else rng.normal(size=(shape[1], 4))
    same = Z is X
    nx = np.einsum("ij,ij->i", X, X)
    nz = np.einsum("ij,ij->i", Z, Z)
    nx.setflags(write=False)          # read-only inputs (zarr/dask hand those out)
    nz.setflags(write=False)
    D = X @ Z.T
    ref = _rbf_np(D, nx, nz, 0.7, same)
    K = np.ascontiguousarray(D)
    fn(K, nx, nz, 0.7, same)
    np.testing.assert_allclose(K, ref, rtol=1e-13, atol=1e-15)
    if same and shape[0]:
        np.testing.assert_array_equal(np.diag(K), 0.0)


def test_rbf_clips_negative_distances():
    K = np.array([[10.0, 0.0]])
    kk.rbf_exponent_from_dot(K, np.array([1.0]), np.array([1.0, 0.0]), 1.0, False)   # 1 + 1 - 20 < 0 -> 0
    assert K[0, 0] == 0.0 and K[0, 1] == -1.0


@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize("fn", [kk.poly_from_dot, kk.poly_from_dot_parallel])
def test_poly_from_dot(rng, degree, fn):
    D = rng.normal(size=(40, 30))
    K = D.copy()
    fn(K, 0.5, -0.3, degree)
    np.testing.assert_allclose(K, (0.5 * D - 0.3) ** degree, rtol=1e-13, atol=1e-15)
    E = np.zeros((0, 4))
    fn(E, 1.0, 0.0, degree)


def test_serial_equals_parallel_bitwise(rng):
    D = rng.normal(size=(257, 129))
    nx, nz = rng.random(257) * 3, rng.random(129) * 3
    a, b = D.copy(), D.copy()
    kk.rbf_exponent_from_dot(a, nx, nz, 0.2, False)
    kk.rbf_exponent_from_dot_parallel(b, nx, nz, 0.2, False)
    np.testing.assert_array_equal(a, b)
    a, b = D.copy(), D.copy()
    kk.poly_from_dot(a, 1.5, 1.0, 3)
    kk.poly_from_dot_parallel(b, 1.5, 1.0, 3)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rows", [(0, 0), (0, 1), (2, 5), (0, 6)])
@pytest.mark.parametrize("m", [0, 1, 4])
def test_row_block_twins_touch_only_their_block(rng, rows, m):
    """rbf_exponent_rows / poly_rows map A[r0:r1, :m] of a wider C-contiguous A like the whole-matrix loops."""
    r0, r1 = rows
    A = rng.normal(size=(6, 5))
    nx, nz = rng.random(r1 - r0) * 3, rng.random(m) * 3
    nx.setflags(write=False)
    a = A.copy()
    kk.rbf_exponent_rows(a, r0, r1, m, nx, nz, 0.4)
    expect = A.copy()
    expect[r0:r1, :m] = _rbf_np(A[r0:r1, :m], nx, nz, 0.4, False)
    np.testing.assert_allclose(a, expect, rtol=1e-13, atol=1e-15)
    p = A.copy()
    kk.poly_rows(p, r0, r1, m, 0.5, 1.0, 3)
    expect = A.copy()
    expect[r0:r1, :m] = (0.5 * A[r0:r1, :m] + 1.0) ** 3
    np.testing.assert_allclose(p, expect, rtol=1e-13, atol=1e-15)
    same = A[r0:r1, :m].copy()                          # bit for bit the whole-matrix loop on the block
    kk.rbf_exponent_from_dot(same, nx, nz, 0.4, False)
    np.testing.assert_array_equal(a[r0:r1, :m], same)
