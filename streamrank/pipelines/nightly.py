"""Nightly retraining on growing logs.

One run = one night:

    streamrank nightly --store STORE --new DAYFILE... --models DIR \\
        [--learner rankrls|sparse-kernel|sgd-bilinear|sgd-pairwise] [--alphas GRID] [--full] [--keep N]
        [--reject DAY] [--readmit DAY] [--gate-fraction F] [--force] [--no-checks] [--max-... thresholds]

1. **Ingest** each DAYFILE (LETOR/svmlight text, ``.npz`` with ``X, y, qid``,
   or a zarr :class:`~streamrank.GroupStore`) into STORE in bounded chunks of
   whole query groups, ``batch_id = "sha256:<content hash>"`` for the day's
   last chunk and ``"sha256:<hash>#<row>"`` for the ones before: re-running a
   night never appends twice, a killed ingest leaves the store at its last
   committed chunk and the next run appends the rest
   (:mod:`streamrank.pipelines._nightly_ingest`).  The new batches are then re-read
   against their checksums (``--verify``: every batch of the store).
   With ``--learner sgd-bilinear`` STORE is a :class:`~streamrank.TupleStore`
   and a DAYFILE is an ``.npz`` with ``Q``, ``D``, ``tuples`` (rows local to
   the file) or a TupleStore.  ``sgd-pairwise`` uses a GroupStore like
   RankRLS.  Each day is profiled in the same pass and checked against the
   accepted days (:mod:`streamrank.pipelines._nightly_checks`: schema, labels,
   feature drift, the current model's agreement, volume, duplicates); a day
   that fails is quarantined — kept in the store, excluded from training — and
   the night exits 7 after training on the rest (``--force`` / ``--readmit``
   override it, recorded with who and when).
2. **Update** the model incrementally (:mod:`streamrank.pipelines._nightly_learners`):
   RankRLS keeps its statistics (G = XᵀLX, B = XᵀLY and the per-fold
   statistics of k-fold group CV) in the saved model; a night reads only the
   groups the base model has not seen and adds their statistics — the result
   equals a full retrain on all data (to summation order).  Sparse
   KernelRankRLS keeps its basis (drawn on the first night) and the fold
   statistics of Φ = k(X, basis) in ``statistics.npz`` beside the model, the
   same way.  SGD resumes from the saved state (``partial_fit`` on the tuples
   the model has not seen, step counter and cumulative-L1 state intact) and
   equals one run over all tuples.  ``--full`` retrains from scratch.
3. **Select λ** from the fold statistics (squared ranking loss of each fold
   under the model trained without it — no pass over history)
   and **validate** with NDCG@10 and disagreement (SGD-bilinear: tuple
   error).  The promotion decision compares two models that have *not* seen
   the validation data:

   * default — **hold out the newest day**.  Statistics learners: the
     candidate for the decision is trained on everything but the newest day
     (the fold statistics without the day's, which are accumulated apart in
     the same pass; λ chosen from them too), and it and the current model
     (which has not seen the day) are scored on the day.  If it is promoted,
     the version saved is the **refit on all data** (statistics + the
     day's, λ re-chosen from all folds) — cheap, no extra pass; the version
     records both λ and the held-out slice.  SGD learners: the model just
     before the day *is* the current model when the day is the only new
     data, so the day is scored by **progressive validation** instead (each
     batch scored by the model before it learns from it), against the
     current model on the same tuples.  When no honest slice
     exists (first night: nothing outside the day to train on; ``--full`` on
     a store the current model has already seen whole), the final model and
     the current one are both scored on the newest day in-sample, and the
     version says so (``validation.scheme = "in-sample"``);
   * ``--validation STORE`` — a fixed validation store: the final model and
     the current one are scored on it.
   Those newest-day numbers describe tonight's data; for the statistics
   learners they do not decide: after a promotion the candidate without the
   day *is* the current model (same groups, same folds, same λ), so the two
   scored identically every night.  The decision is the **gate**
   (:mod:`streamrank.pipelines._nightly_gate`): the final candidate (trained
   with the new data) and the current model are both scored *out of fold*
   on the newest history groups the current model was trained on (each group
   by the model solved without its fold, from the fold statistics both keep),
   recorded as ``version.json["gate"]``.  A day with inverted labels lowers
   the candidate's score there and is rejected; a day that adds more of the
   right order raises it.  The SGD learners keep no folds: a fixed fraction
   of the queries (``--gate-fraction``, default 0.1) is never trained on,
   and the gate scores both models on the newest held-out queries of that
   history.  (A fixed ``--validation`` store, the first night and
   ``--gate-fraction 0`` decide as described above.)
4. **Promote** the candidate if its NDCG@10 is not below the current model's
   by more than ``--tolerance`` (SGD: tuple error not above it by more): every
   version is written completely to ``DIR/<version>/`` (a model loadable with
   ``sr.load``, plus ``version.json``: metrics, data range, parameters, λ-path
   scores) before the ``DIR/current`` pointer file (holding the version's
   directory name) is replaced with ``os.replace`` — atomic.
   ``sr.load(DIR + "/current")`` loads the promoted model.  ``--keep N``
   prunes all but the newest N versions (never the current one)
   (:mod:`streamrank.pipelines._nightly_versions`).  A rejected incremental
   night's new days are recorded in ``DIR/excluded.json`` and later nights
   train, validate and gate without them; ``--readmit DAY`` takes one back,
   ``--reject DAY`` excludes one by hand (a day the current model was
   trained on: the next night retrains from scratch)
   (:mod:`streamrank.pipelines._nightly_exclusions`).
5. **Report**: ``DIR/reports/<time>.json``, one summary line on stdout and,
   with matplotlib (the ``plot`` extra), ``DIR/metrics.png`` over versions.

One run per models directory: a run holds an exclusive lock on
``DIR/.nightly.lock`` from ingest to report; a second run started meanwhile
exits at once (code 5, "locked by another nightly run"), changing nothing.
A models directory at a URL has no lock: of two overlapping runs the first
to commit wins and the other exits 5 naming that commit, changing nothing;
``--rollback TAG`` promotes again the version a tag (each promoted version's
name) promoted.
The start-up sweep removes only temporary versions of dead processes.
``current`` must name a complete version inside ``DIR``; a damaged pointer
or ``version.json`` is an error naming the file, never a silent retrain.
Every failure is one line on stderr and an exit code (those of the
``streamrank`` command: 3 not found, 4 bad data, 5 cannot write — lock held,
disk full —, 1 unexpected).  Without matplotlib the plot is skipped and the
summary line says so.

Crash safety: a run killed anywhere leaves ``current`` at the previous model
(or at the new one, once the pointer has been switched) and the store at a
committed state.  A version whose pointer switch was lost is found again by
its key (base version, committed store groups, learner, grid) and promoted by
the next run instead of being trained again.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

import streamrank as sr
from streamrank._phases import phase
from streamrank.io import is_url
from streamrank.pipelines._nightly_ingest import (  # noqa: F401
    content_hash,
    ingest,
    ingest_tuples,
    iter_day,
    newest_day,
    read_day,
    read_tuple_day,
    verify_new,
)
from streamrank.pipelines._nightly_learners import (  # noqa: F401
    DEFAULT_BLOCK_ROWS,
    DEFAULT_FOLDS,
    tuple_range,
    update_kernel,
    update_pairwise,
    update_rankrls,
    update_sgd,
    validate,
    validate_tuples,
)
from streamrank.pipelines._nightly_cli import (  # noqa: F401  (build_parser: public; _parse_alphas: distributed)
    LEARNERS,
    _learner_params,
    _parse_alphas,
    _with_progress,
    build_parser,
)
from streamrank.pipelines import _nightly_checks as _checks
from streamrank.pipelines._nightly_gate import line_fraction, scoring_label
from streamrank.pipelines._nightly_validation import _holdout, _validate_night
from streamrank.pipelines._nightly_views import spans_minus
from streamrank.pipelines._nightly_weights import row_column_names, weighting_of
from streamrank.pipelines._nightly_versions import (  # noqa: F401
    KERNEL_STATS,
    LOCK,
    META,
    POINTER,
    ModelsDirError,
    ModelsLocked,
    _clean_partial,
    _now,
    _write_version,
    current_version,
    finish_report,
    list_versions,
    load_version,
    models_lock,
    open_models_dir,
    prune,
    read_version,
    seen_by,
    open_stats,
    stats_location,
    summary_line,
    switch_current,
)

__all__ = ["main", "run_night", "build_parser", "ingest", "ingest_tuples", "read_day", "read_tuple_day", "iter_day",
           "content_hash", "tuple_range", "validate", "switch_current", "current_version", "list_versions",
           "read_version", "prune",
           "summary_line", "POINTER", "META", "KERNEL_STATS", "LOCK", "ModelsDirError", "ModelsLocked"]

def _run_key(base, total, log, learner, alphas, full, folds, excluded=(), fraction=0.0, weighting=None):
    h = hashlib.sha256(json.dumps({
        "base": base, "total": total, "learner": learner, **({"weighting": weighting} if weighting else {}),
        "alphas": [float(a) for a in alphas], "full": bool(full), "folds": folds,
        **({"excluded": list(excluded)} if excluded else {}), **({"gate_fraction": fraction} if fraction else {}),
        "log": log[-1]["checksum"] if log else None,
    }, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _train(learner, store, base_model, base_dir, seen, alphas, folds, max_rows, params, holdout, k, excl=(),
           fraction=0.0):
    """(model, selection, model without the held-out slice — SGD: progressive metrics on it — or None,
    arrays to save beside it); ``excl``: spans of excluded days, ``fraction``: the SGD gate's queries."""
    if learner == "rankrls":
        return (*update_rankrls(store, base_model, seen, alphas, folds=folds, max_rows=max_rows, params=params,
                                holdout=holdout, excluded=excl), None)
    if learner == "sgd-pairwise":
        return (*update_pairwise(store, base_model, seen, params=params, max_rows=max_rows, holdout=holdout,
                                 k=k, excluded=excl, fraction=fraction), None)
    if learner == "sgd-bilinear":
        return (*update_sgd(store, base_model, seen, params=params, holdout=holdout, excluded=excl,
                            fraction=fraction), None)
    return update_kernel(store, base_model, base_dir, seen, alphas, folds=folds, max_rows=max_rows, params=params,
                         holdout=holdout, excluded=excl)


