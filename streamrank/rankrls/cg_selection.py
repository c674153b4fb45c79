"""Regularization path and cross-validation of conjugate-gradient RankRLS.

The cg solver never forms ``G = XᵀLX`` (memory O(n)), so the primal's
eigendecomposition — every λ in O(n²) without touching the data — does not
exist here: every λ is a CG solve, i.e. passes over the data.  What is shared:

* ``XᵀLY`` and the Jacobi diagonal ``diag(XᵀLX)`` (one pass each, and the
  tie table of split groups with ``ties="exclude"``) serve every λ;
* the λ are solved from the largest to the smallest, each warm-started from
  the previous solution: a large λ converges in a few iterations and the
  solution moves smoothly with λ, so a path costs far fewer passes than as
  many cold fits — but it is *not* free as for the primal.

Costs, in passes over the data (``n_iter(λ)`` the CG iterations of λ):

* :func:`cg_path`: ``2 + Σ_λ (n_iter(λ) + 1)`` (the +1 is the residual of the warm start);
* :func:`cross_validate_cg` with k folds (folds by query, :func:`~streamrank.rankrls.selection.fold_of`,
  the same hash folds as the primal): per fold the path on the other folds'
  groups, plus one pass over the held-out fold per λ for its score; then one
  cold fit of the whole data with the chosen λ.  Memory O(n v) throughout
  (each fold's solutions are scored as soon as they are found, never stored).

Not offered for cg models, by design (the errors say so):

* ``partial_fit`` — continuing a fit exactly needs the data of every earlier
  call (cg keeps O(n) numbers, no statistics); refit on all the data (a
  GroupStore appended night by night) or use ``solver="primal"`` (n ≤ 4096),
  whose statistics G, B are exactly mergeable.
* exact ``leave_query_out`` / ``folds="query"`` — the hold-out formula needs
  ``(XᵀLX + λI)⁻¹`` (n × n) applied to every query; without it each query is a
  separate CG solve (thousands of passes).  Use ``cross_validate(source,
  alphas, folds=k)`` or ``solver="primal"``.
"""
from __future__ import annotations

import numpy as np

from .._defaults import DEFAULT_BLOCK_ROWS, check_alphas
from .._phases import counted
from ..io.blocks import Block
from ..laplacian import tie_classes
from ._split_groups import TieTable, _is_piece
from .cg import RankingOperator, solve_cg, validation_loss
from .selection import CVResult, _Evaluators, _parse_scoring, check_folds, fold_of

__all__ = ["FoldView", "cg_path", "path_of_model", "cross_validate_cg", "PARTIAL_FIT_MESSAGE",
           "LEAVE_QUERY_OUT_MESSAGE"]

PARTIAL_FIT_MESSAGE = (
    "partial_fit cannot continue a solver='cg' fit: cg keeps O(n) numbers and no statistics, and the exact "
    "model on all data seen needs the earlier data again. Refit on all the data (e.g. a GroupStore appended "
    "batch by batch), or use "
    "solver='primal' (n_features <= 4096, dense) whose statistics G = XᵀLX, B = XᵀLy are mergeable.")

LEAVE_QUERY_OUT_MESSAGE = (
    "exact leave-query-out needs (XᵀLX + λI)⁻¹ (n x n) applied to every query, which the cg solver never "
    "forms (memory O(n)); without it every query is its own CG solve over all the data. Use "
    "cross_validate(source, alphas, folds=k) (cg: one warm-started solve per fold and alpha) or "
    "solver='primal' (n_features <= 4096) for the exact leave-query-out.")


class FoldView:
    """The groups of ``source`` in (``holdout=True``) or outside fold ``fold`` of ``n_folds``.

    A minimal block source for the cg passes: ``n_rows``, ``n_groups``,
    ``n_features``, ``n_outputs``, ``group_ptr`` (of the kept groups) and
    ``blocks(max_rows, split_groups=...)``, which yields the base source's
    blocks restricted to the kept groups (a piece of a split group is kept
    or dropped whole, with its global group index, so pieces still join).
    """

    def __init__(self, source, n_folds, fold, *, holdout):
        self.source = source
        self.n_features, self.n_outputs = source.n_features, source.n_outputs
        self.sparse = source.sparse
        gp = source.group_ptr
        fog = fold_of(source._group_qid(0, source.n_groups), n_folds)
        self.keep = (fog == fold) if holdout else (fog != fold)
        sizes = np.diff(gp)[self.keep]
        self.group_ptr = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        self.n_rows = int(sizes.sum())
        self.n_groups = int(self.keep.sum())
        self.y_ndim = getattr(source, "y_ndim", 1)

    def blocks(self, max_rows=DEFAULT_BLOCK_ROWS, **kwargs):
        for block in self.source.blocks(max_rows=max_rows, **kwargs):
            keep = self.keep[block.group_start + np.arange(block.n_groups)]
            if keep.all():
                yield block
            elif keep.any():
                yield _sub_block(block, keep)


