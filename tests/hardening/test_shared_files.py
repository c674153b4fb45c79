"""Files another local user planted inside the victim's own places, and writes at names they could predict (issue 38).

``test_shared_locations.py`` covers directories another user controls.  Here
the directory is (now) the victim's own, but a file in it is not to be
trusted, and each write streamrank makes beside shared data goes to a name
nobody could plant first:

* numba cache files: an index or data file planted while the directory was
  open to others (and the directory closed since), and a file of the
  victim's that others can write, are never unpickled; a control run of
  plain numba shows each plant would have run;
* a user-private group (``umask 002``, Debian/Ubuntu/Fedora) still caches;
* the fallback's own ``mkdtemp`` directory (the predictable one taken) is
  removed when the process exits, not when a forked child does;
* a store's commit record (``zarr.json``'s temporary file) and a nightly
  report's temporary file are new files of random names: a link planted at
  the names they had is not written through;
* appending to or re-creating a store, or locking a nightly models
  directory, through a link another user planted is refused (it would have
  written into, emptied or pruned the directory the link points to).

Every test runs the victim as a real unprivileged uid (``two_users.py``);
the suite skips them when not run as root.
"""
from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest

from .two_users import (ATTACKER, VICTIM, _nightly_lock, _Payload, _precious, _shared_store, as_user, needs_root,
                        start_as)

DEAD = 4_194_305            # above Linux's largest pid: certainly not a running process

pytestmark = needs_root


def _cache_paths(cache_dir, code_dir):
    """Where numba keeps the kernel's index and first data file under ``cache_dir`` (it makes the directories)."""
    import numba

    numba.config.CACHE_DIR = cache_dir
    sys.path.insert(0, code_dir)
    sys.modules.pop("victim_kernels", None)
    import victim_kernels

    cf = numba.njit(cache=True)(victim_kernels.add_one)._cache._cache_file
    return {"index": cf._index_path, "data": cf._data_path(cf._data_name(1))}


def _run(cache_dir, code_dir, plain=False):
    """The victim's process: the kernel's value, its cache hits and the warnings it saw."""
    import pickle  # noqa: F401 - numba's cache unpickles through it

    import numba

    import streamrank._numba as snb

    numba.config.CACHE_DIR = cache_dir
    snb._CACHE_DIR_VERDICTS.clear()
    snb._UNSAFE_WARNED[0] = False
    sys.path.insert(0, code_dir)
    sys.modules.pop("victim_kernels", None)
    import victim_kernels

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        k = numba.njit(cache=True)(victim_kernels.add_one) if plain else victim_kernels.fast_add_one
        value = k(41)
    return {"value": value, "hits": sum(k.stats.cache_hits.values()), "warnings": [str(w.message) for w in seen]}


def _write_payload(path, marker):
    import pickle

    with open(path, "wb") as f:                  # truncates in place when the file is another's but writable
        pickle.dump(_Payload(marker), f)


def _plant_new_file(path, marker):
    """The attacker replaces ``path`` by a file of its own (the directory is open to it)."""
    _write_payload(path + ".mine", marker)
    os.replace(path + ".mine", path)


def _chmod(mode, *paths):
    for p in paths:
        os.chmod(p, mode)


@pytest.mark.parametrize("plain", [False, True], ids=["streamrank", "control: plain numba"])
@pytest.mark.parametrize("plant", ["index planted", "index planted as a link", "data planted",
                                   "own index writable by others"])
def test_a_planted_cache_file_in_the_users_own_directory_is_not_unpickled(shared, plant, plain):
    cache = str(shared["dir"] / f"cache-{VICTIM}")
    paths = as_user(VICTIM, _cache_paths, cache, shared["code"])
    sub = os.path.dirname(paths["index"])
    if plant.startswith("index planted"):        # before the first run, while the victim's directories were 0777
        as_user(VICTIM, _chmod, 0o777, cache, sub)       # (numba made them when it chose the place)
        if plant.endswith("link"):
            payload = str(shared["dir"] / "payload")
            as_user(ATTACKER, _write_payload, payload, shared["marker"])
            as_user(ATTACKER, os.symlink, payload, paths["index"])
        else:
            as_user(ATTACKER, _write_payload, paths["index"], shared["marker"])
        as_user(VICTIM, _chmod, 0o755, cache, sub)
    else:                                        # a real cache of the victim's first
        as_user(VICTIM, _run, cache, shared["code"], plain=plain)
        if plant == "data planted":
            as_user(VICTIM, _chmod, 0o777, sub)
            as_user(ATTACKER, _plant_new_file, paths["data"], shared["marker"])
            as_user(VICTIM, _chmod, 0o755, sub)
        else:
            as_user(VICTIM, _chmod, 0o666, paths["index"])     # made under umask 0, say
            as_user(ATTACKER, _write_payload, paths["index"], shared["marker"])
    try:
        got = as_user(VICTIM, _run, cache, shared["code"], plain=plain)
    except AssertionError:
        assert plain, "streamrank's run failed"
        got = None                               # numba choked on what the payload returned: it ran all the same
    if plain:
        assert os.path.exists(shared["marker"]), "control: plain numba should have run the planted pickle"
        return
    assert not os.path.exists(shared["marker"]), "the planted pickle ran as the victim"
    assert got["value"] == 42 and got["hits"] == 0
    assert len(got["warnings"]) == 1 and "cache file not loaded" in got["warnings"][0], got["warnings"]
    again = as_user(VICTIM, _run, cache, shared["code"])     # the file was replaced by the victim's own
    assert again == {"value": 42, "hits": 1, "warnings": []}
    assert os.lstat(paths["index"]).st_uid == VICTIM and not os.path.islink(paths["index"])


