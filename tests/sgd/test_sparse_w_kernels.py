"""The row-pool kernels of the bilinear W against plain dict / numpy references."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrank.sgd import _sparse_w_kernels as K
from streamrank.sgd._base import kernel_csr
from streamrank.sgd._sparse_row_kernels import merge_diff
from streamrank.sgd._table import SparseW


def soft(v, thr):
    return float(np.sign(v) * max(abs(v) - thr, 0.0))


def _pool(rows, n_cols, P=4096, stamps=None):
    """meta, pc, pv holding ``rows`` (list of {col: value}, in insertion order), each at capacity."""
    meta = np.zeros((len(rows), 4), dtype=np.int64)
    pc = np.zeros(P, dtype=np.int32)
    pv = np.zeros(P, dtype=np.float64)
    u = 0
    for i, row in enumerate(rows):
        n = len(row)
        cap = K.row_capacity(n) if n else 0
        pc[u:u + n] = list(row.keys())
        pv[u:u + n] = list(row.values())
        meta[i] = (u, n, cap, 0 if stamps is None else stamps[i])
        u += cap
    return meta, pc, pv, u


def _sparse_w(W):
    """A SparseW holding the scipy matrix W."""
    t = SparseW(*W.shape)
    r, c = W.nonzero()
    t.set_entries(r, c, np.asarray(W[r, c]).ravel())
    return t


def _row(meta, pc, pv, i):
    p, n = meta[i, K.M_START], meta[i, K.M_LEN]
    return dict(zip(pc[p:p + n].tolist(), pv[p:p + n].tolist()))


def test_row_capacity():
    assert [K.row_capacity(n) for n in (0, 1, 4, 5, 8, 9, 1000)] == [4, 4, 4, 8, 8, 16, 1024]
    assert K.capacity_total(np.array([0, 1, 5, 0, 9])) == 4 + 8 + 16


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 11), sh=st.sampled_from([0.0, 0.3]), seed=st.integers(0, 10_000))
def test_row_dot_matches_numpy(n, sh, seed):
    rng = np.random.default_rng(seed)
    n_cols = 20
    cols = rng.choice(n_cols, n, replace=False).astype(np.int32)  # any order
    vals = rng.normal(size=n)
    dense = np.where(rng.random(n_cols) < 0.5, rng.normal(size=n_cols), 0.0)
    pc = np.concatenate([[7], cols]).astype(np.int32)  # the row starts at 1
    pv = np.concatenate([[99.0], vals])
    got = K._row_dot(pc, pv, 1, n, sh, dense)
    want = sum(soft(v, sh) * dense[c] for c, v in zip(cols, vals))
    assert got == pytest.approx(want, abs=1e-14)


def test_shrink_equals_soft_threshold_exactly():
    for v in (-2.0, -0.5, -0.3, -0.1, 0.0, 0.1, 0.3, 0.5, 2.0, 1e-300, -1e300):
        for sh in (0.0, 0.3, 1e-320):
            assert K._shrink(v, sh) == soft(v, sh)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 9), nd=st.integers(0, 6),
       sh=st.sampled_from([0.0, 0.25]), refit=st.booleans(), move=st.booleans(), undo=st.booleans(),
       full=st.booleans())
def test_step_row_matches_dict_and_undo_restores(seed, n, nd, sh, refit, move, undo, full):
    """One pass: the row's margin part before the update, the update, the log; then the undo."""
    rng = np.random.default_rng(seed)
    n_cols = 12
    row = dict(zip(rng.choice(n_cols, n, replace=False).tolist(),
                   np.round(rng.normal(size=n), 1).tolist()))
    row = {c: v for c, v in row.items() if v != 0.0}
    dj = np.sort(rng.choice(n_cols, nd, replace=False)).astype(np.int64)
    dx = np.round(rng.normal(size=nd), 1)
    dx[dx == 0] = 0.5
    g = float(rng.choice([0.0, 1.0, -2.0]))
    if refit:
        sh = 0.0  # the refit runs on a flushed W
    if row and nd and rng.random() < 0.5:
        # an entry of delta's column that the update takes to exactly 0
        c0 = int(dj[0])
        row[c0] = -g * dx[0] + (sh if -g * dx[0] > 0 else -sh) if g != 0.0 else 1.0
        row = {c: v for c, v in row.items() if v != 0.0}
    meta, pc, pv, used = _pool([row, {0: 5.0}], n_cols)
    if not move:  # room in place
        meta[0, K.M_CAP] = max(meta[0, K.M_CAP], len(row) + nd)
        meta[1, K.M_START] = 512
        pc[512], pv[512] = 0, 5.0
    dst = 1024 if move else int(meta[0, K.M_START])
    dense = np.zeros(n_cols)
    slot = np.zeros(n_cols, dtype=np.int64)
    dense[dj] = dx
    slot[dj] = np.arange(1, nd + 1)
    hit = np.zeros(nd + 1, dtype=np.int64)
    lpos = np.full(n + 2, -1, dtype=np.int64)
    lval = np.zeros(n + 2)
    u0 = 1  # the log may already hold other rows' entries
    mask = np.zeros(1, dtype=np.uint64)
    for j in dj.tolist():
        mask[0] |= np.uint64(1 << j)
    dot, u, removed, zeros = K._step_row(meta, pc, pv, 0, sh, 3, g, dense, slot, mask, hit, refit, dst,
                                         lpos, lval, u0)
    n_kept = int(meta[0, K.M_LEN])
    if move:  # the caller's bookkeeping of a move
        meta[0, K.M_CAP] = 16
    if full:  # no room left in the segment: an append moves the row
        meta[0, K.M_CAP] = n_kept
    cap = int(meta[0, K.M_CAP])
    istate = np.zeros(K.N_ISTATE, dtype=np.int64)
    istate[K.I_USED] = 2048
    free = K.empty_free_lists()
    start_before = int(meta[0, K.M_START])
    n_added = 0 if refit else K._append_missing(meta, pc, pv, 0, g, dj, dx, nd, hit, free, istate, lpos,
                                                u0, u)
    delta = dict(zip(dj.tolist(), dx.tolist()))
    shrunk = {c: soft(v, sh) for c, v in row.items()}
    assert dot == pytest.approx(sum(v * delta.get(c, 0.0) for c, v in shrunk.items()), abs=1e-14)
    live = {c: v for c, v in shrunk.items() if v != 0.0 or refit}  # the dead are dropped
    want = {}
    for c, v in live.items():
        w = v + g * delta.get(c, 0.0)
        if w != 0.0 or refit or c in delta:  # delta's columns stay until the caller decides
            want[c] = w
    n_new = 0
    for j, x in delta.items():  # missing (a dead entry too): appended
        if j not in live and not refit and g * x != 0.0:
            want[j] = g * x
            n_new += 1
    got = _row(meta, pc, pv, 0)
    assert got == pytest.approx(want, abs=1e-15)
    assert list(got)[:n_kept] == [c for c in live if c in want]  # order kept, appended last
    assert meta[0, K.M_STAMP] == 3 and n_added == n_new
    assert n_kept == len(want) - n_new
    if n_kept + n_new > cap:  # grown out of its segment: moved to the pool's end, the old one released
        assert meta[0, K.M_START] == 2048 and meta[0, K.M_CAP] == K.row_capacity(n_kept + n_new)
        assert istate[K.I_USED] == 2048 + K.row_capacity(n_kept + n_new)
        assert istate[K.I_GARBAGE] == cap
    else:
        assert meta[0, K.M_START] == (dst if move else start_before)
    assert removed == len(row) - n_kept
    logged = [c for c in live if c in delta]
    assert u - u0 == len(logged)
    p = meta[0, K.M_START]
    assert [int(pc[q]) for q in lpos[u0:u]] == logged
    assert lval[u0:u].tolist() == [shrunk[c] for c in logged]
    assert zeros == sum(want[c] == 0.0 for c in logged)
    assert _row(meta, pc, pv, 1) == {0: 5.0}  # the neighbour is untouched
    if undo:
        qi = np.array([0], dtype=np.int64)
        kept = np.array([n_kept], dtype=np.int64)
        K._undo_rows(meta, pc, pv, qi, 0, 1, lpos[u0:], lval[u0:], u - u0, kept)
        assert _row(meta, pc, pv, 0) == live  # W without the step: the row shrunk, the dead dropped
        assert p == meta[0, K.M_START]


