"""SparseSGDRanker against the literal dense Algorithm 1 (+ refit), streaming, persistence."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sgd_testdata import ArrayTuples, random_tuples
from hypothesis import given, settings
from hypothesis import strategies as st

import sgd_reference as ref
import streamrank as sr
from streamrank.base import NotFittedError
from streamrank.sgd import _sparse_w_kernels as K
from streamrank.sgd.bilinear import SparseSGDRanker


def _model(lazy=True, **kw):
    m = SparseSGDRanker(**kw)
    m._lazy = lazy
    return m


CASES = [
    dict(eta0=1.0, l1=0.02, shrink_every=7, init="identity", learning_rate="invsqrt"),
    dict(eta0=0.5, l1=0.05, shrink_every=1, init="identity", learning_rate="invsqrt"),
    dict(eta0=0.3, l1=0.01, shrink_every=10, init="zeros", learning_rate="constant"),
    dict(eta0=2.0, l1=0.0, shrink_every=5, init="identity", learning_rate="invsqrt"),
    dict(eta0=1.0, l1=0.3, shrink_every=3, init="zeros", learning_rate="invsqrt"),
]


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "sweep"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_algorithm1_matches_dense_reference(case, lazy):
    kw = CASES[case]
    Q, Dp, Dn = random_tuples(250, 9, 9, density=0.35, seed=case)
    m = _model(lazy, auto_refit=False, **kw).partial_fit(Q, Dp, Dn)
    W_ref, t, _ = ref.algorithm1(Q, Dp, Dn, eta0=kw["eta0"], l1=kw["l1"], T=kw["shrink_every"],
                                 init=kw["init"], learning_rate=kw["learning_rate"])
    np.testing.assert_allclose(m.W_.toarray(), W_ref, rtol=0, atol=1e-10)
    assert m.t_ == t == 250
    assert m.nnz_ == np.count_nonzero(W_ref) == m.W_.nnz
    if kw["l1"] >= 0.01:  # the case really exercised the shrinkage to zero
        assert 0 < m.density_ < 1


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "sweep"])
def test_inactive_steps_are_undone_exactly(lazy):
    """The kernel writes each step before it knows the hinge's verdict and takes it back when inactive.

    Twenty tuples cycled thirty times: once learnt, most steps are inactive
    (margin >= 1), and with L1 many of the entries they touch have shrunk to
    zero, so the undo also has to drop the dead entries it put back.
    """
    Q, Dp, Dn = random_tuples(20, 9, 9, density=0.35, seed=21)
    idx = np.tile(np.arange(20), 30)
    Q, Dp, Dn = Q[idx], Dp[idx], Dn[idx]
    kw = dict(eta0=3.0, l1=0.01, shrink_every=5, init="identity", learning_rate="invsqrt")
    m = _model(lazy, auto_refit=False, **kw).partial_fit(Q, Dp, Dn)
    W_ref, _, _ = ref.algorithm1(Q, Dp, Dn, eta0=3.0, l1=0.01, T=5)
    np.testing.assert_allclose(m.W_.toarray(), W_ref, rtol=0, atol=1e-10)
    assert m.nnz_ == np.count_nonzero(W_ref) == m.W_.nnz
    active = int(m._W.istate[K.I_ACTIVE])
    assert active < 0.5 * len(idx)  # the undo really ran, for most steps
    assert m.density_ < 0.9  # and the shrinkage killed entries
    W = m._W
    up_to_date = W.meta[:, K.M_STAMP] == W.istate[K.I_K]
    for i in np.flatnonzero(up_to_date):  # no explicit zero left behind by an update or an undo
        p, n = W.meta[i, K.M_START], W.meta[i, K.M_LEN]
        assert np.all(W.pv[p:p + n] != 0.0), i
    assert W.count == W.meta[:, K.M_LEN].sum()
    m._W.flush()  # the entry count the kernels keep is exact once the lazy shrinkage is applied
    assert m._W.count == m.nnz_


def test_undo_log_grows_when_a_tuple_needs_more():
    """A short undo log makes the kernel stop, the learner grow the log, and W stays exact."""
    Q, Dp, Dn = random_tuples(80, 30, 30, density=0.8, seed=22)
    kw = dict(eta0=0.05, l1=0.001, shrink_every=4, auto_refit=False)
    short = _model(**kw)
    short._undo_log_size = 2  # less than one row's entries in delta's columns
    short.partial_fit(Q, Dp, Dn)
    full = _model(**kw).partial_fit(Q, Dp, Dn)
    W_ref, _, _ = ref.algorithm1(Q, Dp, Dn, eta0=0.05, l1=0.001, T=4)
    np.testing.assert_allclose(short.W_.toarray(), W_ref, atol=1e-10)
    np.testing.assert_array_equal(short.W_.toarray(), full.W_.toarray())
    assert short.nnz_ > 300  # the rows were long enough to need a long log


def test_update_to_exactly_zero_drops_the_entry():
    """(q, a, b) then (q, b, a) at a constant rate: the second step cancels the first exactly."""
    Q = sp.csr_matrix(np.array([[1.0, 0.0, 2.0, 0.0]] * 2))
    a = np.array([0.0, 1.0, 0.5, 0.0])
    b = np.array([0.0, 0.0, 0.25, 3.0])
    Dp, Dn = sp.csr_matrix(np.array([a, b])), sp.csr_matrix(np.array([b, a]))
    m = _model(init="zeros", eta0=0.5, l1=0.0, learning_rate="constant", auto_refit=False)
    m.partial_fit(Q[:1], Dp[:1], Dn[:1])
    assert m.nnz_ == 6
    m.partial_fit(Q[1:], Dp[1:], Dn[1:])
    assert m.nnz_ == 0 and m.W_.nnz == 0 and m._W.count == 0
    assert int(m._W.istate[K.I_ACTIVE]) == 2


def test_rectangular_zeros_init_matches_reference():
    Q, _, _ = random_tuples(200, 7, 7, seed=11)
    _, Dp, Dn = random_tuples(200, 13, 13, seed=12)
    m = _model(init="zeros", eta0=1.0, l1=0.02, shrink_every=4, auto_refit=False).partial_fit(Q, Dp, Dn)
    W_ref, _, _ = ref.algorithm1(Q, Dp, Dn, eta0=1.0, l1=0.02, T=4, init="zeros")
    assert m.W_.shape == (7, 13)
    np.testing.assert_allclose(m.W_.toarray(), W_ref, atol=1e-10)


def test_many_item_features_match_reference():
    """Item features spread over several 64-bit words of the kernel's delta bit mask."""
    Q, _, _ = random_tuples(300, 6, 6, density=0.5, seed=13)
    _, Dp, Dn = random_tuples(300, 200, 200, density=0.03, seed=14)
    m = _model(init="zeros", eta0=1.0, l1=0.01, shrink_every=3, auto_refit=False).partial_fit(Q, Dp, Dn)
    W_ref, _, _ = ref.algorithm1(Q, Dp, Dn, eta0=1.0, l1=0.01, T=3, init="zeros")
    np.testing.assert_allclose(m.W_.toarray(), W_ref, atol=1e-10)
    assert m.W_.indices.max() >= 128  # the last words of the mask were used


