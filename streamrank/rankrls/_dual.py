"""Linear algebra of dual (kernel) RankRLS: one decomposition for every λ and hold-out.

Dual RankRLS (Pahikkala et al. 2009, eq. (17); DESIGN §3.4) is

    A = (L K + λ I)⁻¹ L y,        f(x) = k(x, X) A.

Symmetric formulation used here.  The block-diagonal group Laplacian has a
block-diagonal symmetric square root ``L = B B`` (``B = L^{1/2}``; with ties
included ``B_g = √(s_g n_g) (I − 11ᵀ/n_g)``, the group centring, applied in
O(rows); with ties excluded ``B_g`` comes from a small eigendecomposition of
each ``L_g``).  The push-through identity ``(BBK + λI)⁻¹ B = B (BKB + λI)⁻¹``
gives

    A(λ) = B (BKB + λI)⁻¹ B y = B U (Λ + λ)⁻¹ Uᵀ B y,      BKB = U Λ Uᵀ,

so ONE symmetric eigendecomposition (O(m³)) serves every λ (O(m² v) each,
the paper's eq. (31) without the non-symmetric eigenproblem of LK) and needs
neither K⁻¹ nor a positive definite K: a semidefinite kernel (e.g. the linear
kernel with fewer features than rows) needs no diagonal shift.  Training
predictions are ``F(λ) = (K B U)(Λ + λ)⁻¹ Uᵀ B y``; ``K B U`` needs no m³ product:
with ``B⁺`` the pseudo-inverse and E an orthonormal basis of null(B) (the
group constants), ``I = B⁺B + EEᵀ`` gives ``K B U = B⁺ U Λ + E (Eᵀ K B) U``,
O(q m²) for q groups — so the eigendecomposition is the only O(m³) step.

Leave-query-out (the block form of eq. (33)).  With ``N = BKB + λI``,
``P = N⁻¹ = U (Λ+λ)⁻¹ Uᵀ``, ``c = P B y`` and a hold-out set H that is a union
of groups (B is block-diagonal over groups, so removing H's rows of the
problem removes H's rows and columns of N), the block-inverse formula
``(N_H̄H̄)⁻¹ = P_H̄H̄ − P_H̄H P_HH⁻¹ P_HH̄`` collapses to

    f_{−H}(X_H) = F_H − (K B P)_{H,H} (P_HH)⁻¹ c_H,

i.e. O(m |H| + |H|³) per hold-out set from the stored ``U``, ``KBU``, Λ.

Leave-pair-out for object ranking (one group; §3.4, eqs. (35)–(39)) lives in
:func:`leave_pair_out` (ties included) and :class:`LeavePairOutExcludeTies`.
Every group weighting is exact: with qid=None the weight s is one constant of
the whole Laplacian, and retraining on m − 2 rows uses ``s' = s(m − 2)``,
so the stored matrices are built with s' (a rescaling, no approximation).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as la

from ..laplacian import group_weights, laplacian_dense, tie_classes

__all__ = ["LaplacianRoot", "DualDecomposition", "LeavePairOut", "LeavePairOutExcludeTies", "leave_pair_out",
           "check_psd"]

#: hold-out sets smaller than this are stacked by size (leave-query-out)
_BATCH_BELOW = 64
#: entries of U gathered at once for stacked hold-out sets
_STACK_ENTRIES = 1 << 23


class LaplacianRoot:
    """The symmetric block-diagonal square root ``B = L^{1/2}`` of the group Laplacian.

    ``apply(M)`` returns ``B @ M`` for M (m, k) in O(m k) (ties included) or
    O(Σ n_g² k) (ties excluded, or row weights).

    ``weight``: row weights w (m,), pair weight w_i w_j — the weighted group
    Laplacian ``L_g = s_g ((Σw) diag(w) − w wᵀ)`` (ties included; with ties
    excluded the weighted tie classes, :mod:`streamrank.laplacian`).  Its root
    is taken per group from a small eigendecomposition, as with ties
    excluded; the dual ``A = (L K + λI)⁻¹ L y`` holds for any PSD L, so every
    formula of this module (path, leave-query-out) keeps working.  The null
    space of ``L_g`` is the group constants plus ``e_i`` of every row of weight 0.
    """

    def __init__(self, group_ptr, y=None, *, group_weight="pair", ties="include", weight=None):
        gp = np.asarray(group_ptr, dtype=np.int64)
        self.group_ptr = gp
        self.m = int(gp[-1])
        sizes = np.diff(gp)
        self.sizes = sizes
        self.ties = ties
        if ties == "include" and weight is None:
            s = group_weights(sizes, group_weight)
            self.scale = np.sqrt(s * sizes)            # √(s_g n_g)
            self.blocks = None
        else:
            yy = None
            if ties == "exclude":
                yy = np.asarray(y, dtype=np.float64).reshape(self.m, -1)
                if yy.shape[1] != 1:
                    raise NotImplementedError(
                        "ties='exclude' with several outputs: every output has its own tie classes and so "
                        "its own Laplacian; fit one model per output or use ties='include'")
                yy = yy[:, 0]
            w = None if weight is None else np.asarray(weight, dtype=np.float64).reshape(-1)
            blocks, pinv, null = [], [], []
            for g in range(len(sizes)):
                a, b = gp[g], gp[g + 1]
                # the pair/size/query weight of the group uses its full size
                Lg = laplacian_dense(np.array([0, b - a]), y=None if yy is None else yy[a:b],
                                     group_weight=group_weight, ties=ties, weight=None if w is None else w[a:b])
                lam, V = np.linalg.eigh(Lg) if b > a else (np.zeros(0), np.zeros((0, 0)))
                lam = np.maximum(lam, 0.0)
                pos = lam > (lam.max(initial=0.0) * max(b - a, 1) * np.finfo(float).eps * 100)
                blocks.append((V * np.sqrt(lam)) @ V.T)
                pinv.append((V[:, pos] / np.sqrt(lam[pos])) @ V[:, pos].T)
                null.append(np.ascontiguousarray(V[:, ~pos]))
            self.blocks, self.pinv_blocks, self.null_blocks = blocks, pinv, null
            self.scale = None

    def apply(self, M, *, inplace: bool = False) -> np.ndarray:
        """``B @ M`` (M of shape (m,) or (m, k)) as float64; ``inplace=True`` overwrites a float64 M.

        Works group by group on row slices, so the only temporaries are of
        one group's size (no (m, k) temporary beside the output).
        """
        M = np.asarray(M, dtype=np.float64)
        one = M.ndim == 1
        M2 = M[:, None] if one else M
        gp = self.group_ptr
        if self.blocks is None:
            out = M2 if inplace else np.array(M2, dtype=np.float64, order="C")
            for g in range(len(self.sizes)):
                a, b = gp[g], gp[g + 1]
                if b <= a:
                    continue
                piece = out[a:b]
                piece -= piece.mean(axis=0)
                piece *= self.scale[g]
        else:
            out = M2 if inplace else np.empty_like(M2, order="C")
            for g, Bg in enumerate(self.blocks):
                a, b = gp[g], gp[g + 1]
                out[a:b] = Bg @ M2[a:b]
        return out[:, 0] if one else out

    def pinv_apply(self, M) -> np.ndarray:
        """``B⁺ @ M`` in place on a C-ordered float64 (m, k) array M (B⁺ the pseudo-inverse)."""
        gp = self.group_ptr
        if self.blocks is None:
            for g in range(len(self.sizes)):
                a, b = gp[g], gp[g + 1]
                if b <= a:
                    continue
                piece = M[a:b]
                if self.scale[g] > 0:
                    piece -= piece.mean(axis=0)
                    piece *= 1.0 / self.scale[g]
                else:
                    piece[...] = 0.0
        else:
            for g, Pg in enumerate(self.pinv_blocks):
                a, b = gp[g], gp[g + 1]
                M[a:b] = Pg @ M[a:b]
        return M

    def null_cols(self, M) -> np.ndarray:
        """``M E`` for M (k, m), E the orthonormal basis of null(B) (block-diagonal: one group's
        constants with ties included), as a (k, q) array."""
        gp = self.group_ptr
        if self.blocks is None:
            sizes = self.sizes
            out = np.zeros((M.shape[0], len(sizes)))
            nz = np.flatnonzero(sizes > 0)
            if nz.size:
                out[:, nz] = np.add.reduceat(M, gp[:-1][nz], axis=1) / np.sqrt(sizes[nz])
            return out
        parts = [M[:, gp[g]:gp[g + 1]] @ Ng for g, Ng in enumerate(self.null_blocks)]
        return np.concatenate(parts, axis=1) if parts else np.zeros((M.shape[0], 0))

    def null_expand_add(self, out, T) -> np.ndarray:
        """``out += E T`` for T (q, k), in place on out (m, k)."""
        gp = self.group_ptr
        if self.blocks is None:
            sizes = self.sizes
            coef = T / np.sqrt(np.maximum(sizes, 1))[:, None]
            for g in range(len(sizes)):
                a, b = gp[g], gp[g + 1]
                if b > a:
                    out[a:b] += coef[g]
            return out
        q0 = 0
        for g, Ng in enumerate(self.null_blocks):
            a, b = gp[g], gp[g + 1]
            k = Ng.shape[1]
            if k:
                out[a:b] += Ng @ T[q0:q0 + k]
            q0 += k
        return out

    def block(self, g) -> np.ndarray:
        """``B_g`` as a dense (n_g, n_g) array."""
        if self.blocks is not None:
            return self.blocks[g]
        n = int(self.sizes[g])
        return self.scale[g] * (np.eye(n) - 1.0 / max(n, 1))


def check_psd(K, *, name="kernel") -> None:
    """Raise ``ValueError`` when K is not positive semidefinite (Cholesky of K + 1e-10·mean(diag)·I)."""
    m = K.shape[0]
    if m == 0:
        return
    shift = 1e-10 * max(float(np.mean(np.abs(np.diag(K)))), 1e-300)
    M = K + shift * np.eye(m)
    try:
        la.cholesky(M, lower=True, overwrite_a=True, check_finite=False)
    except la.LinAlgError:
        lam = la.eigvalsh(K, subset_by_index=[0, 0])[0] if m > 0 else 0.0
        raise ValueError(
            f"the {name} is not positive semidefinite on the training rows (smallest eigenvalue of the "
            f"kernel matrix {lam:.3g}); RankRLS needs a PSD kernel (use a valid kernel, or add a "
            "diagonal shift inside your callable)") from None


class DualDecomposition:
    """``BKB = U Λ Uᵀ`` plus ``KBU`` and ``Uᵀ B y``: every λ and every hold-out set.

    Parameters
    ----------
    BK : (m, m) C-ordered ``B K`` (``root.apply(K, inplace=True)``), or a one-element list holding it
        (the list is emptied, so that the buffer is freed before the eigendecomposition)
    y : (m, v) float64 targets
    root : :class:`LaplacianRoot`
    """

    def __init__(self, BK, y, root: LaplacianRoot):
        # BK = B K (m, m), C-ordered; the caller computed it in place of K (root.apply(K, inplace=True))
        if isinstance(BK, list):
            BK = BK.pop()
        m = BK.shape[0]
        self.m = m
        self.root = root
        BKB = root.apply(BK.T)                   # B (K B) = B K B, a new C-ordered array
        C = root.null_cols(BK)                   # B K E  (m, q): what K B U needs beyond B K B
        del BK
        # eigh reads only the lower triangle: the round-off asymmetry of B(KB) does not matter
        if m:
            lam, U = la.eigh(BKB, overwrite_a=True, check_finite=False, driver="evd")
        else:
            lam, U = np.zeros(0), np.zeros((0, 0))
        del BKB
        top = float(np.max(np.abs(lam))) if m else 0.0
        if m and lam[0] < -1e-8 * max(top, 1e-300) * max(1.0, np.sqrt(m)):
            raise ValueError(
                f"the kernel is not positive semidefinite on the training rows (eigenvalue {lam[0]:.3g} of "
                "L^1/2 K L^1/2); RankRLS needs a PSD kernel")
        self.eigenvalues = np.maximum(lam, 0.0)
        self.U = np.ascontiguousarray(U)          # rows of U are gathered per hold-out set
        del U
        # K B U without an m³ product: I = B⁺B + E Eᵀ (range and null space of B), so
        # K B U = B⁺ (B K B U) + E (Eᵀ K B U) = B⁺ (U Λ) + E (Cᵀ U)     — O(q m²), q = dim null(B)
        KBU = self.U * lam
        root.pinv_apply(KBU)
        root.null_expand_add(KBU, C.T @ self.U)
        self.KBU = KBU
        self.z = self.U.T @ root.apply(y) if m else np.zeros((0, y.shape[1]))   # Uᵀ B y  (m, v)

    def _d(self, alpha):
        return 1.0 / (self.eigenvalues + float(alpha))

    def coef(self, alpha) -> np.ndarray:
        """Dual coefficients A(λ) = B U (Λ+λ)⁻¹ Uᵀ B y, (m, v)."""
        return self.root.apply(self.U @ (self._d(alpha)[:, None] * self.z))

    def fitted(self, alpha) -> np.ndarray:
        """Training predictions F(λ) = K A(λ), (m, v)."""
        return self.KBU @ (self._d(alpha)[:, None] * self.z)

    def holdout(self, alpha, sets) -> np.ndarray:
        """Held-out predictions for every row of every hold-out set (block form of eq. (33)).

        ``sets`` is a list of integer row arrays, each a union of whole groups,
        disjoint.  Rows in no set get NaN.
        """
        d = self._d(alpha)
        c = self.U @ (d[:, None] * self.z)             # P B y   (m, v)
        F = self.fitted(alpha)
        out = np.full_like(F, np.nan)
        small: dict[int, list] = {}
        for H in sets:
            H = np.asarray(H, dtype=np.int64)
            if H.size == 0:
                continue
            if H.size < _BATCH_BELOW:                    # queries: batched by size, below
                small.setdefault(H.size, []).append(H)
                continue
            UdH = self.U[H] * d                          # (h, m)
            PHH = UdH @ self.U[H].T                      # P_HH
            KBP = self.KBU[H] @ UdH.T                    # (K B P)_HH
            PHH = 0.5 * (PHH + PHH.T)
            corr = KBP @ la.solve(PHH, c[H], assume_a="pos", check_finite=False)
            out[H] = F[H] - corr
        # many small sets (leave-query-out): stacked by size, one einsum per chunk instead of
        # thousands of tiny BLAS calls (which stall when the BLAS threads compete for cores)
        m = self.m
        for h, Hs in small.items():
            step = max(1, _STACK_ENTRIES // max(1, h * m))
            for a in range(0, len(Hs), step):
                idx = np.stack(Hs[a:a + step])           # (g, h)
                UH = self.U[idx]                         # (g, h, m)
                UdH = UH * d
                PHH = np.einsum("gim,gjm->gij", UdH, UH)
                KBP = np.einsum("gim,gjm->gij", self.KBU[idx], UdH)
                PHH = 0.5 * (PHH + PHH.transpose(0, 2, 1))
                corr = KBP @ np.linalg.solve(PHH, c[idx])
                out[idx] = F[idx] - corr
        return out

    def holdout_operator(self, alpha, H) -> np.ndarray:
        """The (|H|, m) matrix G with f_{−H}(X_H) = G y' for any targets y' (same Laplacian).

        ``G = (K B P B)_H − (K B P)_HH P_HH⁻¹ (P B)_H``; its columns H are zero.
        Used by transductive RankRLS.
        """
        d = self._d(alpha)
        H = np.asarray(H, dtype=np.int64)
        UdH = self.U[H] * d
        KBP_H = (self.KBU[H] * d) @ self.U.T          # (K B P)_{H,:}  (h, m)
        PB_H = self.root.apply((UdH @ self.U.T).T).T    # (P B)_{H,:} = (B P_{:,H})ᵀ
        KBPB_H = self.root.apply(KBP_H.T).T            # (K B P B)_{H,:}
        PHH = UdH @ self.U[H].T
        PHH = 0.5 * (PHH + PHH.T)
        corr = KBP_H[:, H] @ la.solve(PHH, PB_H, assume_a="pos", check_finite=False)
        return KBPB_H - corr


def leave_pair_out(K, y, pairs, alpha, *, group_weight="pair"):
    """Exact leave-pair-out hold-out predictions for object ranking (2009 paper §3.4, eqs. (35)–(39)).

    One group of m rows, ties included.  Holding out U = {i, j} leaves the
    Laplacian ``L̃ = s'(D̃ − B Bᵀ)`` of the complete graph on the other m − 2
    rows (D̃ = (m−2)I, B = [1_Ū, √(m−2) e_i, √(m−2) e_j], eq. (37); s' the
    group weight of m − 2 rows, as retraining would use).  By Lemma 2,
    f_Ū(X_U) = I_U (L̃ + λK⁻¹)⁻¹ L̃ y, and with ``Q = (s'D̃ + λK⁻¹)⁻¹ =
    K (s'(m−2) K + λI)⁻¹`` (no K⁻¹ needed: one Cholesky of s'(m−2)K + λI)
    Sherman–Morrison–Woodbury (38) gives, in O(1) per pair from the stored
    Q, Q1, 1ᵀQ1, Qy, 1ᵀQy, 1ᵀy (the matrices (39)),

        f_Ū(X_U) = (Q L̃ y)_U + (QB')_U (I − B'ᵀQB')⁻¹ B'ᵀ Q L̃ y,   B' = √s' B.

    Returns ``(P, 2, v)`` predictions (f_i, f_j) for every pair.
    """
    return LeavePairOut(K, y, alpha, group_weight=group_weight)(pairs)


class LeavePairOut:
    """The stored matrices (39) of leave-pair-out for one λ; ``lpo(pairs)`` costs O(1) per pair.

    Pairs are processed in chunks of ``chunk`` so that all m(m−1)/2 pairs of a
    large problem need only O(chunk) extra memory.
    """

    def __init__(self, K, y, alpha, *, group_weight="pair"):
        m = K.shape[0]
        y = np.asarray(y, dtype=np.float64).reshape(m, -1)
        if m < 3:
            raise ValueError(f"leave-pair-out needs at least 3 training rows, the model has {m}")
        self.m = m
        self.alpha = float(alpha)
        self.s = float(group_weights(np.array([m - 2]), group_weight)[0])
        md = float(m - 2)
        c = self.s * md
        M = c * K + self.alpha * np.eye(m)
        cf = la.cho_factor(M, lower=True, overwrite_a=True, check_finite=False)
        del M
        Q = la.cho_solve(cf, K, check_finite=False)               # (cK + λI)⁻¹ K = K (cK + λI)⁻¹
        del cf
        Q += Q.T
        Q *= 0.5
        self.Q = Q
        self.q1 = Q.sum(axis=1)                                    # Q C (first column)
        self.s1 = float(self.q1.sum())                             # CᵀQC
        self.y = y
        self.Qy = Q @ y                                            # Q D̃ S / (m − 2)
        self.oQy = self.Qy.sum(axis=0)                             # Cᵀ Q D̃ S / (m − 2)
        self.oy = y.sum(axis=0)                                    # Cᵀ S

    def __call__(self, pairs, chunk: int = 65_536) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64)
        out = np.empty((pairs.shape[0], 2, self.y.shape[1]))
        for a in range(0, pairs.shape[0], chunk):
            out[a:a + chunk] = self._chunk(pairs[a:a + chunk])
        return out

    def _chunk(self, pairs):
        Q, q1, y, Qy = self.Q, self.q1, self.y, self.Qy
        sp_, md = self.s, float(self.m - 2)
        i, j = pairs[:, 0], pairs[:, 1]
        P = pairs.shape[0]
        r = np.sqrt(md)
        R = np.array([[-1.0, r, 0.0], [-1.0, 0.0, r]])            # (I_U)ᵀR = B − C
        QUU = np.empty((P, 2, 2))
        QUU[:, 0, 0] = Q[i, i]
        QUU[:, 1, 1] = Q[j, j]
        QUU[:, 0, 1] = QUU[:, 1, 0] = Q[i, j]
        QC_U = np.zeros((P, 2, 3))
        QC_U[:, 0, 0] = q1[i]
        QC_U[:, 1, 0] = q1[j]
        RtQC = np.einsum("ua,pub->pab", R, QC_U)                       # Rᵀ (QC)_U
        BQB = np.einsum("ua,puw,wb->pab", R, QUU, R) + RtQC + RtQC.transpose(0, 2, 1)
        BQB[:, 0, 0] += self.s1                                        # CᵀQC
        By = np.empty((P, 3, y.shape[1]))                              # Bᵀy = Cᵀy + Rᵀ y_U
        By[:, 0] = self.oy - y[i] - y[j]
        By[:, 1] = r * y[i]
        By[:, 2] = r * y[j]
        BQy = np.empty_like(By)                                        # BᵀQy
        BQy[:, 0] = self.oQy - Qy[i] - Qy[j]
        BQy[:, 1] = r * Qy[i]
        BQy[:, 2] = r * Qy[j]
        QB_U = QC_U + np.einsum("puw,wb->pub", QUU, R)                 # (QB)_U = (QC)_U + Q_UU R
        QyU = np.stack([Qy[i], Qy[j]], axis=1)                         # (P, 2, v)
        QLy_U = md * QyU - QB_U @ By                                   # (Q L̃ y)_U / s'
        BQLy = md * BQy - BQB @ By                                     # Bᵀ Q L̃ y / s'
        Mw = np.eye(3)[None] - sp_ * BQB                               # I − B'ᵀQB'
        corr = QB_U @ np.linalg.solve(Mw, sp_ * BQLy)
        return sp_ * (QLy_U + corr)


class PerOutput:
    """One hold-out object per output column, read as one: ties="exclude" with several outputs.

    Every output has its own tie classes, so its own Laplacian and its own
    O(m³) decomposition (or leave-pair-out factors); the columns are solved
    apart and put side by side.  Exposes what the dual model reads:
    ``coef``, ``fitted``, ``holdout`` (decompositions) and ``__call__``
    (leave-pair-out), each the per-output results concatenated on the last axis.
    """

    def __init__(self, parts):
        self.parts = list(parts)
        self.m = getattr(self.parts[0], "m", None)
        self.alpha = getattr(self.parts[0], "alpha", None)

    def coef(self, alpha):
        return np.concatenate([p.coef(alpha) for p in self.parts], axis=-1)

    def fitted(self, alpha):
        return np.concatenate([p.fitted(alpha) for p in self.parts], axis=-1)

    def holdout(self, alpha, sets):
        return np.concatenate([p.holdout(alpha, sets) for p in self.parts], axis=-1)

    def __call__(self, pairs):
        return np.concatenate([p(pairs) for p in self.parts], axis=-1)


class LeavePairOutExcludeTies:
    """Exact leave-pair-out for object ranking with tied pairs excluded (one group, one output).

    With ties excluded, holding out U = {i, j} does not only remove two rows:
    the degree of every remaining row k becomes ``(m − 2) − n'_c(k)`` where
    ``n'_c(k)`` is the size of k's tie class after the removal — it drops by
    one for the rows of i's class and of j's class.  That diagonal change has
    the rank of those classes, so it is *not* a low-rank update of the full
    problem; but it depends on the pair only through its two tie classes
    (a, b).  So for each pair of classes met in the request (one for binary
    labels' positive–negative pairs), with T the number of tied classes:

        D_ab = (m − 2) − n_c(k) + [k ∈ a] + [k ∈ b]   (tied k; m − 2 for untied k)
        Q_ab = (s' D_ab + λ K⁻¹)⁻¹ = (s' K D_ab + λ I)⁻¹ K     — one O(m³) solve

    and the rest of the remaining Laplacian is of rank T + 3,

        L̃ = s' (D_ab − W S Wᵀ),   W = [1_Ū, 1_{c_1∖U} … 1_{c_T∖U}, e_i, e_j],
        S = diag(1, −1, …, −1, D_ab,ii, D_ab,jj)

    (the last two columns zero rows i, j: Lemma 2 of the 2009 paper pads the
    held-out rows).  Woodbury, exactly as eq. (38) with B of rank T + 3:

        f_Ū(X_U) = (Q L̃ y)_U + (QW)_U (I − s' S WᵀQW)⁻¹ s' S Wᵀ Q L̃ y,

    where W = W₀ + E_U R (W₀ the class indicators, fixed per class pair), so
    every pair costs O(T²) from ``Q W₀``, ``W₀ᵀ Q W₀``, ``Q D y`` — the matrices
    (39) extended by one column per tied class.  With T = 0 (no ties) this
    is :class:`LeavePairOut`.  Cost: one O(m³) solve per distinct pair of tie
    classes among the requested pairs (only the last one is kept, O(m²)
    memory), then O(T²) per pair.
    """

    def __init__(self, K, y, alpha, *, group_weight="pair"):
        m = K.shape[0]
        y = np.asarray(y, dtype=np.float64).reshape(m, -1)
        if y.shape[1] != 1:
            raise NotImplementedError("leave-pair-out with ties excluded needs one output (each output has "
                                      "its own tie classes)")
        if m < 3:
            raise ValueError(f"leave-pair-out needs at least 3 training rows, the model has {m}")
        self.m = m
        self.K = K
        self.y = y
        self.alpha = float(alpha)
        self.s = float(group_weights(np.array([m - 2]), group_weight)[0])
        cid, _, csize = tie_classes(y[:, 0], np.array([0, m]))
        tied = csize >= 2
        index = np.full(len(csize), -1, dtype=np.int64)
        index[tied] = np.arange(int(tied.sum()))
        self.tc = index[cid]                                   # tied class of each row, −1 if untied
        self.T = int(tied.sum())
        self.base = np.where(self.tc >= 0, (m - 2) - csize[cid], m - 2).astype(np.float64)
        W0 = np.zeros((m, self.T + 1))
        W0[:, 0] = 1.0
        r = np.flatnonzero(self.tc >= 0)
        W0[r, 1 + self.tc[r]] = 1.0
        self.W0 = W0
        self.W0y = W0.T @ y                                     # (T+1, v)
        self._key = None

    def _factor(self, key):
        if self._key == key:
            return self._fac
        self._key, self._fac = None, None
        a, b = key
        D = self.base.copy()
        for c in (a, b):
            if c >= 0:
                D[self.tc == c] += 1.0
        M = self.s * (self.K * D[None, :])
        M[np.diag_indices(self.m)] += self.alpha
        Q = la.solve(M, self.K, overwrite_a=True, check_finite=False)      # (s'KD + λI)⁻¹ K
        Q += Q.T
        Q *= 0.5
        P0 = Q @ self.W0                                                   # Q W₀   (m, T+1)
        h = Q @ (D[:, None] * self.y)                                      # Q D y  (m, v)
        self._fac = (D, Q, P0, self.W0.T @ P0, h, self.W0.T @ h)
        self._key = key
        return self._fac

    def __call__(self, pairs, chunk: int | None = None) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64)
        out = np.empty((pairs.shape[0], 2, self.y.shape[1]))
        if pairs.shape[0] == 0:
            return out
        a = self.tc[pairs[:, 0]]
        b = self.tc[pairs[:, 1]]
        keys = np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1)
        uk, inv = np.unique(keys, axis=0, return_inverse=True)
        r = self.T + 3
        chunk = chunk or max(1, (1 << 22) // (r * r))
        for k, key in enumerate(uk):
            sel = np.flatnonzero(inv.ravel() == k)
            fac = self._factor((int(key[0]), int(key[1])))
            for c0 in range(0, sel.size, chunk):
                idx = sel[c0:c0 + chunk]
                out[idx] = self._chunk(pairs[idx], fac)
        return out

    def _chunk(self, pairs, fac):
        D, Q, P0, G0, h, W0h = fac
        s_, T, y = self.s, self.T, self.y
        r = T + 3
        i, j = pairs[:, 0], pairs[:, 1]
        P = pairs.shape[0]
        rows = np.arange(P)
        R = np.zeros((P, 2, r))                  # W = W₀ + E_U R
        R[:, :, 0] = -1.0                        # 1_Ū = 1 − e_i − e_j
        for u, idx in ((0, i), (1, j)):
            t = self.tc[idx]
            has = t >= 0
            R[rows[has], u, 1 + t[has]] = -1.0   # 1_{c∖U} = 1_c − [i ∈ c] e_i − [j ∈ c] e_j
        R[:, 0, T + 1] = 1.0
        R[:, 1, T + 2] = 1.0
        P0U = np.zeros((P, 2, r))                # E_Uᵀ Q W₀, padded to r columns
        P0U[:, 0, :T + 1] = P0[i]
        P0U[:, 1, :T + 1] = P0[j]
        QUU = np.empty((P, 2, 2))
        QUU[:, 0, 0] = Q[i, i]
        QUU[:, 1, 1] = Q[j, j]
        QUU[:, 0, 1] = QUU[:, 1, 0] = Q[i, j]
        Rt = R.transpose(0, 2, 1)
        QW_U = P0U + QUU @ R                                       # (QW)_U      (P, 2, r)
        WQW = Rt @ P0U + P0U.transpose(0, 2, 1) @ R + Rt @ QUU @ R
        WQW[:, :T + 1, :T + 1] += G0                               # WᵀQW        (P, r, r)
        S = np.empty((P, r))
        S[:, 0] = 1.0
        S[:, 1:T + 1] = -1.0
        S[:, T + 1] = D[i]
        S[:, T + 2] = D[j]
        hU = np.stack([h[i], h[j]], axis=1)                         # (Q D y)_U   (P, 2, v)
        yU = np.stack([y[i], y[j]], axis=1)
        Wy = Rt @ yU                                                # Wᵀ y        (P, r, v)
        Wy[:, :T + 1] += self.W0y
        WQDy = Rt @ hU                                              # Wᵀ Q D y
        WQDy[:, :T + 1] += W0h
        SWy = S[:, :, None] * Wy
        gU = s_ * (hU - QW_U @ SWy)                                  # (Q L̃ y)_U
        Wg = s_ * (WQDy - WQW @ SWy)                                 # Wᵀ Q L̃ y
        M = np.eye(r)[None] - s_ * S[:, :, None] * WQW
        return gU + QW_U @ np.linalg.solve(M, s_ * S[:, :, None] * Wg)
