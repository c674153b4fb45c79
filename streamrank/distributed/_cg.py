"""Conjugate-gradient RankRLS on a dask cluster (DESIGN §3.3, issue 6).

:func:`streamrank.rankrls.cg.solve_cg` runs unchanged on the client; only its
operator is replaced by :class:`DistributedRankingOperator`, whose every
product ``Xᵀ L X V`` is a map over the planned blocks (each worker reads its
blocks from the store) plus a tree sum.  ``V`` (n × k) is scattered to the
workers once per product, not once per block.  The per-block work is
:func:`streamrank.rankrls._split_groups._block_apply` — the same code the local pass
runs; a group cut across blocks (``split_groups=True``) travels as its
running sums ``S_g = Σ_p X_pᵀ1``, ``t_g = Σ_p 1ᵀu_p`` (O(n) per open group)
and is closed when its pieces meet in the reduction (``- s_g S_g t_gᵀ``).
The Jacobi diagonal is reduced the same way
(:func:`streamrank.rankrls.cg.block_diagonal`).

``ties="exclude"`` on a split group (e.g. ``qid=None``: one global group over
many blocks) uses the group's :class:`~streamrank.rankrls._split_groups.TieTable`, built
once per operator by a setup step: a map over the pieces giving
:class:`~streamrank.rankrls._split_groups.TieCounts` (class counts, and class feature
sums S_c while they fit ``TIE_CACHE_ENTRIES``) plus a tree sum — and, when
only the tied classes' sums fit, a second map for those.  The table without
its sums (O(distinct targets)) is scattered once; the sums S_c stay on the
client.  In a product each piece adds its row-local part
``s_g (n_g − n_c(i)) X_pᵀ u_p`` and its per-class sums ``T_c = 1_cᵀ u_p``
(O(classes) numbers, summed in the tree with the group's other open sums);
the client finishes the class term ``s_g Σ_c S_c T_c``
(:func:`streamrank.rankrls._split_groups.finish_classes`) — or, when the sums are not
cached, scatters the T's (O(classes)) and maps the second sweep
``X_pᵀ (s_g T_{c(i)})_i`` over the pieces
(:func:`streamrank.rankrls._split_groups.deferred_piece`), as the local pass does.
What moves per product is O(n k + classes) per task, whatever the rows.

A worker that dies mid-fit costs one redone pass: scatters go to one worker
(a broadcast would wait on the dead one), and a pass that loses a worker is
run again once the scheduler has dropped it (``cg_info_["n_retries"]``).
The iterates equal the local solver's to floating-point summation order.
"""
from __future__ import annotations

import numpy as np

from .._defaults import DEFAULT_BLOCK_ROWS
from ..rankrls import _split_groups as _sg
from ..rankrls import cg as _cg
from ..rankrls._group_weights import weight_totals
from ._cluster import DEFAULT_SPLIT_EVERY, _ship_source, get_client, reset_fitted, tree_reduce
from ._retry import with_retries

__all__ = ["DistributedRankingOperator", "fit_cg"]


class _Partial:
    """Mergeable partial product: a dense (n, k) sum plus the open (split) groups and their class sums."""

    def __init__(self, Z, opens, moments=None):
        self.Z = Z
        self.opens = opens          # a _split_groups._Open: gid -> [rows, size, S, t]; class_sums gid -> [T per column]
        self.moments = moments      # FeatureMoments of the rows (normalize=, the diagonal pass), or None

    def merge(self, other):
        self.Z = self.Z + other.Z
        if other.moments is not None:
            self.moments = other.moments.copy() if self.moments is None else self.moments.merge(other.moments)
        mine = self.opens
        for gid, Ts in other.opens.class_sums.items():     # before add(): a completed group takes its T's
            cur = mine.class_sums.get(gid)
            mine.class_sums[gid] = [T.copy() for T in Ts] if cur is None else [a + b for a, b in zip(cur, Ts)]
        mine.tie_done.extend(other.opens.tie_done)
        for gid, (rows, size, S, t) in other.opens.groups.items():
            done = mine.add(gid, rows, size, S, t)
            if done is not None:
                s, S_g, t_g = done
                self.Z = self.Z - s * (np.outer(S_g, t_g) if np.ndim(t_g) else S_g * S_g)
        return self


class _GroupSums:
    """Mergeable per-split-group lists of arrays (None = nothing yet): the tied classes' sums S_c."""

    def __init__(self, groups):
        self.groups = groups

    def merge(self, other):
        for gid, parts in other.groups.items():
            cur = self.groups.get(gid, [None] * len(parts))
            self.groups[gid] = [a if b is None else (b.copy() if a is None else a + b) for a, b in zip(cur, parts)]
        return self


