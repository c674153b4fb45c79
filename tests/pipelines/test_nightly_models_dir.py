"""Nightly pipeline (issue 16): one run per models directory, the ``current`` pointer and version.json are
checked, leftovers of live runs are kept, and every failure is one line with an exit code."""
from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr
from pipeline_data import make_day

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from streamrank.pipelines import nightly  # noqa: E402

GRID = "2^-2:2^2"


def _day(tmp, d):
    p = tmp / f"day{d}.npz"
    X, y, qid = make_day(d)
    np.savez(p, X=X, y=y, qid=qid)
    return p


def _argv(tmp, d=1, *extra):
    return ["--store", str(tmp / "logs.zarr"), "--new", str(_day(tmp, d)), "--models", str(tmp / "models"),
            "--alphas", GRID, "--tolerance", "1.0", "--no-plot", "--folds", "2", *extra]


def _run(tmp, capsys, d=1, *extra):
    code = nightly.main(_argv(tmp, d, *extra))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def night1(tmp_path, capsys):
    code, out, err = _run(tmp_path, capsys)
    assert code == 0 and "-> promoted; current=v0001" in out, err
    return tmp_path


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamrank nightly: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("damage, expect", [
    (lambda m: (m / "current").write_text("../../elsewhere\n"), r"current names '\.\./\.\./elsewhere'"),
    (lambda m: (m / "current").write_text("v0001/../../elsewhere"), r"not a version directory inside"),
    (lambda m: (m / "current").write_text(""), r"current is empty"),
    (lambda m: (m / "current").write_text("   \n"), r"current is empty"),
    (lambda m: ((m / "current").unlink(), (m / "current").mkdir()), r"current is a directory"),
    (lambda m: (m / "current").write_text("v0009"), r"names 'v0009', which is not a version"),
    (lambda m: (m / "current").write_text(".v0001"), r"not a version directory"),
    (lambda m: (m / "v0001" / "version.json").unlink(), r"v0001/version\.json is missing"),
    (lambda m: (m / "v0001" / "version.json").write_text('{"seq": 1, "data": {"gro'),
     r"v0001/version\.json is not valid JSON"),
    (lambda m: (m / "v0001" / "version.json").write_text("[1, 2]"), r"version\.json holds a JSON list"),
    (lambda m: (m / "v0001" / "version.json").write_text('{"seq": 1, "data": {}}'),
     r"version\.json: 'data\.groups' is missing"),
])
def test_damaged_pointer_or_version_is_one_line_naming_the_file(night1, capsys, damage, expect):
    """Not a silent full retrain, not a JSONDecodeError, never a model from outside the directory."""
    tmp = night1
    models = tmp / "models"
    elsewhere = tmp / "elsewhere"          # a perfectly loadable model outside the models directory
    shutil.copytree(models / "v0001", elsewhere)
    (models / "sub").mkdir()
    damage(models)
    before = sorted(p.name for p in models.iterdir())
    code, out, err = _run(tmp, capsys, 2)
    line = _one_line(err)
    assert code == 4, err
    assert __import__("re").search(expect, line), line
    assert str(models) in line
    assert sorted(p.name for p in models.iterdir()) == before  # nothing trained, nothing promoted
    if (models / "current").is_file() and "/" in (models / "current").read_text():
        with pytest.raises(sr.persistence.ModelFormatError, match="not a version directory beside it"):
            sr.load(models / "current")


def test_lock_held_is_one_line_exit_5(night1, capsys):
    from streamrank.pipelines._nightly_versions import models_lock

    with models_lock(night1 / "models"):
        code, out, err = _run(night1, capsys, 2)
    assert code == 5 and "locked by another nightly run (pid " in _one_line(err)
    assert "one writer at a time" in err
    assert not out
    code, out, err = _run(night1, capsys, 2)       # released: the next run goes ahead
    assert code == 0 and "-> promoted; current=v0002" in out, err


def test_no_lock_file_is_left_behind(night1, tmp_path, capsys):
    """A run, a failed run and a lock held by hand all remove ``.nightly.lock`` when they end; a file removed
    while a run waited on it is not a second lock (the run locks the file at the path)."""
    import fcntl
    import os

    from streamrank.pipelines._nightly_versions import LOCK, ModelsLocked, models_lock

    lock = night1 / "models" / LOCK
    assert not lock.exists()                                     # the fixture's night
    (night1 / "bad.txt").write_text("not a number qid:1 1:0\n")
    code = nightly.main(["--store", str(night1 / "logs.zarr"), "--new", str(night1 / "bad.txt"),
                         "--models", str(night1 / "models"), "--no-plot"])
    assert code == 4 and "bad label" in _one_line(capsys.readouterr().err)
    assert not lock.exists()                                     # a failed night too
    with models_lock(night1 / "models"):
        assert lock.exists()
        with pytest.raises(ModelsLocked):
            with models_lock(night1 / "models"):
                pass
    assert not lock.exists()
    stale = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)         # a file another run has unlinked meanwhile
    os.unlink(lock)
    with models_lock(night1 / "models"):
        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)        # the old inode is free: not what the run holds
        assert lock.exists() and os.stat(lock).st_ino != os.fstat(stale).st_ino
    os.close(stale)


