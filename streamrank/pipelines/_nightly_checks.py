"""Nightly pipeline: data checks of each new day before it trains, and the quarantine of a day that fails.

The gate (:mod:`streamrank.pipelines._nightly_gate`) asks whether tonight's data makes the model worse on
trusted history; a broken day that does little harm passes it.  So every day named by ``--new`` is
profiled **in the pass that ingests it** (:class:`DayProfile`: each chunk of whole queries is seen once,
before it is appended) and checked against the days accepted before it:

``schema``
    feature count and names, label kind (integer grades or real values), and the row columns the line
    trains on (``--weights``: ``weight``; ``--ips``: ``click`` and ``position``) — the same as on the
    accepted days.
``label_set``
    the fraction of the day's rows whose label lies outside the range of labels seen on the accepted
    days; fails above ``--max-new-labels`` (default 0.05: a rare new extreme grade passes, a rescaled or
    shifted label scale does not).
``label_drift``
    population stability index of the label distribution, ``PSI = Σ (p_d − p_b) ln(p_d / p_b)`` over
    the label values (each share floored at 1e-4), against the accepted days' distribution
    (``--max-label-psi``, default 0.25, the usual "significant shift" mark).
``feature_drift``
    per feature, the standardized mean shift ``|μ_day − μ_acc| / sqrt((σ²_day + σ²_acc) / 2)``
    (Cohen's d; 0 when both are the same constant, ∞ when they are different constants); the check fails
    when the largest is above ``--max-feature-drift`` (default 1.0).  Every feature's score is in the report.
``zero_fraction``
    per feature, the change in the fraction of zeros against the accepted days (a column that died is
    a jump to 1); fails above ``--max-zero-shift`` (default 0.5).
``agreement``
    the current model's NDCG@k and pairwise disagreement on the day (on at most :data:`AGREEMENT_GROUPS`
    of its groups with two labels or more: those of smallest content hash), against a reference: the median of
    the accepted days' figures (each day's under the model current when it was checked), or the current
    version's own validation figure (``version.json["metrics"]``) where that is worse — a model that got
    worse by itself does not make good days fail.  Fails when NDCG drops by more than ``--max-ndcg-drop``
    (default 0.15) below it or disagreement rises by more than ``--max-disagreement-rise`` (default 0.15)
    above it.  With neither (a current model without metrics), it fails only when the model orders the
    day's pairs worse than chance (disagreement > 0.5).  Inverted or shuffled
    labels collapse it.  sgd-bilinear: the tuple error (fraction of preferences the model orders the
    other way) plays the disagreement, with the same thresholds.
``volume``
    rows and groups (tuples and queries) against the median of the accepted days: fails outside
    ``[1/r, r]`` for ``--volume-ratio r`` (default 4).
``duplicates``
    the fraction of the day's groups (tuples) whose content — the rows' features and labels, whatever
    their query ids and order within the group — equals a group of an earlier ingested day of the window
    (accepted or not; a 64-bit hash per group); fails above ``--max-duplicates`` (default 0.5).  Only
    groups with at least two distinct labels count (a group with one label holds no preference: click
    sessions without a click recur every day with the same documents).

The accepted days are the days of the store's log, newest first, that have a profile and are not in
``excluded.json``, at most ``--check-window`` (default 7) of them; their moments are pooled exactly.
A check with nothing to compare against (the first day) is ``skipped``.

**Quarantine.** A day that fails any check is ingested (the store is append-only and nothing is lost)
and excluded from training through ``excluded.json`` (reason ``quarantined by the data checks``); the
night trains on the rest, and ends with exit code 7 (:data:`streamrank.cli.EXIT_QUARANTINED`) and one
line on stderr naming each failed check with its figure and threshold.  ``--readmit DAY`` takes the day
back (it joins the accepted days); ``--force`` keeps tonight's failing days in training.  Either is
recorded with who and when (``user``, ``at``) in the day's profile and in the report.

Profiles live in ``DIR/days/<hash>.json`` (statistics, every check's result, the decision) and
``DIR/days/<hash>.npz`` (the group hashes), written only under the run's lock.  A day already in the
store without a profile (the night was killed between the ingest and the checks) is profiled from the
store — the only second read, and only then.
"""
from __future__ import annotations

