"""RankRLS on a general preference graph (Pahikkala et al. 2009, §2.1–2.4, Theorem 1).

Edges ``(h, j)`` say row h is preferred over row j, optionally with a
magnitude y_e.  The cost is ``Σ_e w_e² (z_e - (f_h - f_j))²`` with

* ``"unit"``       z_e = 1,   w_e = 1          eq. (20)  (RLScore's PPRankRLS)
* ``"magnitude"``  z_e = y_e, w_e = 1          eq. (21)
* ``"normalized"`` z_e = y_e, w_e = 1 / y_e    eq. (22)

The primal statistics follow from ``L = M Mᵀ`` and ``M N = Σ_e w_e² z_e (e_h - e_j)``
(eqs. (12)–(14), (18)): with ``d_e = x_h - x_j``

    G = Σ_e w_e² d_e d_eᵀ,   B = Σ_e w_e² z_e d_e,   yLy = Σ_e w_e² z_e²

accumulated over chunks of edges in float64, O(l n²) time, O(n²) memory.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._validation import check_finite, check_X
from ._gram import _weighted_gram
from ._statistics import RankStatistics

__all__ = ["COSTS", "edge_weights", "edge_statistics"]

COSTS = ("unit", "magnitude", "normalized")
EDGE_CHUNK = 65_536


def edge_weights(n_edges, magnitudes=None, cost="magnitude"):
    """Targets z and squared weights w² of every edge (float64 arrays)."""
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {COSTS}, got {cost!r}")
    if magnitudes is None:
        mag = np.ones(n_edges)
    else:
        mag = np.asarray(magnitudes, dtype=np.float64)
        if mag.shape != (n_edges,):
            raise ValueError(f"magnitudes must have one value per edge ({n_edges},); got shape {mag.shape}")
        check_finite(mag, "magnitudes")
    if cost == "unit":
        return np.ones(n_edges), np.ones(n_edges)
    if cost == "magnitude":
        return mag, np.ones(n_edges)
    zero = np.flatnonzero(mag == 0)
    if zero.size:
        raise ValueError(f'cost="normalized" (eq. 22) divides by the magnitude; edge {int(zero[0])} has magnitude 0')
    return mag, 1.0 / mag**2


def _check_edges(edges, m):
    E = np.asarray(edges)
    if E.ndim != 2 or E.shape[1] != 2:
        raise ValueError("edges must be an (n_edges, 2) integer array of (preferred row, other row); "
                         f"got shape {E.shape}")
    if E.dtype.kind not in "iu":
        if E.dtype.kind == "f" and np.all(np.isfinite(E)) and np.all(E == np.round(E)):
            E = E.astype(np.int64)
        else:
            raise TypeError(f"edges must hold integer row indices; got dtype {E.dtype}")
    E = E.astype(np.int64)
    bad = np.flatnonzero((E < 0).any(axis=1) | (E >= m).any(axis=1))
    if bad.size:
        raise ValueError(f"edges row {int(bad[0])} is {E[bad[0]].tolist()}: row indices must be in [0, {m})")
    loop = np.flatnonzero(E[:, 0] == E[:, 1])
    if loop.size:
        raise ValueError(f"edges row {int(loop[0])} joins row {int(E[loop[0], 0])} to itself")
    return E


def edge_statistics(X, edges, magnitudes=None, *, cost="magnitude", weights=None) -> RankStatistics:
    """:class:`RankStatistics` (one output) of the preference graph ``edges`` over the rows of X.

    ``weights``: optional (n_edges,) factors c_e >= 0 multiplying each edge's
    squared weight w_e² (e.g. the 1/p of inverse propensity scoring,
    :func:`streamrank.clicks.ips_edges`).
    """
    X = check_X(X, "X", finite=True)
    E = _check_edges(edges, X.shape[0])
    if E.shape[0] == 0:
        raise ValueError("edges is empty: at least one preference is needed")
    z, w2 = edge_weights(E.shape[0], magnitudes, cost)
    if weights is not None:
        from ..laplacian import check_weight

        w2 = w2 * check_weight(weights, E.shape[0], "weights")
    st = RankStatistics(X.shape[1], 1)
    for a in range(0, E.shape[0], EDGE_CHUNK):
        h, j = E[a:a + EDGE_CHUNK, 0], E[a:a + EDGE_CHUNK, 1]
        D = X[h] - X[j]
        if not sp.issparse(D):
            D = np.asarray(D, dtype=np.float64)
        ww = w2[a:a + EDGE_CHUNK]
        zz = z[a:a + EDGE_CHUNK]
        st._G += _weighted_gram(D, ww)
        st._B[:, 0] += np.asarray(D.T @ (ww * zz), dtype=np.float64).ravel()
        st._yLy[0] += float(np.sum(ww * zz * zz))
    st.n_rows = X.shape[0]
    st.n_pairs = E.shape[0]
    return st
