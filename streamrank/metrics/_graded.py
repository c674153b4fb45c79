"""Graded metrics: NDCG@k (Järvelin & Kekäläinen 2002) and ERR@k (Chapelle et al. 2009)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._evaluator import array_metric

if TYPE_CHECKING:
    import numpy as np

    from .._typing import ArrayLike
    from ._checks import MetricResult


def ndcg(y_true: ArrayLike, y_score: ArrayLike, qid: ArrayLike | None = None, k: int | None = 10, *, gain: str = "exp2",
         empty: str = "skip", ties: str = "expected", doc_ids: ArrayLike | None = None, qrels: dict | None = None,
         per_query: bool = False, return_details: bool = False,
         sample_weight: ArrayLike | None = None) -> float | np.ndarray | MetricResult:
    """Mean NDCG@k over queries.

    ``DCG@k = sum_{r=1}^{k} gain(rel_r) / log2(r + 1)`` in the predicted
    order, ``NDCG@k = DCG@k / IDCG@k`` (IDCG: the ideal order of the
    query's rows, or of its judged documents when ``qrels`` is given).

    Parameters
    ----------
    y_true : array (rows,) of graded relevance
    y_score : array (rows,) of predicted scores
    qid : array (rows,) of query ids (rows of a query contiguous), or None
        for one global group
    k : int, None or list of int
        Cut-off (None: whole list); a list gives ``{k: value}`` in one pass.
    gain : {"exp2", "linear"}
        ``2^rel - 1`` (Burges et al. 2005; LETOR, scikit-learn with
        exponentiated labels) or ``rel`` (trec_eval ``ndcg_cut``).
    empty : {"skip", "zero", "one"}
        A query without a relevant item (``rel > 0``) is left out of the
        mean (counted in ``n_skipped``), or scores 0 (trec_eval), or 1.
        A query that has one but an ideal DCG <= 0 (negative labels) is
        always skipped.
    ties : {"expected", "trec"}
        Tied scores: expected DCG over random orders of the tied items
        (McSherry & Najork 2008; scikit-learn's ``ignore_ties=False``), or
        trec_eval's order (document id descending; needs ``doc_ids``).
    doc_ids : array (rows,), optional
        Document ids (compared as strings, like trec_eval).
    qrels : mapping, optional
        ``{qid: {doc_id: rel}}`` (or ``{qid: labels}``): the judgments of each
        query; they give the ideal DCG and the relevant count, and a query
        without judgments is skipped (trec_eval leaves it out).
    per_query : bool
        Return the per-query values (NaN where skipped) instead.
    return_details : bool
        Return a :class:`MetricResult` (value, counts, per-query values keyed
        by the original qid) instead of a float.
    sample_weight : array (rows,), optional
        Row weights (finite, >= 0).  Weighted NDCG: document i's gain is
        ``w_i gain(rel_i)`` in the DCG, and the ideal DCG is of the same
        weighted gains sorted decreasing (with inverse-propensity weights
        on clicks: the IPS-weighted DCG of the clicked documents,
        normalized; Agarwal et al., SIGIR 2019).  A relevant item of weight
        0 does not count as relevant for ``empty``.  Queries are averaged
        **equally**, as without weights (and as trec_eval does): NDCG is
        normalized per query, so a weight constant within a query cancels
        and the query still counts once.  To let queries count by their
        weights use :func:`disagreement` with ``sample_weight``, whose mean
        keeps them.  Weights of all ones give the unweighted value exactly.
        Not with ``qrels`` (judged documents carry no row weights).
    """
    return array_metric("ndcg", "ndcg", y_true, y_score, qid, k, gain=gain, empty=empty, ties=ties,
                        doc_ids=doc_ids, qrels=qrels, per_query=per_query, return_details=return_details,
                        sample_weight=sample_weight)


def err(y_true: ArrayLike, y_score: ArrayLike, qid: ArrayLike | None = None, k: int | None = 10, *, gain: str = "exp2",
        empty: str = "skip", ties: str = "expected", doc_ids: ArrayLike | None = None, max_grade: float = 4,
        per_query: bool = False, return_details: bool = False) -> float | np.ndarray | MetricResult:
    """Mean expected reciprocal rank ERR@k (Chapelle, Metzler, Zhang & Grinspan, CIKM 2009, eq. (4)).

    ``ERR@k = sum_{r=1}^{k} (1/r) R_r prod_{i<r} (1 - R_i)``: a user scans
    down the list and stops at rank r with probability ``R_r``; ``R =
    (2^g - 1) / 2^max_grade`` (``gain="exp2"``, the paper's choice) or
    ``g / max_grade`` (``"linear"``).  ``max_grade`` is the top of the
    grading scale, 4 by default as in gdeval (TREC Web track) and RankLib;
    set it to the data's scale (2 for MQ2008 and OHSUMED).  Labels must lie
    in ``[0, max_grade]``.  trec_eval has no ERR; ``ties="trec"`` applies
    its document order all the same.  Other arguments as :func:`ndcg`.
    """
    return array_metric("err", "err", y_true, y_score, qid, k, gain=gain, empty=empty, ties=ties,
                        doc_ids=doc_ids, max_grade=max_grade, per_query=per_query, return_details=return_details)