def _checker(models_dir, checks, cur_model, cur, k, tuples, weighting):
    """The data checks of tonight's days (:mod:`streamrank.pipelines._nightly_checks`), or None without them."""
    if checks is None:
        return None
    required = ()
    if weighting and "weights" in weighting:
        required = (weighting["weights"],)
    elif weighting and "ips" in weighting:
        required = ("click", "position")
    meta = read_version(models_dir, cur) if cur else {}
    # its own validation figure on its newest day: only from an incremental night, out of sample (a first night's
    # is in-sample or a lone progressive figure of an untrained start: no reference for tomorrow's day); nor from a
    # weighted line's (its figures use the training weights and, --ips, the clicks; the checks score the labels)
    v = meta.get("validation") or {}
    ok = meta.get("mode") == "incremental" and v.get("scheme") != "in-sample" and not v.get("weighted")
    metrics = meta.get("metrics") if ok else None
    return _checks.DayChecks(models_dir, dict(checks or {}), model=cur_model, model_name=cur, k=k, tuples=tuples,
                             required_columns=required, model_metrics=metrics)


def _learner_switch(models_dir, learner):
    """The current version's learner when ``learner`` differs from it (None otherwise), checked before ingest.

    A group learner after another group learner starts a new model line: the first version is trained
    from scratch on the whole store (no statistics of the other learner are reused) and judged against the
    current model on the held-out newest day.  Between sgd-bilinear (a TupleStore) and a group learner
    (a GroupStore) there is nothing to compare: refused, naming both, before anything is ingested.
    """
    cur = current_version(models_dir)
    if cur is None:
        return None
    prev = read_version(models_dir, cur).get("learner")
    if prev is None or prev == learner:
        return None
    if (prev == "sgd-bilinear") != (learner == "sgd-bilinear"):
        kinds = {True: "(query, item) tuples in a TupleStore", False: "scored groups in a GroupStore"}
        raise ValueError(f"--learner {learner} learns from {kinds[learner == 'sgd-bilinear']}, but the current "
                         f"model {cur} in {models_dir} is {prev}, trained on {kinds[prev == 'sgd-bilinear']}; "
                         "use another --models directory for it (nothing was ingested)")
    return prev