def test_a_user_private_group_still_caches(shared):
    """``umask 002`` with the user's own group (root's here: its only member): numba's 0775 directories are fine."""
    from streamrank._shared_paths import group_of_one

    if not group_of_one(0, 0):
        pytest.skip("root's group has other members on this system")
    cache = str(shared["dir"] / "cache-upg")
    first = as_user(0, _run, cache, shared["code"], umask=0o002)
    sub = os.path.dirname(as_user(0, _cache_paths, cache, shared["code"])["index"])
    assert os.stat(sub).st_mode & 0o777 == 0o775
    assert first["warnings"] == [] and first["hits"] == 0
    assert as_user(0, _run, cache, shared["code"], umask=0o002) == {"value": 42, "hits": 1, "warnings": []}
    os.chown(sub, 0, VICTIM)                     # the same mode, a group with other members: refused
    shared_group = as_user(0, _run, cache, shared["code"], umask=0o002)
    assert shared_group["hits"] == 0 and "writable by other users" in shared_group["warnings"][0]


def _append_paused(store, ready_w, go_r):
    """The victim appends to the store, pausing just before its commit record is written."""
    import streamrank as sr
    import streamrank.io._group_append as ga
    from streamrank.io import _writer

    def paused(loc, attrs):
        os.write(ready_w, b"r")
        assert os.read(go_r, 1) == b"g"
        _writer.write_attrs(loc, attrs)

    ga.write_attrs = paused                      # the name the append's commit point calls
    sr.GroupStore.open(store, "a").append(np.ones((2, 3)), np.ones(2), np.array([3, 3]))
    return sr.GroupStore.open(store).n_rows


def test_a_stores_commit_record_is_not_written_through_a_link_at_a_predictable_name(shared):
    """Links planted (after the append's sweep of ``*.partial``) at every name the commit's temporary file could
    have had by its pid: the victim's file is untouched and the commit is a regular ``zarr.json``."""
    precious = _precious(shared)
    store = _shared_store(shared)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    child = start_as(VICTIM, _append_paused, str(store), ready_w, go_r)
    os.close(ready_w)                            # a child that fails before the pause: EOF here, not a hang
    os.close(go_r)
    if os.read(ready_r, 1) != b"r":
        child.result()                           # raises the child's error
        pytest.fail("the append committed without reaching the paused commit point")
    for name in (f"zarr.json.{child.pid}.partial", f".zarr.json.{child.pid}.partial"):
        as_user(ATTACKER, os.symlink, str(precious), str(store / name))
    os.write(go_w, b"g")
    assert child.result() == 8
    assert precious.read_text() == "keep me\n"
    assert not os.path.islink(store / "zarr.json")


def _report(models, stamp):
    from streamrank.pipelines._nightly_versions import _write_local_report

    _write_local_report(models, stamp, {"started": stamp, "ok": True})
    return sorted(os.listdir(os.path.join(models, "reports")))


def test_a_nightly_report_is_not_written_through_a_link_at_its_temporary_name(shared):
    precious = _precious(shared)
    models = shared["dir"] / "models"
    (models / "reports").mkdir(parents=True)
    for d in (models, models / "reports"):
        d.chmod(0o777)                           # a team's models directory
    stamp = "20261128T221500000+0000"
    link = models / "reports" / f".{stamp}.json.tmp"    # the name the temporary file had (the run's start time)
    as_user(ATTACKER, os.symlink, str(precious), str(link))
    assert f"{stamp}.json" in as_user(VICTIM, _report, str(models), stamp)
    assert precious.read_text() == "keep me\n"
    assert os.path.islink(link)


def _create_over(path):
    import streamrank as sr

    try:
        sr.GroupStore.create(path, n_features=3, overwrite=True)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "created"


