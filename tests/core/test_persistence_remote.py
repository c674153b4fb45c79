"""sr.save / sr.load on object storage, against a real S3 server on loopback (moto's, tests/_s3_server.py).

The guarantee (streamrank/_remote_models.py): a reader sees the old or the
new model, never a mix — also while a writer replaces the model and sweeps
the version being read, and after a writer died before publishing.
"""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

import streamrank as sr
from streamrank import _remote_models as rm
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


def test_save_load_replace_and_sweep(s3_server, s3_url, two_models, monkeypatch, tmp_path):
    a, b, X = two_models
    so = s3_server.storage_options
    url = s3_url + "/models/ranker"
    sr.save(a, url, storage_options=so)
    got = sr.load(url, storage_options=so)
    assert _same(got, a)
    np.testing.assert_array_equal(got.predict(X), a.predict(X))
    fs, root = _fs(s3_server, url)
    ptr = json.loads(fs.cat_file(root + "/model.json"))
    assert ptr["streamrank"] == "model-pointer" and ptr["class"] == "RankRLS"
    first = ptr["version"]
    assert fs.isfile(f"{root}/versions/{first}/zarr.json")
    # a second save publishes a new version; the replaced one is kept for the grace period ...
    sr.save(b, url, storage_options=so)
    assert _same(sr.load(url, storage_options=so), b)
    assert len(fs.ls(root + "/versions", refresh=True)) == 2
    # ... and swept by the next save once it is older than the grace (never the current one)
    monkeypatch.setattr(rm, "SWEEP_GRACE_S", 0.0)
    sr.save(a, url, storage_options=so)
    (only,) = fs.ls(root + "/versions", detail=False, refresh=True)
    assert only.endswith(json.loads(fs.cat_file(root + "/model.json"))["version"])
    assert _same(sr.load(url, storage_options=so), a)
    # the command line's model loading takes the URL, credentials and endpoint from the environment
    from streamrank.cli._stores import _load_model

    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    assert _same(_load_model(url), a)
    # storage options belong to URLs only
    with pytest.raises(ValueError, match="local path"):
        sr.save(a, tmp_path / "m", storage_options=so)
    # a filesystem without atomic object writes: refused, not weakened
    with pytest.raises(NotImplementedError, match="not atomic"):
        sr.save(a, "ftp://127.0.0.1/m")


def test_writer_dying_before_publication_leaves_the_old_model(s3_server, s3_url, two_models, monkeypatch):
    a, b, _ = two_models
    so = s3_server.storage_options
    url = s3_url + "/m"
    sr.save(a, url, storage_options=so)
    fs, root = _fs(s3_server, url)
    real = fs.pipe_file

    def die_at_publication(path, *args, **kwargs):
        if path.endswith("/model.json"):
            raise SystemExit("killed before the pointer write")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(fs, "pipe_file", die_at_publication)   # the same (cached) client sr.save uses
    with pytest.raises(SystemExit):
        sr.save(b, url, storage_options=so)
    monkeypatch.setattr(fs, "pipe_file", real)
    assert _same(sr.load(url, storage_options=so), a)          # the complete old model
    assert len(fs.ls(root + "/versions", refresh=True)) == 2   # + the unpublished version, read by nobody
    monkeypatch.setattr(rm, "SWEEP_GRACE_S", 0.0)
    sr.save(b, url, storage_options=so)
    assert len(fs.ls(root + "/versions", refresh=True)) == 1   # leftovers swept after a publication
    assert _same(sr.load(url, storage_options=so), b)


@pytest.mark.parametrize("swept", [True, False], ids=["version-swept-mid-read", "version-kept"])
def test_a_save_during_a_load_gives_old_or_new_never_a_mix(s3_server, s3_url, two_models, monkeypatch, swept):
    """Deterministic interleaving: a save (and, with no grace, its sweep) lands between the reader's
    listing and its fetch.  Swept: the reader starts over and gets the new model; kept: the old one, whole."""
    a, b, _ = two_models
    so = s3_server.storage_options
    url = s3_url + "/m"
    sr.save(a, url, storage_options=so)
    if swept:
        monkeypatch.setattr(rm, "SWEEP_GRACE_S", 0.0)
    real_fetch, calls = rm._fetch, []

    def fetch_after_a_save(fs, prefix, keys):
        calls.append(prefix)
        if len(calls) == 1:
            sr.save(b, url, storage_options=so)
        return real_fetch(fs, prefix, keys)

    monkeypatch.setattr(rm, "_fetch", fetch_after_a_save)
    got = sr.load(url, storage_options=so)
    assert _same(got, b if swept else a)
    assert len(calls) == (2 if swept else 1)


def test_reader_racing_a_writer_never_sees_a_mix(s3_server, s3_url, two_models, monkeypatch):
    """Real threads: a writer replaces the model (sweeping at once) while a reader loads it again and again."""
    a, b, _ = two_models
    so = s3_server.storage_options
    url = s3_url + "/m"
    sr.save(a, url, storage_options=so)
    monkeypatch.setattr(rm, "SWEEP_GRACE_S", 0.0)
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


def test_damaged_or_foreign_objects_are_clear_errors(s3_server, s3_url, two_models, tmp_path):
    a, _, _ = two_models
    so = s3_server.storage_options
    url = s3_url + "/m"
    fs, root = _fs(s3_server, url)
    with pytest.raises(FileNotFoundError, match="no model at"):
        sr.load(url, storage_options=so)
    sr.save(a, url, storage_options=so)
    good = fs.cat_file(root + "/model.json")
    version = json.loads(good)["version"]
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
    # a version whose saved state is inconsistent is refused by the same checks as a local model
    sr.save(a, tmp_path / "local")
    meta = json.loads((tmp_path / "local" / "zarr.json").read_text())
    meta["attributes"]["state"]["n_features_in_"] = 7
    (tmp_path / "local" / "zarr.json").write_text(json.dumps(meta))
    forged = "20260101T000000000000Z-0123456789abcdef"
    fs.put(str(tmp_path / "local") + "/", f"{root}/versions/{forged}/", recursive=True)
    fs.pipe_file(root + "/model.json", json.dumps({**json.loads(good), "version": forged}).encode())
    with pytest.raises(ModelFormatError, match="cannot be restored|coef_"):
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
    fs, root = _fs(s3_server, url)
    version = json.loads(fs.cat_file(root + "/model.json"))["version"]
    assert "cli" in json.loads(fs.cat_file(f"{root}/versions/{version}/zarr.json"))["attributes"]
    capsys.readouterr()
    assert main(fit) == 5 and "--overwrite" in capsys.readouterr().err
    assert main(fit + ["--overwrite"]) == 0
    assert main(["evaluate", "--model", url, "--store", str(tmp_path / "train.zarr"), "-q"]) == 0
