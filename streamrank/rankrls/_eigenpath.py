"""Every λ from one eigendecomposition: ``w(λ) = V (Λ + λ)⁻¹ Vᵀ B`` (DESIGN §3.2).

Serves the primal RankRLS path, leave-query-out and k-fold selection, and the
r-dimensional problem of sparse kernel RankRLS.
"""
from __future__ import annotations

import numpy as np

__all__ = ["EigenPath"]


class EigenPath:
    """Every λ of ``w(λ) = (G + λ I)⁻¹ B`` from one eigendecomposition ``G = V Λ Vᵀ``.

    DESIGN §3.2: ``w(λ) = V (Λ + λ)⁻¹ Vᵀ B`` costs O(n² v) per λ after the
    O(n³) eigendecomposition.  Negative round-off eigenvalues of the PSD G are
    clipped to 0.  G may be a stack (v, n, n) of per-output Grams (column k of
    B with G[k]): then one eigendecomposition per output.

    Attributes
    ----------
    parts : list of (cols, eigenvalues, V, VᵀB[:, cols]) — one entry for a
        shared G (all columns), one per output for a stack.
    eigenvalues, V, VtB : those of the shared G (None for a stack).
    """

    def __init__(self, G, B):
        G = np.asarray(G, dtype=np.float64)
        B = np.asarray(B, dtype=np.float64)
        self.one_d = B.ndim == 1
        B2 = B[:, None] if self.one_d else B
        stacked = G.ndim == 3
        ok = (G.ndim in (2, 3) and G.shape[-1] == G.shape[-2] and B2.ndim == 2 and B2.shape[0] == G.shape[-1]
              and (not stacked or G.shape[0] == B2.shape[1]))
        if not ok:
            raise ValueError(f"G must be (n, n) or (v, n, n) and B (n,) or (n, v); got {G.shape} and {B.shape}")
        self.n_features, self.n_outputs = B2.shape
        self.parts = []
        for k, Gk in enumerate(G if stacked else [G]):
            lam, V = np.linalg.eigh((Gk + Gk.T) / 2.0)
            cols = np.array([k]) if stacked else np.arange(B2.shape[1])
            self.parts.append((cols, np.maximum(lam, 0.0), V, V.T @ B2[:, cols]))
        self.shared = not stacked
        if self.shared:
            _, self.eigenvalues, self.V, self.VtB = self.parts[0]
        else:
            self.eigenvalues = self.V = self.VtB = None

    def _check(self, alpha):
        alpha = float(alpha)
        if not np.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
        return alpha

    def coef(self, alpha) -> np.ndarray:
        """w(λ): (n,) for 1-D B, else (n, v)."""
        alpha = self._check(alpha)
        W = np.empty((self.n_features, self.n_outputs))
        for cols, lam, V, VtB in self.parts:
            W[:, cols] = V @ (VtB / (lam + alpha)[:, None])
        return W[:, 0] if self.one_d else W

    def coefs(self, alphas) -> np.ndarray:
        """Stack of w(λ) for every λ: (a, n) or (a, n, v)."""
        alphas = np.atleast_1d(alphas)
        if len(alphas):
            return np.stack([self.coef(a) for a in alphas])
        return np.zeros((0, self.n_features) + (() if self.one_d else (self.n_outputs,)))

    def _shared_only(self, what):
        if not self.shared:
            raise NotImplementedError(f"EigenPath.{what}: G is a per-output stack; use parts[k]")

    def apply_inverse(self, alpha, R) -> np.ndarray:
        """(G + λI)⁻¹ R for R (n,) or (n, k) (shared G only)."""
        self._shared_only("apply_inverse")
        alpha = self._check(alpha)
        R = np.asarray(R, dtype=np.float64)
        Rv = self.V.T @ R
        Rv = Rv / ((self.eigenvalues + alpha)[:, None] if R.ndim == 2 else (self.eigenvalues + alpha))
        return self.V @ Rv

    def inverse(self, alpha) -> np.ndarray:
        """(G + λI)⁻¹ as a dense (n, n) array (shared G only)."""
        self._shared_only("inverse")
        alpha = self._check(alpha)
        return (self.V / (self.eigenvalues + alpha)) @ self.V.T
