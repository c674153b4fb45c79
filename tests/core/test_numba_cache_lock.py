"""Processes sharing one numba cache: saves of one kernel take turns (streamrank._numba, issue 22).

Two processes that compile two signatures of one kernel at the same time
(pytest-xdist workers, dask workers, two cron jobs) both save into the
kernel's index.  The interleaving that numba's unlocked save allows is forced
here with two threads (``flock`` locks of two ``open`` calls exclude each
other even within one process): A has written the index and not yet its data
file when B saves.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from numba.core.caching import IndexDataCacheFile

fcntl = pytest.importorskip("fcntl")


def test_concurrent_saves_of_two_signatures_keep_each_its_own_code(tmp_path):
    from streamrank._numba import _LockedCacheFile

    a = _LockedCacheFile(str(tmp_path), "kern", "stamp")
    b = _LockedCacheFile(str(tmp_path), "kern", "stamp")
    paused, release = threading.Event(), threading.Event()
    save_data = a._save_data

    def slow_save_data(name, data):  # A: index written, data file not yet
        paused.set()
        assert release.wait(10)
        save_data(name, data)

    a._save_data = slow_save_data
    ta = threading.Thread(target=a.save, args=(("float32",), "code for float32"))
    ta.start()
    assert paused.wait(10)
    tb = threading.Thread(target=b.save, args=(("float64",), "code for float64"))
    tb.start()
    tb.join(0.5)
    assert tb.is_alive(), "B saved while A held the kernel's cache lock"
    release.set()
    ta.join(10)
    tb.join(10)
    reader = IndexDataCacheFile(str(tmp_path), "kern", "stamp")   # a later process
    assert reader.load(("float32",)) == "code for float32"
    assert reader.load(("float64",)) == "code for float64"
    assert len(set(reader._load_index().values())) == 2             # two data files


def test_streamrank_kernels_save_under_the_lock(tmp_path):
    """A kernel compiled through ``streamrank._numba.jit`` saves through the locked file and loads back."""
    code = ("from streamrank._numba import jit, _LockedCacheFile\n"
            "@jit\ndef twice(x):\n    return 2 * x\n"
            "assert type(twice._cache._cache_file) is _LockedCacheFile\n"
            "print(twice(21), twice(1.5), sum(twice.stats.cache_hits.values()))\n")
    mod = tmp_path / "kmod.py"
    mod.write_text(code)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))
    outs = [subprocess.run([sys.executable, "-c", "import kmod"], capture_output=True, text=True, env=env, check=True)
            .stdout.split() for _ in range(2)]
    assert outs[0] == ["42", "3.0", "0"]          # first process: compiled both signatures
    assert outs[1] == ["42", "3.0", "2"]          # second: loaded both from the cache
    assert len(list((tmp_path / "cache").rglob("*.lock"))) == 1


def test_a_kernel_whose_callee_was_edited_is_compiled_again(tmp_path):
    """numba keys a cached kernel on its own file only (numba #6845): a caller cached before its callee was edited
    ran the callee's old code.  streamrank's kernels are keyed on every kernel module of their package too."""
    pkg = tmp_path / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_callee_kernels.py").write_text("from streamrank._numba import jit\n@jit\ndef f(x):\n    return x + 1\n")
    (pkg / "_caller_kernels.py").write_text("from streamrank._numba import jit\nfrom ._callee_kernels import f\n"
                                            "@jit\ndef g(x):\n    return 2 * f(x)\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}

    def run():
        code = "from pkgx._caller_kernels import g\nprint(g(1), sum(g.stats.cache_hits.values()))\n"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return out.stdout.split()

    assert run() == ["4", "0"]                     # compiled and cached
    assert run() == ["4", "1"]                     # loaded from the cache
    (pkg / "_callee_kernels.py").write_text("from streamrank._numba import jit\n@jit\ndef f(x):\n    return x + 2\n")
    assert run() == ["6", "0"]                     # the caller's file is unchanged, yet it is compiled again
    assert run() == ["6", "1"]


def test_kernel_sources_stamp_follows_every_kernel_module(tmp_path):
    from streamrank._numba import _kernel_sources_stamp, _package_root

    (tmp_path / "p" / "sub").mkdir(parents=True)
    for d in (tmp_path / "p", tmp_path / "p" / "sub"):
        (d / "__init__.py").write_text("")
    (tmp_path / "p" / "sub" / "_a_kernels.py").write_text("x = 1\n")
    (tmp_path / "p" / "plain.py").write_text("y = 1\n")
    assert _package_root(str(tmp_path / "p" / "sub" / "_a_kernels.py")) == str(tmp_path / "p")
    first = _kernel_sources_stamp(str(tmp_path / "p"))
    _kernel_sources_stamp.cache_clear()
    (tmp_path / "p" / "plain.py").write_text("y = 2\n")          # not a kernel module: the same stamp
    assert _kernel_sources_stamp(str(tmp_path / "p")) == first
    _kernel_sources_stamp.cache_clear()
    (tmp_path / "p" / "sub" / "_a_kernels.py").write_text("x = 2\n")
    assert _kernel_sources_stamp(str(tmp_path / "p")) != first
    _kernel_sources_stamp.cache_clear()
