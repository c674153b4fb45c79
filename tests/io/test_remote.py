"""streamrank.io._remote (plain object reads) against a real S3 server on loopback (moto, tests/_s3_server.py),
the repositories' clients (gs://, az://, a missing icechunk), and a store on memory://."""
from __future__ import annotations

import pytest

from streamrank.io._remote import Remote, is_url, local_path


def test_is_url_tells_local_paths_from_urls():
    assert is_url("s3://b/x.zarr") and is_url("memory://x") and is_url("gs://b/x")
    assert not is_url("/tmp/x.zarr") and not is_url("x.zarr") and not is_url("file:///tmp/x.zarr")
    assert local_path("file:///tmp/x.zarr") == "/tmp/x.zarr"


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


def test_a_missing_icechunk_is_one_line_naming_the_extra(monkeypatch):
    import sys

    import streamrank as sr

    monkeypatch.setitem(sys.modules, "icechunk", None)          # as if not installed
    with pytest.raises(ImportError) as err:
        sr.GroupStore.create("memory://streamrank-no-icechunk/x.zarr", 3)
    msg = str(err.value)
    assert "\n" not in msg and "icechunk" in msg and "pip install 'streamrank[s3]'" in msg


def test_storage_of_gs_and_az_urls_builds_icechunk_clients():
    """gs:// and az:// go through the same engine; no emulator runs here (see docs), so only the client
    configuration is checked: credentials from storage_options, and what is missing named."""
    from streamrank.io._icechunk_repo import storage_of

    assert type(storage_of("gs://bucket/p/x.zarr", {"token": "anon"})).__name__ == "Storage"
    assert type(storage_of("az://container/p/x.zarr", {"account_name": "acct", "account_key": "a2V5"})).__name__ \
        == "Storage"
    with pytest.raises(ValueError, match="account_name"):
        storage_of("az://container/x.zarr", {})
    with pytest.raises(ValueError, match="not supported"):
        storage_of("ftp://host/x.zarr")


def test_environment_variables_reach_the_client(s3_server, s3_url, monkeypatch):
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    r = Remote(s3_url + "/env.zarr")                 # no storage_options: AWS_* variables only
    r.write("k", b"v")
    assert r.read("k") == b"v"
    import numpy as np

    import streamrank as sr

    s = sr.GroupStore.create(s3_url + "/repo.zarr", 2)        # the Icechunk client too (endpoint, keys, region)
    assert s.append(np.ones((2, 2)), [1, 0], [5, 5], batch_id="a")
    assert sr.GroupStore.open(s3_url + "/repo.zarr").verify() == 1


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


def test_commits_that_do_not_overlap_are_rebased_overlapping_ones_refused():
    """Two transactions from the same tip: disjoint changes (new groups) — the second is rebased onto the first;
    the same node changed by both — the second is refused, naming the first (nothing of it committed)."""
    import zarr

    from streamrank.io._icechunk_repo import CommitConflict, RepoLocation, _memory_storages, transaction

    url = "memory://streamrank-test-rebase/r"
    first, second = RepoLocation(url), RepoLocation(url)
    first.create_repo()
    with transaction(first):
        zarr.open_group(store=first.zarr_store(), mode="a").attrs["n"] = 0
        first.commit("root")
    with transaction(first), transaction(second):
        zarr.open_group(store=first.zarr_store(), mode="a").create_group("a")
        zarr.open_group(store=second.zarr_store(), mode="a").create_group("b")
        first.commit("add a")
        second.commit("add b")                         # rebased: it touched nothing "add a" did
    both = zarr.open_group(store=RepoLocation(url).zarr_store(read_only=True), mode="r")
    assert sorted(n for n, _ in both.groups()) == ["a", "b"]
    with transaction(first), transaction(second):
        zarr.open_group(store=first.zarr_store(), mode="a").attrs["n"] = 1
        zarr.open_group(store=second.zarr_store(), mode="a").attrs["n"] = 2
        winner = first.commit("n = 1")
        with pytest.raises(CommitConflict, match=f"{winner}.*'n = 1'.*nothing of this transaction"):
            second.commit("n = 2")
    assert zarr.open_group(store=RepoLocation(url).zarr_store(read_only=True), mode="r").attrs["n"] == 1
    _memory_storages.pop(url)


def test_the_same_chunk_written_by_two_transactions_is_refused_not_resolved():
    """No side is picked for a chunk both wrote (BasicConflictSolver with Fail), even when nothing else overlaps."""
    import numpy as np
    import zarr

    from streamrank.io._icechunk_repo import CommitConflict, RepoLocation, _memory_storages, transaction

    url = "memory://streamrank-test-chunks/r"
    first, second = RepoLocation(url), RepoLocation(url)
    first.create_repo()
    with transaction(first):
        zarr.open_group(store=first.zarr_store(), mode="a").create_array("a", shape=(4,), chunks=(2,), dtype="f8")
        first.commit("array")
    with transaction(first), transaction(second):
        zarr.open_array(store=first.zarr_store(), path="a", mode="r+")[:2] = 1.0
        zarr.open_array(store=second.zarr_store(), path="a", mode="r+")[:2] = 2.0
        first.commit("a[:2] = 1")
        with pytest.raises(CommitConflict, match="'a\\[:2\\] = 1'"):
            second.commit("a[:2] = 2")
    got = zarr.open_array(store=RepoLocation(url).zarr_store(read_only=True), path="a", mode="r")[:2]
    assert np.array_equal(got, [1.0, 1.0])
    _memory_storages.pop(url)