import getpass
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from streamrank.pipelines._nightly_remote import as_models_dir

__all__ = ["DEFAULTS", "DayProfile", "TupleProfile", "add_check_options", "check_options_of", "DayChecks",
           "failure_line", "CHECKS"]

DAYS = "days"
CHECKS = ("schema", "label_set", "label_drift", "feature_drift", "zero_fraction", "agreement", "volume",
          "duplicates")
DEFAULTS = {"window": 7, "max_feature_drift": 1.0, "max_zero_shift": 0.5, "max_label_psi": 0.25,
            "max_ndcg_drop": 0.15, "max_disagreement_rise": 0.15, "volume_ratio": 4.0, "max_duplicates": 0.5,
            "max_new_labels": 0.05}
_MAX_LABEL_VALUES = 64
#: ``agreement`` scores at most this many groups of a day: those of smallest content hash (a uniform
#: sample, the same whatever the chunking); the standard error of a mean NDCG over them is < 0.01.
AGREEMENT_GROUPS = 4000
_PSI_FLOOR = 1e-4

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_LABEL_SALT = np.uint64(0x9E3779B97F4A7C15)


def _mix(z):
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _salt(n):
    """Per-column uint64 salts of the row fingerprints (fixed: the same on every night)."""
    rng = np.random.default_rng(0x5EED)
    return rng.integers(0, np.iinfo(np.int64).max, size=max(int(n), 1), dtype=np.int64).astype(np.uint64)[:n]


def fingerprints(X, y=None):
    """``(h, zeros)``: a 64-bit hash of each row's nonzero (column, float32 value) entries and its label
    (the same for a dense and a CSR row), and each column's count of zeros, in one pass
    (:mod:`streamrank.pipelines._checks_kernels`)."""
    from streamrank.pipelines._checks_kernels import csr_fingerprints, dense_fingerprints

    n = X.shape[1]
    h = np.zeros(X.shape[0], dtype=np.uint64)
    zeros = np.zeros(n, dtype=np.int64)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        data = np.ascontiguousarray(X.data, dtype=np.float32)
        csr_fingerprints(np.asarray(X.indptr, np.int64), np.asarray(X.indices, np.int64), data,
                         data.view(np.uint32), _salt(n), zeros, h)
    else:
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        dense_fingerprints(X32, X32.view(np.uint32), _salt(n), zeros, h)
    with np.errstate(over="ignore"):
        if y is not None:
            yb = np.ascontiguousarray(np.asarray(y, dtype=np.float64) + 0.0).reshape(len(h), -1)
            h = _mix(h ^ _mix(yb.view(np.uint64).sum(axis=1, dtype=np.uint64) ^ _LABEL_SALT))
        else:
            h = _mix(h)
    return h, zeros


def row_hashes(X, y=None):
    """The row part of :func:`fingerprints`."""
    return fingerprints(X, y)[0]


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
        self._kept = []                              # (hashes, ndcg, disagreement) of the scored groups
        self._n_kept = 0

    def add(self, X, y, qid, row_cols=None, feature_names=None):
        y = np.asarray(y, dtype=np.float64) + 0.0       # -0.0 is the label 0
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
        if self.model is not None:
            self._score(X, y, starts, gh, informative)

    def _score(self, X, y, starts, gh, informative):
        """Score the chunk's informative groups whose hash is below the running threshold (a bottom-k sample
        of the day by content hash: the same groups whatever the chunking or the order of the day)."""
        from streamrank.metrics._evaluator import RankingEvaluator
        from streamrank.metrics._sources import score_block

        sel = np.asarray(informative, dtype=bool) & (gh < self._tau)
        if not sel.any():
            return
        sizes = np.diff(np.r_[starts, len(y)])
        rows = np.repeat(sel, sizes)
        ys = y[rows]
        sc = np.asarray(score_block(self.model, X[rows]), dtype=np.float64).reshape(len(ys), -1)[:, 0]
        ev = RankingEvaluator(self.k, ("ndcg", "disagreement"), keep_per_query=True)
        ev.update(ys, sc, np.r_[0, np.cumsum(sizes[sel])])
        res = ev.result()
        self._kept.append((gh[sel], res[f"ndcg@{self.k}"].per_query, res["disagreement"].per_query))
        self._n_kept += int(sel.sum())
        if self._n_kept > 2 * AGREEMENT_GROUPS:          # keep the AGREEMENT_GROUPS smallest hashes
            h, nd, di = (np.concatenate(a) for a in zip(*self._kept))
            keep = np.argsort(h, kind="stable")[:AGREEMENT_GROUPS]
            self._kept = [(h[keep], nd[keep], di[keep])]
            self._n_kept = AGREEMENT_GROUPS
            self._tau = h[keep[-1]]

    def agreement(self):
        if self.model is None or not self._kept:
            return None
        h, nd, di = (np.concatenate(a) for a in zip(*self._kept))
        if len(h) > AGREEMENT_GROUPS:
            keep = np.argsort(h, kind="stable")[:AGREEMENT_GROUPS]
            nd, di = nd[keep], di[keep]
        out = {}
        for name, v in (("ndcg", nd), ("disagreement", di)):
            v = v[~np.isnan(v)]
            out[name] = float(v.mean()) if len(v) else None
        out.update(metric=f"ndcg@{self.k}", groups_scored=int(len(nd)))
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