def _append_to(path):
    import streamrank as sr

    try:
        sr.GroupStore.open(path, "a").append(np.zeros((1, 3)), np.zeros(1), np.array([9]))
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "appended"


def _own_store(path):
    import streamrank as sr

    sr.GroupStore.create(path, n_features=3).append(np.ones((2, 3)), np.ones(2), np.array([1, 1]))


def _rows(path):
    import streamrank as sr

    return sr.GroupStore.open(path).n_rows


def test_a_store_is_not_written_through_another_users_link(shared):
    """A path in ``/tmp`` where another user put a link to the victim's store: appending would have written the
    victim's rows into it, and ``create(..., overwrite=True)`` (ingest into an empty place) would have emptied it."""
    home = _precious(shared).parent
    mine = home / "mine.zarr"
    as_user(VICTIM, _own_store, str(mine))
    planted = shared["dir"] / "demo.zarr"
    as_user(ATTACKER, os.symlink, str(mine), str(planted))
    for write in (_append_to, _create_over):
        got = as_user(VICTIM, write, str(planted))
        assert got.startswith("UnsafeFileError") and f"symbolic link owned by uid {ATTACKER}" in got, got
    assert as_user(VICTIM, _rows, str(mine)) == 2
    os.unlink(planted)
    as_user(VICTIM, os.symlink, str(mine), str(planted))    # the user's own link is followed as before
    assert as_user(VICTIM, _append_to, str(planted)) == "appended"
    assert as_user(VICTIM, _create_over, str(planted)) == "created"
    assert as_user(VICTIM, _rows, str(mine)) == 0


def test_a_models_directory_is_not_locked_through_another_users_link(shared):
    """The nightly run writes versions and prunes old ones in the directory it locks: never one reached through
    another user's link (the victim's production models, say)."""
    prod = _precious(shared).parent / "models"
    as_user(VICTIM, os.mkdir, str(prod))
    planted = shared["dir"] / "nightly"
    as_user(ATTACKER, os.symlink, str(prod), str(planted))
    got = as_user(VICTIM, _nightly_lock, str(planted))
    assert got.startswith("UnsafeFileError") and "models directory" in got, got
    assert os.listdir(prod) == []
    assert as_user(VICTIM, _nightly_lock, str(prod)) == "locked"


def _clean(models):
    from streamrank.pipelines._nightly_versions import _clean_partial

    _clean_partial(models)
    return sorted(os.listdir(models))


def test_the_nightly_sweep_never_removes_through_a_link(shared):
    """A dead run's temporary version (``.<name>.<pid>-<random>.partial``) is swept; a link planted under such a
    name, pointing at the victim's directory, is left (and what it points to untouched), as is another user's."""
    precious = _precious(shared)
    models = shared["dir"] / "models"
    models.mkdir()
    models.chmod(0o777)
    link = models / f".v1.{DEAD}-aa.partial"
    theirs = models / f".v2.{DEAD}-bb.partial"
    mine = models / f".v3.{DEAD}-cc.partial"
    as_user(ATTACKER, os.symlink, str(precious.parent), str(link))
    as_user(ATTACKER, os.mkdir, str(theirs))
    as_user(VICTIM, os.mkdir, str(mine))
    assert as_user(VICTIM, _clean, str(models)) == sorted([link.name, theirs.name])
    assert precious.read_text() == "keep me\n"


def _fallback_and_its_exit(tmpdir):
    """The fallback in ``tmpdir`` (the predictable name taken): the process's own directory, and what its exit
    handler does when a forked child exits (nothing: the directory is the parent's) and when the process does."""
    import atexit
    import tempfile

    import streamrank._numba as snb

    handlers = []
    register, atexit.register = atexit.register, lambda fn, *a, **k: handlers.append(fn)
    try:
        tempfile.tempdir = tmpdir
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = snb._fallback_cache_dir()
    finally:
        atexit.register = register
    pid = os.fork()
    if pid == 0:                                 # a forked child (a dask worker, the CLI's command) exits
        for fn in handlers:
            fn()
        os._exit(0)
    os.waitpid(pid, 0)
    after_child = os.path.isdir(path)
    for fn in handlers:
        fn()
    return {"path": path, "after_child": after_child, "after_exit": os.path.exists(path)}


def test_the_fallbacks_own_directory_is_removed_when_the_process_exits(shared):
    predictable = shared["dir"] / f"streamrank-numba-{VICTIM}"
    as_user(ATTACKER, os.mkdir, str(predictable), 0o777, umask=0)
    got = as_user(VICTIM, _fallback_and_its_exit, str(shared["dir"]))
    assert got["path"] != str(predictable) and os.path.dirname(got["path"]) == str(shared["dir"])
    assert got["after_child"] and not got["after_exit"]
