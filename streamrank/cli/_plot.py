"""``streamrank plot``: λ path, CG convergence, SGD learning curve or nightly history as a PNG."""
from __future__ import annotations

from pathlib import Path

from ._common import EXIT_OK, Unsupported, _say
from ._stores import _kind_of, _load_model, _model_meta


def cmd_plot(args) -> int:
    from .. import plot as P

    src = Path(args.model)
    if not src.exists():
        raise FileNotFoundError(f"no model or model directory at {src}")
    kind = args.kind
    nightly = src.is_dir() and ((src / "reports").is_dir() or (src / "current").is_file())
    meta = None
    if not nightly:
        if _kind_of(src) != "model":
            raise ValueError(f"{src} is a store, not a model; plot takes --model M (or a nightly model directory)")
        meta = _model_meta(src)
    cli = (meta or {}).get("cli") or {}
    if kind == "auto":
        if nightly:
            kind = "nightly"
        elif cli.get("cv"):
            kind = "path"
        elif meta.get("class") in ("SparseSGDRanker", "PairwiseSGDRanker"):
            kind = "learning-curve"
        elif cli.get("curve"):
            kind = "curve"
        else:
            raise ValueError(f"{src} holds nothing to plot: {_record_hint(cli.get('learner'), meta.get('class'))}")
    size = dict(figsize=(args.width / args.dpi, args.height / args.dpi), dpi=args.dpi)
    if kind == "nightly":
        if not nightly:
            raise ValueError(f"{src} is not a nightly model directory (no reports/ or current)")
        P.nightly_history(src, args.out, **size)
    elif kind == "path":
        if not cli.get("cv"):
            hint = _record_hint(cli.get("learner"), meta.get("class"))
            raise ValueError(f"{src} has no cross-validation record; {hint}")
        P.regularization_path(cli["cv"], args.out, **size)
    elif kind == "curve":
        if not cli.get("curve"):
            raise ValueError(f"{src} has no convergence record (only --learner cg records one); "
                             f"{_record_hint(cli.get('learner'), meta.get('class'))}")
        P.convergence(cli["curve"], args.out, **size)
    else:
        model = _load_model(src)
        try:
            from ..plot import learning_curve
        except ImportError:
            raise Unsupported("sr.plot.learning_curve is not available in this build") from None
        if not getattr(model, "history_", None):
            raise ValueError(f"{src} has no training history; {_history_hint(model)}")
        _call_sized(learning_curve, model, args.out, size)
    _say(args, f"wrote {args.out} ({kind})")
    return EXIT_OK


def _call_sized(fn, model, out, size):
    import inspect

    params = inspect.signature(fn).parameters
    kw = {k: v for k, v in size.items() if k in params}
    fn(model, out, **kw)


def _history_hint(model) -> str:
    """How to get a learning curve for this model's learner: only options that learner takes."""
    return _record_hint(None, type(model).__name__)


def _record_hint(learner, cls) -> str:
    """What this model's learner can record for a plot, naming only options it takes (``_options``)."""
    if learner == "cg":
        return "refit with --learner cg: it records its convergence curve"
    if learner in ("rankrls", "kernel"):
        return f"refit with --learner {learner} --alphas GRID --cv K to record a λ path"
    if learner == "sparse-kernel":
        return "refit with --learner sparse-kernel --alphas GRID --cv query to record a λ path"
    if learner == "sgd-bilinear" or cls == "SparseSGDRanker":
        return "refit with --learner sgd-bilinear --checkpoint-every N for a learning curve"
    if learner == "sgd-pairwise" or cls == "PairwiseSGDRanker":
        return "an sgd-pairwise model records no curve or λ path (plot a nightly model directory instead)"
    return ("models fitted by 'streamrank fit' with --alphas GRID --cv K (rankrls, kernel, sparse-kernel) have a "
            "λ path, cg a convergence curve, sgd-bilinear a learning curve")
