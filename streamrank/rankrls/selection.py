"""Model selection for linear RankRLS from statistics.

* **Folds by query**: a group's fold is a hash of its query id
  (:func:`fold_of`), so a nightly increment puts new groups of yesterday's
  queries in the same fold and fold statistics stay valid under
  ``partial_fit``.
* **k-fold from statistics**: one pass accumulates G_f, B_f per fold; the
  model without fold f is ``w_f(λ) = (G - G_f + λI)⁻¹ (B - B_f)`` (one
  eigendecomposition per fold, then O(n²) per λ) and its squared ranking loss
  on fold f is ``w_fᵀ G_f w_f - 2 w_fᵀ b_f + yᵀ L_f y`` — no second pass.
  Ranking metrics (disagreement, NDCG@k from :mod:`streamrank.metrics`) need
  one streaming prediction pass, for all λ at once.
* **Leave-query-out** (exact): with ``A = G + λI``, ``Q = X_g A⁻¹ X_gᵀ`` and
  ``r = X_g w - Q L_g y_g`` the held-out predictions of group g are

      p_g = r + Q (I - L_g Q)⁻¹ L_g r

  (Woodbury on ``A - X_gᵀ L_g X_g``; the primal analogue of eq. (33) of
  Pahikkala et al. 2009).  With ``G = V Λ Vᵀ`` and ``Z = X_g V``,
  ``Q = Z (Λ + λ)⁻¹ Zᵀ``, so every λ costs O(n_g² n + n_g³) per group.

Scores: ``"squared"`` is the held-out least-squares ranking loss (cost (21)
with the model's group weights and ties) divided by the number of pairs
(lower is better); ``"disagreement"`` (lower is better) and ``"ndcg@k"``
(higher is better) are means over queries from :mod:`streamrank.metrics`.
With several outputs the score is the mean over outputs and one alpha is
chosen for all.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._phases import phase
from .._defaults import DEFAULT_BLOCK_ROWS, check_alphas
from .._validation import check_alpha
from ._statistics import EigenPath

__all__ = ["fold_of", "accumulate_folds", "cross_validate", "leave_query_out", "CVResult",
           "MAX_LQO_GROUP_ROWS", "fold_solutions", "fold_squared_loss", "select_from_fold_statistics",
           "best_of_scores"]

MAX_LQO_GROUP_ROWS = 20_000


def check_folds(folds, n_groups: int) -> int:
    """``folds`` as an int k >= 2 with at least k groups to split; clear errors otherwise."""
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ValueError(f'folds must be an integer >= 2 or "query"; got {folds!r}')
    folds = int(folds)
    if n_groups < folds:
        raise ValueError(f"{folds}-fold cross-validation by query needs at least {folds} groups; the source "
                         f"has {n_groups} (qid=None is one global group)")
    return folds


def fold_of(qid, n_folds: int) -> np.ndarray:
    """Fold of each query id: splitmix64(key) mod n_folds (stable across runs and increments).

    The key of an integer id is the id; of a string, its BLAKE2b key (:mod:`streamrank._qid`).
    """
    from .._qid import qid_keys

    z = qid_keys(qid).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(n_folds)).astype(np.int64)


def _take_rows(X, rows):
    return X[rows]


def _split_by_fold(block, folds_of_groups):
    """Yield (f, X, Y, group_ptr, group_size, group_offset, group_id, rows) per fold present."""
    gp = block.group_ptr
    local = np.diff(gp)
    gid = block.group_start + np.arange(block.n_groups, dtype=np.int64)
    for f in np.unique(folds_of_groups):
        sel = folds_of_groups == f
        if sel.all():
            rows = slice(None)
            yield (int(f), block.X, block.y, gp, block.group_size, block.group_offset, gid,
                   np.arange(block.n_rows))
            continue
        rows = np.concatenate([np.arange(gp[g], gp[g + 1]) for g in np.flatnonzero(sel)]) \
            if sel.any() else np.zeros(0, np.int64)
        sub_gp = np.concatenate(([0], np.cumsum(local[sel]))).astype(np.int64)
        yield (int(f), _take_rows(block.X, rows), np.asarray(block.y)[rows], sub_gp,
               block.group_size[sel], block.group_offset[sel], gid[sel], rows)


def rows_weight(block, rows):
    """The row weights of ``block`` at ``rows`` (None for an unweighted block)."""
    w = getattr(block, "weight", None)
    return None if w is None else w[rows]


def accumulate_folds(model, source, n_folds, max_rows):
    """One pass: per-fold :class:`RankStatistics` (their sum is the full statistics)."""
    folds = [model.new_statistics(source.n_features, source.n_outputs) for _ in range(n_folds)]
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        fog = fold_of(block.qid, n_folds)
        for f, X, Y, gp, size, off, gid, rows in _split_by_fold(block, fog):
            folds[f].add_block(X, Y, gp, group_size=size, group_offset=off, group_id=gid,
                               weight=rows_weight(block, rows))
    for st in folds:
        st.check_complete()
    return folds


@dataclass
class CVResult:
    """Scores of every alpha.

    Attributes
    ----------
    alphas
        (a,) the grid
    scores
        (a,) mean over outputs
    scores_per_output : (a, v)
        The scores per output column.
    best_alpha : float
        The chosen λ.
    best_index : int
        Its index in ``alphas``.
    scoring : str
        The score the selection used.
    folds : int or "query"
        The number of folds, or ``'query'`` for leave-query-out.
    greater_is_better : bool
        Whether a larger score is better.
    """

    alphas: np.ndarray
    scores: np.ndarray
    scores_per_output: np.ndarray
    best_alpha: float
    best_index: int
    scoring: str
    folds: object
    greater_is_better: bool


def _parse_scoring(scoring):
    if scoring == "squared":
        return "squared", None
    if scoring == "disagreement":
        return "disagreement", None
    if isinstance(scoring, str) and scoring.startswith("ndcg"):
        rest = scoring[4:]
        if rest == "":
            return "ndcg", 10
        if rest.startswith("@") and rest[1:].isdigit() and int(rest[1:]) > 0:
            return "ndcg", int(rest[1:])
    raise ValueError(f'scoring must be "squared", "disagreement" or "ndcg@k" (k a positive integer); '
                     f"got {scoring!r}")


class _Evaluators:
    """One metric accumulator per (alpha, output)."""

    def __init__(self, kind, k, n_alphas, n_outputs):
        from ..metrics import RankingEvaluator

        self.kind = kind
        self.name = "disagreement" if kind == "disagreement" else f"ndcg@{k}"
        self.ev = [[RankingEvaluator(k if kind == "ndcg" else None, (kind,)) for _ in range(n_outputs)]
                   for _ in range(n_alphas)]

    def update(self, block, S):
        """S: (rows, a, v) predictions of the block's rows."""
        Y = np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, -1)
        for a, row in enumerate(self.ev):
            for o, ev in enumerate(row):
                ev.update(Y[:, o], S[:, a, o], block.group_ptr, qid=block.qid,
                          group_size=block.group_size, group_offset=block.group_offset)

    def result(self):
        out = np.array([[next(iter(ev.result().values())).value for ev in row] for row in self.ev])
        return out


