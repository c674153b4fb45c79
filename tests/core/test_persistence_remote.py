"""sr.save / sr.load on object storage, against a real S3 server on loopback (moto's, tests/_s3_server.py).

The guarantee (streamrank/_remote_models.py, _repo_models.py): a save is one
Icechunk commit; a reader sees the old or the new model, never a mix — also
while a writer replaces the model, and after a writer died before its commit.
Models of the previous layout (a pointer naming an immutable version) load.
"""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

import streamrank as sr
from streamrank import _remote_models as rm
from streamrank import persistence
from streamrank.io._icechunk_repo import RepoLocation, transaction
from streamrank.persistence import ModelFormatError


@pytest.fixture(scope="module")
def two_models():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    y = X @ rng.normal(size=4) + 0.1 * rng.normal(size=40)
    qid = np.repeat(np.arange(5), 8)
    return sr.RankRLS(alpha=1.0).fit(X, y, qid), sr.RankRLS(alpha=100.0).fit(X, y, qid), X


def _same(a, b):
    return a.get_params() == b.get_params() and np.array_equal(a.coef_, b.coef_)


def _fs(s3_server, url):
    return rm.filesystem(url, s3_server.storage_options)


def test_save_load_replace_and_history(s3_server, s3_url, two_models, monkeypatch, tmp_path):
    a, b, X = two_models
    so = s3_server.storage_options
    url = s3_url + "/models/ranker"
    first = sr.save(a, url, storage_options=so)
    got = sr.load(url, storage_options=so)
    assert _same(got, a)
    np.testing.assert_array_equal(got.predict(X), a.predict(X))
    loc = RepoLocation(url, so)
    assert json.loads(loc.read("model/zarr.json"))["attributes"]["class"] == "RankRLS"
    # a second save is a second commit; the first model stays readable as of its commit
    second = sr.save(b, url, storage_options=so)
    assert _same(sr.load(url, storage_options=so), b)
    assert _same(sr.load(f"{url}@{first}", storage_options=so), a) and first != second
    assert [s.message for s in loc.repo.ancestry(branch="main")][:2] == ["save RankRLS", "save RankRLS"]
    # the command line's model loading takes the URL, credentials and endpoint from the environment
    from streamrank.cli._stores import _load_model

    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    assert _same(_load_model(url), b)
    # storage options belong to URLs only
    with pytest.raises(ValueError, match="local path"):
        sr.save(a, tmp_path / "m", storage_options=so)
    # a filesystem without atomic object writes: refused, not weakened
    with pytest.raises(NotImplementedError, match="not atomic"):
        sr.save(a, "ftp://127.0.0.1/m")


def test_writer_dying_before_its_commit_leaves_the_old_model(s3_server, s3_url, two_models, monkeypatch):
    a, b, _ = two_models
    so = s3_server.storage_options
    url = s3_url + "/m"
    sr.save(a, url, storage_options=so)

    def die_at_the_commit(self, *args, **kwargs):
        raise SystemExit("killed before the commit")

    monkeypatch.setattr(RepoLocation, "commit", die_at_the_commit)
    with pytest.raises(SystemExit):
        sr.save(b, url, storage_options=so)
    monkeypatch.undo()
    assert _same(sr.load(url, storage_options=so), a)          # the complete old model, nothing of the new
    sr.save(b, url, storage_options=so)
    assert _same(sr.load(url, storage_options=so), b)


def test_a_save_during_a_load_gives_the_readers_commit_whole(s3_server, s3_url, two_models, monkeypatch):
    """Deterministic interleaving: a save commits after the reader opened the model, before it reads the arrays:
    the reader reads its commit's model, whole."""
    a, b, _ = two_models
    so = s3_server.storage_options
    url = s3_url + "/m"
    sr.save(a, url, storage_options=so)
    real, calls = persistence.read_group, []

    def read_after_a_save(*args, **kwargs):
        calls.append(1)
        sr.save(b, url, storage_options=so)
        return real(*args, **kwargs)

    monkeypatch.setattr(persistence, "read_group", read_after_a_save)   # what sr.load hands the repository
    assert _same(sr.load(url, storage_options=so), a) and calls == [1]
    monkeypatch.undo()
    assert _same(sr.load(url, storage_options=so), b)


def test_reader_racing_a_writer_never_sees_a_mix(s3_server, s3_url, two_models, monkeypatch):
    """Real threads: a writer replaces the model again and again while a reader loads it again and again."""
    a, b, _ = two_models
    so = s3_server.storage_options
    url = s3_url + "/m"
    sr.save(a, url, storage_options=so)
    stop, errors, seen = threading.Event(), [], []

    def writer():
        try:
            for i in range(6):
                if stop.is_set():
                    break
                sr.save(b if i % 2 == 0 else a, url, storage_options=so)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            stop.set()

    t = threading.Thread(target=writer)
    t.start()
    t0 = time.monotonic()
    try:
        while not stop.is_set() and time.monotonic() - t0 < 60:
            m = sr.load(url, storage_options=so)
            assert _same(m, a) or _same(m, b), "a model that is neither the old nor the new one"
            seen.append(m.alpha)
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert seen


