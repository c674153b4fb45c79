"""The numpy twins of the scaling kernels (streamrank.rankrls._statistics_twins) give the kernels' bits.

Compared byte for byte (``tobytes``: the sign of zero included) on random
blocks and the edge cases (empty block, empty groups, one-row groups, all-tied
labels, -0.0, float32/float64 Φ, read-only inputs, Φ aliasing A with any row
stride, a group offset that does not start at 0); RankStatistics and a fit
give the same bits with the twins forced on and off.
"""
from __future__ import annotations

import numpy as np
import pytest
from rankrls_testdata import make_groups

from streamrank._numba import twins
from streamrank.rankrls import _statistics_kernels as K
from streamrank.rankrls import _statistics_twins as W
from streamrank.rankrls._statistics import RankStatistics


def _case(rng, sizes, n=4, v=1, dtype=np.float64, offset=0, extra=0, tied=False, neg_zero=False):
    gp = (np.concatenate([[0], np.cumsum(sizes)]) + offset).astype(np.int64)
    rows = int(gp[-1]) + extra
    Phi = (rng.normal(size=(rows, n)) * 10.0 ** rng.integers(-3, 4, size=(rows, n))).astype(dtype)
    Y = np.full((rows, v), 2.0) if tied else rng.integers(0, 3, (rows, v)).astype(float)
    if neg_zero:
        Phi[:, 0] = -0.0
        Y[:, -1] = -0.0
    sx, sy = rng.random(rows), rng.random(rows)
    center = rng.random(len(sizes)) < 0.5
    return Phi, Y, sx, sy, gp, center


def _run(form, impl, Phi, Y, sx, sy, gp, center, readonly=False):
    """(A, T) written by ``impl`` ("kernel", "twin", or the routing helper under twins(True/False))."""
    rows, n = Phi.shape
    v = Y.shape[1]
    T = np.full((len(gp) - 1, n + v), np.nan)
    fns = {"kernel": (K.fill_scaled, K.scale_in_place_f), "twin": (W.fill_scaled_numpy, W.scale_in_place_f_numpy),
           "route": (W.fill_scaled, W.scale_in_place_f)}[impl]
    ro = (lambda a: (a.setflags(write=False), a)[1]) if readonly else (lambda a: a)
    args = [ro(a.copy()) for a in (Y, sx, sy, gp, center)]
    if form == "fill":
        A = np.full((rows + 2, n + v), np.nan)
        fns[0](ro(Phi.copy()), args[0], args[1], args[2], args[3], args[4], A, T)
    elif form == "alias":                         # Φ = A[:, :n], rows of a wider buffer (any row stride)
        buf = np.full((rows + 3, n + v + 2), np.nan)
        A = buf[1:rows + 1, : n + v]
        A[:, :n] = Phi
        fns[0](A[:, :n], args[0], args[1], args[2], args[3], args[4], A, T)
        A = buf
    else:                                         # Fortran-ordered workspace, Φ already in A[:, :n]
        A = np.full((rows, n + v), np.nan, order="F")
        A[:, :n] = Phi
        fns[1](A, n, *args, T)
    return A, T


def _same_bits(a, b):
    return a.tobytes() == b.tobytes()


FORMS = ["fill", "alias", "inplace_f"]
EDGES = {
    "empty_block": dict(sizes=[]),
    "offset_no_groups": dict(sizes=[], offset=3, extra=2),
    "one_row": dict(sizes=[1]),
    "one_row_groups": dict(sizes=[1, 1, 1, 1]),
    "empty_groups": dict(sizes=[0, 3, 0, 0, 5, 0]),
    "all_tied": dict(sizes=[4, 6, 2], tied=True),
    "negative_zero": dict(sizes=[3, 1, 5], neg_zero=True),
    "offset_and_rows_after": dict(sizes=[2, 7], offset=4, extra=3),
    "one_long_group": dict(sizes=[300]),
    "long_and_short": dict(sizes=[90, 1, 2, 60, 3, 3, 0, 40]),
    "many_outputs": dict(sizes=[5, 4], v=3),
}


@pytest.mark.parametrize("form, dtype", [("fill", np.float32), ("fill", np.float64), ("alias", np.float64),
                                         ("inplace_f", np.float64)])   # Φ in a float64 workspace: float64
@pytest.mark.parametrize("edge", list(EDGES))
def test_twin_equals_kernel_on_edge_cases(form, dtype, edge):
    rng = np.random.default_rng(len(edge))
    data = _case(rng, dtype=dtype, **EDGES[edge])
    A_k, T_k = _run(form, "kernel", *data)
    for impl, readonly in (("twin", False), ("twin", True), ("route", False)):
        for forced in (True, False):
            with twins(forced):
                A, T = _run(form, impl, *data, readonly=readonly and form == "fill")
            assert _same_bits(A, A_k) and _same_bits(T, T_k), (impl, forced)