def _product_task(plan, ref, V, n_outputs, group_weight, ties, table=None):
    """One block's ``X_Bᵀ (L U)_B`` (U = X_B V, or Y_B when V is None) and its open groups.

    A row-weighted source's pieces of split groups take their group's weight W_g from the source's
    weights, read in pieces (:func:`streamrank.rankrls._group_weights.weight_totals`), as locally.
    """
    src = ref.open()
    block = src.read_block(*plan)
    Y = _sg._block_Y(block, n_outputs)
    U = Y if V is None else np.asarray(block.X @ V, dtype=np.float64)
    opens = _sg._Open(group_weight)
    wtot = weight_totals(src, None) if block.weight is not None else None
    LU, closes = _sg._block_apply(block, U, Y, group_weight, ties, opens, table, weight_total=wtot)
    Z = _sg._xtu(block.X, LU)
    for s, S, t in closes:
        Z -= s * np.outer(S, t)
    return _Partial(Z, opens)


def _deferred_task(plan, ref, n_outputs, table, deferred, k):
    """Second sweep of a product over one piece of a split group whose class sums are not cached."""
    block = ref.open().read_block(*plan)
    return _Partial(_sg.deferred_piece(block, table, deferred, k, n_outputs), _sg._Open("pair"))


def _tie_counts_task(plan, ref, n_features, n_outputs, cache_entries):
    """One piece's tie classes (and class feature sums while they fit ``cache_entries``)."""
    block = ref.open().read_block(*plan)
    return _sg.TieCounts(n_features, n_outputs, cache_entries).add_piece(block)


def _tied_sums_task(plan, ref, table):
    block = ref.open().read_block(*plan)
    return _GroupSums({int(block.group_start): table.tied_sums_of_piece(block)})


def _diagonal_task(plan, ref, group_weight, ties, n_outputs, table=None, moments=False):
    """One block's part of diag(XᵀLX); a piece of a split group keeps S_g open (t unused).

    ``moments``: also the block's column moments (normalize=: they ride on this pass, as locally).
    """
    src = ref.open()
    block = src.read_block(*plan)
    opens = _sg._Open(group_weight)
    wtot = weight_totals(src, None) if block.weight is not None else None
    d, closes = _cg.block_diagonal(block, group_weight, ties, table, n_outputs, opens, weight_total=wtot)
    for s, S, _ in closes:
        d -= s * S ** 2
    mom = None
    if moments:
        from ..normalize import FeatureMoments

        mom = FeatureMoments(block.X.shape[1]).update(block.X)
    return _Partial(d, opens, mom)


def pieces_of_plan(plan, group_ptr):
    """The entries of ``plan`` that are pieces of a split group (``BlockSource.plan`` with split_groups)."""
    gp = np.asarray(group_ptr)
    return [p for p in plan if p[3] == p[2] + 1 and (p[0] != gp[p[2]] or p[1] != gp[p[3]])]


