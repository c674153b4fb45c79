"""``streamrank fit`` and ``streamrank cv``: build the learner, fit or cross-validate it, save the model."""
from __future__ import annotations

import json
import os
import time

from ._atomic import _check_model_out, _save_model
from ._common import EXIT_OK, Unsupported, UsageError, _progress, _say
from ._fit_weights import check_weight_args, weighted_view
from ._stores import _jsonable, _open_store


def _estimator(args):
    import streamrank as sr

    L = args.learner
    alpha = args.alpha
    normalize = getattr(args, "normalize", None)
    if L in ("rankrls", "cg"):
        return sr.RankRLS(alpha=alpha, solver="primal" if L == "rankrls" else "cg",
                          group_weight=args.group_weight, ties=args.ties, tol=args.tol, max_iter=args.max_iter,
                          normalize=normalize)
    if L in ("kernel", "sparse-kernel"):
        return sr.KernelRankRLS(kernel=args.kernel, gamma=args.gamma, degree=args.degree, coef0=args.coef0,
                                alpha=alpha, n_basis=args.n_basis if L == "sparse-kernel" else None,
                                group_weight=args.group_weight, ties=args.ties, random_state=args.seed,
                                normalize=normalize)
    if L == "sgd-bilinear":
        kw = dict(eta0=args.eta0, l1=args.l1, shrink_every=args.shrink_every, init=args.init,
                  auto_refit=not args.no_refit, random_state=args.seed, normalize=normalize,
                  max_memory_bytes=(None if getattr(args, "max_memory_mb", None) is None
                                    else int(args.max_memory_mb * 2**20)))
        return sr.SparseSGDRanker(**{k: v for k, v in kw.items() if v is not None})
    try:
        cls = sr.PairwiseSGDRanker
    except (AttributeError, ImportError, ModuleNotFoundError):
        raise Unsupported("--learner sgd-pairwise is not available in this streamrank build "
                          "(streamrank.sgd.pairwise is missing)") from None
    kw = dict(eta0=args.eta0, l1=args.l1, shrink_every=args.shrink_every, random_state=args.seed,
              normalize=normalize)
    names = cls._get_param_names()
    if "l2" in names:
        kw["l2"] = args.l2
    if "loss" in names:
        kw["loss"] = args.loss
    return cls(**{k: v for k, v in kw.items() if k in names and v is not None})


def _cv_record(res, learner) -> dict:
    return {"alphas": [float(a) for a in res.alphas], "scores": [float(s) for s in res.scores],
            "best_alpha": float(res.best_alpha), "best_index": int(res.best_index), "scoring": res.scoring,
            "folds": res.folds, "greater_is_better": bool(res.greater_is_better), "learner": learner}


def _run_cv(model, source, args, folds, check_only=False):
    if args.learner in ("sgd-bilinear", "sgd-pairwise"):
        raise Unsupported(f"cross-validation over --alphas is done from statistics and needs --learner "
                          f"rankrls, cg, kernel or sparse-kernel; {args.learner} fits one --alpha "
                          f"(for {args.learner}, run fit once per value)")
    if args.learner == "cg" and folds == "query":
        raise Unsupported("leave-one-query-out cross-validation needs --learner rankrls (its hold-out formula "
                          "needs the exact solve); cg selects λ by k-fold: --cv K")
    if check_only:
        return None
    res = model.cross_validate(source, alphas=args.alphas, folds=folds, scoring=args.scoring)
    model.set_params(alpha=res.best_alpha)    # the saved model is the one refitted at the chosen alpha
    return res


def _preflight(args, cv_folds):
    """Refuse what cannot work before any pass over the data."""
    from ._options import refuse_inapplicable

    refuse_inapplicable(args, cross_validates=cv_folds is not None)
    check_weight_args(args)
    if cv_folds is not None:
        _run_cv(None, None, args, cv_folds, check_only=True)
        from ..rankrls.selection import _parse_scoring

        try:
            _parse_scoring(args.scoring)
        except ValueError as exc:
            raise UsageError(f"--scoring: {exc}") from None
    if getattr(args, "model", None):
        from ._stores import _kind_of

        if "://" not in str(args.store):
            _kind_of(args.store)        # a missing local store is named before an existing model is
        _check_model_out(args.model, overwrite=getattr(args, "overwrite", False))