def _gate(learner, store, log, unit, models_dir, cur, cur_model, cur_seen, model, extra, validation, excl,
          fraction, k, tolerance, max_rows, weighted=None):
    """The promotion gate of :mod:`streamrank.pipelines._nightly_gate`, or None where it does not apply.

    Against a current model of the same learner (SGD: the same ``--gate-fraction``), without a fixed
    ``--validation`` store (that store decides then), on the history the current model was trained on
    before tonight's new data (excluded days skipped).  ``store``: the source the line trains on, so a
    weighted line (``weighted``: the label) is gated with its training weights and targets.
    """
    from streamrank.pipelines._nightly_gate import sgd_gate, statistics_gate

    if validation is not None or cur_model is None:
        return None
    meta = read_version(models_dir, cur)
    if meta.get("learner", learner) != learner:
        return None
    day = newest_day(log)
    end = min(int(cur_seen), int(day[0][unit][0]) if day else int(cur_seen))
    if learner.startswith("sgd"):
        if fraction <= 0 or float(meta.get("gate_fraction", 0.0)) != fraction:
            return None
        return sgd_gate(learner, store, end, excl, fraction, model, cur_model, k=k, tolerance=tolerance,
                        max_rows=max_rows, weighted=weighted)
    return statistics_gate(learner, store, end, excl, model, extra, cur_model,
                           open_stats(stats_location(models_dir, cur)) if learner == "sparse-kernel" else None,
                           k=k, tolerance=tolerance, max_rows=max_rows, weighted=weighted)


