"""Accumulate ranking metrics over a stream of whole query groups.

:class:`RankingEvaluator` is the one place where per-group values are
computed (by the kernels), put through the ``empty`` convention and summed;
the array functions, :func:`~streamrank.metrics.evaluate`, the CLI and the
dask reductions all feed it.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from .._metric_names import KINDS, check_k, metric_name, parse_metrics  # noqa: F401 - re-exported
from . import _kernels as _k
from ._checks import (EMPTIES, GAINS, TIES, MetricResult, apply_empty, as_vector, check_doc_ids, check_group_ptr,
                      check_option, check_scores, ideal_labels, normalize_qrels, trec_scores)

METRICS = ("ndcg", "disagreement", "map")
_DISAGREEMENT_TIES = {"half": 0.5, "expected": 0.5, "error": 1.0}
#: the metrics that have a weighted form (``sample_weight=`` / ``RankingEvaluator(weighted=True)``)
WEIGHTED_KINDS = ("ndcg", "disagreement")


def check_sample_weight(weight, n, name="sample_weight"):
    """Row weights as C-contiguous writeable float64 (n,): finite and >= 0, else an error naming the row."""
    from ..laplacian import check_weight

    if weight is None:
        raise ValueError(f"this evaluator is weighted: pass {name} (one weight per row) with every update")
    return np.require(check_weight(as_vector(weight, n, name), n, name), dtype=np.float64,
                      requirements=["C", "W"])


def per_group_values(kind, y, s, gp, ks, *, gain="exp2", max_grade=4.0, iy=None, igp=None, n_rel=None,
                     disagreement_tie=0.5, w=None, mass=None):
    """(groups, len(ks)) values of one metric, NaN where a group has no relevant item.

    ``w``: row weights (ndcg, disagreement only).  ``mass`` (float64, one per
    group, weighted disagreement only) receives each group's weight in the
    mean over queries: its mean pair weight ``sum w_i w_j / #pairs``.
    """
    g = len(gp) - 1
    karr = np.asarray(ks, dtype=np.int64)
    out = np.empty((g, len(ks)))
    if iy is None:
        iy, igp, n_rel = ideal_labels(y, gp, None, None)
    if w is not None and kind not in WEIGHTED_KINDS:
        raise ValueError(f"{kind} has no weighted form; weighted metrics: {', '.join(WEIGHTED_KINDS)}")
    exp2 = gain == "exp2"
    if kind == "ndcg":
        _k.ndcg_groups(y, s, gp, iy, igp, karr, exp2, out, w=w)
    elif kind == "err":
        if y.size and (y.min() < 0 or y.max() > max_grade):
            raise ValueError(f"err: labels must lie in [0, max_grade={max_grade:g}]; y_true holds "
                             f"{y.min():g}..{y.max():g} (set max_grade to the top of the grading scale)")
        _k.err_groups(y, s, gp, karr, exp2, float(max_grade), out)
        out[np.isnan(out) & (n_rel[:, None] > 0)] = 0.0      # relevant items judged, none retrieved
    elif kind == "map":
        _k.average_precision_groups(y, s, gp, n_rel, karr, out)
    elif kind in ("precision", "recall"):
        _k.hits_groups(y, s, gp, karr, out)
        with np.errstate(invalid="ignore", divide="ignore"):
            if kind == "precision":
                out /= np.where(karr[None, :] > 0, karr[None, :], np.maximum(np.diff(gp), 1)[:, None])
            else:
                out /= n_rel[:, None]
        out[n_rel <= 0] = np.nan
    elif kind == "rr":
        _k.reciprocal_rank_groups(y, s, gp, karr, out)
        out[np.isnan(out) & (n_rel[:, None] > 0)] = 0.0
    elif w is None:
        disc, ties, pairs = (np.empty(g, dtype=np.int64) for _ in range(3))
        _k.cindex_groups(y, s, gp, disc, ties, pairs)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, 0] = (disc + disagreement_tie * ties) / pairs
        out[pairs == 0, 0] = np.nan
    else:
        disc, ties, pairs, count = (np.empty(g) for _ in range(4))
        _k.cindex_groups(y, s, gp, disc, ties, pairs, w=w, count=count)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, 0] = (disc + disagreement_tie * ties) / pairs
            if mass is not None:
                mass[:] = pairs / count
        out[pairs <= 0, 0] = np.nan
        if mass is not None:
            mass[pairs <= 0] = 0.0
    return out


class RankingEvaluator:
    """Accumulate ranking metrics over a stream of whole query groups.

    Parameters
    ----------
    k : int or None
        Cut-off of a bare ``ndcg``/``err``/``p``/``recall`` (None: the whole list).
    metrics : str or sequence of str
        Names as :func:`parse_metrics` reads them (``"ndcg@1,3,10"``,
        ``"map"``, ``"mrr"``, ``"p@10"``, ``"recall@100"``, ``"err@10"``,
        ``"disagreement"``); default ``("ndcg", "disagreement", "map")``.
    gain, empty, ties, max_grade, qrels :
        As in :mod:`streamrank.metrics` (``ties="trec"`` needs ``doc_ids`` in
        every :meth:`update`).
    disagreement_ties : {"half", "error"}
        Weight of a pair tied in the scores in the disagreement error: 1/2
        (the C-index convention, the expected value) or 1 (eq. (1) of
        Pahikkala et al. 2009, where sign(0) = -1).
    keep_per_query : bool
        Keep one value per query (and the query ids) for ``per_query``.
    weighted : bool
        Score with row weights (``ndcg`` and ``disagreement`` only): every
        :meth:`update` takes ``weight=`` (one per row) and
        :meth:`update_block` reads ``block.weight``; an unweighted evaluator
        ignores ``block.weight``.  Definitions and the mean over queries as
        :func:`~streamrank.metrics.ndcg` / :func:`~streamrank.metrics.disagreement`
        with ``sample_weight``.

    Notes
    -----
    ``update`` takes the labels and scores of whole groups (or of pieces of
    a group, with ``group_size`` / ``group_offset`` as in
    :class:`~streamrank.Block`); ``merge`` adds another evaluator (for dask
    reductions); ``result`` returns a dict ``name -> MetricResult``.
    """

    def __init__(self, k: int | None = 10, metrics: Iterable[str] | str = METRICS, *, keep_per_query=False,
                 gain: str = "exp2", empty: str = "skip", ties: str = "expected", max_grade: float = 4.0,
                 qrels=None, disagreement_ties: str = "half", weighted: bool = False):
        self.k = k
        self.specs = parse_metrics(metrics, k)
        self.weighted = bool(weighted)
        if self.weighted:
            other = [kind for kind, _ in self.specs if kind not in WEIGHTED_KINDS]
            if other:
                raise ValueError(f"weighted=True: {other[0]} has no weighted form; weighted metrics: "
                                 f"{', '.join(WEIGHTED_KINDS)}")
            if qrels is not None:
                raise ValueError("weighted=True with qrels: judged documents carry no row weights; the weighted "
                                 "ideal DCG is of the query's own rows")
        self.gain = check_option(gain, GAINS, "gain")
        self.empty = check_option(empty, EMPTIES, "empty")
        self.ties = check_option(ties, TIES, "ties")
        self.disagreement_ties = check_option(disagreement_ties, tuple(_DISAGREEMENT_TIES), "ties")
        if not (isinstance(max_grade, (int, float, np.integer, np.floating)) and max_grade > 0):
            raise ValueError(f"max_grade must be a positive number, got {max_grade!r}")
        self.max_grade = float(max_grade)
        self.qrels = normalize_qrels(qrels) if qrels is not None else None
        self.keep_per_query = keep_per_query
        self.names = [metric_name(kind, kk) for kind, ks in self.specs for kk in ks]
        self._sum = dict.fromkeys(self.names, 0.0)
        self._comp = dict.fromkeys(self.names, 0.0)  # Neumaier compensation
        self._count = dict.fromkeys(self.names, 0)
        self._mass = dict.fromkeys(self.names, 0.0)    # weight of the mean over queries (weighted disagreement)
        self._mass_comp = dict.fromkeys(self.names, 0.0)
        self._skipped = dict.fromkeys(self.names, 0)
        self._per_query = {m: [] for m in self.names}
        self._qids: list = []
        self._pending: dict = {}  # qid -> [size, rows seen, list of (offset, y, s, doc_ids, weight)]
        self.n_rows = 0

    @property
    def metrics(self):
        return tuple(kind for kind, _ in self.specs)

    def _options(self):
        return (self.specs, self.gain, self.empty, self.ties, self.max_grade, self.disagreement_ties,
                self.qrels is None, self.weighted)

    @staticmethod
    def _neumaier(total, comp, m, v):
        t = total[m] + v
        if abs(total[m]) >= abs(v):
            comp[m] += (total[m] - t) + v
        else:
            comp[m] += (v - t) + total[m]
        total[m] = t

    def _add(self, m, values, mass=None):
        """Add per-group ``values`` (NaN: skipped); ``mass``: each group's weight in the mean (default 1)."""
        ok = ~np.isnan(values)
        self._count[m] += int(ok.sum())
        self._skipped[m] += int((~ok).sum())
        if mass is None:
            self._neumaier(self._sum, self._comp, m, float(np.sum(values[ok])))
        else:
            self._neumaier(self._sum, self._comp, m, float(np.sum(values[ok] * mass[ok])))
            self._neumaier(self._mass, self._mass_comp, m, float(np.sum(mass[ok])))
        if self.keep_per_query:
            self._per_query[m].append(values)

    def _evaluate_groups(self, y, s, gp, qid, doc_ids, w=None):
        if len(gp) <= 1:
            return
        gq = (np.asarray(qid) if qid is not None else np.full(len(gp) - 1, -1, dtype=np.int64))
        if self.ties == "trec":
            if doc_ids is None:
                raise ValueError("ties='trec' orders tied scores by document id: pass doc_ids")
            s = trec_scores(s, gp, doc_ids, gq)
        if self.qrels is not None and qid is None:
            raise ValueError("qrels are matched by query id: pass qid")
        iy, igp, n_rel = ideal_labels(y, gp, gq, self.qrels)
        if w is not None:          # a relevant item of weight 0 is not there for the weighted DCG
            pos = np.concatenate(([0], np.cumsum((y > 0) & (w > 0))))
            n_rel = (pos[gp[1:]] - pos[gp[:-1]]).astype(np.int64)
        for kind, ks in self.specs:
            mass = np.empty(len(gp) - 1) if (w is not None and kind == "disagreement") else None
            vals = per_group_values(kind, y, s, gp, ks, gain=self.gain, max_grade=self.max_grade, iy=iy,
                                    igp=igp, n_rel=n_rel,
                                    disagreement_tie=_DISAGREEMENT_TIES[self.disagreement_ties], w=w, mass=mass)
            for j, kk in enumerate(ks):
                v = vals[:, j] if kind == "disagreement" else apply_empty(vals[:, j], n_rel, self.empty)
                self._add(metric_name(kind, kk), v, mass)
        if self.keep_per_query:
            self._qids.append(gq)

    def update(self, y, score, group_ptr=None, *, qid=None, group_size=None, group_offset=None, doc_ids=None,
               weight=None):
        """Add whole groups (rows of group g are ``group_ptr[g]:group_ptr[g+1]``).

        ``group_ptr=None`` means the rows form one group.  ``qid`` (one id per
        group) keys ``per_query``, matches the pieces of split groups and the
        ``qrels``; ``doc_ids`` (one per row) are needed with ``ties="trec"``;
        ``weight`` (one per row, finite, >= 0) is required by a ``weighted``
        evaluator and refused by an unweighted one.  Returns ``self``.
        """
        y = check_scores(y, None, "y_true")
        s = check_scores(score, y.shape[0], "y_score")
        gp = check_group_ptr(group_ptr, y.shape[0])
        doc_ids = check_doc_ids(doc_ids, y.shape[0])
        if self.weighted:
            w = check_sample_weight(weight, y.shape[0], "weight")
        elif weight is not None:
            raise ValueError("weight given to an unweighted RankingEvaluator; build it with weighted=True")
        else:
            w = None
        n_groups = len(gp) - 1
        self.n_rows += y.shape[0]
        if group_size is None:
            self._evaluate_groups(y, s, gp, qid, doc_ids, w)
            return self
        sizes = np.asarray(group_size, dtype=np.int64).reshape(-1)
        offs = (np.zeros(n_groups, dtype=np.int64) if group_offset is None
                else np.asarray(group_offset, np.int64).reshape(-1))
        if len(sizes) != n_groups or len(offs) != n_groups:
            raise ValueError(f"group_size and group_offset need one entry per group ({n_groups}); "
                             f"got {len(sizes)} and {len(offs)}")
        whole = (sizes == np.diff(gp)) & (offs == 0)
        if whole.all():
            self._evaluate_groups(y, s, gp, qid, doc_ids, w)
            return self
        if qid is None:
            raise ValueError("pieces of split groups need qid to be matched across blocks")
        qid = np.asarray(qid)
        g = 0
        while g < n_groups:
            if whole[g]:
                h = g
                while h < n_groups and whole[h]:
                    h += 1
                r0, r1 = gp[g], gp[h]
                self._evaluate_groups(y[r0:r1], s[r0:r1], gp[g:h + 1] - r0, qid[g:h],
                                      None if doc_ids is None else doc_ids[r0:r1], None if w is None else w[r0:r1])
                g = h
                continue
            self._add_piece(qid[g], int(sizes[g]), int(offs[g]), y[gp[g]:gp[g + 1]], s[gp[g]:gp[g + 1]],
                            None if doc_ids is None else doc_ids[gp[g]:gp[g + 1]],
                            None if w is None else w[gp[g]:gp[g + 1]])
            g += 1
        return self

    def _add_piece(self, key, size, offset, y, s, doc_ids, w=None):
        key = key.item() if hasattr(key, "item") else key
        entry = self._pending.setdefault(key, [size, 0, []])
        entry[1] += len(y)
        entry[2].append((offset, y.copy(), s.copy(), None if doc_ids is None else doc_ids.copy(),
                         None if w is None else w.copy()))
        if entry[1] > entry[0]:
            raise ValueError(f"group {key} received {entry[1]} rows, more than its size {entry[0]}")
        if entry[1] == entry[0]:
            pieces = sorted(entry[2], key=lambda p: p[0])
            del self._pending[key]
            ids = None if pieces[0][3] is None else np.concatenate([p[3] for p in pieces])
            yy = np.concatenate([p[1] for p in pieces])
            ww = None if pieces[0][4] is None else np.concatenate([p[4] for p in pieces])
            self._evaluate_groups(yy, np.concatenate([p[2] for p in pieces]),
                                  np.asarray([0, len(yy)], np.int64), np.asarray([key]), ids, ww)

    def update_block(self, block, score, y=None):
        """Add a :class:`~streamrank.Block` with its predicted scores (``y``: the labels to use, default
        ``block.y``); a ``weighted`` evaluator reads ``block.weight`` (an error naming the remedy when the
        block has none)."""
        w = None
        if self.weighted:
            w = getattr(block, "weight", None)
            if w is None:
                raise ValueError("a weighted RankingEvaluator needs blocks with row weights (block.weight is None): "
                                 "wrap the source with streamrank.io.weighted.with_weights / ips_weighted")
        return self.update(block.y if y is None else y, score, block.group_ptr, qid=block.qid,
                           group_size=block.group_size, group_offset=block.group_offset, weight=w)

    def merge(self, other: "RankingEvaluator") -> "RankingEvaluator":
        """Add the groups accumulated by ``other`` (same metrics and options)."""
        if other._options() != self._options():
            raise ValueError("can only merge evaluators with the same metrics and options")
        for m in self.names:
            self._sum[m] += other._sum[m]
            self._comp[m] += other._comp[m]
            self._count[m] += other._count[m]
            self._mass[m] += other._mass[m]
            self._mass_comp[m] += other._mass_comp[m]
            self._skipped[m] += other._skipped[m]
            self._per_query[m].extend(other._per_query[m])
        self._qids.extend(other._qids)
        self.n_rows += other.n_rows
        for key, entry in other._pending.items():
            for off, yy, ss, ids, ww in entry[2]:
                self._add_piece(key, entry[0], off, yy, ss, ids, ww)
        return self

    def result(self) -> dict:
        """``{name: MetricResult}``; raises if a split group is still incomplete."""
        if self._pending:
            key, entry = next(iter(self._pending.items()))
            raise ValueError(f"group {key} is incomplete: {entry[1]} of {entry[0]} rows received")
        out = {}
        qid = np.concatenate(self._qids) if (self.keep_per_query and self._qids) else None
        for m in self.names:
            n = self._count[m]
            weighted_mean = self.weighted and m.startswith("disagreement")
            den = (self._mass[m] + self._mass_comp[m]) if weighted_mean else n
            value = (self._sum[m] + self._comp[m]) / den if (n and den > 0) else float("nan")
            pq = None
            if self.keep_per_query:
                pq = np.concatenate(self._per_query[m]) if self._per_query[m] else np.zeros(0)
            out[m] = MetricResult(m, float(value), n, self._skipped[m], pq,
                                  (qid if qid is not None else np.zeros(0, np.int64)) if self.keep_per_query
                                  else None)
        return out


