"""Binary-relevance metrics (relevant: ``y > 0``): AP, precision, recall, reciprocal rank."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._evaluator import RankingEvaluator, array_metric

if TYPE_CHECKING:
    import numpy as np

    from .._typing import ArrayLike
    from ._checks import MetricResult

_COMMON = """
    Relevance is ``y > 0`` (trec_eval's default relevance level 1 on integer
    grades).  ``gain`` is accepted so that every metric takes the same
    options; binary metrics count relevant items, so it changes nothing.
    Other arguments as :func:`~streamrank.metrics.ndcg`."""


def mean_average_precision(y_true: ArrayLike, y_score: ArrayLike, qid: ArrayLike | None = None, k: int | None = None, *,
                           gain: str = "exp2", empty: str = "skip", ties: str = "expected",
                           doc_ids: ArrayLike | None = None, qrels: dict | None = None, per_query: bool = False,
                           return_details: bool = False) -> float | np.ndarray | MetricResult:
    """Mean over queries of average precision (AP@k with ``k``).

    ``AP@k = (1/R) sum_{r <= k, rel_r} P@r`` with R the number of relevant
    items of the query (its rows, or its judgments with ``qrels``), not cut
    at k (trec_eval ``map`` and ``map_cut``).  Ties: the expected AP over
    random orders of the tied items (McSherry & Najork, ECIR 2008) -- not
    the step-wise definition where tied items enter together.
    """
    return array_metric("map", "mean_average_precision", y_true, y_score, qid, k, gain=gain, empty=empty,
                        ties=ties, doc_ids=doc_ids, qrels=qrels, per_query=per_query,
                        return_details=return_details)


def precision(y_true: ArrayLike, y_score: ArrayLike, qid: ArrayLike | None = None, k: int | None = 10, *,
              gain: str = "exp2", empty: str = "skip", ties: str = "expected", doc_ids: ArrayLike | None = None,
              qrels: dict | None = None, per_query: bool = False,
              return_details: bool = False) -> float | np.ndarray | MetricResult:
    """Mean precision@k: relevant items in the top k over k (trec_eval ``P_k``).

    A query with fewer than k rows still divides by k, as trec_eval does;
    ``k=None`` divides by the query's rows.  Ties: expected count.
    """
    return array_metric("precision", "precision", y_true, y_score, qid, k, gain=gain, empty=empty, ties=ties,
                        doc_ids=doc_ids, qrels=qrels, per_query=per_query, return_details=return_details)


def recall(y_true: ArrayLike, y_score: ArrayLike, qid: ArrayLike | None = None, k: int | None = 10, *,
           gain: str = "exp2", empty: str = "skip", ties: str = "expected", doc_ids: ArrayLike | None = None,
           qrels: dict | None = None, per_query: bool = False,
           return_details: bool = False) -> float | np.ndarray | MetricResult:
    """Mean recall@k: relevant items in the top k over all relevant items (trec_eval ``recall_k``)."""
    return array_metric("recall", "recall", y_true, y_score, qid, k, gain=gain, empty=empty, ties=ties,
                        doc_ids=doc_ids, qrels=qrels, per_query=per_query, return_details=return_details)


def reciprocal_rank(y_true: ArrayLike, y_score: ArrayLike, qid: ArrayLike | None = None, k: int | None = None, *,
                    gain: str = "exp2", empty: str = "skip", ties: str = "expected", doc_ids: ArrayLike | None = None,
                    qrels: dict | None = None, per_query: bool = False,
                    return_details: bool = False) -> float | np.ndarray | MetricResult:
    """Mean reciprocal rank (MRR): ``1 / rank`` of the first relevant item (trec_eval ``recip_rank``).

    With ``k``, 0 when no relevant item is in the top k (MRR@k).  Ties: the
    expected value over random orders of the tied items.
    """
    return array_metric("rr", "reciprocal_rank", y_true, y_score, qid, k, gain=gain, empty=empty, ties=ties,
                        doc_ids=doc_ids, qrels=qrels, per_query=per_query, return_details=return_details)


for _f in (mean_average_precision, precision, recall, reciprocal_rank):
    _f.__doc__ += _COMMON


def class_retrieval_map(score_matrix, Q, y_q, D, y_d, *, batch_size: int = 256, return_details: bool = False):
    """MAP of class retrieval: each query ranks all items; relevant = same class.

    The MAP of the sparse-SGD paper (Chen et al., ICDM 2010, §IV.A, e.g. 20
    Newsgroups test documents ranking the training documents).
    ``score_matrix(Q_batch, D)`` returns the (batch, items) score matrix (for
    a bilinear model ``Q_batch @ W @ D.T``).  Queries are scored
    ``batch_size`` at a time, so memory is ``batch_size x items`` floats.
    Average precision per query as :func:`mean_average_precision` (expected
    value over tied scores); queries whose class has no item are skipped.
    """
    y_q = np.asarray(y_q)
    y_d = np.asarray(y_d)
    n_q = Q.shape[0]
    if len(y_q) != n_q:
        raise ValueError(f"y_q has {len(y_q)} rows but Q has {n_q}; lengths must match")
    if len(y_d) != D.shape[0]:
        raise ValueError(f"y_d has {len(y_d)} rows but D has {D.shape[0]}; lengths must match")
    n_d = D.shape[0]
    ev = RankingEvaluator(None, ("map",), keep_per_query=return_details)
    for a in range(0, n_q, int(batch_size)):
        b = min(a + int(batch_size), n_q)
        S = np.asarray(score_matrix(Q[a:b], D))
        if hasattr(S, "toarray"):
            S = S.toarray()
        if S.shape != (b - a, n_d):
            raise ValueError(f"score_matrix returned shape {S.shape}; expected ({b - a}, {n_d})")
        rel = (y_q[a:b, None] == y_d[None, :]).astype(np.float64)
        gp = np.arange(b - a + 1, dtype=np.int64) * n_d
        ev.update(rel.reshape(-1), np.ascontiguousarray(S, dtype=np.float64).reshape(-1), gp,
                  qid=np.arange(a, b))
    res = ev.result()["map"]
    return res if return_details else res.value
