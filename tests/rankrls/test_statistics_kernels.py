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
    import streamrank.rankrls._statistics as stmod

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
