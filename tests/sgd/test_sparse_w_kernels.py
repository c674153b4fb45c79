"""The hash-table kernels against a plain dict / numpy reference."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrank.sgd import _sparse_w_kernels as K
from streamrank.sgd._table import SparseW


def _table(cap):
    return SparseW._empty(cap)


def _keys(tab):
    ik = tab.view(np.int64)[0::2]
    return np.where(ik == K.EMPTY, K.EMPTY, ik >> K.STAMP_BITS)


def _stamps(tab):
    ik = tab.view(np.int64)[0::2]
    return np.where(ik == K.EMPTY, 0, ik & K.MAX_STAMP)


def _as_dict(tab):
    keys = _keys(tab)
    occ = keys != K.EMPTY
    return dict(zip(keys[occ].tolist(), tab[1::2][occ].tolist()))


def _check_invariant(tab):
    """Every key is reachable from its home slot without crossing an empty slot."""
    keys = _keys(tab)
    cap = keys.shape[0]
    shift = K._shift_of(cap)
    for s in range(cap):
        if keys[s] == K.EMPTY:
            continue
        assert K.find_slot(tab.view(np.int64), keys[s], shift, cap - 1) == s


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 60)), max_size=120),
       big=st.booleans())
def test_insert_delete_match_dict(ops, big):
    cap = 128  # small table: long probe chains and wrap-around
    tab = _table(cap)
    off = K.MAX_KEY - 100 if big else 0  # the largest keys keep their bits next to the stamp
    ref = {}
    for n, (insert, key) in enumerate(ops):
        key += off
        if insert:
            added = K.insert_keys(tab, np.array([key]), np.array([float(n + 1)]), np.array([n % 7]))
            assert added == (key not in ref)
            ref[key] = float(n + 1)
        else:
            assert K.delete_key(tab, key) == (key in ref)
            ref.pop(key, None)
        assert _as_dict(tab) == ref
    _check_invariant(tab)


def test_dense_cluster_wraparound_and_deletion():
    cap = 16
    tab = _table(cap)
    ks = np.arange(100, 111, dtype=np.int64)  # 11 keys in 16 slots
    K.insert_keys(tab, ks, ks.astype(float), np.zeros(11, dtype=np.int64))
    for k in ks[::2]:
        assert K.delete_key(tab, k) == 1
        _check_invariant(tab)
    assert _as_dict(tab) == {int(k): float(k) for k in ks[1::2]}


@pytest.mark.parametrize("mode", [0, 1])
def test_threshold_all_matches_soft_threshold(mode):
    rng = np.random.default_rng(0)
    cap = 64
    tab = _table(cap)
    ks = rng.choice(1000, size=40, replace=False).astype(np.int64)
    vs = rng.normal(size=40)
    # mode 0: entries stamped at sweep 0 or 1 are brought to sweep 2
    K.insert_keys(tab, ks, vs, np.arange(40) % 2)
    S = np.array([0.0, 0.3, 0.7])
    pending = {int(k): (S[2] - S[i % 2]) for i, k in enumerate(ks)}
    before = _as_dict(tab)
    removed = K.threshold_all(tab, S, 2, 0.5, mode)
    thr = (lambda k: pending[k]) if mode == 0 else (lambda k: 0.5)
    expect = {k: float(np.sign(v) * max(abs(v) - thr(k), 0.0)) for k, v in before.items()}
    expect = {k: v for k, v in expect.items() if v != 0.0}
    got = _as_dict(tab)
    assert got.keys() == expect.keys()
    for k in got:
        assert got[k] == pytest.approx(expect[k], abs=1e-15)
    assert removed == len(before) - len(expect)
    assert np.all(_stamps(tab)[_keys(tab) != K.EMPTY] == 2)
    _check_invariant(tab)


def test_rehash_and_coo_and_score():
    rng = np.random.default_rng(1)
    W = sp.random(13, 17, density=0.3, random_state=rng, format="csr")
    t = SparseW(13, 17)
    r, c = W.nonzero()
    t.set_entries(r, c, np.asarray(W[r, c]).ravel())
    t.resize(256)
    t.resize(128)
    with pytest.raises(ValueError, match="capacity"):
        t.resize(64)
    np.testing.assert_array_equal(t.to_csr().toarray(), W.toarray())
    Q = sp.random(20, 13, density=0.3, random_state=rng, format="csr")
    D = sp.random(20, 17, density=0.3, random_state=rng, format="csr")
    np.testing.assert_allclose(t.score(Q, D), np.asarray((Q @ W).multiply(D).sum(axis=1)).ravel(),
                               atol=1e-14)
    # pending shrinkage is applied on read, without changing the table
    before = t.tab.copy()
    t.S[:2] = [0.0, 0.1]
    t.istate[K.I_K] = 1
    Ws = W.toarray()
    Ws = np.sign(Ws) * np.maximum(np.abs(Ws) - 0.1, 0)
    np.testing.assert_allclose(t.to_csr().toarray(), Ws, atol=1e-15)
    np.testing.assert_allclose(t.score(Q, D), np.einsum("ri,ij,rj->r", Q.toarray(), Ws, D.toarray()),
                               atol=1e-14)
    assert t.nnz() == np.count_nonzero(Ws)
    np.testing.assert_array_equal(t.tab.view(np.int64), before.view(np.int64))
    # state round trip keeps keys, values and stamps
    attrs, arrays = t.state("p_")
    t2 = SparseW.from_state(attrs, arrays, "p_")
    np.testing.assert_array_equal(t2.to_csr().toarray(), t.to_csr().toarray())
    with pytest.raises(ValueError, match="2\\*\\*43"):
        SparseW(1 << 22, 1 << 22)


def test_merge_diff():
    P = sp.csr_matrix(np.array([[0, 1.0, 0, 2.0, 0], [0, 0, 0, 0, 0], [1.0, 0, 3.0, 0, 0]]))
    N = sp.csr_matrix(np.array([[0, 1.0, 5.0, 0, 0], [0, 0, 0, 0, 4.0], [0, 0, 0, 0, 0]]))
    dj = np.zeros(10, dtype=np.int64)
    dx = np.zeros(10)
    for r in range(3):
        n = K._merge_diff(P.indptr, P.indices, P.data, N.indptr, N.indices, N.data, r, dj, dx)
        dense = (P[r] - N[r]).toarray().ravel()
        nz = np.flatnonzero(dense)
        np.testing.assert_array_equal(dj[:n], nz)
        np.testing.assert_array_equal(dx[:n], dense[nz])


@settings(max_examples=25, deadline=None)
@given(keys=st.lists(st.integers(0, 400), min_size=1, max_size=22, unique=True),
       vals=st.lists(st.floats(-1, 1, allow_nan=False), min_size=22, max_size=22),
       stamps=st.lists(st.integers(0, 2), min_size=22, max_size=22),
       mode=st.sampled_from([0, 1]))
def test_threshold_all_in_place_cluster_rebuild(keys, vals, stamps, mode):
    """Dense small table (long clusters, wrap-around): the one-pass rebuild == dict reference."""
    cap = 32
    tab = _table(cap)
    n = len(keys)
    K.insert_keys(tab, np.array(keys, dtype=np.int64), np.array(vals[:n]), np.array(stamps[:n]))
    S = np.array([0.0, 0.25, 0.5])
    before = _as_dict(tab)
    st_of = dict(zip(keys, stamps[:n]))
    removed = K.threshold_all(tab, S, 2, 0.3, mode)
    expect = {}
    for k, v in before.items():
        thr = (S[2] - S[st_of[k]]) if mode == 0 else 0.3
        w = float(np.sign(v) * max(abs(v) - thr, 0.0))
        if w != 0.0:
            expect[k] = w
    assert _as_dict(tab) == pytest.approx(expect, abs=1e-15)
    assert removed == len(before) - len(expect)
    assert np.all(_stamps(tab)[_keys(tab) != K.EMPTY] == 2)
    assert np.all(tab[1::2][_keys(tab) == K.EMPTY] == 0.0)
    _check_invariant(tab)
