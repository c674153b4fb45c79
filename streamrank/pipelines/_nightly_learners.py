"""Nightly pipeline, steps 2-3: incremental model updates, λ selection from fold statistics, validation.

Statistics learners (RankRLS, sparse KernelRankRLS) keep per-fold statistics
(k-fold group CV by query id); a night accumulates only the groups the base
model has not seen and adds them, so the model equals a full retrain on all
data (to summation order).  SGD learners resume (``partial_fit``, state
intact) on the tuples / groups they have not seen.

Honest validation (``holdout=``): every update function can hold the
newest day out.  The groups (tuples) before ``holdout`` and after it are
accumulated (trained) separately.  Statistics learners: the model *without*
the held-out day comes for free, solved from the fold statistics without
the day's (λ chosen from those folds too — the day takes no part in it); the
update returns ``(final model, selection, model without the day or None)``.
SGD learners: the model just before the day is the current model itself
when the day is the only new data, so a comparison with it would be empty;
instead the day is scored by *progressive validation* (each batch judged by
the model before it learns from it — Blum, Kalai & Langford 1999) and the
update returns ``(final model, selection, progressive metrics or None)``.
"""
from __future__ import annotations


import numpy as np

import streamrank as sr
from streamrank import DEFAULT_BLOCK_ROWS
from streamrank._phases import phase

from streamrank.pipelines._nightly_versions import open_stats
from streamrank.pipelines._nightly_views import counted

__all__ = ["DEFAULT_FOLDS", "DEFAULT_BLOCK_ROWS", "update_rankrls", "update_kernel", "update_sgd",
           "update_pairwise", "tuple_range", "validate", "validate_tuples"]

DEFAULT_FOLDS = 5


# --------------------------------------------------------------- rankrls
def _merged(a, b):
    """Fold statistics ``a + b`` as new objects (either may be None: absent)."""
    if a is None and b is None:
        return None
    out = [st.copy() for st in (a if a is not None else b)]
    if a is not None and b is not None:
        for x, y in zip(out, b):
            x.merge(y)
    return out


def _split(store, seen, holdout, excluded=(), fraction=0.0):
    """``(groups seen:h0, groups h0:)`` of the store; ``h0`` = the held-out start (no holdout: the end).

    Without the ``excluded`` spans (days kept out of training) and, ``fraction > 0``, without the queries
    the SGD gate holds out (:mod:`streamrank.pipelines._nightly_views`).
    """
    from streamrank.pipelines._nightly_views import group_view

    n = store.n_groups
    h0 = n if holdout is None else min(max(int(holdout), int(seen)), n)
    return (group_view(store, seen, h0, excluded, fraction=fraction),
            group_view(store, h0, n, excluded, fraction=fraction))


