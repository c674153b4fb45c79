"""apply_laplacian / laplacian_dense against the explicit pair Laplacian."""
from __future__ import annotations

import numpy as np
import pytest
from rankrls_testdata import make_groups
from rankrls_reference import brute_laplacian, pair_list

from streamrank.laplacian import apply_laplacian, group_weights, laplacian_dense, tie_classes


def test_group_weights():
    n = np.array([0, 1, 2, 4])
    np.testing.assert_allclose(group_weights(n, "pair"), [1, 1, 1, 1])
    np.testing.assert_allclose(group_weights(n, "query"), [0, 0, 1, 1 / 6])
    np.testing.assert_allclose(group_weights(n, "size"), [0, 1, 1 / 2, 1 / 4])
    with pytest.raises(ValueError, match="group_weight"):
        group_weights(n, "pairs")


@pytest.mark.parametrize("group_weight", ["pair", "query", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_dense_equals_pairs(group_weight, ties, rng):
    X, y, qid, gp = make_groups(rng, n_groups=5, levels=3)
    gp = np.insert(gp, 2, gp[2])  # plus an empty group
    m = len(y)
    Lb = brute_laplacian(m, pair_list(gp, y, group_weight=group_weight, ties=ties))
    L = laplacian_dense(gp, y=y, group_weight=group_weight, ties=ties)
    np.testing.assert_allclose(L, Lb, atol=1e-12)
    U = rng.normal(size=(m, 3)).astype(np.float32)
    np.testing.assert_allclose(apply_laplacian(U, gp, y=y, group_weight=group_weight, ties=ties),
                               Lb @ U.astype(float), atol=1e-5)
    np.testing.assert_allclose(apply_laplacian(U[:, 0], gp, y=y, group_weight=group_weight, ties=ties),
                               Lb @ U[:, 0].astype(float), atol=1e-5)


def test_all_tied_group_excluded_is_zero(rng):
    gp = np.array([0, 4, 7])
    y = np.array([1.0, 1, 1, 1, 0, 1, 2])
    L = laplacian_dense(gp, y=y, ties="exclude")
    assert np.all(L[:4, :4] == 0)


def test_multi_output_exclude_per_column(rng):
    X, y, qid, gp = make_groups(rng, n_groups=4, levels=2, n_outputs=2)
    U = rng.normal(size=(len(y), 2))
    out = apply_laplacian(U, gp, y=y, ties="exclude")
    for j in range(2):
        Lb = brute_laplacian(len(y), pair_list(gp, y[:, j], ties="exclude"))
        np.testing.assert_allclose(out[:, j], Lb @ U[:, j], atol=1e-12)


def test_tie_classes():
    gp = np.array([0, 3, 5])
    cid, cg, cs = tie_classes([2.0, 1.0, 2.0, 1.0, 1.0], gp)
    assert cid[0] == cid[2] != cid[1]
    assert cid[3] == cid[4] != cid[1]
    np.testing.assert_array_equal(cg, [0, 0, 1])
    np.testing.assert_array_equal(cs, [1, 2, 2])


def test_bad_inputs(rng):
    with pytest.raises(ValueError, match="needs y"):
        apply_laplacian(np.ones(3), [0, 3], ties="exclude")
    with pytest.raises(ValueError, match="group_ptr"):
        apply_laplacian(np.ones(3), [0, 2])
    with pytest.raises(ValueError, match="ties"):
        apply_laplacian(np.ones(3), [0, 3], ties="drop")
