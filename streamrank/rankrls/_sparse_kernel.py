"""Sparse (basis-vector) RankRLS: the streaming solver of ``KernelRankRLS(n_basis=r)``.

§3.5 of the 2009 paper, eq. (41), the sparse RankRLS paper, DESIGN §3.5::

    A = (K_RM L K_MR + λ K_RR)⁻¹ K_RM L y,        f(x) = k(x, X_R) A

Pass 1 draws the r basis rows uniformly by reservoir sampling (Algorithm R,
one uniform per row in row order, so the sample does not depend on how the
stream is cut into blocks; :func:`reservoir`) unless ``basis`` is an array of
rows.  Pass 2 accumulates ``G = K_RM L K_MR`` and ``b = K_RM L y`` block by
block with :class:`~streamrank.rankrls._statistics.RankStatistics` on
Φ_B = k(X_B, X_R) (memory O(r² + block·r)).  Then, instead of the Cholesky
``K_RR = Z Zᵀ`` of eq. (42) we use its eigendecomposition ``K_RR = W S Wᵀ``
and the pseudo-inverse root ``Z⁺ = S₊^{-1/2} W₊ᵀ`` (identical when K_RR is
positive definite; robust when it is only semidefinite, e.g. duplicated
basis rows or the linear kernel with r > n_features — the dropped directions
k(·, X_R)v = 0 carry no function), and ``Z⁺ G Z⁺ᵀ = V Λ Vᵀ``
(:class:`SparseSolution`):

    A(λ) = Z⁺ᵀ V (Λ + λ)⁻¹ Vᵀ Z⁺ b        — O(r²) per λ.

The sparse model is a primal RankRLS on the r₊ features ψ(x) = Z⁺ k(X_R, x),
so leave-query-out takes one more streaming pass (Woodbury per group), and
k-fold cross-validation one pass for per-fold statistics.

:data:`SPARSE` is the sparse mode of the estimator: it reads and writes the
fitted state on the :class:`~streamrank.rankrls.kernel.KernelRankRLS`
(``_sparse_stats``, the solution ``_sparse``, ``_train_source``,
``_max_rows``), as the dual mode of :mod:`streamrank.rankrls.kernel` does
with its own.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from .._phases import counted, phase
from .._state_checks import state_array
from .._validation import check_n_features, check_X
from ..io.blocks import BlockSource
from ..kernels import KernelColumns
from ..normalize import FeatureMoments, NormalizedSource
from ._dual import LaplacianRoot, PerOutput
from ._kernel_cv import check_folds, choose, heldout_scores
from ._statistics import RankStatistics

__all__ = ["SparseSolution", "sparse_solution", "reservoir", "SparseMode", "SPARSE"]


class SparseSolution:
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


def sparse_solution(G, B, K_RR):
    """The sparse solution of shared statistics, or one per output (G a (v, r, r) stack: ties="exclude")."""
    G = np.asarray(G, dtype=np.float64)
    if G.ndim == 3:
        return PerOutput([SparseSolution(G[k], B[:, k:k + 1], K_RR) for k in range(G.shape[0])])
    return SparseSolution(G, B, K_RR)


def _default_max_rows(r):
    return max(256, (1 << 22) // max(r, 1))


class SparseMode:
    """The sparse mode of :class:`~streamrank.rankrls.kernel.KernelRankRLS` (no state of its own)."""

    name = "sparse"

    # -------------------------------------------------------------------- fit
    def fit(self, est, spec, source, max_rows):
        """Two streaming passes: the basis (reservoir sample, or the given rows), then the statistics."""
        m = source.n_rows
        if m < 1:
            raise ValueError("X has 0 rows; at least 1 needed")
        est.n_outputs_ = source.n_outputs
        check_n_features(est, source.n_features, reset=True)
        if isinstance(est.basis, str):
            r = int(est.n_basis)
            if r > m:
                raise ValueError(f"n_basis={r} exceeds the number of training rows ({m}); "
                                 f"use n_basis <= {m} (n_basis = rows gives the exact dual)")
            if max_rows is None:
                max_rows = _default_max_rows(r)
            moments = None if est.normalize is None else FeatureMoments(source.n_features)
            Xb = reservoir(source, r, est.random_state, max(max_rows, 1 << 16),  # rows only: large reads
                           moments=moments)
        else:
            Xb = check_X(est.basis, "basis", n_features=source.n_features, min_rows=1)
            if est.n_basis is not None and Xb.shape[0] != est.n_basis:
                raise ValueError(f"basis has {Xb.shape[0]} rows but n_basis={est.n_basis}")
            r = Xb.shape[0]
            if max_rows is None:
                max_rows = _default_max_rows(r)
            moments = None
            if est.normalize is not None:   # no sampling pass to ride along: one pass of its own
                moments = FeatureMoments(source.n_features)
                for block in source.blocks(max_rows=max(max_rows, 1 << 16), split_groups=True):
                    moments.update(block.X)
        normalizer = None
        if moments is not None:
            normalizer = moments.normalizer(est.normalize)
            Xb = normalizer.transform(Xb)
            source = NormalizedSource(source, normalizer)
        v = source.n_outputs
        # per_output: one G per output when each has its own tie classes (ties="exclude", several outputs)
        stats = RankStatistics(r, v, group_weight=est.group_weight, ties=est.ties, per_output=True)
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
        return est.fit_basis_statistics(stats, Xb, source, max_rows, one_d=bool(ys and ys[0] == 1),
                                        normalizer=normalizer)

    def finish(self, est, spec, stats, basis, source, max_rows, one_d):
        """Solve from complete statistics (the state ``fit_basis_statistics`` leaves)."""
        est._sparse_stats = (np.array(stats.G, dtype=np.float64), np.array(stats.B, dtype=np.float64))
        est._sparse = sparse_solution(*est._sparse_stats, spec(basis))
        if one_d is None:
            one_d = source.n_outputs == 1 and getattr(source, "y_ndim", 1) == 1
        est._one_d = bool(one_d)
        est._mode = self.name
        est._train_source = (source, max_rows)
        est._max_rows = int(max_rows)
        est.basis_ = basis
        est.dual_coef_ = est._y_out(est._sparse.coef(est.alpha))
        est.n_groups_ = stats.n_groups

    # ----------------------------------------------------------------- solver
    def solver(self, est):
        """The solution behind path and hold-outs; recomputed once (O(r³)) after ``sr.load``."""
        if getattr(est, "_sparse", None) is None:
            est._sparse = sparse_solution(*est._sparse_stats, est.kernel_function()(est.basis_))
        return est._sparse

    # --------------------------------------------------------------- hold-out
    def leave_query_out(self, est, alpha, source):
        """One streaming pass over the training source (or ``source``), Woodbury per group."""
        max_rows = getattr(est, "_max_rows", None) or _default_max_rows(est.basis_.shape[0])
        if source is None:
            if getattr(est, "_train_source", None) is None:
                raise ValueError("leave_query_out of a sparse model streams its training data again; this "
                                 "model was loaded from disk, so pass source= (the training source)")
            source, max_rows = est._train_source
        elif not isinstance(source, BlockSource):
            raise TypeError(f"source must be a block source (sr.as_source(X, y, qid), a GroupStore); got "
                            f"{type(source).__name__}")
        elif getattr(est, "normalizer_", None) is not None:
            source = NormalizedSource(source, est.normalizer_)
        if source.n_groups < 2:
            raise ValueError("leave_query_out needs at least 2 query groups; the model was trained "
                             "on one group")
        spec = est.kernel_function()
        sol = self.solver(est)
        # one solution per output when every output has its own Laplacian (ties="exclude", several outputs)
        parts = sol.parts if isinstance(sol, PerOutput) else [sol]
        cols = [slice(k, k + 1) for k in range(len(parts))] if isinstance(sol, PerOutput) else [slice(None)]
        out = np.empty((source.n_rows, est.n_outputs_))
        with phase(f"leave-query-out (λ={alpha:.4g})", total=source.n_groups, unit="groups") as progress:
            self._lqo_pass(est, spec, parts, cols, source, max_rows, alpha, out, progress)
        return out

    def _lqo_pass(self, est, spec, parts, cols, source, max_rows, alpha, out, progress):
        for block in source.blocks(max_rows=max_rows, split_groups=False):
            Kb = spec(block.X, est.basis_)
            Yb = np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, -1)
            gp = block.group_ptr
            for part, c in zip(parts, cols):
                d = 1.0 / (part.eigenvalues + alpha)
                Psi = Kb @ part.T                                 # ψ in the eigenbasis (rows, r₊)
                F = Psi @ (d[:, None] * part.z)
                Y = Yb[:, c]
                root = LaplacianRoot(gp, Y, group_weight=est.group_weight, ties=est.ties)
                for g in range(block.n_groups):
                    a, b = gp[g], gp[g + 1]
                    Pg = Psi[a:b]
                    H = (Pg * d) @ Pg.T                           # Ψ_g P Ψ_gᵀ
                    S = root.block(g)
                    M = np.eye(b - a) - S @ H @ S
                    corr = H @ S @ np.linalg.solve(M, S @ (F[a:b] - Y[a:b]))
                    out[block.start + a:block.start + b, c] = F[a:b] + corr
            progress.update(block.n_groups)

    def leave_pair_out(self, est, pairs, alpha):
        raise ValueError("leave_pair_out is implemented for the exact dual (n_basis=None)")

    # ----------------------------------------------------------- model choice
    def cross_validate(self, est, arr, folds, kind, k, scoring):
        """Leave-query-out from one prediction pass per λ, or k-fold from per-fold statistics."""
        if getattr(est, "_train_source", None) is None:
            raise ValueError("cross_validate of a sparse model streams its training data; this model was "
                             "loaded from disk, so pass source= (it is refitted on it)")
        src = est._train_source[0]
        gp = src.group_ptr
        if check_folds(folds, len(gp) - 1) is None:
            return self._kfold(est, arr, int(folds), kind, k, scoring)
        preds = np.stack([self.leave_query_out(est, a, None) for a in arr])
        Y = src.read_y(0, src.n_rows).reshape(preds.shape[1], -1)
        per_out = heldout_scores(preds, Y, gp, group_weight=est.group_weight, ties=est.ties, kind=kind, k=k)
        result = choose(arr, per_out, kind=kind, k=k, scoring=scoring, folds=folds)
        est.dual_coef_ = est._y_out(self.solver(est).coef(result.best_alpha))   # alpha stays the user's
        est.cv_predictions_ = preds[:, :, 0] if est._one_d else preds
        return result

    def _kfold(self, est, arr, n_folds, kind, k, scoring):
        """k-fold CV of sparse RankRLS: one pass for per-fold statistics of Φ = k(X, X_R).

        The model without fold f is ``(G − G_f + λK_RR)⁻¹ (b − b_f)``; its squared
        loss on fold f is ``AᵀG_fA − 2Aᵀb_f + yᵀL_fy`` (no further pass); ranking
        metrics take one streaming prediction pass for all λ at once.
        """
        from .selection import _Evaluators, _split_by_fold, fold_of

        source, max_rows = est._train_source
        spec = est.kernel_function()
        Xb = est.basis_
        v = source.n_outputs
        folds = self.fold_statistics(est, source, n_folds, max_rows)
        total, coefs = self.fold_coefs(est, folds, arr)
        if kind == "squared":
            per_out = sum(st.loss(W) for st, W in zip(folds, coefs)) / np.maximum(total.pairs_per_output, 1)
        else:
            ev = _Evaluators(kind, k, len(arr), v)
            with phase(f"held-out {kind} of {len(arr)} λ (one pass)", total=source.n_rows, unit="rows") as p:
                for block in source.blocks(max_rows=max_rows, split_groups=True):
                    pb = dataclasses.replace(block, X=spec(block.X, Xb))
                    S = np.empty((pb.n_rows, len(arr), v))
                    for f, P, _, _, _, _, _, rows in _split_by_fold(pb, fold_of(pb.qid, n_folds)):
                        S[rows] = np.einsum("ir,arv->iav", P, coefs[f])
                    ev.update(pb, S)
                    p.update(block.n_rows)
            per_out = ev.result()
        result = choose(arr, per_out, kind=kind, k=k, scoring=scoring, folds=n_folds)
        est.dual_coef_ = est._y_out(est._sparse.coef(result.best_alpha))   # alpha stays the user's
        est.__dict__.pop("cv_predictions_", None)
        return result

    def fold_statistics(self, est, source, n_folds, max_rows):
        """Per-fold statistics of Φ = k(X, X_R) over ``source`` in one pass (folds by query id, row weights kept)."""
        from .selection import _split_by_fold, fold_of, rows_weight

        spec = est.kernel_function()
        Xb = est.basis_
        r = Xb.shape[0]
        v = source.n_outputs
        folds = [RankStatistics(r, v, group_weight=est.group_weight, ties=est.ties, per_output=True)
                 for _ in range(n_folds)]
        with phase(f"fold statistics ({n_folds} folds, one pass)", total=source.n_rows, unit="rows") as p:
            for block in source.blocks(max_rows=max_rows, split_groups=True):
                pb = dataclasses.replace(block, X=spec(block.X, Xb))
                for f, P, Y, gp, size, off, gid, rows in _split_by_fold(pb, fold_of(pb.qid, n_folds)):
                    folds[f].add_block(P, Y, gp, group_size=size, group_offset=off, group_id=gid,
                                       weight=rows_weight(pb, rows))
                p.update(block.n_rows)
        return folds

    def fold_coefs(self, est, folds, arr):
        """``(total, coefs)``: the summed statistics and, per fold, A(λ) (a, r, v) trained without it."""
        spec = est.kernel_function()
        Xb = est.basis_
        total = RankStatistics(Xb.shape[0], folds[0].n_outputs, group_weight=est.group_weight, ties=est.ties,
                               per_output=True)
        for st in folds:
            st.check_complete()
            total.merge(st)
        K_RR = spec(Xb)
        coefs = []
        for st in counted(folds, f"CV folds (the model without each, {len(arr)} λ)", "folds"):
            sol = sparse_solution(total.G - st.G, total.B - st.B, K_RR)
            coefs.append(np.stack([sol.coef(a) for a in arr]))          # (a, r, v)
        return total, coefs

    def select_from_fold_statistics(self, est, folds, arr):
        """k-fold choice of λ (squared loss per pair) from per-fold statistics alone: ``(CVResult, total)``."""
        total, coefs = self.fold_coefs(est, folds, arr)
        per_out = sum(st.loss(W) for st, W in zip(folds, coefs)) / np.maximum(total.pairs_per_output, 1)
        return choose(arr, per_out, kind="squared", k=None, scoring="squared", folds=len(folds)), total

    # ------------------------------------------------------------ persistence
    def get_state(self, est, attrs, arrays):
        """Its r × r statistics K_RM L K_MR and K_RM L y (the O(r³) step is redone on load)."""
        arrays["stats_G"], arrays["stats_B"] = est._sparse_stats
        attrs["max_rows"] = int(est._max_rows)
        attrs["n_groups_"] = int(est.n_groups_)

    def has_state(self, arrays):
        return "stats_G" in arrays

    def set_state(self, est, attrs, arrays):
        G = state_array(arrays, "stats_G", (None,) * np.ndim(arrays["stats_G"]))
        B = state_array(arrays, "stats_B", (None, None))
        r = est.basis_.shape[0]
        if G.shape not in ((r, r), (est.n_outputs_, r, r)) or B.shape != (r, est.n_outputs_):
            raise ValueError(f"stats_G {G.shape} / stats_B {B.shape} do not match the {r} basis rows")
        est._sparse_stats = (G, B)
        est._max_rows = int(attrs.get("max_rows", 0)) or None
        if "n_groups_" in attrs:
            est.n_groups_ = int(attrs["n_groups_"])
        est._mode = self.name


SPARSE = SparseMode()


def reservoir(source, r, random_state, max_rows, moments=None):
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