# ------------------------------------------------------------------ options
def add_check_options(p) -> None:
    """The data checks' options of ``streamrank nightly`` (thresholds with their defaults)."""
    g = p.add_argument_group("data checks", "each new day is checked against the accepted days before it trains; "
                             "a day that fails is quarantined (excluded; exit 7)")
    g.add_argument("--force", action="store_true",
                   help="train on tonight's days even if they fail the data checks (recorded with user and time)")
    g.add_argument("--no-checks", action="store_true", help="do not profile or check the new days")
    g.add_argument("--check-window", type=int, default=DEFAULTS["window"], metavar="N",
                   help="compare with the newest N accepted days (default %(default)s)")
    g.add_argument("--max-feature-drift", type=float, default=DEFAULTS["max_feature_drift"], metavar="D",
                   help="largest standardized mean shift of a feature (default %(default)s)")
    g.add_argument("--max-zero-shift", type=float, default=DEFAULTS["max_zero_shift"], metavar="Z",
                   help="largest change of a feature's fraction of zeros (default %(default)s)")
    g.add_argument("--max-new-labels", type=float, default=DEFAULTS["max_new_labels"], metavar="F",
                   help="largest fraction of rows with a label outside the accepted range (default %(default)s)")
    g.add_argument("--max-label-psi", type=float, default=DEFAULTS["max_label_psi"], metavar="P",
                   help="largest population stability index of the labels (default %(default)s)")
    g.add_argument("--max-ndcg-drop", type=float, default=DEFAULTS["max_ndcg_drop"], metavar="X",
                   help="largest drop of the current model's NDCG@10 on the day below its median (default "
                        "%(default)s)")
    g.add_argument("--max-disagreement-rise", type=float, default=DEFAULTS["max_disagreement_rise"], metavar="X",
                   help="largest rise of the current model's disagreement (sgd-bilinear: tuple error) on the "
                        "day above its median (default %(default)s)")
    g.add_argument("--volume-ratio", type=float, default=DEFAULTS["volume_ratio"], metavar="R",
                   help="rows and groups within [median/R, median*R] of the accepted days (default %(default)s)")
    g.add_argument("--max-duplicates", type=float, default=DEFAULTS["max_duplicates"], metavar="F",
                   help="largest fraction of the day's groups equal to a group of an earlier day "
                        "(default %(default)s)")


def check_options_of(args, error=None) -> dict | None:
    """``run_night(checks=...)`` from the parsed options (None: ``--no-checks``)."""
    if args.no_checks:
        return None
    opts = {k: getattr(args, "check_window" if k == "window" else k) for k in DEFAULTS}
    return validate_options(opts, error)