def update_rankrls(store, base_model, seen_groups, alphas, *, folds=DEFAULT_FOLDS, max_rows=DEFAULT_BLOCK_ROWS,
                   params=None, holdout=None, excluded=()):
    """Statistics of the base model + statistics of groups ``seen_groups:`` → the new RankRLS.

    ``base_model=None`` (or ``seen_groups=0``): from scratch.  Only the new
    groups are read (once).  The fold statistics are accumulated, their sum
    is the full statistics, λ is chosen from them and the model solved.
    ``holdout=h0``: groups ``h0:`` (the newest day) are accumulated apart,
    and the model without them — λ chosen from the folds without them — is
    returned as the third value (None without a holdout or without data
    outside it).  ``excluded``: group spans left out (excluded days).
    """
    from streamrank.rankrls.selection import accumulate_folds, select_from_fold_statistics

    if base_model is not None and getattr(base_model, "fold_stats_", None) is None:
        raise ValueError("the current RankRLS model holds no fold statistics; run with --full once")
    model = sr.RankRLS(**dict(params or {}, solver="primal")) if base_model is None else base_model
    model.solver = "primal"
    base_folds = None
    if base_model is not None:
        base_folds = base_model.fold_stats_
        folds = len(base_folds)
    pre, hold = _split(store, seen_groups, holdout, excluded)
    with phase("fold statistics of the new groups", pre.n_rows + hold.n_rows, "rows") as ph:
        folds_pre = _merged(base_folds, accumulate_folds(model, counted(pre, ph), folds, max_rows)
                            if pre.n_rows else None)
        folds_hold = accumulate_folds(model, counted(hold, ph), folds, max_rows) if hold.n_rows else None
    folds_now = _merged(folds_pre, folds_hold)
    if folds_now is None:
        raise ValueError("no data: the store is empty")
    y_1d = store.n_outputs == 1
    with phase("λ selection from the fold statistics", len(alphas), "λ") as ph:
        res, total = select_from_fold_statistics(model, folds_now, alphas)
        ph.update(len(alphas))
    model.alpha = res.best_alpha          # the nightly model is saved with the λ chosen tonight
    model.fit_statistics(total, y_1d=y_1d)
    model.record_selection(res)
    model.fold_stats_ = folds_now
    sel = {"alphas": [float(a) for a in alphas], "cv_squared": [float(s) for s in res.scores],
           "alpha": res.best_alpha, "new_rows": pre.n_rows + hold.n_rows,
           "new_groups": pre.n_groups + hold.n_groups}
    minus = None
    if holdout is not None and folds_pre is not None and folds_hold is not None:
        res_m, total_m = select_from_fold_statistics(model, folds_pre, alphas)
        minus = sr.RankRLS(**dict(model.get_params(), alpha=res_m.best_alpha))
        minus.fit_statistics(total_m, y_1d=y_1d)
        sel["holdout_alpha"] = res_m.best_alpha
    return model, sel, minus


# ---------------------------------------------------------- sparse kernel