def test_lazy_equals_literal_sweep_bigger_problem():
    """The lazy cumulative shrinkage is the every-T sweep, entry by entry."""
    Q, Dp, Dn = random_tuples(1500, 40, 40, density=0.1, seed=5)
    kw = dict(eta0=1.0, l1=0.01, shrink_every=13, auto_refit=False)
    a = _model(True, **kw).partial_fit(Q, Dp, Dn)
    b = _model(False, **kw).partial_fit(Q, Dp, Dn)
    assert 0 < a.density_ < 0.9
    np.testing.assert_allclose(a.W_.toarray(), b.W_.toarray(), atol=1e-10)
    assert a.nnz_ == b.nnz_


def test_refit_matches_reference():
    Q, Dp, Dn = random_tuples(300, 10, 10, density=0.3, seed=2)
    kw = dict(eta0=1.0, l1=0.05, shrink_every=5)
    src = ArrayTuples(sp.vstack([Q]), sp.vstack([Dp, Dn]),
                      np.c_[np.arange(300), np.arange(300), 300 + np.arange(300)])
    m = _model(**kw).fit(src, n_steps=450, batch_size=64)
    Qr, Pr, Nr = src.rows(450, random_state=0)
    W1, t, _ = ref.algorithm1(Qr, Pr, Nr, eta0=1.0, l1=0.05, T=5)
    W2 = ref.refit(W1, Qr, Pr, Nr, eta0=1.0, t0=t)
    assert m.t_ == 450 and m.refit_t_ == 450
    np.testing.assert_allclose(m.W_.toarray(), W2, atol=1e-10)
    assert set(zip(*m.W_.nonzero())) <= set(zip(*np.nonzero(W1)))
    assert 0 < np.count_nonzero(W1) < W1.size


