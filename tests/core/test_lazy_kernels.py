"""Kernels made on first use (``streamrank._numba``, issue 22).

Module state (whether numba is set up) belongs to a process, and
this test process has run kernels already: the checks that need a process in
which no kernel ran yet run in fresh interpreters.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


#: the one module that is numba code by nature (an LLVM intrinsic): imported only when a kernel needing it is made
NUMBA_BY_NATURE = ("streamrank.sgd._prefetch",)


def _run(code: str, tmp_path, **env) -> str:
    """stdout of ``code`` in a fresh interpreter with ``tmp_path`` on the path and a cache of its own."""
    import os

    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
                   NUMBA_CACHE_DIR=str(tmp_path / "cache"), **env)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=environ,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return res.stdout


KERNELS_A = '''
from streamrank._numba import jit, jit_parallel, prange


@jit
def helper(x):
    return 2.0 * x


@jit
def outer(a):
    """Sum of 2 a + 1."""
    total = 0.0
    for i in range(a.shape[0]):
        total += helper(a[i]) + 1.0
    return total


@jit_parallel
def doubled(a):
    out = np.empty_like(a)
    for i in prange(a.shape[0]):
        out[i] = helper(a[i])
    return out
'''

KERNELS_B = '''

from streamrank._numba import jit

from kern_a import helper

OFFSET = None      # bound by _numba_globals when a kernel here is made


def _numba_globals():
    import numba

    return {"OFFSET": numba.float64(0.5)}


@jit
def shifted(x):
    return helper(x) + OFFSET
'''


@pytest.fixture
def kernel_modules(tmp_path):
    (tmp_path / "kern_a.py").write_text("import numpy as np\n" + KERNELS_A)
    (tmp_path / "kern_b.py").write_text(KERNELS_B)
    return tmp_path


def test_importing_streamrank_modules_imports_no_numba(tmp_path):
    code = f"""
    import importlib, pkgutil, sys
    import streamrank
    for info in pkgutil.walk_packages(streamrank.__path__, "streamrank."):
        if info.name.endswith("__main__") or info.name in {NUMBA_BY_NATURE!r}:
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:      # an optional extra that is not installed
            assert "streamrank" not in str(exc), exc
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite")))
    print(len([m for m in sys.modules if m.startswith("streamrank.")]))
    """
    lines = _run(code, tmp_path).splitlines()
    assert lines[0] == "[]"
    assert int(lines[1]) > 100              # the walk imported the package's modules


def test_a_kernel_is_made_on_first_call_with_its_callees_bound(kernel_modules):
    code = """
    import sys, numpy as np
    import kern_a, kern_b
    from streamrank._numba import LazyKernel, numba_ready
    assert "numba" not in sys.modules and not numba_ready()
    assert isinstance(kern_a.outer, LazyKernel) and "not made yet" in repr(kern_a.outer)
    assert kern_a.outer.__doc__ == "Sum of 2 a + 1." and kern_a.outer.__name__ == "outer"
    a = np.arange(5.0)
    print(kern_a.outer(a), kern_a.doubled(a).tolist(), kern_b.shifted(3.0))
    from numba.core.registry import CPUDispatcher
    assert "numba" in sys.modules and numba_ready()
    assert isinstance(kern_a.__dict__["helper"], CPUDispatcher)      # module globals bound for numba's typing
    assert kern_a.__dict__["prange"] is __import__("numba").prange
    assert len(kern_a.outer.signatures) == 1                        # dispatcher attributes pass through
    assert kern_a.outer.py_func.__name__ == "outer"
    """
    out = _run(code, kernel_modules).split()
    assert out[0] == "25.0"                                          # sum(2 i + 1), i < 5
    assert "".join(out[1:6]) == "[0.0,2.0,4.0,6.0,8.0]"
    assert out[6] == "6.5"


def test_kernels_made_lazily_still_cache(kernel_modules):
    code = """
    import numpy as np, kern_a
    kern_a.outer(np.arange(3.0))
    print(sum(kern_a.outer.stats.cache_hits.values()), sum(kern_a.outer.stats.cache_misses.values()))
    """
    assert _run(code, kernel_modules).split() == ["0", "1"]          # compiled and saved
    assert _run(code, kernel_modules).split() == ["1", "0"]          # loaded by the next process


def test_first_calls_from_many_threads_make_one_dispatcher(kernel_modules):
    code = """
    import threading, numpy as np, kern_a
    a = np.arange(100.0)
    outer = kern_a.outer          # the LazyKernel (once made, the module's name is bound to the dispatcher)
    results, made = [], []
    def call():
        results.append(outer(a))
        made.append(id(outer.dispatcher()))
    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(len(set(results)), results[0], len(set(made)))
    """
    assert _run(code, kernel_modules).split() == ["1", "10000.0", "1"]


def test_kernels_pickle_by_reference_and_bind_on_classes_like_functions(kernel_modules):
    code = """
    import pickle, numpy as np, kern_a
    from streamrank._numba import LazyKernel
    helper = kern_a.helper
    assert pickle.loads(pickle.dumps(helper)) is helper          # not made: the same LazyKernel
    class Holder:
        twice = helper
    assert Holder.twice is helper
    print(Holder().twice.__self__.__class__.__name__)            # bound like a function: self is passed
    kern_a.outer(np.arange(2.0))                                  # made: the module now holds the dispatcher
    back = pickle.loads(pickle.dumps(helper))
    print(back is helper.dispatcher(), back(2.0))
    """
    assert _run(code, kernel_modules).split() == ["Holder", "True", "4.0"]