def test_flush_and_literal_sweep():
    rows = [{3: 1.0, 1: -0.2, 7: 0.05}, {}, {2: -3.0, 4: 0.3}]
    S = np.array([0.0, 0.1, 0.25])
    meta, pc, pv, _ = _pool(rows, 10, stamps=[0, 0, 1])
    removed = K.flush_rows(meta, pc, pv, S, 2)
    want = [{3: 0.75}, {}, {2: -2.85, 4: 0.15}]
    for i, w in enumerate(want):
        assert _row(meta, pc, pv, i) == pytest.approx(w, abs=1e-15)
    assert removed == 2
    assert np.all(meta[:, K.M_STAMP] == 2)
    assert K.flush_rows(meta, pc, pv, S, 2) == 0  # nothing pending
    meta, pc, pv, _ = _pool(rows, 10)
    removed = K._sweep_rows(meta, pc, pv, 0.25, 5)
    for i, w in enumerate([{3: 0.75}, {}, {2: -2.75, 4: 0.05}]):
        assert _row(meta, pc, pv, i) == pytest.approx(w, abs=1e-15)
    assert removed == 2 and np.all(meta[:, K.M_STAMP] == 5)


@pytest.mark.parametrize("tight", [False, True])
def test_repack_keeps_rows(tight):
    rng = np.random.default_rng(0)
    rows = [dict(zip(rng.choice(50, n, replace=False).tolist(), rng.normal(size=n).tolist()))
            for n in (0, 1, 3, 4, 9, 17)]
    meta, pc, pv, _ = _pool(rows, 50)
    meta[:] = meta[::-1].copy()  # rows in the pool in reverse order
    rows = rows[::-1]
    size = K.packed_size(meta, tight)
    new_pc = np.zeros(size, dtype=np.int32)
    new_pv = np.zeros(size)
    used = K.repack(meta, pc, pv, new_pc, new_pv, tight)
    assert used == size
    for i, row in enumerate(rows):
        assert _row(meta, new_pc, new_pv, i) == row
        n = len(row)
        assert meta[i, K.M_CAP] == (0 if n == 0 else n if tight else K.row_capacity(n))
    starts = meta[:, K.M_START]
    assert np.all(np.diff(starts) == meta[:-1, K.M_CAP])  # contiguous, in row order


