"""streamrank.rankrls._statistics_kernels against plain numpy; the SYRK workspace path of RankStatistics."""
from __future__ import annotations

import numpy as np
import pytest
from rankrls_testdata import make_groups

from streamrank.rankrls import _statistics_kernels as _sk
from streamrank.rankrls._statistics import RankStatistics


def ref_fill(Phi, Y, sx, sy, gp, center):
    Phi = np.asarray(Phi, dtype=np.float64)
    U = np.hstack([Phi, Y])
    T = np.zeros((len(gp) - 1, U.shape[1]))
    C = U.copy()
    for g in range(len(gp) - 1):
        T[g] = U[gp[g]:gp[g + 1]].sum(axis=0)
        if center[g] and gp[g + 1] > gp[g]:
            C[gp[g]:gp[g + 1]] -= U[gp[g]:gp[g + 1]].mean(axis=0)
    n = Phi.shape[1]
    A = np.hstack([C[:, :n] * sx[:, None], C[:, n:] * sy[:, None]])
    return A, T


CASES = {
    "mixed": [0, 3, 3, 4, 9],      # a group of 3, an empty group, a one-row group, a group of 5
    "empty_block": [0],
    "one_row": [0, 1],
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("readonly", [False, True])
def test_fill_scaled_and_in_place(case, dtype, readonly, rng):
    gp = np.array(CASES[case], dtype=np.int64)
    rows, n, v = int(gp[-1]), 4, 2
    Phi = rng.normal(size=(rows, n)).astype(dtype)
    Y = rng.normal(size=(rows, v))
    Y[:2] = 1.0                                   # ties do not matter here
    sx, sy = rng.random(rows), rng.random(rows)
    center = (np.arange(len(gp) - 1) % 2 == 0)   # some groups centred, some not
    if readonly:
        for a in (Phi, Y, sx, sy, gp, center):
            a.setflags(write=False)
    A_ref, T_ref = ref_fill(Phi, Y, sx, sy, gp, center)
    A = np.full((rows + 2, n + v), np.nan)
    T = np.full((len(gp) - 1, n + v), np.nan)
    _sk.fill_scaled(Phi, Y, sx, sy, gp, center, A, T)
    np.testing.assert_allclose(A[:rows], A_ref, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(T, T_ref, rtol=1e-13, atol=1e-14)
    assert np.isnan(A[rows:]).all()               # rows beyond the block untouched
    # in place: Φ already in A[:, :n]
    B = np.full((rows, n + v), np.nan, order="F")
    B[:, :n] = Phi
    T2 = np.full_like(T, np.nan)
    _sk.scale_in_place_f(B, n, Y, sx, sy, gp, center, T2)
    np.testing.assert_allclose(B, A_ref, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(T2, T_ref, rtol=1e-13, atol=1e-14)
    # in place, row-major, as rows of a wider buffer (any row stride)
    W = np.full((rows + 3, n + v + 2), np.nan)
    Cv = W[1:rows + 1, : n + v]
    Cv[:, :n] = Phi
    T3 = np.full_like(T, np.nan)
    _sk.fill_scaled(Cv[:, :n], Y, sx, sy, gp, center, Cv, T3)         # Φ aliases A: in place
    np.testing.assert_allclose(Cv, A_ref, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(T3, T_ref, rtol=1e-13, atol=1e-14)
    assert np.isnan(W[0]).all() and np.isnan(W[rows + 1:]).all() and np.isnan(W[:, n + v:]).all()


@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("equal_sizes", [False, True])
def test_workspace_in_place_equals_copy(gw, ties, equal_sizes, rng):
    """Φ written into stats.workspace(rows)[:, :n] gives the same statistics as passing Φ (no copy made)."""
    if equal_sizes:
        gp = np.arange(0, 61, 6, dtype=np.int64)
        X = rng.normal(size=(60, 5))
        y = rng.integers(0, 3, size=60).astype(float)
        y[:6] = 2.0                                # an all-tied group
    else:
        X, y, _, gp = make_groups(rng, n_groups=8, levels=3)
        X = X[:, :4]
    n = X.shape[1]
    ref = RankStatistics(n, 1, group_weight=gw, ties=ties)
    ref.add_block(X, y, gp)
    ref.add_block(X[: gp[3]], y[: gp[3]], gp[:4])
    st = RankStatistics(n, 1, group_weight=gw, ties=ties)
    for Xb, yb, gpb in ((X, y, gp), (X[: gp[3]], y[: gp[3]], gp[:4])):
        A = st.workspace(len(yb))
        A[:, :n] = Xb
        assert st._is_workspace(A[:, :n])
        st.add_block(A[:, :n], yb, gpb)
    np.testing.assert_allclose(st.G, ref.G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.B, ref.B, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.yLy, ref.yLy, rtol=1e-12)
    assert (st.n_rows, st.n_groups, st.n_pairs) == (ref.n_rows, ref.n_groups, ref.n_pairs)
    assert st._work is None                        # freed once the statistics are read


def test_workspace_rejects_pieces(rng):
    st = RankStatistics(3, 1)
    A = st.workspace(4)
    A[:, :3] = rng.normal(size=(4, 3))
    with pytest.raises(ValueError, match="whole groups"):
        st.add_block(A[:, :3], np.arange(4.0), [0, 4], group_size=[10], group_offset=[0], group_id=[0])


@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("gw", ["pair", "size"])
@pytest.mark.parametrize("chunk_rows", [1, 3, 7])
def test_chunked_fill_and_syrk_equal_one_pass(ties, gw, chunk_rows, rng, monkeypatch):
    """Blocks go through the workspace in group-aligned chunks (a group larger than a chunk is one chunk)."""
    import streamrank.rankrls._dense_syrk as stmod   # the dense SYRK path lives there

    X, y, _, gp = make_groups(rng, n_groups=9, max_size=9, levels=3, n_outputs=1)
    X = X.astype(np.float32)
    ref = RankStatistics(X.shape[1], 1, group_weight=gw, ties=ties)
    ref.add_block(X, y, gp)
    G, B, yLy = ref.G, ref.B, ref.yLy
    monkeypatch.setattr(stmod, "_CHUNK_BYTES", 8 * (X.shape[1] + 1) * chunk_rows)
    st = RankStatistics(X.shape[1], 1, group_weight=gw, ties=ties)
    st.add_block(X, y, gp)
    assert st._work.shape[0] < len(y)                  # the workspace holds one chunk, not the block
    np.testing.assert_allclose(st.G, G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.B, B, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.yLy, yLy, rtol=1e-12)


@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("chunk_rows", [1, 4, 1000])
def test_fill_callback_equals_phi_given(ties, gw, threads, chunk_rows, rng, monkeypatch):
    """Φ computed by fill(a, b, out) piece by piece (one or two threads, any piece size) = Φ passed whole."""
    import streamrank.rankrls._accumulate_threads as threads_mod

    X, y, _, gp = make_groups(rng, n_groups=11, max_size=9, levels=3, n_outputs=1)
    n = X.shape[1]
    ref = RankStatistics(n, 1, group_weight=gw, ties=ties)
    ref.add_block(X, y, gp)
    monkeypatch.setattr(threads_mod, "FILL_CHUNK_BYTES", 8 * (n + 1) * chunk_rows)
    monkeypatch.setattr(threads_mod, "_THREADS", [threads])
    calls = []

    def fill(a, b, out):
        assert out.shape == (b - a, n)
        calls.append((a, b))
        out[...] = X[a:b]

    st = RankStatistics(n, 1, group_weight=gw, ties=ties)
    W = st.workspace(len(y), order="C")
    W[:] = np.nan                                      # fill must write every row it is asked for
    st.add_block(W[:, :n], y, gp, fill=fill)
    if threads == 2:    # the helper's pending accumulator travels with the object (dask, copy, merge)
        import pickle

        st = pickle.loads(pickle.dumps(st))
        st = st.copy() + RankStatistics(n, 1, group_weight=gw, ties=ties)
    np.testing.assert_allclose(st.G, ref.G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.B, ref.B, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.yLy, ref.yLy, rtol=1e-12)
    assert (st.n_rows, st.n_groups, st.n_pairs) == (ref.n_rows, ref.n_groups, ref.n_pairs)
    spans = sorted(calls)                              # every row filled exactly once, on group boundaries
    assert spans[0][0] == 0 and spans[-1][1] == len(y)
    assert all(b0 == a1 for (_, b0), (a1, _) in zip(spans[:-1], spans[1:]))
    assert {a for a, _ in spans} <= set(gp.tolist())
    if chunk_rows == 1:
        assert len(calls) == len(gp) - 1               # one group a piece


def test_fill_needs_the_row_major_workspace(rng):
    st = RankStatistics(3, 1)
    X = rng.normal(size=(4, 3))
    with pytest.raises(ValueError, match="workspace"):
        st.add_block(X, np.arange(4.0), [0, 4], fill=lambda a, b, out: None)
    F = st.workspace(4)                                # Fortran-ordered: not for fill
    with pytest.raises(ValueError, match="workspace"):
        st.add_block(F[:, :3], np.arange(4.0), [0, 4], fill=lambda a, b, out: None)
    with pytest.raises(ValueError, match="order"):
        st.workspace(4, order="K")


def test_blas_limit_is_set_and_restored_on_the_main_thread_only(rng, monkeypatch):
    """The two-thread fill limits BLAS to one thread on the main thread and restores it; a worker thread
    (dask) fills on its own and leaves the limit alone — with the same statistics either way."""
    import threading

    import streamrank.rankrls._accumulate_threads as threads_mod

    with threads_mod.one_blas_thread():                     # creates the controller
        pass

    def blas_threads():                                # the libraries the limit acts on, queried live
        return [i["num_threads"] for i in threads_mod._BLAS[0].info() if i["user_api"] == "blas"]

    monkeypatch.setattr(threads_mod, "_THREADS", [2])
    monkeypatch.setattr(threads_mod, "FILL_CHUNK_BYTES", 8 * 6 * 4)
    X, y, _, gp = make_groups(rng, n_groups=12, max_size=9, levels=3, n_outputs=1)
    n = X.shape[1]
    ref = RankStatistics(n, 1)
    ref.add_block(X, y, gp)
    before = blas_threads()
    seen = []

    def run():
        st = RankStatistics(n, 1)
        W = st.workspace(len(y), order="C")

        def fill(a, b, out):
            seen.append((threading.current_thread().name, blas_threads()))
            out[...] = X[a:b]

        st.add_block(W[:, :n], y, gp, fill=fill)
        helper_used = st._acc_helper is not None             # the second half's SYRK ran on the helper
        return helper_used, st.G

    helper_used, G_main = run()
    # pieces come from one queue: which thread takes which (even all of them) is up to the scheduler
    assert seen and {name for name, _ in seen} <= {"MainThread", "streamrank-accumulate_0"}
    assert helper_used
    assert all(all(k == 1 for k in b) for _, b in seen)      # limited while the halves ran
    assert blas_threads() == before                          # and restored
    seen.clear()
    out = []
    t = threading.Thread(target=lambda: out.append(run()), name="worker")
    t.start()
    t.join(10)
    assert {name for name, _ in seen} == {"worker"}          # no halves off the main thread
    assert out[0][0] is False
    assert blas_threads() == before
    np.testing.assert_allclose(G_main, ref.G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[0][1], ref.G, rtol=1e-12, atol=1e-12)


def test_accumulate_threads_setting(monkeypatch):
    import streamrank.rankrls._accumulate_threads as threads_mod

    monkeypatch.setattr(threads_mod, "_THREADS", [None])
    monkeypatch.setenv("STREAMRANK_ACCUMULATE_THREADS", "1")
    assert threads_mod.accumulate_threads() == 1
    assert threads_mod.accumulate_threads(8) == 2
    with pytest.raises(ValueError, match=">= 1"):
        threads_mod.accumulate_threads(0)


def test_accumulate_threads_default_follows_the_cpu_affinity(monkeypatch):
    import os

    import streamrank.rankrls._accumulate_threads as threads_mod

    monkeypatch.delenv("STREAMRANK_ACCUMULATE_THREADS", raising=False)
    for cpus, want in (({0}, 1), ({0, 1}, 2), ({0, 1, 2, 3}, 2)):
        monkeypatch.setattr(threads_mod, "_THREADS", [None])
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, c=cpus: c, raising=False)
        assert threads_mod.accumulate_threads() == want
