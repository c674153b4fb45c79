"""Nightly pipeline: the model directory (versions, the ``current`` pointer, pruning) and run reports.

``DIR/<version>/`` holds a model loadable with ``sr.load`` plus ``version.json``
(metrics, data range, parameters, λ-path scores); it is written completely in
a hidden temp directory and renamed into place.  ``DIR/current`` is a file
naming the promoted version, replaced atomically (temp file, fsync,
``os.replace``, directory fsync).  Reports go to ``DIR/reports/<time>.json``,
one summary line to stdout and (with matplotlib) ``DIR/metrics.png``.

One writer per models directory: a run holds an exclusive ``flock`` on
``DIR/.nightly.lock`` (:func:`models_lock`, released by the OS if the run
dies); a second run fails at once with :class:`ModelsLocked`.  Temporary
entries are named ``.<name>.<pid>-<random>.partial`` / ``.tmp`` and the
start-up sweep removes only those whose process is dead (as ``sr.save`` does).
``current`` must name a complete version inside ``DIR`` (a plain directory
name with a ``version.json``): anything else — empty, a directory, a path
such as ``../../elsewhere`` — is a :class:`ModelsDirError` naming the file,
as is a missing or unreadable ``version.json``.

A models directory at a URL (``s3://bucket/nightly``) is an Icechunk
repository with the same guarantees from transactions — a run is one commit,
an overlapping run's commit is refused — : every function here hands it to
:class:`~streamrank.pipelines._nightly_remote.RemoteModelsDir`.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

import streamrank as sr
from streamrank.pipelines._nightly_errors import ModelsDirError, ModelsLocked
from streamrank.pipelines._nightly_remote import RemoteModelsDir, as_models_dir

__all__ = ["POINTER", "META", "KERNEL_STATS", "LOCK", "ModelsDirError", "ModelsLocked", "models_lock",
           "open_models_dir", "load_version", "stats_location", "open_stats", "RemoteModelsDir",
           "current_version", "list_versions", "read_version", "switch_current", "prune", "summary_line",
           "finish_report"]

POINTER = "current"
META = "version.json"
KERNEL_STATS = "statistics.npz"
LOCK = ".nightly.lock"


@contextlib.contextmanager
def models_lock(models_dir):
    """Hold the exclusive lock ``DIR/.nightly.lock`` for a run; :class:`ModelsLocked` if another run has it.

    An advisory ``flock``: the OS releases it when the holder dies, so a killed
    run never blocks the next night.  The holder's pid and start time are
    written into the file for the loser's message.  The holder removes the file
    when it is done (still holding the lock); a run that locked a file removed
    meanwhile locks the new one instead, so two runs never hold two files.
    """
    remote = as_models_dir(models_dir)
    if remote is not None:          # object storage: the run's transaction (no lock: conflicts at its commit)
        with remote.lock():
            yield
        return
    import fcntl

    from streamrank.io import open_lock_file, refuse_foreign_link

    refuse_foreign_link(models_dir, "write a models directory")     # versions are written and pruned there
    path = Path(models_dir) / LOCK
    while True:
        fd = open_lock_file(path)        # never through a planted link: the holder truncates and writes it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            except OSError:
                holder = "unknown"
            os.close(fd)
            raise ModelsLocked(f"{models_dir} is locked by another nightly run ({holder}; lock {path}); "
                               "one writer at a time: this run changed nothing") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.lstat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)                 # its holder removed that file when done: lock the one at the path now
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, started {_now()}".encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)          # still locked: a run waiting on this file retries on the path
        except FileNotFoundError:
            pass
        os.close(fd)


def _tmp_name(d, name, kind):
    """``.<name>.<pid>-<random>.<kind>``: the pid tells a dead run's leftover from a live one's."""
    return Path(d) / f".{name}.{os.getpid()}-{uuid.uuid4().hex}.{kind}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def current_version(models_dir):
    """Name of the promoted version (the ``current`` pointer), or None if there is no pointer.

    :class:`ModelsDirError` (naming the file) if ``current`` is not a file, is
    empty or unreadable, or names anything but a complete version directly
    inside ``models_dir``.
    """
    remote = as_models_dir(models_dir)
    if remote is not None:
        return remote.current_version()

    d = Path(models_dir)
    p = d / POINTER
    if not os.path.lexists(p):
        return None
    if p.is_dir():
        raise ModelsDirError(f"{p} is a directory; it should be the pointer file naming the promoted version")
    if not p.is_file():
        raise ModelsDirError(f"{p} is not a regular file (a dangling link?); it should name the promoted version")
    try:
        raw = p.read_bytes()[:4096]
        name = raw.decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelsDirError(f"{p} cannot be read as the name of a version: {exc}") from None
    if not name:
        raise ModelsDirError(f"{p} is empty; it should name the promoted version (restore it, or delete it and "
                             "run with --full to retrain from scratch)")
    if (name in (".", "..") or name.startswith(".") or "/" in name or "\\" in name or "\0" in name
            or not (d / name).is_dir() or (d / name).is_symlink()):
        raise ModelsDirError(f"{p} names {name[:80]!r}, which is not a version directory inside {d}")
    if not (d / name / META).is_file():
        raise ModelsDirError(f"{p} names {name!r}, but {d / name / META} is missing (an incomplete version)")
    return name


def list_versions(models_dir):
    """Complete versions (directories with ``version.json``), oldest first."""
    remote = as_models_dir(models_dir)
    if remote is not None:
        return remote.list_versions()

    d = Path(models_dir)
    if not d.is_dir():
        return []
    vs = [p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / META).is_file()]
    return sorted(vs, key=lambda v: read_version(d, v).get("seq", 0))


def read_version(models_dir, version) -> dict:
    """``DIR/<version>/version.json``; :class:`ModelsDirError` naming the file if missing or damaged."""
    remote = as_models_dir(models_dir)
    if remote is not None:
        return remote.read_version(version)

    f = Path(models_dir) / version / META
    try:
        with open(f, "rb") as fh:
            meta = json.loads(fh.read().decode("utf-8"))
    except FileNotFoundError:
        raise ModelsDirError(f"{f} is missing (an incomplete or damaged version)") from None
    except IsADirectoryError:
        raise ModelsDirError(f"{f} is a directory, not the version's metadata") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelsDirError(f"{f} is not valid JSON (truncated or damaged?): {exc}") from None
    if not isinstance(meta, dict):
        raise ModelsDirError(f"{f} holds a JSON {type(meta).__name__}, not a version's metadata object")
    return meta


def seen_by(models_dir, version, unit) -> int:
    """How many ``unit`` (groups / tuples) the version's model was trained on (its ``data`` record)."""
    meta = read_version(models_dir, version)
    try:
        n = meta["data"][unit][1]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise TypeError
    except (KeyError, IndexError, TypeError):
        raise ModelsDirError(f"{Path(models_dir) / version / META}: 'data.{unit}' is missing or not a "
                             f"[start, end] of non-negative integers (was this version written for another "
                             "learner?)") from None
    return int(n)