def validate_options(opts, error=None) -> dict:
    out = dict(DEFAULTS, **(opts or {}))
    unknown = set(out) - set(DEFAULTS)
    bad = [f"{k}={out[k]!r}" for k in DEFAULTS if not (isinstance(out[k], (int, float)) and out[k] >= 0)]
    if not out["window"] >= 1:
        bad.append(f"window={out['window']!r} (must be >= 1)")
    if out["volume_ratio"] < 1:
        bad.append(f"volume_ratio={out['volume_ratio']!r} (must be >= 1)")
    msg = (f"unknown data check option(s) {sorted(unknown)}" if unknown else
           f"data check thresholds must be numbers >= 0: {', '.join(bad)}" if bad else None)
    if msg:
        if error is not None:
            error(msg)
        raise ValueError(msg)
    out["window"] = int(out["window"])
    return out


# ------------------------------------------------------------------ storage
def _hex(day):
    return str(day).split(":", 1)[-1].split("#", 1)[0]


def _read(models_dir, name):
    remote = as_models_dir(models_dir)
    try:
        if remote is not None:
            return remote.remote.read(f"{DAYS}/{name}")
        return (Path(models_dir) / DAYS / name).read_bytes()
    except FileNotFoundError:
        return None


def _write(models_dir, name, data: bytes):
    remote = as_models_dir(models_dir)
    if remote is not None:
        remote._check_lease()
        remote.remote.write(f"{DAYS}/{name}", data)
        return
    from streamrank.pipelines._nightly_versions import replace_file

    d = Path(models_dir) / DAYS
    d.mkdir(exist_ok=True)
    replace_file(d, name, data)


def read_day_record(models_dir, day):
    raw = _read(models_dir, f"{_hex(day)}.json")
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("day") != day:
            raise ValueError("not the profile of this day")
    except (UnicodeDecodeError, ValueError) as exc:
        from streamrank.pipelines._nightly_versions import ModelsDirError

        raise ModelsDirError(f"{models_dir}/{DAYS}/{_hex(day)}.json is damaged ({exc}); delete it and the "
                             "day is profiled again from the store") from None
    return doc


def write_day_record(models_dir, doc, hashes=None):
    if hashes is not None:
        buf = io.BytesIO()
        np.savez(buf, group_hashes=np.asarray(hashes, dtype=np.uint64))
        _write(models_dir, f"{_hex(doc['day'])}.npz", buf.getvalue())
    _write(models_dir, f"{_hex(doc['day'])}.json", json.dumps(doc, indent=1, sort_keys=True).encode())


def read_day_hashes(models_dir, day):
    raw = _read(models_dir, f"{_hex(day)}.npz")
    if raw is None:
        return np.zeros(0, np.uint64)
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        h = z["group_hashes"]
    if h.dtype != np.uint64 or h.ndim != 1:
        from streamrank.pipelines._nightly_versions import ModelsDirError

        raise ModelsDirError(f"{models_dir}/{DAYS}/{_hex(day)}.npz: group_hashes must be a 1-d uint64 array")
    return h


def who():
    """``{"user", "at"}`` of an override (the login name: ``getpass.getuser()``, else ``$USER``)."""
    from streamrank.pipelines._nightly_versions import _now

    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        user = os.environ.get("USER") or f"uid {os.getuid()}"
    return {"user": user, "at": _now()}


# ------------------------------------------------------------------ the checks
def _psi(p, q):
    keys = sorted(set(p) | set(q))
    a = np.asarray([p.get(k, 0) for k in keys], float)
    b = np.asarray([q.get(k, 0) for k in keys], float)
    a = np.maximum(a / max(a.sum(), 1), _PSI_FLOOR)
    b = np.maximum(b / max(b.sum(), 1), _PSI_FLOOR)
    return float(np.sum((a - b) * np.log(a / b)))


def _res(name, passed, figure, threshold, detail=None, **extra):
    r = {"check": name, "status": "passed" if passed else "failed", "figure": figure, "threshold": threshold}
    if detail:
        r["detail"] = detail
    r.update(extra)
    return r


def _skip(name, why):
    return {"check": name, "status": "skipped", "detail": why}


def _fmt(v):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.4g}"
    return str(v)


