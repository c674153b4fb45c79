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
"""
from __future__ import annotations

import numba

__all__ = ["jit", "jit_parallel", "prange"]

_POLICY = dict(cache=True, nogil=True, fastmath=False)

prange = numba.prange


def jit(*args, **kwargs):
    """``numba.njit`` with the streamrank compile policy (usable bare or called)."""
    options = {**_POLICY, **kwargs}
    if args and callable(args[0]) and len(args) == 1 and not kwargs:
        return numba.njit(**options)(args[0])
    return numba.njit(*args, **options)


def jit_parallel(*args, **kwargs):
    """Like :func:`jit` with ``parallel=True``; keep a serial twin beside it."""
    kwargs.setdefault("parallel", True)
    return jit(*args, **kwargs)
