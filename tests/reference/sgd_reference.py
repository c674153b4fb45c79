"""Slow, literal numpy implementations of the SGD rankers, for the tests only.

* :func:`algorithm1` -- Algorithm 1 of Chen et al. 2010 with a dense W:
  hinge subgradient step ``W += eta_t q (d+ - d-)^T`` when
  ``q^T W (d+ - d-) < 1``, and every T steps the soft threshold of every
  entry by ``l1 * sum(eta_k, k = t-T+1..t)`` (eq. 7);
* :func:`refit` -- eq. 8: the same SGD without L1 on the support Omega,
  ``W += eta P_Omega(q (d+ - d-)^T)``, step size continuing at ``t + k``;
* :func:`pairwise_sgd` -- the linear pairwise ranker on given pairs.

Everything is written plainly, one tuple at a time, with dense arrays.
"""
from __future__ import annotations

import numpy as np


def _dense(M):
    return M.toarray() if hasattr(M, "toarray") else np.asarray(M, dtype=np.float64)


def soft(W, thr):
    return np.sign(W) * np.maximum(np.abs(W) - thr, 0.0)


def algorithm1(Q, Dp, Dn, *, eta0, l1, T, init="identity", learning_rate="invsqrt",
               W0=None, t0=0, window0=0.0):
    """Dense Algorithm 1 over the tuples (rows) in order; returns (W, t, window)."""
    Q, Dp, Dn = _dense(Q), _dense(Dp), _dense(Dn)
    if W0 is not None:
        W = np.array(W0, dtype=np.float64)
    elif init == "identity":
        W = np.eye(Q.shape[1], Dp.shape[1])
    else:
        W = np.zeros((Q.shape[1], Dp.shape[1]))
    t = t0
    window = window0
    for r in range(Q.shape[0]):
        t += 1
        eta = eta0 / np.sqrt(t) if learning_rate == "invsqrt" else eta0
        q = Q[r]
        delta = Dp[r] - Dn[r]
        if 1.0 - q @ W @ delta > 0:
            W = W + eta * np.outer(q, delta)
        window += eta
        if t % T == 0:
            W = soft(W, l1 * window)
            window = 0.0
    return W, t, window


def refit(W, Q, Dp, Dn, *, eta0, t0, learning_rate="invsqrt"):
    """Eq. 8: SGD on P_Omega(W), Omega = support of W; step k uses eta0 / sqrt(t0 + k)."""
    Q, Dp, Dn = _dense(Q), _dense(Dp), _dense(Dn)
    W = np.array(W, dtype=np.float64)
    omega = W != 0
    for r in range(Q.shape[0]):
        t = t0 + r + 1
        eta = eta0 / np.sqrt(t) if learning_rate == "invsqrt" else eta0
        q = Q[r]
        delta = Dp[r] - Dn[r]
        if 1.0 - q @ W @ delta > 0:
            W = W + eta * np.where(omega, np.outer(q, delta), 0.0)
    return W


def pairwise_sgd(X, pairs, *, eta0, l1, l2, T, loss="hinge", learning_rate="invsqrt",
                 w0=None, t0=0, window0=0.0, weights=None):
    """Linear pairwise SGD on the ordered pairs (i preferred over j), in order.

    Step t: ``w <- (1 - eta l2) w + eta c_t g (x_i - x_j)`` with ``g = 1`` when the
    hinge margin ``w.(x_i - x_j) < 1`` (else 0), or ``g = sigmoid(-margin)``
    for the logistic loss, ``c_t`` the pair's weight (``weights``, default 1);
    every T steps ``w <- soft(w, l1 * sum eta)``.
    """
    X = _dense(X)
    w = np.zeros(X.shape[1]) if w0 is None else np.array(w0, dtype=np.float64)
    t = t0
    window = window0
    for k, (i, j) in enumerate(pairs):
        c = 1.0 if weights is None else float(weights[k])
        t += 1
        eta = eta0 / np.sqrt(t) if learning_rate == "invsqrt" else eta0
        x = X[i] - X[j]
        m = w @ x
        if loss == "hinge":
            g = 1.0 if m < 1.0 else 0.0
        else:
            g = 1.0 / (1.0 + np.exp(m))
        w = (1.0 - eta * l2) * w + eta * c * g * x
        window += eta
        if t % T == 0:
            w = soft(w, l1 * window)
            window = 0.0
    return w, t, window
