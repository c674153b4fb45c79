"""PairwiseSGDRanker with pair weights: explicit ``pair_weight=`` against the numpy reference, row weights on a
source (pair weight w_i w_j), and inverse-propensity weights from clicks (pair (clicked i, unclicked j) weighs
1 / p(position_i))."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sgd_reference as ref
import streamrank as sr
from streamrank.clicks import ips_weights
from streamrank.io.pairs import pairs_from_groups
from streamrank.io.weighted import with_weights
from streamrank.sgd import _pairwise_kernels as PK
from streamrank.sgd.pairwise import PairwiseSGDRanker


def _data(seed=0, n=400, f=8, groups=40, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f))
    if sparse:
        X[rng.random(X.shape) < 0.6] = 0.0
        X = sp.csr_matrix(X)
    y = np.round(np.asarray(X @ np.r_[1.0, -2.0, 0.5, np.zeros(f - 3)]).ravel() + 0.1 * rng.normal(size=n))
    return X, y, np.repeat(np.arange(groups), n // groups)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("kw", [
    dict(loss="hinge", l1=0.0, l2=0.0, eta0=0.1, shrink_every=10),
    dict(loss="hinge", l1=0.05, l2=0.01, eta0=0.5, shrink_every=7),
    dict(loss="logistic", l1=0.02, l2=0.0, eta0=1.0, shrink_every=1),
])
def test_weighted_steps_match_reference(kw, sparse):
    X, _, _ = _data(sparse=sparse)
    rng = np.random.default_rng(5)
    pairs = rng.integers(0, X.shape[0], size=(500, 2))
    pw = rng.exponential(size=500)
    pw[::17] = 0.0                                            # zero-weight pairs still advance the clock
    Xd = X.toarray() if sparse else X
    m = PairwiseSGDRanker(**kw, l1_rule="window").partial_fit_pairs(X[pairs[:, 0]], X[pairs[:, 1]], pair_weight=pw)
    kw2 = {k: v for k, v in kw.items() if k != "shrink_every"}
    w, t, _ = ref.pairwise_sgd(Xd, pairs, T=kw["shrink_every"], weights=pw, **kw2)
    np.testing.assert_allclose(m.coef_, w, rtol=1e-10, atol=1e-12)
    assert m.t_ == t == 500
    unweighted, _, _ = ref.pairwise_sgd(Xd, pairs, T=kw["shrink_every"], **kw2)
    assert np.abs(unweighted - w).max() > 1e-3                  # the weights really acted


@pytest.mark.parametrize("l1_rule", ["cumulative", "window"])
def test_unit_weights_are_bit_identical_and_dense_equals_csr(l1_rule):
    X, _, _ = _data(1)
    rng = np.random.default_rng(2)
    pairs = rng.integers(0, X.shape[0], size=(300, 2))
    Xp, Xn = X[pairs[:, 0]], X[pairs[:, 1]]
    kw = dict(eta0=0.3, l1=0.01, l2=0.001, l1_rule=l1_rule)
    plain = PairwiseSGDRanker(**kw).partial_fit_pairs(Xp, Xn)
    ones = PairwiseSGDRanker(**kw).partial_fit_pairs(Xp, Xn, pair_weight=np.ones(300))
    np.testing.assert_array_equal(plain.coef_, ones.coef_)
    pw = rng.uniform(0, 3, size=300)
    dense = PairwiseSGDRanker(**kw).partial_fit_pairs(Xp, Xn, pair_weight=pw)
    csr = PairwiseSGDRanker(**kw).partial_fit_pairs(sp.csr_matrix(Xp), sp.csr_matrix(Xn), pair_weight=pw)
    np.testing.assert_array_equal(dense.coef_, csr.coef_)
    assert PK.pairwise_steps_weighted is not None and dense.t_ == 300


def test_pair_weight_is_checked():
    X, _, _ = _data(2)
    m = PairwiseSGDRanker()
    with pytest.raises(ValueError, match=r"pair_weight\[1\] = -1.0"):
        m.partial_fit_pairs(X[:3], X[3:6], pair_weight=[1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="one weight per row"):
        m.partial_fit_pairs(X[:3], X[3:6], pair_weight=[1.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        m.partial_fit_pairs(X[:3], X[3:6], pair_weight=[1.0, np.nan, 1.0])


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_row_weights_give_pairs_the_product_weight(sparse):
    """fit on a weighted source = the same sampled pairs stepped with w_i w_j (reference), and != unweighted."""
    X, y, qid = _data(3, sparse=sparse)
    w = np.random.default_rng(4).uniform(0.2, 3.0, size=len(y))
    kw = dict(eta0=0.2, l1=0.01, l1_rule="window", shrink_every=5, random_state=7)
    m = PairwiseSGDRanker(**kw).fit(with_weights(sr.as_source(X, y, qid), w), n_pairs=1500, batch_size=256)
    # the pairs the learner draws: its seed sequence (random_state, call 0), the same sampler and options
    rs = np.random.default_rng(np.random.SeedSequence([7, 0]))
    rows = np.vstack([b.rows for b in pairs_from_groups(sr.as_source(X, y, qid), 1500, random_state=rs,
                                                           shuffle=True, max_rows=100_000, batch_size=256)])
    assert len(rows) == 1500
    Xd = X.toarray() if sparse else X
    ref_w, _, _ = ref.pairwise_sgd(Xd, rows, eta0=0.2, l1=0.01, l2=0.0, T=5, weights=w[rows[:, 0]] * w[rows[:, 1]])
    np.testing.assert_allclose(m.coef_, ref_w, rtol=1e-10, atol=1e-12)
    plain = PairwiseSGDRanker(**kw).fit(X, y, qid, n_pairs=1500, batch_size=256)
    assert np.abs(plain.coef_ - m.coef_).max() > 1e-3
    # partial_fit on a weighted source: the same as fit (call 0, whole batch as one block)
    p = PairwiseSGDRanker(**kw).partial_fit(with_weights(sr.as_source(X, y, qid), w), n_pairs=1500)
    rs = np.random.default_rng(np.random.SeedSequence([7, 0]))
    rows = np.vstack([b.rows for b in pairs_from_groups(sr.as_source(X, y, qid), 1500, random_state=rs,
                                                           shuffle=True, max_rows=len(y))])
    ref_p, _, _ = ref.pairwise_sgd(Xd, rows, eta0=0.2, l1=0.01, l2=0.0, T=5, weights=w[rows[:, 0]] * w[rows[:, 1]])
    np.testing.assert_allclose(p.coef_, ref_p, rtol=1e-10, atol=1e-12)


def test_ips_pairs_weigh_one_over_the_clicked_rows_propensity():
    """Clicks as labels, ips_weights as row weights: every sampled pair is (clicked i, unclicked j) and steps with
    1 / p(position_i), computed here from the positions directly."""
    rng = np.random.default_rng(8)
    n_q, k = 60, 10
    X = rng.normal(size=(n_q * k, 5))
    qid = np.repeat(np.arange(n_q), k)
    position = np.tile(np.arange(1, k + 1), n_q)
    p = 1.0 / position                                   # PBM examination, eta = 1
    clicks = (rng.random(n_q * k) < 0.5 * p + 0.2 * (X[:, 0] > 0)).astype(float)
    kw = dict(eta0=0.1, l1=0.0, l1_rule="window", random_state=3)
    m = PairwiseSGDRanker(**kw).fit(with_weights(sr.as_source(X, clicks, qid),
                                                 ips_weights(clicks, position, lambda r: 1.0 / r)), n_pairs=2000)
    rs = np.random.default_rng(np.random.SeedSequence([3, 0]))
    rows = np.vstack([b.rows for b in pairs_from_groups(sr.as_source(X, clicks, qid), 2000, random_state=rs,
                                                           shuffle=True, max_rows=100_000, batch_size=8192)])
    assert (clicks[rows[:, 0]] == 1).all() and (clicks[rows[:, 1]] == 0).all()
    ref_w, _, _ = ref.pairwise_sgd(X, rows, eta0=0.1, l1=0.0, l2=0.0, T=100, weights=1.0 / p[rows[:, 0]])
    np.testing.assert_allclose(m.coef_, ref_w, rtol=1e-10, atol=1e-12)