def array_metric(kind, fn, y_true, y_score, qid, k, *, per_query=False, return_details=False, doc_ids=None,
                 sample_weight=None, **options):
    """Evaluate one metric on arrays (the body of every public array metric)."""
    from ._checks import reject_source
    from .._validation import check_qid, group_ptr_from_qid

    reject_source(y_true, fn)
    ks, as_list = check_k(k)
    y = check_scores(y_true, None, "y_true")
    n = y.shape[0]
    s = check_scores(y_score, n, "y_score")
    if qid is None:
        gp, gq = check_group_ptr(None, n), np.zeros(1 if n else 0, dtype=np.int64)
    else:
        gp, gq = group_ptr_from_qid(check_qid(qid, n, "qid"), "qid")
    keep = per_query or return_details
    w = None if sample_weight is None else check_sample_weight(sample_weight, n)
    ev = RankingEvaluator(None, [metric_name(kind, kk) for kk in ks], keep_per_query=keep,
                          weighted=w is not None, **options)
    ev.update(y, s, gp, qid=gq, doc_ids=doc_ids, weight=w)
    res = ev.result()

    def finish(r):
        return r.per_query if per_query else (r if return_details else r.value)

    if as_list:
        return {kk: finish(res[metric_name(kind, _one)]) for kk, _one in zip(dict.fromkeys(k), ks)}
    return finish(res[metric_name(kind, ks[0])])
