"""Choosing λ of a kernel RankRLS model from held-out predictions (shared by the dual and the sparse solver).

Both solvers of :class:`~streamrank.rankrls.kernel.KernelRankRLS` give
held-out predictions for every λ of a grid from one decomposition; the
score of a λ is then either the held-out least-squares ranking loss per pair

    Σ_o r_oᵀ L r_o / (pairs in the cost),      r_o = y_o − f_o (held out),

or a ranking metric (disagreement, NDCG@k) per query, averaged over the
outputs (:func:`heldout_scores`).  :func:`choose` picks the best λ (lowest
loss or disagreement, highest NDCG; NaN scores never win) and builds the
:class:`~streamrank.rankrls.selection.CVResult`.
"""
from __future__ import annotations

import numpy as np

__all__ = ["check_folds", "heldout_scores", "choose"]


def check_folds(folds, n_groups):
    """Query groups held out together: one per query (``"query"``), or ``None`` after checking k-fold's k."""
    if folds == "query":
        if n_groups < 2:
            raise ValueError(f"leave-query-out cross-validation needs at least 2 groups; the data has "
                             f"{n_groups} (qid=None is one global group: use leave_pair_out)")
        return [np.array([g]) for g in range(n_groups)]
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ValueError(f'folds must be an integer >= 2 or "query"; got {folds!r}')
    if n_groups < folds:
        raise ValueError(f"{folds}-fold cross-validation by query needs at least {folds} groups; "
                         f"the data has {n_groups}")
    return None


def heldout_scores(preds, Y, gp, *, group_weight, ties, kind, k, weight=None):
    """(alphas, outputs) scores of held-out predictions ``preds`` (alphas, rows, outputs) of targets Y.

    ``weight``: row weights; the "squared" loss is then ``rᵀ L_w r`` divided by the unweighted pair
    count (the convention of the weighted primal's cross-validation).
    """
    n_alphas, v = preds.shape[0], Y.shape[1]
    per_out = np.empty((n_alphas, v))
    n_groups = len(gp) - 1
    rows_q = np.repeat(np.arange(n_groups), np.diff(gp))
    if kind == "squared":
        from ..laplacian import apply_laplacian
        from ._gram import _pair_count
        for ai in range(n_alphas):
            R = Y - preds[ai]
            for o in range(v):
                LR = apply_laplacian(R[:, o], gp, y=Y[:, o], group_weight=group_weight, ties=ties, weight=weight)
                per_out[ai, o] = float(R[:, o] @ LR)
        n_pairs = int(_pair_count(np.diff(gp)).sum())
        if ties == "exclude":
            from ..laplacian import tie_classes
            _, _, csize = tie_classes(Y[:, 0], gp)
            n_pairs -= int(_pair_count(csize).sum())
        per_out /= max(n_pairs, 1)
    else:
        from .. import metrics as _metrics
        for ai in range(n_alphas):
            for o in range(v):
                if kind == "disagreement":
                    per_out[ai, o] = _metrics.disagreement(Y[:, o], preds[ai][:, o], rows_q)
                else:
                    per_out[ai, o] = _metrics.ndcg(Y[:, o], preds[ai][:, o], rows_q, k=k)
    return per_out


def choose(arr, per_out, *, kind, k, scoring, folds):
    """The :class:`~streamrank.rankrls.selection.CVResult` of per-output scores (mean over the outputs)."""
    from .selection import CVResult, best_of_scores

    greater = kind == "ndcg"
    scores, best = best_of_scores(per_out, greater)       # the rule of linear RankRLS's selection
    return CVResult(alphas=arr, scores=scores, scores_per_output=per_out, best_alpha=float(arr[best]),
                    best_index=best, scoring=scoring if kind != "ndcg" else f"ndcg@{k}", folds=folds,
                    greater_is_better=greater)
