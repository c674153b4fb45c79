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
from streamrank.io.blocks import BlockSource

from streamrank.pipelines._nightly_versions import open_stats

__all__ = ["DEFAULT_FOLDS", "DEFAULT_BLOCK_ROWS", "GroupRange", "select_alpha", "select_alpha_kernel",
           "kernel_fold_statistics", "update_rankrls", "update_kernel", "update_sgd", "update_pairwise",
           "tuple_range", "validate", "validate_tuples"]

DEFAULT_FOLDS = 5


class GroupRange(BlockSource):
    """Groups ``g0:g1`` of a block source (e.g. tonight's new groups of a store), as a source."""

    def __init__(self, source, g0, g1):
        g0, g1 = int(g0), int(g1)
        if not 0 <= g0 <= g1 <= source.n_groups:
            raise ValueError(f"group range {g0}:{g1} outside the source's {source.n_groups} groups")
        self.base = source
        self.g0, self.g1 = g0, g1
        ptr = source.group_ptr[g0:g1 + 1]
        self._r0 = int(ptr[0])
        self._gp = (ptr - ptr[0]).astype(np.int64)
        self.n_rows = int(ptr[-1] - ptr[0])
        self.n_groups = g1 - g0
        self.n_features = source.n_features
        self.n_outputs = source.n_outputs
        self.sparse = source.sparse

    def _group_ptr(self):
        return self._gp

    def _group_qid(self, a, b):
        return self.base._group_qid(self.g0 + a, self.g0 + b)

    def _nnz_at(self, rows):
        z = self.base._nnz_at(np.concatenate(([self._r0], np.asarray(rows, np.int64) + self._r0)))
        return None if z is None else z[1:] - z[0]

    def _read_rows(self, r0, r1):
        return self.base._read_rows(self._r0 + r0, self._r0 + r1)


# --------------------------------------------------------------- rankrls
def select_alpha(fold_stats, alphas):
    """λ with the lowest k-fold squared ranking loss, from per-fold statistics only.

    For fold f, ``w_f(λ) = (G − G_f + λI)⁻¹ (B − B_f)`` and its loss on fold f is
    ``w_fᵀ G_f w_f − 2 w_fᵀ B_f + yᵀL_f y`` (DESIGN §3.2); the score is their
    sum over folds divided by the number of pairs (as
    ``RankRLS.cross_validate(scoring="squared")``).  Returns (best alpha, scores).
    """
    from streamrank.rankrls._statistics import EigenPath

    def fold_loss(G, B, st, alphas):
        ep = EigenPath(G, B)
        return st.loss(np.stack([ep.coef(a) for a in alphas]))

    return _select_by_fold_loss(fold_stats, alphas, fold_loss)


def _select_by_fold_loss(fold_stats, alphas, fold_loss):
    """The k-fold selection shared by :func:`select_alpha` and :func:`select_alpha_kernel`.

    ``total`` = the sum of the fold statistics; ``fold_loss(G − G_f, B − B_f,
    fold f's statistics, alphas)`` is the (len(alphas), v) loss on fold f of
    the model trained without it.  Score = summed loss / pairs, mean over
    outputs; the best λ is the lowest non-NaN score.  Returns (best alpha,
    scores, total).
    """
    total = fold_stats[0].copy()
    for st in fold_stats[1:]:
        total.merge(st)
    alphas = np.asarray(alphas, dtype=np.float64)
    loss = np.zeros((len(alphas), total.n_outputs))
    for st in fold_stats:
        loss += fold_loss(total.G - st.G, total.B - st.B, st, alphas)
    scores = (loss / max(total.n_pairs, 1)).mean(axis=1)
    best = int(np.argmin(np.where(np.isnan(scores), np.inf, scores)))
    return float(alphas[best]), scores, total


def _total(fold_stats):
    """The sum of fold statistics (new object)."""
    total = fold_stats[0].copy()
    for st in fold_stats[1:]:
        total.merge(st)
    return total


def _for_selection(fold_stats, normalize):
    """Fold statistics as λ selection sees them: with ``normalize=`` the congruence D G_f D, D B_f by the
    scales of all their rows (the rule of ``RankRLS.cross_validate``: fold models on the full data's
    scales, held-out rows included; :mod:`streamrank.normalize`)."""
    if normalize is None:
        return fold_stats
    d = 1.0 / _total(fold_stats).moments.normalizer(normalize).scale
    return [st.scaled(d) for st in fold_stats]


def _merged(a, b):
    """Fold statistics ``a + b`` as new objects (either may be None: absent)."""
    if a is None and b is None:
        return None
    out = [st.copy() for st in (a if a is not None else b)]
    if a is not None and b is not None:
        for x, y in zip(out, b):
            x.merge(y)
    return out


def _split(store, seen, holdout):
    """``(groups seen:h0, groups h0:)`` of the store; ``h0`` = the held-out start (no holdout: the end)."""
    n = store.n_groups
    h0 = n if holdout is None else min(max(int(holdout), int(seen)), n)
    return GroupRange(store, seen, h0), GroupRange(store, h0, n)


