"""Conjugate-gradient linear RankRLS: one streaming pass per iteration (DESIGN §3.3).

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
rows) is handled exactly: its pieces add ``s_g n_g X_pᵀ u_p`` at once and
keep ``S_g = Σ_p X_pᵀ 1`` and ``t_g = Σ_p 1ᵀ u_p`` (O(n) per open group)
until the last piece subtracts ``s_g S_g t_gᵀ``.  With ``ties="exclude"``
split groups are not supported (NotImplementedError).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from ..laplacian import apply_laplacian, group_weights, tie_classes
from ._statistics import _id_sums, _indicator

__all__ = ["RankingOperator", "laplacian_pass", "gram_diagonal", "solve_cg", "validation_loss"]


def _block_Y(block, n_outputs):
    return np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, n_outputs)


def _col_sum(X):
    if sp.issparse(X):
        return np.asarray(X.sum(axis=0), dtype=np.float64).ravel()
    return np.asarray(X, dtype=np.float64).sum(axis=0)


def _xtu(X, U):
    return np.asarray(X.T @ U, dtype=np.float64)


class _Open:
    """Running sums of groups cut across blocks."""

    def __init__(self, group_weight):
        self.group_weight = group_weight
        self.groups = {}

    def add(self, gid, rows, size, S, t):
        st = self.groups.get(gid)
        if st is None:
            self.groups[gid] = st = [0, size, 0.0, 0.0]
        st[0] += rows
        st[2] = st[2] + S
        st[3] = st[3] + t
        if st[0] == size:
            del self.groups[gid]
            s = float(group_weights(np.array([size]), self.group_weight)[0])
            return s, st[2], st[3]
        return None

    def check(self):
        if self.groups:
            raise ValueError(f"{len(self.groups)} split group(s) were not seen completely in a pass")


def _block_apply(block, U, Y, group_weight, ties, opens):
    """(L U)_B for the block's rows, with the pieces of split groups handled by ``opens``.

    Returns (LU, closes) where closes is a list of (s, S_g, t_g) of groups
    completed by this block (their low-rank part is still to be subtracted).
    """
    gp = block.group_ptr
    local = np.diff(gp)
    whole = (block.group_offset == 0) & (block.group_size == local)
    yy = None
    if ties == "exclude":
        if not whole.all():
            raise NotImplementedError("solver='cg' with ties='exclude' cannot handle a group cut across "
                                      "blocks; raise max_rows above the largest group or use ties='include'")
        if Y.shape[1] == 1:
            yy = Y[:, 0]
        elif U.shape[1] == Y.shape[1]:
            yy = Y
        else:
            raise NotImplementedError("ties='exclude' with several outputs: one Laplacian per output; "
                                      "apply it to one column per output")
    LU = apply_laplacian(U, gp, y=yy, group_weight=group_weight, ties=ties, group_size=block.group_size)
    closes = []
    if not whole.all():
        s = group_weights(block.group_size, group_weight)
        gid = block.group_start + np.arange(block.n_groups)
        for g in np.flatnonzero(~whole):
            a, b = gp[g], gp[g + 1]
            LU[a:b] = s[g] * block.group_size[g] * U[a:b]
            done = opens.add(int(gid[g]), int(b - a), int(block.group_size[g]),
                             _col_sum(block.X[a:b]), U[a:b].sum(axis=0))
            if done is not None:
                closes.append(done)
    return LU, closes


def laplacian_pass(source, V=None, *, group_weight="pair", ties="include", max_rows=65_536):
    """One pass: ``Xᵀ L X V`` for V (n, k), or ``Xᵀ L Y`` when V is None.  Returns (n, k) float64."""
    n, v = source.n_features, source.n_outputs
    k = v if V is None else V.shape[1]
    Z = np.zeros((n, k))
    opens = _Open(group_weight)
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        Y = _block_Y(block, v)
        U = Y if V is None else np.asarray(block.X @ V, dtype=np.float64)
        LU, closes = _block_apply(block, U, Y, group_weight, ties, opens)
        Z += _xtu(block.X, LU)
        for s, S, t in closes:
            Z -= s * np.outer(S, t)
    opens.check()
    return Z


def gram_diagonal(source, *, group_weight="pair", ties="include", max_rows=65_536):
    """diag(Xᵀ L X) in one pass (Jacobi preconditioner), O(n) memory."""
    n, v = source.n_features, source.n_outputs
    diag = np.zeros(n)
    opens = _Open(group_weight)
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        X, gp = block.X, block.group_ptr
        local = np.diff(gp)
        whole = (block.group_offset == 0) & (block.group_size == local)
        s = group_weights(block.group_size, group_weight)
        rg = np.repeat(np.arange(block.n_groups), local)
        d = (s * block.group_size)[rg]
        X2 = X.multiply(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64) ** 2
        diag += np.asarray(X2.T @ d, dtype=np.float64).ravel()
        S = _indicator(rg, block.n_groups) @ X
        S2 = S.multiply(S) if sp.issparse(S) else np.asarray(S) ** 2
        diag -= np.asarray(S2.T @ np.where(whole, s, 0.0), dtype=np.float64).ravel()
        if ties == "exclude" and block.n_rows:
            Y = _block_Y(block, v)
            cid, cg_, cs = tie_classes(Y[:, 0], gp)
            keep = whole[cg_] & (cs > 1)
            dc = np.where(keep[cid], s[cg_][cid] * cs[cid], 0.0)
            diag -= np.asarray(X2.T @ dc, dtype=np.float64).ravel()
            Sc = _id_sums(X, cid, len(cg_))
            Sc2 = Sc.multiply(Sc) if sp.issparse(Sc) else np.asarray(Sc) ** 2
            diag += np.asarray(Sc2.T @ np.where(keep, s[cg_], 0.0), dtype=np.float64).ravel()
        gid = block.group_start + np.arange(block.n_groups)
        for g in np.flatnonzero(~whole):
            a, b = gp[g], gp[g + 1]
            done = opens.add(int(gid[g]), int(b - a), int(block.group_size[g]), _col_sum(X[a:b]), 0.0)
            if done is not None:
                diag -= done[0] * done[1] ** 2
    opens.check()
    return diag


class _PassOperator(LinearOperator):
    """``V -> (Xᵀ L X + alpha I) V`` and ``rhs() = Xᵀ L Y`` from a subclass's ``_pass``.

    ``_pass(V)`` returns ``Xᵀ L X V`` (``V=None``: ``Xᵀ L Y``), one pass over
    the data: here (:class:`RankingOperator`) or mapped over a dask cluster
    (:class:`streamrank._distributed_cg.DistributedRankingOperator`).
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
    outputs, ``matmat`` applies output j's Laplacian to column j.
    """

    def __init__(self, source, *, alpha=0.0, group_weight="pair", ties="include", max_rows=65_536):
        n = source.n_features
        super().__init__(dtype=np.float64, shape=(n, n))
        self.source = source
        self.alpha = float(alpha)
        self.group_weight = group_weight
        self.ties = ties
        self.max_rows = max_rows
        self.n_passes = 0

    def _pass(self, V):
        return laplacian_pass(self.source, V, group_weight=self.group_weight, ties=self.ties,
                              max_rows=self.max_rows)


def validation_loss(source, W, *, group_weight="pair", ties="include", max_rows=65_536):
    """Held-out least-squares ranking loss ``(y - Xw)ᵀ L (y - Xw)`` per output (v,), one pass."""
    v = source.n_outputs
    tot = np.zeros(W.shape[1])
    opens = {}
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        Y = _block_Y(block, v)
        R = Y - np.asarray(block.X @ W, dtype=np.float64)
        gp = block.group_ptr
        local = np.diff(gp)
        whole = (block.group_offset == 0) & (block.group_size == local)
        if ties == "exclude" and not whole.all():
            raise NotImplementedError("validation with ties='exclude' needs whole groups per block")
        LR = apply_laplacian(R, gp, y=(Y if ties == "exclude" else None), group_weight=group_weight,
                             ties=ties, group_size=block.group_size)
        s = group_weights(block.group_size, group_weight)
        gid = block.group_start + np.arange(block.n_groups)
        for g in np.flatnonzero(~whole):
            a, b = gp[g], gp[g + 1]
            LR[a:b] = s[g] * block.group_size[g] * R[a:b]
            st = opens.setdefault(int(gid[g]), [0, 0.0])
            st[0] += b - a
            st[1] = st[1] + R[a:b].sum(axis=0)
            if st[0] == block.group_size[g]:
                tot -= s[g] * st[1] ** 2
                del opens[int(gid[g])]
        tot += (R * LR).sum(axis=0)
    return tot


def solve_cg(source, *, alpha, group_weight="pair", ties="include", tol=1e-6, max_iter=None,
             max_rows=65_536, callback=None, validation=None, patience=5, x0=None, _operator=None):
    """Jacobi-preconditioned CG for ``(XᵀLX + alpha I) W = XᵀLY``, all outputs at once.

    Parameters
    ----------
    tol : stop an output when ||r|| <= tol ||b||
    max_iter : default min(10 n, 1000)
    callback : ``callback(iteration, residual, W)`` after every iteration;
        ``residual`` is the largest relative residual ||r|| / ||b|| over outputs.
        Returning True stops the iteration.
    validation : optional block source; after every iteration its squared
        ranking loss (mean over outputs) is computed (one more pass) and the
        iteration stops when it has not improved for ``patience`` iterations;
        the best iterate is returned.

    Returns
    -------
    W : (n, v) float64
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
    B = op.rhs()
    Mdiag = (op.gram_diagonal() if _operator is not None else
             gram_diagonal(source, group_weight=group_weight, ties=ties, max_rows=max_rows)) + alpha
    op.n_passes += 1
    Minv = 1.0 / np.maximum(Mdiag, alpha)[:, None]
    max_iter = int(min(10 * n, 1000)) if max_iter is None else int(max_iter)
    v = B.shape[1]
    W = np.zeros((n, v)) if x0 is None else np.array(x0, dtype=np.float64).reshape(n, v)
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
        if callback is not None and callback(it, float(res.max()), W[:, 0] if v == 1 else W):
            break
        if validation is not None:
            vl = float(np.mean(validation_loss(validation, W, group_weight=group_weight, ties=ties,
                                               max_rows=max_rows)))
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
    if info["stopped_early"]:
        W = best[1]
        info["best_iteration"] = best[2]
    return W, info
