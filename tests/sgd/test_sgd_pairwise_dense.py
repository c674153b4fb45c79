"""Dense twin of the pairwise SGD kernel: bit-identical to the CSR kernel on the same pairs.

``pairwise_steps_dense`` builds ``delta = x+ - x-`` from dense rows with
``dense_diff`` and runs the shared ``pairwise_step``; ``PairwiseSGDRanker``
routes dense float32/float64 pairs to it.  Every comparison here is exact
(same bytes), not to a tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streamrank.sgd import _pairwise_kernels as PK
from streamrank.sgd.pairwise import PairwiseSGDRanker


def _dense_pairs(m=60, f=7, seed=0, dtype=np.float64):
    """Row-aligned dense pairs with exact zeros, cancelling entries and all-zero difference rows."""
    rng = np.random.default_rng(seed)
    Xp = rng.normal(size=(m, f))
    Xn = rng.normal(size=(m, f))
    Xp[rng.random(Xp.shape) < 0.4] = 0.0
    Xn[rng.random(Xn.shape) < 0.4] = 0.0
    same = rng.random(Xp.shape) < 0.15          # x+_j == x-_j != 0: the difference is an exact zero
    Xn[same] = Xp[same]
    Xn[3] = Xp[3]                                # all-zero difference row
    Xp[5] = 0.0
    Xn[5] = 0.0                                  # both rows empty
    Xp[7] = 0.0                                  # x+ empty, x- not
    Xn[8] = 0.0                                  # x- empty, x+ not
    return Xp.astype(dtype), Xn.astype(dtype)


def _state(f, seed=1):
    rng = np.random.default_rng(seed)
    v = rng.normal(scale=0.3, size=f)
    v[::3] = 0.0
    return v, np.array([1.0, 0.0, 0.0]), np.zeros(1, dtype=np.int64), np.zeros(f)


def _readonly(a):
    a = np.array(a)
    a.setflags(write=False)
    return a


def _run_csr(Xp, Xn, kw, state):
    v, fs, ist, q = (s.copy() for s in state)
    P, N = sp.csr_matrix(Xp), sp.csr_matrix(Xn)
    f = Xp.shape[1]
    dj, dx = np.empty(2 * f, dtype=np.int64), np.empty(2 * f)
    PK.pairwise_steps(v, fs, ist, q, P.indptr, P.indices, P.data, N.indptr, N.indices, N.data,
                      kw["eta0"], kw["lr"], kw["l1"], kw["l2"], kw["T"], kw["loss"], kw["l1_rule"], dj, dx)
    return v, fs, ist, q


def _run_dense(Xp, Xn, kw, state):
    v, fs, ist, q = (s.copy() for s in state)
    f = Xp.shape[1]
    dj, dx = np.empty(f, dtype=np.int64), np.empty(f)
    PK.pairwise_steps_dense(v, fs, ist, q, Xp, Xn,
                            kw["eta0"], kw["lr"], kw["l1"], kw["l2"], kw["T"], kw["loss"], kw["l1_rule"],
                            dj, dx)
    return v, fs, ist, q


def _same_bytes(a, b):
    return all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


_KW = [
    dict(loss=PK.LOSS_HINGE, l1_rule=PK.L1_CUMULATIVE, l1=1e-2, l2=0.0),
    dict(loss=PK.LOSS_HINGE, l1_rule=PK.L1_CUMULATIVE, l1=0.0, l2=0.05),
    dict(loss=PK.LOSS_LOGISTIC, l1_rule=PK.L1_CUMULATIVE, l1=1e-2, l2=0.05),
    dict(loss=PK.LOSS_HINGE, l1_rule=PK.L1_WINDOW, l1=1e-2, l2=0.05),
    dict(loss=PK.LOSS_LOGISTIC, l1_rule=PK.L1_WINDOW, l1=1e-2, l2=0.0),
    dict(loss=PK.LOSS_LOGISTIC, l1_rule=PK.L1_WINDOW, l1=0.0, l2=0.0),
]


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("lr", [0, 1], ids=["invsqrt", "constant"])
@pytest.mark.parametrize("kw", _KW, ids=lambda k: f"loss{k['loss']}-rule{k['l1_rule']}-l1{k['l1']}-l2{k['l2']}")
def test_dense_kernel_bit_identical_to_csr(kw, lr, dtype, readonly):
    Xp, Xn = _dense_pairs(dtype=dtype)
    kw = dict(kw, eta0=0.3, lr=lr, T=4)
    state = _state(Xp.shape[1])
    want = _run_csr(Xp, Xn, kw, state)
    if readonly:
        Xp, Xn = _readonly(Xp), _readonly(Xn)
    got = _run_dense(Xp, Xn, kw, state)
    assert _same_bytes(got, want)
    assert got[2][0] == Xp.shape[0]
    assert np.any(got[0] != state[0])  # the steps did move w (the test can fail)


def test_dense_kernel_mixed_dtypes_bit_identical():
    Xp, Xn = _dense_pairs(seed=4)
    Xp = Xp.astype(np.float32)
    kw = dict(_KW[2], eta0=0.2, lr=0, T=3)
    state = _state(Xp.shape[1])
    assert _same_bytes(_run_dense(Xp, Xn, kw, state), _run_csr(Xp, Xn, kw, state))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dense_diff_matches_merge_diff_and_numpy(dtype):
    Xp, Xn = _dense_pairs(m=40, f=9, seed=2, dtype=dtype)
    P, N = sp.csr_matrix(Xp), sp.csr_matrix(Xn)
    f = Xp.shape[1]
    dj, dx = np.empty(f, dtype=np.int64), np.empty(f)
    mj, mx = np.empty(2 * f, dtype=np.int64), np.empty(2 * f)
    for r in range(Xp.shape[0]):
        nd = PK.dense_diff(Xp, Xn, r, dj, dx)
        nm = PK.merge_diff(P.indptr, P.indices, P.data, N.indptr, N.indices, N.data, r, mj, mx)
        d = Xp[r].astype(np.float64) - Xn[r].astype(np.float64)
        (ref_j,) = np.nonzero(d)
        assert nd == nm == ref_j.size
        np.testing.assert_array_equal(dj[:nd], ref_j)
        assert dx[:nd].tobytes() == mx[:nm].tobytes() == d[ref_j].tobytes()
    assert PK.dense_diff(Xp, Xn, 3, dj, dx) == 0 and PK.dense_diff(Xp, Xn, 5, dj, dx) == 0


def test_dense_kernel_empty_batch():
    state = _state(4)
    kw = dict(_KW[0], eta0=0.1, lr=0, T=2)
    E = np.zeros((0, 4))
    got = _run_dense(E, E, kw, state)
    assert _same_bytes(got, state)


# ------------------------------------------------------------- the learner


_RANKER_KW = [
    dict(loss="hinge", l1=1e-3, l2=0.0, l1_rule="cumulative"),
    dict(loss="logistic", l1=1e-3, l2=1e-3, l1_rule="window", shrink_every=5),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kw", _RANKER_KW, ids=["hinge-cumulative", "logistic-window-l2"])
def test_partial_fit_pairs_dense_equals_csr(kw, dtype):
    Xp, Xn = _dense_pairs(m=80, f=6, seed=7, dtype=dtype)
    a = PairwiseSGDRanker(eta0=0.2, **kw)
    b = PairwiseSGDRanker(eta0=0.2, **kw)
    c = PairwiseSGDRanker(eta0=0.2, **kw)
    for lo, hi in [(0, 30), (30, 80)]:  # state carries over between calls
        a.partial_fit_pairs(_readonly(Xp[lo:hi]), _readonly(Xn[lo:hi]))
        b.partial_fit_pairs(sp.csr_matrix(Xp[lo:hi]), sp.csr_matrix(Xn[lo:hi]))
        c.partial_fit_pairs(Xp[lo:hi], sp.csr_matrix(Xn[lo:hi]))  # a mix runs the CSR kernel
    assert a.t_ == b.t_ == c.t_ == 80
    assert a.coef_.tobytes() == b.coef_.tobytes() == c.coef_.tobytes()
    assert np.any(a.coef_ != 0)


def test_partial_fit_pairs_dense_non_contiguous_input():
    Xp, Xn = _dense_pairs(m=50, f=5, seed=8)
    a = PairwiseSGDRanker(eta0=0.2).partial_fit_pairs(np.asfortranarray(Xp), Xn[:, :])
    b = PairwiseSGDRanker(eta0=0.2).partial_fit_pairs(sp.csr_matrix(Xp), sp.csr_matrix(Xn))
    assert a.coef_.tobytes() == b.coef_.tobytes()


def test_partial_fit_pairs_dense_empty_batch():
    m = PairwiseSGDRanker().partial_fit_pairs(np.zeros((0, 3)), np.zeros((0, 3), dtype=np.float32))
    assert m.n_features_in_ == 3 and m.t_ == 0
    np.testing.assert_array_equal(m.coef_, np.zeros(3))
    Xp, Xn = _dense_pairs(m=10, f=3, seed=9)
    m.partial_fit_pairs(Xp, Xn)
    before = m.coef_.copy()
    m.partial_fit_pairs(np.zeros((0, 3)), np.zeros((0, 3)))
    assert m.t_ == 10 and m.coef_.tobytes() == before.tobytes()
    with pytest.raises(ValueError, match="X_neg has 2 rows but X_pos has 0"):
        m.partial_fit_pairs(np.zeros((0, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="X_pos"):
        m.partial_fit_pairs(np.zeros((1, 4)), np.zeros((1, 4)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kw", _RANKER_KW, ids=["hinge-cumulative", "logistic-window-l2"])
def test_fit_dense_equals_csr(kw, dtype):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(300, 6))
    X[rng.random(X.shape) < 0.3] = 0.0
    y = np.round(X @ [1.0, -1.0, 0.5, 0.0, 0.0, 0.2] + 0.1 * rng.normal(size=300))
    qid = np.repeat(np.arange(30), 10)
    X = X.astype(dtype)
    a = PairwiseSGDRanker(eta0=0.1, random_state=3, **kw).fit(X, y, qid, n_pairs=2000, batch_size=128)
    b = PairwiseSGDRanker(eta0=0.1, random_state=3, **kw).fit(sp.csr_matrix(X), y, qid, n_pairs=2000,
                                                               batch_size=128)
    assert a.t_ == b.t_ == 2000
    assert a.coef_.tobytes() == b.coef_.tobytes()
    assert np.any(a.coef_ != 0)
