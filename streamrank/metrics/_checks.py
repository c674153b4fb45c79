"""The conventions of the ranking metrics and the checks at their boundary.

Everything here runs before a kernel sees the data: options are checked and
turned into the kernels' plain values, arrays become C-contiguous writeable
float64 (one compiled variant per kernel), the trec_eval order becomes
strict scores, and judgments (``qrels``) become per-group ideal labels.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .._validation import _as_numeric, check_finite

GAINS = ("exp2", "linear")
EMPTIES = ("skip", "zero", "one")
TIES = ("expected", "trec")


@dataclass(frozen=True, eq=False)
class MetricResult:
    """A metric averaged over queries, with what was averaged.

    Attributes
    ----------
    name : str
        The metric's name as parsed (``"ndcg@10"``).
    value : float
        Mean over the ``n_queries`` evaluated queries (NaN if none).
    n_queries : int
        Queries that entered the mean.
    n_skipped : int
        Queries skipped: no relevant item with ``empty="skip"``, not in the
        ``qrels``, or (disagreement) no ordered pair.
    per_query : ndarray or None
        One value per query in input order (NaN where skipped), when kept.
    qid : ndarray or None
        The original query id of each entry of ``per_query``.
    """

    name: str
    value: float
    n_queries: int
    n_skipped: int
    per_query: np.ndarray | None = field(default=None, repr=False)
    qid: np.ndarray | None = field(default=None, repr=False)

    def __float__(self) -> float:
        return float(self.value)

    def by_qid(self) -> dict:
        """``{original qid: value}`` of the evaluated queries (skipped ones left out)."""
        if self.per_query is None:
            raise ValueError("per-query values were not kept; ask for return_details=True")
        out: dict = {}
        seen: set = set()
        for q, v in zip(self.qid, self.per_query):
            q = q.item() if hasattr(q, "item") else q
            if q in seen:
                # a query that recurs in another batch is another group (streamrank.io.groups)
                raise ValueError(f"query id {q!r} is more than one group (it recurs in another batch of the "
                                 "store); use .qid and .per_query, one entry per group in store order")
            seen.add(q)
            if not np.isnan(v):
                out[q] = float(v)
        return out


def check_option(value, allowed, name):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}")
    return value


def reject_source(obj, fn):
    """The array metrics take arrays; point a block source to :func:`evaluate`."""
    if hasattr(obj, "blocks") or hasattr(obj, "batches") or hasattr(obj, "__next__") or (
            isinstance(obj, (list, tuple)) and obj and hasattr(obj[0], "group_ptr")):
        raise TypeError(f"metrics.{fn} takes arrays (y_true, y_score, qid); to stream a source through "
                        f"a model use metrics.evaluate(source, model, metrics=[...])")


def as_vector(a, n, name, other="y_true", per="row"):
    """A dense 1-D numeric array (a (rows, 1) column is taken as 1-D) of length ``n`` when given."""
    if sp.issparse(a):
        raise TypeError(f"{name} must be a dense 1-D array, got a scipy.sparse matrix")
    a = _as_numeric(a, name)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per {per}), got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} has {a.shape[0]} rows but {other} has {n}; lengths must match")
    return a


def check_scores(a, n, name, other="y_true"):
    """1-D finite values as C-contiguous writeable float64 (float32 converts exactly)."""
    a = np.require(as_vector(a, n, name, other), dtype=np.float64, requirements=["C", "W"])
    check_finite(a, name)
    return a


def check_group_ptr(group_ptr, n):
    if group_ptr is None:
        return np.asarray([0, n] if n else [0], dtype=np.int64)
    gp = np.require(np.asarray(group_ptr), dtype=np.int64, requirements=["C", "W"])
    if gp.ndim != 1 or gp.shape[0] < 1 or gp[0] != 0 or gp[-1] != n or np.any(np.diff(gp) < 0):
        raise ValueError(
            f"group_ptr must be non-decreasing offsets from 0 to the number of rows ({n}); "
            f"got {gp if gp.size < 8 else str(gp[:4]) + '...'}"
        )
    return gp


def check_doc_ids(doc_ids, n):
    if doc_ids is None:
        return None
    d = np.asarray(doc_ids)
    if d.ndim != 1 or d.shape[0] != n:
        raise ValueError(f"doc_ids must be 1-D with one id per row ({n} rows); got shape {d.shape}")
    return d


def _byte_words(ids):
    """Doc ids as rows of uint64 words, compared row by row in ``strcmp`` order.

    Text ids (numpy ``U``: UCS-4 code points) pack two code points a word --
    code-point order is the byte order of their UTF-8 encoding, which is what
    trec_eval's ``strcmp`` compares; byte ids (``S``) pack eight bytes a word,
    big-endian.  Padding is 0, so an id that is a prefix of another sorts
    first, as its terminating NUL does.
    """
    ids = np.ascontiguousarray(ids)
    n = ids.shape[0]
    if ids.dtype.kind == "U":
        width = max(ids.dtype.itemsize // 4, 1)
        cps = np.zeros((n, width + width % 2), dtype=np.uint64)
        if n and ids.dtype.itemsize:
            cps[:, :width] = ids.view(np.uint32).reshape(n, width)
        return np.ascontiguousarray((cps[:, 0::2] << np.uint64(32)) | cps[:, 1::2])
    width = max(ids.dtype.itemsize, 1)
    buf = np.zeros((n, -(-width // 8) * 8), dtype=np.uint8)
    if n and ids.dtype.itemsize:
        buf[:, :width] = ids.view(np.uint8).reshape(n, width)
    return np.ascontiguousarray(buf.view(">u8").astype(np.uint64))


def trec_scores(s, gp, doc_ids, group_qid=None):
    """Distinct scores that order each group as trec_eval does.

    trec_eval (``form_res_rels.c``, ``comp_sim_docno``) sorts a query's
    results by score descending and breaks ties by document id descending
    (``strcmp`` of the ids' bytes; ids that are not strings are compared as
    their ``str``).  The rank column of a run file plays no part.  Returns
    float64 ranks, higher = earlier; raises on a document id that appears
    twice in a query (trec_eval refuses such a run too).
    """
    from . import _kernels

    ids = doc_ids if doc_ids.dtype.kind in "US" else doc_ids.astype(str)
    out = np.empty(s.shape[0], dtype=np.float64)
    words = _byte_words(ids)
    row = _kernels.trec_rank_groups(s, words, gp, out)
    if row >= 0:
        g = int(np.searchsorted(gp, row, side="right") - 1)
        q = group_qid[g] if group_qid is not None else g
        raise ValueError(f"document id {str(ids[row])!r} appears twice in query {q}; "
                         "ties='trec' needs distinct doc_ids within a query")
    return out


def normalize_qrels(qrels):
    """``{qid: {doc_id: rel}}`` or ``{qid: labels}`` -> ``{str(qid): float64 labels}``."""
    out = {}
    for q, judged in qrels.items():
        vals = list(judged.values()) if hasattr(judged, "values") else judged
        arr = np.asarray(vals, dtype=np.float64).reshape(-1)
        check_finite(arr, f"qrels[{q!r}]")
        out[str(q)] = arr
    return out


def ideal_labels(y, gp, group_qid, qrels):
    """Per-group ideal labels and relevant counts.

    Without qrels the ideal is the group's own rows.  With qrels (normalised,
    keys compared as strings as trec_eval does) it is the judged labels of
    the query; a query absent from the qrels gets ``n_rel = -1`` (skipped,
    as trec_eval leaves out a query it has no judgments for).
    """
    if qrels is None:
        pos = np.concatenate(([0], np.cumsum(y > 0)))
        return y, gp, (pos[gp[1:]] - pos[gp[:-1]]).astype(np.int64)
    parts, sizes, n_rel = [], [], []
    for q in group_qid:
        key = str(q.item() if hasattr(q, "item") else q)
        lab = qrels.get(key)
        if lab is None:
            parts.append(np.zeros(0))
            sizes.append(0)
            n_rel.append(-1)
        else:
            parts.append(lab)
            sizes.append(lab.shape[0])
            n_rel.append(int(np.count_nonzero(lab > 0)))
    iy = np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros(0), dtype=np.float64)
    igp = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return iy, igp, np.asarray(n_rel, dtype=np.int64)


def apply_empty(values, n_rel, empty):
    """Queries without a relevant item get NaN (skip), 0 or 1; unjudged queries stay NaN."""
    values = values.copy()
    none = n_rel == 0
    values[none] = np.nan if empty == "skip" else (0.0 if empty == "zero" else 1.0)
    values[n_rel < 0] = np.nan
    return values
