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
            raise ValueError(f"{src} holds nothing to plot: fit with --alphas GRID --cv K to record a λ path, "
                             "or use an sgd model (learning curve) or a nightly model directory")
    size = dict(figsize=(args.width / args.dpi, args.height / args.dpi), dpi=args.dpi)
    if kind == "nightly":
        if not nightly:
            raise ValueError(f"{src} is not a nightly model directory (no reports/ or current)")
        P.nightly_history(src, args.out, **size)
    elif kind == "path":
        if not cli.get("cv"):
            raise ValueError(f"{src} has no cross-validation record; fit it with --alphas GRID --cv K")
        P.regularization_path(cli["cv"], args.out, **size)
    elif kind == "curve":
        if not cli.get("curve"):
            raise ValueError(f"{src} has no convergence record (only --learner cg records one)")
        P.convergence(cli["curve"], args.out, **size)
    else:
        model = _load_model(src)
        try:
            from ..plot import learning_curve
        except ImportError:
            raise Unsupported("sr.plot.learning_curve is not available in this build") from None
        if not getattr(model, "history_", None):
            raise ValueError(f"{src} has no training history; fit with --checkpoint-every N")
        _call_sized(learning_curve, model, args.out, size)
    _say(args, f"wrote {args.out} ({kind})")
    return EXIT_OK


def _call_sized(fn, model, out, size):
    import inspect

    params = inspect.signature(fn).parameters
    kw = {k: v for k, v in size.items() if k in params}
    fn(model, out, **kw)
