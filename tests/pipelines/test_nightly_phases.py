"""`streamrank nightly` tells its phases (ingest, verify, statistics, λ selection, validation, gate, version)
with their own counts, and Ctrl-C stops it within seconds with nothing promoted (issue 24)."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline_data import make_day
from streamrank.pipelines import nightly

SCRIPT = Path(sys.executable).parent / "streamrank"


def _day(tmp, d, n_groups=12):
    p = tmp / f"day{d}.npz"
    np.savez(p, **dict(zip("X y qid".split(), make_day(d, n_groups=n_groups))))
    return p


def _main(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = nightly.main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def _order(err, names):
    """Index of the first line of each phase name, in ``err``; they must come in this order."""
    lines = err.splitlines()
    at = [next((i for i, s in enumerate(lines) if f"streamrank nightly: {n}" in s), None) for n in names]
    assert None not in at, (names, at, err)
    return at


@pytest.mark.slow   # a whole nightly run: ~1 s warm
def test_nightly_phases_in_order_with_their_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMRANK_PROGRESS_SECONDS", "0")
    store, models = tmp_path / "s.zarr", tmp_path / "m"
    rc, _, err = _main("--store", store, "--new", _day(tmp_path, 1), "--models", models, "--alphas", "1,4",
                       "--no-plot")
    assert rc == 0, err
    assert err == ""                   # not a terminal, no --progress: stderr is left to errors
    rc, out, err = _main("--store", store, "--new", _day(tmp_path, 2), _day(tmp_path, 3), "--models", models,
                         "--alphas", "1,4", "--no-plot", "--max-rows", "20", "--progress")
    assert rc == 0 and "-> promoted" in out, err
    names = ["ingest: 0/2 day files", "ingest: 2/2 day files (100%)", "verify (", "fold statistics of the new groups: 0/",
             "λ selection from the fold statistics", "CV folds: 5/5 folds (100%)", "validation (", "gate (",
             "write the version: done"]
    at = _order(err, names)
    assert at == sorted(at), err
    # inside the ingest, each day file's rows as they are appended
    assert "> ingest day2.npz: " in err and "> ingest day3.npz: " in err, err
    assert err.index("> ingest day2.npz: ") < err.index("> ingest day3.npz: ") < err.index("verify (")
    # verify counts tonight's batches: the two new days' and the one before, whose last chunk an append rewrote
    assert "verify (re-read the new batches against their checksums): 0/3 batches" in err, err
    assert "verify (re-read the new batches against their checksums): 3/3 batches (100%)" in err, err
    # validation counts the rows scored: the newest day (day 3), once by the candidate trained without it and
    # once by the current model
    n_val = 2 * len(make_day(3, n_groups=12)[1])
    assert f"validation (the newest day, or --validation): 0/{n_val} rows" in err, err
    assert f"validation (the newest day, or --validation): {n_val}/{n_val} rows (100%)" in err, err
    # inside the gate, the rows of its history slice scored out of fold, once per model
    gate = nightly.read_version(models, nightly.current_version(models))["gate"]
    n_gate = 2 * gate["rows"]
    assert f"> out-of-fold scores of both models on {gate['n_groups']} history groups: {n_gate}/{n_gate} rows (100%)" \
        in err, err
    n_rows = int(err.split("fold statistics of the new groups: 0/")[1].split(" ")[0])
    assert f"fold statistics of the new groups: {n_rows}/{n_rows} rows (100%)" in err
    # the count moves block by block (--max-rows 20), never past 100 %
    assert any(f"fold statistics of the new groups: {i}/{n_rows} rows" in err for i in range(1, n_rows)), err
    import re

    counts = [int(c) for c in re.findall(r"fold statistics of the new groups: (\d+)/", err)]
    assert max(counts) == n_rows and counts == sorted(counts), counts
    # sgd-pairwise: its steps are the statistics phase; -q: nothing on stderr, --progress or not
    rc, _, err = _main("--store", tmp_path / "p.zarr", "--new", _day(tmp_path, 1), "--models", tmp_path / "pm",
                       "--learner", "sgd-pairwise", "--no-plot", "--progress")
    assert rc == 0 and "SGD steps on the new groups: 0/" in err, err
    rc, _, err = _main("--store", tmp_path / "p.zarr", "--new", _day(tmp_path, 2), "--models", tmp_path / "pm",
                       "--learner", "sgd-pairwise", "--no-plot", "--progress", "-q")
    assert rc == 0 and err == ""


@pytest.mark.skipif(not SCRIPT.exists() or not hasattr(os, "fork"), reason="needs the console script and fork")
@pytest.mark.slow   # interrupts a nightly run and waits for it: ~3 s warm
def test_ctrl_c_during_a_nightly_phase_stops_within_seconds_and_promotes_nothing(tmp_path):
    store, models = tmp_path / "s.zarr", tmp_path / "m"
    assert _main("--store", store, "--new", _day(tmp_path, 1), "--models", models, "--alphas", "1", "--no-plot",
                 "-q")[0] == 0
    # each progress update sleeps (test hook), so the statistics phase of night 2 lasts ~8 s more after the
    # line we wait for (40 updates of 10 rows, 0.2 s each), well past the 3 s the interrupted run may take;
    # 1 s a sleep spent ~6 s in the ingest and verify phases before it
    env = dict(os.environ, STREAMRANK_PROGRESS_SECONDS="0", _STREAMRANK_TEST_SLEEP="0.2")
    proc = subprocess.Popen([str(SCRIPT), "nightly", "--store", str(store), "--new", str(_day(tmp_path, 2, 60)),
                             "--models", str(models), "--alphas", "1", "--no-plot", "--max-rows", "10", "--progress",
                             "--volume-ratio", "10"],     # a day five times the first one
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    try:
        t0 = time.monotonic()
        while True:
            line = proc.stderr.readline()
            assert line and time.monotonic() - t0 < 120, "".join(seen)
            seen.append(line)
            if "fold statistics of the new groups: " in line and "rows (" in line:   # inside the phase
                break
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        took = time.monotonic() - sent
        err = "".join(seen) + proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and took < 3, (took, err)
    assert "interrupted" in err and "Traceback" not in err
    # nothing promoted, no version written, nothing half-written left in the models directory
    assert nightly.current_version(models) == "v0001" and nightly.list_versions(models) == ["v0001"]
    assert not [p for p in models.iterdir() if p.name.endswith((".partial", ".tmp"))]
    # the ingest had committed the day: the next night trains on it and promotes
    rc, out, _ = _main("--store", store, "--new", _day(tmp_path, 2, 60), "--models", models, "--alphas", "1",
                       "--no-plot", "-q")
    assert rc == 0 and "-> promoted; current=v0002" in out