def test_rows_move_to_grow_and_to_give_back_a_segment_4x_too_big():
    assert not K._moves(8, 8, 8) and K._moves(9, 16, 8)  # grows past its segment
    assert not K._moves(5, 8, 16) and K._moves(5, 8, 32)  # 8 <= 32 / 4: gives the 32 back


def test_alloc_release_reuse_segments_of_the_same_size():
    pv = np.zeros(256)
    free = K.empty_free_lists()
    istate = np.zeros(K.N_ISTATE, dtype=np.int64)
    a = K._alloc(pv, free, istate, 8)
    b = K._alloc(pv, free, istate, 16)
    assert (a, b, istate[K.I_USED]) == (0, 8, 24)
    K._release(pv, free, istate, a, 8)
    K._release(pv, free, istate, 24, 6)  # not a power of two: garbage, never reused
    assert istate[K.I_GARBAGE] == 14
    assert free[K.N_CLASSES + 3] == 1 and not free[K.N_CLASSES:].sum() - 1  # one free 8-segment
    assert K._alloc(pv, free, istate, 16) == 24  # no free 16: the end of the pool
    assert K._alloc(pv, free, istate, 8) == a  # the released 8 comes back
    assert istate[K.I_GARBAGE] == 6 and istate[K.I_USED] == 40
    assert K._alloc(pv, free, istate, 8) == 40


def test_set_rows_coo_and_stored():
    rng = np.random.default_rng(2)
    W = sp.random(9, 14, density=0.3, random_state=rng, format="csr")
    W.sort_indices()
    stamps = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])
    S = np.array([0.0, 0.2, 0.3])
    n = np.diff(W.indptr)
    meta = np.zeros((9, 4), dtype=np.int64)
    P = int(sum(K.row_capacity(v) for v in n if v))
    pc, pv = np.zeros(P, dtype=np.int32), np.zeros(P)
    assert K.set_rows(meta, pc, pv, W.indptr.astype(np.int64), W.indices, W.data, stamps) == P
    indptr, indices, vals = K.stored_csr(meta, pc, pv)
    np.testing.assert_array_equal(sp.csr_matrix((vals, indices, indptr), shape=W.shape).toarray(),
                                  W.toarray())
    pending = (S[2] - S[stamps])[:, None]
    Wd = W.toarray()
    cur = np.sign(Wd) * np.maximum(np.abs(Wd) - pending, 0.0)
    r, c, v = K.rows_to_coo(meta, pc, pv, S, 2)
    np.testing.assert_allclose(sp.csr_matrix((v, (r, c)), shape=W.shape).toarray(), cur, atol=1e-15)
    assert np.count_nonzero(cur) == len(v)


