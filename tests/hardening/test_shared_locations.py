"""Another local user cannot make streamrank run code or clobber files as you (issue 38), with two real uids.

The suite runs as root in CI: each test forks children that drop to an
unprivileged *attacker* uid and a *victim* uid (``os.setgid``/``os.setuid``),
with a world-writable sticky directory standing in for ``/tmp``.  The
attacker plants what it can; the victim then runs streamrank, and the test
checks that nothing the attacker planted ran (a pickle whose loading would
create a marker file) or was written through (a symbolic link at a lock
file's name pointing at one of the victim's files).

* A: the attacker makes the victim's predictable cache directory first,
  mode 0777;
* B: the attacker plants numba index files at the paths numba will use,
  learned from a run of its own;
* C: the cache path is a symbolic link to a directory the attacker owns;
* the symbolic-link case of every shared-location file streamrank opens:
  the store writer lock, the nightly models lock, numba's save lock, and
  the leftovers a sweep removes.

A control run shows the attack is real: plain ``numba.njit(cache=True)`` in
the same place does run the planted pickle.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
import sys
import tempfile
import textwrap
import traceback
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="needs root to switch between two real uids")

VICTIM, ATTACKER = 65534, 65533

KERNEL_SOURCE = textwrap.dedent('''
    from streamrank._numba import jit


    def add_one(x):
        return x + 1


    fast_add_one = jit(add_one)
''')


@pytest.fixture(scope="module", autouse=True)
def _preloaded():
    """Import (and set up) in the parent what the children use: the unprivileged uids may not be able to read
    the interpreter's own files (a Python installed under root's home), so nothing may be imported late."""
    import importlib.readers  # noqa: F401 - llvmlite finds its library through it
    import numpy as np

    import numba

    numba.njit(lambda x: x + 1)(1)
    import streamrank as sr
    import streamrank.cli._atomic  # noqa: F401
    import streamrank.pipelines._nightly_versions  # noqa: F401
    from streamrank._shared_paths import unsafe_dir_reason  # noqa: F401

    d = tempfile.mkdtemp()
    try:                                   # a store created, opened and appended to: every module it needs
        sr.GroupStore.create(os.path.join(d, "s.zarr"), n_features=3).append(np.ones((2, 3)), np.ones(2),
                                                                             np.array([1, 1]))
        sr.GroupStore.open(os.path.join(d, "s.zarr"), "a").append(np.ones((2, 3)), np.ones(2), np.array([2, 2]))
    finally:
        shutil.rmtree(d)


def as_user(uid, fn, *args, umask=0o022, **kwargs):
    """Run ``fn(*args, **kwargs)`` in a forked child as ``uid``; return its JSON-able result (raise its error)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        code = 0
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.umask(umask)
            out = {"ok": fn(*args, **kwargs)}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out = {"error": f"{type(exc).__name__}: {exc}", "tb": traceback.format_exc()}
            code = 1
        try:
            os.write(w, json.dumps(out, default=str).encode())
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.waitpid(pid, 0)
    out = json.loads(b"".join(chunks) or b'{"error": "child died"}')
    if "error" in out:
        raise AssertionError(f"child as uid {uid} failed: {out['error']}\n{out.get('tb', '')}")
    return out["ok"]