def run_checks(rec, hashes, baseline, previous_hashes, opts, required_columns=(), model_ref=None):
    """Every check of the day record ``rec`` against ``baseline`` (:func:`pool`); a list of results."""
    out = []
    name = "schema"
    problems = []
    missing = sorted(set(required_columns) - set(rec["row_columns"]))
    if missing:
        problems.append(f"row column(s) {missing} missing (the line trains on them)")
    if baseline is None:
        out.append(_res(name, not problems, "; ".join(problems) or "ok", "same as the accepted days",
                        "no accepted day yet: only the required columns checked" if not problems else None))
        for n in CHECKS[1:]:
            if n != "agreement":
                out.append(_skip(n, "no accepted day to compare with"))
        out.append(_agreement(rec, None, opts, model_ref))
        return out
    if rec["n_features"] != baseline["n_features"]:
        problems.append(f"{rec['n_features']} features, accepted days {baseline['n_features']}")
    elif rec["feature_names"] and baseline["feature_names"] and rec["feature_names"] != baseline["feature_names"]:
        diff = [f"{a}!={b}" for a, b in zip(rec["feature_names"], baseline["feature_names"]) if a != b][:3]
        problems.append(f"feature names differ ({', '.join(diff)})")
    if rec["kind"] == "groups" and rec["integer_labels"] != baseline["integer_labels"]:
        problems.append("real-valued labels" if baseline["integer_labels"] else "integer labels only")
    lost = sorted(set(baseline["row_columns"]) - set(rec["row_columns"]))
    if lost:
        problems.append(f"row column(s) {lost} of the accepted days missing")
    out.append(_res(name, not problems, "; ".join(problems) or "ok", "same as the accepted days"))
    schema_ok = not problems

    # labels
    if rec["kind"] == "tuples":
        out.append(_skip("label_set", "tuples carry preferences, not labels (see agreement)"))
        out.append(_skip("label_drift", "tuples carry preferences, not labels (see agreement)"))
    else:
        blo, bhi = baseline["label_min"], baseline["label_max"]
        if rec["labels"] is not None:
            vals = {float(k): c for k, c in rec["labels"].items()}
            out_vals = sorted(v for v in vals if v < blo or v > bhi)
            share = sum(vals[v] for v in out_vals) / max(rec["rows"], 1)
            what = f"label value(s) {_vals(out_vals)}" if out_vals else "no label"
        else:          # real-valued labels: only the range is known
            lo, hi = rec["label_moments"]["min"][0], rec["label_moments"]["max"][0]
            share = 0.0 if (lo >= blo and hi <= bhi) else 1.0
            what = f"labels in [{lo:g}, {hi:g}]" if share else "no label"
        out.append(_res("label_set", share <= opts["max_new_labels"], share, opts["max_new_labels"],
                        f"fraction of rows with a label outside the accepted [{blo:g}, {bhi:g}]: {what}"))
        if rec["labels"] is not None and baseline["labels"] is not None:
            psi = _psi(rec["labels"], baseline["labels"])
            out.append(_res("label_drift", psi <= opts["max_label_psi"], psi, opts["max_label_psi"],
                            "population stability index of the label distribution"))
        else:
            out.append(_skip("label_drift", "real-valued labels: see label_set's range and feature_drift"))

    # features
    if not schema_ok or rec["features"] is None or baseline["features"] is None:
        out.append(_skip("feature_drift", "the schema differs"))
        out.append(_skip("zero_fraction", "the schema differs"))
    else:
        day = _Moments.from_json(rec["features"])
        acc = baseline["features"]
        pooled = np.sqrt((day.var + acc.var) / 2)
        diff = np.abs(day.mean - acc.mean)
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.where(pooled > 0, diff / np.where(pooled > 0, pooled, 1),
                         np.where(diff > 1e-12 * (1 + np.abs(acc.mean)), np.inf, 0.0))
        names = rec["feature_names"] or [str(j) for j in range(len(d))]
        j = int(np.argmax(d)) if len(d) else 0
        worst = float(d[j]) if len(d) else 0.0
        out.append(_res("feature_drift", worst <= opts["max_feature_drift"], worst, opts["max_feature_drift"],
                        f"standardized mean shift, largest on feature {names[j]}" if len(d) else None,
                        feature=names[j] if len(d) else None, per_feature=_finite_or_inf(d)))
        z = np.abs(day.zero_fraction - acc.zero_fraction)
        j = int(np.argmax(z)) if len(z) else 0
        worst = float(z[j]) if len(z) else 0.0
        out.append(_res("zero_fraction", worst <= opts["max_zero_shift"], worst, opts["max_zero_shift"],
                        f"change of the fraction of zeros, largest on feature {names[j]} "
                        f"({acc.zero_fraction[j]:.3g} -> {day.zero_fraction[j]:.3g})" if len(z) else None,
                        feature=names[j] if len(z) else None, per_feature=[float(v) for v in z]))

    out.append(_agreement(rec, baseline, opts, model_ref))

    # volume
    fails, figs = [], {}
    for key in ("rows", "groups"):
        med = baseline[f"median_{key}"]
        ratio = rec[key] / med if med else float("inf")
        figs[key] = ratio
        if not (1 / opts["volume_ratio"] <= ratio <= opts["volume_ratio"]):
            fails.append(f"{key} {rec[key]} = {ratio:.3g} x the median {med:g}")
    unit = "tuples/queries" if rec["kind"] == "tuples" else "rows/groups"
    out.append(_res("volume", not fails, figs["rows"], [1 / opts["volume_ratio"], opts["volume_ratio"]],
                    "; ".join(fails) or f"{unit} against the median of {baseline['n_days']} accepted day(s)",
                    ratios=figs))

    # duplicates
    if previous_hashes is None or not len(previous_hashes) or not len(hashes):
        out.append(_skip("duplicates", "no earlier day's hashes"))
    else:
        dup = float(np.isin(hashes, previous_hashes).mean())
        out.append(_res("duplicates", dup <= opts["max_duplicates"], dup, opts["max_duplicates"],
                        f"fraction of the day's {'tuples' if rec['kind'] == 'tuples' else 'groups'} equal to one "
                        "of an earlier day"))
    return out