class DistributedRankingOperator(_cg._PassOperator):
    """``v -> (Xᵀ L X + alpha I) v`` with every pass mapped over a dask cluster.

    ``pieces``: the entries of ``plan`` that are pieces of split groups
    (:func:`pieces_of_plan`; needed with ``ties="exclude"``), ``max_rows``
    the plan's block budget.  ``n_passes`` counts passes as
    :class:`~streamrank.rankrls.cg.RankingOperator` does (the TieTable's setup
    passes, and a second sweep per product when its sums are not cached);
    ``n_scatters`` counts the scatters of the vector (one per product).
    """

    def __init__(self, client, ref, plan, n_features, n_outputs, *, alpha, group_weight, ties, split_every,
                 pieces=(), max_rows=None):
        super().__init__(dtype=np.float64, shape=(n_features, n_features))
        self.client, self.ref, self.plan = client, ref, plan
        self.n_outputs = n_outputs
        self.alpha = float(alpha)
        self.group_weight, self.ties = group_weight, ties
        self.split_every = split_every
        self.pieces = list(pieces)
        self.max_rows = max_rows
        self.n_passes = 0
        self.n_scatters = 0
        self.n_class_scatters = 0
        self.n_retries = 0
        self._table = None
        self._table_ref = None
        self._table_built = False

    def _tree(self, futures):
        return tree_reduce(self.client, futures, split_every=self.split_every).result()

    def ties_table(self):
        """The :class:`~streamrank.rankrls._split_groups.TieTable` of the split groups (ties="exclude"), or None.

        Built on the first call by one distributed pass over the pieces (two
        when only the tied classes' sums fit the cache); the table without
        its sums is scattered to the workers once.
        """
        if self._table_built:
            return self._table
        self._table_built = True
        if self.ties != "exclude" or not self.pieces:
            return None
        c = self.client
        n = self.shape[0]
        parts = c.map(_tie_counts_task, self.pieces, ref=self.ref, n_features=n, n_outputs=self.n_outputs,
                      cache_entries=_sg.TIE_CACHE_ENTRIES, pure=False)
        tab = _sg.TieTable.from_counts(self._tree(parts), self.max_rows)
        if tab.needs_tied_sums:
            light = c.scatter(tab.without_sums(), hash=False)
            sums = self._tree(c.map(_tied_sums_task, self.pieces, ref=self.ref, table=light, pure=False))
            for gid, P in sums.groups.items():
                tab.add_tied_sums(gid, P)
            tab.needs_tied_sums = False
        self._table = tab
        self._table_ref = c.scatter(tab.without_sums(), hash=False)
        self.n_passes += tab.n_passes
        return tab

    def _reduce(self, futures):
        out = self._tree(futures)
        out.opens.check()
        return out

    def _pass(self, V):
        """One distributed pass; a pass that loses a worker is run again (:mod:`streamrank.distributed._retry`).

        Products are pure functions of the vector and the store, so a redone
        pass returns the same numbers; the tie table is scattered again.
        """
        Z, retries = with_retries(self.client, lambda: self._pass_once(V), on_loss=self._after_loss)
        self.n_retries += retries
        return Z

    def _after_loss(self):
        if self._table is not None:             # the scattered tie table may have died with the worker
            self._table_ref = self.client.scatter(self._table.without_sums(), hash=False)

    def _pass_once(self, V):
        c = self.client
        table = self.ties_table()
        if V is not None:
            V = c.scatter(np.ascontiguousarray(V, dtype=np.float64), hash=False)   # not broadcast: _retry
            self.n_scatters += 1
        parts = c.map(_product_task, self.plan, ref=self.ref, V=V, n_outputs=self.n_outputs,
                      group_weight=self.group_weight, ties=self.ties, table=self._table_ref, pure=False)
        out = self._reduce(parts)
        Z = out.Z
        if out.opens.tie_done:
            deferred = {}
            _sg.finish_classes(Z, table, out.opens.tie_done, Z.shape[1], self.n_outputs, deferred)
            if deferred:    # class sums not cached: a second sweep over the pieces, the T's scattered once
                self.n_passes += 1
                d = c.scatter([deferred], hash=False)[0]     # a list: one future of the dict
                self.n_class_scatters += 1
                pieces = [p for p in self.pieces if p[2] in deferred]
                parts = c.map(_deferred_task, pieces, ref=self.ref, n_outputs=self.n_outputs,
                              table=self._table_ref, deferred=d, k=Z.shape[1], pure=False)
                Z = Z + self._tree(parts).Z
        return Z

    def gram_diagonal(self, moments=None):
        """diag(XᵀLX), one distributed pass; ``moments`` (FeatureMoments) merged with the rows' on the way."""
        table = self.ties_table()
        parts = self.client.map(_diagonal_task, self.plan, ref=self.ref, group_weight=self.group_weight,
                                ties=self.ties, n_outputs=self.n_outputs, table=self._table_ref,
                                moments=moments is not None, pure=False)
        out = self._reduce(parts)
        if moments is not None and out.moments is not None:
            moments.merge(out.moments)
        diag = out.Z
        if table is not None:
            diag = diag + table.diagonal_term(self.group_weight)
        return diag


def fit_cg(estimator, source, client=None, *, max_rows=DEFAULT_BLOCK_ROWS, split_every=DEFAULT_SPLIT_EVERY, **kwargs):
    """``RankRLS(solver="cg").fit(source)`` with every pass on the cluster (see module doc)."""
    from .._validation import check_alpha
    from ..rankrls.cg import solve_cg

    est = estimator
    alpha = check_alpha(est.alpha)
    with get_client(client) as c:
        ref = _ship_source(c, source)
        plan = source.plan(max_rows, split_groups=True)
        op = DistributedRankingOperator(c, ref, plan, source.n_features, source.n_outputs, alpha=alpha,
                                        group_weight=est.group_weight, ties=est.ties, split_every=split_every,
                                        pieces=pieces_of_plan(plan, source.group_ptr), max_rows=max_rows)
        W, info = solve_cg(source, alpha=alpha, group_weight=est.group_weight, ties=est.ties, tol=est.tol,
                           max_iter=est.max_iter, max_rows=max_rows, _operator=op,
                           normalize=getattr(est, "normalize", None), **kwargs)
    info["n_scatters"] = op.n_scatters
    info["n_retries"] = op.n_retries
    info["n_class_scatters"] = op.n_class_scatters
    y_1d = reset_fitted(est, source)
    est.fit_cg_solution(W, info, source, y_1d)
    return est
