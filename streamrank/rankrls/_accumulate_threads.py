"""Pieces and two threads for the dense accumulation of one computed block (kernel columns), and the BLAS limit.

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

import numpy as np

from ._statistics_kernels import fill_scaled

__all__ = ["accumulate_threads", "helper_thread", "two_threads_here", "one_blas_thread", "group_chunks",
           "fill_pieces", "FILL_CHUNK_BYTES"]

#: bytes of one piece of Φ computed by a caller's ``fill``: fits the L2 cache, so the kernel map, the
#: centring and the scaling all run on data the product has just written
FILL_CHUNK_BYTES = 1 << 20

_THREADS = [None]        # None: 2 if the machine has 2 cores or more, else 1
_HELPER = []
_BLAS = []


def accumulate_threads(n: int | None = None) -> int:
    """Threads (1 or 2) that fill and accumulate one block computed by ``fill`` (kernel columns).

    ``n`` sets it; None reads it.  Default: 2 when the process may run on two
    cores or more (its CPU affinity); the environment variable ``STREAMRANK_ACCUMULATE_THREADS=1``
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
        _THREADS[0] = max(1, min(2, int(env))) if env else min(2, _usable_cpus())
    return _THREADS[0]


def _usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's quota of cores)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # pragma: no cover - not Linux
        return os.cpu_count() or 1


def helper_thread():
    """The one helper thread of :func:`fill_pieces` (created on first use)."""
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


def group_chunks(gp, target, g0=0, g_end=None):
    """Group-aligned ``(g0, g1)`` ranges of about ``target`` rows (at least one group each) in [g0, g_end)."""
    g_end = gp.shape[0] - 1 if g_end is None else g_end
    while g0 < g_end:
        g1 = int(np.searchsorted(gp, gp[g0] + target, side="right")) - 1
        g1 = min(max(g1, g0 + 1), g_end)
        yield g0, g1
        g0 = g1


def fill_pieces(stats, A, fill, Y, sx, sy, gp, center, T, acc):
    """acc += AᵀA with Φ = A[:, :n] computed by ``fill`` piece by piece (``RankStatistics.add_block(fill=)``).

    Each piece (about ``FILL_CHUNK_BYTES``, whole groups) is computed,
    then centred and scaled in place while in cache (``fill_scaled`` with
    Φ = A[:, :n]).  With two threads
    (:func:`accumulate_threads`), and BLAS at one
    thread per call meanwhile, both threads take pieces from one queue
    (so they finish filling together: the elementwise work, e.g. the
    kernel's exp, runs on both cores instead of one while BLAS's second
    thread spins), then each runs the SYRK of one group-aligned half into
    its own accumulator (``stats._acc_helper``, added in by ``RankStatistics._flush``);
    OpenBLAS would serialise the two calls if its pool were larger than one.
    Main thread only (:func:`two_threads_here`).
    """
    n = stats.n_features
    target = max(1, FILL_CHUNK_BYTES // (8 * (n + stats.n_outputs)))
    rows = int(gp[-1])
    chunks = list(group_chunks(gp, target))

    def fill_chunks(queue):
        for k in queue:                  # shared iterator: each piece is taken by one thread
            c0, c1 = chunks[k]
            a, b = int(gp[c0]), int(gp[c1])
            fill(a, b, A[a:b, :n])
            fill_scaled(A[a:b, :n], Y[a:b], sx[a:b], sy[a:b], gp[c0:c1 + 1] - a, center[c0:c1],
                        A[a:b], T[c0:c1])                               # in place

    def syrk_into(a, b, out):
        if b > a:
            H = A[a:b]
            out += (H.T @ H).T      # exactly symmetric; .T matches out's Fortran order (a contiguous add)

    if len(chunks) >= 2 and two_threads_here():
        h = int(gp[chunks[len(chunks) // 2][0]])
        queue = iter(range(len(chunks)))
        if stats._acc_helper is None:
            stats._acc_helper = np.zeros_like(acc)
        with one_blas_thread():
            # pieces from one queue (the threads finish together), then one SYRK per half, each
            # into its own accumulator (the helper's is added in at _flush)
            job = helper_thread().submit(fill_chunks, queue)
            try:
                fill_chunks(queue)
            finally:
                job.result()
            job = helper_thread().submit(syrk_into, h, rows, stats._acc_helper)
            try:
                syrk_into(0, h, acc)
            finally:
                job.result()
        return
    fill_chunks(iter(range(len(chunks))))
    syrk_into(0, rows, acc)