def run_night(store_path, new_files, models_dir, *, learner="rankrls", alphas=None, full=False, keep=None,
              tolerance=0.005, folds=DEFAULT_FOLDS, validation=None, k=10, max_rows=DEFAULT_BLOCK_ROWS,
              plot=True, out=None, learner_params=None, verify=False, chunk_bytes=None, columns=None,
              storage_options=None, gate_fraction=None, reject=(), readmit=(), weighting=None, checks=(),
              force=False):
    """One night; returns the run report (also written to ``DIR/reports/``).

    ``models_dir`` and ``store_path`` may be URLs of object storage
    (``s3://bucket/nightly``; ``storage_options`` for their filesystem, else
    the client's environment variables): the models directory is then an
    Icechunk repository, a run one commit, each promoted version a tag
    (:mod:`streamrank.pipelines._nightly_remote`); the store is one too, each
    append a commit (:mod:`streamrank.io._icechunk_repo`).

    ``learner_params``: constructor parameters of a new model (e.g. sparse
    kernel ``{"n_basis": 500, "gamma": 0.1, "random_state": 0}``).
    ``verify``: re-read every batch of the store against its checksum before
    training (default: only tonight's new batches).  ``chunk_bytes``: input
    read per append (default 8 MiB).  ``columns``: a Parquet day's column
    names, ``{"label": ..., "qid": ..., "features": [...] | None, "feature_prefix": ...}``
    (default label ``label``, qid ``qid``, every other column a feature).
    ``gate_fraction``: SGD learners, the fraction of queries held out for
    the gate (:mod:`streamrank.pipelines._nightly_gate`; None: the model
    line's, 0.1 for a new line).  ``reject`` / ``readmit``: day files or
    ``sha256:`` batch ids to exclude from / re-admit to training
    (:mod:`streamrank.pipelines._nightly_exclusions`), applied after the ingest.
    ``columns["row_columns"]``: ``{"weight"|"click"|"position": COL}``, a day's
    columns kept as the store's row columns; ``weighting``: ``{"weights": "weight"}``
    or ``{"ips": {"propensity": SPEC, "clip": TAU}}`` (rankrls, sparse-kernel, sgd-pairwise;
    :mod:`streamrank.pipelines._nightly_weights`).
    ``checks``: thresholds of the data checks of each new day
    (:data:`streamrank.pipelines._nightly_checks.DEFAULTS` for those not given; None: no checks); a
    day that fails is quarantined — kept in the store, excluded from training — and listed in
    ``report["quarantined"]`` (``main`` exits 7); ``force``: train on it anyway (recorded).
    """
    out = sys.stdout if out is None else out
    if learner not in LEARNERS:
        raise ValueError(f"--learner must be one of {LEARNERS}, got {learner!r}")
    from streamrank import DEFAULT_ALPHAS

    alphas = np.asarray(DEFAULT_ALPHAS if alphas is None else alphas, dtype=np.float64)
    models_dir = open_models_dir(models_dir, storage_options)   # a local directory or a URL (object storage)
    if isinstance(models_dir, Path):
        if models_dir.exists() and not models_dir.is_dir():
            raise NotADirectoryError(f"--models {models_dir} exists and is not a directory")
        models_dir.mkdir(parents=True, exist_ok=True)
    if hasattr(models_dir, "store_tagger") and is_url(store_path):      # both repositories: tag the store too
        from streamrank.io import tag_branch_tip

        models_dir.store_tagger = lambda tag: tag_branch_tip(str(store_path), storage_options, tag)
    with models_lock(models_dir):  # one run per models directory: ingest, train, promote, prune
        _clean_partial(models_dir)
        return _run_locked(store_path, new_files, models_dir, learner, alphas, full, keep, tolerance, folds,
                           validation, k, max_rows, plot, out, learner_params, verify, chunk_bytes, columns,
                           storage_options, gate_fraction, reject, readmit, weighting, checks, force)


