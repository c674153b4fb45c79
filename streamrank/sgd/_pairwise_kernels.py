"""Numba kernel of the linear pairwise SGD ranker ``w . (x+ - x-)``.

The weight vector is held as ``w = a * v`` (a scalar times a vector), so the
L2 decay ``w <- (1 - eta l2) w`` of every step costs O(1) (only ``a``
changes) and the gradient step touches only the nonzeros of ``x+ - x-``.

Two L1 rules (``l1_rule``):

* ``L1_CUMULATIVE`` -- the cumulative penalty of Tsuruoka, Tsujii & Ananiadou
  (ACL 2009, Fig. 2), as in scikit-learn's ``SGDClassifier``: the total
  penalty one weight could have received so far is ``u_t = l1 * sum_{k<=t}
  eta_k``; ``q_j`` is the (signed) penalty weight j actually received.  After
  the gradient step of t, every weight j touched by ``x+ - x-`` becomes::

      w_j > 0:  w_j <- max(0, w_j - (u_t + q_j))
      w_j < 0:  w_j <- min(0, w_j + (u_t - q_j))
      q_j    <- q_j + (w_j(new) - w_j(old))

  so a weight leaves zero only when its gradients since it last sat at zero
  outweigh the whole penalty accumulated meanwhile -- the noise of the
  stochastic gradient is not enough.  O(nnz(x+ - x-)) per step.
* ``L1_WINDOW`` -- the paper's rule (Chen et al. 2010, eq. 7 and Algorithm 1
  step 4): every T steps every weight is soft-thresholded by the threshold
  of that window, ``l1 * sum(eta_k, k = t-T+1..t)`` -- O(n_features) once
  per T steps.  Each window starts from scratch, so a weight whose gradient
  is pure noise survives whenever its walk over T steps (~ sqrt(T) eta)
  exceeds ``l1 T eta``.

The step itself (:func:`pairwise_step`) takes the difference row as
``(dj, dx, nd)`` and is shared by the CSR kernel :func:`pairwise_steps`
(difference by :func:`merge_diff`) and its dense twin
:func:`pairwise_steps_dense` (difference by :func:`dense_diff`, no CSR
conversion), so both run the same arithmetic in the same order.

State arrays owned by the learner: ``fstate = [a, window, u]``, ``istate =
[t]``, ``qv`` (n_features, float64: the ``q_j`` of the cumulative rule).
"""
from __future__ import annotations

import numpy as np

from streamrank._numba import jit

from ._sparse_row_kernels import merge_diff, soft

__all__ = ["pairwise_steps", "pairwise_steps_dense", "pairwise_steps_weighted", "pairwise_steps_dense_weighted",
           "pairwise_step", "dense_diff",
           "merge_diff", "soft", "LOSS_HINGE", "LOSS_LOGISTIC",
           "L1_CUMULATIVE", "L1_WINDOW"]

LOSS_HINGE, LOSS_LOGISTIC = 0, 1
L1_CUMULATIVE, L1_WINDOW = 0, 1


@jit
def _renormalize(v, fstate):
    a = fstate[0]
    for k in range(v.shape[0]):
        v[k] *= a
    fstate[0] = 1.0


