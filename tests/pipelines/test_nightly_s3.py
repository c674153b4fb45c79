"""Nightly pipeline with its models directory on object storage (a real S3 server on loopback).

The models directory is an Icechunk repository in the bucket (streamrank/pipelines/_nightly_remote.py): a run
is one commit, each promoted version a tag (of the store too), ``--rollback TAG``; overlapping runs: the
first commit wins, the other is refused naming it.  The result equals the same nights with a local models
directory, and a full retrain to 1e-9.
"""
from __future__ import annotations

import io
import json
import threading

import numpy as np
import pytest

import streamrank as sr
from pipeline_data import make_day

from streamrank.pipelines import nightly
from streamrank.pipelines._nightly_remote import RemoteModelsDir

ALPHAS = [0.25, 1.0, 4.0]


def _day(tmp, d):
    p = tmp / f"day{d}.npz"
    X, y, qid = make_day(d)
    np.savez(p, X=X, y=y, qid=qid)
    return p


def _night(tmp, d, models, so=None, store="logs.zarr"):
    store = store if "://" in store else tmp / store
    return nightly.run_night(store, [_day(tmp, d)], models, alphas=ALPHAS, tolerance=1.0, plot=False,
                             folds=2, out=io.StringIO(), storage_options=so)


def test_nights_on_s3_equal_local_and_readers_see_old_or_new(tmp_path, s3_server, s3_url):
    """Store and models directory both in the bucket (no local state): the same models as local nights."""
    so = s3_server.storage_options
    models, logs = s3_url + "/nightly", s3_url + "/logs.zarr"
    r1 = _night(tmp_path, 1, models, so, store=logs)
    assert (r1["status"], r1["current"]) == ("promoted", "v0001")
    m1 = sr.load(models + "/current", storage_options=so)
    # a reader loading ``current`` again and again while the next night trains and promotes
    seen, stop, errors = [], threading.Event(), []

    def reader():
        try:
            while not stop.wait(0.05):
                seen.append(sr.load(models + "/current", storage_options=so).coef_)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    try:
        r2 = _night(tmp_path, 2, models, so, store=logs)
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert (r2["status"], r2["current"], r2["mode"]) == ("promoted", "v0002", "incremental")
    assert r2["ingest"][0]["appended"] and sr.GroupStore.open(logs, storage_options=so).verify() == 2
    m2 = sr.load(models + "/current", storage_options=so)
    assert seen and all(np.array_equal(c, m1.coef_) or np.array_equal(c, m2.coef_) for c in seen)
    # the same two nights with a local models directory give the same models
    local = tmp_path / "local_models"
    _night(tmp_path, 1, local, store="logs2.zarr")
    _night(tmp_path, 2, local, store="logs2.zarr")
    np.testing.assert_array_equal(sr.load(local / "current").coef_, m2.coef_)
    np.testing.assert_array_equal(sr.load(local / "v0001").coef_, m1.coef_)
    d = RemoteModelsDir(models, so)
    assert d.list_versions() == ["v0001", "v0002"]
    assert d.read_version("v0002")["previous"] == "v0001"
    assert len(d.reports()) == 2
    # nightly == a full retrain on the s3:// store, to 1e-9
    full = sr.RankRLS(alpha=m2.alpha, solver="primal").fit(sr.GroupStore.open(logs, storage_options=so))
    np.testing.assert_allclose(m2.coef_, full.coef_, rtol=1e-9, atol=1e-12)
    # each promoted version is a tag of the models directory and of the store: the store as of a tag
    assert sorted(d.loc.repo.list_tags()) == ["v0001", "v0002"]
    then = sr.GroupStore.open(logs, storage_options=so, as_of="v0001")
    assert then.n_rows == r1["ingest"][0]["rows"][1] < sr.GroupStore.open(logs, storage_options=so).n_rows
    assert then.verify() == 1
    with pytest.raises(ValueError, match="read-only"):
        sr.GroupStore.open(logs, "a", storage_options=so, as_of="v0001")
    np.testing.assert_array_equal(sr.load(models + "/current@v0001", storage_options=so).coef_, m1.coef_)
    # --rollback TAG promotes the tagged version again (one commit); readers get it
    assert nightly.main(["--store", logs, "--models", models, "--storage-options", json.dumps(so),
                         "--rollback", "v0001"]) == 0
    np.testing.assert_array_equal(sr.load(models + "/current", storage_options=so).coef_, m1.coef_)
    assert RemoteModelsDir(models, so).current_version() == "v0001"
    assert d.prune(1) == [] and RemoteModelsDir(models, so).list_versions() == ["v0001", "v0002"]   # current, newest


