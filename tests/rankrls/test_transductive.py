"""Transductive RankRLS (Theorem 2) == direct minimisation of objective (11) by a dense solve."""
from __future__ import annotations

import numpy as np
import pytest
from kernel_reference import kernel_ref, transductive_ref

import streamrank as sr


def _groups(rng, n, base, n_features=3):
    sizes = rng.integers(1, 6, size=n)
    return rng.normal(size=(int(sizes.sum()), n_features)), np.repeat(np.arange(n) + base, sizes)


@pytest.mark.parametrize("group_weight", ["query", "pair", "size"])
@pytest.mark.parametrize("kernel,params", [("rbf", dict(gamma=0.5)), ("linear", {})])
def test_transductive_equals_direct_minimisation(rng, group_weight, kernel, params):
    Xl, ql = _groups(rng, 4, 0)
    Xu, qu = _groups(rng, 3, 100)
    yl = rng.normal(size=len(ql))
    t = sr.TransductiveRankRLS(kernel=kernel, alpha=0.3, gamma_t=0.7, group_weight=group_weight, **params)
    yh = t.fit_predict(Xl, yl, ql, Xu, qu)
    ref = transductive_ref(Xl, yl, ql, Xu, qu, 0.3, 0.7, lambda a, b: kernel_ref(a, b, kernel, **params),
                           group_weight)
    assert yh.shape == (len(qu),)
    assert np.abs(yh - ref).max() / np.abs(ref).max() < 1e-8


def test_transductive_large_gamma_is_inductive(rng):
    Xl, ql = _groups(rng, 4, 0)
    Xu, qu = _groups(rng, 2, 50)
    yl = rng.normal(size=len(ql))
    yh = sr.TransductiveRankRLS(alpha=0.5, gamma_t=1e9).fit_predict(Xl, yl, ql, Xu, qu)
    ind = sr.KernelRankRLS(alpha=0.5, group_weight="query").fit(Xl, yl, ql).predict(Xu)
    np.testing.assert_allclose(yh, ind, rtol=1e-6, atol=1e-7)


def test_transductive_multi_output_model_and_persistence(rng, tmp_path):
    Xl, ql = _groups(rng, 4, 0)
    Xu, qu = _groups(rng, 3, 10)
    yl = rng.normal(size=(len(ql), 2))
    t = sr.TransductiveRankRLS(alpha=0.4, gamma_t=2.0)
    yh = t.fit_predict(Xl, yl, ql, Xu, qu)
    assert yh.shape == (len(qu), 2)
    for o in range(2):
        one = sr.TransductiveRankRLS(alpha=0.4, gamma_t=2.0).fit_predict(Xl, yl[:, o], ql, Xu, qu)
        np.testing.assert_allclose(yh[:, o], one, rtol=1e-10, atol=1e-12)
    # the final model: RankRLS on all rows with Ŷ filled in
    X = np.vstack([Xl, Xu])
    full = sr.KernelRankRLS(alpha=0.4, group_weight="query").fit(X, np.vstack([yl, yh]), np.r_[ql, qu])
    Xt = rng.normal(size=(4, 3))
    np.testing.assert_allclose(t.predict(Xt), full.predict(Xt), rtol=1e-8, atol=1e-10)
    sr.save(t, tmp_path / "t")
    t2 = sr.load(tmp_path / "t")
    np.testing.assert_array_equal(t2.predict(Xt), t.predict(Xt))
    np.testing.assert_array_equal(t2.transductive_scores_, yh)


def test_transductive_bad_input(rng):
    Xl, ql = _groups(rng, 3, 0)
    Xu, qu = _groups(rng, 2, 0)
    yl = rng.normal(size=len(ql))
    with pytest.raises(ValueError, match="reuses query id"):
        sr.TransductiveRankRLS().fit_predict(Xl, yl, ql, Xu, qu)
    with pytest.raises(ValueError, match="gamma_t"):
        sr.TransductiveRankRLS(gamma_t=0).fit_predict(Xl, yl, ql, Xu, qu + 10)
    with pytest.raises(ValueError, match="X_unlab has 2 features"):
        sr.TransductiveRankRLS().fit_predict(Xl, yl, ql, Xu[:, :2], qu + 10)
