"""Conjugate-gradient linear RankRLS: one streaming pass per iteration.

Solves ``(Xᵀ L X + λ I) w = Xᵀ L y`` without ever forming the n × n matrix:
a product with ``Xᵀ L X`` is one pass over the blocks,

    u_B = X_B v,   (L u)_B per group in O(rows),   z += X_Bᵀ (L u)_B,

O(nnz) time and O(n) memory.  :class:`RankingOperator` is that product as a
``scipy.sparse.linalg.LinearOperator`` (usable with ``scipy.sparse.linalg.cg``
and, with blocks mapped on workers, by the distributed pipeline).

:func:`solve_cg` runs Jacobi-preconditioned CG itself rather than through
``scipy.sparse.linalg.cg`` because (a) scipy's callback receives only the
iterate, so reporting the residual per iteration would cost one more pass
per iteration, and (b) several outputs are solved together, one pass per
iteration for all of them (independent CG recurrences per column).  A test
checks that it agrees with ``scipy.sparse.linalg.cg`` on the same operator.

A group cut across blocks (``split_groups=True``; one global group of many
rows), with ``ties="exclude"`` too, is handled exactly by the bookkeeping of
:mod:`streamrank.rankrls._split_groups` (its formulas are there).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from .._defaults import DEFAULT_BLOCK_ROWS
from .._phases import phase
from ..laplacian import apply_laplacian, group_weights, tie_classes
from . import _split_groups
from ._split_groups import (
    TieTable,
    _block_apply,
    _block_Y,
    _col_outputs,
    _col_sum,
    _is_piece,
    _Open,
    _piece_classes,
    _ties_table,
    _weighted_piece,
    _xtu,
    deferred_piece,
    finish_classes,
)
from ._group_weights import weight_totals
from ._gram import _id_sums, _indicator

__all__ = ["RankingOperator", "TieTable", "laplacian_pass", "gram_diagonal", "solve_cg", "validation_loss",
           "ConvergenceWarning"]


def laplacian_pass(source, V=None, *, group_weight="pair", ties="include", max_rows=DEFAULT_BLOCK_ROWS, ties_table=None,
                   split_sums=None, weight_total=None):
    """One pass: ``Xᵀ L X V`` for V (n, k), or ``Xᵀ L Y`` when V is None.  Returns (n, k) float64.

    ``ties_table``: the :class:`TieTable` of ``source`` at ``max_rows``
    (ties="exclude" with split groups; built here — one more pass — when omitted).
    ``split_sums``: a dict kept between passes over the same source and
    ``max_rows`` (:class:`RankingOperator` does): the feature sums ``S_g`` of
    split groups, recorded by the first pass (up to :data:`~streamrank.rankrls._split_groups.TIE_CACHE_ENTRIES`
    numbers) so that later passes skip one column sum per piece.
    ``weight_total``: the split groups' weights W_g of a row-weighted source
    (:func:`~streamrank.rankrls._group_weights.weight_totals`, kept between
    passes by :class:`RankingOperator`; read here when omitted).
    """
    n, v = source.n_features, source.n_outputs
    k = v if V is None else V.shape[1]
    table = _ties_table(source, ties, max_rows, ties_table)
    Z = np.zeros((n, k))
    opens = _Open(group_weight, split_sums, _split_groups.TIE_CACHE_ENTRIES)
    deferred = {}
    wtot = weight_total if weight_total is not None else weight_totals(source, max_rows)
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        Y = _block_Y(block, v)
        U = Y if V is None else np.asarray(block.X @ V, dtype=np.float64)
        LU, closes = _block_apply(block, U, Y, group_weight, ties, opens, table, weight_total=wtot)
        Z += _xtu(block.X, LU)
        for s, S, t in closes:
            Z -= s * np.outer(S, t)
        finish_classes(Z, table, opens.tie_done, k, v, deferred)
        opens.tie_done.clear()
    opens.check()
    if deferred:  # class sums too many to cache: Z += X_pᵀ (s T_{c(i)})_i over the pieces again
        for block in source.blocks(max_rows=max_rows, split_groups=True):
            if _is_piece(block) and int(block.group_start) in deferred:
                Z += deferred_piece(block, table, deferred, k, v)
    return Z


def block_diagonal(block, group_weight, ties, table, n_outputs, opens, weight_total=None):
    """One block's part of diag(XᵀLX) (n,) and the split groups it completes.

    Pieces of split groups add their column sums S_g to ``opens``; returns
    ``(d, closes)`` with closes = (s_g, S_g, 0) of the groups completed here,
    whose ``− s_g S_g²`` is still to be subtracted.  ``table``: the
    :class:`TieTable` (ties="exclude" with split groups; its
    :meth:`TieTable.diagonal_term` is added once by the caller).
    """
    n, v = block.X.shape[1], n_outputs
    diag = np.zeros(n)
    closes = []
    X, gp = block.X, block.group_ptr
    local = np.diff(gp)
    whole = (block.group_offset == 0) & (block.group_size == local)
    s = group_weights(block.group_size, group_weight)
    rg = np.repeat(np.arange(block.n_groups), local)
    d = (s * block.group_size)[rg]
    X2 = X.multiply(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64) ** 2
    nc = 0.0
    if ties == "exclude" and block.n_rows and not whole.all():
        if table is None:
            raise NotImplementedError("ties='exclude' on a group cut across blocks needs its TieTable")
        table._piece_weight(block)
        _, nc = table.rows(block, _block_Y(block, v), 0)     # n_c, or W_c on a weighted table
        d = d - s[0] * nc
    w = getattr(block, "weight", None)
    if w is not None and not whole.all():   # a weighted piece: d_i = s_g (W_g − W_c(i)) w_i, S_g = Σ_p X_pᵀ w_p
        s_g, W_g, w = _weighted_piece(block, group_weight, ties, weight_total, ties_table=table)
        diag += np.asarray(X2.T @ (s_g * (W_g - nc) * w), dtype=np.float64).ravel()
        done = opens.add(int(block.group_start), block.n_rows, int(block.group_size[0]),
                         _xtu(X, w[:, None])[:, 0], 0.0)
        return diag, ([done] if done is not None else [])
    if w is not None:                       # row weights: d_i = s_g W_g w_i, weighted sums (laplacian docstring)
        d = (s * np.bincount(rg, weights=w, minlength=block.n_groups))[rg] * w
    diag += np.asarray(X2.T @ d, dtype=np.float64).ravel()
    S = (_indicator(rg, block.n_groups) if w is None else _weighted_indicator(rg, block.n_groups, w)) @ X
    S2 = S.multiply(S) if sp.issparse(S) else np.asarray(S) ** 2
    diag -= np.asarray(S2.T @ np.where(whole, s, 0.0), dtype=np.float64).ravel()
    if ties == "exclude" and block.n_rows and whole.all():
        Y = _block_Y(block, v)
        cid, cg_, cs = tie_classes(Y[:, 0], gp)
        keep = whole[cg_] & (cs > 1)
        if w is None:
            dc = np.where(keep[cid], s[cg_][cid] * cs[cid], 0.0)
            Sc = _id_sums(X, cid, len(cg_))
        else:
            Wc = np.bincount(cid, weights=w, minlength=len(cg_))
            dc = np.where(keep[cid], s[cg_][cid] * Wc[cid] * w, 0.0)
            Sc = _weighted_indicator(cid, len(cg_), w) @ X
        diag -= np.asarray(X2.T @ dc, dtype=np.float64).ravel()
        Sc2 = Sc.multiply(Sc) if sp.issparse(Sc) else np.asarray(Sc) ** 2
        diag += np.asarray(Sc2.T @ np.where(keep, s[cg_], 0.0), dtype=np.float64).ravel()
    gid = block.group_start + np.arange(block.n_groups)
    for g in np.flatnonzero(~whole):
        a, b = gp[g], gp[g + 1]
        done = opens.add(int(gid[g]), int(b - a), int(block.group_size[g]), _col_sum(X[a:b]), 0.0)
        if done is not None:
            closes.append(done)
    return diag, closes


def _weighted_indicator(labels, n_labels, w):
    """(n_labels, rows) CSR with w_i at (labels_i, i): its product with X gives weighted label sums."""
    return sp.csr_matrix((w, (labels, np.arange(labels.shape[0]))), shape=(n_labels, labels.shape[0]))


def gram_diagonal(source, *, group_weight="pair", ties="include", max_rows=DEFAULT_BLOCK_ROWS, ties_table=None,
                  moments=None):
    """diag(Xᵀ L X) in one pass (Jacobi preconditioner), O(n) memory.

    With ``ties="exclude"`` the tie classes of output 0 are used.  For a split
    group whose class sums are not cached (:class:`TieTable`) the
    non-negative term ``s_g Σ_c (S_c)_j²`` is left out: a valid (smaller,
    still positive with alpha) preconditioner, not the exact diagonal.
    ``moments``: a :class:`~streamrank.normalize.FeatureMoments` updated with
    every block on the way (normalize=, no pass of its own).
    """
    n, v = source.n_features, source.n_outputs
    table = _ties_table(source, ties, max_rows, ties_table)
    diag = np.zeros(n)
    opens = _Open(group_weight)
    wtot = weight_totals(source, max_rows)
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        if moments is not None:
            moments.update(block.X)
        d, closes = block_diagonal(block, group_weight, ties, table, v, opens, weight_total=wtot)
        diag += d
        for s, S, _ in closes:
            diag -= s * S ** 2
    opens.check()
    if table is not None:
        diag += table.diagonal_term(group_weight)
    return diag


class _PassOperator(LinearOperator):
    """``V -> (Xᵀ L X + alpha I) V`` and ``rhs() = Xᵀ L Y`` from a subclass's ``_pass``.

    ``_pass(V)`` returns ``Xᵀ L X V`` (``V=None``: ``Xᵀ L Y``), one pass over
    the data: here (:class:`RankingOperator`) or mapped over a dask cluster
    (:class:`streamrank.distributed._cg.DistributedRankingOperator`).
    Subclasses set ``alpha`` and ``n_passes``.
    """

    def _pass(self, V):
        raise NotImplementedError

    def _matmat(self, V):
        V = np.asarray(V, dtype=np.float64)
        self.n_passes += 1
        return self._pass(V) + self.alpha * V

    def _matvec(self, v):
        return self._matmat(np.asarray(v).reshape(-1, 1))[:, 0]

    def _adjoint(self):
        return self

    def rhs(self):
        """``Xᵀ L Y`` (n, v), one pass."""
        self.n_passes += 1
        return self._pass(None)


class RankingOperator(_PassOperator):
    """``v -> (Xᵀ L X + alpha I) v`` where every product is one streaming pass over ``source``.

    ``n_passes`` counts the passes.  With ``ties="exclude"`` and several
    outputs, ``matmat`` applies output j's Laplacian to column j.  With
    ``ties="exclude"`` and a group larger than ``max_rows`` (split across
    blocks) the operator first builds the group's :class:`TieTable` (one or two
    passes, once; counted in ``n_passes``); ``alpha`` may be changed between
    products (regularization path).
    """

    def __init__(self, source, *, alpha=0.0, group_weight="pair", ties="include", max_rows=DEFAULT_BLOCK_ROWS):
        n = source.n_features
        super().__init__(dtype=np.float64, shape=(n, n))
        self.source = source
        self.alpha = float(alpha)
        self.group_weight = group_weight
        self.ties = ties
        self.max_rows = max_rows
        self.n_passes = 0
        self._table = None
        self._table_built = False
        self._split_sums = {}
        self._weight_total = weight_totals(source, max_rows)     # W_g of split groups, read once when asked

    def ties_table(self):
        """The :class:`TieTable` of the split groups (ties="exclude"), or None."""
        if not self._table_built:
            self._table = _ties_table(self.source, self.ties, self.max_rows, None)
            self._table_built = True
            if self._table is not None:
                self.n_passes += self._table.n_passes
        return self._table

    def _pass(self, V):
        table = self.ties_table()
        if table is not None and not table.cached:
            self.n_passes += 1          # the second sweep over the split groups' pieces
        return laplacian_pass(self.source, V, group_weight=self.group_weight, ties=self.ties,
                              max_rows=self.max_rows, ties_table=table, split_sums=self._split_sums,
                              weight_total=self._weight_total)

    def gram_diagonal(self, moments=None):
        """diag(XᵀLX), one pass (not counted: :func:`solve_cg` counts it); ``moments`` updated on the way."""
        return gram_diagonal(self.source, group_weight=self.group_weight, ties=self.ties,
                             max_rows=self.max_rows, ties_table=self.ties_table(), moments=moments)


class _ScaledOperator(_PassOperator):
    """``V -> (D XᵀLX D + alpha I) V``, D = diag(d): CG on the features scaled by d (normalize=)."""

    def __init__(self, op, d):
        super().__init__(dtype=np.float64, shape=op.shape)
        self.op, self.d = op, np.asarray(d, dtype=np.float64)[:, None]
        self.alpha = op.alpha

    @property
    def n_passes(self):
        return self.op.n_passes

    @n_passes.setter
    def n_passes(self, value):
        if hasattr(self, "op"):
            self.op.n_passes = value

    def _pass(self, V):
        return self.d * (self.op._pass(None) if V is None else self.op._pass(self.d * V))


def validation_loss(source, W, *, group_weight="pair", ties="include", max_rows=DEFAULT_BLOCK_ROWS, ties_table=None):
    """Held-out least-squares ranking loss ``(y - Xw)ᵀ L (y - Xw)`` per output (v,), one pass.

    A split group with ``ties="exclude"`` uses its tie class counts
    (``ties_table``, built here when omitted:
    ``TieTable.for_source(source, max_rows, cache_entries=0)``):
    ``rᵀL_g r = s_g [Σ_i (n_g − n_c(i)) r_i² − (1ᵀr)² + Σ_c (1_cᵀr)²]``;
    with row weights ``s_g [Σ_i (W_g − W_c(i)) w_i r_i² − (wᵀr)² + Σ_c (w_cᵀr)²]``
    (:mod:`streamrank.rankrls._split_groups`).
    """
    v = source.n_outputs
    W = np.asarray(W, dtype=np.float64).reshape(source.n_features, -1)
    k = W.shape[1]
    table = ties_table
    if ties == "exclude" and table is None:
        table = TieTable.for_source(source, max_rows, cache_entries=0)
    tot = np.zeros(k)
    opens = {}
    csums = {}
    wtot = weight_totals(source, max_rows)
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        Y = _block_Y(block, v)
        outs = _col_outputs(k, v) if ties == "exclude" else None
        R = Y - np.asarray(block.X @ W, dtype=np.float64)
        gp = block.group_ptr
        if not _is_piece(block):
            LR = apply_laplacian(R, gp, y=(Y if ties == "exclude" else None), group_weight=group_weight,
                                 weight=getattr(block, "weight", None),
                                 ties=ties, group_size=block.group_size)
            tot += (R * LR).sum(axis=0)
            continue
        # a piece of a split group: rᵀL_g r = s_g (W_g Σ w_i r_i² − (Σ w_i r_i)²); unweighted w ≡ 1, W_g = n_g
        # (wR is R itself and W_g the int n_g there: the same products as an unweighted formula, bit for bit)
        size, gid = int(block.group_size[0]), int(block.group_start)
        if getattr(block, "weight", None) is not None:
            s, W_g, w = _weighted_piece(block, group_weight, ties, wtot, ties_table=table)
            wR = w[:, None] * R
        else:
            s, W_g, w = float(group_weights(np.array([size]), group_weight)[0]), size, None
            wR = R
        d = np.full((block.n_rows, k), s * W_g)
        if ties == "exclude":          # − s_g W_c(i) w_i r_i², + s_g (w_cᵀ r)² per class (module doc)
            if w is not None:
                table._piece_weight(block)
            cls = _piece_classes(block, Y, table, outs)
            Ts = csums.setdefault(gid, [np.zeros(table.n_tied(gid, int(o))) for o in outs])
            for j, o in enumerate(outs):
                c, Wc = cls[int(o)]    # W_c, or n_c unweighted
                d[:, j] -= s * Wc
                r = c >= 0
                Ts[j] += np.bincount(c[r], weights=wR[r, j], minlength=len(Ts[j]))
        tot += (d * wR * R).sum(axis=0)
        st = opens.setdefault(gid, [0, 0.0])
        st[0] += block.n_rows
        st[1] = st[1] + wR.sum(axis=0)
        if st[0] == size:
            tot -= s * st[1] ** 2
            del opens[gid]
            for j, T in enumerate(csums.pop(gid, ())):
                tot[j] += s * float(T @ T)
    return tot


def solve_cg(source, *, alpha, group_weight="pair", ties="include", tol=1e-6, max_iter=None,
             max_rows=DEFAULT_BLOCK_ROWS, callback=None, validation=None, patience=5, x0=None, _operator=None,
             _rhs=None, _diag=None, normalize=None):
    """Jacobi-preconditioned CG for ``(XᵀLX + alpha I) W = XᵀLY``, all outputs at once.

    Parameters
    ----------
    tol
        stop an output when ||r|| <= tol ||b||
    max_iter
        default min(10 n, 1000)
    callback : callable, optional
        ``callback(iteration, residual, W)`` after every iteration;
        ``residual`` is the largest relative residual ||r|| / ||b|| over outputs.
        Returning True stops the iteration.
    validation : optional block source; after every iteration its squared
        ranking loss (mean over outputs) is computed (one more pass) and the
        iteration stops when it has not improved for ``patience`` iterations;
        the best iterate is returned.
    x0
        optional (n,) or (n, v) starting point (warm start; one more pass for its residual)
    normalize : None, "standard" or "minmax" — solve for the features scaled by
        :mod:`streamrank.normalize`; the moments are gathered in the
        preconditioner's pass, ``W`` is on the normalized scale and
        ``info["normalizer"]`` holds the fitted normalizer

    Notes
    -----
    Scaling: the solution is linear in the right-hand side, so each output is
    solved for ``B_j / s_j`` with ``s_j`` the power of two nearest ``max |B_j|``
    and the result multiplied back.  Powers of two are exact, so this changes
    no digit in the usual range, and labels of 1e150 or 1e-200 (whose squared
    residual norms would overflow to inf or underflow to 0 and stop the
    iteration at a zero model) solve as well as labels of 1.  A right-hand side
    that is itself not finite (the pass overflowed float64) is a ``ValueError``.

    Returns
    -------
    W : (n, v) float64
        The solution, one column per right-hand side.
    info : dict with n_iter, residuals (list), converged, validation_losses,
        stopped_early, n_passes
    """
    n = source.n_features
    if source.n_rows == 0:
        raise ValueError("empty input: the source has no rows")
    # _operator: a drop-in RankingOperator whose passes run elsewhere (streamrank.distributed)
    op = _operator if _operator is not None else RankingOperator(
        source, alpha=alpha, group_weight=group_weight, ties=ties, max_rows=max_rows)
    if validation is not None and validation.n_features != n:
        raise ValueError(f"validation has {validation.n_features} features; the training source has {n}")
    # _rhs, _diag: XᵀLY and diag(XᵀLX) of an earlier solve on the same data (path, cross-validation)
    B = op.rhs() if _rhs is None else _rhs
    norm = None
    if normalize is not None:
        from ..normalize import FeatureMoments

        if _diag is not None:
            raise NotImplementedError("normalize= with cg gathers the moments in the solver's own "
                                      "preconditioner pass; a given _diag has none (cg_path(scale=) solves "
                                      "a path on scaled features)")
        moments = FeatureMoments(n)
        _diag = op.gram_diagonal(moments)
        op.n_passes += 1
        norm = moments.normalizer(normalize)
        d = 1.0 / norm.scale
        B, _diag = B * d[:, None], _diag * d * d
        op = _ScaledOperator(op, d)
    scale = _rhs_scale(B)
    B = B / scale
    if _diag is None:
        _diag = op.gram_diagonal()
        op.n_passes += 1
    Mdiag = _diag + alpha
    vtable = None
    if validation is not None and ties == "exclude":
        vtable = TieTable.for_source(validation, max_rows, cache_entries=0)
    Minv = 1.0 / np.maximum(Mdiag, alpha)[:, None]
    max_iter = int(min(10 * n, 1000)) if max_iter is None else int(max_iter)
    v = B.shape[1]
    W = np.zeros((n, v)) if x0 is None else np.array(x0, dtype=np.float64).reshape(n, v) / scale
    R = B - op.matmat(W) if x0 is not None else B.copy()
    bnorm = np.linalg.norm(B, axis=0)
    bnorm_safe = np.where(bnorm > 0, bnorm, 1.0)
    res = np.linalg.norm(R, axis=0) / bnorm_safe
    active = res > tol
    Z = Minv * R
    P = Z.copy()
    rz = np.sum(R * Z, axis=0)
    info = {"n_iter": 0, "residuals": [], "converged": not active.any(), "validation_losses": [],
            "stopped_early": False}
    best = (np.inf, W.copy(), 0)
    it = 0
    # one pass over the data per iteration: the count is the iterations against max_iter, the note the
    # largest relative residual against tol (it stops at whichever comes first)
    with phase(f"cg iterations (λ={alpha:.4g})", total=max_iter, unit="iterations") as progress:
        while active.any() and it < max_iter:
            it += 1
            AP = op.matmat(P)
            pap = np.sum(P * AP, axis=0)
            step = np.where(active & (pap > 0), rz / np.where(pap > 0, pap, 1.0), 0.0)
            W += step * P
            R -= step * AP
            res = np.linalg.norm(R, axis=0) / bnorm_safe
            active &= res > tol
            info["residuals"].append(float(res.max()))
            progress.note(f"residual {float(res.max()):.3g}, tol {tol:g}")
            progress.update(1)
            if not np.isfinite(res).all():
                raise FloatingPointError(f"cg: the residual became {res.max()} at iteration {it} (alpha={alpha}); "
                                         "the system is too ill-conditioned for float64")
            if callback is not None and callback(it, float(res.max()), (W * scale)[:, 0] if v == 1 else W * scale):
                break
            if validation is not None:
                Wraw = W * scale if norm is None else W * scale / norm.scale[:, None]
                vl = float(np.mean(validation_loss(validation, Wraw, group_weight=group_weight, ties=ties,
                                                   max_rows=max_rows, ties_table=vtable)))
                info["validation_losses"].append(vl)
                if vl < best[0]:
                    best = (vl, W.copy(), it)
                elif it - best[2] >= patience:
                    info["stopped_early"] = True
                    break
            Z = Minv * R
            rz_new = np.sum(R * Z, axis=0)
            beta = np.where(active, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
            P = Z + beta * P
            P[:, ~active] = 0.0
            rz = rz_new
    info["n_iter"] = it
    info["converged"] = not active.any()
    info["n_passes"] = op.n_passes
    if norm is not None:
        info["normalizer"] = norm
    if info["stopped_early"]:
        W = best[1]
        info["best_iteration"] = best[2]
    return W * scale, info


class ConvergenceWarning(UserWarning):
    """cg stopped at ``max_iter`` before its relative residual reached ``tol`` (``RankRLS(solver="cg").fit``)."""


def _rhs_scale(B):
    """Per-output power of two nearest ``max |B_j|`` (1 for a zero column); ValueError if B is not finite."""
    B = np.asarray(B, dtype=np.float64)
    if not np.isfinite(B).all():
        j = int(np.flatnonzero(~np.isfinite(B).all(axis=0))[0])
        raise ValueError(f"cg: the right-hand side XᵀLY of output {j} is not finite: the labels (or features) "
                         "overflow float64 in the pass; rescale the labels")
    top = np.max(np.abs(B), axis=0) if B.size else np.zeros(B.shape[1])
    e = np.zeros(B.shape[1])
    nz = top > 0
    e[nz] = np.clip(np.round(np.log2(top[nz])), -1022, 1023)
    return np.ldexp(1.0, e.astype(np.int32))
