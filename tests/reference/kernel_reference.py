"""Brute-force references for kernel, sparse and transductive RankRLS (plain numpy, tiny data).

Everything is built explicitly: the kernel entry by entry, the Laplacian pair
by pair, models by dense solves, hold-outs by retraining on the remaining rows.
"""
from __future__ import annotations

import itertools

import numpy as np


def kernel_ref(X, Z, kernel="rbf", gamma=1.0, degree=2, coef0=0.0):
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
    Z = np.asarray(Z.toarray() if hasattr(Z, "toarray") else Z, dtype=np.float64)
    K = np.empty((X.shape[0], Z.shape[0]))
    for a in range(X.shape[0]):
        for b in range(Z.shape[0]):
            x, z = X[a], Z[b]
            if kernel == "linear":
                K[a, b] = float(np.sum(x * z))
            elif kernel == "rbf":
                K[a, b] = np.exp(-gamma * float(np.sum((x - z) ** 2)))
            elif kernel == "poly":
                K[a, b] = (gamma * float(np.sum(x * z)) + coef0) ** degree
            else:
                raise ValueError(kernel)
    return K


def groups_of(qid):
    qid = np.asarray(qid)
    out = []
    for q in dict.fromkeys(qid.tolist()):
        out.append(np.flatnonzero(qid == q))
    return out


def laplacian_pairs(qid, y=None, group_weight="pair", ties="include"):
    """L = Σ_g s_g Σ_{i<j in g, counted pairs} (e_i − e_j)(e_i − e_j)ᵀ, pair by pair."""
    qid = np.asarray(qid)
    m = qid.shape[0]
    L = np.zeros((m, m))
    for rows in groups_of(qid):
        n = len(rows)
        if group_weight == "pair":
            s = 1.0
        elif group_weight == "query":
            s = 0.0 if n < 2 else 1.0 / (n * (n - 1) / 2)
        else:
            s = 1.0 / n
        for i, j in itertools.combinations(rows, 2):
            if ties == "exclude" and y[i] == y[j]:
                continue
            e = np.zeros(m)
            e[i], e[j] = 1.0, -1.0
            L += s * np.outer(e, e)
    return L


def dual_ref(K, L, y, lam):
    """A = (L K + λ I)⁻¹ L y by a dense solve."""
    m = K.shape[0]
    return np.linalg.solve(L @ K + lam * np.eye(m), L @ y)


def dual_objective_ref(K, L, y, lam):
    """Minimiser of (y − KA)ᵀL(y − KA) + λAᵀKA through its normal equations (any PSD K)."""
    M = K @ L @ K + lam * K
    A = np.linalg.lstsq(M, K @ L @ y, rcond=None)[0]
    return A


def fit_predict_ref(X, y, qid, Xt, lam, kern, group_weight="pair", ties="include"):
    """Retrain on (X, y, qid) densely and predict Xt."""
    K = kern(X, X)
    L = laplacian_pairs(qid, y if ties == "exclude" else None, group_weight, ties)
    A = dual_ref(K, L, y, lam)
    return kern(Xt, X) @ A


def sparse_ref(K_RM, K_RR, L, y, lam):
    """(K_RM L K_MR + λ K_RR)⁻¹ K_RM L y, dense."""
    return np.linalg.solve(K_RM @ L @ K_RM.T + lam * K_RR, K_RM @ L @ y)


def transductive_ref(X_lab, y_lab, qid_lab, X_unl, qid_unl, lam, gamma_t, kern, group_weight="query"):
    """Direct minimisation of objective (11) of the transductive paper by a dense least-squares solve.

    J(Ŷ) = Σ_U (Y^V_U − f^V_Ū(X_U))ᵀ L_UU (Y^V_U − f^V_Ū(X_U)) + γ ‖Ŷ − f_V̄(X_V)‖², every query a fold;
    f^V_Ū is retrained densely on all rows outside U with the unlabelled targets set to Ŷ, so its
    predictions are linear in Ŷ: J is an explicit least-squares problem in Ŷ.
    """
    X = np.vstack([X_lab, X_unl])
    qid = np.concatenate([qid_lab, qid_unl])
    m, ml = X.shape[0], X_lab.shape[0]
    V = np.arange(ml, m)
    nv = len(V)
    K = kern(X, X)
    # Y^V = y0 + P Ŷ
    y0 = np.concatenate([y_lab, np.zeros(nv)])
    Pm = np.zeros((m, nv))
    Pm[V, np.arange(nv)] = 1.0
    rows_A, rows_b = [], []
    for U in groups_of(qid):
        Ub = np.setdiff1d(np.arange(m), U)
        Lbb = laplacian_pairs(qid[Ub], None, group_weight)
        # f_Ū(X_U) = K_UŪ (L_ŪŪ K_ŪŪ + λI)⁻¹ L_ŪŪ Y_Ū   — a matrix applied to Y_Ū
        Gm = K[np.ix_(U, Ub)] @ np.linalg.solve(Lbb @ K[np.ix_(Ub, Ub)] + lam * np.eye(len(Ub)), Lbb)
        E = np.zeros((len(U), m))
        E[:, U] = np.eye(len(U))
        E[:, Ub] -= Gm
        LUU = laplacian_pairs(qid[U], None, group_weight)
        w, Vl = np.linalg.eigh(LUU)
        S = (Vl * np.sqrt(np.maximum(w, 0))) @ Vl.T
        rows_A.append(S @ E @ Pm)
        rows_b.append(-S @ E @ y0)
    f0 = fit_predict_ref(X_lab, y_lab, qid_lab, X_unl, lam, kern, group_weight)
    rows_A.append(np.sqrt(gamma_t) * np.eye(nv))
    rows_b.append(np.sqrt(gamma_t) * f0)
    A = np.vstack(rows_A)
    b = np.concatenate(rows_b)
    return np.linalg.lstsq(A, b, rcond=None)[0]