def cross_validate(model, source=None, *, alphas=None, folds=5, scoring="squared", max_rows=DEFAULT_BLOCK_ROWS):
    """Group cross-validation of ``model`` over ``alphas``; refits ``model`` with the best one.

    ``folds``: an int k >= 2 (k-fold by query, from per-fold statistics) or
    ``"query"`` (exact leave-one-query-out).  ``source=None`` uses the
    model's training data.  Returns a :class:`CVResult`.
    """
    model.check_params()
    kind, k = _parse_scoring(scoring)
    alphas = check_alphas(alphas)
    source = model.training_source(source)
    model.check_source(source)
    if model.solver_for(source) != "primal":
        raise NotImplementedError("cross_validate needs the primal solver (statistics); got a source that "
                                  "resolves to solver='cg'")
    n_out = source.n_outputs
    if folds == "query":
        if source.n_groups < 2:
            raise ValueError(f"leave-query-out cross-validation needs at least 2 groups; the source has "
                             f"{source.n_groups}")
        total = model.accumulate_source(source, max_rows)
        model.fit_statistics(total, y_1d=(n_out == 1))
        model.__dict__.pop("fold_stats_", None)
        ev = _Evaluators(kind, k, len(alphas), n_out) if kind != "squared" else None
        sq = np.zeros((len(alphas), n_out))
        with phase("leave-query-out", total=source.n_groups, unit="groups") as progress:
            for block, P in _lqo_blocks(model, source, alphas, max_rows, progress):
                if ev is not None:
                    ev.update(block, P)
                else:
                    sq += _block_loss(model, block, P)
        per_out = ev.result() if ev is not None else sq / np.maximum(total.pairs_per_output, 1)
        fold_stats = None
    else:
        folds = check_folds(folds, source.n_groups)
        fold_stats = accumulate_folds(model, source, folds, max_rows)
        total, Ws = fold_solutions(model, fold_stats, alphas)
        if kind == "squared":
            per_out = fold_squared_loss(fold_stats, Ws, total)
        else:
            ev = _Evaluators(kind, k, len(alphas), n_out)
            for block in source.blocks(max_rows=max_rows, split_groups=True):
                fog = fold_of(block.qid, folds)
                S = np.empty((block.n_rows, len(alphas), n_out))
                for f, X, _, _, _, _, _, rows in _split_by_fold(block, fog):
                    P = _predict_stack(X, Ws[f])
                    S[rows] = P
                ev.update(block, S)
            per_out = ev.result()
        model.fit_statistics(total, y_1d=(n_out == 1))
    greater = kind == "ndcg"
    scores, best = best_of_scores(per_out, greater)
    with model.solving_with(alphas[best]):       # refit at the best alpha; the user's alpha stays
        model.fit_statistics(model.stats_, source=source)
    if getattr(source, "feature_names", None) is not None:   # a store's names travel with the model, as in fit
        model.set_feature_names(source.n_features, source=source)
    if fold_stats is not None:
        model.fold_stats_ = fold_stats
    return model.record_selection(CVResult(
        alphas=alphas, scores=scores, scores_per_output=per_out, best_alpha=float(alphas[best]), best_index=best,
        scoring=scoring if kind == "squared" or kind == "disagreement" else f"ndcg@{k}", folds=folds,
        greater_is_better=greater))


