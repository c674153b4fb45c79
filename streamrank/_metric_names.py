"""Metric names -> what to compute, without the metric kernels (numpy only, no numba).

The CLI checks ``--metrics`` before anything heavy is imported, so a typo is
answered at the cost of argument parsing, not of importing numba (issue 22);
:mod:`streamrank.metrics` uses the same functions.

>>> parse_metrics("ndcg@1,3,map,mrr")
[('ndcg', (1, 3)), ('map', (0,)), ('rr', (0,))]
>>> check_k([5, 10, 5])
((5, 10), True)
"""
from __future__ import annotations

import re

import numpy as np

__all__ = ["KINDS", "check_k", "metric_name", "parse_metrics"]

KINDS = ("ndcg", "err", "map", "precision", "recall", "rr", "disagreement")
_ALIASES = {"ndcg": "ndcg", "err": "err", "map": "map", "ap": "map", "p": "precision", "precision": "precision",
            "recall": "recall", "r": "recall", "mrr": "rr", "rr": "rr", "recip_rank": "rr",
            "reciprocal_rank": "rr", "disagreement": "disagreement"}
_PREFIX = {"ndcg": "ndcg", "err": "err", "map": "map", "precision": "p", "recall": "recall", "rr": "mrr",
           "disagreement": "disagreement"}
_DEFAULT_CUT = ("ndcg", "err", "precision", "recall")   # a bare name takes the evaluator's k


def check_k(k, *, allow_none=True):
    """``k`` -> (tuple of int cut-offs, 0 meaning none; whether a list was given)."""
    if isinstance(k, (list, tuple, np.ndarray)):
        ks = [_one_k(v, allow_none) for v in k]
        if not ks:
            raise ValueError("k is an empty list; give at least one cut-off")
        return tuple(dict.fromkeys(ks)), True
    return (_one_k(k, allow_none),), False


def _one_k(k, allow_none):
    if k is None and allow_none:
        return 0
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer{', None (no cut-off)' if allow_none else ''} "
                         f"or a list of them, got {k!r}")
    return int(k)


def parse_metrics(metrics, k=10):
    """Metric names -> ``[(kind, (k1, k2, ...))]``.

    Accepts ``"ndcg@1,3,5,10,map,mrr,p@10,err@10"`` or a list of such
    names; a bare ``ndcg``, ``err``, ``p`` or ``recall`` takes ``k``, a bare
    ``map`` or ``mrr`` has no cut-off.  Names are case-insensitive.
    """
    items = metrics.split(",") if isinstance(metrics, str) else list(metrics)
    items = [str(m).strip().lower() for m in items if str(m).strip()]
    if not items:
        raise ValueError("no metric given; e.g. metrics='ndcg@10,map'")
    specs: dict = {}
    kind = None
    for m in items:
        if re.fullmatch(r"\d+", m) and kind not in (None, "disagreement"):
            specs[kind] += (int(m),)          # "ndcg@1,3,5": the cut-offs continue
            continue
        name, _, cut = m.partition("@")
        kind = _ALIASES.get(name)
        if kind is None:
            raise ValueError(f"unknown metric {m!r}; choose from ndcg@K, map, map@K, mrr, p@K, recall@K, "
                             "err@K, disagreement")
        if cut:
            if kind == "disagreement" or not cut.isdigit() or int(cut) < 1:
                raise ValueError(f"bad metric {m!r}: the cut-off after @ must be a positive integer")
            ks = (int(cut),)
        else:
            ks = check_k(k)[0] if kind in _DEFAULT_CUT else (0,)
        specs[kind] = specs.get(kind, ()) + ks
    return [(kind, tuple(dict.fromkeys(ks))) for kind, ks in specs.items()]


def metric_name(kind, k):
    """The printed name of one (kind, cut-off): ``("ndcg", 10)`` -> ``"ndcg@10"``, ``("rr", 0)`` -> ``"mrr"``."""
    return _PREFIX[kind] if (k == 0 or kind == "disagreement") else f"{_PREFIX[kind]}@{k}"