@settings(max_examples=20, deadline=None)
@given(cuts=st.lists(st.integers(1, 199), max_size=6), lazy=st.booleans())
def test_chunked_partial_fit_equals_single_call(cuts, lazy):
    Q, Dp, Dn = random_tuples(200, 8, 8, density=0.35, seed=7)
    kw = dict(eta0=1.0, l1=0.03, shrink_every=6)
    one = _model(lazy, **kw).partial_fit(Q, Dp, Dn)
    many = _model(lazy, **kw)
    edges = [0, *sorted(set(cuts)), 200]
    for a, b in zip(edges[:-1], edges[1:]):
        if b > a:
            many.partial_fit(Q[a:b], Dp[a:b], Dn[a:b])
    assert many.t_ == one.t_ == 200
    np.testing.assert_allclose(many.W_.toarray(), one.W_.toarray(), rtol=0, atol=1e-12)


def test_save_load_resume_equals_uninterrupted(tmp_path):
    Q, Dp, Dn = random_tuples(400, 10, 10, density=0.3, seed=9)
    kw = dict(eta0=1.0, l1=0.03, shrink_every=7)
    full = SparseSGDRanker(**kw).partial_fit(Q, Dp, Dn)
    part = SparseSGDRanker(**kw).partial_fit(Q[:173], Dp[:173], Dn[:173])  # mid-window (173 % 7 != 0)
    sr.save(part, tmp_path / "m")
    back = sr.load(tmp_path / "m")
    assert isinstance(back, SparseSGDRanker) and back.t_ == 173
    np.testing.assert_array_equal(back.W_.toarray(), part.W_.toarray())
    back.partial_fit(Q[173:], Dp[173:], Dn[173:])
    np.testing.assert_allclose(back.W_.toarray(), full.W_.toarray(), atol=1e-12)
    assert back.t_ == 400
    assert back.get_params() == full.get_params()


def test_fit_streams_passes_and_matches_partial_fit():
    Q, Dp, Dn = random_tuples(120, 8, 8, seed=4)
    src = ArrayTuples(Q, sp.vstack([Dp, Dn]), np.c_[np.arange(120), np.arange(120), 120 + np.arange(120)])
    m = SparseSGDRanker(eta0=1.0, l1=0.02, shrink_every=5, auto_refit=False).fit(src, n_steps=300, batch_size=50)
    assert src.calls == [0, 1, 2]  # three passes, seeds random_state + pass
    Qr, Pr, Nr = src.rows(300)
    p = SparseSGDRanker(eta0=1.0, l1=0.02, shrink_every=5).partial_fit(Qr, Pr, Nr)
    np.testing.assert_allclose(m.W_.toarray(), p.W_.toarray(), atol=1e-12)
    # fit resets: a second fit gives the same model
    m.fit(src, n_steps=300, batch_size=50)
    np.testing.assert_allclose(m.W_.toarray(), p.W_.toarray(), atol=1e-12)