def update_rankrls(store, base_model, seen_groups, alphas, *, folds=DEFAULT_FOLDS, max_rows=DEFAULT_BLOCK_ROWS,
                   params=None, holdout=None):
    """Statistics of the base model + statistics of groups ``seen_groups:`` → the new RankRLS.

    ``base_model=None`` (or ``seen_groups=0``): from scratch.  Only the new
    groups are read (once).  The fold statistics are accumulated, their sum
    is the full statistics, λ is chosen from them and the model solved.
    ``holdout=h0``: groups ``h0:`` (the newest day) are accumulated apart,
    and the model without them — λ chosen from the folds without them — is
    returned as the third value (None without a holdout or without data
    outside it).
    """
    from streamrank.rankrls.selection import accumulate_folds

    if base_model is not None and getattr(base_model, "fold_stats_", None) is None:
        raise ValueError("the current RankRLS model holds no fold statistics; run with --full once")
    model = sr.RankRLS(**dict(params or {}, solver="primal")) if base_model is None else base_model
    model.solver = "primal"
    base_folds = None
    if base_model is not None:
        base_folds = base_model.fold_stats_
        folds = len(base_folds)
    pre, hold = _split(store, seen_groups, holdout)
    folds_pre = _merged(base_folds, accumulate_folds(model, pre, folds, max_rows) if pre.n_rows else None)
    folds_hold = accumulate_folds(model, hold, folds, max_rows) if hold.n_rows else None
    folds_now = _merged(folds_pre, folds_hold)
    if folds_now is None:
        raise ValueError("no data: the store is empty")
    y_1d = store.n_outputs == 1
    best, scores, _ = select_alpha(_for_selection(folds_now, model.normalize), alphas)
    model.alpha = best
    model.fit_statistics(_total(folds_now), y_1d=y_1d)    # normalize=: the moments ride in the statistics
    model.fold_stats_ = folds_now
    sel = {"alphas": [float(a) for a in alphas], "cv_squared": [float(s) for s in scores],
           "alpha": best, "new_rows": pre.n_rows + hold.n_rows, "new_groups": pre.n_groups + hold.n_groups}
    minus = None
    if holdout is not None and folds_pre is not None and folds_hold is not None:
        best_m, _, _ = select_alpha(_for_selection(folds_pre, model.normalize), alphas)
        minus = sr.RankRLS(**dict(model.get_params(), alpha=best_m))
        minus.fit_statistics(_total(folds_pre), y_1d=y_1d)
        sel["holdout_alpha"] = best_m
    return model, sel, minus


# ---------------------------------------------------------- sparse kernel


def kernel_fold_statistics(model, source, n_folds, max_rows=DEFAULT_BLOCK_ROWS):
    """Per-fold statistics of Φ = k(X, basis_) over ``source`` (one pass; folds by query id).

    A model with ``normalizer_`` (normalize=) evaluates k(x̃, basis_) on x̃ = (x − o)/s: its basis rows are
    normalized, and the scales stay those of the night that drew the basis (like the basis itself).
    """
    from streamrank.normalize import NormalizedSource
    from streamrank.rankrls._statistics import RankStatistics
    from streamrank.rankrls.selection import _split_by_fold, fold_of

    spec, Xb = model.kernel_function(), model.basis_
    if getattr(model, "normalizer_", None) is not None:
        source = NormalizedSource(source, model.normalizer_)
    folds = [RankStatistics(Xb.shape[0], source.n_outputs, group_weight=model.group_weight, ties=model.ties)
             for _ in range(n_folds)]
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        for f, X, Y, gp, size, off, gid, _ in _split_by_fold(block, fold_of(block.qid, n_folds)):
            folds[f].add_block(spec(X, Xb), Y, gp, group_size=size, group_offset=off, group_id=gid)
    for st in folds:
        st.check_complete()
    return folds


def select_alpha_kernel(fold_stats, K_RR, alphas):
    """λ of sparse RankRLS by k-fold CV from fold statistics only.

    Without fold f: ``A_f(λ) = (G − G_f + λ K_RR)⁻¹ (B − B_f)`` (§3.5), its loss on
    fold f ``A_fᵀ G_f A_f − 2 A_fᵀ B_f + yᵀL_f y``; summed over folds / pairs.
    """
    import scipy.linalg

    def fold_loss(G, B, st, alphas):
        return np.stack([st.loss(scipy.linalg.lstsq(G + a * K_RR, B, check_finite=False)[0]) for a in alphas])

    return _select_by_fold_loss(fold_stats, alphas, fold_loss)


