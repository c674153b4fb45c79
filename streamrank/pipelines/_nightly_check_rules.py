"""Nightly data checks, the rules: each check of a day's profile against the accepted days' pooled one.

:func:`run_checks` returns one result per check (``check``, ``status`` passed / failed / skipped,
``figure``, ``threshold``, ``detail``); :func:`pool` pools the accepted days' records (moments exactly,
label counts summed, medians of volume, their agreement figures); :func:`failure_line` is the one line
naming every failed check.  The checks and their statistics are described in
:mod:`streamrank.pipelines._nightly_checks`.
"""
from __future__ import annotations

import math

import numpy as np

from streamrank.pipelines._nightly_profiles import _Moments

__all__ = ["CHECKS", "run_checks", "pool", "failure_line"]

CHECKS = ("schema", "label_set", "label_drift", "feature_drift", "zero_fraction", "agreement", "volume",
          "duplicates")
_PSI_FLOOR = 1e-4


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