def test_history_with_validation():
    Q, Dp, Dn = random_tuples(200, 8, 8, seed=1)
    src = ArrayTuples(Q, sp.vstack([Dp, Dn]), np.c_[np.arange(200), np.arange(200), 200 + np.arange(200)])
    val = random_tuples(50, 8, 8, seed=2)
    m = SparseSGDRanker(eta0=1.0, l1=0.02, shrink_every=5).fit(
        src, n_steps=200, validation=val, checkpoint_every=40, batch_size=64)
    steps = [h["step"] for h in m.history_]
    assert steps == [40, 80, 120, 160, 200, 240, 280, 320, 360, 400]
    assert [h["phase"] for h in m.history_] == ["sparse"] * 5 + ["refit"] * 5
    for h in m.history_:
        assert 0 <= h["tuple_error"] <= 1 and 0 < h["density"] <= 1 and h["nnz"] > 0
    last = m.history_[-1]
    s = m.predict(*val[:2]), m.predict(val[0], val[2])
    assert last["tuple_error"] == pytest.approx(np.mean(s[0] <= s[1]))


def test_score_equals_dense_formula():
    Q, Dp, Dn = random_tuples(150, 9, 9, seed=6)
    m = SparseSGDRanker(eta0=1.0, l1=0.01, shrink_every=4).partial_fit(Q, Dp, Dn)
    W = m.W_.toarray()
    np.testing.assert_allclose(m.predict(Q, Dp), np.einsum("ri,ij,rj->r", Q.toarray(), W, Dp.toarray()),
                               atol=1e-12)
    # dense input is accepted too
    np.testing.assert_allclose(m.predict(Q.toarray(), Dp.toarray()), m.predict(Q, Dp), atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_and_readonly_inputs(dtype):
    Q, Dp, Dn = random_tuples(120, 8, 8, seed=8, dtype=dtype)
    for M in (Q, Dp, Dn):
        for a in (M.data, M.indices, M.indptr):
            a.setflags(write=False)
    m = SparseSGDRanker(eta0=1.0, l1=0.02, shrink_every=5).partial_fit(Q, Dp, Dn)
    W_ref, _, _ = ref.algorithm1(Q.astype(np.float64), Dp.astype(np.float64), Dn.astype(np.float64),
                                 eta0=1.0, l1=0.02, T=5)
    np.testing.assert_allclose(m.W_.toarray(), W_ref, atol=1e-10)


def test_empty_rows_are_fine():
    Q, Dp, Dn = random_tuples(60, 6, 6, density=0.3, seed=10)
    Q = Q.tolil()
    Q[5] = 0
    Q[17] = 0
    Q = Q.tocsr()
    Dn = Dp.copy()  # d+ == d-: delta is empty, hinge active but no update
    m = SparseSGDRanker(eta0=1.0, l1=0.01, shrink_every=4).partial_fit(Q, Dp, Dn)
    W_ref, _, _ = ref.algorithm1(Q, Dp, Dn, eta0=1.0, l1=0.01, T=4)
    np.testing.assert_allclose(m.W_.toarray(), W_ref, atol=1e-12)


def test_memory_proportional_to_nnz_and_flat_in_stream_length():
    Q, Dp, Dn = random_tuples(6000, 300, 300, density=0.01, seed=3)
    m = SparseSGDRanker(eta0=1.0, l1=0.002, shrink_every=10)
    mem = []
    for a in range(0, 6000, 600):
        m.partial_fit(Q[a:a + 600], Dp[a:a + 600], Dn[a:a + 600])
        nnz = m.nnz_
        assert 0 < nnz < 0.2 * 300 * 300
        # entries that shrank to zero untouched are flushed when the table doubles,
        # and the table is kept at load >= 0.25: a bounded number of bytes per entry
        assert m.memory_bytes_ / nnz < 128
        mem.append(m.memory_bytes_)
    assert mem[-1] <= 2 * mem[0]  # 10x more tuples, not 10x more memory
    assert m.memory_bytes_ < 8 * 300 * 300 / 4  # far below a dense W


def test_planted_sparse_W_is_recovered():
    """Tuples labelled by a planted sparse W*: the learned support covers it, error falls."""
    n = 30
    planted = [(i, (i * 7 + 3) % n) for i in range(n)]
    Wstar = np.zeros((n, n))
    for i, j in planted:
        Wstar[i, j] = 1.0

    def make(m_tuples, seed):
        r = np.random.default_rng(seed)
        Q = sp.random(m_tuples, n, density=0.1, random_state=r, format="csr")
        A = sp.random(m_tuples, n, density=0.1, random_state=r, format="csr")
        B = sp.random(m_tuples, n, density=0.1, random_state=r, format="csr")
        sa = np.einsum("ri,ij,rj->r", Q.toarray(), Wstar, A.toarray())
        sb = np.einsum("ri,ij,rj->r", Q.toarray(), Wstar, B.toarray())
        keep = sa != sb
        swap = sb > sa
        P = sp.csr_matrix(np.where(swap[:, None], B.toarray(), A.toarray()))
        N = sp.csr_matrix(np.where(swap[:, None], A.toarray(), B.toarray()))
        return Q[keep], P[keep], N[keep]

    Q, P, N = make(12000, 1)
    k = Q.shape[0] // 100 * 100  # end on a shrinkage sweep
    Q, P, N = Q[:k], P[:k], N[:k]
    Qv, Pv, Nv = make(2000, 2)
    src = ArrayTuples(Q, sp.vstack([P, N]), np.c_[np.arange(k), np.arange(k), k + np.arange(k)])
    m = SparseSGDRanker(eta0=5.0, l1=5e-3, shrink_every=100, init="identity", auto_refit=False).fit(
        src, n_steps=k, batch_size=2048)
    W = m.W_.toarray()
    support = set(zip(*np.nonzero(W)))
    recovered = sum((i, j) in support for i, j in planted) / len(planted)
    assert recovered >= 0.9
    assert m.density_ < 0.5
    # the planted entries are the largest ones
    top = np.argsort(-np.abs(W).ravel())[:n]
    assert len(set(top) & {i * n + j for i, j in planted}) >= 0.8 * n
    # identity baseline W = I (cosine-like score)
    err_id = np.mean(np.einsum("ri,ri->r", Qv.toarray(), Pv.toarray())
                     <= np.einsum("ri,ri->r", Qv.toarray(), Nv.toarray()))
    err = np.mean(m.predict(Qv, Pv) <= m.predict(Qv, Nv))
    assert err < 0.25 * err_id


# ------------------------------------------------------------------ bad input
def test_bad_hyperparameters():
    Q, Dp, Dn = random_tuples(10, 4, 4)
    with pytest.raises(ValueError, match="l1"):
        SparseSGDRanker(l1=-1.0).partial_fit(Q, Dp, Dn)
    for bad in (0.0, -1.0, np.nan):
        with pytest.raises(ValueError, match="eta0"):
            SparseSGDRanker(eta0=bad).partial_fit(Q, Dp, Dn)
    with pytest.raises(ValueError, match="shrink_every"):
        SparseSGDRanker(shrink_every=0).partial_fit(Q, Dp, Dn)
    with pytest.raises(ValueError, match="init"):
        SparseSGDRanker(init="random").partial_fit(Q, Dp, Dn)
    with pytest.raises(ValueError, match="learning_rate"):
        SparseSGDRanker(learning_rate="optimal").partial_fit(Q, Dp, Dn)
    with pytest.raises(ValueError, match="init='identity'"):
        SparseSGDRanker().partial_fit(Q, *random_tuples(10, 5, 5)[1:])


def test_bad_tuples():
    Q, Dp, Dn = random_tuples(10, 4, 4)
    m = SparseSGDRanker()
    with pytest.raises(ValueError, match="D_pos has 9 rows but Q has 10"):
        m.partial_fit(Q, Dp[:9], Dn)
    with pytest.raises(ValueError, match="D_neg has 8 rows but Q has 10"):
        m.partial_fit(Q, Dp, Dn[:8])
    with pytest.raises(ValueError, match="empty batch"):
        m.partial_fit(Q[:0], Dp[:0], Dn[:0])
    bad = Dn.toarray()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="D_neg contains NaN or infinity at row 3"):
        m.partial_fit(Q, Dp, bad)
    m.partial_fit(Q, Dp, Dn)
    with pytest.raises(ValueError, match="Q has 5 features, but 4 were expected"):
        m.partial_fit(sp.random(10, 5, density=0.3, format="csr"), Dp, Dn)
    with pytest.raises(ValueError, match="D_pos has 6 features"):
        m.partial_fit(Q, sp.random(10, 6, density=0.3, format="csr"), Dn)
    with pytest.raises(ValueError, match="D has 6 features"):
        m.predict(Q, sp.random(10, 6, density=0.3, format="csr"))
    with pytest.raises(ValueError, match="D has 9 rows but Q has 10"):
        m.predict(Q, Dp[:9])
    with pytest.raises(NotFittedError):
        SparseSGDRanker().predict(Q, Dp)
    with pytest.raises(NotFittedError):
        SparseSGDRanker().W_
    with pytest.raises(TypeError, match="batches"):
        SparseSGDRanker().fit([Q, Dp, Dn], n_steps=5)
    with pytest.raises(ValueError, match="n_steps"):
        SparseSGDRanker().fit(ArrayTuples(Q, Dp, [[0, 0, 1]]), n_steps=0)