def update_kernel(store, base_model, base_dir, seen, alphas, *, folds=DEFAULT_FOLDS, max_rows=DEFAULT_BLOCK_ROWS,
                  params=None, holdout=None):
    """Sparse KernelRankRLS: basis fixed at the first (or --full) night; fold statistics of Φ kept beside
    the model; a night adds only the new groups' statistics.  ``holdout`` as in :func:`update_rankrls`
    (the basis is drawn from rows only — no labels — so a held-out row in it leaks nothing).
    Returns (model, selection, model without the held-out groups or None, arrays to save)."""
    from streamrank.rankrls._statistics import RankStatistics

    base_folds = None
    if base_model is None:
        model = sr.KernelRankRLS(**(params or {"n_basis": 100})).fit(store, max_rows=max_rows)  # basis
        n_folds, seen = folds, 0
    else:
        model = base_model
        with np.load(open_stats(base_dir), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        n_folds = int(arrays["n_folds"])
        base_folds = [RankStatistics.from_arrays(arrays, group_weight=model.group_weight, ties=model.ties,
                                                 prefix=f"fold{f}_") for f in range(n_folds)]
    pre, hold = _split(store, seen, holdout)
    folds_pre = _merged(base_folds, kernel_fold_statistics(model, pre, n_folds, max_rows) if pre.n_rows else None)
    folds_hold = kernel_fold_statistics(model, hold, n_folds, max_rows) if hold.n_rows else None
    fold_stats = _merged(folds_pre, folds_hold)
    K_RR = model.kernel_function()(model.basis_)
    best, scores, total = select_alpha_kernel(fold_stats, K_RR, alphas)
    model.alpha = best
    norm = getattr(model, "normalizer_", None)          # normalize=: fixed with the basis (first night)
    model.fit_basis_statistics(total, model.basis_, store, max_rows, normalizer=norm)
    arrays = {"n_folds": np.array(len(fold_stats))}
    for f, st in enumerate(fold_stats):
        arrays.update(st.to_arrays(f"fold{f}_"))
    sel = {"alphas": [float(a) for a in alphas], "cv_squared": [float(x) for x in scores],
           "alpha": best, "new_rows": pre.n_rows + hold.n_rows, "new_groups": pre.n_groups + hold.n_groups}
    minus = None
    if holdout is not None and folds_pre is not None and folds_hold is not None:
        best_m, _, total_m = select_alpha_kernel(folds_pre, K_RR, alphas)
        minus = sr.KernelRankRLS(**dict(model.get_params(), alpha=best_m))
        minus.fit_basis_statistics(total_m, model.basis_, store, max_rows, normalizer=norm)
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


def update_sgd(store, base_model, seen, *, params=None, batch=4096, holdout=None):
    """Resume SGD (``partial_fit``, shrinkage state intact) on tuples ``seen:`` of the store.

    ``holdout=t0``: *progressive validation* on tuples ``t0:`` (the newest
    day): each batch is scored by the model before it takes its steps on it,
    so every held-out tuple is judged by a model that has not seen it; the
    final model is still one run over all tuples.  Returns (model, selection,
    ``{"tuple_error": ...}`` of the progressive pass, or None when there is
    no holdout or no model yet at its start).
    """
    from streamrank.metrics import tuple_error

    model = sr.SparseSGDRanker(**(params or {"auto_refit": False})) if base_model is None else base_model
    n = store.n_tuples
    h0 = n if holdout is None else min(max(int(holdout), int(seen)), n)
    wrong = judged = 0
    for lo, hi, held in ((seen, h0, False), (h0, n, holdout is not None)):
        for a in range(lo, hi, batch):
            Q, Dp, Dn = tuple_range(store, a, min(a + batch, hi))
            if held and _is_fitted(model):
                wrong += tuple_error(model.predict(Q, Dp), model.predict(Q, Dn)) * Q.shape[0]
                judged += Q.shape[0]
            model.partial_fit(Q, Dp, Dn)
    prog = {"tuple_error": float(wrong / judged)} if judged and judged == n - h0 else None
    return model, {"new_tuples": n - seen, "t": model.t_, "nnz": model.nnz_}, prog


def update_pairwise(store, base_model, seen, *, params=None, max_rows=DEFAULT_BLOCK_ROWS, holdout=None, k=10):
    """Resume PairwiseSGDRanker: ``partial_fit`` on each block of the new groups (pairs sampled within
    groups, one pair per row; step counter, L1 state and sampling counter intact).  ``holdout``:
    progressive validation as in :func:`update_sgd` — each held-out block's NDCG@k and disagreement
    are measured before the model learns from it.  Returns (model, selection, metrics or None)."""
    from streamrank.metrics import RankingEvaluator, score_block

    model = sr.PairwiseSGDRanker(**(params or {})) if base_model is None else base_model
    pre, hold = _split(store, seen, holdout)
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
    ev = RankingEvaluator(k, ("ndcg", "disagreement"))
    judged = 0
    for part in (pre, hold):
        for block in part.blocks(max_rows=max_rows):
            if part is hold and holdout is not None and _is_fitted(model):
                ev.update(np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, -1)[:, 0],
                          score_block(model, block.X), block.group_ptr, qid=block.qid, group_size=block.group_size,
                          group_offset=block.group_offset)
                judged += block.n_rows
            model.partial_fit(block.X, block.y, block.row_qid())
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
def validate(model, source, *, k=10, max_rows=DEFAULT_BLOCK_ROWS):
    """NDCG@k and disagreement of ``model`` on ``source`` (one streaming pass)."""
    from streamrank.metrics import evaluate

    res = evaluate(source, model, k=k, metrics=("ndcg", "disagreement"), max_rows=max_rows)
    return {name: float(r.value) for name, r in res.items()}
