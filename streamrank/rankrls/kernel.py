"""Kernel RankRLS: exact dual (in memory) and sparse/basis RankRLS (streaming).

Dual mode (``n_basis=None``; Pahikkala et al. 2009 eq. (17), DESIGN §3.4)::

    A = (L K + λ I)⁻¹ L y,        f(x) = k(x, X) A

solved through one symmetric eigendecomposition of ``L^{1/2} K L^{1/2}``
(see :mod:`streamrank.rankrls._dual`): every λ of :meth:`KernelRankRLS.path`
costs O(m² v), leave-query-out (eq. (33)) O(m |U| + |U|³) per query, and
leave-pair-out for object ranking (§3.4, eqs. (35)–(39)) O(1) per pair after
one O(m³) Cholesky (ties excluded: one O(m³) solve per pair of tie classes).  A semidefinite
kernel needs no diagonal shift (no K⁻¹ is ever formed); a kernel that is not PSD on the data raises ``ValueError``.

Sparse mode (``n_basis=r``; §3.5 of the 2009 paper, eq. (41), the sparse
RankRLS paper, DESIGN §3.5)::

    A = (K_RM L K_MR + λ K_RR)⁻¹ K_RM L y,        f(x) = k(x, X_R) A

Pass 1 draws the r basis rows uniformly by reservoir sampling (Algorithm R,
one uniform per row in row order, so the sample does not depend on how the
stream is cut into blocks) unless ``basis`` is an array of rows.  Pass 2
accumulates ``G = K_RM L K_MR`` and ``b = K_RM L y`` block by block with
:class:`~streamrank.rankrls._statistics.RankStatistics` on Φ_B = k(X_B, X_R)
(memory O(r² + block·r)).  Then, instead of the Cholesky ``K_RR = Z Zᵀ`` of
eq. (42) we use its eigendecomposition ``K_RR = W S Wᵀ`` and the
pseudo-inverse root ``Z⁺ = S₊^{-1/2} W₊ᵀ`` (identical when K_RR is positive
definite; robust when it is only semidefinite, e.g. duplicated basis rows or
the linear kernel with r > n_features — the dropped directions k(·, X_R)v = 0
carry no function), and ``Z⁺ G Z⁺ᵀ = V Λ Vᵀ``:

    A(λ) = Z⁺ᵀ V (Λ + λ)⁻¹ Vᵀ Z⁺ b        — O(r²) per λ.

The sparse model is a primal RankRLS on the r₊ features ψ(x) = Z⁺ k(X_R, x),
so leave-query-out takes one more streaming pass (Woodbury per group).

Saved models (``sr.save``) keep what the λ path and the hold-out formulas
need, and ``sr.load`` recomputes the decomposition lazily, once, on the first
call that needs it: the dual saves the training targets and the group
structure beside the basis rows (= the training rows) and redoes the O(m³)
eigendecomposition; the sparse model saves its r × r statistics
``K_RM L K_MR`` and ``K_RM L y`` and redoes the O(r³) step (its
leave-query-out streams the training data again, so it takes ``source=``).
These are extra arrays of the same model format version: files written
before them still load (predict works; path and hold-outs ask for a refit).
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from .._defaults import check_alphas
from .._qid import qid_keys
from .._state_checks import state_array, state_int, state_matrix
from .._validation import (
    check_alpha,
    check_n_features,
    check_qid,
    check_X,
    check_y,
    group_ptr_from_qid,
)
from ..base import BaseRanker
from ..io.blocks import BlockSource, vstack_X
from ..kernels import KernelColumns, check_kernel, kernel_rows
from ..laplacian import check_group_weight, check_ties
from ..normalize import FeatureMoments, NormalizedSource, check_normalize
from ..persistence import register_model
from ._dual import DualDecomposition, LaplacianRoot, LeavePairOut, LeavePairOutExcludeTies, PerOutput, check_psd
from ._statistics import RankStatistics

__all__ = ["KernelRankRLS"]


class _SparseSolution:
    """``A(λ) = T (Λ + λ)⁻¹ z`` of sparse RankRLS (T = Z⁺ᵀ V, z = Vᵀ Z⁺ b)."""

    def __init__(self, G, b, K_RR):
        r = K_RR.shape[0]
        s, W = la.eigh(0.5 * (K_RR + K_RR.T), check_finite=False)
        top = float(np.max(np.abs(s))) if r else 0.0
        if r and s[0] < -1e-8 * max(top, 1e-300) * max(1.0, np.sqrt(r)):
            raise ValueError(
                f"the kernel is not positive semidefinite on the basis rows (eigenvalue {s[0]:.3g} of K_RR); "
                "RankRLS needs a PSD kernel")
        keep = s > max(top, 1e-300) * r * np.finfo(float).eps * 10
        self.rank = int(keep.sum())
        Zp = W[:, keep] / np.sqrt(s[keep])                     # Z⁺ᵀ  (r, r₊)
        M = Zp.T @ G @ Zp
        lam, V = la.eigh(0.5 * (M + M.T), check_finite=False)
        self.eigenvalues = np.maximum(lam, 0.0)
        self.T = Zp @ V                                        # (r, r₊)
        self.z = V.T @ (Zp.T @ b)                              # (r₊, v)

    def coef(self, alpha):
        return self.T @ (self.z / (self.eigenvalues + float(alpha))[:, None])


def _sparse_solution(G, B, K_RR):
    """The sparse solution of shared statistics, or one per output (G a (v, r, r) stack: ties="exclude")."""
    G = np.asarray(G, dtype=np.float64)
    if G.ndim == 3:
        return PerOutput([_SparseSolution(G[k], B[:, k:k + 1], K_RR) for k in range(G.shape[0])])
    return _SparseSolution(G, B, K_RR)


@register_model
class KernelRankRLS(BaseRanker):
    """Kernel RankRLS: exact dual solver or sparse (basis-vector) RankRLS.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly"} or callable ``kernel(X, Z) -> (len(X), len(Z))``
    gamma, degree, coef0 : kernel parameters (rbf: exp(−γ‖x−z‖²); poly: (γ x·z + coef0)^degree)
    alpha : float > 0, the regularization parameter λ
    n_basis : None (exact dual, in memory) or int r (sparse RankRLS, streaming)
    basis : "random" (reservoir sample of r rows) or an array of basis rows
    group_weight : {"pair", "query", "size"}, ties : {"include", "exclude"} — see
        :mod:`streamrank.laplacian`
    random_state : seed of the reservoir sample
    normalize : None, "standard" or "minmax" — evaluate the kernel on features
        scaled by statistics of all training rows (:mod:`streamrank.normalize`):
        f(x) = k(x̃, R̃) A with x̃ = (x − o) / s, (o, s) in ``normalizer_``.
        Dual: from the rows in memory.  Sparse: the moments are gathered in
        the basis-sampling pass (no extra pass; an array ``basis`` has no such
        pass, so it costs one).  ``basis_`` holds the normalized basis rows.

    Attributes
    ----------
    dual_coef_ : (n_basis_rows,) or (n_basis_rows, n_outputs) — A
    basis_ : the rows k(x, ·) is evaluated against (all training rows for the dual)
    n_features_in_, n_outputs_
    """

    def __init__(self, *, kernel="rbf", gamma=1.0, degree=2, coef0=0.0, alpha=1.0, n_basis=None,
                 basis="random", group_weight="pair", ties="include", random_state=None, normalize=None):
        self.normalize = normalize
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.alpha = alpha
        self.n_basis = n_basis
        self.basis = basis
        self.group_weight = group_weight
        self.ties = ties
        self.random_state = random_state

    # ------------------------------------------------------------ validation
    def kernel_function(self):
        """The kernel as a function ``k(X, Z) -> (rows of X, rows of Z)`` (the parameters checked)."""
        return check_kernel(self.kernel, self.gamma, self.degree, self.coef0)

    def _check_params(self):
        spec = self.kernel_function()
        check_alpha(self.alpha, "alpha")
        check_group_weight(self.group_weight)
        check_ties(self.ties)
        check_normalize(self.normalize)
        if self.n_basis is not None:
            if isinstance(self.n_basis, bool) or not isinstance(self.n_basis, numbers.Integral) \
                    or self.n_basis < 1:
                raise ValueError(f"n_basis must be None or an integer >= 1, got {self.n_basis!r}")
        if isinstance(self.basis, str) and self.basis != "random":
            raise ValueError(f"basis must be 'random' or an array of basis rows, got {self.basis!r}")
        return spec

    def _y_out(self, A):
        return A[:, 0] if self._one_d else A

    # -------------------------------------------------------------------- fit
    def fit(self, X, y=None, qid=None, *, max_rows=None, feature_names=None):
        """Fit from arrays ``(X, y, qid)`` or from a :class:`~streamrank.BlockSource`.

        Row weights (pair weight w_i w_j, as ``RankRLS.fit(sample_weight=)``):
        pass a weighted source, ``fit(streamrank.io.weighted.with_weights(source, w))``;
        sparse RankRLS (``n_basis=r``) only — K_RM L_w K_MR stays one pass; the
        exact dual raises.  (No ``sample_weight=`` parameter: scikit-learn's
        checks would require the randomly sampled basis to treat a weight
        of 2 like a repeated row.)

        ``n_basis=None``: the exact dual in memory (a source is read whole).
        ``n_basis=r``: sparse RankRLS, two streaming passes (basis, statistics)
        in blocks of ``max_rows`` rows (default: about 4M/r rows).
        ``feature_names``: names of X's columns, kept as ``feature_names_in_``
        (default: the store's feature names, if any).
        """
        spec = self._check_params()
        self.__dict__.pop("best_alpha_", None)
        self.__dict__.pop("cv_results_", None)
        if isinstance(X, BlockSource):
            if y is not None or qid is not None:
                raise ValueError("fit(source) takes the targets and query ids from the source; "
                                 "do not pass y or qid")
            source = X
        else:
            from .._tables import is_table

            if y is None:
                raise ValueError("fit(X, y, qid): y is required when X is an array")
            source = self._fit_source(X, y, qid, reset=True) if is_table(X) else None
        for attr in _FITTED_STATE:
            if hasattr(self, attr):
                delattr(self, attr)
        self.__dict__.pop("normalizer_", None)
        from ..io.weighted import WeightedSource

        if isinstance(source if source is not None else X, WeightedSource) and self.n_basis is None \
                and isinstance(self.basis, str):
            raise NotImplementedError("row weights with the exact dual KernelRankRLS (n_basis=None) are not "
                                      "implemented; use sparse RankRLS (n_basis=r, or basis=X for all rows)")
        if self.n_basis is None and isinstance(self.basis, str):
            if source is not None:
                X, y, qid = _read_all(source)
            if self.normalize is not None:   # the dual holds the rows: normalize them once, in memory
                X = check_X(X, "X")
                normalizer = FeatureMoments(X.shape[1]).update(X).normalizer(self.normalize)
                X = normalizer.transform(X)
            self._fit_dual(spec, X, y, qid)
            if self.normalize is not None:
                self.normalizer_ = normalizer
        else:
            if source is None:
                from ..io.sources import as_source
                source = as_source(X, y, qid)
            self._fit_sparse(spec, source, max_rows)
        self._set_feature_names(self.n_features_in_, feature_names, source)
        return self

    def _fit_dual(self, spec, X, y, qid):
        X = check_X(X, "X")
        m = X.shape[0]
        if m < 1:
            raise ValueError("X has 0 rows; at least 1 needed")
        y = check_y(y, m, "y")
        q = check_qid(qid, m, "qid")
        gp, gq = group_ptr_from_qid(q, "qid")
        check_n_features(self, X.shape[1], reset=True)
        self._group_qid = gq
        self._one_d = y.ndim == 1
        Y = y.reshape(m, -1)
        self.n_outputs_ = Y.shape[1]
        self._decomp = _dual_decomposition(spec, X, Y, gp, self.group_weight, self.ties, check=True)
        self._group_ptr = gp
        self._Y = Y
        self._mode = "dual"
        self.basis_ = X
        self.dual_coef_ = self._y_out(self._decomp.coef(self.alpha))
        return self

    def _fit_sparse(self, spec, source, max_rows):
        m = source.n_rows
        if m < 1:
            raise ValueError("X has 0 rows; at least 1 needed")
        self.n_outputs_ = source.n_outputs
        check_n_features(self, source.n_features, reset=True)
        if isinstance(self.basis, str):
            r = int(self.n_basis)
            if r > m:
                raise ValueError(f"n_basis={r} exceeds the number of training rows ({m}); "
                                 f"use n_basis <= {m} (n_basis = rows gives the exact dual)")
            if max_rows is None:
                max_rows = max(256, (1 << 22) // max(r, 1))
            moments = None if self.normalize is None else FeatureMoments(source.n_features)
            Xb = _reservoir(source, r, self.random_state, max(max_rows, 1 << 16),  # rows only: large reads
                            moments=moments)
        else:
            Xb = check_X(self.basis, "basis", n_features=source.n_features, min_rows=1)
            if self.n_basis is not None and Xb.shape[0] != self.n_basis:
                raise ValueError(f"basis has {Xb.shape[0]} rows but n_basis={self.n_basis}")
            r = Xb.shape[0]
            if max_rows is None:
                max_rows = max(256, (1 << 22) // max(r, 1))
            moments = None
            if self.normalize is not None:   # no sampling pass to ride along: one pass of its own
                moments = FeatureMoments(source.n_features)
                for block in source.blocks(max_rows=max(max_rows, 1 << 16), split_groups=True):
                    moments.update(block.X)
        normalizer = None
        if moments is not None:
            normalizer = moments.normalizer(self.normalize)
            Xb = normalizer.transform(Xb)
            source = NormalizedSource(source, normalizer)
        v = source.n_outputs
        # per_output: one G per output when each has its own tie classes (ties="exclude", several outputs)
        stats = RankStatistics(r, v, group_weight=self.group_weight, ties=self.ties, per_output=True)
        ys = []
        cols = KernelColumns(spec, Xb)
        for block in source.blocks(max_rows=max_rows, split_groups=True):
            gid = block.group_start + np.arange(block.n_groups, dtype=np.int64)
            if block.is_split or stats.per_output or block.weight is not None:
                stats.add_block(spec(block.X, Xb), block.y, block.group_ptr, group_size=block.group_size,
                                group_offset=block.group_offset, group_id=gid, weight=block.weight)
            else:
                # whole groups: Φ = k(X_B, X_R) is computed into the statistics' SYRK workspace piece by
                # piece, each piece centred and scaled while in cache (no copy, no block-sized temporary)
                Xblk, W = block.X, stats.workspace(block.n_rows, order="C")
                stats.add_block(W[:, :r], block.y, block.group_ptr, group_id=gid,
                                fill=lambda a, b, out, Xblk=Xblk, W=W: cols.into_rows(Xblk[a:b], W, a))
            if len(ys) < 1:
                ys.append(np.ndim(block.y))
        return self.fit_basis_statistics(stats, Xb, source, max_rows, one_d=bool(ys and ys[0] == 1),
                                    normalizer=normalizer)

    def fit_basis_statistics(self, stats, basis, source, max_rows, *, one_d=None, normalizer=None):
        """Finish sparse RankRLS from summed basis statistics (DESIGN §3.5).

        ``stats`` holds K_RM L K_MR and K_RM L Y (any sum of per-block
        :class:`RankStatistics`, e.g. reduced on dask workers or added night
        by night); ``basis`` is X_R.  Solves A = (K_RM L K_MR + λ K_RR)⁻¹ K_RM L y
        through the eigendecomposition that serves every λ.
        """
        stats.check_complete()
        spec = self._check_params()
        if self.normalize is not None and normalizer is None:
            raise NotImplementedError(f"normalize={self.normalize!r}: this fit path (a cluster or nightly fit "
                                      "from statistics) does not gather the feature moments; fit locally "
                                      "or use normalize=None")
        for attr in _FITTED_STATE:
            self.__dict__.pop(attr, None)
        if normalizer is not None:
            self.normalizer_ = normalizer
        self.n_outputs_ = stats.n_outputs
        check_n_features(self, source.n_features, reset=True)
        self._sparse_stats = (np.array(stats.G, dtype=np.float64), np.array(stats.B, dtype=np.float64))
        self._sparse = _sparse_solution(*self._sparse_stats, spec(basis))
        if one_d is None:
            one_d = source.n_outputs == 1 and getattr(source, "y_ndim", 1) == 1
        self._one_d = bool(one_d)
        self._mode = "sparse"
        self._train_source = (source, max_rows)
        self._max_rows = int(max_rows)
        self.basis_ = basis
        self.dual_coef_ = self._y_out(self._sparse.coef(self.alpha))
        self.n_groups_ = stats.n_groups
        return self

    # ------------------------------------------------------------- predicting
    def predict(self, X):
        """Scores f(x) = k(x, basis_) A for every row of X (processed in row chunks)."""
        self._check_fitted("dual_coef_")
        X = check_X(self._predict_input(X), "X", n_features=self.n_features_in_)
        if getattr(self, "normalizer_", None) is not None:
            X = self.normalizer_.transform(X)
        A = self.dual_coef_
        return kernel_rows(self.kernel_function(), X, self.basis_, A)

    def _solver(self):
        """The decomposition behind path and hold-outs; recomputed once after ``sr.load``."""
        mode = getattr(self, "_mode", None)
        if mode == "dual":
            if getattr(self, "_decomp", None) is None:     # loaded: O(m³) once
                self._decomp = _dual_decomposition(self.kernel_function(), self.basis_, self._Y, self._group_ptr,
                                                   self.group_weight, self.ties, check=False)
            return self._decomp
        if mode == "sparse":
            if getattr(self, "_sparse", None) is None:     # loaded: O(r³) once
                self._sparse = _sparse_solution(*self._sparse_stats, self.kernel_function()(self.basis_))
            return self._sparse
        self._check_fitted("dual_coef_")
        raise ValueError("this model was loaded from a file written without its training targets / "
                         "statistics (an older streamrank): path and hold-out formulas need them; refit "
                         "(and save again) to use them")

    def path(self, alphas=None):
        """Dual coefficients for every λ in ``alphas`` (default 2⁻¹⁵ … 2¹⁵) from the one decomposition.

        Returns (len(alphas), n_basis_rows) or (len(alphas), n_basis_rows, n_outputs).
        """
        arr = check_alphas(alphas)
        solver = self._solver()
        return np.stack([self._y_out(solver.coef(a)) for a in arr])

    # --------------------------------------------------------------- hold-out
    def leave_query_out(self, alpha=None, source=None):
        """Held-out predictions for every training row, each query left out in turn.

        Dual: eq. (33) of the 2009 paper in block form (see ``_dual``).  Sparse:
        one streaming pass over the training source (or ``source``), Woodbury
        per group of the r-dimensional primal problem.  Returns (rows,) or
        (rows, n_outputs) in training row order.
        """
        alpha = self.alpha if alpha is None else check_alpha(alpha, "alpha")
        solver = self._solver()
        if self._mode == "dual":
            gp = self._group_ptr
            if len(gp) - 1 < 2:
                raise ValueError("leave_query_out needs at least 2 query groups; the model was trained "
                                 "on one group (qid=None: use leave_pair_out)")
            sets = [np.arange(gp[g], gp[g + 1]) for g in range(len(gp) - 1)]
            return self._y_out(solver.holdout(alpha, sets))
        return self._y_out(self._sparse_lqo(alpha, source))

    def _sparse_lqo(self, alpha, source):
        max_rows = getattr(self, "_max_rows", None) or max(256, (1 << 22) // max(self.basis_.shape[0], 1))
        if source is None:
            if getattr(self, "_train_source", None) is None:
                raise ValueError("leave_query_out of a sparse model streams its training data again; this "
                                 "model was loaded from disk, so pass source= (the training source)")
            source, max_rows = self._train_source
        elif not isinstance(source, BlockSource):
            raise TypeError(f"source must be a block source (sr.as_source(X, y, qid), a GroupStore); got "
                            f"{type(source).__name__}")
        elif getattr(self, "normalizer_", None) is not None:
            source = NormalizedSource(source, self.normalizer_)
        if source.n_groups < 2:
            raise ValueError("leave_query_out needs at least 2 query groups; the model was trained "
                             "on one group")
        spec = self.kernel_function()
        sol = self._solver()
        # one solution per output when every output has its own Laplacian (ties="exclude", several outputs)
        parts = sol.parts if isinstance(sol, PerOutput) else [sol]
        cols = [slice(k, k + 1) for k in range(len(parts))] if isinstance(sol, PerOutput) else [slice(None)]
        out = np.empty((source.n_rows, self.n_outputs_))
        for block in source.blocks(max_rows=max_rows, split_groups=False):
            Kb = spec(block.X, self.basis_)
            Yb = np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, -1)
            gp = block.group_ptr
            for part, c in zip(parts, cols):
                d = 1.0 / (part.eigenvalues + alpha)
                Psi = Kb @ part.T                                 # ψ in the eigenbasis (rows, r₊)
                F = Psi @ (d[:, None] * part.z)
                Y = Yb[:, c]
                root = LaplacianRoot(gp, Y, group_weight=self.group_weight, ties=self.ties)
                for g in range(block.n_groups):
                    a, b = gp[g], gp[g + 1]
                    Pg = Psi[a:b]
                    H = (Pg * d) @ Pg.T                           # Ψ_g P Ψ_gᵀ
                    S = root.block(g)
                    M = np.eye(b - a) - S @ H @ S
                    corr = H @ S @ np.linalg.solve(M, S @ (F[a:b] - Y[a:b]))
                    out[block.start + a:block.start + b, c] = F[a:b] + corr
        return out

    def leave_pair_out(self, pairs, alpha=None):
        """Exact leave-pair-out predictions (f_i, f_j) for each pair (i, j) (2009 paper §3.4).

        Object ranking only: a dual model trained on one group (``qid=None``).
        Every ``group_weight`` is exact: the weight is one constant of the
        whole Laplacian, and the stored matrices use the weight of the m − 2
        remaining rows that retraining would use.  Ties included: one O(m³)
        Cholesky per λ, then O(1) per pair (eqs. (35)–(39)).  Ties excluded:
        removing two rows also lowers the degree of every row tied with
        either of them — a change of the rank of their tie classes, not a
        low-rank update — so one O(m³) solve per distinct pair of tie classes
        met in ``pairs`` (one for the positive–negative pairs of binary
        labels), then O(T²) per pair with T tied classes
        (:class:`~streamrank.rankrls._dual.LeavePairOutExcludeTies`).
        Returns (pairs, 2) or (pairs, 2, n_outputs).
        """
        alpha = self.alpha if alpha is None else check_alpha(alpha, "alpha")
        self._solver()
        if self._mode != "dual":
            raise ValueError("leave_pair_out is implemented for the exact dual (n_basis=None)")
        n_groups = len(self._group_ptr) - 1
        if n_groups != 1:
            raise ValueError(
                f"leave_pair_out is for object ranking (one group, qid=None); this model was trained "
                f"with {n_groups} query groups — use leave_query_out")
        m = self.basis_.shape[0]
        P = np.asarray(pairs)
        if P.ndim != 2 or P.shape[1] != 2 or P.dtype.kind not in "iu":
            raise ValueError(f"pairs must be an integer array of shape (n_pairs, 2), got "
                             f"{P.dtype} array of shape {P.shape}")
        if P.size and (P.min() < 0 or P.max() >= m):
            bad = int(np.flatnonzero((P < 0).any(axis=1) | (P >= m).any(axis=1))[0])
            raise ValueError(f"pairs row {bad} = {P[bad].tolist()} holds a row index outside [0, {m})")
        if P.size and np.any(P[:, 0] == P[:, 1]):
            bad = int(np.flatnonzero(P[:, 0] == P[:, 1])[0])
            raise ValueError(f"pairs row {bad} = {P[bad].tolist()} holds the same row twice")
        lpo = getattr(self, "_lpo_cache", None)
        if lpo is None or lpo.alpha != alpha:      # one O(m³) step per λ, then O(1) per pair
            self._lpo_cache = None
            K = self.kernel_function()(self.basis_)
            Y = np.asarray(self._Y, dtype=np.float64).reshape(m, -1)
            if self.ties == "include":
                lpo = LeavePairOut(K, Y, alpha, group_weight=self.group_weight)
            else:                                   # each output has its own tie classes
                lpo = PerOutput([LeavePairOutExcludeTies(K, Y[:, k:k + 1], alpha, group_weight=self.group_weight)
                                 for k in range(Y.shape[1])])
            self._lpo_cache = lpo
        out = lpo(P)
        return out[:, :, 0] if self._one_d else out

    # ----------------------------------------------------------- model choice
    def cross_validate(self, source=None, alphas=None, folds=5, scoring="squared"):
        """Choose alpha by group cross-validation from one decomposition, then refit with it.

        The choice is recorded in ``best_alpha_`` (and the result in
        ``cv_results_``); the ``alpha`` parameter stays as the user set it.

        ``source``: a :class:`~streamrank.BlockSource` or a tuple ``(X, y, qid)``;
        ``None`` uses the training data (the model is fitted first when needed).
        ``folds``: ``"query"`` (exact leave-one-query-out, eq. (33)) or an int
        k >= 2 (queries split by :func:`~streamrank.rankrls.selection.fold_of`,
        the same hash folds as linear RankRLS; for sparse models from per-fold
        statistics in one pass, plus one prediction pass for ranking metrics).  ``scoring``:
        ``"squared"`` (held-out least-squares ranking loss per pair, lower is
        better), ``"disagreement"`` (lower) or ``"ndcg@k"`` (higher), as in
        :func:`streamrank.rankrls.selection.cross_validate`.  ``alphas``
        defaults to 2⁻¹⁵ … 2¹⁵.  Every λ costs O(m² v) plus the hold-out
        formula; the decomposition is done once.  Returns a
        :class:`~streamrank.rankrls.selection.CVResult`.
        """
        from .selection import CVResult, _parse_scoring, fold_of

        kind, k = _parse_scoring(scoring)
        arr = check_alphas(alphas)
        self._check_params()
        if source is not None:
            if isinstance(source, tuple):
                self.fit(*source)
            else:
                self.fit(source)
        elif not hasattr(self, "dual_coef_"):
            raise ValueError("cross_validate(source=None) needs a fitted model; pass the training data")
        self._solver()        # recomputed after sr.load; an error for files saved without the training data
        if self._mode == "dual":
            gp = self._group_ptr
            Y = self._Y
        else:
            if getattr(self, "_train_source", None) is None:
                raise ValueError("cross_validate of a sparse model streams its training data; this model was "
                                 "loaded from disk, so pass source= (it is refitted on it)")
            src = self._train_source[0]
            gp = src.group_ptr
            Y = None
        n_groups = len(gp) - 1
        if folds == "query":
            if n_groups < 2:
                raise ValueError(f"leave-query-out cross-validation needs at least 2 groups; the data has "
                                 f"{n_groups} (qid=None is one global group: use leave_pair_out)")
            fold_groups = [np.array([g]) for g in range(n_groups)]
        else:
            if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
                raise ValueError(f'folds must be an integer >= 2 or "query"; got {folds!r}')
            if n_groups < folds:
                raise ValueError(f"{folds}-fold cross-validation by query needs at least {folds} groups; "
                                 f"the data has {n_groups}")
            if self._mode != "dual":
                return self._sparse_kfold(arr, int(folds), kind, k, scoring)
            gq = self._group_qid
            fog = fold_of(gq, int(folds))
            fold_groups = [np.flatnonzero(fog == f) for f in range(int(folds))]
        if self._mode == "dual":
            sets = [np.concatenate([np.arange(gp[g], gp[g + 1]) for g in gs]) if len(gs) else
                    np.zeros(0, np.int64) for gs in fold_groups]
            preds = np.stack([self._decomp.holdout(a, sets) for a in arr])      # (a, m, v)
        else:
            preds = np.stack([self._sparse_lqo(a, None) for a in arr])
            src = self._train_source[0]
            Y = src.read_y(0, src.n_rows).reshape(preds.shape[1], -1)
        v = Y.shape[1]
        per_out = np.empty((len(arr), v))
        rows_q = np.repeat(np.arange(n_groups), np.diff(gp))
        if kind == "squared":
            from ..laplacian import apply_laplacian
            from ._statistics import _pair_count
            for ai in range(len(arr)):
                R = Y - preds[ai]
                for o in range(v):
                    LR = apply_laplacian(R[:, o], gp, y=Y[:, o], group_weight=self.group_weight,
                                         ties=self.ties)
                    per_out[ai, o] = float(R[:, o] @ LR)
            n_pairs = int(_pair_count(np.diff(gp)).sum())
            if self.ties == "exclude":
                from ..laplacian import tie_classes
                _, _, csize = tie_classes(Y[:, 0], gp)
                n_pairs -= int(_pair_count(csize).sum())
            per_out /= max(n_pairs, 1)
        else:
            from .. import metrics as _metrics
            for ai in range(len(arr)):
                for o in range(v):
                    if kind == "disagreement":
                        per_out[ai, o] = _metrics.disagreement(Y[:, o], preds[ai][:, o], rows_q)
                    else:
                        per_out[ai, o] = _metrics.ndcg(Y[:, o], preds[ai][:, o], rows_q, k=k)
        greater = kind == "ndcg"
        scores = np.nanmean(per_out, axis=1)
        valid = np.where(np.isnan(scores), -np.inf if greater else np.inf, scores)
        best = int(np.argmax(valid) if greater else np.argmin(valid))
        self.dual_coef_ = self._y_out(self._solver().coef(float(arr[best])))   # alpha stays the user's
        self.cv_predictions_ = preds[:, :, 0] if self._one_d else preds
        return self._record_selection(CVResult(
            alphas=arr, scores=scores, scores_per_output=per_out, best_alpha=float(arr[best]), best_index=best,
            scoring=scoring if kind != "ndcg" else f"ndcg@{k}", folds=folds, greater_is_better=greater))

    def _sparse_kfold(self, arr, n_folds, kind, k, scoring):
        """k-fold CV of sparse RankRLS: one pass for per-fold statistics of Φ = k(X, X_R).

        The model without fold f is ``(G − G_f + λK_RR)⁻¹ (b − b_f)``; its squared
        loss on fold f is ``AᵀG_fA − 2Aᵀb_f + yᵀL_fy`` (no further pass); ranking
        metrics take one streaming prediction pass for all λ at once.
        """
        import dataclasses

        from .selection import CVResult, _Evaluators, _split_by_fold, fold_of

        source, max_rows = self._train_source
        spec = self.kernel_function()
        Xb = self.basis_
        r = Xb.shape[0]
        v = source.n_outputs
        folds = [RankStatistics(r, v, group_weight=self.group_weight, ties=self.ties, per_output=True)
                 for _ in range(n_folds)]

        def phi_blocks():
            for block in source.blocks(max_rows=max_rows, split_groups=True):
                yield dataclasses.replace(block, X=spec(block.X, Xb))

        for pb in phi_blocks():
            for f, P, Y, gp, size, off, gid, _ in _split_by_fold(pb, fold_of(pb.qid, n_folds)):
                folds[f].add_block(P, Y, gp, group_size=size, group_offset=off, group_id=gid)
        total = RankStatistics(r, v, group_weight=self.group_weight, ties=self.ties, per_output=True)
        for st in folds:
            st.check_complete()
            total.merge(st)
        K_RR = spec(Xb)
        coefs = []
        for st in folds:
            sol = _sparse_solution(total.G - st.G, total.B - st.B, K_RR)
            coefs.append(np.stack([sol.coef(a) for a in arr]))          # (a, r, v)
        if kind == "squared":
            per_out = sum(st.loss(W) for st, W in zip(folds, coefs)) / np.maximum(total.pairs_per_output, 1)
        else:
            ev = _Evaluators(kind, k, len(arr), v)
            for pb in phi_blocks():
                S = np.empty((pb.n_rows, len(arr), v))
                for f, P, _, _, _, _, _, rows in _split_by_fold(pb, fold_of(pb.qid, n_folds)):
                    S[rows] = np.einsum("ir,arv->iav", P, coefs[f])
                ev.update(pb, S)
            per_out = ev.result()
        greater = kind == "ndcg"
        scores = np.nanmean(per_out, axis=1)
        valid = np.where(np.isnan(scores), -np.inf if greater else np.inf, scores)
        best = int(np.argmax(valid) if greater else np.argmin(valid))
        self.dual_coef_ = self._y_out(self._sparse.coef(float(arr[best])))   # alpha stays the user's
        self.__dict__.pop("cv_predictions_", None)
        return self._record_selection(CVResult(
            alphas=arr, scores=scores, scores_per_output=per_out, best_alpha=float(arr[best]), best_index=best,
            scoring=scoring if kind != "ndcg" else f"ndcg@{k}", folds=n_folds, greater_is_better=greater))

    # ------------------------------------------------------------ persistence
    def _get_state(self):
        self._check_fitted("dual_coef_")
        if callable(self.kernel):
            raise ValueError("a KernelRankRLS with a callable kernel cannot be saved (the callable is code, "
                             "and models are stored without pickle); use a named kernel")
        if sp.issparse(self.basis):
            raise ValueError("a model whose basis parameter is a sparse matrix cannot be saved (parameters are "
                             "JSON); the learned basis_ is stored, so set_params(basis='random') first")
        attrs = {"n_features_in_": int(self.n_features_in_), "n_outputs_": int(self.n_outputs_),
                 "one_d": bool(self._one_d), "mode": self._mode}
        basis = self.basis_
        arrays = {"basis_": basis if sp.issparse(basis) else np.asarray(basis),
                  "dual_coef_": np.asarray(self.dual_coef_)}
        # what path / hold-outs need after loading (extra arrays; see the module docstring)
        if self._mode == "dual":
            arrays["train_y"] = np.asarray(self._Y, dtype=np.float64)
            arrays["train_group_ptr"] = np.asarray(self._group_ptr, dtype=np.int64)
            arrays["train_group_qid"] = qid_keys(self._group_qid)  # folds need only the keys
        elif self._mode == "sparse":
            arrays["stats_G"], arrays["stats_B"] = self._sparse_stats
            attrs["max_rows"] = int(self._max_rows)
            attrs["n_groups_"] = int(self.n_groups_)
        return attrs, arrays

    def _set_state(self, attrs, arrays):
        self.n_features_in_ = state_int(attrs, "n_features_in_", lo=1)
        self.n_outputs_ = state_int(attrs, "n_outputs_", lo=1)
        self._one_d = bool(attrs["one_d"])
        mode = attrs.get("mode", "dual")
        self.basis_ = state_matrix(arrays, "basis_", (None, self.n_features_in_))
        m = self.basis_.shape[0]
        self.dual_coef_ = state_array(arrays, "dual_coef_", (m,) if self._one_d else (m, self.n_outputs_))
        if mode == "dual" and "train_y" in arrays:
            self._Y = state_array(arrays, "train_y", (m, self.n_outputs_))
            self._group_ptr = state_array(arrays, "train_group_ptr", (None,), kind="i", lo=0, hi=m)
            self._group_qid = state_array(arrays, "train_group_qid", (len(self._group_ptr) - 1,), kind="i")
            gp = self._group_ptr
            if gp.size == 0 or gp[0] != 0 or gp[-1] != m or np.any(gp[1:] < gp[:-1]):
                raise ValueError(f"train_group_ptr does not run from 0 to the {m} basis rows without decreasing")
            self._mode = "dual"                 # the decomposition is recomputed on first use (_solver)
        elif mode == "sparse" and "stats_G" in arrays:
            G = state_array(arrays, "stats_G", (None,) * np.ndim(arrays["stats_G"]))
            B = state_array(arrays, "stats_B", (None, None))
            r = self.basis_.shape[0]
            if G.shape not in ((r, r), (self.n_outputs_, r, r)) or B.shape != (r, self.n_outputs_):
                raise ValueError(f"stats_G {G.shape} / stats_B {B.shape} do not match the {r} basis rows")
            self._sparse_stats = (G, B)
            self._max_rows = int(attrs.get("max_rows", 0)) or None
            if "n_groups_" in attrs:
                self.n_groups_ = int(attrs["n_groups_"])
            self._mode = "sparse"
        else:
            self._mode = mode + "-loaded"       # written before these arrays existed: predict only


_FITTED_STATE = ("dual_coef_", "_decomp", "_sparse", "_sparse_stats", "_lpo_cache", "_train_source")


def _dual_decomposition(spec, X, Y, gp, group_weight, ties, *, check):
    """The one O(m³) step of the dual: ``BKB = U Λ Uᵀ`` (see :mod:`streamrank.rankrls._dual`).

    ``check``: test that a kernel not PSD by construction is PSD on X (fit;
    a loaded model was checked when it was fitted).
    """
    Y = np.asarray(Y, dtype=np.float64).reshape(len(Y), -1)
    K = spec(X)
    if check and not spec.psd_by_construction:
        check_psd(K, name="kernel")
    if ties == "exclude" and Y.shape[1] > 1:     # every output has its own tie classes: one per output
        parts = []
        for k in range(Y.shape[1]):
            root = LaplacianRoot(gp, Y[:, k:k + 1], group_weight=group_weight, ties=ties)
            held = [root.apply(K.copy() if k + 1 < Y.shape[1] else K, inplace=True)]
            parts.append(DualDecomposition(held, Y[:, k:k + 1], root))
        return PerOutput(parts)
    root = LaplacianRoot(gp, Y, group_weight=group_weight, ties=ties)
    held = [root.apply(K, inplace=True)]     # B K, in the buffer of K, handed over (freed early)
    del K
    return DualDecomposition(held, Y, root)


def _read_all(source):
    """Concatenate every block of a source (dual mode: the data must fit in memory)."""
    Xs, ys, qs = [], [], []
    for block in source.blocks(max_rows=1 << 16, prefetch=False):
        Xs.append(block.X)
        ys.append(np.asarray(block.y))
        qs.append(block.row_qid())
    if not Xs:
        raise ValueError("the source holds no rows")
    X = vstack_X(Xs)
    y = np.concatenate(ys, axis=0)
    qid = np.concatenate(qs)
    if getattr(source, "global_group", False):
        qid = None
    return X, y, qid


def _reservoir(source, r, random_state, max_rows, moments=None):
    """Uniform sample of r rows in one pass (Algorithm R; one uniform per row in row order).

    ``moments`` (a :class:`~streamrank.normalize.FeatureMoments`) is updated with every block on the way.
    """
    rng = np.random.default_rng(random_state)
    dense = None
    sparse_rows = None
    t0 = 0
    for block in source.blocks(max_rows=max_rows, split_groups=True, prefetch=True):
        n = block.n_rows
        t = block.start + np.arange(n)
        if block.start != t0:
            raise ValueError("reservoir sampling needs the blocks in row order")
        t0 += n
        if moments is not None:
            moments.update(block.X)
        u = rng.random(n)
        j = np.where(t < r, t, np.floor(u * (t + 1)).astype(np.int64))
        take = np.flatnonzero(j < r)
        if take.size == 0:
            continue
        X = block.X
        if sp.issparse(X):
            if sparse_rows is None:
                sparse_rows = {}
            for row in take:
                sparse_rows[int(j[row])] = X[row]
        else:
            if dense is None:
                dense = np.zeros((r, X.shape[1]), dtype=np.float64)
            jj = j[take]
            _, last = np.unique(jj[::-1], return_index=True)     # the last row of the block per slot
            sel = take[::-1][last]
            dense[j[sel]] = X[sel]
    if sparse_rows is not None:
        return sp.vstack([sparse_rows[k] for k in range(r)], format="csr").astype(np.float64)
    return dense