def update_kernel(store, base_model, base_dir, seen, alphas, *, folds=DEFAULT_FOLDS, max_rows=DEFAULT_BLOCK_ROWS,
                  params=None, holdout=None, excluded=()):
    """Sparse KernelRankRLS: basis fixed at the first (or --full) night; fold statistics of Φ kept beside
    the model; a night adds only the new groups' statistics.  ``holdout`` as in :func:`update_rankrls`
    (the basis is drawn from rows only — no labels — so a held-out row in it leaks nothing).
    Returns (model, selection, model without the held-out groups or None, arrays to save)."""
    from streamrank.pipelines._nightly_views import group_view
    from streamrank.rankrls.linear import RankStatistics

    base_folds = None
    kept = group_view(store, 0, store.n_groups, excluded)       # the store without the excluded days
    if base_model is None:
        with phase("basis and first fit"):
            model = sr.KernelRankRLS(**(params or {"n_basis": 100})).fit(kept, max_rows=max_rows)  # basis
        n_folds, seen = folds, 0
    else:
        model = base_model
        with np.load(open_stats(base_dir), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        n_folds = int(arrays["n_folds"])
        base_folds = [RankStatistics.from_arrays(arrays, group_weight=model.group_weight, ties=model.ties,
                                                 prefix=f"fold{f}_") for f in range(n_folds)]
    pre, hold = _split(store, seen, holdout, excluded)
    with phase("fold statistics of the new groups", pre.n_rows + hold.n_rows, "rows") as ph:
        folds_pre = _merged(base_folds, model.fold_statistics(counted(pre, ph), n_folds, max_rows=max_rows)
                            if pre.n_rows else None)
        folds_hold = model.fold_statistics(counted(hold, ph), n_folds, max_rows=max_rows) if hold.n_rows else None
    fold_stats = _merged(folds_pre, folds_hold)
    with phase("λ selection from the fold statistics", len(alphas), "λ") as ph:
        res, total = model.select_from_fold_statistics(fold_stats, alphas)
        ph.update(len(alphas))
    best, scores = res.best_alpha, res.scores
    model.alpha = best                    # the nightly model is saved with the λ chosen tonight
    norm = getattr(model, "normalizer_", None)          # normalize=: fixed with the basis (first night)
    model.fit_basis_statistics(total, model.basis_, kept, max_rows, normalizer=norm)
    model.record_selection(res)
    arrays = {"n_folds": np.array(len(fold_stats))}
    for f, st in enumerate(fold_stats):
        arrays.update(st.to_arrays(f"fold{f}_"))
    sel = {"alphas": [float(a) for a in alphas], "cv_squared": [float(x) for x in scores],
           "alpha": best, "new_rows": pre.n_rows + hold.n_rows, "new_groups": pre.n_groups + hold.n_groups}
    minus = None
    if holdout is not None and folds_pre is not None and folds_hold is not None:
        res_m, total_m = model.select_from_fold_statistics(folds_pre, alphas)
        best_m = res_m.best_alpha
        minus = sr.KernelRankRLS(**dict(model.get_params(), alpha=best_m))
        minus.fit_basis_statistics(total_m, model.basis_, kept, max_rows, normalizer=norm)
        sel["holdout_alpha"] = best_m
    return model, sel, minus, arrays


# ------------------------------------------------------------------- sgd
def tuple_range(store, t0, t1):
    """``(Q, D_pos, D_neg)`` of tuples t0:t1 of a TupleStore."""
    batch = store.take(int(t0), int(t1))
    return batch.Q, batch.D_pos, batch.D_neg


def _is_fitted(model):
    try:
        model.t_  # noqa: B018  (reading it raises NotFittedError on an unfitted model)
    except AttributeError:   # NotFittedError is one; anything else is a real error
        return False
    return True


def update_sgd(store, base_model, seen, *, params=None, batch=4096, holdout=None, excluded=(), fraction=0.0):
    """Resume SGD (``partial_fit``, shrinkage state intact) on tuples ``seen:`` of the store.

    ``holdout=t0``: *progressive validation* on tuples ``t0:`` (the newest
    day): each batch is scored by the model before it takes its steps on it,
    so every held-out tuple is judged by a model that has not seen it; the
    final model is still one run over all tuples.  Returns (model, selection,
    ``{"tuple_error": ...}`` of the progressive pass, or None when there is
    no holdout or no model yet at its start).  ``excluded``: tuple spans
    left out (excluded days); ``fraction``: tuples of the queries the gate
    holds out (:func:`streamrank.pipelines._nightly_views.held_out` of the
    query row) are never trained on.
    """
    from streamrank.metrics import tuple_error
    from streamrank.pipelines._nightly_views import held_out, spans_minus

    model = sr.SparseSGDRanker(**(params or {"auto_refit": False})) if base_model is None else base_model
    if base_model is None and model.normalize is not None:
        # normalize=: scale-only query/item scales of every stored vector of the first night (one bounded
        # pass); later nights keep them (partial_fit scales every batch by them)
        model.fit_scales(store)
        model.init_state(store.n_query_features, store.n_item_features)
    n = store.n_tuples
    h0 = n if holdout is None else min(max(int(holdout), int(seen)), n)
    wrong = judged = want = trained = 0
    todo = sum(b - a for a, b in spans_minus(seen, n, excluded))
    with phase("SGD steps on the new tuples", todo, "tuples") as ph:
        for lo0, hi0, held in ((seen, h0, False), (h0, n, holdout is not None)):
            for lo, hi in spans_minus(lo0, hi0, excluded):
                for a in range(lo, hi, batch):
                    if fraction > 0:
                        b = store.take(a, min(a + batch, hi))
                        keep = np.flatnonzero(~held_out(b.tuples[:, 0], fraction))
                        Q, Dp, Dn = b.Q[keep], b.D_pos[keep], b.D_neg[keep]
                    else:
                        Q, Dp, Dn = tuple_range(store, a, min(a + batch, hi))
                    ph.update(min(a + batch, hi) - a)
                    if Q.shape[0] == 0:
                        continue
                    if held:
                        want += Q.shape[0]
                    if held and _is_fitted(model):
                        wrong += tuple_error(model.predict(Q, Dp), model.predict(Q, Dn)) * Q.shape[0]
                        judged += Q.shape[0]
                    model.partial_fit(Q, Dp, Dn)
                    trained += Q.shape[0]
    prog = {"tuple_error": float(wrong / judged)} if judged and judged == want else None
    return model, {"new_tuples": trained, "t": model.t_, "nnz": model.nnz_}, prog


def update_pairwise(store, base_model, seen, *, params=None, max_rows=DEFAULT_BLOCK_ROWS, holdout=None, k=10,
                    excluded=(), fraction=0.0):
    """Resume PairwiseSGDRanker: ``partial_fit`` on each block of the new groups (pairs sampled within
    groups, one pair per row; step counter, L1 state and sampling counter intact; a weighted ``store``:
    each block's row weights, pair (i, j) stepping with w_i w_j).  ``holdout``:
    progressive validation as in :func:`update_sgd` — each held-out block's NDCG@k and disagreement
    are measured before the model learns from it.  ``excluded`` / ``fraction``: groups of excluded days and
    of the queries the gate holds out are never trained on.  Returns (model, selection, metrics or None)."""
    from streamrank.metrics import RankingEvaluator, score_block

    model = sr.PairwiseSGDRanker(**(params or {})) if base_model is None else base_model
    pre, hold = _split(store, seen, holdout, excluded, fraction)
    if base_model is None and model.normalize is not None:
        # normalize=: the scales of all of the first night's rows (one pass), not of its first block;
        # later nights keep them (partial_fit scales every batch by the model's normalizer_)
        from streamrank.normalize import FeatureMoments

        moments = FeatureMoments(store.n_features)
        for part in (pre, hold):
            for block in part.blocks(max_rows=max_rows, split_groups=True):
                moments.update(block.X)
        model.init_state(store.n_features)
        model.normalizer_ = moments.normalizer(model.normalize)
    ev = RankingEvaluator(k, ("ndcg", "disagreement"), weighted=getattr(store, "row_weighted", False))
    judged = 0
    with phase("SGD steps on the new groups", pre.n_rows + hold.n_rows, "rows") as ph:
        for part in (pre, hold):
            for block in part.blocks(max_rows=max_rows):
                ph.update(block.n_rows)
                if part is hold and holdout is not None and _is_fitted(model):
                    ev.update_block(block, score_block(model, block.X),
                                    np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, -1)[:, 0])
                    judged += block.n_rows
                model.partial_fit(block.X, block.y, block.row_qid(), sample_weight=block.weight)
    prog = ({name: float(r.value) for name, r in ev.result().items()} if judged and judged == hold.n_rows
            else None)
    return model, {"new_rows": pre.n_rows + hold.n_rows, "new_groups": pre.n_groups + hold.n_groups,
                   "t": model.t_}, prog


def validate_tuples(model, store, t0, t1):
    """Tuple error (fraction of tuples ranked wrongly or tied) on tuples t0:t1."""
    from streamrank.metrics import tuple_error

    Q, Dp, Dn = tuple_range(store, t0, t1)
    return {"tuple_error": float(tuple_error(model.predict(Q, Dp), model.predict(Q, Dn)))}


# -------------------------------------------------------------- validate
def validate(model, source, *, k=10, max_rows=DEFAULT_BLOCK_ROWS, weighted=False):
    """NDCG@k and disagreement of ``model`` on ``source`` (one streaming pass); ``weighted``: with the
    source's row weights (``block.weight``), as the model line trains."""
    from streamrank.metrics import evaluate

    res = evaluate(source, model, k=k, metrics=("ndcg", "disagreement"), max_rows=max_rows, weighted=weighted)
    return {name: float(r.value) for name, r in res.items()}