def _vals(v):
    return "{" + ",".join(f"{x:g}" for x in v) + "}"


def _finite_or_inf(a):
    return [float(x) if np.isfinite(x) else "inf" for x in a]


def _agreement(rec, baseline, opts, model_ref=None):
    a = rec.get("agreement")
    if not a:
        return _skip("agreement", "no current model to score the day")
    past = (baseline or {}).get("agreement") or []
    dis, ndcg = a.get("disagreement"), a.get("ndcg")
    ref = {k: v for k, v in (model_ref or {}).items() if v is not None}
    if not past and ref:
        past = [ref]
    elif ref:           # the current model's own validation figure, when it is below what older models did
        md, mn = _median([p.get("disagreement") for p in past]), _median([p.get("ndcg") for p in past])
        past = [{"disagreement": max(x for x in (md, ref.get("disagreement")) if x is not None)
                 if md is not None or ref.get("disagreement") is not None else None,
                 "ndcg": min(x for x in (mn, ref.get("ndcg")) if x is not None)
                 if mn is not None or ref.get("ndcg") is not None else None}] * max(1, len(past))
    if not past:
        ok = dis is None or dis <= 0.5
        return _res("agreement", ok, dis, 0.5, "the current model's disagreement on the day, against chance "
                    "(no accepted day scored yet)", ndcg=ndcg, disagreement=dis, metric=a.get("metric"))
    fails = []
    med_d = _median([p.get("disagreement") for p in past])
    med_n = _median([p.get("ndcg") for p in past])
    if dis is not None and med_d is not None and dis - med_d > opts["max_disagreement_rise"]:
        fails.append(f"disagreement {dis:.4g} > {med_d:.4g} + {opts['max_disagreement_rise']:g}")
    if ndcg is not None and med_n is not None and med_n - ndcg > opts["max_ndcg_drop"]:
        fails.append(f"{a.get('metric')} {ndcg:.4g} < {med_n:.4g} - {opts['max_ndcg_drop']:g}")
    figure = ndcg if ndcg is not None else dis
    thr = (med_n - opts["max_ndcg_drop"]) if ndcg is not None and med_n is not None else \
        (med_d + opts["max_disagreement_rise"] if med_d is not None else None)
    return _res("agreement", not fails, figure, thr,
                "; ".join(fails) or "the current model on the day against its figures on the accepted days",
                ndcg=ndcg, disagreement=dis, median_ndcg=med_n, median_disagreement=med_d,
                metric=a.get("metric"))


def _median(v):
    v = [x for x in v if x is not None]
    return float(np.median(v)) if v else None