def test_score_rows_matches_dense_formula_and_leaves_workspace_zero():
    rng = np.random.default_rng(3)
    W = sp.random(13, 17, density=0.3, random_state=rng, format="csr")
    t = _sparse_w(W)
    Q = sp.random(20, 13, density=0.3, random_state=rng, format="csr")
    D = sp.random(20, 17, density=0.3, random_state=rng, format="csr")
    dense = np.zeros(17)
    out = np.zeros(20)
    K.score_rows(t.meta, t.pc, t.pv, t.S, 0, *kernel_csr(Q), *kernel_csr(D), dense, out)
    np.testing.assert_allclose(out, np.einsum("ri,ij,rj->r", Q.toarray(), W.toarray(), D.toarray()),
                               atol=1e-14)
    assert not dense.any()


def test_merge_diff():
    P = sp.csr_matrix(np.array([[0, 1.0, 0, 2.0, 0], [0, 0, 0, 0, 0], [1.0, 0, 3.0, 0, 0]]))
    N = sp.csr_matrix(np.array([[0, 1.0, 5.0, 0, 0], [0, 0, 0, 0, 4.0], [0, 0, 0, 0, 0]]))
    dj = np.zeros(10, dtype=np.int64)
    dx = np.zeros(10)
    for r in range(3):
        n = merge_diff(P.indptr, P.indices, P.data, N.indptr, N.indices, N.data, r, dj, dx)
        dense = (P[r] - N[r]).toarray().ravel()
        nz = np.flatnonzero(dense)
        np.testing.assert_array_equal(dj[:n], nz)
        np.testing.assert_array_equal(dx[:n], dense[nz])


def _steps(W, Q, P, N, eta0=1.0, l1=0.01, T=3, lazy=True, refit=False, log=4096):
    nd = np.diff(P.indptr) + np.diff(N.indptr)
    width = max(1, int(nd.max()))
    dj, dx = np.empty(width, dtype=np.int64), np.empty(width)
    hit = np.zeros(width + 1, dtype=np.int64)
    kept = np.empty(max(1, int(np.diff(Q.indptr).max())), dtype=np.int64)
    lpos, lval = np.empty(log, dtype=np.int64), np.empty(log)
    dense, slot, mask = W.workspace()
    r, n, calls = 0, Q.shape[0], 0
    while r < n:
        W.reserve_sweeps(n - r, T)
        t_before = int(W.istate[K.I_T])
        # the arrays as SparseSGDRanker hands them over (kernel_csr): the suite compiles one variant
        r_next = K.sgd_steps(W.meta, W.pc, W.pv, W.S, W.istate, W.fstate, *kernel_csr(Q),
                             *kernel_csr(P), *kernel_csr(N), r, n, eta0,
                             K.LR_INVSQRT, l1, T, lazy, refit, dj, dx, dense, slot, mask, hit, W.free,
                             lpos, lval, kept)
        calls += 1
        if r_next < n:
            # an early return has not started tuple r_next
            assert int(W.istate[K.I_T]) == t_before + (r_next - r)
            short_log = W.istate[K.I_NEED_LOG] > lpos.shape[0]
            assert short_log or W.istate[K.I_USED] + W.istate[K.I_NEED] > W.capacity
            if short_log:
                lpos = np.empty(int(W.istate[K.I_NEED_LOG]), dtype=np.int64)
                lval = np.empty(lpos.shape[0])
            W.make_room()
        r = r_next
        assert not dense.any() and not slot.any() and not mask.any()
    return calls


def test_sgd_steps_small_pool_equals_big_pool_and_early_returns_are_clean():
    from tests.sgd.sgd_testdata import random_tuples

    Q, P, N = random_tuples(400, 30, 30, density=0.15, seed=4)
    small = SparseW(30, 30)
    big = SparseW(30, 30, capacity=1 << 16)
    for W in (small, big):
        W.set_entries(np.arange(30), np.arange(30), np.ones(30))
    big.repack(1 << 16)
    # the small pool filled up and was repacked on the way, the short undo log grown
    assert _steps(small, Q, P, N, log=2) > 1
    assert _steps(big, Q, P, N) == 1
    np.testing.assert_array_equal(small.to_csr().toarray(), big.to_csr().toarray())
    assert small.count == big.count and small.nnz() == big.nnz()
    assert small.istate[K.I_UPDATES] == big.istate[K.I_UPDATES]