def _run_locked(store_path, new_files, models_dir, learner, alphas, full, keep, tolerance, folds, validation, k,
                max_rows, plot, out, learner_params, verify, chunk_bytes, columns=None, storage_options=None,
                gate_fraction=None, reject=(), readmit=(), weighting=None, checks=(), force=False):
    from streamrank.pipelines import _nightly_exclusions as ex
    from streamrank.pipelines._nightly_propensity import estimate_night, forces_full
    from streamrank.pipelines._nightly_weights import check_same_weighting, refusal, weighted_store

    if weighting and refusal(learner):      # before the ingest: a refusal changes nothing
        raise ValueError(refusal(learner))
    tuples = learner == "sgd-bilinear"
    unit = "tuples" if tuples else "groups"
    started = _now()
    report = {"started": started, "store": str(store_path), "models": str(models_dir), "learner": learner}
    opened = {"storage_options": storage_options} if storage_options and is_url(store_path) else {}
    switched = _learner_switch(models_dir, learner)   # before the ingest: a refusal changes nothing
    if switched:
        report["switched_from"] = switched
    fraction = line_fraction(models_dir, learner, gate_fraction, full or bool(switched))   # before ingest too
    cur = current_version(models_dir)
    cur_model = load_version(models_dir, cur) if cur else None
    checker = _checker(models_dir, checks, cur_model, cur, k, tuples, weighting) if new_files else None

    # 1. ingest (profiling each day in the same pass), then re-read what was written (or, with verify, all)
    report["ingest"] = []
    observe = None if checker is None else checker.profile_for
    with phase("ingest", len(new_files), "day files") as ph:
        for f in new_files:
            if tuples:
                report["ingest"] += ingest_tuples(store_path, [f], storage_options=storage_options, observe=observe)
            else:
                kw = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
                report["ingest"] += ingest(store_path, [f], sparse=False, columns=columns,
                                           storage_options=storage_options, observe=observe, **kw)
            ph.update(1)
    store = (sr.TupleStore if tuples else sr.GroupStore).open(store_path, **opened)
    total, log = (store.n_tuples, store.log) if tuples else (store.n_groups, store.batches)
    report["verify"] = verify_new(store, report["ingest"], full=verify)   # its own phase, counted
    for ref in reject:                 # by hand, after the ingest (a day of tonight may be named)
        report.setdefault("rejected_by_hand", []).append(ex.reject_by_hand(models_dir, log, unit, ref)["day"])
    for ref in readmit:
        day = ex.readmit(models_dir, log, unit, ref)["day"]
        report.setdefault("readmitted", []).append(day)
        report.setdefault("overrides", []).append(dict(_checks.who(), action="readmit", day=day))
        _checks.mark_readmitted(models_dir, day)
    if checker is not None:      # the data checks of tonight's days: a day that fails is excluded
        with phase("data checks of the new days"):
            report["checks"] = checker.run(store, log, unit, report["ingest"], ex.read_exclusions(models_dir),
                                           force=force)
        report["quarantined"] = report["checks"].pop("quarantined")
        forced = [d["day"] for d in report["checks"]["days"] if d["decision"] == "forced"]
        if forced:
            report.setdefault("overrides", []).append(dict(_checks.who(), action="force", days=forced))
    excl_doc = ex.read_exclusions(models_dir)
    excl = ex.excluded_spans(excl_doc, unit)

    # 2. update
    cur_seen = seen_by(models_dir, cur, unit) if cur else 0
    base = None if (full or cur is None or switched) else cur   # another learner: a new line, from scratch
    if base is not None:   # the excluded days inside the current model's data changed: it cannot unlearn one
        was = sorted(read_version(models_dir, cur).get("excluded", []))
        now = ex.excluded_days(excl_doc, unit, below=cur_seen)
        if was != now:
            report["retrain"] = f"the excluded days inside the current model's data changed ({was} -> {now})"
            base = None
    if base is not None and forces_full(weighting):
        report["retrain"] = forces_full(weighting)
        base = None
    if base is not None:
        check_same_weighting(read_version(models_dir, base), weighting, base)
    seen = 0 if base is None else cur_seen
    if seen > total:
        raise ValueError(f"the current model saw {seen} {unit} but the store has {total}: "
                         "wrong --store for these --models?")
    key = _run_key(base, total, log, learner, alphas, full, folds, ex.excluded_days(excl_doc, unit), fraction,
                   weighting)
    report["key"] = key
    versions = list_versions(models_dir)
    metas = {v: read_version(models_dir, v) for v in versions}
    reuse = next((v for v in versions if metas[v].get("key") == key), None)
    if (base is not None or cur is None) and not spans_minus(seen, total, excl):   # nothing new, or all excluded
        report.update(status="up-to-date", version=cur, promoted=False, current=cur)
        return finish_report(report, models_dir, keep, plot, out)
    if reuse is not None:  # a previous run trained it but died before promoting
        name, meta = reuse, metas[reuse]
        report["reused"] = True
    else:
        base_model = load_version(models_dir, base) if base is not None else None
        h0 = _holdout(log, unit, total, cur_seen if cur else 0, validation)
        p_est = p_note = None
        if forces_full(weighting):
            with phase("propensity (estimated from the accepted days)"):
                p_est, p_note = estimate_night(store, weighting, read_version(models_dir, cur) if cur else None,
                                               excl, max_rows)
        train_on = weighted_store(store, weighting, storage_options, p_est)    # the store, or its weighted view
        model, sel, held, extra = _train(learner, train_on, base_model,
                                         stats_location(models_dir, base) if base else None,
                                         seen, alphas, folds, max_rows, learner_params, h0, k, excl, fraction)
        if not tuples and store.feature_names is not None:   # the store's names travel with the model
            model.set_feature_names(store.n_features, store.feature_names)
        if tuples:
            data = {"tuples": [0, total], "new_tuples": sel["new_tuples"]}
        else:
            data = {"rows": [0, store.n_rows], "groups": [0, total], "new_rows": sel["new_rows"],
                    "new_groups": sel["new_groups"]}
        # 3. validate: the promotion decision compares models that have not seen the slice; a weighted
        # line is validated and gated on what it trains on: the same row weights (and, --ips, targets)
        scored = scoring_label(weighting, train_on)
        vdesc, metrics, cur_metrics, mk, higher = _validate_night(   # its own phase, counting the rows scored
            learner, train_on, log, unit, total, model, held, cur_model, cur_seen, h0, validation, k, max_rows, excl,
            scored, lambda src: weighted_store(src, weighting, storage_options, p_est))
        data.update(batches=len(log), last_batch=log[-1]["batch_id"])
        if excl:
            data["excluded"] = [list(e) for e in excl]
        with phase("gate (candidate and current on history neither was trained on)"):
            gate_rec = _gate(learner, train_on, log, unit, models_dir, cur, cur_model, cur_seen, model, extra,
                             validation, excl, fraction, k, tolerance, max_rows, scored)
        if gate_rec is not None:     # the decision (step 4): out of fold on the history both models trust
            promote = gate_rec["promote"]
        elif cur_metrics is None:
            promote = True
        elif higher:
            promote = not (metrics[mk] < cur_metrics[mk] - tolerance)
        else:
            promote = not (metrics[mk] > cur_metrics[mk] + tolerance)
        seq = 1 + max((int(m.get("seq", 0)) for m in metas.values()), default=0)
        name = f"v{seq:04d}"
        meta = {
            "version": name, "seq": seq, "key": key, "created": _now(), "learner": learner,
            "class": type(model).__name__, "params": sr.persistence._jsonable(model.get_params()),
            "base": base, "mode": "full" if base is None else "incremental", "data": data,
            "selection": sel, "validation": vdesc, "metrics": metrics, "current_metrics": cur_metrics,
            "promotion_metric": mk, "tolerance": tolerance, "promote": bool(promote), "previous": cur,
            "excluded": ex.excluded_days(excl_doc, unit),
        }
        if learner.startswith("sgd"):
            meta["gate_fraction"] = fraction
        if gate_rec is not None:
            meta["gate"] = gate_rec
        if weighting:
            meta["weighting"] = weighting
        if p_note is not None:
            meta["propensity_estimate"] = p_note
        if switched:
            meta["switched_from"] = switched
        with phase("write the version"):
            _write_version(models_dir, name, model, meta, extra)
    # 4. promote; a rejected incremental night's new days are excluded from later nights
    if meta["promote"]:
        switch_current(models_dir, name)
    elif meta["mode"] == "incremental":
        days = ex.night_days(log, unit, seen_by(models_dir, meta["base"], unit), total)
        report["excluded"] = [r["day"] for r in ex.exclude_days(
            models_dir, days, reason=f"rejected by the gate of {name}", version=name,
            scores=meta.get("gate") or {"candidate": meta["metrics"], "current": meta["current_metrics"]})]
    report.update(status="promoted" if meta["promote"] else "rejected", version=name,
                  promoted=bool(meta["promote"]), current=current_version(models_dir),
                  alpha=meta["selection"].get("alpha"), metrics=meta["metrics"],
                  current_metrics=meta["current_metrics"], data=meta["data"], mode=meta["mode"],
                  validation=meta["validation"], gate=meta.get("gate"))
    return finish_report(report, models_dir, keep, plot, out)


