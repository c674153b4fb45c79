"""Nightly pipeline, step 4: the promotion gate — candidate and current judged out-of-fold on trusted history.

Why not on the newest day.  The default validation of step 3 holds the
newest day out: the candidate *without the day* and the current model are
scored on it.  When the current model is up to date (every night that
follows a promotion) those two models are trained on the same groups, with
λ chosen from the same folds: they are the same model, so their scores were
equal every night ("ndcg@10 0.6621 (current 0.6621)", issue 24) and every
night was promoted — a day with inverted labels included.  Scoring on the
newest day cannot tell a harmful day either: a model that learned the
inverted labels scores *better* on them.  Those numbers stay in the version
as a description of tonight's data; they no longer decide.

The gate.  What the night's data must not do is make the model worse on
data we trust: the groups the current model was trained on (and promoted
with).  The slice ``H`` = the newest such groups before the new data
(:func:`history_slice`, at most ``max_rows`` rows: one block read per
night).  Both models are judged on ``H`` **out of fold**, from the fold
statistics the statistics learners keep anyway: for a group of fold f the
score comes from the model solved without fold f (DESIGN §3.2) —

* RankRLS:  ``w_f = (G − G_f + λI)⁻¹ (B − B_f)``, score ``x·w_f``;
* sparse KernelRankRLS: ``A_f = (G − G_f + λK_RR)⁻¹ (B − B_f)``, score
  ``k(x, basis) A_f`` —

for the candidate with its fold statistics (all data, the new day's
included) and its λ, for the current model with its own.  No group of ``H``
is scored by a model that saw it, and the two models differ exactly by the
new data, so: a day that teaches the model the wrong order lowers the
candidate's out-of-fold NDCG@k on ``H`` and is rejected; a day that teaches it
more of the right order raises it and is promoted.  The promotion rule is
the pipeline's: NDCG@k not below the current's by more than ``--tolerance``.

A rejected day stays in the store (it was ingested), so later candidates,
trained on everything, still contain it and keep being judged — the gate
keeps saying no until the data is fixed (a store rebuilt without the day,
then ``--full``).
"""
from __future__ import annotations

import numpy as np

from streamrank import DEFAULT_BLOCK_ROWS

__all__ = ["history_slice", "fold_scorers", "out_of_fold_metrics", "gate"]


def history_slice(store, end: int, max_rows: int):
    """``(g0, end)``: the newest groups before ``end`` holding at most ``max_rows`` rows (at least one group)."""
    end = int(end)
    if end <= 0:
        return None
    ptr = np.asarray(store.group_ptr)
    lim = ptr[end] - int(max_rows)
    g0 = int(np.searchsorted(ptr[:end + 1], lim, side="left"))
    return min(g0, end - 1), end


def fold_scorers(learner, model, fold_stats):
    """One scoring function per fold: ``score_f(X) -> (rows,)`` of the model solved without fold f.

    The fold models are the library's (those its k-fold selection scores):
    :func:`streamrank.rankrls.selection.fold_solutions` (``normalize=``
    included) and :meth:`streamrank.KernelRankRLS.fold_coefficients`.
    """
    from streamrank.rankrls.selection import fold_solutions

    alpha = float(model.alpha)
    if learner == "rankrls":
        _, Ws = fold_solutions(model, fold_stats, [alpha])
        return [lambda X, W=W[0]: np.asarray(X @ W[:, 0], dtype=np.float64) for W in Ws]
    spec, Xb = model.kernel_function(), model.basis_
    norm = getattr(model, "normalizer_", None)

    def score(X, A):
        return np.asarray(spec(X if norm is None else norm.transform(X), Xb) @ A[:, 0], dtype=np.float64)

    return [lambda X, A=A[0]: score(X, A) for A in model.fold_coefficients(fold_stats, [alpha])]


def out_of_fold_metrics(source, scorers, *, k=10, max_rows=DEFAULT_BLOCK_ROWS):
    """NDCG@k and disagreement of ``source`` with each group scored by the scorer of its fold."""
    from streamrank.metrics import RankingEvaluator
    from streamrank.rankrls.selection import fold_of

    ev = RankingEvaluator(k, ("ndcg", "disagreement"))
    n = len(scorers)
    for block in source.blocks(max_rows=max_rows):
        row_fold = np.repeat(fold_of(block.qid, n), np.diff(block.group_ptr))
        s = np.empty(block.n_rows)
        for f in np.unique(row_fold):
            rows = np.flatnonzero(row_fold == f)
            s[rows] = scorers[int(f)](block.X[rows])
        y = np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, -1)[:, 0]
        ev.update(y, s, block.group_ptr, qid=block.qid, group_size=block.group_size, group_offset=block.group_offset)
    return {name: float(r.value) for name, r in ev.result().items()}


def gate(learner, store, h, candidate, cand_folds, current, cur_folds, *, k=10, tolerance=0.005,
         max_rows=DEFAULT_BLOCK_ROWS):
    """Judge ``candidate`` against ``current`` out of fold on the history groups ``h = (g0, g1)``.

    Returns the record kept in ``version.json`` under ``"gate"``: the slice,
    both models' out-of-fold metrics, the metric and the decision.
    """
    src = store.groups(*h)
    cand = out_of_fold_metrics(src, fold_scorers(learner, candidate, cand_folds), k=k, max_rows=max_rows)
    cur = out_of_fold_metrics(src, fold_scorers(learner, current, cur_folds), k=k, max_rows=max_rows)
    mk = f"ndcg@{k}"
    return {"scheme": "history-out-of-fold", "groups": [int(h[0]), int(h[1])], "rows": int(src.n_rows),
            "metric": mk, "candidate": cand, "current": cur, "tolerance": float(tolerance),
            "candidate_folds": len(cand_folds), "current_folds": len(cur_folds),
            "promote": bool(not (cand[mk] < cur[mk] - tolerance))}
