"""The tuple error of the sparse-SGD paper (Chen et al., ICDM 2010, §IV.A): the one home."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._checks import as_vector, reject_source

if TYPE_CHECKING:
    from typing import Any

    from .._typing import ArrayLike
    from ..io.tuples import TupleSource


def _tuple_counts(score_pos, score_neg):
    p = _scores(score_pos, None, "score_pos")
    m = _scores(score_neg, p.shape[0], "score_neg")
    return int(np.count_nonzero(~(p > m))), p.shape[0]


def _scores(a, n, name):
    """1-D float64 scores; NaN and infinity are kept (they are a model's output, compared as numbers)."""
    return np.asarray(as_vector(a, n, name, "score_pos", per="tuple"), dtype=np.float64)


def tuple_error(score_pos: ArrayLike, score_neg: ArrayLike) -> float:
    """Fraction of tuples that are not ranked right: ``not score_pos > score_neg``.

    ``score_pos[i] = f(q_i, d+_i)``, ``score_neg[i] = f(q_i, d-_i)``; a tie
    (and a NaN score, from a diverged model) counts as an error, as in the
    test error of the sparse-SGD paper (Chen et al., ICDM 2010, §IV.A).  NaN
    for no tuples.  For a tuple source and a model, :func:`evaluate_tuples`.
    """
    reject_source(score_pos, "tuple_error")
    wrong, n = _tuple_counts(score_pos, score_neg)
    return wrong / n if n else float("nan")


def evaluate_tuples(source: TupleSource, model: Any, *, batch_size: int = 8192) -> float:
    """Stream a tuple source once through a model and return the tuple error.

    ``source``: a :class:`~streamrank.TupleStore` or anything with
    ``batches(batch_size=, shuffle_buffer=)`` yielding ``(Q, D_pos, D_neg)``
    batches; ``model``: has ``score(Q, D)`` (row-aligned) or is a callable
    ``model(Q, D)``.  Equals :func:`tuple_error` on all the scores at once.
    """
    score = model.score if hasattr(model, "score") else model
    if not callable(score):
        raise TypeError("evaluate_tuples(source, model): model needs a score(Q, D) method or must be callable")
    if not hasattr(source, "batches"):
        raise TypeError(f"evaluate_tuples needs a tuple source with batches(); got {type(source).__name__}")
    wrong = total = 0
    for b in source.batches(batch_size=batch_size, shuffle_buffer=0):
        w, n = _tuple_counts(np.asarray(score(b.Q, b.D_pos)).reshape(-1), np.asarray(score(b.Q, b.D_neg)).reshape(-1))
        wrong += w
        total += n
    return wrong / total if total else float("nan")
