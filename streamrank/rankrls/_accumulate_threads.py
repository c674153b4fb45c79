"""Two threads for the dense accumulation of one computed block (kernel columns), and the BLAS limit it needs.

:meth:`RankStatistics.add_block` with ``fill=`` (Φ computed piece by piece,
e.g. k(X_B, X_R) of sparse RankRLS) cuts a large block into two
group-aligned halves: each thread computes, centres and scales its half and
runs its own SYRK.  BLAS gets one thread per call meanwhile, because OpenBLAS
serialises calls from two threads while its own pool is larger than one, and
because its second thread would otherwise spin while numpy's ``exp`` runs on
one core.  Measured (``benchmarks/rankrls_kernel.py``, 1M rows, r = 1000, idle
2-core machine): 20.1 s -> 16.0 s, CPU 39.9 s -> 29.1 s.
"""
from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["accumulate_threads", "helper_thread", "two_threads_here", "one_blas_thread"]

_THREADS = [None]        # None: 2 if the machine has 2 cores or more, else 1
_HELPER = []
_BLAS = []


def accumulate_threads(n: int | None = None) -> int:
    """Threads (1 or 2) that fill and accumulate one block computed by ``fill`` (kernel columns).

    ``n`` sets it; None reads it.  Default: 2 when the machine has two cores
    or more; the environment variable ``STREAMRANK_ACCUMULATE_THREADS=1``
    turns the helper thread off (e.g. when every core already runs a dask
    worker thread).
    """
    if n is not None:
        n = int(n)
        if n < 1:
            raise ValueError(f"threads must be >= 1, got {n}")
        _THREADS[0] = min(n, 2)
    if _THREADS[0] is None:
        env = os.environ.get("STREAMRANK_ACCUMULATE_THREADS")
        _THREADS[0] = max(1, min(2, int(env))) if env else min(2, os.cpu_count() or 1)
    return _THREADS[0]


def helper_thread():
    """The one helper thread of ``RankStatistics._fill_in_halves`` (created on first use)."""
    if not _HELPER:
        from concurrent.futures import ThreadPoolExecutor

        _HELPER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamrank-accumulate"))
    return _HELPER[0]


def two_threads_here() -> bool:
    """Cut a filled block in two halves here?  Only on the main thread, with two threads allowed.

    The halves need BLAS limited to one thread per call, and OpenBLAS (0.3.31,
    measured) applies a limit set from another thread to that thread only —
    its restore too — so a dask worker thread keeps one thread per block
    (dask runs several blocks at once anyway) and never touches the limit.
    """
    return accumulate_threads() > 1 and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def one_blas_thread():
    """Limit BLAS to one thread per call (threadpoolctl) on the main thread; the original limits come back."""
    if not _BLAS:
        from threadpoolctl import ThreadpoolController

        _BLAS.append(ThreadpoolController())
    limiter = _BLAS[0].limit(limits=1, user_api="blas")
    try:
        yield
    finally:
        limiter.restore_original_limits()
