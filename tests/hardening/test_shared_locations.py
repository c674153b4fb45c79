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

import os
import stat
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from .two_users import (ATTACKER, VICTIM, _nightly_lock, _plant_index, _precious, _shared_store, _victim_run,
                        as_user, needs_root)

pytestmark = needs_root


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

    from streamrank._dir_swap import _sweep_leftovers

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
    os.chown(gw, 0, VICTIM)                    # a group others are in (nogroup: nobody's, _apt's...)
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
