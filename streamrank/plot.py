"""Plots (the ``plot`` extra: matplotlib, imported lazily with the non-interactive Agg backend).

* :func:`learning_curve` -- the two panels of Figure 1 of Chen et al. 2010
  for an SGD ranker: tuple error on the validation tuples and density of W
  against the number of iterations, from ``model.history_``;
* :func:`regularization_path` -- cross-validation score against λ (log
  axis), the chosen λ marked;
* :func:`nightly_history` -- the validation metrics of every nightly run
  (:mod:`streamrank.pipelines.nightly` reports in ``DIR/reports/*.json``), promoted
  and rejected candidates told apart, with the chosen λ below;
* :func:`convergence` -- a generic convergence curve (e.g. CG residuals per pass).

Every function returns the matplotlib Figure and, when ``path`` is given,
writes a PNG of ``figsize * dpi`` pixels (written to a temporary file and
renamed, so a reader never sees half a PNG).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import json
import os
import uuid
from pathlib import Path

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ._typing import PathLike
    from .base import BaseRanker

__all__ = ["learning_curve", "regularization_path", "nightly_history", "nightly_checks_history", "convergence"]


def _plt():
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - plot extra missing
        raise ImportError("plotting needs matplotlib: pip install 'streamrank[plot]'") from None
    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path, dpi):
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        fig.savefig(tmp, format="png", dpi=dpi)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _cv_fields(cv):
    """(alphas, scores, best_alpha, scoring, greater_is_better, folds) of a CVResult or its dict."""
    get = (lambda k, d=None: cv.get(k, d)) if isinstance(cv, dict) else (lambda k, d=None: getattr(cv, k, d))
    alphas = np.asarray(get("alphas"), dtype=np.float64)
    scores = np.asarray([np.nan if s is None else s for s in get("scores")], dtype=np.float64)
    if alphas.ndim != 1 or alphas.shape != scores.shape or alphas.size == 0:
        raise ValueError(f"cv must hold equally long 1-D alphas and scores; got {alphas.shape} and {scores.shape}")
    greater = bool(get("greater_is_better", False))
    best = get("best_alpha")
    if best is None:
        valid = np.where(np.isnan(scores), -np.inf if greater else np.inf, scores)
        best = alphas[int(np.argmax(valid) if greater else np.argmin(valid))]
    return alphas, scores, float(best), str(get("scoring", "score")), greater, get("folds")


def regularization_path(cv: Any, path: PathLike | None = None, *, ax: Axes | None = None,
                        figsize: tuple[float, float] = (6.4, 4.0), dpi: int = 100, title: str | None = None) -> Figure:
    """Cross-validation score against λ with the chosen λ marked.

    Parameters
    ----------
    cv : :class:`~streamrank.rankrls.selection.CVResult` or dict
        From ``model.cross_validate(...)`` (RankRLS, KernelRankRLS) or the
        ``cv`` record the command line stores with a model fitted with
        ``--alphas GRID --cv K``: ``alphas``, ``scores``, ``best_alpha``,
        ``scoring``, ``greater_is_better``, ``folds``.
    path : str or Path, optional
        Write a PNG there (``figsize * dpi`` pixels).
    ax : matplotlib Axes, optional
        Draw into it instead of a new figure.

    Returns the Figure.

    Example
    -------
    >>> import numpy as np, streamrank as sr
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 5)); qid = np.repeat(np.arange(20), 10)
    >>> y = X @ rng.normal(size=5) + rng.normal(size=200)
    >>> m = sr.RankRLS(); res = m.cross_validate(sr.as_source(X, y, qid), alphas=2.0 ** np.arange(-5, 6))
    >>> fig = sr.plot.regularization_path(res)
    >>> fig.axes[0].get_xscale()
    'log'
    """
    plt = _plt()
    alphas, scores, best, scoring, greater, folds = _cv_fields(cv)
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=figsize, dpi=dpi)
    else:
        fig = ax.figure
    order = np.argsort(alphas)
    ax.plot(alphas[order], scores[order], marker="o", ms=3.5, lw=1.5, color="C0", label=f"CV {scoring}")
    bi = int(np.argmin(np.abs(np.log(alphas) - np.log(best))))
    ax.axvline(best, color="C3", ls="--", lw=1)
    ax.plot([alphas[bi]], [scores[bi]], marker="*", ms=14, color="C3", ls="none",
            label=f"chosen λ = {best:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("λ (alpha)")
    fold_txt = "leave-one-query-out" if folds == "query" else (f"{folds}-fold by query" if folds else "CV")
    ax.set_ylabel(f"{scoring} ({'higher' if greater else 'lower'} is better)")
    ax.set_title(title or f"regularization path ({fold_txt})")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    if own:
        fig.tight_layout()
        _save(fig, path, dpi)
    return fig


def _read_reports(source):
    """Nightly run reports (dicts) from a model directory, a reports directory, files or dicts."""
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if not p.exists():
            raise FileNotFoundError(f"no nightly model directory at {p}")
        rdir = p / "reports" if (p / "reports").is_dir() else p
        files = sorted(f for f in rdir.glob("*.json") if not f.name.startswith("."))
        if not files:
            raise ValueError(f"{rdir} holds no nightly reports (*.json); "
                             "run streamrank nightly first")
        reports = []
        for f in files:
            try:
                reports.append(json.loads(f.read_text()))
            except ValueError as exc:
                raise ValueError(f"{f}: not a JSON report ({exc})") from None
        return reports
    return [dict(r) for r in source]


def nightly_history(source: Any, path: PathLike | None = None, *, metrics: Sequence[str] | None = None,
                    figsize: tuple[float, float] = (8.0, 5.0), dpi: int = 100, title: str | None = None) -> Figure:
    """Validation metrics and chosen λ of every nightly run.

    Parameters
    ----------
    source : path of a nightly model directory (``--models DIR`` of
        :mod:`streamrank.pipelines.nightly`; its ``reports/*.json`` are read), a
        reports directory, or a list of report dicts.
    path : write a PNG there (``figsize * dpi`` pixels).
    metrics : names to draw (default: every metric in the reports, e.g.
        ``ndcg@10`` and ``disagreement``).

    Top panel: the candidate's metrics per run on the night's validation slice
    (the newest day held out, or ``--validation``; filled marker: promoted,
    hollow: rejected; a cross: scored in-sample, as on a first night) and the
    current model's on the same slice (dashed); a weighted line's names say
    how they were scored (e.g. ``ndcg@10 (ips-weighted)``).  These are not the promotion
    gate's figures (the summary line's "gate ..." and ``version.json["gate"]``).
    Bottom panel: the λ chosen each night (log scale).  Runs with nothing new
    ("up-to-date") are shown as grey ticks at the bottom.
    """
    plt = _plt()
    reports = sorted(_read_reports(source), key=lambda r: r.get("started", ""))
    if not reports:
        raise ValueError("no nightly reports to plot")
    x = np.arange(1, len(reports) + 1)
    names = metrics or sorted({k for r in reports for k in (r.get("metrics") or {})})
    # a weighted line's figures use its training weights (and, with --ips, clicks as targets): say so
    kinds = sorted({str(w) for r in reports if (w := (r.get("validation") or {}).get("weighted"))})
    scored = f" ({', '.join(kinds)})" if kinds else ""
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=figsize, dpi=dpi, sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1.3]})
    for i, name in enumerate(names):
        color = f"C{i}"
        vals = np.array([(r.get("metrics") or {}).get(name, np.nan) for r in reports], dtype=float)
        cur = np.array([((r.get("current_metrics") or {}) or {}).get(name, np.nan) for r in reports], dtype=float)
        ax.plot(x, vals, color=color, lw=1.2, label=name + scored)
        prom = np.array([bool(r.get("promoted")) for r in reports])
        ok = ~np.isnan(vals)
        ax.plot(x[prom & ok], vals[prom & ok], "o", color=color, ms=6)
        ax.plot(x[~prom & ok], vals[~prom & ok], "o", mfc="white", mec=color, ms=6)
        insample = np.array([(r.get("validation") or {}).get("scheme") == "in-sample" for r in reports])
        if np.any(insample & ok):
            ax.plot(x[insample & ok], vals[insample & ok], "x", color="k", ms=8,
                    label="in-sample (no held-out day)" if i == 0 else None)
        if np.any(~np.isnan(cur)):
            ax.plot(x, cur, "--", color=color, lw=1, alpha=0.7, label=f"{name}{scored} (current model)")
    idle = np.array([r.get("status") == "up-to-date" for r in reports])
    ax.set_ylabel("newest-day validation metric")
    ax.set_title(title or "nightly runs on the newest day (filled: promoted, hollow: rejected; not the gate)")
    ax.grid(True, alpha=0.3)
    if names:
        ax.legend(loc="best", fontsize="small")
    alphas = np.array([np.nan if r.get("alpha") is None else r["alpha"] for r in reports], dtype=float)
    ok = ~np.isnan(alphas) & (alphas > 0)
    if ok.any():
        ax2.plot(x[ok], alphas[ok], "s-", color="C7", ms=4, lw=1)
        ax2.set_yscale("log")
    for xi in x[idle]:
        ax2.axvline(xi, color="0.8", lw=3, zorder=0)
    ax2.set_ylabel("chosen λ")
    ax2.set_xlabel("run")
    labels = [("up to date" if r.get("status") == "up-to-date" else str(r.get("version") or r.get("started", "")[:10]))
              for r in reports]
    ax2.set_xticks(x)
    ax2.set_xticklabels(labels, rotation=45 if len(x) > 6 else 0, fontsize="small")
    ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    _save(fig, path, dpi)
    return fig


def convergence(curve: dict, path: PathLike | None = None, *, figsize: tuple[float, float] = (6.4, 4.0), dpi: int = 100,
                title: str | None = None) -> Figure:
    """A generic convergence curve ``{"x", "y", "xlabel", "ylabel", "log_y"}`` (e.g. CG residuals)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=figsize, dpi=dpi)
    ax.plot(np.asarray(curve["x"], dtype=float), np.asarray(curve["y"], dtype=float), lw=1.5, marker=".")
    if curve.get("log_y"):
        ax.set_yscale("log")
    ax.set_xlabel(curve.get("xlabel", "iteration"))
    ax.set_ylabel(curve.get("ylabel", ""))
    ax.set_title(title or "convergence")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    _save(fig, path, dpi)
    return fig


def learning_curve(model: BaseRanker, path: PathLike | None = None, *, figsize: tuple[float, float] = (10.0, 4.0),
                   dpi: int = 100, title: str | None = None) -> Figure:
    """Test (validation) tuple error and density of W vs iterations; PNG at ``path``.

    ``model.history_`` is a list of checkpoints (``fit(..., validation=...,
    checkpoint_every=N)``) with ``step``, ``density`` and, when a validation
    set was given, ``tuple_error``; the refit phase (``phase == "refit"``)
    is drawn as its own line.  Returns the matplotlib Figure.
    """
    history = list(getattr(model, "history_", None) or [])
    if not history:
        raise ValueError(f"{type(model).__name__} has no history_; fit with checkpoint_every=N "
                         "(and validation=(Q, D_pos, D_neg) for the error panel)")
    plt = _plt()
    fig, (ax_err, ax_den) = plt.subplots(1, 2, figsize=figsize)
    for phase, style in (("sparse", "-o"), ("refit", "-s")):
        rows = [h for h in history if h.get("phase", "sparse") == phase]
        if not rows:
            continue
        steps = [h["step"] for h in rows]
        label = "Sparse SGD" if phase == "sparse" else "Sparse SGD + refit"
        if any("tuple_error" in h for h in rows):
            ax_err.plot(steps, [h.get("tuple_error", float("nan")) for h in rows], style,
                        ms=3, label=label)
        ax_den.plot(steps, [h["density"] for h in rows], style, ms=3, label=label)
    ax_err.set_xlabel("iterations")
    ax_err.set_ylabel("test error rate (tuples)")
    ax_err.set_title("(a) test error")
    ax_den.set_xlabel("iterations")
    ax_den.set_ylabel("density of W")
    ax_den.set_title("(b) density of W")
    for ax in (ax_err, ax_den):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path, dpi)
    return fig


def nightly_checks_history(source: Any, path: PathLike | None = None, *, figsize: tuple[float, float] = (8.0, 5.0),
                           dpi: int = 100, title: str | None = None) -> Figure:
    """The nightly data checks of every day, in the order the nights checked them.

    Parameters
    ----------
    source : a nightly model directory, a reports directory, or a list of report dicts (as
        :func:`nightly_history`); reports without ``checks`` (runs with ``--no-checks``) are skipped.
    path : write a PNG there (``figsize * dpi`` pixels).

    Top panel: each check's figure over its threshold (1 = the threshold: above it the day fails) —
    the largest standardized mean shift of a feature (and every feature's, thin grey), the largest
    change of a fraction of zeros, the label PSI, the share of rows with labels outside the accepted
    range, the share of duplicated groups and the volume's ``|log(ratio)| / log(R)``.  Bottom panel: the
    current model's agreement with each day (NDCG@k and disagreement; sgd-bilinear: tuple error).
    Quarantined days are marked with a red cross, forced ones with an orange one: a slow drift shows as a
    line creeping towards 1 before any day fails.
    """
    plt = _plt()
    reports = sorted(_read_reports(source), key=lambda r: r.get("started", ""))
    days = [d for r in reports for d in ((r.get("checks") or {}).get("days") or [])]
    if not days:
        raise ValueError("no nightly report holds data checks (were they run with --no-checks?)")
    x = np.arange(1, len(days) + 1)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=figsize, dpi=dpi, sharex=True, gridspec_kw={"height_ratios": [3, 2]})

    def ratio(c):
        fig_, thr = c.get("figure"), c.get("threshold")
        if c.get("status") == "skipped" or fig_ is None or thr is None:
            return np.nan
        if c.get("ratios") is not None and isinstance(thr, list):       # volume: rows against [1/R, R]
            r = max(float(c["ratios"]["rows"]), 1e-12)
            return abs(np.log(r)) / np.log(float(thr[1])) if thr[1] > 1 else np.nan
        if isinstance(fig_, (int, float)) and isinstance(thr, (int, float)) and thr > 0:
            return float(fig_) / float(thr)
        return np.nan

    names = ["feature_drift", "zero_fraction", "label_drift", "label_set", "duplicates", "volume"]
    per = [d["checks"].get("feature_drift", {}) for d in days]
    n_feat = max((len(c.get("per_feature") or []) for c in per), default=0)
    for j in range(n_feat):
        v = np.array([(float(c["per_feature"][j]) if c.get("per_feature") and c["per_feature"][j] != "inf"
                       else np.nan) / float(c.get("threshold") or 1) for c in per])
        ax.plot(x, v, color="0.75", lw=0.6, zorder=1)
    for i, name in enumerate(names):
        v = np.array([ratio(d["checks"].get(name, {})) for d in days], dtype=float)
        if np.any(~np.isnan(v)):
            ax.plot(x, np.minimum(v, 5.0), "o-", color=f"C{i}", ms=3, lw=1.2, label=name, zorder=2)
    ax.axhline(1.0, color="k", ls="--", lw=0.8)
    ax.set_ylabel("figure / threshold")
    ax.set_title(title or "nightly data checks per day (> 1 fails; grey: every feature's drift)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:        # the first day has nothing to compare with: no line yet
        ax.legend(loc="upper left", fontsize="x-small", ncol=3)
    ag = [d["checks"].get("agreement", {}) for d in days]
    for key, style in (("ndcg", "s-"), ("disagreement", "^-")):
        v = np.array([np.nan if c.get(key) is None else float(c[key]) for c in ag])
        if np.any(~np.isnan(v)):
            label = next((c["metric"] for c in ag if c.get("metric")), "ndcg") if key == "ndcg" else key
            ax2.plot(x, v, style, ms=4, lw=1, label=label)
    for d, xi in zip(days, x):
        if d.get("decision") in ("quarantined", "forced"):
            color = "red" if d["decision"] == "quarantined" else "orange"
            for a in (ax, ax2):
                a.axvline(xi, color=color, lw=0.8, alpha=0.5)
            ax.plot([xi], [1.0], "x", color=color, ms=10, mew=2)
    ax2.set_ylabel("current model on the day")
    ax2.set_xlabel("day")
    ax2.grid(True, alpha=0.3)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(loc="best", fontsize="x-small")
    ax2.set_xticks(x)
    ax2.set_xticklabels([Path(d.get("file") or d["day"]).stem[:12] for d in days],
                        rotation=45 if len(x) > 6 else 0, fontsize="small")
    fig.tight_layout()
    _save(fig, path, dpi)
    return fig