@jit(inline="always")  # numba-level inlining: a plain call cost the CSR kernel ~14%
def pairwise_step(v, fstate, istate, qv, eta0, lr_code, l1, l2, T, loss, l1_rule, dj, dx, nd, wt):
    """One SGD step on the difference row ``delta = x+ - x-`` held as ``(dj[:nd], dx[:nd])``.

    ``dj`` ascending and distinct, ``dx`` nonzero (what :func:`merge_diff` and
    :func:`dense_diff` produce).  margin ``m = w . delta``; ``g = 1`` if
    ``m < 1`` (hinge) or ``g = 1 / (1 + exp(m))`` (logistic); then
    ``w <- (1 - eta l2) w + eta wt g delta``, then the L1 rule (module doc).
    ``wt`` >= 0 is the pair's weight (the gradient of ``wt * loss``; 1.0 leaves
    every bit as unweighted: ``(eta g) * 1.0 = eta g``); the decay, the clock and the
    L1 penalty do not depend on it.
    ``eta_t = eta0 / sqrt(t)`` or ``eta0``.  Shared by the CSR and dense kernels.
    """
    istate[0] += 1
    t = istate[0]
    if lr_code == 0:
        eta = eta0 / np.sqrt(np.float64(t))
    else:
        eta = eta0
    a = fstate[0]
    m = 0.0
    for b in range(nd):
        m += v[dj[b]] * dx[b]
    m *= a
    if loss == 0:
        g = 1.0 if m < 1.0 else 0.0
    else:
        if m > 0:
            e = np.exp(-m)
            g = e / (1.0 + e)
        else:
            g = 1.0 / (1.0 + np.exp(m))
    decay = 1.0 - eta * l2
    if decay <= 0.0:
        for k in range(v.shape[0]):
            v[k] = 0.0
        a = 1.0
    else:
        a *= decay
    fstate[0] = a
    c = eta * g * wt / a
    if l1_rule == 0 and l1 > 0.0:
        # gradient step and penalty in one pass: each j occurs once in dj
        fstate[2] += l1 * eta
        u = fstate[2]
        inv_a = 1.0 / a
        for b in range(nd):
            j = dj[b]
            z = v[j] + c * dx[b]
            if z > 0.0:
                nv = z - (u + qv[j]) * inv_a
                nv = nv if nv > 0.0 else 0.0
            elif z < 0.0:
                nv = z + (u - qv[j]) * inv_a
                nv = nv if nv < 0.0 else 0.0
            else:
                nv = 0.0
            v[j] = nv
            qv[j] += a * (nv - z)
    elif g != 0.0:
        for b in range(nd):
            v[dj[b]] += c * dx[b]
    if l1_rule == 0:
        if a < 1e-100:
            _renormalize(v, fstate)
    else:
        if a < 1e-100:
            _renormalize(v, fstate)
        fstate[1] += eta
        if t % T == 0:
            thr = l1 * fstate[1]
            fstate[1] = 0.0
            if thr > 0.0:
                _renormalize(v, fstate)
                for k in range(v.shape[0]):
                    v[k] = soft(v[k], thr)


@jit(inline="always")
def dense_diff(Xp, Xn, r, dj, dx):
    """Row r of dense X_pos minus row r of dense X_neg into (dj, dx); exact zeros dropped.

    Ascending feature index, each difference computed in float64 -- the same
    (dj, dx) as :func:`merge_diff` on the CSR form of the two rows.
    """
    n = 0
    for j in range(Xp.shape[1]):
        v = np.float64(Xp[r, j]) - np.float64(Xn[r, j])
        if v != 0.0:
            dj[n] = j
            dx[n] = v
            n += 1
    return n


@jit
def pairwise_steps(v, fstate, istate, qv, pp, pi, px, mp, mi, mx,
                   eta0, lr_code, l1, l2, T, loss, l1_rule, dj, dx):
    """One SGD step per pair row r: (X_pos[r], X_neg[r]) as CSR, in order (:func:`pairwise_step`)."""
    n = pp.shape[0] - 1
    for r in range(n):
        nd = merge_diff(pp, pi, px, mp, mi, mx, r, dj, dx)
        pairwise_step(v, fstate, istate, qv, eta0, lr_code, l1, l2, T, loss, l1_rule, dj, dx, nd, 1.0)


@jit
def pairwise_steps_weighted(v, fstate, istate, qv, pp, pi, px, mp, mi, mx, pw,
                            eta0, lr_code, l1, l2, T, loss, l1_rule, dj, dx):
    """:func:`pairwise_steps` with pair r's gradient weighted by ``pw[r]`` (e.g. inverse propensities)."""
    n = pp.shape[0] - 1
    for r in range(n):
        nd = merge_diff(pp, pi, px, mp, mi, mx, r, dj, dx)
        pairwise_step(v, fstate, istate, qv, eta0, lr_code, l1, l2, T, loss, l1_rule, dj, dx, nd, pw[r])


@jit
def pairwise_steps_dense(v, fstate, istate, qv, Xp, Xn,
                         eta0, lr_code, l1, l2, T, loss, l1_rule, dj, dx):
    """Twin of :func:`pairwise_steps` for dense row-aligned (Xp, Xn); dj, dx of length n_features.

    Bit-identical to :func:`pairwise_steps` on the CSR form of the same rows.
    """
    for r in range(Xp.shape[0]):
        nd = dense_diff(Xp, Xn, r, dj, dx)
        pairwise_step(v, fstate, istate, qv, eta0, lr_code, l1, l2, T, loss, l1_rule, dj, dx, nd, 1.0)


@jit
def pairwise_steps_dense_weighted(v, fstate, istate, qv, Xp, Xn, pw,
                                  eta0, lr_code, l1, l2, T, loss, l1_rule, dj, dx):
    """Dense twin of :func:`pairwise_steps_weighted` (bit-identical on the CSR form of the same rows)."""
    for r in range(Xp.shape[0]):
        nd = dense_diff(Xp, Xn, r, dj, dx)
        pairwise_step(v, fstate, istate, qv, eta0, lr_code, l1, l2, T, loss, l1_rule, dj, dx, nd, pw[r])