def pool(records):
    """The accepted days' statistics pooled: moments exactly, label counts summed, medians of volume."""
    if not records:
        return None
    first = records[0]
    feats = None
    if all(r.get("features") and r["n_features"] == first["n_features"] for r in records):
        feats = _Moments(first["n_features"])
        for r in records:
            feats.merge(_Moments.from_json(r["features"]))
    labels = {}
    for r in records:
        if labels is None or r.get("labels") is None:
            labels = None
            continue
        for k, c in r["labels"].items():
            labels[k] = labels.get(k, 0) + c
    lmins = [r["label_moments"]["min"][0] for r in records if r["label_moments"]["min"][0] is not None]
    lmaxs = [r["label_moments"]["max"][0] for r in records if r["label_moments"]["max"][0] is not None]
    return {"n_days": len(records), "n_features": first["n_features"], "feature_names": first["feature_names"],
            "integer_labels": all(r["integer_labels"] for r in records),
            "row_columns": sorted(set.intersection(*(set(r["row_columns"]) for r in records))),
            "labels": labels, "label_min": min(lmins, default=None), "label_max": max(lmaxs, default=None),
            "features": feats,
            "median_rows": float(np.median([r["rows"] for r in records])),
            "median_groups": float(np.median([r["groups"] for r in records])),
            "agreement": [r["agreement"] for r in records if r.get("agreement")]}


def failure_line(results) -> str:
    """``name figure > threshold (detail)`` of each failed check, joined with ``; ``."""
    parts = []
    for r in results:
        if r["status"] != "failed":
            continue
        fig, thr = r.get("figure"), r.get("threshold")
        if isinstance(thr, list):
            parts.append(f"{r['check']} {_fmt(fig)} outside [{', '.join(_fmt(t) for t in thr)}] ({r.get('detail')})")
        elif isinstance(fig, str):
            parts.append(f"{r['check']}: {fig}")
        else:
            parts.append(f"{r['check']} {_fmt(fig)} (threshold {_fmt(thr)}: {r.get('detail')})")
    return "; ".join(parts)


