"""Cluster plumbing shared by every distributed strategy (the bottom floor of :mod:`streamrank.distributed`).

Getting a client or a local cluster, shipping a source to the workers
(:class:`SourceRef`: a store travels as its path), cutting a plan into
tasks, a tree reduction of mergeable partial results, and the copies of an
estimator that travel (parameters only / fitted model without its training
data).
"""
from __future__ import annotations

import contextlib
import copy
import os

from .._defaults import DEFAULT_BLOCK_ROWS
from ..io.blocks import BlockSource

__all__ = ["SourceRef", "get_client", "local_cluster", "tree_reduce", "DEFAULT_BLOCK_ROWS", "DEFAULT_SPLIT_EVERY",
           "DEFAULT_BLOCKS_PER_TASK", "TASKS_PER_WORKER"]

DEFAULT_SPLIT_EVERY = 8
DEFAULT_BLOCKS_PER_TASK = 4
TASKS_PER_WORKER = 4

# worker-process cache of stores opened by path: (path, created) -> store
_OPEN_STORES: dict = {}
# ------------------------------------------------------------------ sources
class SourceRef:
    """What a worker needs to read blocks of ``source`` itself.

    A :class:`~streamrank.GroupStore` travels as ``(path or URL, storage
    options, committed rows, creation stamp)`` and is reopened read-only on
    the worker (cached per worker process; reopened when the store has
    grown): a store on object storage (``s3://…``) is read by every worker
    straight from the bucket with the store's ``storage_options`` (or, without
    them, the workers' own environment credentials), so no row passes through
    the client.  The storage options — credentials included — travel with
    every task through the scheduler; on a shared cluster prefer credentials
    in the workers' environment (open the store without ``storage_options``).
    Its zarr handles are never pickled.  Any other :class:`BlockSource`
    travels as itself (the caller scatters it once).
    """

    def __init__(self, source):
        from ..io.group_store import GroupStore

        self.storage_options = None
        if isinstance(source, GroupStore):
            self.kind = "group_store"
            self.path = source.path
            self.storage_options = getattr(source, "storage_options", None) or None
            self.n_rows = source.n_rows
            self.created = source._attrs.get("created")
            self.source = None
        else:
            self.kind = "object"
            self.path = None
            self.n_rows = source.n_rows
            self.created = None
            self.source = source

    def open(self) -> BlockSource:
        """The source, opened in this process.

        An error here or in a later read says it happened on a worker
        (:func:`_on_worker`): "no store at X" from a worker, where X exists on
        the client, must not read as if the client's path were wrong.
        """
        if self.kind == "object":
            return _WorkerReads(self.source)
        from ..io.group_store import GroupStore

        key = (self.path, self.created, repr(sorted((self.storage_options or {}).items())))
        st = _OPEN_STORES.get(key)
        if st is None or st.n_rows < self.n_rows:
            from ..io._remote import is_url

            hint = ("can the workers reach it (network, credentials in the storage options or their environment)?"
                    if is_url(self.path) else
                    "is the store on storage shared with the workers, at the same path?")
            try:
                opts = {"storage_options": self.storage_options} if self.storage_options else {}
                st = GroupStore.open(self.path, mode="r", **opts)
            except Exception as exc:
                raise _on_worker(exc, hint) from exc
            if st.n_rows < self.n_rows:
                raise _on_worker(RuntimeError(
                    f"{st.n_rows} committed rows in {self.path}, the client planned {self.n_rows}"),
                    "is it the same store as the client's?" if is_url(self.path) else
                    "is the store on storage shared with the workers?")
            _OPEN_STORES[key] = st
        return _WorkerReads(st)

    def __repr__(self):
        return f"SourceRef({self.kind}, path={self.path!r}, n_rows={self.n_rows})"


def _worker_name() -> str:
    """``dask worker tcp://… (host h, pid p)``, or ``process p on host h`` outside a worker."""
    import socket

    where = f"host {socket.gethostname()}, pid {os.getpid()}"
    try:
        from distributed import get_worker

        return f"dask worker {get_worker().address} ({where})"
    except (ImportError, ValueError):
        return f"process ({where})"


