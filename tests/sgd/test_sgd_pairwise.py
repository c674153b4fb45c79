"""PairwiseSGDRanker against the literal numpy pairwise SGD; sampling, streaming, persistence.

The reference ``sgd_reference.pairwise_sgd`` is the paper's window rule (``l1_rule="window"``);
the default cumulative rule is tested in ``test_sgd_pairwise_l1.py``.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sgd_reference as ref
import streamrank as sr
from streamrank.base import NotFittedError
from streamrank.sgd.pairwise import PairwiseSGDRanker


def _data(seed=0, n=400, f=8, groups=40, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f))
    if sparse:
        X[rng.random(X.shape) < 0.6] = 0.0
        X = sp.csr_matrix(X)
    w = np.zeros(f)
    w[:3] = [1.0, -2.0, 0.5]
    y = np.round(X @ w + 0.1 * rng.normal(size=n))
    qid = np.repeat(np.arange(groups), n // groups)
    return X, y, qid


def _pairs(n, m, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(m, 2))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("kw", [
    dict(loss="hinge", l1=0.0, l2=0.0, eta0=0.1, shrink_every=10),
    dict(loss="hinge", l1=0.05, l2=0.01, eta0=0.5, shrink_every=7),
    dict(loss="logistic", l1=0.02, l2=0.0, eta0=1.0, shrink_every=1),
    dict(loss="logistic", l1=0.0, l2=0.1, eta0=0.2, shrink_every=5, learning_rate="constant"),
])
def test_steps_match_reference(kw, sparse):
    X, _, _ = _data(sparse=sparse)
    pairs = _pairs(X.shape[0], 500)
    Xd = X.toarray() if sparse else X
    m = PairwiseSGDRanker(**kw, l1_rule="window").partial_fit_pairs(X[pairs[:, 0]], X[pairs[:, 1]])
    kw2 = {k: v for k, v in kw.items() if k != "shrink_every"}
    w, t, _ = ref.pairwise_sgd(Xd, pairs, T=kw["shrink_every"], **kw2)
    np.testing.assert_allclose(m.coef_, w, rtol=1e-10, atol=1e-12)
    assert m.t_ == t == 500
    if kw["l1"]:  # the shrinkage really acted
        w0, _, _ = ref.pairwise_sgd(Xd, pairs, T=kw["shrink_every"], **{**kw2, "l1": 0.0})
        assert np.abs(w0 - w).max() > 1e-3


@settings(max_examples=20, deadline=None)
@given(cuts=st.lists(st.integers(1, 299), max_size=5))
def test_chunked_pairs_equal_single_call(cuts):
    X, _, _ = _data(seed=2)
    pairs = _pairs(X.shape[0], 300, seed=3)
    kw = dict(eta0=0.5, l1=0.03, l2=0.01, shrink_every=7)
    one = PairwiseSGDRanker(**kw).partial_fit_pairs(X[pairs[:, 0]], X[pairs[:, 1]])
    many = PairwiseSGDRanker(**kw)
    edges = [0, *sorted(set(cuts)), 300]
    for a, b in zip(edges[:-1], edges[1:]):
        if b > a:
            many.partial_fit_pairs(X[pairs[a:b, 0]], X[pairs[a:b, 1]])
    np.testing.assert_allclose(many.coef_, one.coef_, rtol=1e-12, atol=1e-14)


def test_partial_fit_samples_pairs_within_groups():
    X, y, qid = _data(seed=4)
    m = PairwiseSGDRanker(eta0=0.3, l1=0.01, shrink_every=5, l1_rule="window",
                          random_state=7).partial_fit(X, y, qid, n_pairs=600)
    # the same pairs from pairs_from_groups with the documented seed
    rng = np.random.default_rng(np.random.SeedSequence([7, 0]))
    batches = list(sr.pairs_from_groups(sr.as_source(X, y, qid), 600, random_state=rng, shuffle=True,
                                        max_rows=X.shape[0]))
    rows = np.concatenate([b.rows for b in batches])
    assert len(rows) == 600
    assert np.all(qid[rows[:, 0]] == qid[rows[:, 1]]) and np.all(y[rows[:, 0]] > y[rows[:, 1]])
    w, _, _ = ref.pairwise_sgd(X, rows, eta0=0.3, l1=0.01, l2=0.0, T=5)
    np.testing.assert_allclose(m.coef_, w, rtol=1e-10, atol=1e-12)
    # a second call continues (t and the sampler), it does not restart
    m.partial_fit(X, y, qid, n_pairs=100)
    assert m.t_ == 700


def test_fit_learns_and_l1_is_sparse():
    X, y, qid = _data(seed=5, n=2000, f=20, groups=200)
    m = PairwiseSGDRanker(eta0=0.2, l1=0.3, shrink_every=10).fit(sr.as_source(X, y, qid), n_pairs=20000)
    w = m.coef_
    assert w[0] > 0 and w[1] < 0  # signs of the strong informative features
    assert np.count_nonzero(w[3:]) <= 10  # many uninformative features are exactly zero
    dense = PairwiseSGDRanker(eta0=0.2, l1=0.0, shrink_every=10).fit(X, y, qid, n_pairs=20000)
    assert np.count_nonzero(dense.coef_[3:]) == 17
    Xt, yt, qt = _data(seed=6, n=500, f=20, groups=50)
    assert sr.metrics.mean_average_precision(yt > np.median(yt), m.predict(Xt), qt) > 0.9
    # fit(X, y, qid) is the same as fit(as_source(X, y, qid)); fit resets
    m2 = PairwiseSGDRanker(eta0=0.2, l1=0.3, shrink_every=10).fit(X, y, qid, n_pairs=20000)
    np.testing.assert_array_equal(m2.coef_, w)
    m2.fit(X, y, qid, n_pairs=20000)
    np.testing.assert_array_equal(m2.coef_, w)


def test_save_load_resume(tmp_path):
    X, y, qid = _data(seed=8)
    kw = dict(eta0=0.5, l1=0.01, l2=0.001, shrink_every=9, loss="logistic", random_state=3)
    full = PairwiseSGDRanker(**kw)
    full.partial_fit(X[:200], y[:200], qid[:200]).partial_fit(X[200:], y[200:], qid[200:])
    part = PairwiseSGDRanker(**kw).partial_fit(X[:200], y[:200], qid[:200])
    sr.save(part, tmp_path / "p")
    back = sr.load(tmp_path / "p")
    np.testing.assert_array_equal(back.coef_, part.coef_)
    back.partial_fit(X[200:], y[200:], qid[200:])
    np.testing.assert_allclose(back.coef_, full.coef_, rtol=1e-12)
    assert back.t_ == full.t_


def test_bad_input():
    X, y, qid = _data()
    with pytest.raises(ValueError, match="l1"):
        PairwiseSGDRanker(l1=-0.1).partial_fit(X, y, qid)
    with pytest.raises(ValueError, match="l2"):
        PairwiseSGDRanker(l2=-0.1).partial_fit(X, y, qid)
    with pytest.raises(ValueError, match="eta0"):
        PairwiseSGDRanker(eta0=0).partial_fit(X, y, qid)
    with pytest.raises(ValueError, match="loss"):
        PairwiseSGDRanker(loss="squared").partial_fit(X, y, qid)
    with pytest.raises(ValueError, match="y has 399 rows"):
        PairwiseSGDRanker().partial_fit(X, y[:-1], qid)
    Xn = X.copy()
    Xn[7, 2] = np.nan
    with pytest.raises(ValueError, match="row 7"):
        PairwiseSGDRanker().partial_fit(Xn, y, qid)
    m = PairwiseSGDRanker().partial_fit(X, y, qid)
    with pytest.raises(ValueError, match="5 features"):
        m.partial_fit(X[:, :5], y, qid)
    with pytest.raises(ValueError, match="5 features"):
        m.predict(X[:, :5])
    with pytest.raises(ValueError, match="X_neg has 3 rows"):
        m.partial_fit_pairs(X[:4], X[:3])
    with pytest.raises(NotFittedError):
        PairwiseSGDRanker().predict(X)
    with pytest.raises(ValueError, match="empty batch"):
        PairwiseSGDRanker().partial_fit(X[:0], y[:0], qid[:0])