class _Payload:
    """Unpickling this creates ``marker``: what a planted cache index would run as its reader."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def shared():
    """A world-writable sticky directory (``/tmp``'s mode) with a kernel module anyone can import.

    Made directly in the system temp directory: pytest's own ``tmp_path`` sits below a 0700 directory of
    root's, which the two unprivileged users could not enter.
    """
    tmp_path = Path(tempfile.mkdtemp(prefix="sr-two-users-"))
    tmp_path.chmod(0o755)
    try:
        yield _shared_layout(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _shared_layout(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o1777)
    code = tmp_path / "code"
    code.mkdir()
    (code / "victim_kernels.py").write_text(KERNEL_SOURCE)
    code.chmod(0o755)
    (code / "victim_kernels.py").chmod(0o644)
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)          # where the attacker's payload would write its marker
    return {"dir": d, "code": str(code), "marker": str(out / "pwned"), "tmp": tmp_path}


def _import_kernels(code_dir):
    sys.path.insert(0, code_dir)
    sys.modules.pop("victim_kernels", None)
    import victim_kernels

    return victim_kernels


def _plant_index(cache_dir, code_dir, marker):
    """The attacker: learn numba's index path for the kernel from its own run, then plant a payload there."""
    import numba

    numba.config.CACHE_DIR = cache_dir
    mod = _import_kernels(code_dir)
    d = numba.njit(cache=True)(mod.add_one)
    index = d._cache._cache_file._index_path
    os.makedirs(os.path.dirname(index), exist_ok=True)
    with open(index, "wb") as f:
        pickle.dump(_Payload(marker), f)
    os.chmod(index, 0o666)
    return index


def _victim_run(cache_dir, code_dir, *, plain=False):
    """The victim: compile and call the kernel with its cache in ``cache_dir``; the warnings it saw."""
    import numba

    import streamrank._numba as snb

    numba.config.CACHE_DIR = cache_dir
    getattr(snb, "_CACHE_DIR_VERDICTS", {}).clear()      # each child decides afresh
    getattr(snb, "_UNSAFE_WARNED", [False])[0] = False
    mod = _import_kernels(code_dir)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if plain:
            value = numba.njit(cache=True)(mod.add_one)(41)
        else:
            value = mod.fast_add_one(41)
    assert value == 42
    return [str(w.message) for w in seen]


def test_control_plain_numba_runs_a_planted_index(shared):
    """The attack is real: numba alone loads (and so runs) a pickle planted in a cache another user made."""
    cache = str(shared["dir"] / "cache")
    as_user(ATTACKER, os.mkdir, cache, 0o777, umask=0)
    as_user(ATTACKER, _plant_index, cache, shared["code"], shared["marker"], umask=0)
    try:
        as_user(VICTIM, _victim_run, cache, shared["code"], plain=True)
    except AssertionError:
        pass                                     # numba may fail after unpickling the payload: it ran all the same
    assert os.path.exists(shared["marker"])


@pytest.mark.parametrize("attack", ["A: dir made first, 0777", "B: index planted", "C: symlink to attacker dir"])
def test_kernel_cache_from_a_directory_another_user_controls_is_not_loaded(shared, attack):
    cache = str(shared["dir"] / f"streamrank-numba-{VICTIM}")
    if attack.startswith("C"):
        target = str(shared["dir"] / "attacker-owned")
        as_user(ATTACKER, os.mkdir, target, 0o777, umask=0)     # writable by the victim: numba would use it
        as_user(ATTACKER, os.symlink, target, cache)
        as_user(ATTACKER, _plant_index, target, shared["code"], shared["marker"], umask=0)
    else:
        as_user(ATTACKER, os.mkdir, cache, 0o777, umask=0)
        if attack.startswith("B"):
            as_user(ATTACKER, _plant_index, cache, shared["code"], shared["marker"], umask=0)
    seen = as_user(VICTIM, _victim_run, cache, shared["code"])
    assert not os.path.exists(shared["marker"]), "the planted pickle ran as the victim"
    assert len(seen) == 1 and "is not used" in seen[0] and cache in seen[0], seen
    if attack.startswith("C"):
        assert "symbolic link owned by uid" in seen[0]


def test_own_cache_directory_still_caches(shared):
    """The legitimate owner's 0700 directory: the kernel is saved, and a second process loads it from there."""
    cache = str(shared["dir"] / f"streamrank-numba-{VICTIM}")
    as_user(VICTIM, os.mkdir, cache, 0o700)
    assert as_user(VICTIM, _victim_run, cache, shared["code"]) == []
    index_files = [f for _, _, fs in os.walk(cache) for f in fs if f.endswith(".nbi")]
    assert index_files

    def second_run():
        _victim_run(cache, shared["code"])
        mod = sys.modules["victim_kernels"]
        return sum(mod.fast_add_one.stats.cache_hits.values())

    assert as_user(VICTIM, second_run) == 1


def _fallback_in(tmpdir):
    import tempfile

    import streamrank._numba as snb

    tempfile.tempdir = tmpdir
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        path = snb._fallback_cache_dir()
    st = os.lstat(path)
    return {"path": path, "uid": st.st_uid, "mode": stat.S_IMODE(st.st_mode), "link": stat.S_ISLNK(st.st_mode),
            "warnings": [str(w.message) for w in seen]}


@pytest.mark.parametrize("plant", ["dir 0777", "symlink"])
def test_fallback_cache_dir_is_never_one_another_user_made(shared, plant):
    predictable = str(shared["dir"] / f"streamrank-numba-{VICTIM}")
    if plant == "symlink":
        target = str(shared["dir"] / "attacker-owned")
        as_user(ATTACKER, os.mkdir, target, 0o777, umask=0)
        as_user(ATTACKER, os.symlink, target, predictable)
    else:
        as_user(ATTACKER, os.mkdir, predictable, 0o777, umask=0)
    got = as_user(VICTIM, _fallback_in, str(shared["dir"]))
    assert got["path"] != predictable and os.path.dirname(got["path"]) == str(shared["dir"])
    assert got["uid"] == VICTIM and got["mode"] == 0o700 and not got["link"]
    assert len(got["warnings"]) == 1 and "not used" in got["warnings"][0]


def test_fallback_cache_dir_is_reused_when_it_is_the_users_own(shared):
    first = as_user(VICTIM, _fallback_in, str(shared["dir"]))
    second = as_user(VICTIM, _fallback_in, str(shared["dir"]))
    assert first["path"] == second["path"] == str(shared["dir"] / f"streamrank-numba-{VICTIM}")
    assert first["mode"] == 0o700 and "not used" not in second["warnings"][0]


# ---- lock files and sweeps: a link planted at the name is never followed -------------------------------------------

def _precious(shared):
    """A file of the victim's that a followed link would clobber."""
    home = shared["tmp"] / "victim-home"
    home.mkdir()
    os.chown(home, VICTIM, VICTIM)
    f = home / "precious.txt"
    f.write_text("keep me\n")
    os.chown(f, VICTIM, VICTIM)
    return f


def _shared_store(shared):
    """A store directory others can write (a group-writable team volume stands for it)."""
    import numpy as np

    import streamrank as sr

    p = shared["dir"] / "team.zarr"
    rng = np.random.default_rng(0)
    sr.GroupStore.create(str(p), n_features=3).append(rng.random((6, 3)), rng.random(6), np.array([1, 1, 1, 2, 2, 2]))
    for d, _, fs in os.walk(p):
        os.chmod(d, 0o777)
        for f in fs:
            os.chmod(os.path.join(d, f), 0o666)
    return p


def _append_one(path):
    import numpy as np

    import streamrank as sr

    try:
        sr.GroupStore.open(path, "a").append(np.ones((2, 3)), np.ones(2), np.array([3, 3]))
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "appended"


def test_store_writer_lock_is_not_followed_through_a_planted_link(shared):
    precious = _precious(shared)
    store = _shared_store(shared)
    lock = store / ".streamrank.lock"
    lock.unlink(missing_ok=True)
    as_user(ATTACKER, os.symlink, str(precious), str(lock))
    got = as_user(VICTIM, _append_one, str(store))
    assert "UnsafeFileError" in got and "symbolic link" in got and ".streamrank.lock" in got
    assert precious.read_text() == "keep me\n"


def _nightly_lock(models):
    from streamrank.pipelines._nightly_versions import models_lock

    try:
        with models_lock(models):
            return "locked"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def test_nightly_models_lock_is_not_followed_through_a_planted_link(shared):
    """The holder truncates the lock and writes its pid: through a link that would clobber the victim's file."""
    precious = _precious(shared)
    models = shared["dir"] / "models"
    models.mkdir(mode=0o777)
    models.chmod(0o777)
    as_user(ATTACKER, os.symlink, str(precious), str(models / ".nightly.lock"))
    got = as_user(VICTIM, _nightly_lock, str(models))
    assert "UnsafeFileError" in got and ".nightly.lock" in got
    assert precious.read_text() == "keep me\n"
    (models / ".nightly.lock").unlink()
    assert as_user(VICTIM, _nightly_lock, str(models)) == "locked"     # the plain file is made and held


def test_lock_file_hard_link_is_refused(shared):
    from streamrank._shared_paths import UnsafeFileError, open_lock_file

    a = shared["tmp"] / "a.lock"
    a.write_text("x")
    os.link(a, shared["tmp"] / "b.lock")
    with pytest.raises(UnsafeFileError, match="hard links"):
        open_lock_file(shared["tmp"] / "b.lock")
    os.mkfifo(shared["tmp"] / "fifo.lock")
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        open_lock_file(shared["tmp"] / "fifo.lock")


def test_numba_save_lock_is_not_followed_through_a_planted_link(shared):
    from streamrank._numba import _exclusive
    from streamrank._shared_paths import UnsafeFileError

    precious = _precious(shared)
    link = shared["dir"] / "kernel.nbi.lock"
    as_user(ATTACKER, os.symlink, str(precious), str(link))
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        with _exclusive(str(link)):
            pass
    assert precious.read_text() == "keep me\n"


DEAD = 4_194_305            # above Linux's largest pid: certainly not a running process


def _sweep_model_leftovers(model):
    from pathlib import Path

    from streamrank.persistence import _sweep_leftovers

    _sweep_leftovers(Path(model))
    return sorted(os.listdir(os.path.dirname(model)))


def test_sweeps_remove_only_the_users_own_leftovers_never_through_links(shared):
    precious = _precious(shared)
    victim_dir = precious.parent
    d = shared["dir"] / "models"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    model = d / "m.zarr"
    link = d / f".m.zarr.{DEAD}-aa.partial"                 # a dead writer's name, planted as a link
    theirs = d / f".m.zarr.{DEAD}-bb.old"                   # a real leftover, of another user
    as_user(ATTACKER, os.symlink, str(victim_dir), str(link))
    as_user(ATTACKER, os.mkdir, str(theirs), 0o777, umask=0)
    mine = d / f".m.zarr.{DEAD}-cc.partial"
    as_user(VICTIM, os.mkdir, str(mine), 0o700)
    left = as_user(VICTIM, _sweep_model_leftovers, str(model))
    assert link.name in left and theirs.name in left and mine.name not in left
    assert precious.read_text() == "keep me\n"


def _sweep_npy(out):
    from pathlib import Path

    from streamrank.cli._atomic import _sweep_npy_partials

    return [p.name for p in _sweep_npy_partials(Path(out))]


def test_npy_partial_sweep_skips_links_and_other_users(shared):
    precious = _precious(shared)
    d = shared["dir"]
    link = d / f".scores.{DEAD}-aa.partial.npy"
    as_user(ATTACKER, os.symlink, str(precious), str(link))
    mine = d / f".scores.{DEAD}-bb.partial.npy"
    as_user(VICTIM, lambda p: Path(p).write_bytes(b"x") and None, str(mine))
    removed = as_user(VICTIM, _sweep_npy, str(d / "scores.npy"))
    assert removed == [mine.name]
    assert os.path.islink(link) and precious.read_text() == "keep me\n"


def test_unsafe_dir_reason_rules(tmp_path):
    """The directory rule itself: owner, group/other write, sticky parents, links."""
    from streamrank._shared_paths import unsafe_dir_reason

    tmp_path.chmod(0o755)
    ok = tmp_path / "ok"
    ok.mkdir(mode=0o700)
    assert unsafe_dir_reason(ok) is None
    gw = tmp_path / "gw"
    gw.mkdir()
    gw.chmod(0o775)
    assert "writable by other users" in unsafe_dir_reason(gw)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "mine").mkdir(mode=0o700)
    assert unsafe_dir_reason(sticky / "mine") is None             # /tmp/<own dir>: fine
    assert "writable by other users" in unsafe_dir_reason(sticky)  # /tmp itself: not a cache
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)
    (open_parent / "mine").mkdir(mode=0o700)
    assert "writable by other users" in unsafe_dir_reason(open_parent / "mine")   # a parent without sticky
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    os.chown(other, ATTACKER, ATTACKER)
    assert f"owned by uid {ATTACKER}" in unsafe_dir_reason(other)
    assert "does not exist" in unsafe_dir_reason(tmp_path / "missing")