# ------------------------------------------------------------------ the night
class DayChecks:
    """Profiles of tonight's days (fed by the ingest), their checks and the quarantine decisions.

    ``opts``: thresholds (:data:`DEFAULTS`); ``model``: the current model (agreement);
    ``required_columns``: the store row columns the line trains on.
    """

    def __init__(self, models_dir, opts, *, model=None, k=10, tuples=False, required_columns=(), model_name=None,
                 model_metrics=None):
        self.models_dir, self.opts = models_dir, validate_options(opts)
        m = model_metrics or {}
        self.model_ref = {"ndcg": m.get(f"ndcg@{k}"), "disagreement": m.get("tuple_error" if tuples else
                                                                              "disagreement")}
        self.model, self.k, self.tuples = model, k, tuples
        self.model_name = model_name
        self.required = tuple(required_columns)
        self.profiles: dict = {}          # content hash of a day file -> its profile (filled by the ingest)

    def profile_for(self, bid):
        """A fresh profile of the day file with content hash ``bid`` (the ingest feeds it every chunk)."""
        p = TupleProfile(self.model) if self.tuples else DayProfile(self.model, self.k)
        self.profiles[bid] = p
        return p

    def run(self, store, log, unit, ingested, excl_doc, force=False):
        """Check tonight's days (``ingested``: the ingest's records) in log order; returns the report part
        ``{"days": [...], "quarantined": [...]}`` and excludes the failing days (unless ``force``)."""
        from streamrank.pipelines import _nightly_exclusions as ex
        from streamrank.pipelines._nightly_ingest import day_base

        order = {}
        for i, e in enumerate(log):
            order.setdefault(str(e.get("batch_id") or "").split("#", 1)[0], i)
        tonight = []
        for rec in ingested:
            day = day_base(log, rec["batch_id"])
            if day not in [t[0] for t in tonight]:
                tonight.append((day, rec))
        tonight.sort(key=lambda t: order.get(t[0], len(log)))
        excluded = {r["day"]: r for r in excl_doc["excluded"]}
        out = {"days": [], "quarantined": []}
        for day, rec in tonight:
            doc = read_day_record(self.models_dir, day)
            if doc is None:
                doc, hashes = self._check(store, log, unit, day, rec, excluded, order)
                doc["file"] = rec["file"]
                if doc["failed"]:
                    if force:
                        doc["forced"] = who()
                    else:
                        ex.exclude_days(self.models_dir, [_day_span(log, unit, day)],
                                        reason=f"quarantined by the data checks: {', '.join(doc['failed'])}",
                                        scores={"failed": failure_line(doc["checks"])})
                        excluded[day] = True
                doc["decision"] = ("forced" if doc.get("forced") else "quarantined") if doc["failed"] else "accepted"
                write_day_record(self.models_dir, doc, hashes)
            summary = {"day": day, "file": rec["file"], "decision": doc["decision"], "failed": doc["failed"],
                       "checks": _brief(doc["checks"])}
            if doc["decision"] == "quarantined" and day in excluded:
                summary["line"] = failure_line(doc["checks"])
                out["quarantined"].append(summary)
            elif doc["decision"] == "quarantined":
                summary["readmitted"] = doc.get("readmitted")
            out["days"].append(summary)
        return out

    def _check(self, store, log, unit, day, rec, excluded, order):
        prof = self.profiles.get(rec["batch_id"])
        span = _day_span(log, unit, day)[unit]
        if prof is None or prof.rows == 0:     # no pass tonight (a killed night's day): read it from the store
            prof = self._profile_from_store(store, span)
            source = "store (the ingest pass was not tonight)"
        else:
            source = "ingest pass"
        record = prof.record()
        hashes = prof.hashes()
        pos = order.get(day, len(log))
        earlier = sorted((d for d in order if order[d] < pos), key=lambda d: -order[d])
        accepted, recent = [], []
        for d in earlier:
            if len(accepted) >= self.opts["window"] and len(recent) >= self.opts["window"]:
                break
            r = read_day_record(self.models_dir, d)
            if r is None:
                continue
            if len(recent) < self.opts["window"]:
                recent.append(d)
            if d not in excluded and len(accepted) < self.opts["window"] and r.get("kind") == record["kind"]:
                accepted.append(r)
        prev = [read_day_hashes(self.models_dir, d) for d in recent]
        prev = np.concatenate(prev) if prev else None
        checks = run_checks(record, hashes, pool(accepted), prev, self.opts, self.required, self.model_ref)
        failed = [c["check"] for c in checks if c["status"] == "failed"]
        if record.get("agreement") is not None:
            record["agreement"]["model"] = self.model_name
        return dict(record, day=day, span={unit: span}, checks=checks, failed=failed, profiled_from=source,
                    baseline_days=[r["day"] for r in accepted], options=self.opts), hashes

    def _profile_from_store(self, store, span):
        if self.tuples:
            p = TupleProfile(self.model)
            t0, t1 = span
            step = 1 << 16
            for a in range(t0, t1, step):
                b = store.take(a, min(t1, a + step))
                p.add_tuples(b.Q, b.D_pos, b.D_neg)
            return p
        from streamrank.pipelines._nightly_views import group_view

        p = DayProfile(self.model, self.k)
        for b in group_view(store, span[0], span[1], ()).blocks():
            p.add(b.X, b.y, b.row_qid(),
                  row_cols={c: None for c in getattr(store, "row_columns", ())},
                  feature_names=store.feature_names)
        return p


def _brief(checks):
    """Each check's status, figure and threshold for the run report (and the figures that checks.png draws)."""
    keep = ("status", "figure", "threshold", "per_feature", "ratios", "ndcg", "disagreement", "metric", "detail")
    return {c["check"]: {k: c[k] for k in keep if k in c} for c in checks}


def _day_span(log, unit, day):
    from streamrank.pipelines._nightly_ingest import day_entries, day_span

    ents = day_entries(log, day)
    return {"day": day, unit: day_span(ents, unit), "batch_ids": [e["batch_id"] for e in ents]}


def mark_readmitted(models_dir, day):
    """Record on a day's profile who re-admitted it (``--readmit``), if it has one."""
    doc = read_day_record(models_dir, day)
    if doc is None:
        return None
    stamp = who()
    doc.setdefault("overrides", []).append(dict(stamp, action="readmit"))
    doc["readmitted"] = stamp
    write_day_record(models_dir, doc)
    return stamp
