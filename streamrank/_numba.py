"""The one compile policy for every numba kernel in streamrank.

Kernel modules (``_*_kernels.py``) import :func:`jit` from here and hold only
jitted functions of arrays and scalars: no classes, no zarr, no dask.  CSR
matrices enter as ``(indptr, indices, data)``.

Policy
------
* ``cache=True`` so a second process does not pay the compile again;
* ``nogil=True`` so the prefetching reader thread and dask's threaded
  scheduler run alongside the kernels;
* no ``fastmath``: NaN checks, signs and L1 thresholds must be exact;
* ``parallel=True`` only through :func:`jit_parallel`, for embarrassingly
  parallel loops, and always with a serial twin (``jit``) tested against it.

Where the cache lives
---------------------
``NUMBA_CACHE_DIR`` if set; else ``__pycache__`` beside the installed
sources if that is writable; else numba's per-user directory
(``~/.cache/numba``).  When none of these is writable (a read-only
site-packages *and* a read-only or missing home, e.g. a locked-down
container or service account) numba itself would refuse to import the
kernels; streamrank then caches in ``$TMPDIR/streamrank-numba-<uid>`` and
says so once (set ``NUMBA_CACHE_DIR`` to choose the place).

Several processes, one cache
----------------------------
Processes that share a cache directory (test workers, dask workers, two
cron jobs) may compile different signatures of one kernel at the same time.
numba's own save reads the index, picks the first free data-file number and
writes both without a lock, so two such saves can give two signatures the
same data file, and a later process then loads the machine code of one
signature for the arguments of the other.  streamrank's kernels save under
an exclusive ``flock`` on ``<index>.lock`` (POSIX; elsewhere numba's save is
left as it is): saves of one kernel take turns, each sees the other's entry.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import warnings

import numba
from numba.core.caching import IndexDataCacheFile

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

__all__ = ["jit", "jit_parallel", "prange"]

_POLICY = dict(cache=True, nogil=True, fastmath=False)

prange = numba.prange


def _fallback_cache_dir() -> str:
    """A writable cache directory for when numba finds none (see the module doc); warns once."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    path = os.path.join(tempfile.gettempdir(), f"streamrank-numba-{uid}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    numba.config.CACHE_DIR = path
    warnings.warn(f"no writable numba cache beside the package or in the home directory: compiled kernels are "
                  f"cached in {path} (set NUMBA_CACHE_DIR to choose)", RuntimeWarning, stacklevel=4)
    return path


@contextlib.contextmanager
def _exclusive(path):
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class _LockedCacheFile(IndexDataCacheFile):
    """numba's index + data files, saved under an exclusive lock (see "Several processes, one cache")."""

    def save(self, key, data):
        with _exclusive(self._index_path + ".lock"):
            super().save(key, data)


def _lock_saves(dispatcher):
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if fcntl is not None and type(cache_file) is IndexDataCacheFile:
        cache_file.__class__ = _LockedCacheFile
    return dispatcher


def _njit(fn, options):
    try:
        return _lock_saves(numba.njit(**options)(fn))
    except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available"
        if not options.get("cache") or "no locator available" not in str(exc) or numba.config.CACHE_DIR:
            raise
        _fallback_cache_dir()
        return _lock_saves(numba.njit(**options)(fn))


def jit(*args, **kwargs):
    """``numba.njit`` with the streamrank compile policy (usable bare or called)."""
    options = {**_POLICY, **kwargs}
    if args and callable(args[0]) and len(args) == 1:  # @jit, or @jit_parallel (which passes parallel=True)
        return _njit(args[0], options)
    if args:  # explicit signatures: numba.njit(sigs, **options)
        return numba.njit(*args, **options)  # compiles eagerly at import: not locked (unused in streamrank)
    return lambda fn: _njit(fn, options)


def jit_parallel(*args, **kwargs):
    """Like :func:`jit` with ``parallel=True``; keep a serial twin beside it."""
    kwargs.setdefault("parallel", True)
    return jit(*args, **kwargs)
