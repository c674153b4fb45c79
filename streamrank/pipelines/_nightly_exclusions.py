"""Nightly pipeline: days kept out of training — rejected by the gate or by hand — and their re-admission.

The store is append-only, so a rejected night's data stays in it.  Without
more, every later candidate (trained on everything) would contain it and be
rejected again until the store was rebuilt.  Instead the models directory
records the days to leave out, ``DIR/excluded.json``::

    {"excluded": [{"day": "sha256:…", "groups": [g0, g1], "batch_ids": […],
                   "reason": "rejected by the gate of v0003", "version": "v0003",
                   "scores": {…the gate's record…}, "at": "<UTC time>"}, …],
     "history": [{"event": "readmitted", "day": …, "at": …}, …]}

written atomically (temp file, fsync, ``os.replace``; on object storage an
attribute of the repository, committed with the run) and only by a run
holding the models-directory lock (or transaction).  A day is the unit of the store's batch log that one day file made
(:func:`streamrank.pipelines._nightly_ingest.day_entries`): its span of
groups (tuples for sgd-bilinear) is taken from the log, so the view that
leaves it out (:func:`streamrank.pipelines._nightly_views.group_view`) is
exact.  When an incremental night is rejected, every new day of that night
is excluded (the gate judged them together; re-admit the ones you trust).

Later nights train and validate without the excluded spans, and the gate's
history skips them.  Each version records the days it was trained without
(``version.json["excluded"]``); when the set of excluded days *inside the
data the current model has seen* changes (a day rejected or re-admitted by
hand), the next night retrains from scratch — an SGD state or the fold
statistics cannot have a day taken out — and says so (``report["retrain"]``).

By hand: ``streamrank nightly … --reject DAY`` / ``--readmit DAY``, where
DAY is a day file or its ``sha256:`` batch id; ``--new`` may then be left
out (the night trains on what is already in the store).
"""
from __future__ import annotations

import json
from pathlib import Path

from streamrank.pipelines._nightly_ingest import archive_member, content_hash, day_base, day_entries, day_span
from streamrank.pipelines._nightly_remote import as_models_dir

__all__ = ["EXCLUDED", "read_exclusions", "excluded_spans", "excluded_days", "night_days", "exclude_days",
           "reject_by_hand", "readmit", "resolve_day"]

EXCLUDED = "excluded.json"


def read_exclusions(models_dir) -> dict:
    """``DIR/excluded.json`` (``{"excluded": [], "history": []}`` when absent); a damaged file is an error."""
    from streamrank.pipelines._nightly_errors import ModelsDirError

    remote = as_models_dir(models_dir)
    try:
        raw = remote.read_excluded() if remote is not None else (Path(models_dir) / EXCLUDED).read_bytes()
    except FileNotFoundError:
        return {"excluded": [], "history": []}
    try:
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict) or not isinstance(doc.get("excluded"), list):
            raise ValueError("no 'excluded' list")
        for r in doc["excluded"]:
            if not isinstance(r, dict) or not isinstance(r.get("day"), str):
                raise ValueError(f"a record without a 'day': {r!r:.80}")
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelsDirError(f"{models_dir}/{EXCLUDED} is damaged ({exc}); restore it, or delete it to "
                             "re-admit every day") from None
    doc.setdefault("history", [])
    return doc


def _write(models_dir, doc) -> None:
    data = json.dumps(doc, indent=1, sort_keys=True).encode()
    remote = as_models_dir(models_dir)
    if remote is not None:
        remote.write_excluded(data)
        return
    from streamrank.pipelines._nightly_versions import replace_file

    replace_file(models_dir, EXCLUDED, data)


def excluded_spans(doc, unit) -> list[tuple[int, int]]:
    """The ``[start, end)`` spans of ``unit`` (groups / tuples) of the excluded days."""
    return [(int(r[unit][0]), int(r[unit][1])) for r in doc["excluded"] if unit in r]


def excluded_days(doc, unit, below=None) -> list[str]:
    """Sorted ids of the excluded days (only those starting before ``below``, when given)."""
    return sorted(r["day"] for r in doc["excluded"] if unit in r and (below is None or r[unit][0] < below))


def night_days(log, unit, lo, hi) -> list[dict]:
    """The days whose batches lie in ``[lo, hi)`` of the store: ``{"day", unit: span, "batch_ids"}`` each."""
    out, seen = [], set()
    for e in log:
        if int(e[unit][0]) < lo or int(e[unit][1]) > hi or int(e[unit][1]) <= int(e[unit][0]):
            continue
        base = str(e.get("batch_id") or "").split("#", 1)[0]
        if base in seen:
            continue
        seen.add(base)
        ents = day_entries(log, base)
        out.append({"day": base, unit: day_span(ents, unit), "batch_ids": [x["batch_id"] for x in ents]})
    return out


def exclude_days(models_dir, days, *, reason, version=None, scores=None) -> list[dict]:
    """Add ``days`` (from :func:`night_days`) to the excluded ones; returns the records added."""
    from streamrank.pipelines._nightly_versions import _now

    doc = read_exclusions(models_dir)
    have = {r["day"] for r in doc["excluded"]}
    added = [dict(d, reason=reason, version=version, scores=scores, at=_now()) for d in days if d["day"] not in have]
    if added:
        doc["excluded"].extend(added)
        _write(models_dir, doc)
    return added


def resolve_day(log, unit, ref) -> dict:
    """The day named by ``ref`` (a day file, or its ``sha256:`` batch id) as in :func:`night_days`."""
    ref = str(ref)
    bid = ref if ref.startswith("sha256:") else None
    if bid is None:
        if not Path(ref).exists() and archive_member(ref) is None:
            raise FileNotFoundError(f"{ref}: neither a day file nor a sha256: batch id of the store")
        bid = content_hash(ref)
    base = day_base(log, bid.split("#", 1)[0])
    ents = day_entries(log, base)
    if not ents:
        raise ValueError(f"{ref} ({bid[:20]}…) is not a day of the store: nothing to reject or re-admit")
    return {"day": base, unit: day_span(ents, unit), "batch_ids": [e["batch_id"] for e in ents]}


def reject_by_hand(models_dir, log, unit, ref) -> dict:
    """``--reject DAY``: exclude the day from training from now on (recorded with reason "by hand")."""
    day = resolve_day(log, unit, ref)
    added = exclude_days(models_dir, [day], reason="rejected by hand (--reject)")
    return added[0] if added else day


def readmit(models_dir, log, unit, ref) -> dict:
    """``--readmit DAY``: take the day off the excluded list (kept in ``history``); an error if not excluded."""
    from streamrank.pipelines._nightly_versions import _now

    day = resolve_day(log, unit, ref)
    doc = read_exclusions(models_dir)
    hit = [r for r in doc["excluded"] if r["day"] == day["day"]]
    if not hit:
        raise ValueError(f"{ref} is not excluded (excluded days: {excluded_days(doc, unit) or 'none'})")
    doc["excluded"] = [r for r in doc["excluded"] if r["day"] != day["day"]]
    doc["history"].append({"event": "readmitted", "day": day["day"], "record": hit[0], "at": _now()})
    _write(models_dir, doc)
    return hit[0]