def test_a_day_inside_a_tar_archive(tmp_path, capsys):
    """``--new ARCHIVE.tar.gz:MEMBER`` as ``streamrank ingest`` takes it: read in place, hashed by the member's
    bytes (the same night again appends nothing); a missing member is exit 3 naming it."""
    import io
    import tarfile

    X, y, qid = make_day(1)
    text = "".join(f"{int(v)} qid:{q} " + " ".join(f"{j + 1}:{x:.6g}" for j, x in enumerate(row)) + "\n"
                   for row, v, q in zip(X, y, qid, strict=True))
    with tarfile.open(tmp_path / "days.tar.gz", "w:gz") as tf:
        info = tarfile.TarInfo("logs/day1.txt")
        info.size = len(text.encode())
        tf.addfile(info, io.BytesIO(text.encode()))
    argv = ["--store", str(tmp_path / "logs.zarr"), "--new", f"{tmp_path / 'days.tar.gz'}:logs/day1.txt",
            "--models", str(tmp_path / "models"), "--alphas", GRID, "--folds", "2", "--no-plot"]
    code, out, err = nightly.main(argv), *capsys.readouterr()
    assert code == 0 and "-> promoted; current=v0001" in out, err
    assert sr.GroupStore.open(tmp_path / "logs.zarr").n_rows == len(y)
    code, out, err = nightly.main(argv), *capsys.readouterr()
    assert code == 0 and "0 batch(es)" in out and "already in the store" in out, out + err
    argv[3] = f"{tmp_path / 'days.tar.gz'}:logs/nope.txt"
    code, out, err = nightly.main(argv), *capsys.readouterr()
    assert code == 3 and "has no member 'logs/nope.txt'" in _one_line(err)


def test_disk_full_is_one_line_exit_5(night1, capsys, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(night1 / "models" / ".v0002.partial"))

    monkeypatch.setattr(nightly, "_write_version", full)
    code, out, err = _run(night1, capsys, 2)
    assert code == 5 and "No space left on device" in _one_line(err)
    assert nightly.current_version(night1 / "models") == "v0001"


def test_missing_day_file_is_one_line_exit_3(tmp_path, capsys):
    argv = _argv(tmp_path)
    argv[argv.index("--new") + 1] = str(tmp_path / "nope.npz")
    code = nightly.main(argv)
    assert code == 3 and "nope.npz" in _one_line(capsys.readouterr().err)


def test_startup_sweep_keeps_leftovers_of_live_runs(night1, capsys):
    """Only a dead process's temporary version is removed (was: every hidden *.partial, a concurrent run's too)."""
    models = night1 / "models"
    dead, live = _dead_pid(), sr.persistence.os.getpid()
    for pid in (dead, live):
        (models / f".v0007.{pid}-0a1b.partial").mkdir()
        (models / f".v0007.{pid}-0a1b.partial" / "x").write_text("half a model")
        (models / f".current.{pid}-0a1b.tmp").write_text("v0007")
        (models / f".excluded.json.{pid}-0a1b.tmp").write_text("{}")   # a killed --reject's temp file
    (models / ".v0008.0a1b2c.partial").mkdir()       # an unknown writer: kept
    code, out, err = _run(night1, capsys, 2)
    assert code == 0, err
    assert not (models / f".v0007.{dead}-0a1b.partial").exists()
    assert not (models / f".current.{dead}-0a1b.tmp").exists()
    assert not (models / f".excluded.json.{dead}-0a1b.tmp").exists()
    assert (models / f".v0007.{live}-0a1b.partial" / "x").read_text() == "half a model"
    assert (models / f".current.{live}-0a1b.tmp").exists()
    assert (models / f".excluded.json.{live}-0a1b.tmp").exists()
    assert (models / ".v0008.0a1b2c.partial").exists()


NO_MPL = textwrap.dedent("""
    import sys
    sys.modules["matplotlib"] = None          # the optional 'plot' extra is not installed
    sys.path.insert(0, {root!r})
    from streamrank.pipelines import nightly
    sys.exit(nightly.main(sys.argv[1:]))
""")


