"""streamrank.io._remote against a real S3 server on loopback (moto, tests/_s3_server.py) and memory://."""
from __future__ import annotations

import pytest

from streamrank.io._remote import ConditionalWritesUnsupported, PreconditionFailed, Remote, is_url, local_path


def test_is_url_tells_local_paths_from_urls():
    assert is_url("s3://b/x.zarr") and is_url("memory://x") and is_url("gs://b/x")
    assert not is_url("/tmp/x.zarr") and not is_url("x.zarr") and not is_url("file:///tmp/x.zarr")
    assert local_path("file:///tmp/x.zarr") == "/tmp/x.zarr"


def _conditional_writes(r):
    tag = r.put_if_absent("lock", b"one")
    with pytest.raises(PreconditionFailed):
        r.put_if_absent("lock", b"two")
    assert r.read_with_etag("lock") == (b"one", tag)
    tag2 = r.put_if_match("lock", b"three", tag)
    assert tag2 != tag and r.read("lock") == b"three"
    with pytest.raises(PreconditionFailed):          # a stale ETag loses
        r.put_if_match("lock", b"four", tag)
    with pytest.raises(PreconditionFailed):
        r.delete_if_match("lock", tag)
    assert r.read("lock") == b"three" and r.etag("lock") == tag2
    r.delete_if_match("lock", tag2)
    assert r.etag("lock") is None and not r.exists("lock")
    r.put_if_absent("lock", b"again")                # absent again: create succeeds


def test_conditional_writes_on_s3(s3_server, s3_url):
    r = Remote(s3_url + "/store.zarr", s3_server.storage_options)
    _conditional_writes(r)


def test_conditional_writes_on_memory():
    r = Remote("memory://streamrank-test-remote/store.zarr")
    _conditional_writes(r)
    r.fs.rm(r.root, recursive=True)


def test_reads_many_objects_at_once_and_lists(s3_server, s3_url):
    r = Remote(s3_url + "/s.zarr", s3_server.storage_options)
    for i in range(5):
        r.write(f"a/c/{i}", bytes([i]) * (i + 1))
    assert r.read_many([f"a/c/{i}" for i in (4, 0, 2)] + ["a/c/9"]) == [b"\4" * 5, b"\0", b"\2" * 3, None]
    assert r.read_tail("a/c/4", 2) == b"\4\4"
    assert r.list("a") == [f"a/c/{i}" for i in range(5)]
    assert r.any_object()
    r.delete("a/c/0")
    r.delete("a/c/0")                               # absent: no error
    assert not r.exists("a/c/0")


def test_a_remote_is_pickled_as_url_and_options(s3_server, s3_url):
    import pickle

    r = Remote(s3_url + "/s.zarr", s3_server.storage_options)
    r.write("k", b"v")
    r2 = pickle.loads(pickle.dumps(r))
    assert r2.url == r.url and r2.read("k") == b"v"


def test_conditional_writes_are_refused_where_the_filesystem_has_none(tmp_path):
    import fsspec

    class NoCond(Remote):            # a filesystem without conditional writes: the refusal names what is missing
        def __init__(self):
            self.url, self.protocol, self.storage_options = "ftp://h/s.zarr", "ftp", {}
            self.fs = fsspec.filesystem("memory")
            self.root = "/nocond"

    with pytest.raises(ConditionalWritesUnsupported, match="no conditional writes"):
        NoCond().put_if_absent("lock", b"x")


def test_environment_variables_reach_the_client(s3_server, s3_url, monkeypatch):
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    r = Remote(s3_url + "/env.zarr")                 # no storage_options: AWS_* variables only
    r.write("k", b"v")
    assert r.read("k") == b"v"


def test_a_group_store_on_memory_url_appends_and_verifies():
    import numpy as np

    import streamrank as sr

    url = "memory://streamrank-test-store/x.zarr"
    s = sr.GroupStore.create(url, 3, overwrite=True)
    assert s.append(np.ones((4, 3)), [1, 2, 3, 4], [1, 1, 2, 2], batch_id="a")
    assert not s.append(np.ones((4, 3)), [1, 2, 3, 4], [1, 1, 2, 2], batch_id="a")
    r = sr.GroupStore.open(url)
    assert r.verify() == 1 and [b.n_rows for b in r.blocks(shuffle=False)] == [4]
    from streamrank.io._icechunk_repo import _memory_storages

    assert type(r._loc).__name__ == "RepoLocation" and r._loc.repo.list_branches() == {"main"}
    _memory_storages.pop(url)                       # (the repository lives in this process only)
