"""Numba kernel of the linear pairwise SGD ranker ``w . (x+ - x-)``.

The weight vector is held as ``w = a * v`` (a scalar times a vector), so the
L2 decay ``w <- (1 - eta l2) w`` of every step costs O(1) (only ``a``
changes) and the gradient step touches only the nonzeros of ``x+ - x-``.
Every T steps the cumulative L1 threshold ``l1 * sum(eta_k)`` (the same
soft threshold as the bilinear ranker, eq. 7 of Chen et al. 2010) is
applied to every weight, ``v <- soft(v, thr / a)`` -- O(n_features) once per
T steps.

State arrays owned by the learner: ``fstate = [a, window]``, ``istate = [t]``.
"""
from __future__ import annotations

import numpy as np

from streamrank._numba import jit

from ._sparse_w_kernels import _merge_diff, _soft

__all__ = ["pairwise_steps", "LOSS_HINGE", "LOSS_LOGISTIC"]

LOSS_HINGE, LOSS_LOGISTIC = 0, 1


@jit
def _renormalize(v, fstate):
    a = fstate[0]
    for k in range(v.shape[0]):
        v[k] *= a
    fstate[0] = 1.0


@jit
def pairwise_steps(v, fstate, istate, pp, pi, px, mp, mi, mx,
                   eta0, lr_code, l1, l2, T, loss, dj, dx):
    """One SGD step per pair row r: (X_pos[r], X_neg[r]), in order.

    margin ``m = w . delta`` with ``delta = x+ - x-``; ``g = 1`` if ``m < 1``
    (hinge) or ``g = 1 / (1 + exp(m))`` (logistic); then
    ``w <- (1 - eta l2) w + eta g delta``.  ``eta_t = eta0 / sqrt(t)`` or ``eta0``.
    """
    n = pp.shape[0] - 1
    for r in range(n):
        nd = _merge_diff(pp, pi, px, mp, mi, mx, r, dj, dx)
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
        if g != 0.0:
            c = eta * g / a
            for b in range(nd):
                v[dj[b]] += c * dx[b]
        if a < 1e-100:
            _renormalize(v, fstate)
        fstate[1] += eta
        if t % T == 0:
            thr = l1 * fstate[1]
            fstate[1] = 0.0
            if thr > 0.0:
                _renormalize(v, fstate)
                for k in range(v.shape[0]):
                    v[k] = _soft(v[k], thr)
