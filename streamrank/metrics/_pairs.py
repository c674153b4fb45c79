"""Pair-counting metrics: the disagreement error (1 - C-index) per query and the global AUC."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._validation import _as_numeric, check_finite
from . import _kernels as _k
from ._checks import check_scores, reject_source
from ._evaluator import array_metric

if TYPE_CHECKING:
    import numpy as np

    from .._typing import ArrayLike
    from ._checks import MetricResult


def disagreement(y_true: ArrayLike, y_score: ArrayLike, qid: ArrayLike | None = None, *, ties: str = "half",
                 per_query: bool = False, return_details: bool = False,
                 sample_weight: ArrayLike | None = None) -> float | np.ndarray | MetricResult:
    """Mean over queries of ``1 - C-index`` (disagreement error).

    For a query, the fraction of its ordered pairs put the wrong way:
    ``(#{y_i < y_j, s_i > s_j} + w #{y_i < y_j, s_i = s_j}) / #{y_i < y_j}``
    with ``w = 1/2`` (``ties="half"`` or ``"expected"``: the
    C-index / AUC convention and the expected error of a random order,
    default) or ``w = 1`` (``ties="error"``: eq. (1) of Pahikkala et al.
    2009 exactly, where sign(0) = -1 makes a tie an error).  Queries without
    an ordered pair are skipped.  O(n log n) per query (Fenwick tree).
    ``qid``, ``per_query``, ``return_details`` as :func:`ndcg`.

    ``sample_weight`` (rows,), finite and >= 0: the pair (i, j) weighs
    ``w_i w_j``, the pair weight of weighted RankRLS's objective
    (:mod:`streamrank.laplacian`).  A query's value is
    ``sum w_i w_j [misordered] / sum w_i w_j`` over its ordered pairs (ties
    in the score counted as ``ties`` says); with the weights of
    :func:`~streamrank.io.weighted.ips_weighted` (targets: clicks), the
    self-normalized IPS estimate of the misordered-pair rate (Joachims,
    Swaminathan & Schnabel, WSDM 2017).  The mean over queries weighs query
    q by its mean pair weight ``sum_q w_i w_j / #pairs_q``: every pair
    weighs ``w_i w_j / #pairs_q``, so with weights all one each query counts
    once (the unweighted value, exactly) and a weight c constant over a
    query makes it count c² times.  A query whose pairs all weigh 0 is
    skipped.
    """
    if ties not in ("half", "expected", "error"):
        raise ValueError(f"ties must be 'half' (= 'expected') or 'error', got {ties!r}")
    return array_metric("disagreement", "disagreement", y_true, y_score, qid, None, disagreement_ties=ties,
                        per_query=per_query, return_details=return_details, sample_weight=sample_weight)


def _auc_1d(y, s, column=None):
    n_pos = int(np.count_nonzero(y > 0))
    if n_pos == 0 or n_pos == len(y):
        where = "" if column is None else f" in column {column}"
        raise ValueError(f"auc needs both positive (y > 0) and negative rows in y_true{where}; "
                         f"got {n_pos} positive of {len(y)}")
    wrong, pairs = _k.auc_counts(y, s)
    return 1.0 - wrong / pairs


def auc(y_true: ArrayLike, y_score: ArrayLike) -> float:
    """Area under the ROC curve of one global group (positive: ``y > 0``).

    ``AUC = (#{s_pos > s_neg} + 0.5 #{s_pos = s_neg}) / (n_pos n_neg)`` over
    all (positive, negative) pairs, O(n log n).  With 2-D ``y_true`` and
    ``y_score`` (rows, outputs): one AUC per column (ndarray).  For a source
    and a model, ``evaluate(source, model, metrics=["auc"])``.
    """
    reject_source(y_true, "auc")
    y = _as_numeric(y_true, "y_true")
    if y.ndim == 2:
        s = _as_numeric(y_score, "y_score")
        if s.shape != y.shape:
            raise ValueError(f"y_score has shape {s.shape} but y_true has {y.shape}; shapes must match")
        check_finite(np.asarray(y, dtype=np.float64), "y_true")
        return np.asarray([
            _auc_1d(check_scores(y[:, j], None, f"y_true[:, {j}]"),
                    check_scores(s[:, j], y.shape[0], f"y_score[:, {j}]"), j)
            for j in range(y.shape[1])
        ])
    y = check_scores(y, None, "y_true")
    return _auc_1d(y, check_scores(y_score, y.shape[0], "y_score"))
