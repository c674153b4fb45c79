"""Ranking metrics on arrays, and one entry that streams a source through a model.

Metrics of arrays ``(y_true, y_score, qid=None, k, *, gain, empty, ties, doc_ids, ...)``
-----------------------------------------------------------------------------------------
| metric | what it measures |
|---|---|
| ``ndcg`` | NDCG@k, gain ``2**rel - 1`` or ``rel``, discount ``1/log2(rank + 1)`` |
| ``err`` | expected reciprocal rank ERR@k (Chapelle et al. 2009) |
| ``mean_average_precision`` | mean AP (AP@k with ``k``) |
| ``precision`` | precision@k |
| ``recall`` | recall@k |
| ``reciprocal_rank`` | mean reciprocal rank of the first relevant item (MRR, MRR@k) |
| ``disagreement`` | mean over queries of 1 - C-index (pairs with y_i < y_j put the wrong way) |
| ``auc`` | area under the ROC curve of one global group |
| ``tuple_error`` | fraction of (q, d+, d-) tuples with f(q, d+) not above f(q, d-) |

``qid=None`` means one global group; the rows of a query are contiguous.
``k`` is an int, None (the whole list) or a list (``{k: value}``, one pass).
Relevant means ``y > 0``.

A source and a model
--------------------
``evaluate(source, model, metrics="ndcg@1,3,5,10,map,mrr,p@10,err@10")``
streams a :class:`~streamrank.io.blocks.BlockSource` (a GroupStore,
``sr.as_source(...)``) or an iterable of :class:`~streamrank.Block` through a
fitted model (``model.predict(X)``) or a callable, once, and returns
``{name: MetricResult}``; ``evaluate_tuples(tuple_source, model)`` does the
same for the tuple error.  :class:`RankingEvaluator` is the accumulator
beneath (``update`` per block, ``merge`` for dask reductions).  Per-query
values are computed on whole groups and summed in float64, so the result
is the mean over queries whatever the block cutting; a group cut across
blocks is buffered (labels and scores, 16 bytes a row) until complete.
``evaluate_run(run, qrels)`` reads TREC run and qrels files.

Conventions (options, the same name on every metric and in the CLI)
-------------------------------------------------------------------
``gain="exp2"`` (default) | ``"linear"``
    NDCG gain ``2**rel - 1`` (Burges et al. 2005, LETOR, XGBoost/LightGBM)
    or ``rel`` (trec_eval ``ndcg_cut``).  ERR's stopping probability is
    ``(2**g - 1) / 2**max_grade`` or ``g / max_grade``.  Binary metrics
    accept and ignore it.
``empty="skip"`` (default) | ``"zero"`` | ``"one"``
    A query without a relevant item leaves the mean (``n_skipped``), counts
    0 (trec_eval) or 1 (XGBoost's default for NDCG and MAP).
``ties="expected"`` (default) | ``"trec"``
    Tied scores: the expected value under a uniformly random order of the
    tied items, in closed form (McSherry & Najork, ECIR 2008): a constant
    scorer is neither rewarded nor punished by the input order.  ``"trec"``
    orders ties as trec_eval does -- score descending, then document id
    descending (``form_res_rels.c``, ``comp_sim_docno``) -- and needs
    ``doc_ids`` (compared as strings).  ``disagreement`` counts a tied pair
    1/2 (``ties="half"``, the expected value) or 1 (``"error"``).
``qrels={qid: {doc_id: rel}}``
    Judgments: the ideal DCG and the number of relevant items (recall, AP)
    come from them instead of the rows given; a query without judgments is
    skipped.
``k`` for AP and recall cuts the ranked list, never the divisor (trec_eval).

Weighted metrics (``sample_weight=``: ``ndcg`` and ``disagreement``)
--------------------------------------------------------------------
Row weights w (finite, >= 0), the ``sample_weight`` the learners train with
(weighted RankRLS: the pair (i, j) weighs ``w_i w_j``).

``disagreement``
    A query's value is ``sum w_i w_j [pair misordered] / sum w_i w_j`` over
    its ordered pairs (ties in the score as ``ties=`` says) -- with
    :func:`~streamrank.io.weighted.ips_weighted` weights and clicks as
    labels, the self-normalized IPS estimate of the misordered-pair rate
    (Joachims, Swaminathan & Schnabel 2017).  Queries are averaged with
    weight ``sum w_i w_j / #pairs`` (the query's mean pair weight): each
    pair weighs ``w_i w_j / #pairs of its query``.  Weights all one give
    the unweighted mean over queries exactly; a weight c constant over a
    query makes it count c² times (the per-query weights are kept).
``ndcg``
    Document i's gain is ``w_i gain(rel_i)`` in the DCG; the ideal DCG is of
    the same weighted gains sorted decreasing (with IPS weights: the
    IPS-weighted DCG of the clicked documents, normalized; Agarwal et al.
    2019).  Queries are averaged **equally**, as trec_eval does and as the
    unweighted NDCG is: NDCG is normalized per query, so a weight constant
    within a query cancels and a query's weight cannot enter its value --
    averaging by query weight would be a second, separate choice.  To let
    queries count by their weights, read the weighted ``disagreement``.

:class:`RankingEvaluator` ``(weighted=True)`` takes ``weight=`` in
``update`` and ``block.weight`` in ``update_block``;
``evaluate(source, model, weighted=True)`` streams a weighted source
(:func:`~streamrank.io.weighted.with_weights`,
:func:`~streamrank.io.weighted.ips_weighted`).  Results do not depend on the
block cutting, and ``merge`` keeps them exact.

Matching trec_eval (``gain="linear", empty="zero", ties="trec", doc_ids=...``)
----------------------------------------------------------------------------
| streamrank | trec_eval measure |
|---|---|
| ``ndcg(..., k=K)`` | ``ndcg_cut.K`` |
| ``ndcg(..., k=None)`` | ``ndcg`` |
| ``mean_average_precision(...)`` | ``map`` |
| ``mean_average_precision(..., k=K)`` | ``map_cut.K`` |
| ``precision(..., k=K)`` | ``P.K`` |
| ``precision(..., k=None)`` | ``set_P`` |
| ``recall(..., k=K)`` | ``recall.K`` |
| ``recall(..., k=None)`` | ``set_recall`` |
| ``reciprocal_rank(...)`` | ``recip_rank`` |
| ``err(..., k=K)`` | none (gdeval ``ERR@K`` with ``max_grade=4``, exp2 gain) |

The test suite checks each equality per query to 1e-12 with pytrec_eval on
LETOR MQ2008 and OHSUMED.  trec_eval's relevance level is 1: for integer
grades the same as ``y > 0``.  trec_eval's NDCG ignores negative grades;
streamrank's linear gain counts them.

Return values
-------------
A float by default (NaN when no query is left); ``return_details=True``
gives a :class:`MetricResult` (``value``, ``n_queries``, ``n_skipped``,
``per_query`` with NaN where skipped, ``qid`` the original ids,
``by_qid()``); ``per_query=True`` the per-query array.

Examples
--------
>>> import numpy as np, streamrank as sr
>>> y = np.array([2, 1, 0, 0, 1, 0]); s = np.array([.9, .5, .1, .3, .2, .8])
>>> qid = np.array([1, 1, 1, 2, 2, 2])
>>> float(sr.metrics.ndcg(y, s, qid, k=10))
0.75
>>> sr.metrics.disagreement(y, s, qid)
0.5
>>> sr.metrics.ndcg(y, s, qid, k=[1, 3])
{1: 0.5, 3: 0.75}
>>> w = np.array([1.0, 1.0, 1.0, 3.0, 3.0, 3.0])          # the second query counts 3**2 = 9 times
>>> float(sr.metrics.disagreement(y, s, qid, sample_weight=w))   # (0 * 1 + 1 * 9) / (1 + 9)
0.9
>>> round(sr.metrics.mean_average_precision([1, 0, 0], [1.0, 1.0, 1.0]), 4)   # (1 + 1/2 + 1/3) / 3
0.6111
>>> sr.metrics.precision([1, 0, 0], [1.0, 1.0, 1.0], k=1, ties="trec", doc_ids=["c", "b", "a"])
1.0
"""
from __future__ import annotations

from ._binary import class_retrieval_map, mean_average_precision, precision, recall, reciprocal_rank
from ._checks import MetricResult
from ._evaluator import METRICS, RankingEvaluator, parse_metrics
from ._graded import err, ndcg
from ._pairs import auc, disagreement
from ._sources import block_labels, evaluate, score_block
from ._trec import evaluate_run, read_qrels, read_run
from ._tuples import evaluate_tuples, tuple_error

# the private names used before the split (code in other branches may still import them)
_score = score_block
_block_y = block_labels

__all__ = [
    "MetricResult",
    "RankingEvaluator",
    "METRICS",
    "parse_metrics",
    "ndcg",
    "err",
    "mean_average_precision",
    "precision",
    "recall",
    "reciprocal_rank",
    "disagreement",
    "auc",
    "tuple_error",
    "class_retrieval_map",
    "evaluate",
    "evaluate_tuples",
    "evaluate_run",
    "read_run",
    "read_qrels",
    "score_block",
    "block_labels",
]