def test_sparse_w_set_entries_state_round_trip_and_rebase():
    rng = np.random.default_rng(1)
    W = sp.random(13, 17, density=0.3, random_state=rng, format="csr")
    t = _sparse_w(W)
    np.testing.assert_array_equal(t.to_csr().toarray(), W.toarray())
    t.set_entries([0, 12], [0, 16], [2.5, -1.0])  # override / add
    Wd = W.toarray()
    Wd[0, 0], Wd[12, 16] = 2.5, -1.0
    np.testing.assert_array_equal(t.to_csr().toarray(), Wd)
    # pending shrinkage is applied on read, without changing the stored values
    before = t.pv.copy()
    t.S[:2] = [0.0, 0.1]
    t.istate[K.I_K] = 1
    Ws = np.sign(Wd) * np.maximum(np.abs(Wd) - 0.1, 0)
    np.testing.assert_allclose(t.to_csr().toarray(), Ws, atol=1e-15)
    assert t.nnz() == np.count_nonzero(Ws)
    np.testing.assert_array_equal(t.pv, before)
    # state round trip keeps values and stamps exactly
    attrs, arrays = t.state("p_")
    t2 = SparseW.from_state(attrs, arrays, "p_")
    np.testing.assert_array_equal(t2.to_csr().toarray(), t.to_csr().toarray())
    np.testing.assert_array_equal(t2.meta[:, K.M_STAMP], t.meta[:, K.M_STAMP])
    # a row saved with mixed stamps (the hash-table W of earlier versions) is brought up to date
    arrays = dict(arrays)
    arrays["p_stamps"] = arrays["p_stamps"].copy()
    assert arrays["p_keys"][0] == 0  # W[0, 0], now marked as already up to date
    arrays["p_stamps"][0] = 1
    t3 = SparseW.from_state(attrs, arrays, "p_")
    Ws3 = Ws.copy()
    Ws3[0, 0] = 2.5
    np.testing.assert_allclose(t3.to_csr().toarray(), Ws3, atol=1e-15)
    assert t3.meta[0, K.M_STAMP] == 1 and not t3.meta[1:, K.M_STAMP].any()  # the mixed row made current
    t.rebase()
    np.testing.assert_allclose(t.to_csr().toarray(), Ws, atol=1e-15)
    assert t.istate[K.I_K] == 0 and not t.meta[:, K.M_STAMP].any()
    t.repack(extra=5000)
    assert t.capacity >= 5000
    t.fit_capacity()  # far more than twice what a repack allots: shrinks
    assert t.capacity == max(64, 2 * K.packed_size(t.meta, False))
    np.testing.assert_allclose(t.to_csr().toarray(), Ws, atol=1e-15)
    t.fit_capacity(tight=True)
    assert t.capacity == max(64, t.count)
    np.testing.assert_allclose(t.to_csr().toarray(), Ws, atol=1e-15)
    with pytest.raises(ValueError, match="2\\*\\*31"):
        SparseW(3, 1 << 31)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_score_read_only_and_float32_inputs(dtype):
    rng = np.random.default_rng(5)
    W = sp.random(8, 9, density=0.5, random_state=rng, format="csr")
    t = _sparse_w(W)
    Q = sp.random(6, 8, density=0.5, random_state=rng, format="csr", dtype=dtype)
    D = sp.random(6, 9, density=0.5, random_state=rng, format="csr", dtype=dtype)
    for M in (Q, D):
        for a in (M.data, M.indices, M.indptr):
            a.setflags(write=False)
    np.testing.assert_allclose(t.score(Q, D), np.einsum("ri,ij,rj->r", Q.toarray(), W.toarray(),
                                                        D.toarray()), rtol=1e-6 if dtype == np.float32 else 1e-13)


@pytest.mark.parametrize("active", [False, True])
def test_sgd_steps_undo_drops_an_entry_the_shrinkage_killed(active):
    """An inactive step whose delta touches a dead entry: the undo puts back 0, which must go.

    Row 0 holds {0: 10, 1: 0.001} with a pending shrinkage of 0.01, so entry
    (0, 1) is dead.  The tuple q = e0, delta = e0 + e1 (margin 9.99: inactive),
    or delta = -e0 + e1 (margin -9.99: active, entry (0, 1) revived by the step).
    """
    W = SparseW(1, 2)
    W.set_entries(np.array([0, 0]), np.array([0, 1]), np.array([10.0, 0.001]))
    W.reserve_sweeps(10, 100)
    W.S[1] = 0.01
    W.istate[K.I_K] = 1
    Q = sp.csr_matrix(np.array([[1.0]]))
    P = sp.csr_matrix(np.array([[0.0 if active else 1.0, 1.0]]))
    N = sp.csr_matrix(np.array([[1.0 if active else 0.0, 0.0]]))
    _steps(W, Q, P, N, eta0=0.5, l1=0.0, T=100)
    assert int(W.istate[K.I_ACTIVE]) == int(active)
    want = {0: 9.99 - 0.5, 1: 0.5} if active else {0: 9.99}
    assert _row(W.meta, W.pc, W.pv, 0) == pytest.approx(want, abs=1e-15)
    assert W.count == len(want)
