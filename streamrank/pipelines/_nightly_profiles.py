"""Nightly data checks, the profiles: a day's statistics fed chunk by chunk in the pass that ingests it.

:class:`DayProfile` (scored groups) keeps per-feature moments and zero counts
(:class:`streamrank.normalize.FeatureMoments`), label counts, rows and groups, a content hash per
group with two labels or more (:func:`streamrank.io.fingerprints.row_fingerprints`, summed over the
group's rows: the same whatever the query id or the order of the rows), and the current model's
NDCG@k and disagreement on a bottom-k sample of the groups by hash (:data:`AGREEMENT_GROUPS`).
:class:`TupleProfile` is the same for (query, better, worse) tuples.  The checks themselves are in
:mod:`streamrank.pipelines._nightly_check_rules`.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

__all__ = ["DayProfile", "TupleProfile", "fingerprints", "row_hashes", "AGREEMENT_GROUPS"]

_MAX_LABEL_VALUES = 64
#: ``agreement`` scores at most this many groups of a day: those of smallest content hash (a uniform
#: sample, the same whatever the chunking); the standard error of a mean NDCG over them is about 0.007.
AGREEMENT_GROUPS = 2000

_LABEL_SALT = np.uint64(0x9E3779B97F4A7C15)


def fingerprints(X, y=None):
    """:func:`streamrank.io.fingerprints.row_fingerprints` (row hashes with their labels, zeros per column)."""
    from streamrank.io.fingerprints import row_fingerprints

    return row_fingerprints(X, y)


def row_hashes(X, y=None):
    """The row part of :func:`fingerprints`."""
    return fingerprints(X, y)[0]


def _mix(z):
    from streamrank.io.fingerprints import mix64

    return mix64(z)


def _group_starts(qid):
    q = np.asarray(qid)
    if q.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, q[1:] != q[:-1]])


# ------------------------------------------------------------------ moments
class _Moments:
    """Per-feature moments (:class:`streamrank.normalize.FeatureMoments`: n, mean, M2, min, max) and zeros."""

    def __init__(self, d):
        from streamrank.normalize import FeatureMoments

        self.fm = FeatureMoments(d)
        self.zeros = np.zeros(d, dtype=np.int64)

    def add(self, X, zeros=None):
        if X.shape[0] == 0:
            return
        self.fm.update(X)
        self.zeros = self.zeros + (fingerprints(X)[1] if zeros is None else zeros)

    def merge(self, other):
        self.fm.merge(other.fm)
        self.zeros = self.zeros + other.zeros
        return self

    n = property(lambda self: self.fm.n)
    mean = property(lambda self: self.fm.mean)
    min = property(lambda self: self.fm.min)
    max = property(lambda self: self.fm.max)

    def to_json(self):
        return {"n": int(self.fm.n), "mean": self.fm.mean.tolist(), "m2": self.fm.m2.tolist(),
                "zeros": self.zeros.tolist(), "min": _finite(self.fm.min), "max": _finite(self.fm.max)}

    @classmethod
    def from_json(cls, doc):
        m = cls(len(doc["mean"]))
        m.fm.n, m.fm.mean, m.fm.m2 = int(doc["n"]), np.asarray(doc["mean"], float), np.asarray(doc["m2"], float)
        m.zeros = np.asarray(doc["zeros"], np.int64)
        m.fm.min = np.asarray([np.inf if v is None else v for v in doc["min"]], float)
        m.fm.max = np.asarray([-np.inf if v is None else v for v in doc["max"]], float)
        return m

    @property
    def var(self):
        return self.fm.m2 / max(self.fm.n, 1)

    @property
    def zero_fraction(self):
        return self.zeros / max(self.fm.n, 1)


def _finite(a):
    return [float(v) if np.isfinite(v) else None for v in np.asarray(a, float)]


# ------------------------------------------------------------------ profiles
class DayProfile:
    """Statistics of one day of scored groups, fed chunk by chunk (whole queries) during the ingest.

    ``model``: the current model, scored on each chunk for the ``agreement`` check (NDCG@k and
    disagreement, the nightly's validation metrics); ``feature_names``: the store's, when known.
    """

    kind = "groups"

    def __init__(self, model=None, k=10):
        self.model, self.k = model, k
        self.moments = None
        self.rows = self.groups = 0
        self.labels: dict | None = {}
        self.label_moments = _Moments(1)
        self.integer_labels = True
        self.feature_names = None
        self.row_columns: set = set()
        self.group_hashes: list = []
        # agreement: the current model on the AGREEMENT_GROUPS informative groups of smallest content hash
        self._tau = np.iinfo(np.uint64).max          # a group is scored when its hash is below this
        self._kept = []                              # (hashes, sizes, X, y) of the sampled groups
        self._n_kept = 0
        self.seconds = 0.0                           # time spent profiling (the checks' share of the ingest)

    def add(self, X, y, qid, row_cols=None, feature_names=None):
        t0 = time.perf_counter()
        try:
            self._add(X, y, qid, row_cols, feature_names)
        finally:
            self.seconds += time.perf_counter() - t0

    def _add(self, X, y, qid, row_cols, feature_names):
        y = np.asarray(y, dtype=np.float64) + 0.0       # -0.0 is the label 0
        if y.ndim == 2:            # a multi-output store: the first output, as validation scores it
            y = y[:, 0]
        if y.ndim != 1 or X.shape[0] == 0:
            return
        if self.moments is None:
            self.moments = _Moments(X.shape[1])
        h, zeros = fingerprints(X, y)
        self.moments.add(X, zeros)
        self.rows += len(y)
        starts = _group_starts(qid)
        self.groups += len(starts)
        self.label_moments.add(y[:, None], np.array([np.count_nonzero(y == 0)]))
        self.integer_labels &= bool(np.all(y == np.round(y)))
        if self.labels is not None:
            vals, cnt = np.unique(y, return_counts=True)
            for v, c in zip(vals.tolist(), cnt.tolist()):
                self.labels[v] = self.labels.get(v, 0) + c
            if len(self.labels) > _MAX_LABEL_VALUES:
                self.labels = None          # real-valued labels: the range and moments only
        if feature_names is not None:
            self.feature_names = [str(n) for n in feature_names]
        if row_cols:
            self.row_columns |= set(row_cols)
        with np.errstate(over="ignore"):
            gh = np.add.reduceat(h, starts) if len(starts) else np.zeros(0, np.uint64)
            gh = _mix(gh + np.diff(np.r_[starts, len(y)]).astype(np.uint64))
        informative = np.minimum.reduceat(y, starts) < np.maximum.reduceat(y, starts) if len(starts) else []
        self.group_hashes.append(gh[informative])      # groups with a preference (two labels or more)
        if self.model is not None and X.shape[1] == getattr(self.model, "n_features_in_", X.shape[1]):
            self._score(X, y, starts, gh, informative)      # (another feature count: the append refuses it)

    def _score(self, X, y, starts, gh, informative):
        """Keep the rows of the chunk's informative groups whose hash is below the running threshold (a
        bottom-k sample of the day by content hash: the same groups whatever the chunking or the order of
        the day); they are scored once, at the end (:meth:`agreement`)."""
        sel = np.asarray(informative, dtype=bool) & (gh < self._tau)
        if not sel.any():
            return
        sizes = np.diff(np.r_[starts, len(y)])
        rows = np.repeat(sel, sizes)
        self._kept.append((gh[sel], sizes[sel], X[rows], y[rows]))
        self._n_kept += int(sel.sum())
        if self._n_kept > 2 * AGREEMENT_GROUPS:          # keep the AGREEMENT_GROUPS smallest hashes
            self._kept = [self._bottom_k()]
            self._n_kept = AGREEMENT_GROUPS
            self._tau = self._kept[0][0].max()

    def _bottom_k(self):
        """``(hashes, sizes, X, y)`` of the kept groups of the AGREEMENT_GROUPS smallest hashes, in day order."""
        h, sizes = np.concatenate([k[0] for k in self._kept]), np.concatenate([k[1] for k in self._kept])
        Xs = [k[2] for k in self._kept]
        X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs)
        y = np.concatenate([k[3] for k in self._kept])
        if len(h) > AGREEMENT_GROUPS:
            keep = np.zeros(len(h), dtype=bool)
            keep[np.argsort(h, kind="stable")[:AGREEMENT_GROUPS]] = True
            rows = np.repeat(keep, sizes)
            return h[keep], sizes[keep], X[rows], y[rows]
        return h, sizes, X, y

    def agreement(self):
        if self.model is None or not self._kept:
            return None
        from streamrank.metrics import RankingEvaluator

        self._kept = [self._bottom_k()]
        _, sizes, X, y = self._kept[0]
        sc = np.asarray(self.model.predict(X), dtype=np.float64).reshape(len(y), -1)[:, 0]
        ev = RankingEvaluator(self.k, ("ndcg", "disagreement"))
        ev.update(y, sc, np.r_[0, np.cumsum(sizes)])
        res = ev.result()
        out = {}
        for name, key in (("ndcg", f"ndcg@{self.k}"), ("disagreement", "disagreement")):
            v = res[key].value
            out[name] = None if np.isnan(v) else float(v)
        out.update(metric=f"ndcg@{self.k}", groups_scored=int(len(sizes)))
        return out

    def record(self):
        """The JSON part of the profile (the group hashes go to the ``.npz``)."""
        labels = None if self.labels is None else {repr(float(v)): int(c) for v, c in sorted(self.labels.items())}
        return {"kind": self.kind, "rows": int(self.rows), "groups": int(self.groups),
                "n_features": None if self.moments is None else len(self.moments.mean),
                "feature_names": self.feature_names, "row_columns": sorted(self.row_columns),
                "integer_labels": bool(self.integer_labels), "labels": labels,
                "label_moments": self.label_moments.to_json(),
                "features": None if self.moments is None else self.moments.to_json(),
                "agreement": self.agreement()}

    def hashes(self):
        return np.concatenate(self.group_hashes) if self.group_hashes else np.zeros(0, np.uint64)


class TupleProfile(DayProfile):
    """Statistics of one day of (query, better item, worse item) tuples (sgd-bilinear).

    Features are the query's (``q:j``) and the items' (``d:j``, both items of every tuple); volume counts
    tuples ("rows") and distinct query rows ("groups"); a tuple's hash is of its query, better and worse
    rows' content (in that order); agreement is the current model's tuple error on the day.
    """

    kind = "tuples"

    def __init__(self, model=None):
        super().__init__(None)
        self.model = model
        self.labels = None
        self._err = [0.0, 0]

    def add_tuples(self, Q, Dp, Dn, q_rows=None):
        t0 = time.perf_counter()
        try:
            self._add_tuples(Q, Dp, Dn, q_rows)
        finally:
            self.seconds += time.perf_counter() - t0

    def _add_tuples(self, Q, Dp, Dn, q_rows=None):
        n = Q.shape[0]
        if n == 0:
            return
        if sp.issparse(Q) or sp.issparse(Dp) or sp.issparse(Dn):
            Q, Dp, Dn = sp.csr_matrix(Q), sp.csr_matrix(Dp), sp.csr_matrix(Dn)
            pos, neg = sp.hstack([Q, Dp], format="csr"), sp.hstack([Q, Dn], format="csr")
        else:
            pos, neg = np.hstack([Q, Dp]), np.hstack([Q, Dn])
        if self.moments is None:
            self.moments = _Moments(pos.shape[1])
            self.feature_names = [f"q:{j}" for j in range(Q.shape[1])] + [f"d:{j}" for j in range(Dp.shape[1])]
        self.moments.add(pos)          # the query's features once per item, the items' features of both
        self.moments.add(neg)
        self.rows += n
        self.groups += len(np.unique(row_hashes(Q) if q_rows is None else q_rows))
        with np.errstate(over="ignore"):
            hq, hp, hn = row_hashes(Q), row_hashes(Dp), row_hashes(Dn)
            self.group_hashes.append(_mix(hq + _mix(hp + _mix(hn ^ _LABEL_SALT))))
        if self.model is not None:
            from streamrank.metrics import tuple_error

            e = float(tuple_error(self.model.predict(Q, Dp), self.model.predict(Q, Dn)))
            self._err[0] += e * n
            self._err[1] += n

    def agreement(self):
        if self.model is None or not self._err[1]:
            return None
        return {"disagreement": self._err[0] / self._err[1], "ndcg": None, "metric": "tuple_error"}