def _sub_block(block, keep):
    """The rows of the kept groups of a block of whole groups."""
    gp = block.group_ptr
    kept = np.flatnonzero(keep)
    rows = np.concatenate([np.arange(gp[g], gp[g + 1]) for g in kept])
    local = np.diff(gp)[kept]
    w = getattr(block, "weight", None)
    return Block(X=block.X[rows], y=np.asarray(block.y)[rows],
                 group_ptr=np.concatenate(([0], np.cumsum(local))).astype(np.int64),
                 qid=np.asarray(block.qid)[kept], start=block.start, group_start=block.group_start,
                 group_size=block.group_size[kept], group_offset=block.group_offset[kept],
                 weight=None if w is None else np.asarray(w)[rows])


def _iter_path(source, alphas, *, group_weight, ties, tol, max_iter, max_rows, scale=None):
    """Yield ``(i, W, info)`` for every alpha, largest first, each warm-started from the previous W.

    ``scale``: d (n,) of normalize= (d = 1/s): CG on the scaled operator
    ``D XᵀLX D``, ``D XᵀLY`` (the congruence of :mod:`streamrank.normalize`;
    per-group centring removes the offsets), W on the normalized scale.
    """
    op = RankingOperator(source, alpha=float(np.max(alphas)), group_weight=group_weight, ties=ties,
                         max_rows=max_rows)
    B = op.rhs()
    diag = op.gram_diagonal()
    op.n_passes += 1
    if scale is not None:
        from .cg import _ScaledOperator

        d = np.asarray(scale, dtype=np.float64)
        B, diag = B * d[:, None], diag * d * d
        op = _ScaledOperator(op, d)
    W = None
    for i in np.argsort(-np.asarray(alphas), kind="stable"):
        a = float(alphas[i])
        op.alpha = a
        W, info = solve_cg(source, alpha=a, group_weight=group_weight, ties=ties, tol=tol, max_iter=max_iter,
                           max_rows=max_rows, x0=W, _operator=op, _rhs=B, _diag=diag)
        yield int(i), W, info


def cg_path(source, alphas, *, group_weight="pair", ties="include", tol=1e-6, max_iter=None,
            max_rows=DEFAULT_BLOCK_ROWS, scale=None):
    """Warm-started CG solutions for every alpha: ``(len(alphas), n, v)`` and a list of the solves' infos.

    Passes: ``2 + Σ_λ (n_iter(λ) + 1)`` (``infos[-1]["n_passes"]`` after the last solve is the total
    of the order they ran in; see the module docstring).  ``scale``: d = 1/s of a
    fitted normalizer (normalize=): the solutions for the features x·d (on that scale).
    """
    alphas = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    if source.n_rows == 0:
        raise ValueError("empty input: the source has no rows")
    out = np.empty((len(alphas), source.n_features, source.n_outputs))
    infos = [None] * len(alphas)
    n_passes = 0
    for i, W, info in _iter_path(source, alphas, group_weight=group_weight, ties=ties, tol=tol,
                                 max_iter=max_iter, max_rows=max_rows, scale=scale):
        out[i] = W
        infos[i] = info
        n_passes = info["n_passes"]
    return out, infos, n_passes


def _model_source(model, source):
    src = model.training_source(source)
    if src.n_features != model.n_features_in_:
        raise ValueError(f"source has {src.n_features} features, but the model was fitted with "
                         f"{model.n_features_in_}")
    if src.n_outputs != model.n_outputs_:
        raise ValueError(f"source has {src.n_outputs} output column(s), but the model was fitted with "
                         f"{model.n_outputs_}")
    return src


def path_of_model(model, alphas, source=None, max_rows=DEFAULT_BLOCK_ROWS):
    """:meth:`RankRLS.path` of a cg model: warm-started CG per alpha over its training data (or ``source``).

    Sets ``model.path_info_`` = {"n_passes", "n_iter" (per alpha), "converged" (per alpha)}.
    With ``normalize=`` the coefficients are on the normalized scale of the
    fitted ``normalizer_`` (as ``coef_``), solved on the scaled operator.
    """
    alphas = check_alphas(alphas, allow_empty=True)
    if alphas.size == 0:
        return model.as_target_shape(np.zeros((0, model.n_features_in_, model.n_outputs_)))
    src = _model_source(model, source)
    norm = getattr(model, "normalizer_", None)
    W, infos, n_passes = cg_path(src, alphas, group_weight=model.group_weight, ties=model.ties, tol=model.tol,
                                 max_iter=model.max_iter, max_rows=max_rows,
                                 scale=None if norm is None else 1.0 / norm.scale)
    model.path_info_ = {"n_passes": int(n_passes), "n_iter": [int(i["n_iter"]) for i in infos],
                        "converged": [bool(i["converged"]) for i in infos]}
    return model.as_target_shape(W)