def test_twin_equals_kernel_on_random_blocks():
    rng = np.random.default_rng(2026)
    for trial in range(60):
        g = int(rng.integers(0, 12))
        sizes = rng.integers(0, 40, g) if rng.random() < 0.8 else rng.integers(0, 3, g)
        data = _case(rng, sizes, n=int(rng.integers(1, 8)), v=int(rng.integers(1, 3)),
                     dtype=(np.float32, np.float64)[trial % 2], offset=int(rng.integers(0, 3)),
                     extra=int(rng.integers(0, 3)), neg_zero=rng.random() < 0.2)
        for form in FORMS if trial % 2 else FORMS[:2]:
            A_k, T_k = _run(form, "kernel", *data)
            A_w, T_w = _run(form, "twin", *data)
            assert _same_bits(A_w, A_k) and _same_bits(T_w, T_k), (trial, form)


def test_group_sums_add_row_after_row():
    """A sum that pairwise summation rounds differently: the twin adds as the kernel does, one row after another."""
    x = np.array([1.0, 1e16, -1e16, 1.0, 1e-3, 3.0, -7e15, 7e15, 0.5, 1.0] * 5)[:, None]
    sizes = np.array([x.shape[0]])
    seq = 0.0
    for v in x[:, 0]:
        seq += v
    got = W._group_sums(np.hstack([x, x]), sizes)
    assert got[0, 0] == seq and got[0, 1] == seq
    assert W._group_sums(np.full((3, 1), -0.0), np.array([3]))[0, 0].tobytes() == np.float64(0.0).tobytes()


def test_estimate_counts_the_python_steps():
    # 3 groups of 1 and one of 100: 100 position steps, or 1 long group + 1 step
    assert W._steps(np.array([0, 100, 101, 102, 103])) == 2
    assert W._steps(np.arange(0, 31, 3)) == 3
    assert W._steps(np.array([0])) == 0
    assert W._estimate_s(10_000, 47, 80) < 0.02 < W._estimate_s(1_000_000, 50, 100)


@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("path", ["whole", "chunks", "workspace_f", "fill"])
def test_statistics_same_bits_with_twins_on_and_off(ties, gw, path, monkeypatch):
    """RankStatistics through every call site of the scaling (whole block, group-aligned chunks, the F-ordered
    workspace, fill= pieces on two threads): G, B, yLy and the counts are the same bits either way."""
    import streamrank.rankrls._accumulate_threads as threads_mod
    import streamrank.rankrls._dense_syrk as syrk_mod

    rng = np.random.default_rng(5)
    X, y, _, gp = make_groups(rng, n_groups=14, max_size=12, levels=3, n_outputs=1)
    X = X.astype(np.float32) if path == "chunks" else X
    n = X.shape[1]
    if path == "chunks":
        monkeypatch.setattr(syrk_mod, "_CHUNK_BYTES", 8 * (n + 1) * 5)
    if path == "fill":
        monkeypatch.setattr(threads_mod, "FILL_CHUNK_BYTES", 8 * (n + 1) * 6)
        monkeypatch.setattr(threads_mod, "_THREADS", [2])
    out = []
    for forced in (True, False):
        with twins(forced):
            st = RankStatistics(n, 1, group_weight=gw, ties=ties)
            if path == "workspace_f":
                A = st.workspace(len(y))
                A[:, :n] = X
                st.add_block(A[:, :n], y, gp)
            elif path == "fill":
                W_ = st.workspace(len(y), order="C")
                st.add_block(W_[:, :n], y, gp, fill=lambda a, b, o: o.__setitem__(Ellipsis, X[a:b]))
            else:
                st.add_block(X, y, gp)
            out.append((st.G.copy(), st.B.copy(), st.yLy.copy(), st.n_rows, st.n_groups, st.n_pairs))
    (G1, B1, y1, *c1), (G2, B2, y2, *c2) = out
    assert _same_bits(G1, G2) and _same_bits(B1, B2) and _same_bits(y1, y2) and c1 == c2
    ref = RankStatistics(n, 1, group_weight=gw, ties=ties)
    ref.add_block(np.asarray(X, dtype=np.float64), y, gp)
    np.testing.assert_allclose(G1, ref.G, rtol=1e-5 if path == "chunks" else 1e-12, atol=1e-5)


def test_fit_from_arrays_same_coefficients_with_twins_on_and_off():
    import streamrank as sr

    rng = np.random.default_rng(9)
    X, y, qid, _ = make_groups(rng, n_groups=30, n_features=6, max_size=15, levels=3)
    coefs = []
    for forced in (True, False):
        with twins(forced):
            coefs.append(sr.RankRLS(alpha=0.5).fit(X.astype(np.float32), y, qid=qid).coef_)
    assert _same_bits(coefs[0], coefs[1])
