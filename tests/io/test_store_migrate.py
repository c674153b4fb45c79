"""Stores of the previous object-storage layout: read-only with a hint; ``streamrank migrate`` into a repository.

The previous layout is a store's files as objects under the prefix (what a
local store holds: ``zarr.json`` at the top, chunk objects beside it),
uploaded here to moto's S3 server (tests/_s3_server.py).
"""
from __future__ import annotations

import json
import logging
import sys

import numpy as np
import pytest
from _cli_inproc import run_cli

import streamrank as sr
from streamrank.io._icechunk_repo import CommitConflict, RepoLocation, is_repository
from streamrank.io._remote import Remote
from streamrank.io.schema import StoreFormatError


def _legacy_store(tmp_path, s3_server, url, n=600, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    y = rng.integers(0, 4, size=n).astype(np.float64)
    q = np.repeat(np.arange(n // 6), 6)
    local = sr.GroupStore.create(tmp_path / "old.zarr", 4, chunk_rows=128)
    assert local.append(X[: n // 2], y[: n // 2], q[: n // 2], batch_id="d0")
    assert local.append(X[n // 2:], y[n // 2:], q[n // 2:], batch_id="d1")
    rem = Remote(url, s3_server.storage_options)
    rem.fs.put(str(tmp_path / "old.zarr") + "/", rem.root + "/", recursive=True)
    assert rem.exists("zarr.json") and rem.exists("X/c/0/0") and not is_repository(url, s3_server.storage_options)
    return X, y, q


def test_a_store_of_the_previous_layout_opens_read_only_with_a_hint(s3_server, s3_url, tmp_path, caplog,
                                                                    monkeypatch):
    so = s3_server.storage_options
    url = s3_url + "/old.zarr"
    X, y, q = _legacy_store(tmp_path, s3_server, url)
    with caplog.at_level(logging.WARNING, logger="streamrank"):
        r = sr.GroupStore.open(url, storage_options=so)
    hints = [m for m in caplog.messages if "previous object-storage layout" in m]
    assert len(hints) == 1 and "\n" not in hints[0] and f"streamrank migrate {url} NEW_URL" in hints[0]
    assert r.verify() == 2 and np.array_equal(np.vstack([b.X for b in r.blocks(shuffle=False)]), X)
    with pytest.raises(PermissionError, match="streamrank migrate"):
        sr.GroupStore.open(url, "a", storage_options=so)
    with monkeypatch.context() as m:                  # without icechunk installed it still reads
        m.setitem(sys.modules, "icechunk", None)
        assert sr.GroupStore.open(url, storage_options=so).verify() == 2
    with pytest.raises(PermissionError, match="previous object-storage layout.*cannot be re-created"):
        sr.GroupStore.create(url, 4, storage_options=so, overwrite=True)


def test_migrate_copies_a_store_into_a_repository_verified(s3_server, s3_url, tmp_path):
    so = s3_server.storage_options
    old, new = s3_url + "/old.zarr", s3_url + "/new.zarr"
    X, y, q = _legacy_store(tmp_path, s3_server, old)
    rc, out, err = run_cli("migrate", old, new, "--storage-options", json.dumps(so))
    assert rc == 0, err
    assert "2 batch(es) verified at both" in out and f"-> {new}" in out
    assert is_repository(new, so)
    src, dst = sr.GroupStore.open(old, storage_options=so), sr.GroupStore.open(new, storage_options=so)
    assert dst._attrs == src._attrs and dst.verify() == 2
    assert np.array_equal(np.vstack([b.X for b in dst.blocks(shuffle=False)]), X)
    assert [s.message for s in RepoLocation(new, so).repo.ancestry(branch="main")][0] == f"migrate from {old}"
    # the copy takes appends as transactions
    w = sr.GroupStore.open(new, "a", storage_options=so)
    assert w.append(X[:12], y[:12], q[:12] + 10_000, batch_id="d2") and w.verify() == 3
    # again: the destination exists now; a local directory can be the source too (an upload)
    rc, _out, err = run_cli("migrate", old, new, "--storage-options", json.dumps(so))
    assert rc != 0 and "already exists" in err
    rc, out, err = run_cli("migrate", str(tmp_path / "old.zarr"), s3_url + "/up.zarr", "--storage-options",
                           json.dumps(so))
    assert rc == 0, err
    assert sr.GroupStore.open(s3_url + "/up.zarr", storage_options=so).verify() == 2


def test_a_damaged_source_is_not_migrated(s3_server, s3_url, tmp_path):
    so = s3_server.storage_options
    old, new = s3_url + "/bad.zarr", s3_url + "/bad-new.zarr"
    _legacy_store(tmp_path, s3_server, old)
    rem = Remote(old, so)
    rem.write("X/c/1/0", rem.read("X/c/0/0"))                  # a chunk swapped in the source
    from streamrank.io._migrate import migrate

    with pytest.raises(StoreFormatError, match="d0"):
        migrate(old, new, storage_options=so)
    assert not is_repository(new, so)                          # nothing written


def test_concurrent_create_with_overwrite_is_a_commit_like_any_other(s3_server, s3_url):
    """create(overwrite=True) while a writer appends: whichever commits second is refused, naming the first."""
    so = s3_server.storage_options
    url = s3_url + "/re.zarr"
    sr.GroupStore.create(url, 3, storage_options=so)
    w = sr.GroupStore.open(url, "a", storage_options=so)
    real = w._write

    def recreated_meanwhile(*a, **k):
        sr.GroupStore.create(url, 5, storage_options=so, overwrite=True)
        return real(*a, **k)

    w._write = recreated_meanwhile
    with pytest.raises(CommitConflict, match="'create streamrank.group_store'"):
        w.append(np.ones((4, 3)), [1, 2, 3, 4], [1, 1, 2, 2], batch_id="a")
    w._write = real
    with pytest.raises(StoreFormatError, match="re-created"):      # and its next append refuses the new store
        w.append(np.ones((4, 3)), [1, 2, 3, 4], [1, 1, 2, 2], batch_id="a")
    r = sr.GroupStore.open(url, storage_options=so)
    assert r.n_features == 5 and r.n_rows == 0
