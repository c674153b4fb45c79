"""Conjugate-gradient RankRLS on a dask cluster (DESIGN §3.3, issue 6).

:func:`streamrank.rankrls.cg.solve_cg` runs unchanged on the client; only its
operator is replaced by :class:`DistributedRankingOperator`, whose every
product ``Xᵀ L X V`` is a map over the planned blocks (each worker reads its
blocks from the store) plus a tree sum.  ``V`` (n × k) is scattered to the
workers once per product, not once per block.  The per-block work is
:func:`streamrank.rankrls.cg._block_apply` — the same code the local pass
runs; a group cut across blocks (``split_groups=True``) travels as its
running sums ``S_g = Σ_p X_pᵀ1``, ``t_g = Σ_p 1ᵀu_p`` (O(n) per open group)
and is closed when its pieces meet in the reduction (``- s_g S_g t_gᵀ``).
The Jacobi diagonal is reduced the same way.  The iterates equal the local
solver's to floating-point summation order.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .laplacian import group_weights
from .rankrls import cg as _cg

__all__ = ["DistributedRankingOperator", "fit_cg"]


class _Partial:
    """Mergeable partial product: a dense (n, k) sum plus the open (split) groups."""

    def __init__(self, Z, opens):
        self.Z = Z
        self.opens = opens          # a cg._Open: gid -> [rows, size, S, t]

    def merge(self, other):
        self.Z = self.Z + other.Z
        for gid, (rows, size, S, t) in other.opens.groups.items():
            done = self.opens.add(gid, rows, size, S, t)
            if done is not None:
                s, S_g, t_g = done
                self.Z = self.Z - s * (np.outer(S_g, t_g) if np.ndim(t_g) else S_g * S_g)
        return self


def _product_task(plan, ref, V, n_outputs, group_weight, ties):
    """One block's ``X_Bᵀ (L U)_B`` (U = X_B V, or Y_B when V is None) and its open groups."""
    block = ref.open().read_block(*plan)
    Y = _cg._block_Y(block, n_outputs)
    U = Y if V is None else np.asarray(block.X @ V, dtype=np.float64)
    opens = _cg._Open(group_weight)
    LU, closes = _cg._block_apply(block, U, Y, group_weight, ties, opens)
    Z = _cg._xtu(block.X, LU)
    for s, S, t in closes:
        Z -= s * np.outer(S, t)
    return _Partial(Z, opens)


class _OneBlock:
    """A block as a one-block source (for ``cg.gram_diagonal`` on whole groups)."""

    def __init__(self, block):
        self.block = block
        self.n_features = block.X.shape[1]
        self.n_outputs = 1 if np.ndim(block.y) == 1 else block.y.shape[1]

    def blocks(self, **kwargs):
        yield self.block


def _diagonal_task(plan, ref, group_weight, ties):
    """One block's part of diag(XᵀLX); a piece of a split group keeps S_g open (t unused)."""
    block = ref.open().read_block(*plan)
    opens = _cg._Open(group_weight)
    if not block.is_split:
        d = _cg.gram_diagonal(_OneBlock(block), group_weight=group_weight, ties=ties)
        return _Partial(d, opens)
    # plan() cuts only an oversized group into pieces: the block is one piece of one group
    X = block.X
    size = int(block.group_size[0])
    s = float(group_weights(np.array([size]), group_weight)[0])
    X2 = X.multiply(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64) ** 2
    d = s * size * np.asarray(X2.sum(axis=0), dtype=np.float64).ravel()
    opens.add(int(block.group_start), block.n_rows, size, _cg._col_sum(X), 0.0)
    return _Partial(d, opens)


class DistributedRankingOperator(_cg._PassOperator):
    """``v -> (Xᵀ L X + alpha I) v`` with every pass mapped over a dask cluster."""

    def __init__(self, client, ref, plan, n_features, n_outputs, *, alpha, group_weight, ties, split_every):
        super().__init__(dtype=np.float64, shape=(n_features, n_features))
        self.client, self.ref, self.plan = client, ref, plan
        self.n_outputs = n_outputs
        self.alpha = float(alpha)
        self.group_weight, self.ties = group_weight, ties
        self.split_every = split_every
        self.n_passes = 0
        self.n_scatters = 0

    def _reduce(self, futures):
        from .distributed import tree_reduce

        out = tree_reduce(self.client, futures, split_every=self.split_every).result()
        out.opens.check()
        return out.Z

    def _pass(self, V):
        c = self.client
        if V is not None:
            V = c.scatter(np.ascontiguousarray(V, dtype=np.float64), broadcast=True, hash=False)
            self.n_scatters += 1
        parts = c.map(_product_task, self.plan, ref=self.ref, V=V, n_outputs=self.n_outputs,
                      group_weight=self.group_weight, ties=self.ties, pure=False)
        return self._reduce(parts)

    def gram_diagonal(self):
        parts = self.client.map(_diagonal_task, self.plan, ref=self.ref, group_weight=self.group_weight,
                                ties=self.ties, pure=False)
        return self._reduce(parts)


def fit_cg(estimator, source, client=None, *, max_rows=65_536, split_every=8, **kwargs):
    """``RankRLS(solver="cg").fit(source)`` with every pass on the cluster (see module doc)."""
    from ._validation import check_alpha
    from .distributed import _ship_source, get_client
    from .rankrls.cg import solve_cg

    est = estimator
    alpha = check_alpha(est.alpha)
    with get_client(client) as c:
        ref = _ship_source(c, source)
        plan = source.plan(max_rows, split_groups=True)
        op = DistributedRankingOperator(c, ref, plan, source.n_features, source.n_outputs, alpha=alpha,
                                        group_weight=est.group_weight, ties=est.ties, split_every=split_every)
        W, info = solve_cg(source, alpha=alpha, group_weight=est.group_weight, ties=est.ties, tol=est.tol,
                           max_iter=est.max_iter, max_rows=max_rows, _operator=op, **kwargs)
    info["n_scatters"] = op.n_scatters
    for attr in ("coef_", "stats_", "fold_stats_", "n_iter_", "_eigen"):
        est.__dict__.pop(attr, None)
    y_1d = source.n_outputs == 1 and getattr(source, "y_ndim", 1) == 1
    est._set_cg_solution(W, info, source, y_1d)
    est._train_source = source
    return est