def _write_version(models_dir, name, model, meta, arrays=None):
    """Model (+ statistics) + version.json in a hidden temp dir, then one rename: complete or absent."""
    remote = as_models_dir(models_dir)
    if remote is not None:
        return remote.write_version(name, model, meta, arrays)

    d = Path(models_dir)
    tmp = _tmp_name(d, name, "partial")
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
    remote = as_models_dir(models_dir)
    if remote is not None:
        return remote.switch_current(version)

    replace_file(models_dir, POINTER, (version + "\n").encode())


def replace_file(models_dir, name, data: bytes) -> None:
    """Atomically and durably make ``DIR/name`` hold ``data``: a temp file named for this process
    (:func:`_tmp_name`, so the start-up sweep removes a dead run's leftover), fsync, ``os.replace``, and an
    fsync of the directory so the rename survives a power cut."""
    d = Path(models_dir)
    tmp = _tmp_name(d, name, "tmp")
    with open(tmp, "xb") as fh:                # a fresh random name: never an existing file or a link
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, d / name)
    try:  # make the rename durable
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # pragma: no cover - platforms without directory fsync
        pass


def _clean_partial(models_dir):
    """Remove temporary versions and pointer files of runs that died (never those of a live process)."""
    remote = as_models_dir(models_dir)
    if remote is not None:
        return remote.clean_partial()

    from streamrank.persistence import writer_alive

    for p in Path(models_dir).glob(".*.partial"):
        if not writer_alive(p):
            shutil.rmtree(p, ignore_errors=True)
    for name in (POINTER, "excluded.json"):   # the files written through replace_file
        for p in Path(models_dir).glob(f".{name}.*.tmp"):
            if not writer_alive(p):
                p.unlink(missing_ok=True)
    for p in Path(models_dir).glob("days/.*.tmp"):     # the data checks' day profiles
        if not writer_alive(p):
            p.unlink(missing_ok=True)