def test_runs_without_matplotlib_and_says_it_skipped_the_plot(tmp_path):
    script = tmp_path / "nompl.py"
    script.write_text(NO_MPL.format(root=str(ROOT)))
    argv = [a for a in _argv(tmp_path) if a != "--no-plot"]
    proc = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "-> promoted; current=v0001" in proc.stdout
    assert "metrics.png skipped: matplotlib is not installed (pip install 'streamrank[plot]')" in proc.stdout
    assert not (tmp_path / "models" / "metrics.png").exists()
    rep = json.loads(next((tmp_path / "models" / "reports").glob("*.json")).read_text())
    assert rep["status"] == "promoted"


RACER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from streamrank.pipelines import nightly
    import streamrank.rankrls.linear                  # imports done before the start line
    print("ready", flush=True)
    t0 = float(sys.stdin.readline())
    while time.time() < t0:
        pass
    sys.exit(nightly.main(sys.argv[1:]))
""")


@pytest.mark.slow
def test_two_real_overlapping_nights_never_break_current(tmp_path, fork_server):
    """Two nightly processes on one models directory, the second started 0 … 0.6 s after the first.

    Never both "promoted", ``current`` always names a complete loadable version, and a loser that
    overlapped gets the one-line lock error (exit 5).  (Was: both promoted, ``current`` pointing at a
    version the other run's start-up sweep had deleted.)  Real processes, forked from the pre-imported fork
    server (tests/_forked.py).
    """
    script = tmp_path / "racer.py"
    script.write_text(RACER.format(root=str(ROOT)))
    outcomes = []
    for i, offset in enumerate([0.0, 0.1, 0.6]):
        run = tmp_path / f"r{i}"
        run.mkdir()
        argv = _argv(run)
        procs = [fork_server.popen([str(script), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE) for _ in range(2)]
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        t0 = time.time() + 0.05
        for p, dt in zip(procs, (0.0, offset)):
            p.stdin.write(f"{t0 + dt!r}\n")
            p.stdin.flush()
        res = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        promoted = [r for r in res if "-> promoted" in r[1]]
        assert len(promoted) == 1, res
        for code, out, err in res:
            if code != 0:
                assert code == 5 and "locked by another nightly run" in _one_line(err), (code, err)
            else:
                assert "-> promoted" in out or "model up to date, current=v0001" in out, out
        models = run / "models"
        assert nightly.current_version(models) == "v0001"
        assert nightly.list_versions(models) == ["v0001"]
        assert not list(models.glob(".*.partial"))
        sr.load(models / "current").predict(make_day(1)[0])
        outcomes.append(sorted(code for code, _, _ in res))
    assert [0, 5] in outcomes, outcomes  # the race window was hit at least once
    print("exit codes per offset:", outcomes)


def test_nightly_partial_day_commit_is_reported_with_the_line(tmp_path, capsys):
    """A qid that recurs in a later chunk of a text day: one line saying what was committed and where."""
    lines = [f"{i % 3} qid:{1 + i // 4} 1:{i}.5 2:{-i} 3:1 4:0 5:2 6:1" for i in range(40)]
    lines[30] = lines[30].replace("qid:8", "qid:2")
    day = tmp_path / "day.txt"
    day.write_text("\n".join(lines) + "\n")
    argv = _argv(tmp_path)
    argv[argv.index("--new") + 1] = str(day)
    code = nightly.main(argv + ["--chunk-mb", "0.0004"])
    line = _one_line(capsys.readouterr().err)
    assert code == 4
    m = __import__("re").search(r"day\.txt \(line 31\): .*; committed (\d+) rows of this day in (\d+) batch\(es\) "
                                r"before it \(they stay in the store; a store has no undo\): fix line 31 and "
                                r"re-run the same night: it resumes after the committed rows", line)
    assert m, line
    n = int(m.group(1))
    assert sr.GroupStore.open(tmp_path / "logs.zarr").n_rows == n and 0 < n < 30
    assert nightly.current_version(tmp_path / "models") is None


def _bad_line_day(tmp_path):
    lines = [f"{i % 3} qid:{1 + i // 4} 1:{i}.5 2:{-i} 3:1 4:0 5:2 6:1" for i in range(40)]
    good = list(lines)
    lines[30] = lines[30].replace("qid:8", "qid:2")      # qid 2 again, in a later chunk: refused at append
    day = tmp_path / "day.txt"
    day.write_text("\n".join(lines) + "\n")
    return day, good


def _night(fork_server, tmp_path, day, *extra):
    """The night as the scheduler runs it: a real process (``python -m streamrank.pipelines.nightly``, forked
    from the pre-imported fork server, tests/_forked.py)."""
    argv = _argv(tmp_path)
    argv[argv.index("--new") + 1] = str(day)
    return fork_server.run(["-m", "streamrank.pipelines.nightly", *argv, "--chunk-mb", "0.0004", *extra],
                           timeout=600)


def test_fixing_the_bad_line_and_rerunning_the_night_resumes_exactly_once(tmp_path, fork_server):
    """Issue 16: "re-run after fixing line N resumes" -- the fixed file (another content hash) continues the
    committed rows of the day; a second re-run appends nothing; the store equals the fixed file read whole."""
    from streamrank.io.svmlight import read_svmlight

    day, good = _bad_line_day(tmp_path)
    first = _night(fork_server, tmp_path, day)
    assert first.returncode == 4 and "re-run the same night" in first.stderr, first.stderr
    n = sr.GroupStore.open(tmp_path / "logs.zarr").n_rows
    day.write_text("\n".join(good) + "\n")                   # the user fixes line 31
    second = _night(fork_server, tmp_path, day)
    assert second.returncode == 0, second.stderr[-3000:]
    store = sr.GroupStore.open(tmp_path / "logs.zarr")
    X, y, qid = read_svmlight(str(day), n_features=6, dense=True)
    assert store.n_rows == 40 and store.n_groups == 10
    blocks = list(store.blocks())
    np.testing.assert_array_equal(np.concatenate([b.X for b in blocks]), np.asarray(X, dtype=np.float32))
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), y)
    np.testing.assert_array_equal(np.concatenate([b.row_qid() for b in blocks]), qid)
    ids = [e["batch_id"] for e in store.batches]
    base = ids[0].split("#")[0]
    fixed = ids[-1].split("~")[-1]
    assert all(i.startswith(base + "#") for i in ids) and ids[-1] == f"{base}#~{fixed}" and fixed != base
    assert sum(e["rows"][1] - e["rows"][0] for e in store.batches if "~" not in e["batch_id"]) == n
    assert store.verify() == len(ids)
    assert nightly.current_version(tmp_path / "models") is not None
    third = _night(fork_server, tmp_path, day)                               # the same night once more: nothing appended
    assert third.returncode == 0, third.stderr[-3000:]
    again = sr.GroupStore.open(tmp_path / "logs.zarr")
    assert again.n_rows == 40 and [e["batch_id"] for e in again.batches] == ids


def test_a_file_whose_first_rows_differ_is_another_day_not_a_resume(tmp_path):
    from streamrank.pipelines._nightly_ingest import ingest

    day, good = _bad_line_day(tmp_path)
    with pytest.raises(ValueError, match="re-run the same night"):
        ingest(tmp_path / "logs.zarr", [day], chunk_bytes=400)
    n = sr.GroupStore.open(tmp_path / "logs.zarr").n_rows
    other = [ln.replace("1:0.5 ", "1:9.5 ") for ln in good]          # row 0 changed: not the same day
    day.write_text("\n".join(other) + "\n")
    rec = ingest(tmp_path / "logs.zarr", [day], chunk_bytes=400)[0]
    store = sr.GroupStore.open(tmp_path / "logs.zarr")
    assert store.n_rows == n + 40 and rec["rows"] == [n, n + 40]
    assert not any("~" in e["batch_id"] for e in store.batches)


def test_distributed_pipeline_failure_is_one_line(tmp_path, capsys):
    from streamrank.pipelines import distributed as pdist

    code = pdist.main(["--store", str(tmp_path / "nope.zarr"), "--model", str(tmp_path / "m.zarr"),
                       "--learner", "rankrls", "--workers", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 3 and len(err.splitlines()) == 1, err
    assert err.startswith("streamrank distributed: error: ") and "nope.zarr" in err


def test_distributed_refuses_an_existing_model_as_fit_does(tmp_path, capsys):
    """``streamrank distributed`` replaced an existing model silently where ``fit`` refuses: now it refuses
    (exit 5, before any cluster starts) unless ``--overwrite``; ``--storage-options`` is parsed as fit's."""
    from streamrank.pipelines import distributed as pdist

    X, y, qid = make_day(1)
    sr.GroupStore.create(tmp_path / "s.zarr", X.shape[1]).append(X, y, qid, batch_id="d")
    sr.save(sr.RankRLS(alpha=3.0).fit(X, y, qid), tmp_path / "m.zarr")
    argv = ["--store", str(tmp_path / "s.zarr"), "--model", str(tmp_path / "m.zarr"), "--learner", "rankrls",
            "--workers", "1"]
    code = pdist.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 5 and "--overwrite" in err and err.startswith("streamrank distributed: error: "), err
    assert sr.load(tmp_path / "m.zarr").alpha == 3.0
    with pytest.raises(SystemExit) as exc:
        pdist.main([*argv, "--storage-options", "not json"])
    assert exc.value.code == 2 and "not JSON" in capsys.readouterr().err
