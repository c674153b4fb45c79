"""Nightly pipeline, step 3: the newest-day validation numbers (descriptive; the gate decides).

See step 3 of :mod:`streamrank.pipelines.nightly`: the newest day is held
out of the candidate (statistics learners) or scored progressively (SGD),
a fixed ``--validation`` store replaces it, and without an honest slice the
numbers are in-sample (``validation.scheme`` says which).  A model line that
trains on a weighted source (``--weights`` / ``--ips``) is scored with the
same row weights and targets (``validation.weighted`` names the weighting;
a ``--validation`` store is weighted the same way, so it needs the columns).
"""
from __future__ import annotations

import streamrank as sr
from streamrank._phases import phase
from streamrank.pipelines._nightly_ingest import newest_day
from streamrank.pipelines._nightly_learners import validate, validate_tuples
from streamrank.pipelines._nightly_views import counted, group_view

__all__ = ["_holdout", "_validate_night"]

_PHASE = "validation (the newest day, or --validation)"


def _holdout(log, unit, total, cur_seen, fixed_store):
    """Start of the held-out slice for the promotion decision, or None (see step 3 of the module doc).

    The newest day's entries (trailing log entries of one content hash); the
    slice starts where neither it nor the current model's data ends, so
    neither the candidate-without-it nor the current model has seen it.
    """
    if fixed_store is not None:
        return None
    day = newest_day(log)
    if not day:
        return None
    h0 = max(int(day[0][unit][0]), int(cur_seen))
    return h0 if h0 < total else None



def _validate_night(learner, store, log, unit, total, model, held, cur_model, cur_seen, h0, validation, k,
                    max_rows, excl=(), weighted=None, weigh=None):
    """Step 3: ``(validation description, candidate metrics, current metrics, metric, higher is better)``.

    ``held``: what the update returned for the held-out slice ``h0:`` — the
    model trained without it (statistics learners) or the progressive
    metrics on it (SGD) — or None (no honest slice: scored in-sample).
    ``store``: the source the line trains on; ``weighted``: the label of its
    weighting (:func:`~streamrank.pipelines._nightly_gate.scoring_label`) or
    None; ``weigh(source)``: the same weighting applied to a ``--validation`` store.
    """
    tuples, sgd = unit == "tuples", learner.startswith("sgd")
    if validation is not None:
        vdesc = {"scheme": "fixed-store", "store": str(validation)}
        if tuples:
            vts = sr.TupleStore.open(validation)
            vt = (vts, 0, vts.n_tuples)
        else:
            vsrc = sr.GroupStore.open(validation)
            if weighted is not None:
                vsrc = weigh(vsrc)
        cand = model
    else:
        honest = held is not None
        day = newest_day(log)
        lo = h0 if honest else int(day[0][unit][0])
        vdesc = {"scheme": ("progressive" if sgd else "holdout") if honest else "in-sample", unit: [lo, total],
                 "batch_ids": [e["batch_id"] for e in day if e[unit][1] > lo]}
        if honest and not sgd:
            vdesc["candidate_trained_on"] = [0, lo]
            vdesc["promoted_model"] = "refit on all data (the held-out slice included)"
        elif honest:
            vdesc["candidate"] = "each batch of the slice scored before the model learned from it"
        else:
            vdesc["reason"] = ("the current model has seen every group of the newest day"
                               if cur_model is not None and cur_seen >= total
                               else "no data outside the newest day to train a candidate on")
        vsrc, vt = (None if tuples else group_view(store, lo, total, excl)), (store, lo, total)
        cand = held if (honest and not sgd) else model
    if weighted is not None and not tuples:
        vdesc["weighted"] = weighted
    progressive = held is not None and sgd and validation is None     # scored as the model learned
    if tuples:
        with phase(_PHASE):
            metrics = held if progressive else validate_tuples(cand, *vt)
            cur_metrics = validate_tuples(cur_model, *vt) if cur_model is not None else None
        return vdesc, metrics, cur_metrics, "tuple_error", False
    # the phase counts the rows scored: one pass over the slice per model (candidate, current)
    n_passes = (not progressive) + (cur_model is not None)
    with phase(_PHASE, vsrc.n_rows * n_passes or None, "rows") as ph:
        wtd = weighted is not None
        metrics = held if progressive else validate(cand, counted(vsrc, ph), k=k, max_rows=max_rows, weighted=wtd)
        cur_metrics = (validate(cur_model, counted(vsrc, ph), k=k, max_rows=max_rows, weighted=wtd)
                       if cur_model is not None else None)
    return vdesc, metrics, cur_metrics, f"ndcg@{k}", True
