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
    the current model's NDCG@k and pairwise disagreement on the day (on at most
    :data:`~streamrank.pipelines._nightly_profiles.AGREEMENT_GROUPS` of its groups with two labels or
    more: those of smallest content hash), against a reference: the median of the accepted days'
    figures (each day's under the model current when it was checked), or the current version's own
    validation figure (``version.json["metrics"]`` of an incremental night, out of sample) where that is worse — a
    model that got worse by itself does not make good days fail.  Fails when NDCG drops by more than
    ``--max-ndcg-drop`` (default 0.25) below it or disagreement rises by more than
    ``--max-disagreement-rise`` (default 0.2) above it.  With no reference it fails only when the model
    orders the day's pairs worse than chance (disagreement > 0.5).  Disagreement is the steadier figure
    (MQ2008 days: 0.22-0.24, and 0.79 with grades 2 - y, while NDCG@10 moves by 0.07 between good days
    and does not fall when 2 - y makes most documents relevant).  Inverted or shuffled labels collapse
    it.  sgd-bilinear: the tuple error (fraction of preferences the model orders the other way) plays
    the disagreement, with the same thresholds.
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
import os
import time
import zipfile
from pathlib import Path

import numpy as np

from streamrank.pipelines._nightly_check_rules import CHECKS, failure_line, pool, run_checks
from streamrank.pipelines._nightly_profiles import DayProfile, TupleProfile
from streamrank.pipelines._nightly_remote import as_models_dir

__all__ = ["DEFAULTS", "CHECKS", "DayProfile", "TupleProfile", "add_check_options", "check_options_of", "DayChecks",
           "failure_line", "who", "mark_readmitted"]

DAYS = "days"
DEFAULTS = {"window": 7, "max_feature_drift": 1.0, "max_zero_shift": 0.5, "max_label_psi": 0.25,
            "max_ndcg_drop": 0.25, "max_disagreement_rise": 0.2, "volume_ratio": 4.0, "max_duplicates": 0.5,
            "max_new_labels": 0.05}


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
            return remote.read_blob(DAYS, name)
        return (Path(models_dir) / DAYS / name).read_bytes()
    except FileNotFoundError:
        return None


def _write(models_dir, name, data: bytes):
    remote = as_models_dir(models_dir)
    if remote is not None:
        remote.write_blob(DAYS, name, data)
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
    from streamrank.pipelines._nightly_errors import ModelsDirError

    where = f"{models_dir}/{DAYS}/{_hex(day)}.npz"
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            h = z["group_hashes"]
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile) as exc:   # a damaged or foreign file
        raise ModelsDirError(f"{where} is damaged ({type(exc).__name__}: {exc}); delete it and the day is "
                             "profiled again from the store") from None
    if h.dtype != np.uint64 or h.ndim != 1:
        raise ModelsDirError(f"{where}: group_hashes must be a 1-d uint64 array")
    return h


def who():
    """``{"user", "at"}`` of an override (the login name: ``getpass.getuser()``, else ``$USER``)."""
    from streamrank.pipelines._nightly_versions import _now

    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        user = os.environ.get("USER") or f"uid {os.getuid()}"
    return {"user": user, "at": _now()}


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

        t0 = time.perf_counter()
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
        prof = sum(p.seconds for p in self.profiles.values())      # inside the ingest pass
        out.update(seconds=round(time.perf_counter() - t0 + prof, 4), profile_seconds=round(prof, 4))
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
    keep = ("status", "figure", "threshold", "per_feature", "ratios", "ndcg", "disagreement", "metric", "detail",
            "median_ndcg", "median_disagreement")
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