def best_of_scores(per_out, greater):
    """(scores, best index): the mean over outputs of every λ's scores, and the best λ (NaN never wins)."""
    scores = np.nanmean(per_out, axis=1) if per_out.size else per_out
    valid = np.where(np.isnan(scores), -np.inf if greater else np.inf, scores)
    return scores, int(np.argmax(valid) if greater else np.argmin(valid))


def fold_solutions(model, fold_stats, alphas):
    """``(total, Ws)``: the sum of per-fold statistics and, per fold f, the weights without it.

    ``Ws[f]`` (len(alphas), n, v) = ``(G − G_f + λI)⁻¹ (B − B_f)`` for every λ,
    from one eigendecomposition per fold (:class:`EigenPath`).  With
    ``normalize=`` each fold's model is solved on the features scaled by the
    scales of all rows (the congruence of :mod:`streamrank.normalize`) and
    mapped back to raw-feature weights.
    """
    total = model.new_statistics(fold_stats[0].n_features, fold_stats[0].n_outputs)
    for st in fold_stats:
        total.merge(st)
    # normalize=: each fold's model is solved on the features scaled by the scales of all rows
    # (the congruence of streamrank.normalize) and mapped back to raw-feature weights d * w'
    d = np.ones(total.n_features)
    if model.normalize is not None:
        d = 1.0 / total.moments.normalizer(model.normalize).scale
    Ws = []
    with phase("CV folds", total=len(fold_stats), unit="folds") as progress:
        for st in fold_stats:
            G, B = total.G - st.G, total.B - st.B
            G = G * d[:, None] * d[None, :] if G.ndim == 2 else G * d[None, :, None] * d[None, None, :]
            ep = EigenPath(G, B * d[:, None])
            Ws.append(np.stack([ep.coef(a) for a in alphas]) * d[None, :, None])   # (a, n, v), raw features
            progress.update(1)
    return total, Ws


def fold_squared_loss(fold_stats, Ws, total):
    """(alphas, outputs) k-fold squared ranking loss per pair, from the statistics alone (no pass).

    Fold f's loss of ``w_f`` is ``w_fᵀ G_f w_f − 2 w_fᵀ B_f + yᵀL_f y``; the sum
    over folds is divided by each output's number of pairs in the cost.
    """
    return sum(st.loss(W) for st, W in zip(fold_stats, Ws)) / np.maximum(total.pairs_per_output, 1)


def select_from_fold_statistics(model, fold_stats, alphas):
    """k-fold choice of λ from per-fold statistics alone: ``(CVResult, total statistics)``.

    What :func:`cross_validate` (``folds=k``, ``scoring="squared"``) does
    after its pass, for fold statistics kept elsewhere — added night by
    night (the nightly pipeline) or reduced on a cluster.  The model is not
    changed: solve ``total`` at ``result.best_alpha`` to fit it.
    """
    alphas = check_alphas(alphas)
    total, Ws = fold_solutions(model, fold_stats, alphas)
    per_out = fold_squared_loss(fold_stats, Ws, total)
    scores, best = best_of_scores(per_out, False)
    return CVResult(alphas=alphas, scores=scores, scores_per_output=per_out, best_alpha=float(alphas[best]),
                    best_index=best, scoring="squared", folds=len(fold_stats), greater_is_better=False), total


def _predict_stack(X, W):
    """X (rows, n) with W (a, n, v) -> (rows, a, v)."""
    a, n, v = W.shape
    Wm = np.transpose(W, (1, 0, 2)).reshape(n, a * v)
    P = X @ Wm
    return np.asarray(P, dtype=np.float64).reshape(X.shape[0], a, v)


