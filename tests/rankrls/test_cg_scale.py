"""RankRLS(solver="cg") with labels far from 1 (issue 16): the solution scales with y, never a zero model.

Labels around 1e150 or larger (here 1e160) made ||r||² overflow to inf, the relative residual NaN, and cg stopped at iteration 0
with coef = 0 reported as converged; labels around 1e-200 underflowed to the same.
"""
from __future__ import annotations

import numpy as np
import pytest
from rankrls_reference import brute_rankrls

import streamrank as sr


def _data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(48, 4))
    qid = np.repeat(np.arange(6), 8)
    y = X @ np.array([1.0, -2.0, 0.5, 3.0]) + rng.normal(size=48)
    return X, y, qid


@pytest.mark.parametrize("c", [1e160, 1e200, 1e300, 1e-200, 1e-300])
def test_cg_solution_scales_with_huge_or_tiny_labels(c):
    X, y, qid = _data()
    ref = brute_rankrls(X, y, np.arange(0, 49, 8), 2.0)
    m = sr.RankRLS(solver="cg", alpha=2.0, tol=1e-12).fit(X, y * c, qid=qid)
    assert m.n_iter_ > 0
    np.testing.assert_allclose(m.coef_ / c, ref, rtol=1e-8, atol=0)
    # two outputs of very different scales are each solved at their own
    Y = np.stack([y * c, y], axis=1)
    m2 = sr.RankRLS(solver="cg", alpha=2.0, tol=1e-12).fit(X, Y, qid=qid)
    np.testing.assert_allclose(m2.coef_[:, 0] / c, ref, rtol=1e-8, atol=0)
    np.testing.assert_allclose(m2.coef_[:, 1], ref, rtol=1e-8, atol=0)


def test_cg_usual_range_is_unchanged_to_the_bit():
    """The scale is a power of two: in the usual range the iterates are the same numbers as before."""
    from streamrank.rankrls.cg import _rhs_scale

    X, y, qid = _data()
    for c in (1.0, 3.0, 1e5):
        s = _rhs_scale(np.array([[c], [-2 * c]]))
        assert s.shape == (1,) and np.log2(s[0]) == np.round(np.log2(2 * c))
    assert _rhs_scale(np.zeros((3, 2))).tolist() == [1.0, 1.0]
    assert np.isfinite(_rhs_scale(np.array([[1.7e308], [5e-324]]))).all()
    a = sr.RankRLS(solver="cg", alpha=2.0, tol=1e-10).fit(X, y, qid=qid).coef_
    b = sr.RankRLS(solver="cg", alpha=2.0, tol=1e-10).fit(X, y * 1024.0, qid=qid).coef_
    np.testing.assert_array_equal(a * 1024.0, b)


def test_cg_right_hand_side_overflow_is_a_clear_error():
    X, y, qid = _data()
    y = y / np.abs(y).max() * 1e308          # finite labels whose pairwise sums overflow in the pass
    with pytest.raises(ValueError, match="right-hand side XᵀLY of output 0 is not finite"):
        with np.errstate(all="ignore"):
            sr.RankRLS(solver="cg", alpha=2.0).fit(X, y, qid=qid)


def test_cli_fit_cg_on_huge_labels_is_not_a_zero_model(tmp_path, capsys):
    from streamrank.cli import main

    X, y, qid = _data()
    store = sr.GroupStore.create(tmp_path / "s.zarr", n_features=4)
    store.append(X, y * 1e160, qid)
    code = main(["fit", "--store", str(tmp_path / "s.zarr"), "--model", str(tmp_path / "m.zarr"),
                 "--learner", "cg", "--alpha", "2", "--tol", "1e-12", "-q"])
    assert code == 0, capsys.readouterr().err
    coef = sr.load(tmp_path / "m.zarr").coef_
    ref = brute_rankrls(X.astype(np.float32).astype(np.float64), y, np.arange(0, 49, 8), 2.0)
    np.testing.assert_allclose(coef / 1e160, ref, rtol=1e-6)


def test_cg_stopped_at_max_iter_warns_instead_of_passing_for_converged(tmp_path, capsys):
    from streamrank.cli import main
    from streamrank.rankrls.cg import ConvergenceWarning

    X, y, qid = _data()
    with pytest.warns(ConvergenceWarning, match=r"cg did not converge in 1 iterations .* > tol=1e-12"):
        m = sr.RankRLS(solver="cg", alpha=2.0, tol=1e-12, max_iter=1).fit(X, y, qid=qid)
    assert m.cg_info_["converged"] is False
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        sr.RankRLS(solver="cg", alpha=2.0, tol=1e-8).fit(X, y, qid=qid)       # converges: no warning
    store = sr.GroupStore.create(tmp_path / "s.zarr", n_features=4)
    store.append(X, y, qid)
    assert main(["fit", "--store", str(tmp_path / "s.zarr"), "--model", str(tmp_path / "m.zarr"),
                 "--learner", "cg", "--alpha", "2", "--tol", "1e-12", "--max-iter", "1"]) == 0
    assert "streamrank: warning: cg did not converge in 1 iterations" in capsys.readouterr().err
