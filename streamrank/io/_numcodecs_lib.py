"""A C library numcodecs bundles in one of its extension modules, loaded with ctypes without importing numcodecs.

Why (issue 22): ``import numcodecs`` reads every installed distribution's
entry points for its codec registry (65-80 CPU-ms of a warm command), while
a local store's chunks need only c-blosc (:mod:`streamrank.io._blosc_lib`)
and a local model's only libzstd (:mod:`streamrank.io._zstd_lib`).  Both
libraries are linked into numcodecs' ``blosc`` and ``zstd`` extension
modules, whose C symbols ``dlopen`` exposes: the module file is found beside
numcodecs' package with :func:`importlib.util.find_spec` (which does not run
the package) and loaded with :class:`ctypes.CDLL` (the module's Python
initialisation does not run either).

:func:`load_once` loads a module the first time it is asked for, once per
process (the answer, the library or None, is kept in the caller's ``state``
dict, which tests may set to None to exercise the fall-back to numcodecs).
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import threading

__all__ = ["load_once"]

_lock = threading.Lock()


def load_once(module: str, prototypes: dict, state: dict):
    """numcodecs' extension ``module`` as a ``ctypes.CDLL``, or None if it cannot be loaded; kept in ``state``.

    ``prototypes``: ``{symbol: (argtypes, restype)}``, set on the library; a
    module file lacking one of them is not used (None).
    """
    if "lib" in state:
        return state["lib"]
    with _lock:
        if "lib" not in state:
            state["lib"] = _load(module, prototypes)
    return state["lib"]


def _load(module: str, prototypes: dict):
    try:
        spec = importlib.util.find_spec("numcodecs")
        dirs = list(spec.submodule_search_locations or ()) if spec else []
    except (ImportError, ValueError):
        return None
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(d, module + suffix)
            if not os.path.exists(path):
                continue
            try:
                lib = ctypes.CDLL(path)
                for name, (args, res) in prototypes.items():
                    fn = getattr(lib, name)
                    fn.argtypes, fn.restype = args, res
            except (OSError, AttributeError):
                continue
            return lib
    return None
