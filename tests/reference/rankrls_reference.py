"""Brute-force RankRLS: every preference pair built explicitly, dense solve.

Plain numpy, no streamrank imports: the oracle the learners are checked
against (DESIGN §5).  Cost (21) over within-group pairs, group weights and
tie exclusion applied pair by pair; preference-edge costs (20), (21), (22).
"""
from __future__ import annotations

import numpy as np

__all__ = ["pair_list", "brute_laplacian", "brute_rankrls", "brute_edges", "brute_loss",
           "brute_group_weight"]


def brute_group_weight(n, group_weight):
    if group_weight == "pair":
        return 1.0
    if group_weight == "query":
        return 0.0 if n < 2 else 1.0 / (n * (n - 1) / 2)
    if group_weight == "size":
        return 0.0 if n == 0 else 1.0 / n
    raise ValueError(group_weight)


def pair_list(group_ptr, y=None, *, group_weight="pair", ties="include"):
    """All within-group pairs (i, j, weight) with i < j; tied pairs dropped for ties='exclude'."""
    out = []
    for g in range(len(group_ptr) - 1):
        a, b = int(group_ptr[g]), int(group_ptr[g + 1])
        s = brute_group_weight(b - a, group_weight)
        for i in range(a, b):
            for j in range(i + 1, b):
                if ties == "exclude" and y[i] == y[j]:
                    continue
                out.append((i, j, s))
    return out


def brute_laplacian(m, pairs):
    L = np.zeros((m, m))
    for i, j, w in pairs:
        e = np.zeros(m)
        e[i], e[j] = 1.0, -1.0
        L += w * np.outer(e, e)
    return L


def _solve_pairs(X, z, w, pairs, alpha):
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
    n = X.shape[1]
    if not pairs:
        return np.zeros(n)
    D = np.array([X[i] - X[j] for i, j in pairs])
    A = D.T @ (w[:, None] * D) + alpha * np.eye(n)
    return np.linalg.solve(A, D.T @ (w * z))


def brute_rankrls(X, y, group_ptr, alpha, *, group_weight="pair", ties="include"):
    """w minimising Σ_pairs s_g ((y_i - y_j) - (f_i - f_j))² + alpha ||w||², per output column."""
    y = np.asarray(y, dtype=np.float64)
    Y = y.reshape(len(y), -1)
    cols = []
    for c in range(Y.shape[1]):
        pr = pair_list(group_ptr, Y[:, c], group_weight=group_weight, ties=ties)
        z = np.array([Y[i, c] - Y[j, c] for i, j, _ in pr])
        w = np.array([s for _, _, s in pr])
        cols.append(_solve_pairs(X, z, w, [(i, j) for i, j, _ in pr], alpha))
    W = np.stack(cols, axis=1)
    return W[:, 0] if y.ndim == 1 else W


def brute_loss(f, y, group_ptr, *, group_weight="pair", ties="include"):
    """Σ_pairs s_g ((y_i - y_j) - (f_i - f_j))² per output column (1-D y -> scalar)."""
    y = np.asarray(y, dtype=np.float64)
    Y = y.reshape(len(y), -1)
    F = np.asarray(f, dtype=np.float64).reshape(len(y), -1)
    out = []
    for c in range(Y.shape[1]):
        tot = 0.0
        for i, j, s in pair_list(group_ptr, Y[:, c], group_weight=group_weight, ties=ties):
            tot += s * ((Y[i, c] - Y[j, c]) - (F[i, c] - F[j, c])) ** 2
        out.append(tot)
    return out[0] if y.ndim == 1 else np.array(out)


def brute_edges(X, edges, magnitudes, alpha, cost):
    """Preference-graph RankRLS: Σ_e w_e² (z_e - (f_h - f_j))² + alpha ||w||².

    cost "unit" (20): z=1, w=1; "magnitude" (21): z=mag, w=1; "normalized" (22): z=mag, w=1/mag.
    """
    edges = np.asarray(edges)
    mag = np.ones(len(edges)) if magnitudes is None else np.asarray(magnitudes, dtype=np.float64)
    if cost == "unit":
        z, w2 = np.ones(len(edges)), np.ones(len(edges))
    elif cost == "magnitude":
        z, w2 = mag, np.ones(len(edges))
    else:
        z, w2 = mag, 1.0 / mag**2
    return _solve_pairs(X, z, w2, [(int(h), int(j)) for h, j in edges], alpha)