# ------------------------------------------------------------------- CLI
def rollback(models_dir, tag, storage_options=None, out=None) -> int:
    """``--rollback TAG``: promote again the version the tag promoted (a models directory at a URL)."""
    out = sys.stdout if out is None else out
    d = open_models_dir(models_dir, storage_options)
    if not hasattr(d, "rollback"):
        raise ValueError(f"--rollback needs a models directory at a URL (an Icechunk repository); {models_dir} is "
                         "local: promote a version by hand with its directory name")
    version = d.rollback(tag)
    out.write(f"nightly: rolled back to tag {tag}: current={version}\n")
    return 0


def main(argv=None) -> int:
    """Run one night; every failure is one line on stderr and an exit code (those of ``streamrank``:
    3 not found, 4 bad data, 5 cannot write — lock held, disk full —, 1 unexpected; ``--verbose``
    adds the traceback)."""
    from streamrank.pipelines._errors import run_main

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.rollback:
        return run_main("nightly", args.verbose, lambda: rollback(args.models, args.rollback,
                                                                  storage_options=args.storage_options))
    if not (args.new or args.reject or args.readmit):
        parser.error("--new DAYFILE... is required (unless --reject / --readmit / --rollback is given)")
    weighting = weighting_of(args, parser.error)
    checks = _checks.check_options_of(args, parser.error)
    done = {}

    def night():
        done["report"] = run_night(
            args.store, args.new, args.models, learner=args.learner, alphas=args.alphas, full=args.full,
            keep=args.keep, tolerance=args.tolerance, folds=args.folds, validation=args.validation,
            max_rows=args.max_rows, plot=not args.no_plot, verify=args.verify,
            chunk_bytes=max(1, int(args.chunk_mb * 2**20)), learner_params=_learner_params(args),
            columns={"label": args.label, "qid": args.qid, "feature_prefix": args.features_from_prefix,
                     "row_columns": row_column_names(args)},
            storage_options=args.storage_options, gate_fraction=args.gate_fraction, reject=args.reject,
            readmit=args.readmit, weighting=weighting, checks=checks, force=args.force)

    code = run_main("streamrank nightly", args.verbose, lambda: _with_progress(args, night),
                    interrupted="interrupted; the store keeps its last commit and current its last promoted version")
    quarantined = (done.get("report") or {}).get("quarantined")
    if code == 0 and quarantined:    # the night ran; one line names every failed check of every quarantined day
        from streamrank.cli import EXIT_QUARANTINED

        days = " | ".join(f"{Path(q['file']).name} ({q['day'][:19]}…): {q['line']}" for q in quarantined)
        print(f"streamrank nightly: quarantined {days}", file=sys.stderr, flush=True)
        return EXIT_QUARANTINED
    return code


if __name__ == "__main__":
    sys.exit(main())