def test_one_writer_and_a_moved_pointer_on_s3(tmp_path, s3_server, s3_url, monkeypatch, capsys):
    so = s3_server.storage_options
    models = s3_url + "/nightly"
    argv = ["--store", str(tmp_path / "logs.zarr"), "--models", models, "--storage-options", json.dumps(so),
            "--alphas", "2^-2:2^2", "--tolerance", "1.0", "--no-plot", "--folds", "2", "--new"]
    assert nightly.main(argv + [str(_day(tmp_path, 1))]) == 0
    assert "current=v0001" in capsys.readouterr().out
    d = RemoteModelsDir(models, so)
    # no lock: a run started while another transaction is open commits; the other's commit is then refused,
    # naming the winner's commit, and nothing of it is visible
    with pytest.raises(nightly.ModelsLocked, match="another writer committed commit .*'promote v0002'"):
        with d.lock():
            d.write_excluded(json.dumps({"excluded": [], "history": [], "note": "lost"}).encode())
            assert nightly.main(argv + [str(_day(tmp_path, 2))]) == 0
    capsys.readouterr()
    d = RemoteModelsDir(models, so)
    assert d.current_version() == "v0002" and d.list_versions() == ["v0001", "v0002"]
    assert not _has_excluded(d) or "note" not in json.loads(d.read_excluded())     # the loser's change: gone
    # another writer commits while a run trains (a rollback): the run's commit is refused: exit 5, one line
    real = RemoteModelsDir.write_version

    def write_then_another_writer_commits(self, name, *a, **k):
        real(self, name, *a, **k)
        RemoteModelsDir(models, so).rollback("v0001")

    monkeypatch.setattr(RemoteModelsDir, "write_version", write_then_another_writer_commits)
    assert nightly.main(argv + [str(_day(tmp_path, 3))]) == 5
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another writer committed" in err and "rollback to tag v0001" in err, err
    d = RemoteModelsDir(models, so)
    assert d.current_version() == "v0001" and d.list_versions() == ["v0001", "v0002"]


def _has_excluded(d):
    try:
        d.read_excluded()
        return True
    except FileNotFoundError:
        return False


def test_a_rejected_day_is_excluded_on_s3_too(tmp_path, s3_server, s3_url):
    """The exclusions live in the bucket (an attribute of the models repository, committed with the run); the next
    night trains without the rejected day, and --readmit takes it back."""
    so = s3_server.storage_options
    models = s3_url + "/excl"
    _night(tmp_path, 1, models, so)
    r2 = nightly.run_night(tmp_path / "logs.zarr", [_day(tmp_path, 2)], models, alphas=ALPHAS, tolerance=-5.0,
                           plot=False, folds=2, out=io.StringIO(), storage_options=so)      # forced rejection
    assert r2["status"] == "rejected" and r2["excluded"] == [nightly.content_hash(_day(tmp_path, 2))]
    doc = json.loads(RemoteModelsDir(models, so).read_excluded())
    assert [r["groups"] for r in doc["excluded"]] == [[12, 24]] and doc["excluded"][0]["version"] == "v0002"
    r3 = _night(tmp_path, 3, models, so)
    assert r3["status"] == "promoted" and r3["data"]["new_groups"] == 12 and r3["data"]["excluded"] == [[12, 24]]
    r4 = nightly.run_night(tmp_path / "logs.zarr", [], models, alphas=ALPHAS, tolerance=1.0, plot=False, folds=2,
                           out=io.StringIO(), storage_options=so, readmit=[_day(tmp_path, 2)])
    assert r4["readmitted"] == [nightly.content_hash(_day(tmp_path, 2))]
    assert r4["mode"] == "full" and "excluded days inside the current model's data changed" in r4["retrain"]
    s = sr.GroupStore.open(tmp_path / "logs.zarr")
    ref = sr.RankRLS(alpha=sr.load(models + "/v0004", storage_options=so).alpha, solver="primal").fit(s)
    np.testing.assert_allclose(sr.load(models + "/v0004", storage_options=so).coef_, ref.coef_, rtol=1e-10)


def test_a_models_directory_of_the_previous_layout_is_not_restarted_beside(tmp_path, s3_server, s3_url):
    from streamrank.io import Remote

    so = s3_server.storage_options
    models = s3_url + "/old-nightly"
    Remote(models, so).write("current", b"v0003\n")
    with pytest.raises(nightly.ModelsDirError, match="previous object-storage layout.*new URL"):
        _night(tmp_path, 1, models, so)
    assert not RemoteModelsDir(models, so).loc.exists_repo()
