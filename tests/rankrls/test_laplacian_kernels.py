"""Numba Laplacian kernels against plain numpy twins, edge cases included."""
from __future__ import annotations

import numpy as np
import pytest

from streamrank import _laplacian_kernels as K


def np_group_sums(U, gp):
    return np.array([U[gp[g]:gp[g + 1]].sum(axis=0) for g in range(len(gp) - 1)]).reshape(len(gp) - 1, U.shape[1])


def np_laplacian(U, gp, scale):
    out = np.empty(U.shape)
    for g in range(len(gp) - 1):
        a, b = gp[g], gp[g + 1]
        out[a:b] = scale[g] * ((b - a) * U[a:b] - U[a:b].sum(axis=0))
    return out


PTRS = [
    np.array([0, 3, 3, 4, 9], dtype=np.int64),   # an empty group, a one-row group
    np.array([0, 0], dtype=np.int64),            # nothing at all
    np.array([0, 9], dtype=np.int64),            # one global group
]


def _ro(a):
    a = a.copy()
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("gp", PTRS)
def test_group_sums_and_laplacian(dtype, gp, rng):
    m = int(gp[-1])
    U = _ro(rng.normal(size=(m, 3)).astype(dtype))
    np.testing.assert_allclose(K.group_sums(U, gp), np_group_sums(U.astype(float), gp), rtol=1e-6)
    scale = _ro(rng.uniform(0.5, 2, size=len(gp) - 1))
    np.testing.assert_allclose(K.laplacian_groups(U, gp, scale),
                               np_laplacian(U.astype(float), gp, scale), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_group_sums_csr(dtype, rng):
    import scipy.sparse as sp

    gp = PTRS[0]
    A = sp.random(9, 5, density=0.4, random_state=1, format="csr", dtype=dtype)
    A = A.tolil()
    A[2] = 0  # an empty row
    A = sp.csr_matrix(A)
    got = K.group_sums_csr(_ro(A.indptr), _ro(A.indices), _ro(A.data), gp, 5)
    np.testing.assert_allclose(got, np_group_sums(A.toarray().astype(float), gp), rtol=1e-6)


def test_id_sums_and_classes(rng):
    U = _ro(rng.normal(size=(7, 2)))
    ids = np.array([0, 2, 2, 1, 0, 2, 3], dtype=np.int64)
    want = np.zeros((4, 2))
    np.add.at(want, ids, U)
    np.testing.assert_allclose(K.id_sums(U, ids, 4), want)
    scale = np.array([1.0, 2.0, 0.5, 3.0])
    out = np.zeros((7, 2))
    K.laplacian_classes(U, ids, 4, scale, out)
    ref = np.zeros((7, 2))
    for c in range(4):
        r = ids == c
        ref[r] -= scale[c] * (r.sum() * U[r] - U[r].sum(axis=0))
    np.testing.assert_allclose(out, ref)
    assert np.all(out[6] == 0)  # one-row class: no correction