def prune(models_dir, keep):
    """Delete all but the newest ``keep`` versions; the current version is always kept."""
    remote = as_models_dir(models_dir)
    if remote is not None:
        return remote.prune(keep)

    keep = int(keep)
    if keep < 1:
        raise ValueError(f"--keep must be >= 1, got {keep}")
    cur = current_version(models_dir)
    vs = list_versions(models_dir)
    removed = []
    for v in vs[:-keep]:
        if v != cur:
            # rename first (atomic): a crash mid-delete leaves a hidden .partial that the next run removes
            doomed = _tmp_name(models_dir, v, "partial")
            os.replace(Path(models_dir) / v, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            removed.append(v)
    return removed


def finish_report(report, models_dir, keep, plot, out):
    """Prune (``keep``), write the JSON report, the plot and the summary line; returns the report."""
    if keep is not None:
        report["pruned"] = prune(models_dir, keep)
    report["finished"] = _now()
    stamp = report["started"].replace(":", "").replace("-", "").replace(".", "")
    remote = as_models_dir(models_dir)
    if remote is not None:
        remote.write_report(stamp, report)
        if plot:
            report["plot_skipped"] = "the models directory is on object storage (draw it with streamrank plot " \
                                     "from a local copy)"
        plot = False
    else:
        _write_local_report(models_dir, stamp, report)
    if plot:
        report["plot"] = _plot(models_dir)
        if report["plot"] is None:
            report["plot_skipped"] = "matplotlib is not installed (pip install 'streamrank[plot]')"
    line = summary_line(report)
    if report.get("plot_skipped"):
        line += f"; metrics.png skipped: {report['plot_skipped']}"
    out.write(line + "\n")
    out.flush()
    return report


def _write_local_report(models_dir, stamp, report):
    rdir = Path(models_dir) / "reports"
    rdir.mkdir(exist_ok=True)
    tmp = _tmp_name(rdir, f"{stamp}.json", "tmp")
    with open(tmp, "x") as fh:                 # a fresh random name: never an existing file or a planted link
        json.dump(report, fh, indent=1, sort_keys=True)
    os.replace(tmp, rdir / f"{stamp}.json")


def open_models_dir(models_dir, storage_options=None):
    """``models_dir`` as the pipeline uses it: a :class:`RemoteModelsDir` for a URL, else a local Path."""
    remote = as_models_dir(models_dir, storage_options)
    return remote if remote is not None else Path(models_dir)


def stats_location(models_dir, version):
    """Where the learners find a version's statistics: its directory, or ``(RemoteModelsDir, version)``."""
    return (models_dir, version) if isinstance(models_dir, RemoteModelsDir) else Path(models_dir) / version


def load_version(models_dir, version):
    """The model of ``DIR/<version>``."""
    if isinstance(models_dir, RemoteModelsDir):
        return models_dir.load(version)
    return sr.load(Path(models_dir) / version)


def open_stats(version_dir):
    """``<version>/statistics.npz`` for ``np.load`` (``version_dir`` from :func:`stats_location`)."""
    if isinstance(version_dir, tuple):
        return version_dir[0].open_stats(version_dir[1])
    return Path(version_dir) / KERNEL_STATS


def summary_line(report) -> str:
    line = _summary(report)
    for q in report.get("quarantined") or []:   # the data checks (:mod:`streamrank.pipelines._nightly_checks`)
        line += f"; quarantined {Path(q['file']).name} ({', '.join(q['failed'])})"
    for d in (report.get("checks") or {}).get("days") or []:
        if d["decision"] == "forced" and d["failed"]:
            line += f"; trained on {Path(d['file']).name} despite its failed checks ({', '.join(d['failed'])}: --force)"
    return line


def _summary(report) -> str:
    ing = report.get("ingest", [])
    new = sum(b["rows"][1] - b["rows"][0] for b in ing if b["appended"])
    dup = sum(1 for b in ing if not b["appended"])
    head = f"nightly {report['learner']}: ingested {sum(b['appended'] for b in ing)} batch(es) (+{new} rows"
    head += f", {dup} already in the store)" if dup else ")"
    if report["status"] == "up-to-date":
        return head + f"; model up to date, current={report['current']}"
    m, c = report.get("metrics") or {}, report.get("current_metrics")
    mk = next((x for x in m if x.startswith("ndcg")), next(iter(m), None))
    v = report.get("validation") or {}      # where the figure above comes from (metrics.png draws it)
    vk = f"{mk} ({v['weighted']})" if (mk and v.get("weighted")) else mk     # scored with the training weights
    val = f"{vk} {m[mk]:.4f}" if mk else ""
    if c and mk:
        val += f" (current {c[mk]:.4f})"
    where_v = {"holdout": "on the held-out newest day", "progressive": "progressive on the newest day",
               "in-sample": "in-sample: no earlier data to hold the newest day out of",
               "fixed-store": f"on --validation {v.get('store')}"}.get(v.get("scheme"), "")
    if val and where_v:
        val += f" {where_v}"
    g = report.get("gate")
    if g:   # the decision: both models out of fold on the history they were trained on
        gk = g["metric"]
        if g.get("scheme") == "held-out-queries":      # SGD: the queries neither model was trained on
            where = (f"on {g['n_tuples']} held-out history tuples" if "n_tuples" in g
                     else f"on {g['n_groups']} held-out history queries")
        else:
            where = f"out of fold on {g.get('n_groups', g['groups'][1] - g['groups'][0])} history groups"
        newest = f"newest day {vk} {m[mk]:.4f}" + (f" (current {c[mk]:.4f})" if c and mk else "") if mk else ""
        gkl = f"{gk} ({g['weighted']})" if g.get("weighted") else gk
        val = (f"{newest}; " if newest else "") + \
            f"gate {gkl} {g['candidate'][gk]:.4f} (current {g['current'][gk]:.4f}) {where}"
    alpha = f" alpha={report['alpha']:.4g}" if report.get("alpha") is not None else ""
    tail = f"; excluded from training: {', '.join(d[:15] + '…' for d in report['excluded'])}" \
        if report.get("excluded") else ""
    return (head + f"; {report['mode']} {report['version']}{alpha} {val} -> "
            f"{report['status']}; current={report['current']}{tail}")


def _plot(models_dir):
    """``DIR/metrics.png`` over versions; None (and nothing written) when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401 - the optional ``plot`` extra
    except ImportError:
        return None
    from streamrank.plot import nightly_history

    path = Path(models_dir) / "metrics.png"
    fig = nightly_history(models_dir, path)
    import matplotlib.pyplot as plt

    plt.close(fig)
    _plot_checks(models_dir)
    return str(path)


def _plot_checks(models_dir):
    """``DIR/checks.png``: the data checks of every day (:func:`streamrank.plot.nightly_checks_history`),
    when some report holds them."""
    from streamrank.plot import nightly_checks_history

    try:
        fig = nightly_checks_history(models_dir, Path(models_dir) / "checks.png")
    except ValueError:          # no report with checks yet (every night ran with --no-checks)
        return None
    import matplotlib.pyplot as plt

    plt.close(fig)
    return str(Path(models_dir) / "checks.png")