def test_empty_source_raises():
    src = ArrayTuples(sp.csr_matrix((3, 4)), sp.csr_matrix((3, 4)), np.zeros((0, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="no tuples"):
        SparseSGDRanker().fit(src, n_steps=5)


def test_params_and_refit_name():
    m = SparseSGDRanker(auto_refit=False, eta0=3.0)
    assert m.get_params()["auto_refit"] is False and not m.auto_refit
    m.set_params(auto_refit=True)
    assert m.get_params()["auto_refit"] is True and m.auto_refit
    assert "refit" not in m.get_params() and callable(m.refit)   # refit is the method only
    with pytest.raises(ValueError, match="Invalid parameter 'refit'"):
        m.set_params(refit=True)
    assert "eta0=3.0" in repr(m)
    sklearn_base = pytest.importorskip("sklearn.base")
    c = sklearn_base.clone(m)
    assert c.get_params() == m.get_params()


def test_fit_from_tuplestore_equals_partial_fit_on_its_batches(tmp_path):
    """A real zarr TupleStore (bounded shuffle buffer): fit == partial_fit over the same batches."""
    rng = np.random.default_rng(0)
    Q = sp.random(40, 9, density=0.3, random_state=rng, format="csr")
    D = sp.random(60, 9, density=0.3, random_state=rng, format="csr")
    tup = np.c_[rng.integers(0, 40, 500), rng.integers(0, 60, 500), rng.integers(0, 60, 500)]
    store = sr.TupleStore.create(tmp_path / "t.zarr", 9, 9)
    store.append(Q, D, tup)
    kw = dict(eta0=1.0, l1=0.02, shrink_every=10, auto_refit=False, random_state=5)
    m = SparseSGDRanker(**kw).fit(store, n_steps=800, batch_size=64, shuffle_buffer=128)
    p = SparseSGDRanker(**kw)
    left = 800
    for seed in (5, 6):  # pass p uses random_state + p
        for b in store.batches(batch_size=64, shuffle_buffer=128, random_state=seed):
            k = min(left, b.Q.shape[0])
            if k:
                p.partial_fit(b.Q[:k], b.D_pos[:k], b.D_neg[:k])
            left -= k
    assert m.t_ == p.t_ == 800
    np.testing.assert_allclose(m.W_.toarray(), p.W_.toarray(), atol=1e-12)