def dual_memory_bytes(m: int, n_features: int, n_outputs: int = 1, n_alphas: int = 0) -> int:
    """Peak memory of the exact dual KernelRankRLS on m rows, in bytes.

    ``8·m²`` for the kernel matrix K (turned into B K in place), ``8·m²`` for
    the eigenvectors U of ``BKB = UΛUᵀ`` and ``16·m²`` for LAPACK's
    divide-and-conquer workspace (dsyevd: 1 + 6m + 2m² doubles) — 32·m² in
    all — plus the rows (8·m·n) and, with cross-validation, the held-out
    predictions of every λ (8·a·m·v).
    """
    m = int(m)
    return 32 * m * m + 8 * m * int(n_features) + 8 * int(n_alphas) * m * max(int(n_outputs), 1)


def _physical_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _check_dual_memory(args, store, cv_folds) -> None:
    """Say what the exact kernel fit will take before it starts; refuse it above the bound (exit 6).

    The bound is ``--max-memory-mb`` or half the physical memory.  Above it the
    error suggests the sparse kernel, whose memory is O(m·r) for r basis rows.
    """
    from ._stores import _human

    m = store.n_rows
    n_alphas = len(args.alphas) if cv_folds is not None and args.alphas is not None else 0
    need = dual_memory_bytes(m, store.n_features, store.n_outputs, n_alphas)
    mb = getattr(args, "max_memory_mb", None)
    phys = _physical_memory()
    bound = int(mb * 2**20) if mb is not None else (phys // 2 if phys else None)
    r = min(1000, max(m // 10, 1))
    sparse = f"--learner sparse-kernel --n-basis {r} (about {_human(8 * m * r * 2)})"
    if bound is not None and need > bound:
        how = f"--max-memory-mb {mb:g}" if mb is not None else "half the physical memory"
        raise Unsupported(f"the exact kernel fit of {m:,} rows needs about {_human(need)} (32·m² bytes: the kernel "
                          f"matrix, its eigenvectors and LAPACK's workspace), more than the bound {_human(bound)} "
                          f"({how}); use {sparse}")
    from ._common import log

    log.info("exact kernel fit of %s rows: about %s of memory (32·m² bytes, grows with the square of the rows)%s",
             f"{m:,}", _human(need), f"; for less, {sparse}" if need >= 2**30 else "")


def _fit_model(args, *, cv_folds=None):
    """Fit (and cross-validate) per ``args``; returns (model, record dict)."""
    from .._phases import reporting
    from ._progress import PhaseReporter, ProgressSource, ProgressTuples

    _preflight(args, cv_folds)
    model = _estimator(args)
    record: dict = {"learner": args.learner,
                    "store": args.store if "://" in str(args.store) else os.path.abspath(args.store)}
    t0 = time.perf_counter()
    if args.learner == "sgd-bilinear":
        store = _open_store(args.store, want="tuple")
        steps = args.steps or store.n_tuples
        val = None
        if args.validation:
            vs = _open_store(args.validation, want="tuple")
            batch = vs.take()
            val = (batch.Q, batch.D_pos, batch.D_neg)
        every = args.checkpoint_every or max(1, steps // 20)
        total = steps * (2 if model.auto_refit else 1)
        with _progress(args, total, unit="tuples", desc="fit sgd-bilinear") as bar:
            model.fit(ProgressTuples(store, bar), n_steps=steps, validation=val, checkpoint_every=every,
                      batch_size=args.batch_size)
        record.update(tuples=store.n_tuples, steps=steps)
    else:
        store = _open_store(args.store, want="group")
        check_weight_args(args, store)
        if args.learner == "kernel":
            _check_dual_memory(args, store, cv_folds)
        with _progress(args, store.n_rows, desc=f"fit {args.learner}") as bar, reporting(PhaseReporter(bar)):
            source = weighted_view(args, ProgressSource(store, bar), record, store=store)
            if cv_folds is not None:
                res = _run_cv(model, source, args, cv_folds)
                record["cv"] = _cv_record(res, args.learner)
                if args.learner in ("kernel", "sparse-kernel"):
                    pass  # cross_validate refits with the best alpha
            elif args.learner in ("kernel", "sparse-kernel"):
                model.fit(source, max_rows=args.max_rows) if args.learner == "sparse-kernel" else model.fit(source)
            elif args.learner == "sgd-pairwise":
                model.fit(source, n_pairs=args.n_pairs, max_rows=args.max_rows, batch_size=args.batch_size)
                record["pairs"] = int(model.t_)
            else:
                model.fit(source, max_rows=args.max_rows)
        record.update(rows=store.n_rows, groups=store.n_groups, features=store.n_features)
        if getattr(model, "cg_info_", None):
            info = model.cg_info_
            record["curve"] = {"x": list(range(1, len(info["residuals"]) + 1)), "y": info["residuals"],
                               "xlabel": "CG iteration", "ylabel": "max relative residual", "log_y": True}
    record["seconds"] = round(time.perf_counter() - t0, 3)
    record["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record["params"] = model.get_params()
    return model, record


def cmd_fit(args) -> int:
    from ._options import was_given

    if args.alphas is not None and was_given(args, "alpha"):
        raise UsageError("give either --alpha A or --alphas GRID (with --cv), not both")
    folds = args.cv if args.alphas is not None else None
    if args.alphas is None and args.cv_given:
        raise UsageError("--cv needs --alphas GRID (the values to choose from)")
    model, record = _fit_model(args, cv_folds=folds)
    record["command"] = "fit"
    _save_model(model, args.model, record)
    alpha = getattr(model, "alpha", None)
    extra = ""
    if "cv" in record:
        cv = record["cv"]
        how = "leave-one-query-out" if cv["folds"] == "query" else f"{cv['folds']}-fold"
        extra = f"; chose alpha={cv['best_alpha']:.6g} by {how} CV ({cv['scoring']} " \
                f"{cv['scores'][cv['best_index']]:.6g})"
    elif alpha is not None:
        extra = f"; alpha={alpha:.6g}"
    n = f"{record['rows']:,} rows" if "rows" in record else f"{record.get('steps', 0):,} tuple steps"
    _say(args, f"fitted {type(model).__name__} ({args.learner}) on {n} in {record['seconds']:.2f} s"
               f"{extra}; saved to {args.model}")
    return EXIT_OK


# ----------------------------------------------------------------------- cv
def cmd_cv(args) -> int:
    args.alpha = float(args.alphas[0])
    model, record = _fit_model(args, cv_folds=args.folds)
    cv = record["cv"]
    arrow = "higher" if cv["greater_is_better"] else "lower"
    how = "leave-one-query-out" if cv["folds"] == "query" else f"{cv['folds']}-fold cross-validation by query"
    _say(args, f"# {args.learner}: {how}, {cv['scoring']} ({arrow} is better)")
    _say(args, f"{'alpha':>14}  {cv['scoring']:>14}")
    for i, (a, s) in enumerate(zip(cv["alphas"], cv["scores"])):
        mark = "  <- best" if i == cv["best_index"] else ""
        _say(args, f"{a:>14.6g}  {s:>14.6g}{mark}")
    _say(args, f"best alpha = {cv['best_alpha']:.6g}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(_jsonable(cv), fh, indent=1)
    if args.model:
        record["command"] = "cv"
        _save_model(model, args.model, record)
        _say(args, f"saved the model refitted with alpha={cv['best_alpha']:.6g} to {args.model}")
    if args.plot:
        from .. import plot

        plot.regularization_path(cv, args.plot)
        _say(args, f"wrote {args.plot}")
    return EXIT_OK
