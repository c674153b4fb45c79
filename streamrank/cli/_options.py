"""Which learner takes which option: an option given to a learner that ignores it is a usage error.

``fit`` and ``cv`` share one option list for six learners (``_app._learner_options``).
Each learner-specific option records that it was given (:class:`Given`,
:class:`GivenTrue`); :func:`refuse_inapplicable` then refuses, before any
data is read, an option the chosen learner would silently ignore — e.g.
``--gamma`` with ``--learner rankrls``, ``--degree`` with ``--kernel rbf``, or
``--scoring`` on a fit that does no cross-validation — naming the learners
that do take it.  Defaults are never refused: only what the user typed.
"""
from __future__ import annotations

import argparse

from ._common import UsageError

__all__ = ["Given", "GivenTrue", "OPTION_LEARNERS", "refuse_inapplicable", "was_given"]

_RLS = ("rankrls", "cg", "kernel", "sparse-kernel")
_KERNELS = ("kernel", "sparse-kernel")
_SGD = ("sgd-bilinear", "sgd-pairwise")

#: option dest -> the learners that use it
OPTION_LEARNERS = {
    "alpha": _RLS,
    "group_weight": _RLS, "ties": _RLS,
    "tol": ("cg",), "max_iter": ("cg",),
    "kernel": _KERNELS, "gamma": _KERNELS, "degree": _KERNELS, "coef0": _KERNELS,
    "n_basis": ("sparse-kernel",),
    "eta0": _SGD, "l1": _SGD, "shrink_every": _SGD, "batch_size": _SGD,
    "l2": ("sgd-pairwise",), "loss": ("sgd-pairwise",), "n_pairs": ("sgd-pairwise",),
    "init": ("sgd-bilinear",), "no_refit": ("sgd-bilinear",), "max_memory_mb": ("sgd-bilinear", "kernel"),
    "steps": ("sgd-bilinear",), "checkpoint_every": ("sgd-bilinear",), "validation": ("sgd-bilinear",),
    "seed": ("sparse-kernel",) + _SGD,
    "normalize": _RLS + _SGD,
    "weights": _RLS + ("sgd-pairwise",), "ips": _RLS + ("sgd-pairwise",),
    "propensity": _RLS + ("sgd-pairwise",), "clip": _RLS + ("sgd-pairwise",),
}

#: kernel parameter -> the kernels that use it (streamrank.kernels)
KERNEL_PARAMS = {"gamma": ("rbf", "poly"), "degree": ("poly",), "coef0": ("poly",)}


def _mark(namespace, dest):
    given = set(getattr(namespace, "given_options", None) or ())
    given.add(dest)
    namespace.given_options = given


class Given(argparse.Action):
    """Store the value and remember that the option was typed."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        _mark(namespace, self.dest)


class GivenTrue(argparse.Action):
    """``store_true`` that remembers that the flag was typed."""

    def __init__(self, option_strings, dest, default=False, **kw):
        super().__init__(option_strings, dest, nargs=0, default=default, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, True)
        _mark(namespace, self.dest)


def was_given(args, dest: str) -> bool:
    return dest in (getattr(args, "given_options", None) or ())


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def refuse_inapplicable(args, *, cross_validates: bool) -> None:
    """Raise :class:`UsageError` for a typed option that ``args.learner`` (or its kernel) would ignore."""
    L = args.learner
    given = getattr(args, "given_options", None) or ()
    for dest in sorted(given, key=lambda d: list(OPTION_LEARNERS).index(d) if d in OPTION_LEARNERS else 99):
        learners = OPTION_LEARNERS.get(dest)
        if learners is not None and L not in learners:
            hint = ""
            if dest == "alpha" and L == "sgd-bilinear":
                hint = "; its regularization is --l1"
            elif dest == "alpha" and L == "sgd-pairwise":
                hint = "; its regularization is --l1 / --l2"
            raise UsageError(f"{_flag(dest)} does not apply to --learner {L} (it is an option of "
                             f"{', '.join(learners)}){hint}")
    if L in _KERNELS:
        for dest, kernels in KERNEL_PARAMS.items():
            if dest in given and args.kernel not in kernels:
                raise UsageError(f"{_flag(dest)} does not apply to --kernel {args.kernel} (it is a parameter "
                                 f"of the {' and '.join(kernels)} kernel{'s' if len(kernels) > 1 else ''})")
    if "scoring" in given and not cross_validates:
        raise UsageError("--scoring is the cross-validation score: it needs --alphas GRID (fit) or the cv command")
