"""Two real uids on one machine, for the tests of issue 38 (another local user plants files streamrank reads).

The suite runs as root in CI: :func:`as_user` forks a child that drops to an
unprivileged uid (``os.setgid``/``os.setuid``) and runs a function there;
:func:`start_as` does the same but returns at once, so the test can act
(as another uid) while the child waits at a point of its choosing.
:data:`VICTIM` and :data:`ATTACKER` are the two uids; the :func:`shared`
fixture is a world-writable sticky directory standing in for ``/tmp``.
The fixtures ``shared`` (that directory) and the session's :func:`preload`
are in ``conftest.py``.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import sys
import tempfile
import textwrap
import traceback
import warnings
from pathlib import Path

import pytest

VICTIM, ATTACKER = 65534, 65533

needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="needs root to switch between two real uids")

KERNEL_SOURCE = textwrap.dedent('''
    from streamrank._numba import jit


    def add_one(x):
        return x + 1


    fast_add_one = jit(add_one)
''')


def preload():
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
    return start_as(uid, fn, *args, umask=umask, **kwargs).result()


class _Child:
    def __init__(self, pid, r, uid):
        self.pid, self._r, self._uid = pid, r, uid

    def result(self):
        """Wait for the child; its JSON-able result (its error raised as an AssertionError)."""
        chunks = []
        while True:
            b = os.read(self._r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(self._r)
        os.waitpid(self.pid, 0)
        out = json.loads(b"".join(chunks) or b'{"error": "child died"}')
        if "error" in out:
            raise AssertionError(f"child as uid {self._uid} failed: {out['error']}\n{out.get('tb', '')}")
        return out["ok"]


def start_as(uid, fn, *args, umask=0o022, **kwargs) -> _Child:
    """Start ``fn(*args, **kwargs)`` in a forked child as ``uid``; ``.pid``, and ``.result()`` to wait for it."""
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
    return _Child(pid, r, uid)


class _Payload:
    """Unpickling this creates ``marker``: what a planted cache index would run as its reader."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@contextlib.contextmanager
def shared_dir():
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


def _nightly_lock(models):
    """Hold the nightly lock of ``models`` once: ``"locked"``, or the error it raised."""
    from streamrank.pipelines._nightly_versions import models_lock

    try:
        with models_lock(models):
            return "locked"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
