"""Plots (the ``plot`` extra: matplotlib, imported only inside the functions).

* :func:`learning_curve` -- the two panels of Figure 1 of Chen et al. 2010
  for an SGD ranker: tuple error on the validation tuples and density of W
  against the number of iterations, from ``model.history_``;
* :func:`regularization_path`, :func:`nightly_history`, :func:`convergence`
  -- model selection and nightly pipeline plots (``streamrank._plot_selection``).
"""
from __future__ import annotations

__all__ = ["learning_curve", "regularization_path", "nightly_history", "convergence"]


def learning_curve(model, path=None, *, figsize=(10.0, 4.0), dpi=100, title=None):
    """Test (validation) tuple error and density of W vs iterations; PNG at ``path``.

    ``model.history_`` is a list of checkpoints (``fit(..., validation=...,
    checkpoint_every=N)``) with ``step``, ``density`` and, when a validation
    set was given, ``tuple_error``; the refit phase (``phase == "refit"``)
    is drawn as its own line.  Returns the matplotlib Figure.
    """
    from ._plot_selection import _plt, _save

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


def __getattr__(name):
    if name in ("regularization_path", "nightly_history", "convergence"):
        from . import _plot_selection

        return getattr(_plot_selection, name)
    raise AttributeError(f"module 'streamrank.plot' has no attribute {name!r}")