def _block_loss(model, block, P):
    """Σ_g (y_g - p_g)ᵀ L_g (y_g - p_g) for every alpha: (a, v)."""
    from ..laplacian import apply_laplacian

    Y = np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, -1)
    a, v = P.shape[1], P.shape[2]
    R = (Y[:, None, :] - P).reshape(block.n_rows, a * v)
    yy = None
    if model.ties == "exclude":
        yy = np.repeat(Y, a, axis=1) if v == 1 else np.tile(Y, (1, a))
    LR = apply_laplacian(R, block.group_ptr, y=yy, group_weight=model.group_weight, ties=model.ties,
                         group_size=block.group_size, weight=getattr(block, "weight", None))
    return (R * LR).sum(axis=0).reshape(a, v)


def _batched_laplacians(Yg, s, ties, Wr=None):
    """Group Laplacians of G groups of equal size: (G, k, k) from targets Yg (G, k) and weights s (G,).

    ``L = s (diag(E 1) - E)`` with E the adjacency of the counted pairs
    (all pairs; untied pairs for ties="exclude"), each pair weighted by
    w_i w_j when row weights ``Wr`` (G, k) are given.
    """
    G, k = Yg.shape
    if ties == "exclude":
        E = (Yg[:, :, None] != Yg[:, None, :]).astype(np.float64)
    else:
        E = np.broadcast_to(1.0 - np.eye(k), (G, k, k)).copy()
    if Wr is not None:
        E = E * Wr[:, :, None] * Wr[:, None, :]
    L = -E
    idx = np.arange(k)
    L[:, idx, idx] = E.sum(axis=2)
    return L * s[:, None, None]


def _lqo_blocks(model, source, alphas, max_rows, progress=None):
    """Yield (block, P) with P (rows, a, v) the leave-query-out predictions for every alpha.

    Groups of equal size inside a block are processed together (batched
    matrix products and solves); ``progress.update(n)`` is told the groups of
    each size class as they are done (a block may hold every group of the data).
    """
    from ..laplacian import group_weights

    st = model.stats_
    ep = model.eigenpath()       # of the normalized statistics D G D, D B with normalize=
    norm = getattr(model, "normalizer_", None)
    for block in source.blocks(max_rows=max_rows, split_groups=False):
        # normalize=: rows (x − o)/s, so the held-out values are what each held-out model's predict gives
        # (the shift o leaves the downdate L_g X_g unchanged; it moves a query's predictions together)
        Xb = block.X if norm is None else norm.transform(block.X)
        gp = block.group_ptr
        sizes = np.diff(gp)
        if block.n_groups and sizes.max() > MAX_LQO_GROUP_ROWS:
            raise ValueError(f"leave_query_out: a group has {int(sizes.max())} rows, more than "
                             f"{MAX_LQO_GROUP_ROWS}; held-out predictions need an n_g x n_g solve per group")
        Y = np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, -1)
        P = np.zeros((block.n_rows, len(alphas), st.n_outputs))
        w = group_weights(sizes, model.group_weight)
        # one part per G: all outputs for a shared G, output k alone for per-output Grams (own ties)
        for part, (cols, lam, V, VtB) in enumerate(ep.parts):
            out = slice(int(cols[0]), int(cols[-1]) + 1)
            Z = np.asarray(Xb @ V, dtype=np.float64)         # (rows, n)
            for k in np.unique(sizes):
                if k == 0:
                    continue
                grp = np.flatnonzero(sizes == k)
                rows = gp[grp][:, None] + np.arange(k)           # (G, k)
                Zg, Yg = Z[rows], Y[rows][:, :, out]             # (G, k, n), (G, k, |cols|)
                Lg = _batched_laplacians(Y[rows][:, :, out.start], w[grp], model.ties,
                                         None if block.weight is None else block.weight[rows])
                LY = Lg @ Yg
                I = np.eye(k)
                for i, alpha in enumerate(alphas):
                    Zs = Zg / (lam + alpha)
                    Q = Zs @ np.swapaxes(Zg, 1, 2)                   # (G, k, k)
                    r = Zs @ VtB - Q @ LY                            # (G, k, |cols|)
                    P[rows, i, out] = r + Q @ np.linalg.solve(I - Lg @ Q, Lg @ r)
                if progress is not None and part == 0:
                    progress.update(len(grp))
            if progress is not None and part == 0:
                progress.update(int(np.count_nonzero(sizes == 0)))
        yield block, P


def leave_query_out(model, source, *, alpha=None, max_rows=DEFAULT_BLOCK_ROWS):
    """Held-out predictions of every row with its query left out: (rows,) or (rows, v), source order."""
    alpha = check_alpha(model.alpha if alpha is None else alpha)
    if source.n_groups < 2:
        raise ValueError(f"leave_query_out needs at least 2 groups; the source has {source.n_groups}")
    out = np.zeros((source.n_rows, model.stats_.n_outputs))
    for block, P in _lqo_blocks(model, source, [alpha], max_rows):
        out[block.start:block.stop] = P[:, 0]
    return model.as_target_shape(out)
