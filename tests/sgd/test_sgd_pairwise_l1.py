"""L1 of PairwiseSGDRanker: the cumulative penalty (Tsuruoka et al. 2009) against a literal numpy
version, against scikit-learn's SGDClassifier, chunked == one call, resume, sparsity on a sparse truth.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import streamrank as sr
from streamrank.sgd import _pairwise_kernels as PK
from streamrank.sgd.pairwise import PairwiseSGDRanker


def cumulative_l1_sgd(Xp, Xn, *, eta0, l1, l2=0.0, loss="hinge", learning_rate="invsqrt", state=None):
    """Literal pairwise SGD with the cumulative L1 penalty (Tsuruoka, Tsujii & Ananiadou 2009, Fig. 2).

    Step t on delta = x+ - x-: margin m = w.delta; g = [m < 1] (hinge) or 1/(1+e^m);
    w <- (1 - eta l2) w + eta g delta; u += l1 eta; then for every j with delta_j != 0:
    w_j > 0: w_j <- max(0, w_j - (u + q_j)); w_j < 0: w_j <- min(0, w_j + (u - q_j));
    q_j += change of w_j.  Returns (w, state) with state = (t, u, q) to continue.
    """
    Xp = Xp.toarray() if sp.issparse(Xp) else np.asarray(Xp, dtype=np.float64)
    Xn = Xn.toarray() if sp.issparse(Xn) else np.asarray(Xn, dtype=np.float64)
    f = Xp.shape[1]
    if state is None:
        w, t, u, q = np.zeros(f), 0, 0.0, np.zeros(f)
    else:
        w, t, u, q = (np.array(state[0], dtype=np.float64), state[1], state[2], np.array(state[3]))
    for r in range(Xp.shape[0]):
        t += 1
        eta = eta0 / np.sqrt(t) if learning_rate == "invsqrt" else eta0
        x = Xp[r].astype(np.float64) - Xn[r].astype(np.float64)
        m = w @ x
        g = (1.0 if m < 1.0 else 0.0) if loss == "hinge" else 1.0 / (1.0 + np.exp(m))
        w = max(0.0, 1.0 - eta * l2) * w + eta * g * x
        if l1 > 0:
            u += l1 * eta
            for j in np.flatnonzero(x):
                z = w[j]
                if z > 0:
                    w[j] = max(0.0, z - (u + q[j]))
                elif z < 0:
                    w[j] = min(0.0, z + (u - q[j]))
                q[j] += w[j] - z
    return w, (w, t, u, q)


def _pairs(seed=0, n=300, f=10, sparse=False, dtype=np.float64):
    rng = np.random.default_rng(seed)
    Xp = rng.normal(size=(n, f))
    Xn = rng.normal(size=(n, f))
    Xp[:, 0] += 1.0  # one informative direction, the rest noise
    if sparse:
        Xp[rng.random(Xp.shape) < 0.6] = 0.0
        Xn[rng.random(Xn.shape) < 0.6] = 0.0
        Xp[5] = 0.0  # a pair with an empty row
        Xn[7] = Xp[7]  # a pair with delta = 0: touches nothing
        return sp.csr_matrix(Xp.astype(dtype)), sp.csr_matrix(Xn.astype(dtype))
    return Xp.astype(dtype), Xn.astype(dtype)


CASES = [
    dict(loss="hinge", l1=0.02, l2=0.0, eta0=0.5),
    dict(loss="hinge", l1=0.005, l2=0.05, eta0=1.0),
    dict(loss="logistic", l1=0.01, l2=0.0, eta0=2.0),
    dict(loss="logistic", l1=0.003, l2=0.02, eta0=0.1, learning_rate="constant"),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("kw", CASES)
def test_cumulative_rule_matches_literal_numpy(kw, sparse, dtype):
    Xp, Xn = _pairs(sparse=sparse, dtype=dtype)
    m = PairwiseSGDRanker(**kw, shrink_every=7).partial_fit_pairs(Xp, Xn)
    assert m.l1_rule == "cumulative"
    w, _ = cumulative_l1_sgd(Xp, Xn, **kw)
    np.testing.assert_allclose(m.coef_, w, rtol=1e-10, atol=1e-12)
    assert np.array_equal(m.coef_ == 0, w == 0)
    assert m.t_ == Xp.shape[0]
    # the penalty really acted: exact zeros, and a different model than without it
    w0, _ = cumulative_l1_sgd(Xp, Xn, **{**kw, "l1": 0.0})
    assert np.count_nonzero(w == 0) > 0 and np.abs(w - w0).max() > 1e-3


def test_read_only_inputs_and_kernel_state():
    Xp, Xn = _pairs(seed=3, sparse=True)
    for M in (Xp, Xn):
        for a in (M.data, M.indices, M.indptr):
            a.setflags(write=False)
    m = PairwiseSGDRanker(eta0=0.5, l1=0.02).partial_fit_pairs(Xp, Xn)
    w, (_, t, u, q) = cumulative_l1_sgd(Xp, Xn, eta0=0.5, l1=0.02)
    np.testing.assert_allclose(m.coef_, w, rtol=1e-10, atol=1e-12)
    # the kernel's state is the reference's: u = l1 sum eta, q = penalty received per weight
    assert m._fstate[2] == pytest.approx(u, rel=1e-12)
    np.testing.assert_allclose(m._q, q, rtol=1e-10, atol=1e-12)


def test_kernel_empty_batch_and_zero_delta():
    v = np.zeros(3)
    fstate, istate, q = np.array([1.0, 0.0, 0.0]), np.zeros(1, np.int64), np.zeros(3)
    indptr = np.zeros(1, np.int64)
    empty_i, empty_x = np.zeros(0, np.int32), np.zeros(0)
    PK.pairwise_steps(v, fstate, istate, q, indptr, empty_i, empty_x, indptr, empty_i, empty_x,
                      1.0, 0, 0.1, 0.0, 1, PK.LOSS_HINGE, PK.L1_CUMULATIVE, np.zeros(1, np.int64), np.zeros(1))
    assert istate[0] == 0 and fstate[2] == 0.0
    # two identical rows: delta = 0, no weight touched, but t and u advance
    ip = np.array([0, 2], np.int64)
    ii = np.array([0, 2], np.int32)
    xx = np.array([1.0, -1.0])
    PK.pairwise_steps(v, fstate, istate, q, ip, ii, xx, ip, ii, xx,
                      1.0, 0, 0.1, 0.0, 1, PK.LOSS_HINGE, PK.L1_CUMULATIVE, np.zeros(4, np.int64), np.zeros(4))
    assert istate[0] == 1 and fstate[2] == pytest.approx(0.1) and not v.any() and not q.any()


@pytest.mark.parametrize("penalty", ["l1", "elasticnet"])
def test_one_call_equals_sklearn_sgdclassifier(penalty):
    """Same algorithm as scikit-learn's SGDClassifier (hinge, invscaling 0.5, no intercept) in one call."""
    sklearn = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(5)
    Xp, Xn = _pairs(seed=5, n=400, f=12)
    D = Xp - Xn
    s = rng.choice([-1.0, 1.0], size=len(D))  # sklearn sees (s * delta, s): the same hinge step
    alpha, l1_ratio = 0.02, (1.0 if penalty == "l1" else 0.6)
    clf = sklearn.SGDClassifier(loss="hinge", penalty=penalty, alpha=alpha, l1_ratio=l1_ratio,
                                fit_intercept=False, learning_rate="invscaling", eta0=0.3, power_t=0.5,
                                shuffle=False, random_state=0)
    clf.partial_fit(D * s[:, None], s, classes=np.array([-1.0, 1.0]))
    m = PairwiseSGDRanker(eta0=0.3, l1=alpha * l1_ratio, l2=alpha * (1 - l1_ratio)).partial_fit_pairs(Xp, Xn)
    np.testing.assert_allclose(m.coef_, clf.coef_.ravel(), rtol=1e-9, atol=1e-12)
    assert np.count_nonzero(m.coef_) < m.coef_.size


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(1, 299), max_size=5), sparse=st.booleans())
def test_cumulative_chunked_equals_single_call(cuts, sparse):
    """u and q continue across partial_fit calls (scikit-learn restarts them at every call)."""
    Xp, Xn = _pairs(seed=2, sparse=sparse)
    kw = dict(eta0=0.5, l1=0.02, l2=0.01)
    one = PairwiseSGDRanker(**kw).partial_fit_pairs(Xp, Xn)
    many = PairwiseSGDRanker(**kw)
    edges = [0, *sorted(set(cuts)), 300]
    for a, b in zip(edges[:-1], edges[1:]):
        if b > a:
            many.partial_fit_pairs(Xp[a:b], Xn[a:b])
    np.testing.assert_allclose(many.coef_, one.coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(many._q, one._q, rtol=1e-12, atol=1e-14)


def test_cumulative_save_load_resume(tmp_path):
    Xp, Xn = _pairs(seed=8, sparse=True)
    kw = dict(eta0=0.5, l1=0.02, l2=0.001, loss="logistic")
    full = PairwiseSGDRanker(**kw).partial_fit_pairs(Xp, Xn)
    part = PairwiseSGDRanker(**kw).partial_fit_pairs(Xp[:130], Xn[:130])
    sr.save(part, tmp_path / "p")
    back = sr.load(tmp_path / "p")
    assert back.l1_rule == "cumulative"
    np.testing.assert_array_equal(back.coef_, part.coef_)
    back.partial_fit_pairs(Xp[130:], Xn[130:])
    np.testing.assert_allclose(back.coef_, full.coef_, rtol=1e-12, atol=1e-15)
    w, _ = cumulative_l1_sgd(Xp, Xn, **kw)
    np.testing.assert_allclose(back.coef_, w, rtol=1e-10, atol=1e-12)


def test_state_saved_before_l1_rule_resumes_with_the_window_rule():
    """A state without q (saved before l1_rule existed) was trained with the window rule."""
    Xp, Xn = _pairs(seed=9)
    kw = dict(eta0=0.5, l1=0.02, shrink_every=7)
    full = PairwiseSGDRanker(**kw, l1_rule="window").partial_fit_pairs(Xp, Xn)
    part = PairwiseSGDRanker(**kw, l1_rule="window").partial_fit_pairs(Xp[:100], Xn[:100])
    attrs, arrays = part._get_state()
    old = {"v": arrays["v"], "fstate": arrays["fstate"][:2], "istate": arrays["istate"]}
    back = PairwiseSGDRanker(**kw)  # params of an old file: no l1_rule
    back._set_state(attrs, old)
    assert back.l1_rule == "window"
    back.partial_fit_pairs(Xp[100:], Xn[100:])
    np.testing.assert_allclose(back.coef_, full.coef_, rtol=1e-12, atol=1e-15)


def _sparse_truth(seed, n=3000, f=60, k=4, groups=300):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f))
    w = np.zeros(f)
    w[:k] = [2.0, -1.5, 1.0, 0.8][:k]
    y = np.round(X @ w + 0.3 * rng.normal(size=n))
    return X, y, np.repeat(np.arange(groups), n // groups), k


def test_strong_l1_gives_sparse_model_on_sparse_truth():
    """True w has 4 of 60 nonzero: the cumulative rule keeps them and zeroes (almost) all noise features."""
    X, y, qid, k = _sparse_truth(0)
    kw = dict(eta0=0.1, l1=0.02, shrink_every=100)
    cum = PairwiseSGDRanker(**kw).fit(X, y, qid, n_pairs=30_000)
    win = PairwiseSGDRanker(**kw, l1_rule="window").fit(X, y, qid, n_pairs=30_000)
    dense = PairwiseSGDRanker(**{**kw, "l1": 0.0}).fit(X, y, qid, n_pairs=30_000)
    assert np.all(cum.coef_[:k] != 0) and np.all(np.sign(cum.coef_[:k]) == [1, -1, 1, 1])
    assert np.count_nonzero(cum.coef_[k:]) <= 3
    assert np.count_nonzero(dense.coef_[k:]) == X.shape[1] - k
    # the paper's window rule at the same l1 leaves many noise weights alive
    assert np.count_nonzero(win.coef_[k:]) >= 20
    Xt, yt, qt, _ = _sparse_truth(1, n=1000, groups=100)
    dis_cum = sr.metrics.disagreement(yt, cum.predict(Xt), qt)
    dis_dense = sr.metrics.disagreement(yt, dense.predict(Xt), qt)
    assert dis_cum <= dis_dense + 0.01


def test_bad_l1_rule():
    Xp, Xn = _pairs()
    with pytest.raises(ValueError, match="l1_rule"):
        PairwiseSGDRanker(l1_rule="tsuruoka").partial_fit_pairs(Xp, Xn)
