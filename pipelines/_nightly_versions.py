"""Nightly pipeline: the model directory (versions, the ``current`` pointer, pruning) and run reports.

``DIR/<version>/`` holds a model loadable with ``sr.load`` plus ``version.json``
(metrics, data range, parameters, λ-path scores); it is written completely in
a hidden temp directory and renamed into place.  ``DIR/current`` is a file
naming the promoted version, replaced atomically (temp file, fsync,
``os.replace``, directory fsync).  Reports go to ``DIR/reports/<time>.json``,
one summary line to stdout and (with matplotlib) ``DIR/metrics.png``.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

import streamrank as sr

__all__ = ["POINTER", "META", "KERNEL_STATS", "current_version", "list_versions", "read_version", "switch_current",
           "prune", "summary_line", "finish_report"]

POINTER = "current"
META = "version.json"
KERNEL_STATS = "statistics.npz"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def current_version(models_dir):
    """Name of the promoted version (the ``current`` pointer), or None."""
    p = Path(models_dir) / POINTER
    if not p.is_file():
        return None
    name = p.read_text().strip()
    return name or None


def list_versions(models_dir):
    """Complete versions (directories with ``version.json``), oldest first."""
    d = Path(models_dir)
    if not d.is_dir():
        return []
    vs = [p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / META).is_file()]
    return sorted(vs, key=lambda v: read_version(d, v).get("seq", 0))


def read_version(models_dir, version) -> dict:
    with open(Path(models_dir) / version / META) as fh:
        return json.load(fh)


def _write_version(models_dir, name, model, meta, arrays=None):
    """Model (+ statistics) + version.json in a hidden temp dir, then one rename: complete or absent."""
    d = Path(models_dir)
    tmp = d / f".{name}.{uuid.uuid4().hex}.partial"
    sr.save(model, tmp)
    if arrays:
        np.savez(tmp / KERNEL_STATS, **arrays)
    with open(tmp / META, "w") as fh:
        json.dump(meta, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, d / name)


def switch_current(models_dir, version):
    """Atomically point ``DIR/current`` at ``version`` (write a temp file, fsync, os.replace)."""
    d = Path(models_dir)
    tmp = d / f".{POINTER}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as fh:
        fh.write(version + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, d / POINTER)
    try:  # make the rename durable
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # pragma: no cover - platforms without directory fsync
        pass


def _clean_partial(models_dir):
    for p in Path(models_dir).glob(".*.partial"):
        shutil.rmtree(p, ignore_errors=True)
    for p in Path(models_dir).glob(f".{POINTER}.*.tmp"):
        p.unlink(missing_ok=True)


def prune(models_dir, keep):
    """Delete all but the newest ``keep`` versions; the current version is always kept."""
    keep = int(keep)
    if keep < 1:
        raise ValueError(f"--keep must be >= 1, got {keep}")
    cur = current_version(models_dir)
    vs = list_versions(models_dir)
    removed = []
    for v in vs[:-keep]:
        if v != cur:
            # rename first (atomic): a crash mid-delete leaves a hidden .partial that the next run removes
            doomed = Path(models_dir) / f".{v}.{uuid.uuid4().hex}.partial"
            os.replace(Path(models_dir) / v, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            removed.append(v)
    return removed


def finish_report(report, models_dir, keep, plot, out):
    """Prune (``keep``), write the JSON report, the plot and the summary line; returns the report."""
    if keep is not None:
        report["pruned"] = prune(models_dir, keep)
    report["finished"] = _now()
    rdir = Path(models_dir) / "reports"
    rdir.mkdir(exist_ok=True)
    stamp = report["started"].replace(":", "").replace("-", "").replace(".", "")
    tmp = rdir / f".{stamp}.json.tmp"
    with open(tmp, "w") as fh:
        json.dump(report, fh, indent=1, sort_keys=True)
    os.replace(tmp, rdir / f"{stamp}.json")
    if plot:
        report["plot"] = _plot(models_dir)
    out.write(summary_line(report) + "\n")
    out.flush()
    return report


def summary_line(report) -> str:
    ing = report.get("ingest", [])
    new = sum(b["rows"][1] - b["rows"][0] for b in ing if b["appended"])
    dup = sum(1 for b in ing if not b["appended"])
    head = f"nightly {report['learner']}: ingested {sum(b['appended'] for b in ing)} batch(es) (+{new} rows"
    head += f", {dup} already in the store)" if dup else ")"
    if report["status"] == "up-to-date":
        return head + f"; model up to date, current={report['current']}"
    m, c = report.get("metrics") or {}, report.get("current_metrics")
    mk = next((x for x in m if x.startswith("ndcg")), next(iter(m), None))
    val = f"{mk} {m[mk]:.4f}" if mk else ""
    if c and mk:
        val += f" (current {c[mk]:.4f})"
    alpha = f" alpha={report['alpha']:.4g}" if report.get("alpha") is not None else ""
    return (head + f"; {report['mode']} {report['version']}{alpha} {val} -> "
            f"{report['status']}; current={report['current']}")


def _plot(models_dir):
    path = Path(models_dir) / "metrics.png"
    tmp = path.with_name(".metrics.png.tmp")
    try:  # the library's plot of the run reports, when streamrank.plot provides it
        from streamrank.plot import nightly_history
    except (ImportError, AttributeError):
        nightly_history = None
    if nightly_history is not None:
        import matplotlib.pyplot as plt

        fig = nightly_history(models_dir)
        fig.savefig(tmp, format="png")
        plt.close(fig)
        os.replace(tmp, path)
        return str(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    vs = list_versions(models_dir)
    metas = [read_version(models_dir, v) for v in vs]
    if not metas:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in sorted({k for m in metas for k in (m.get("metrics") or {})}):
        ax.plot([m["seq"] for m in metas], [(m.get("metrics") or {}).get(name, np.nan) for m in metas],
                marker="o", label=name)
    ax.set_xlabel("version")
    ax.set_title("validation metrics over nights")
    ax.legend()
    fig.savefig(tmp, format="png", dpi=80)
    plt.close(fig)
    os.replace(tmp, path)
    return str(path)