def _rogue_commit(url, so, change):
    """``change(loc)`` committed behind streamrank's back (damage, a hand edit), through the same transaction."""
    loc = RepoLocation(url, so)
    with transaction(loc):
        change(loc)
        loc.commit("rogue edit")


def test_damaged_models_in_a_repository_are_clear_errors(s3_server, s3_url, two_models):
    a, _, _ = two_models
    so = s3_server.storage_options
    url = s3_url + "/m"
    with pytest.raises(FileNotFoundError, match="no model at"):
        sr.load(url, storage_options=so)
    sr.save(a, url, storage_options=so)
    good = RepoLocation(url, so).read("model/coef_/c/0")
    _rogue_commit(url, so, lambda loc: loc.write("model/coef_/c/0", good[:-1] + bytes([good[-1] ^ 1])))
    with pytest.raises(ModelFormatError, match="coef_"):
        sr.load(url, storage_options=so)
    _rogue_commit(url, so, lambda loc: loc.delete("model/coef_/c/0"))
    with pytest.raises(ModelFormatError, match="coef_"):
        sr.load(url, storage_options=so)

    def inconsistent(loc):
        doc = json.loads(loc.read("model/zarr.json"))
        doc["attributes"]["state"]["n_features_in_"] = 7
        loc.write("model/zarr.json", json.dumps(doc).encode())
        loc.write("model/coef_/c/0", good)

    _rogue_commit(url, so, inconsistent)
    with pytest.raises(ModelFormatError, match="cannot be restored|coef_"):
        sr.load(url, storage_options=so)


def test_models_of_the_previous_layout_load_and_damaged_ones_are_clear_errors(s3_server, s3_url, two_models,
                                                                              tmp_path):
    """The previous layout (a pointer model.json naming an immutable version) is read, with its checks."""
    a, _, _ = two_models
    so = s3_server.storage_options
    url = s3_url + "/old"
    fs, root = _fs(s3_server, url)
    sr.save(a, tmp_path / "local")
    version = "20260101T000000000000Z-0123456789abcdef"
    fs.put(str(tmp_path / "local") + "/", f"{root}/versions/{version}/", recursive=True)
    good = json.dumps({"streamrank": "model-pointer", "format_version": 1, "version": version,
                       "class": "RankRLS", "saved": "2026-01-01T00:00:00+00:00"}).encode()
    fs.pipe_file(root + "/model.json", good)
    assert _same(sr.load(url, storage_options=so), a) and rm.published(url, so)
    for bad, match in [(b"{not json", "not valid JSON"),
                       (b'{"streamrank": "model"}', "not a streamrank model pointer"),
                       (json.dumps({**json.loads(good), "version": "../../other"}).encode(), "not a version name"),
                       (json.dumps({**json.loads(good), "format_version": 99}).encode(), "upgrade streamrank"),
                       (b" " * (rm._MAX_POINTER_BYTES + 1), "larger than")]:
        fs.pipe_file(root + "/model.json", bad)
        with pytest.raises(ModelFormatError, match=match) as err:
            sr.load(url, storage_options=so)
        assert "model.json" in str(err.value)
    fs.pipe_file(root + "/model.json", good)
    # a chunk deleted from the published version: zarr would read zeros, the load refuses
    fs.rm_file(f"{root}/versions/{version}/coef_/c/0")
    with pytest.raises(ModelFormatError, match=r"chunk coef_/c/0 is missing"):
        sr.load(url, storage_options=so)
    # a zarr group uploaded by hand (no pointer) is not published: refused, saying how to publish it
    fs.put(str(tmp_path / "local") + "/", root + "/copied/", recursive=True)
    with pytest.raises(ModelFormatError, match=r"not published by sr.save\(model, url\)"):
        sr.load(url + "/copied", storage_options=so)


def test_command_line_fit_saves_to_and_predicts_from_s3(s3_server, s3_url, tmp_path, monkeypatch, capsys):
    """``streamrank fit --model s3://…`` publishes the model (with the command's record); an existing one needs
    --overwrite; ``evaluate --model s3://…`` reads it back — credentials and endpoint from the environment."""
    from streamrank.cli._app import main

    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3)).astype(np.float32)
    store = sr.GroupStore.create(tmp_path / "train.zarr", 3)
    store.append(X, X @ [1.0, -1.0, 0.5], np.repeat(np.arange(6), 10), batch_id="b0")
    url = s3_url + "/cli/model"
    fit = ["fit", "--store", str(tmp_path / "train.zarr"), "--model", url, "--learner", "rankrls", "-q"]
    assert main(fit) == 0
    got = sr.load(url, storage_options=s3_server.storage_options)
    np.testing.assert_allclose(got.coef_, sr.RankRLS().fit(store).coef_, rtol=1e-10)
    assert "cli" in json.loads(RepoLocation(url, s3_server.storage_options).read("model/zarr.json"))["attributes"]
    capsys.readouterr()
    assert main(fit) == 5 and "--overwrite" in capsys.readouterr().err
    assert main(fit + ["--overwrite"]) == 0
    assert main(["evaluate", "--model", url, "--store", str(tmp_path / "train.zarr"), "-q"]) == 0
