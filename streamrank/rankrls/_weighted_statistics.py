"""Row weights in :class:`~streamrank.rankrls._statistics.RankStatistics` (pair weight w_i w_j).

L_g = s_g ((Σw) diag(w) − w wᵀ) is diagonal plus rank one: whole groups cost
what they cost unweighted; a weighted piece of a split group keeps
O((n + v)²) moments until its last piece.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _laplacian_kernels as _k
from ..laplacian import group_weights, tie_classes
from ._gram import _pair_count, _syrk, _weighted_gram, _weighted_sums, _weighted_xty

__all__ = ["WeightedRows"]


class WeightedRows:
    """Whole weighted groups and weighted pieces of split groups (a part of RankStatistics)."""

    def _add_weighted(self, Phi, Y, gp, w, s, size):
        """Add whole groups with row weights w (pair weight w_i w_j), exactly, O(rows (n + v)²).

        With W_g = Σ_{i in g} w_i the weighted group Laplacian is (see
        :mod:`streamrank.laplacian`; cost (21), matrix form (24)–(25) of
        Pahikkala et al. 2009 with the edge weights of (20)/(22) replaced by
        w_i w_j)

            L_g = s_g ((W_g) diag(w) - w wᵀ)               diagonal plus rank one,

        so, with d_i = s_g W_g w_i and the weighted sums S_g = Σ w_i φ_i,
        S_y = Σ w_i y_i (one pass over the rows)

            G += Φᵀ diag(d) Φ - s_g S_g S_gᵀ,  B += Φᵀ (d ∘ Y) - s_g S_g S_yᵀ,
            yLy += Σ d_i y_i² - s_g S_y².

        Equivalently L_g = s_g W_g (diag(w) - w wᵀ / W_g) is a weighted
        centring: ``Φ_gᵀ L_g Φ_g = Σ_i d_i (φ_i - m_g)(φ_i - m_g)ᵀ`` with the
        weighted mean m_g = S_g / W_g — the dense ties="include" path uses
        this form (rows centred by m_g, scaled by √d_i, one SYRK: no
        cancellation between a diagonal and a low-rank part).  w ≡ 1 gives
        W_g = n_g and the unweighted statistics (to rounding).

        ties="exclude" removes the tied pairs of every tie class c
        (W_c = Σ_c w_i, S_c = Σ_c w_i φ_i): the diagonal becomes
        d^G_i = s_g w_i (W_g - W_c(i)) and G gains + s_g S_c S_cᵀ; B and yLy do
        not change (a tied pair has y_i - y_j = 0).  A group with one class
        (all tied) contributes nothing.  A group whose weights sum to 0
        contributes nothing.  ``n_pairs`` still counts row pairs, unweighted.
        Cost: O(rows (n + v)) for the sums and the scaled copy plus the
        O(rows n²) Gram products — the cost of the unweighted pass.
        """
        n, v = self.n_features, self.n_outputs
        rows = int(gp[-1])
        n_groups = gp.shape[0] - 1
        sparse = sp.issparse(Phi)
        gid = np.repeat(np.arange(n_groups), np.diff(gp))
        Wg = np.bincount(gid, weights=w, minlength=n_groups)
        d = (s * Wg)[gid] * w
        if rows:
            if self.ties == "include" and not sparse:
                # weighted centring, one SYRK of [√d (Φ - m_g) | √d (Y - m_y,g)]
                Z = np.empty((rows, n + v))
                Z[:, :n] = Phi
                Z[:, n:] = Y
                T = _k.id_sums(Z * w[:, None], gid, n_groups)
                inv = np.zeros(n_groups)
                np.divide(1.0, Wg, out=inv, where=Wg > 0)
                Z -= (T * inv[:, None])[gid]
                Z *= np.sqrt(d)[:, None]
                _syrk(1.0, Z, self._accumulator())
            else:
                dG = d
                kept = None
                if self.ties == "exclude":
                    cid, cgroup, csize = tie_classes(Y[:, 0], gp)
                    # one-row classes: their -s w_i² φφᵀ (diagonal) and +s w_i² φφᵀ (class term) cancel
                    Wc = np.where(csize > 1, np.bincount(cid, weights=w, minlength=len(cgroup)), 0.0)
                    dead = np.zeros(n_groups, dtype=bool)    # one class = all tied
                    dead[cgroup[csize == size[cgroup]]] = True
                    kept = np.flatnonzero((csize > 1) & ~dead[cgroup])
                    d = np.where(dead[gid], 0.0, d)
                    dG = np.where(dead[gid], 0.0, np.maximum(s[gid] * w * (Wg[gid] - Wc[cid]), 0.0))
                sg = np.where(Wg > 0, s, 0.0)
                if self.ties == "exclude":
                    sg = np.where(dead, 0.0, sg)
                S = _weighted_sums(Phi, gid, n_groups, w)
                Sy = _k.id_sums(Y * w[:, None], gid, n_groups)
                self._G += _weighted_gram(Phi, dG) - _weighted_gram(S, sg)
                self._B += _weighted_xty(Phi, d, Y) - _weighted_xty(S, sg, Sy)
                self._yLy += (d[:, None] * Y * Y).sum(axis=0) - (sg[:, None] * Sy * Sy).sum(axis=0)
                if kept is not None and kept.size:
                    relabel = np.full(len(cgroup), -1, dtype=np.int64)
                    relabel[kept] = np.arange(kept.size)
                    r = np.flatnonzero(relabel[cid] >= 0)
                    Sc = _weighted_sums(Phi[r], relabel[cid[r]], kept.size, w[r])
                    self._G += _weighted_gram(Sc, s[cgroup[kept]])
        self.n_rows += rows
        self.n_groups += n_groups
        self.n_pairs += int(_pair_count(size).sum())
        if self.ties == "exclude" and rows:
            self.n_pairs -= int(_pair_count(csize).sum())

    def _add_weighted_piece(self, gid, Phi, Y, w, size):
        """A piece of a split group with row weights: keep its moments until the group is complete.

        The diagonal part s_g W_g Σ w_i z_iᵀ z_i (z = [φ, y]) needs the whole
        group's weight sum W_g, so the piece adds M = Σ w_i z_i z_iᵀ ((n + v)²)
        and T = Σ w_i z_i to the open group (O((n + v)²) memory per open
        group; plus, with ties="exclude", W_c, S_c and M_c = Σ_c w_i φ_i φ_iᵀ per
        distinct target value), and :meth:`_close_weighted` adds
        s_g (W_g M - T Tᵀ) (minus s_g (W_c M_c - S_c S_cᵀ) per tie class).
        """
        P = Phi.toarray() if sp.issparse(Phi) else np.asarray(Phi, dtype=np.float64)
        Z = np.hstack([P, Y])
        st = self._open_w.setdefault(gid, [0, size, 0.0, 0.0, 0.0, {}])
        if st[1] != size:
            raise ValueError(f"group {gid} was announced with {st[1]} rows and now with {size}")
        st[0] += Z.shape[0]
        if st[0] > size:
            raise ValueError(f"group {gid} received {st[0]} rows but has only {size}: a piece was added twice")
        st[2] = st[2] + float(w.sum())
        st[3] = st[3] + (Z * w[:, None]).T @ Z
        st[4] = st[4] + w @ Z
        if self.ties == "exclude":
            for val in np.unique(Y[:, 0]):
                r = Y[:, 0] == val
                c = st[5].setdefault(float(val), [0, 0.0, 0.0, 0.0])
                c[0] += int(r.sum())
                c[1] += float(w[r].sum())
                c[2] = c[2] + w[r] @ P[r]
                c[3] = c[3] + (P[r] * w[r][:, None]).T @ P[r]
        self._close_weighted(gid)

    def _close_weighted(self, gid):
        rows, size, W, M, T, classes = self._open_w[gid]
        if rows < size:
            return
        del self._open_w[gid]
        n = self.n_features
        s = float(group_weights(np.array([size]), self.group_weight)[0])
        if self.ties == "exclude" and len(classes) == 1:     # all tied: no pair
            s = 0.0
        C = s * (W * M - np.outer(T, T))
        for cnt, Wc, Sc, Mc in classes.values():
            if cnt > 1:
                C[:n, :n] -= s * (Wc * Mc - np.outer(Sc, Sc))
                self.n_pairs -= int(_pair_count(cnt))
        self._G += C[:n, :n]
        self._B += C[:n, n:]
        self._yLy += np.diag(C[n:, n:])
        self.n_rows += rows
        self.n_groups += 1
        self.n_pairs += int(_pair_count(size))
