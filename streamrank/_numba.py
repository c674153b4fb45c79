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
"""
from __future__ import annotations

import os
import tempfile
import warnings

import numba

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


def _njit(fn, options):
    try:
        return numba.njit(**options)(fn)
    except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available"
        if not options.get("cache") or "no locator available" not in str(exc) or numba.config.CACHE_DIR:
            raise
        _fallback_cache_dir()
        return numba.njit(**options)(fn)


def jit(*args, **kwargs):
    """``numba.njit`` with the streamrank compile policy (usable bare or called)."""
    options = {**_POLICY, **kwargs}
    if args and callable(args[0]) and len(args) == 1 and not kwargs:
        return _njit(args[0], options)
    if args:  # explicit signatures: numba.njit(sigs, **options)
        return numba.njit(*args, **options)
    return lambda fn: _njit(fn, options)


def jit_parallel(*args, **kwargs):
    """Like :func:`jit` with ``parallel=True``; keep a serial twin beside it."""
    kwargs.setdefault("parallel", True)
    return jit(*args, **kwargs)
