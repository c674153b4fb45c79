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

A model line that trains on a weighted source (``--weights``, ``--ips``, or
any weighted source a learner line trains on) is gated on that source: the
out-of-fold NDCG@k and disagreement use its row weights and targets (for
IPS, the clicks and 1/p on clicked rows: the weighted metrics of
:mod:`streamrank.metrics`, pair weight w_i w_j as in training), and the
record says so (``"weighted": "ips-weighted"``).

A rejected night's days stay in the store, but the models directory lists
them as excluded (:mod:`streamrank.pipelines._nightly_exclusions`): later
candidates train without them and the history ``H`` skips them.

The SGD learners (sgd-pairwise, sgd-bilinear) keep no fold statistics: a
model cannot be "solved without" a group it has stepped on, and every group
the current model saw, the candidate saw too.  Scoring both on the history
they were both updated on would not be held-out; scoring on the new day is
what an inverted day fools (the candidate learned those very labels).  So a
fixed fraction of the *queries* (``--gate-fraction``, default 0.1) is
**never trained on**: a query is held out when the hash of its id falls in
the lowest ``fraction`` of the range (:func:`~streamrank.pipelines._nightly_views.held_out`,
stable night after night; sgd-bilinear: the store's query rows).  The gate
(:func:`sgd_gate`) scores the candidate and the current model on the newest
held-out queries of the history before tonight's data (≤ ``max_rows`` rows,
resp. tuples; excluded days skipped): NDCG@k for sgd-pairwise (rule as
above), tuple error for sgd-bilinear (not above the current's by more than
``--tolerance``).  Why it cannot be fooled: neither model has taken a step
on those queries, and their labels come from nights that were accepted —
tonight's data reaches the score only through what the candidate learned
from it, so inverted labels show up as a worse order on them.
What it costs: the model learns from ``1 − fraction`` of the queries (the
held-out ones are read only by the gate: ≤ one block per night), and the
fraction is fixed for a model line (changing it needs ``--full``);
``--gate-fraction 0`` trains on every query and decides by progressive
validation on the new day, as before (an inverted day is then promoted).
"""
from __future__ import annotations

import numpy as np

from streamrank import DEFAULT_BLOCK_ROWS
from streamrank._phases import phase

__all__ = ["history_slice", "history_view", "fold_scorers", "out_of_fold_metrics", "gate", "statistics_gate",
           "sgd_gate", "line_fraction", "scoring_label", "DEFAULT_GATE_FRACTION"]

DEFAULT_GATE_FRACTION = 0.1


def history_slice(store, end: int, max_rows: int):
    """``(g0, end)``: the newest groups before ``end`` holding at most ``max_rows`` rows (at least one group)."""
    end = int(end)
    if end <= 0:
        return None
    ptr = np.asarray(store.group_ptr)
    lim = ptr[end] - int(max_rows)
    g0 = int(np.searchsorted(ptr[:end + 1], lim, side="left"))
    return min(g0, end - 1), end


def history_view(store, end, excluded=(), max_rows=DEFAULT_BLOCK_ROWS, *, fraction=0.0):
    """The newest groups before ``end`` (excluded days skipped; ``fraction > 0``: only the held-out queries)
    holding at most ``max_rows`` rows (at least one group), as a source; None when there are none."""
    from streamrank.pipelines._nightly_views import GroupSelection, group_view, spans_minus

    end = int(end)
    if end <= 0:
        return None
    if fraction <= 0 and spans_minus(0, end, excluded) == [(0, end)]:
        h = history_slice(store, end, max_rows)
        return store.groups(*h)
    view = group_view(store, 0, end, excluded, fraction=fraction, held=True)
    if view.n_groups == 0:
        return None
    sizes = np.diff(view.group_ptr)
    keep = int(np.searchsorted(np.cumsum(sizes[::-1]), int(max_rows), side="right"))
    keep = min(max(keep, 1), view.n_groups)
    return GroupSelection(store, view.selected[-keep:])


def _span(src):
    """``[first group, end)`` of a history source in store numbering."""
    sel = getattr(src, "selected", None)
    if sel is not None:
        return [int(sel[0]), int(sel[-1]) + 1]
    return [int(src.g0), int(src.g1)]


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


def out_of_fold_metrics(source, scorers, *, k=10, max_rows=DEFAULT_BLOCK_ROWS, weighted=False):
    """NDCG@k and disagreement of ``source`` with each group scored by the scorer of its fold; ``weighted``:
    with the source's row weights (``block.weight``: the weighted NDCG and disagreement of
    :mod:`streamrank.metrics`, pair weight w_i w_j as in training)."""
    from streamrank.metrics import RankingEvaluator
    from streamrank.rankrls.selection import fold_of

    ev = RankingEvaluator(k, ("ndcg", "disagreement"), weighted=weighted)
    n = len(scorers)
    for block in source.blocks(max_rows=max_rows):
        row_fold = np.repeat(fold_of(block.qid, n), np.diff(block.group_ptr))
        s = np.empty(block.n_rows)
        for f in np.unique(row_fold):
            rows = np.flatnonzero(row_fold == f)
            s[rows] = scorers[int(f)](block.X[rows])
        y = np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, -1)[:, 0]
        ev.update_block(block, s, y)
    return {name: float(r.value) for name, r in ev.result().items()}


def gate(learner, store, h, candidate, cand_folds, current, cur_folds, *, k=10, tolerance=0.005,
         max_rows=DEFAULT_BLOCK_ROWS, weighted=None):
    """Judge ``candidate`` against ``current`` out of fold on the history ``h``: groups ``(g0, g1)`` of
    ``store`` or a source (:func:`history_view`).

    Returns the record kept in ``version.json`` under ``"gate"``: the slice,
    both models' out-of-fold metrics, the metric and the decision.
    ``weighted``: None (unweighted), or the label of the line's weighting
    (:func:`scoring_label`) — the metrics then use the row weights (and
    targets) of ``store``, the weighted source the line trains on, and the
    record keeps the label under ``"weighted"``.
    """
    from streamrank.pipelines._nightly_views import counted

    src = store.groups(*h) if isinstance(h, tuple) else h
    with phase(f"out-of-fold scores of both models on {src.n_groups:,} history groups", 2 * src.n_rows or None,
               "rows") as ph:
        cand = out_of_fold_metrics(counted(src, ph), fold_scorers(learner, candidate, cand_folds), k=k,
                                   max_rows=max_rows, weighted=weighted is not None)
        cur = out_of_fold_metrics(counted(src, ph), fold_scorers(learner, current, cur_folds), k=k,
                                  max_rows=max_rows, weighted=weighted is not None)
    mk = f"ndcg@{k}"
    return {"scheme": "history-out-of-fold", "groups": _span(src), "n_groups": int(src.n_groups),
            "rows": int(src.n_rows), "metric": mk, "candidate": cand, "current": cur, "tolerance": float(tolerance),
            "candidate_folds": len(cand_folds), "current_folds": len(cur_folds),
            **({"weighted": weighted} if weighted else {}),
            "promote": bool(not (cand[mk] < cur[mk] - tolerance))}


def scoring_label(weighting, source) -> str | None:
    """How the night's metrics are weighted: None when ``source`` (what the line trains on) carries no row
    weights, else ``"ips-weighted"`` (``--ips``: clicks as targets, 1/p on clicked rows) or ``"weighted"``
    (the store's row weights, or any other weighted source a learner line trains on)."""
    if not getattr(source, "row_weighted", False):
        return None
    return "ips-weighted" if (weighting or {}).get("ips") else "weighted"


def statistics_gate(learner, store, end, excluded, model, extra, cur_model, cur_stats, *, k, tolerance, max_rows,
                    weighted=None):
    """The gate for rankrls / sparse-kernel: the fold statistics of both models (``extra`` = the candidate's
    saved arrays, ``cur_stats`` = an ``np.load``-able of the current version's), None when unavailable.
    ``store``: the source the line trains on (weighted or not); ``weighted``: as :func:`gate`."""
    h = history_view(store, end, excluded, max_rows)
    if h is None:
        return None
    if learner == "rankrls":
        cand_folds, cur_folds = model.fold_stats_, getattr(cur_model, "fold_stats_", None)
        if cur_folds is None:
            return None
    else:
        cand_folds = _kernel_folds(extra, model)
        with np.load(cur_stats, allow_pickle=False) as z:
            cur_folds = _kernel_folds({n: z[n] for n in z.files}, cur_model)
    return gate(learner, store, h, model, cand_folds, cur_model, cur_folds, k=k, tolerance=tolerance,
                max_rows=max_rows, weighted=weighted)


def _kernel_folds(arrays, model):
    from streamrank.rankrls.linear import RankStatistics

    return [RankStatistics.from_arrays(arrays, group_weight=model.group_weight, ties=model.ties, prefix=f"fold{f}_")
            for f in range(int(arrays["n_folds"]))]


def held_tuples(store, end, excluded, fraction, max_tuples):
    """``(Q, D_pos, D_neg, [first, end))`` of the newest held-out tuples before ``end`` (at most
    ``max_tuples``; excluded spans skipped), read backwards in pieces; None when there are none."""
    import scipy.sparse as sp

    from streamrank.pipelines._nightly_views import held_out, spans_minus

    parts, n, first = [], 0, None
    step = max(4096, int(max_tuples))
    for a, b in reversed(spans_minus(0, end, excluded)):
        hi = b
        while hi > a and n < max_tuples:
            lo = max(a, hi - step)
            batch = store.take(lo, hi)
            m = np.flatnonzero(held_out(batch.tuples[:, 0], fraction))[::-1][:max_tuples - n][::-1]
            if m.size:
                parts.append((batch.Q[m], batch.D_pos[m], batch.D_neg[m]))
                n += m.size
                first = int(batch.index[m[0]])
            hi = lo
        if n >= max_tuples:
            break
    if not parts:
        return None
    parts = parts[::-1]
    return (*(sp.vstack([p[i] for p in parts], format="csr") for i in range(3)), [first, int(end)], n)


def sgd_gate(learner, store, end, excluded, fraction, candidate, current, *, k=10, tolerance=0.005,
             max_rows=DEFAULT_BLOCK_ROWS, weighted=None):
    """The SGD learners' gate (module doc): candidate and current scored on the held-out queries of the
    history before ``end``; the record for ``version.json["gate"]``, or None when the history holds none.
    ``weighted``: as :func:`gate` (sgd-pairwise; the tuple error has no weighted form)."""
    from streamrank.metrics import tuple_error
    from streamrank.pipelines._nightly_learners import validate

    rec = {"scheme": "held-out-queries", "fraction": float(fraction), "tolerance": float(tolerance)}
    if learner == "sgd-bilinear":
        got = held_tuples(store, end, excluded, fraction, max_rows)
        if got is None:
            return None
        Q, Dp, Dn, span, n = got
        cand, cur = ({"tuple_error": float(tuple_error(m.predict(Q, Dp), m.predict(Q, Dn)))}
                     for m in (candidate, current))
        mk = "tuple_error"
        rec.update(tuples=span, n_tuples=int(n))
        promote = not (cand[mk] > cur[mk] + tolerance)
    else:
        src = history_view(store, end, excluded, max_rows, fraction=fraction)
        if src is None:
            return None
        from streamrank.pipelines._nightly_views import counted

        with phase(f"scores of both models on {src.n_groups:,} held-out queries", 2 * src.n_rows or None,
                   "rows") as ph:
            cand, cur = (validate(m, counted(src, ph), k=k, max_rows=max_rows, weighted=weighted is not None)
                         for m in (candidate, current))
        mk = f"ndcg@{k}"
        rec.update(groups=_span(src), n_groups=int(src.n_groups), rows=int(src.n_rows))
        if weighted:
            rec["weighted"] = weighted
        promote = not (cand[mk] < cur[mk] - tolerance)
    rec.update(metric=mk, candidate=cand, current=cur, promote=bool(promote))
    return rec


def line_fraction(models_dir, learner, requested, new_line):
    """The SGD gate's held-out fraction of this night: fixed for a model line (the current version's),
    ``requested`` (default 0.1) for a new one; another value on an existing line is refused before ingest."""
    from streamrank.pipelines._nightly_versions import current_version, read_version

    if not learner.startswith("sgd"):
        if requested:
            raise ValueError(f"--gate-fraction is for the SGD learners; {learner} is gated out of fold")
        return 0.0
    if requested is not None and not 0.0 <= float(requested) < 1.0:
        raise ValueError(f"--gate-fraction must be in [0, 1), got {requested}")
    cur = current_version(models_dir)
    if cur is None or new_line:
        return DEFAULT_GATE_FRACTION if requested is None else float(requested)
    line = float(read_version(models_dir, cur).get("gate_fraction", 0.0))   # versions before the gate: 0
    if requested is not None and float(requested) != line:
        raise ValueError(f"--gate-fraction {requested}: the model line of {cur} holds out {line} of the queries "
                         "(fixed at its first night); use --full to start a line with another fraction")
    return line
