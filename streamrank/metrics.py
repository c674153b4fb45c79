"""Ranking metrics, in memory and out of core.

Functions
---------
``ndcg(y_true, y_score, qid=None, k=10)``
    Mean over queries of NDCG@k.  Gain ``2**rel - 1``, discount
    ``1 / log2(rank + 1)`` (Järvelin & Kekäläinen 2002; the LETOR 3.0/4.0
    convention).  Queries whose ideal DCG@k is 0 (no relevant item) are
    skipped and counted (``n_skipped``).
``disagreement(y_true, y_score, qid=None)``
    Mean over queries of ``1 - C-index``: the fraction of ordered pairs
    (y_i < y_j, same query) that the scores put the wrong way round, with a
    tie in the scores counting 1/2 (``ties="error"`` counts it 1, as eq. (1)
    of Pahikkala et al. 2009 does).  Queries without an ordered pair are
    skipped.
``mean_average_precision(y_true, y_score, qid=None)``
    Mean over queries of average precision with relevance ``y > 0``; queries
    without a relevant item are skipped.
``auc(y_true, y_score)``
    Area under the ROC curve of one global group: the fraction of
    (positive, negative) pairs (positive: ``y > 0``) ordered correctly, ties
    1/2.  Equals ``1 - disagreement`` on binary labels.  2-D ``y_true`` and
    ``y_score`` (rows, outputs) give one AUC per column (object ranking of
    several topics at once).
``tuple_error(score_pos, score_neg)``
    Fraction of (q, d+, d-) tuples with ``f(q, d+) <= f(q, d-)`` (the error
    measure of the sparse-SGD paper, Chen et al.).

``qid=None`` means one global group.

Ties in the predicted scores
----------------------------
Every metric uses the *expected* value under a uniformly random order of the
tied items, so a constant scorer is never rewarded or punished by the input
order: NDCG averages the discounts of the ranks a run of tied items occupies
(McSherry & Najork, ECIR 2008 — the same as scikit-learn's ``ndcg_score``
with ``ignore_ties=False``); disagreement and AUC count a tied pair 1/2;
average precision lets tied items enter together (the step-wise definition
over distinct thresholds used by scikit-learn's
``average_precision_score``).

Return values
-------------
By default each function returns a float (NaN when no query is left after
skipping).  ``return_details=True`` returns a :class:`MetricResult` with
``value``, ``n_queries`` (queries averaged), ``n_skipped``, ``per_query``
(one value per group, NaN where skipped) and ``qid``; ``per_query=True``
returns just the per-query array.

Out of core
-----------
Each ranking metric also takes a block stream instead of arrays:
``ndcg(source, scorer, k=10)`` where ``source`` is a
:class:`~streamrank.io.blocks.BlockSource` (a GroupStore, ``sr.as_source``)
or an iterable of :class:`~streamrank.Block`, and ``scorer`` is a fitted
model (``scorer.predict(block.X)``) or a callable ``scorer(block.X)``.  The
shared machinery is :class:`RankingEvaluator`, which a learner's streaming
prediction pass can feed directly::

    ev = RankingEvaluator(k=10)
    for block in store.blocks(max_rows=100_000):
        ev.update(block.y, model.predict(block.X), block.group_ptr)
    ev.result()   # {'ndcg@10': MetricResult(...), 'disagreement': ..., 'map': ...}

Per-query values are computed on whole groups and summed in float64, so the
result is the mean over queries whatever the block cutting (no mean of block
means).  A group cut across blocks (``blocks(split_groups=True)``) is
buffered — its labels and scores only, 16 bytes a row — until all its pieces
have arrived, in any order.

Examples
--------
>>> import numpy as np, streamrank as sr
>>> y = np.array([2, 1, 0, 0, 1, 0]); s = np.array([.9, .5, .1, .3, .2, .8])
>>> qid = np.array([1, 1, 1, 2, 2, 2])
>>> float(sr.metrics.ndcg(y, s, qid, k=10))
0.75
>>> sr.metrics.disagreement(y, s, qid)
0.5
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import scipy.sparse as sp

from ._validation import _as_numeric, check_finite, check_qid, group_ptr_from_qid
from . import _metrics_kernels as _k

__all__ = [
    "MetricResult",
    "RankingEvaluator",
    "ndcg",
    "disagreement",
    "mean_average_precision",
    "auc",
    "tuple_error",
    "class_retrieval_map",
    "evaluate",
]

METRICS = ("ndcg", "disagreement", "map")


@dataclass(frozen=True, eq=False)
class MetricResult:
    """A metric averaged over queries, with what was averaged.

    Attributes
    ----------
    name : str
    value : float
        Mean over the ``n_queries`` evaluated queries (NaN if none).
    n_queries : int
        Queries that entered the mean.
    n_skipped : int
        Queries skipped (no relevant item for NDCG/MAP, no ordered pair for
        disagreement).
    per_query : ndarray or None
        One value per query in input order (NaN where skipped), when kept.
    qid : ndarray or None
        The query id of each entry of ``per_query``.
    """

    name: str
    value: float
    n_queries: int
    n_skipped: int
    per_query: np.ndarray | None = field(default=None, repr=False)
    qid: np.ndarray | None = field(default=None, repr=False)

    def __float__(self) -> float:
        return float(self.value)


# ---------------------------------------------------------------- validation
def _check_scores(a, n: int | None, name: str, other: str = "y_true") -> np.ndarray:
    if sp.issparse(a):
        raise TypeError(f"{name} must be a dense 1-D array, got a scipy.sparse matrix")
    a = _as_numeric(a, name)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per row), got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} has {a.shape[0]} rows but {other} has {n}; lengths must match")
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float64)
    a = np.ascontiguousarray(a)
    check_finite(a, name)
    return a


def _check_ties(ties) -> str:
    if ties not in ("half", "error"):
        raise ValueError(f"ties must be 'half' or 'error', got {ties!r}")
    return ties


def _check_k(k) -> int:
    if k is None:
        return 0
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer or None (no cut-off), got {k!r}")
    return int(k)


def _check_group_ptr(group_ptr, n: int) -> np.ndarray:
    if group_ptr is None:
        return np.asarray([0, n] if n else [0], dtype=np.int64)
    gp = np.ascontiguousarray(group_ptr, dtype=np.int64)
    if gp.ndim != 1 or gp.shape[0] < 1 or gp[0] != 0 or gp[-1] != n or np.any(np.diff(gp) < 0):
        raise ValueError(
            f"group_ptr must be non-decreasing offsets from 0 to the number of rows ({n}); "
            f"got {gp if gp.size < 8 else str(gp[:4]) + '...'}"
        )
    return gp


# ------------------------------------------------------------ per-group core
def _ndcg_per_group(y, s, gp, k):
    out = np.empty(len(gp) - 1, dtype=np.float64)
    _k.ndcg_groups(y, s, gp, k, out)
    return out


def _disagreement_per_group(y, s, gp, tie_weight=0.5):
    g = len(gp) - 1
    disc = np.empty(g, dtype=np.int64)
    ties = np.empty(g, dtype=np.int64)
    pairs = np.empty(g, dtype=np.int64)
    _k.cindex_groups(y, s, gp, disc, ties, pairs)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (disc + tie_weight * ties) / pairs
    out[pairs == 0] = np.nan
    return out


def _ap_per_group(y, s, gp):
    out = np.empty(len(gp) - 1, dtype=np.float64)
    _k.average_precision_groups(y, s, gp, out)
    return out


class RankingEvaluator:
    """Accumulate ranking metrics over a stream of whole query groups.

    Parameters
    ----------
    k : int or None
        Cut-off of NDCG (None: the whole list).
    metrics : sequence of {"ndcg", "disagreement", "map"}
    ties : {"half", "error"}
        Weight of a pair tied in the scores in the disagreement error: 1/2
        (default, the C-index convention) or 1 (eq. (1) of Pahikkala et al.
        2009, where sign(0) = -1).
    keep_per_query : bool
        Keep one value per query (and the query ids) for ``per_query``.

    ``update`` takes the labels and scores of whole groups (or of pieces of
    a group, with ``group_size`` / ``group_offset`` as in
    :class:`~streamrank.Block`); ``merge`` adds another evaluator (for dask
    reductions); ``result`` returns a dict ``name -> MetricResult`` with
    names ``"ndcg@k"``, ``"disagreement"``, ``"map"``.
    """

    def __init__(self, k: int | None = 10, metrics: Iterable[str] = METRICS, *, keep_per_query=False,
                 ties: str = "half"):
        self.k = _check_k(k)
        self.ties = _check_ties(ties)
        metrics = tuple(metrics)
        bad = [m for m in metrics if m not in METRICS]
        if bad or not metrics:
            raise ValueError(f"metrics must be a non-empty subset of {METRICS}; got {metrics!r}")
        self.metrics = metrics
        self.keep_per_query = keep_per_query
        self._sum = {m: 0.0 for m in metrics}
        self._comp = {m: 0.0 for m in metrics}  # Neumaier compensation
        self._count = {m: 0 for m in metrics}
        self._skipped = {m: 0 for m in metrics}
        self._per_query = {m: [] for m in metrics}
        self._qids: list = []
        self._pending: dict = {}  # qid -> [size, rows seen, list of (offset, y, s)]
        self.n_rows = 0

    def _name(self, m):
        return f"ndcg@{self.k}" if (m == "ndcg" and self.k) else m

    def _add(self, m, values):
        ok = ~np.isnan(values)
        self._count[m] += int(ok.sum())
        self._skipped[m] += int((~ok).sum())
        v = float(np.sum(values[ok]))
        t = self._sum[m] + v
        if abs(self._sum[m]) >= abs(v):
            self._comp[m] += (self._sum[m] - t) + v
        else:
            self._comp[m] += (v - t) + self._sum[m]
        self._sum[m] = t
        if self.keep_per_query:
            self._per_query[m].append(values)

    def _evaluate_groups(self, y, s, gp, qid):
        if len(gp) <= 1:
            return
        for m in self.metrics:
            if m == "ndcg":
                vals = _ndcg_per_group(y, s, gp, self.k)
            elif m == "disagreement":
                vals = _disagreement_per_group(y, s, gp, 0.5 if self.ties == "half" else 1.0)
            else:
                vals = _ap_per_group(y, s, gp)
            self._add(m, vals)
        if self.keep_per_query:
            self._qids.append(np.asarray(qid, dtype=np.int64) if qid is not None
                              else np.full(len(gp) - 1, -1, dtype=np.int64))

    def update(self, y, score, group_ptr=None, *, qid=None, group_size=None, group_offset=None):
        """Add whole groups (rows of group g are ``group_ptr[g]:group_ptr[g+1]``).

        ``group_ptr=None`` means the rows form one group.  ``qid`` (one id per
        group) is only used for ``per_query`` output and for matching the
        pieces of split groups.  Returns ``self``.
        """
        y = _check_scores(y, None, "y_true").astype(np.float64, copy=False)
        s = _check_scores(score, y.shape[0], "y_score")
        gp = _check_group_ptr(group_ptr, y.shape[0])
        n_groups = len(gp) - 1
        self.n_rows += y.shape[0]
        if group_size is None:
            self._evaluate_groups(y, s, gp, qid)
            return self
        sizes = np.asarray(group_size, dtype=np.int64).reshape(-1)
        offs = (np.zeros(n_groups, dtype=np.int64) if group_offset is None
                else np.asarray(group_offset, np.int64).reshape(-1))
        if len(sizes) != n_groups or len(offs) != n_groups:
            raise ValueError(f"group_size and group_offset need one entry per group ({n_groups}); "
                             f"got {len(sizes)} and {len(offs)}")
        local = np.diff(gp)
        whole = (sizes == local) & (offs == 0)
        if whole.all():
            self._evaluate_groups(y, s, gp, qid)
            return self
        if qid is None:
            raise ValueError("pieces of split groups need qid to be matched across blocks")
        qid = np.asarray(qid, dtype=np.int64)
        # evaluate the runs of whole groups, buffer the pieces
        g = 0
        while g < n_groups:
            if whole[g]:
                h = g
                while h < n_groups and whole[h]:
                    h += 1
                r0, r1 = gp[g], gp[h]
                self._evaluate_groups(y[r0:r1], s[r0:r1], gp[g:h + 1] - r0, qid[g:h])
                g = h
                continue
            key = int(qid[g])
            r0, r1 = gp[g], gp[g + 1]
            entry = self._pending.setdefault(key, [int(sizes[g]), 0, []])
            entry[1] += int(r1 - r0)
            entry[2].append((int(offs[g]), y[r0:r1].copy(), s[r0:r1].copy()))
            if entry[1] > entry[0]:
                raise ValueError(f"group {key} received {entry[1]} rows, more than its size {entry[0]}")
            if entry[1] == entry[0]:
                pieces = sorted(entry[2], key=lambda p: p[0])
                yy = np.concatenate([p[1] for p in pieces])
                ss = np.concatenate([p[2] for p in pieces])
                del self._pending[key]
                self._evaluate_groups(yy, ss, np.asarray([0, len(yy)], np.int64), [key])
            g += 1
        return self

    def update_block(self, block, score):
        """Add a :class:`~streamrank.Block` with its predicted scores."""
        return self.update(block.y, score, block.group_ptr, qid=block.qid,
                           group_size=block.group_size, group_offset=block.group_offset)

    def merge(self, other: "RankingEvaluator") -> "RankingEvaluator":
        """Add the groups accumulated by ``other`` (same k and metrics)."""
        if other.k != self.k or other.metrics != self.metrics or other.ties != self.ties:
            raise ValueError("can only merge evaluators with the same k and metrics")
        for m in self.metrics:
            self._sum[m] += other._sum[m]
            self._comp[m] += other._comp[m]
            self._count[m] += other._count[m]
            self._skipped[m] += other._skipped[m]
            self._per_query[m].extend(other._per_query[m])
        self._qids.extend(other._qids)
        self.n_rows += other.n_rows
        for key, entry in other._pending.items():
            for off, yy, ss in entry[2]:
                self.update(yy, ss, None, qid=[key], group_size=[entry[0]], group_offset=[off])
                self.n_rows -= len(yy)  # already counted in other.n_rows
        return self

    def result(self) -> dict:
        """``{name: MetricResult}``; raises if a split group is still incomplete."""
        if self._pending:
            key, entry = next(iter(self._pending.items()))
            raise ValueError(f"group {key} is incomplete: {entry[1]} of {entry[0]} rows received")
        out = {}
        qid = np.concatenate(self._qids) if (self.keep_per_query and self._qids) else None
        for m in self.metrics:
            n = self._count[m]
            value = (self._sum[m] + self._comp[m]) / n if n else float("nan")
            pq = None
            if self.keep_per_query:
                pq = np.concatenate(self._per_query[m]) if self._per_query[m] else np.zeros(0)
            out[self._name(m)] = MetricResult(self._name(m), float(value), n, self._skipped[m], pq,
                                              qid if self.keep_per_query else None)
        return out


# ----------------------------------------------------------------- helpers
def _is_stream(obj) -> bool:
    from .io.blocks import Block, BlockSource

    if isinstance(obj, BlockSource):
        return True
    if isinstance(obj, (np.ndarray, list, tuple)) or sp.issparse(obj):
        return isinstance(obj, (list, tuple)) and len(obj) > 0 and isinstance(obj[0], Block)
    return hasattr(obj, "__next__") or (hasattr(obj, "__iter__") and not hasattr(obj, "__len__"))


def _score(scorer, X):
    if hasattr(scorer, "predict"):
        s = scorer.predict(X)
    elif callable(scorer):
        s = scorer(X)
    else:
        raise TypeError(f"scorer must have a predict method or be callable; got {type(scorer).__name__}")
    s = np.asarray(s)
    return s.reshape(-1) if (s.ndim == 2 and s.shape[1] == 1) else s


def _blocks_of(source, max_rows):
    from .io.blocks import BlockSource

    if isinstance(source, BlockSource):
        return source.blocks(max_rows=max_rows)
    return iter(source)


def _block_y(block, output):
    y = np.asarray(block.y)
    if y.ndim == 2:
        if output is None and y.shape[1] != 1:
            raise ValueError(f"the source has {y.shape[1]} outputs; pass output=<column> to choose one")
        y = y[:, output or 0]
    return y


def evaluate(source, scorer, k: int | None = 10, *, metrics=METRICS, max_rows: int = 100_000,
             output: int | None = None, keep_per_query: bool = False, ties: str = "half") -> dict:
    """Stream ``source`` once through ``scorer`` and return every metric.

    ``source``: a BlockSource (GroupStore, ``sr.as_source(...)``) or an
    iterable of Blocks; ``scorer``: fitted model or callable on ``block.X``.
    Returns ``{name: MetricResult}`` as :meth:`RankingEvaluator.result`.
    """
    ev = RankingEvaluator(k, metrics, keep_per_query=keep_per_query, ties=ties)
    for block in _blocks_of(source, max_rows):
        s = _score(scorer, block.X)
        if s.ndim == 2 and output is not None:
            s = s[:, output]
        ev.update(_block_y(block, output), s, block.group_ptr, qid=block.qid,
                  group_size=block.group_size, group_offset=block.group_offset)
    return ev.result()


def _finish(res: MetricResult, per_query: bool, return_details: bool):
    if per_query:
        return res.per_query
    if return_details:
        return res
    return res.value


def _ranking_metric(metric, y_true, y_score, qid, k, per_query, return_details, max_rows, output,
                    ties="half"):
    keep = per_query or return_details
    if _is_stream(y_true):
        if qid is not None:
            raise TypeError(f"{metric}(source, scorer, ...) takes no qid: the source carries the groups")
        res = evaluate(y_true, y_score, k, metrics=(metric,), max_rows=max_rows, output=output,
                       keep_per_query=keep, ties=ties)
        return _finish(next(iter(res.values())), per_query, return_details)
    y = _check_scores(y_true, None, "y_true").astype(np.float64, copy=False)
    n = y.shape[0]
    s = _check_scores(y_score, n, "y_score")
    if qid is None:
        gp, gq = _check_group_ptr(None, n), np.zeros(1 if n else 0, dtype=np.int64)
    else:
        gp, gq = group_ptr_from_qid(check_qid(qid, n, "qid"), "qid")
    ev = RankingEvaluator(k, (metric,), keep_per_query=keep, ties=ties)
    ev.update(y, s, gp, qid=gq)
    return _finish(next(iter(ev.result().values())), per_query, return_details)


# -------------------------------------------------------------- public API
def ndcg(y_true, y_score, qid=None, k: int | None = 10, *, per_query: bool = False,
         return_details: bool = False, max_rows: int = 100_000, output: int | None = None):
    """Mean NDCG@k over queries.

    ``DCG@k = sum_{r=1}^{k} (2^{rel_r} - 1) / log2(r + 1)`` in the predicted
    order, ``NDCG@k = DCG@k / IDCG@k`` (IDCG: the ideal order).  Queries with
    ``IDCG@k <= 0`` are skipped (see ``return_details``): no relevant item,
    or only negative labels in the ideal top k (a negative label has a
    negative gain).  NDCG never exceeds 1; it is negative only when negative
    labels lead the predicted order.  Ties in
    ``y_score``: expected DCG over random orders of the tied items.

    Parameters
    ----------
    y_true : array (rows,) of graded relevance, or a block source/iterable
    y_score : array (rows,) of predicted scores, or a scorer (with a source)
    qid : array (rows,) of query ids (rows of a query contiguous), or None
        for one global group
    k : int or None
        Cut-off (None: whole list).
    per_query : bool
        Return the per-query values (NaN where skipped) instead.
    return_details : bool
        Return a :class:`MetricResult` instead of a float.
    max_rows, output :
        Block budget and output column when ``y_true`` is a source.
    """
    return _ranking_metric("ndcg", y_true, y_score, qid, k, per_query, return_details, max_rows, output)


def disagreement(y_true, y_score, qid=None, *, per_query: bool = False, return_details: bool = False,
                 max_rows: int = 100_000, output: int | None = None, ties: str = "half"):
    """Mean over queries of ``1 - C-index`` (disagreement error).

    For a query, ``(#{y_i < y_j, s_i > s_j} + w #{y_i < y_j, s_i = s_j}) /
    #{y_i < y_j}`` with ``w = 1/2`` (``ties="half"``, the C-index / AUC
    convention, default) or ``w = 1`` (``ties="error"``: eq. (1) of
    Pahikkala et al. 2009 exactly, where sign(0) = -1 makes a tie an error).
    Queries without an ordered pair are skipped.  O(n log n) per query
    (Fenwick tree).  Other arguments as :func:`ndcg`.
    """
    return _ranking_metric("disagreement", y_true, y_score, qid, None, per_query, return_details,
                           max_rows, output, _check_ties(ties))


def mean_average_precision(y_true, y_score, qid=None, *, per_query: bool = False,
                           return_details: bool = False, max_rows: int = 100_000,
                           output: int | None = None):
    """Mean over queries of average precision, relevance ``y > 0``.

    ``AP = sum_t (R_t - R_{t-1}) P_t`` over distinct score thresholds t in
    decreasing order (tied items enter together; without ties this is the
    mean of precision@rank over the relevant items).  Queries without a
    relevant item are skipped.  Arguments as :func:`ndcg`.
    """
    return _ranking_metric("map", y_true, y_score, qid, None, per_query, return_details,
                           max_rows, output)


def _auc_1d(y, s, column=None):
    pos = (y > 0).astype(np.float64)
    n_pos = int(pos.sum())
    if n_pos == 0 or n_pos == len(pos):
        where = "" if column is None else f" in column {column}"
        raise ValueError(f"auc needs both positive (y > 0) and negative rows in y_true{where}; "
                         f"got {n_pos} positive of {len(pos)}")
    wrong, pairs = _k.auc_counts(pos > 0, s)
    return 1.0 - wrong / pairs


def auc(y_true, y_score, *, max_rows: int = 100_000):
    """Area under the ROC curve of one global group (positive: ``y > 0``).

    ``AUC = (#{s_pos > s_neg} + 0.5 #{s_pos = s_neg}) / (n_pos n_neg)`` over
    all (positive, negative) pairs, O(n log n).  With 2-D ``y_true`` and
    ``y_score`` (rows, outputs): one AUC per column (ndarray).

    ``auc(source, scorer)`` streams a block source; it keeps the labels and
    scores (16 bytes a row per output) because AUC compares every pair.
    """
    if _is_stream(y_true):
        ys, ss = [], []
        for block in _blocks_of(y_true, max_rows):
            ys.append(np.asarray(block.y, dtype=np.float64))
            ss.append(np.asarray(_score(y_score, block.X), dtype=np.float64))
        if not ys:
            raise ValueError("auc: the source yielded no rows")
        return auc(np.concatenate(ys), np.concatenate(ss))
    y = _as_numeric(y_true, "y_true")
    if y.ndim == 2:
        s = _as_numeric(y_score, "y_score")
        if s.shape != y.shape:
            raise ValueError(f"y_score has shape {s.shape} but y_true has {y.shape}; shapes must match")
        check_finite(np.asarray(y, dtype=np.float64), "y_true")
        return np.asarray([
            _auc_1d(np.ascontiguousarray(y[:, j], dtype=np.float64),
                    _check_scores(s[:, j], y.shape[0], f"y_score[:, {j}]"), j)
            for j in range(y.shape[1])
        ])
    y = _check_scores(y, None, "y_true").astype(np.float64, copy=False)
    s = _check_scores(y_score, y.shape[0], "y_score")
    return _auc_1d(y, s)


def tuple_error(score_pos, score_neg, *, batch_size: int = 8192) -> float:
    """Fraction of tuples with ``score_pos <= score_neg`` (a tie is an error).

    ``score_pos[i] = f(q_i, d+_i)``, ``score_neg[i] = f(q_i, d-_i)``; the
    test error of the sparse-SGD paper (Chen et al., ICDM 2010, §IV.A).  NaN
    for no tuples.

    Out of core: ``tuple_error(tuple_source, model)`` streams a TupleStore
    (or any object with ``batches``) in order and scores each batch with
    ``model.score(Q, D)`` (row-aligned) or a callable ``model(Q, D)``.
    """
    if hasattr(score_pos, "batches") and not isinstance(score_pos, np.ndarray):
        score = score_neg.score if hasattr(score_neg, "score") else score_neg
        if not callable(score):
            raise TypeError("tuple_error(source, model): model needs a score(Q, D) method or must be callable")
        wrong = total = 0
        for b in score_pos.batches(batch_size=batch_size, shuffle_buffer=0):
            sp_ = _check_scores(np.asarray(score(b.Q, b.D_pos)).reshape(-1), None, "score(Q, D_pos)")
            sn_ = _check_scores(np.asarray(score(b.Q, b.D_neg)).reshape(-1), len(sp_), "score(Q, D_neg)",
                                "score(Q, D_pos)")
            wrong += int(np.count_nonzero(sp_ <= sn_))
            total += len(sp_)
        return wrong / total if total else float("nan")
    p = _check_scores(score_pos, None, "score_pos")
    m = _check_scores(score_neg, p.shape[0], "score_neg", "score_pos")
    if p.shape[0] == 0:
        return float("nan")
    return float(np.count_nonzero(p <= m)) / p.shape[0]


def class_retrieval_map(score_matrix, Q, y_q, D, y_d, *, batch_size: int = 256,
                        return_details: bool = False):
    """MAP of class retrieval: each query ranks all items; relevant = same class.

    The MAP of the sparse-SGD paper (Chen et al., ICDM 2010, §IV.A, e.g. 20
    Newsgroups test documents ranking the training documents).
    ``score_matrix(Q_batch, D)`` returns the (batch, items) score matrix (for
    a bilinear model ``Q_batch @ W @ D.T``).  Queries are scored
    ``batch_size`` at a time, so memory is ``batch_size x items`` floats.
    Average precision per query as :func:`mean_average_precision` (ties
    enter together); queries whose class has no item are skipped.
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