def _on_worker(exc, hint=""):
    """``exc`` again (same type when it can be rebuilt from a message), saying it happened on a worker."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    msg = f"{text} on {_worker_name()}" + (f"; {hint}" if hint else "")
    try:
        new = type(exc)(msg)
    except Exception:  # an exception class that cannot be built from one message
        new = RuntimeError(f"{type(exc).__name__}: {msg}")
    return new


class _WorkerReads:
    """A source opened on a worker: its reads raise errors that say so (other attributes pass through)."""

    def __init__(self, source):
        self._source = source

    def __getattr__(self, name):
        return getattr(self._source, name)

    def read_block(self, *plan):
        try:
            return self._source.read_block(*plan)
        except Exception as exc:
            raise _on_worker(exc) from exc

    def _read_rows(self, r0, r1):
        try:
            return self._source._read_rows(r0, r1)
        except Exception as exc:
            raise _on_worker(exc) from exc


def _as_source(source, storage_options=None) -> BlockSource:
    if isinstance(source, BlockSource):
        return source
    if isinstance(source, (str, os.PathLike)):
        from ..io.group_store import GroupStore

        opts = {"storage_options": storage_options} if storage_options else {}
        return GroupStore.open(source, mode="r", **opts)
    if isinstance(source, tuple):
        from ..io.sources import as_source

        return as_source(*source)
    raise TypeError(f"source must be a BlockSource, a store path or an (X, y, qid) tuple; "
                    f"got {type(source).__name__}")


def _ship_source(client, source):
    ref = SourceRef(source)
    if ref.kind == "object":  # in-memory data: scattered once, referenced by every task
        return client.scatter(ref, broadcast=False, hash=False)
    return ref

# ------------------------------------------------------------------ clients
@contextlib.contextmanager
def get_client(client=None, *, n_workers=None):
    """Yield a :class:`distributed.Client`.

    ``client``: an existing Client (used as is), a scheduler address
    (connected, closed on exit) or None (a LocalCluster of ``n_workers``
    single-threaded worker processes, default one per core, shut down on
    exit).
    """
    from distributed import Client

    if client is not None and not isinstance(client, str):
        yield client
        return
    if isinstance(client, str):
        with Client(client) as c:
            yield c
        return
    with local_cluster(n_workers) as cl, Client(cl) as c:
        yield c


@contextlib.contextmanager
def local_cluster(n_workers=None, **kwargs):
    """A :class:`distributed.LocalCluster` of single-threaded worker processes, tuned for streaming.

    dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` in every worker before
    it starts; any explicit value switches off glibc's dynamic mmap threshold,
    so every block-sized buffer is mmapped and unmapped again and its pages
    faulted in on every block: the same streaming fit then costs ~3x the CPU
    of a plain process (``benchmarks/distributed_scaling.py`` measures it).
    The clusters started here leave the variable unset.  For a cluster you
    start yourself, set ``distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_``
    to null in the dask config (and do not export the variable).
    """
    import dask
    from distributed import LocalCluster

    n = int(n_workers) if n_workers else max(1, os.cpu_count() or 1)
    opts = dict(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0")
    opts.update(kwargs)
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        with LocalCluster(**opts) as cl:
            yield cl


def _params_only(estimator):
    """A fresh copy of ``estimator`` holding its parameters only (what workers need)."""
    return type(estimator)(**estimator.get_params())


def for_workers(estimator):
    """What is sent to workers of a fitted estimator: its :meth:`~streamrank.base.BaseRanker.for_workers` copy
    (training data and solver caches stay on the client); a shallow copy of any other model."""
    ship = getattr(estimator, "for_workers", None)
    return ship() if ship is not None else copy.copy(estimator)

# ------------------------------------------------------------ worker tasks
def _blocks_of_task(plans, ref):
    """The blocks of one task, the next one read in a background thread while this one is summed."""
    from ..io.blocks import _prefetched

    source = ref.open()
    if len(plans) == 1:
        return iter([source.read_block(*plans[0])])
    return _prefetched(source.read_block, plans)


def _compact(st):
    """Drop a statistics object's scratch workspace (a block-sized float64 buffer) before it leaves the
    worker: a task's result is then O(n²) bytes to pickle, send and merge, whatever the block size."""
    release = getattr(st, "release_workspace", None)      # (RankStatistics; fold lists have none)
    if release is not None:
        release()
    return st


def _chunks(plan, blocks_per_task, n_workers=1):
    """Consecutive planned blocks in tasks of ``blocks_per_task``, but small enough that every worker
    gets at least ``TASKS_PER_WORKER`` tasks when the plan allows it (the last task of a worker waits
    for no one: the idle tail is at most one short task)."""
    k = max(1, int(blocks_per_task))
    k = max(1, min(k, len(plan) // max(1, TASKS_PER_WORKER * int(n_workers))))
    return [plan[i:i + k] for i in range(0, len(plan), k)]


def _merge_task(parts):
    """Sum of mergeable partial results; inputs are never modified (a rerun must see them intact)."""
    out = copy.deepcopy(parts[0])
    for p in parts[1:]:
        if isinstance(out, list):
            for a, b in zip(out, p):
                a.merge(b)
        else:
            out.merge(p)
    return out


def tree_reduce(client, futures, merge=_merge_task, split_every=DEFAULT_SPLIT_EVERY):
    """Reduce futures with ``merge(list)`` in a tree of fan-in ``split_every``, on the workers."""
    split_every = int(split_every)
    if split_every < 2:
        raise ValueError(f"split_every must be >= 2, got {split_every}")
    futures = list(futures)
    if not futures:
        raise ValueError("nothing to reduce: the plan has no blocks")
    level = 0
    while len(futures) > 1:
        futures = [client.submit(merge, futures[i:i + split_every], pure=False,
                                 key=f"streamrank-merge-{level}-{i}-{os.urandom(4).hex()}")
                   for i in range(0, len(futures), split_every)]
        level += 1
    return futures[0]


def reset_fitted(estimator, source):
    """Forget ``estimator``'s previous fit before a distributed fit sets the new one; True when y is 1-D.

    The attributes a local ``fit`` would overwrite (coefficients, statistics,
    fold statistics, iteration count, cached eigendecomposition) are dropped
    (:meth:`~streamrank.base.BaseRanker.forget_fit`, part of the statistics
    learner protocol) so that no state of an earlier fit survives the new one.
    """
    estimator.forget_fit()
    return source.n_outputs == 1 and getattr(source, "y_ndim", 1) == 1