def _n_pairs(source, ties, max_rows):
    """Pairs in the cost per output (v,): Σ_g n_g(n_g − 1)/2, less each output's tied pairs with
    ties='exclude' (the primal statistics' ``pair_counts``)."""
    v = source.n_outputs
    sizes = np.diff(source.group_ptr)
    total = np.full(v, int((sizes * (sizes - 1) // 2).sum()), dtype=np.int64)
    if ties != "exclude":
        return total
    table = TieTable.for_source(source, max_rows, cache_entries=0)
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        if block.n_groups and not _is_piece(block):
            Y = np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, v)
            for o in range(v):
                _, _, cs = tie_classes(Y[:, o], block.group_ptr)
                total[o] -= int((cs * (cs - 1) // 2).sum())
    if table is not None:
        for ent in table.groups.values():
            for o in range(v):
                cnt = ent[o][1]
                total[o] -= int((cnt * (cnt - 1) // 2).sum())
    return total


def cross_validate_cg(model, source=None, *, alphas=None, folds=5, scoring="squared", max_rows=DEFAULT_BLOCK_ROWS):
    """k-fold group cross-validation of a cg RankRLS; refits ``model`` on all data with the best alpha.

    Scores are those of :func:`streamrank.rankrls.selection.cross_validate`
    (same folds, same normalisation: "squared" divides each output's loss by
    its number of counted pairs), so a cg and a primal model on the same
    data give the same scores up to the CG tolerance.  Sets ``model.cv_info_``
    = {"n_passes" (of the CV, without the final fit), "n_iter" (folds, alphas)}.

    With ``normalize=`` every fold's model is solved on the features scaled by
    the scales of *all* rows (one more pass gathers them, counted in
    ``n_passes``), as the primal's cross-validation does and as the refitted
    model keeps; held-out scores use the raw-feature weights d·w (the offsets
    shift every score of a query alike, which changes no ranking and no pair
    difference).
    """
    model.check_params()
    kind, k = _parse_scoring(scoring)
    alphas = check_alphas(alphas)
    source = model.training_source(source)
    model.check_source(source)
    if folds == "query":
        raise NotImplementedError("cross_validate(folds='query') on a cg model: " + LEAVE_QUERY_OUT_MESSAGE)
    folds = check_folds(folds, source.n_groups)
    v = source.n_outputs
    a = len(alphas)
    gw, ties = model.group_weight, model.ties
    loss = np.zeros((a, v))
    ev = _Evaluators(kind, k, a, v) if kind != "squared" else None
    n_iter = np.zeros((folds, a), dtype=np.int64)
    n_passes = 0
    d = None
    if model.normalize is not None:        # the scales of all rows, one pass (selection.cross_validate's rule)
        from ..normalize import FeatureMoments

        moments = FeatureMoments(source.n_features)
        for block in source.blocks(max_rows=max_rows, split_groups=True):
            moments.update(block.X)
        n_passes += 1
        d = 1.0 / moments.normalizer(model.normalize).scale
    for f in counted(range(folds), "CV folds", "folds"):      # each: the λ path on the other folds
        test = FoldView(source, folds, f, holdout=True)
        if test.n_rows == 0:
            continue
        train = FoldView(source, folds, f, holdout=False)
        ttable = TieTable.for_source(test, max_rows, cache_entries=0) if ties == "exclude" else None
        if ttable is not None:
            n_passes += 1
        if train.n_rows == 0:      # every group in this fold: the model without it is w = 0
            sols = ((i, np.zeros((source.n_features, v)), None) for i in range(a))
        else:
            sols = _iter_path(train, alphas, group_weight=gw, ties=ties, tol=model.tol, max_iter=model.max_iter,
                              max_rows=max_rows, scale=d)
        for i, W, info in sols:
            if info is not None:
                n_iter[f, i] = info["n_iter"]
                last = info["n_passes"]
            if d is not None:
                W = W * d[:, None]              # raw-feature weights of the fold's normalized model
            n_passes += 1
            if ev is None:
                loss[i] += validation_loss(test, W, group_weight=gw, ties=ties, max_rows=max_rows,
                                           ties_table=ttable)
            else:
                sel = ev.ev[i:i + 1]
                one = _Evaluators.__new__(_Evaluators)
                one.ev, one.kind, one.name = sel, ev.kind, ev.name
                for block in test.blocks(max_rows=max_rows, split_groups=True):
                    S = np.asarray(block.X @ W, dtype=np.float64).reshape(block.n_rows, 1, v)
                    one.update(block, S)
        if train.n_rows:
            n_passes += last
    if ev is None:
        per_out = loss / np.maximum(_n_pairs(source, ties, max_rows), 1)
    else:
        per_out = ev.result()
    greater = kind == "ndcg"
    scores = np.nanmean(per_out, axis=1) if per_out.size else per_out
    valid = np.where(np.isnan(scores), -np.inf if greater else np.inf, scores)
    best = int(np.argmax(valid) if greater else np.argmin(valid))
    with model.solving_with(alphas[best]):       # refit at the best alpha; the user's alpha stays
        model.fit(source, max_rows=max_rows)
    model.cv_info_ = {"n_passes": int(n_passes), "n_iter": n_iter}
    return model.record_selection(CVResult(
        alphas=alphas, scores=scores, scores_per_output=per_out, best_alpha=float(alphas[best]), best_index=best,
        scoring=scoring if kind != "ndcg" else f"ndcg@{k}", folds=folds, greater_is_better=greater))
