"""The same learners on a dask.distributed cluster (DESIGN §1, §4).

Distribution is a different way to *reduce the same per-block results*, never
a second implementation of the math:

* **statistics learners** (primal :class:`~streamrank.RankRLS`, and any
  learner exposing ``_statistics_of_block(block)`` + ``_fit_statistics(stats)``):
  the client plans the blocks (``source.plan(max_rows, split_groups=True)``,
  the same plan a local ``fit`` streams), each worker reads *its own* blocks
  from the store, adds them into one statistics object (as the local ``fit``)
  and returns it without its scratch workspace (O(n²) bytes, whatever the
  rows or the block size), a tree reduction (``split_every`` inputs per node) sums them on
  the workers, and the client solves.  The sums are the local fit's sums in
  another order, so the model equals ``estimator.fit(source)`` to
  floating-point reduction order;
* **conjugate-gradient RankRLS**: each product ``(XᵀLX + λI) v`` is a map over
  blocks plus a tree sum; ``v`` is scattered once per iteration; with
  ``ties="exclude"`` on a group cut across blocks (``qid=None``) the group's
  tie classes are reduced once in a setup step (see
  :mod:`streamrank._distributed_cg`);
* **SGD rankers**: data-parallel rounds (see :func:`fit_sgd_rounds`);
* **prediction / evaluation**: blocks are scored on the workers; predictions
  come back in row order, metrics as one merged
  :class:`~streamrank.metrics.RankingEvaluator`.

The data never travels through the client: a :class:`~streamrank.GroupStore`
is sent to workers as its path (:class:`SourceRef`) and opened there (any
path the workers can reach — local disk in tests, shared storage in
production).  In-memory sources (numpy, scipy.sparse) are scattered once.
A worker that dies mid-run loses only its tasks; the scheduler recomputes
them from the same plan, so the result does not change (tasks never modify
their inputs).

``client=None`` starts a :class:`distributed.LocalCluster` (one process per
core, one thread each) for the call; ``client`` may also be a scheduler
address ``"tcp://host:port"``.
"""
from __future__ import annotations

import contextlib
import copy
import os

import numpy as np

from ._dask_retry import with_retries
from .io.blocks import BlockSource

__all__ = ["fit", "predict", "evaluate", "statistics", "fit_sgd_rounds", "SourceRef", "get_client", "local_cluster",
           "tree_reduce"]

DEFAULT_BLOCK_ROWS = 65_536
DEFAULT_SPLIT_EVERY = 8
DEFAULT_BLOCKS_PER_TASK = 4
TASKS_PER_WORKER = 4

# worker-process cache of stores opened by path: (path, created) -> store
_OPEN_STORES: dict = {}


# ------------------------------------------------------------------ sources
class SourceRef:
    """What a worker needs to read blocks of ``source`` itself.

    A :class:`~streamrank.GroupStore` travels as ``(path, committed rows,
    creation stamp)`` and is reopened read-only on the worker (cached per
    worker process; reopened when the store has grown).  Its zarr handles are
    never pickled.  Any other :class:`BlockSource` travels as itself (the
    caller scatters it once).
    """

    def __init__(self, source):
        from .io.group_store import GroupStore

        if isinstance(source, GroupStore):
            self.kind = "group_store"
            self.path = source.path
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
        """The source, opened in this process."""
        if self.kind == "object":
            return self.source
        from .io.group_store import GroupStore

        key = (self.path, self.created)
        st = _OPEN_STORES.get(key)
        if st is None or st.n_rows < self.n_rows:
            st = GroupStore.open(self.path, mode="r")
            if st.n_rows < self.n_rows:
                raise RuntimeError(f"worker sees {st.n_rows} committed rows in {self.path}, the client "
                                   f"planned {self.n_rows}: is the store on storage shared with the workers?")
            _OPEN_STORES[key] = st
        return st

    def __repr__(self):
        return f"SourceRef({self.kind}, path={self.path!r}, n_rows={self.n_rows})"


def _as_source(source) -> BlockSource:
    if isinstance(source, BlockSource):
        return source
    if isinstance(source, (str, os.PathLike)):
        from .io.group_store import GroupStore

        return GroupStore.open(source, mode="r")
    if isinstance(source, tuple):
        from .io.sources import as_source

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


def _without_source(estimator):
    """A shallow copy of a fitted estimator without its training source (never sent to workers)."""
    est = copy.copy(estimator)
    # training data and solver caches (KernelRankRLS keeps its m × m decomposition) stay on the client
    for attr in ("_train_source", "_eigen", "_decomp", "_lpo_cache", "_sparse", "_Y"):
        est.__dict__.pop(attr, None)
    return est


# ------------------------------------------------------------ worker tasks
def _blocks_of_task(plans, ref):
    """The blocks of one task, the next one read in a background thread while this one is summed."""
    from .io.blocks import _prefetched

    source = ref.open()
    if len(plans) == 1:
        return iter([source.read_block(*plans[0])])
    return _prefetched(source.read_block, plans)


def _compact(st):
    """Drop a statistics object's scratch workspace (a block-sized float64 buffer) before it leaves the
    worker: a task's result is then O(n²) bytes to pickle, send and merge, whatever the block size."""
    release = getattr(st, "_release_workspace", None)
    if release is not None:
        release()
    return st


def _stats_task(plans, ref, est):
    """The summed statistics of one task's blocks.

    Learners with ``_new_statistics`` (RankRLS) add every block into one
    statistics object, as the local ``fit`` does (one workspace reused, no
    per-block merge); others merge their per-block ``_statistics_of_block``.
    """
    out = None
    blocks = _blocks_of_task(plans, ref)
    if hasattr(est, "_new_statistics"):
        for block in blocks:
            if out is None:
                out = est._new_statistics(block.X.shape[1], 1 if np.ndim(block.y) == 1 else block.y.shape[1])
            gid = block.group_start + np.arange(block.n_groups, dtype=np.int64)
            out.add_block(block.X, block.y, block.group_ptr, group_size=block.group_size,
                          group_offset=block.group_offset, group_id=gid)
        return _compact(out)
    for block in blocks:
        st = est._statistics_of_block(block)
        out = st if out is None else out.merge(st)
    return _compact(out)


def _fold_stats_task(plans, ref, est, n_folds):
    from .rankrls.selection import _split_by_fold, fold_of

    folds = None
    for block in _blocks_of_task(plans, ref):
        if folds is None:
            folds = [est._new_statistics(block.X.shape[1], 1 if np.ndim(block.y) == 1 else block.y.shape[1])
                     for _ in range(n_folds)]
        fog = fold_of(block.qid, n_folds)
        for f, X, Y, gp, size, off, gid, _ in _split_by_fold(block, fog):
            folds[f].add_block(X, Y, gp, group_size=size, group_offset=off, group_id=gid)
    return [_compact(st) for st in folds]


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


def _evaluate_task(plan, ref, est, k, metrics, output):
    from .metrics import RankingEvaluator, _block_y, _score

    block = ref.open().read_block(*plan)
    s = _score(est, block.X)
    if s.ndim == 2 and output is not None:
        s = s[:, output]
    ev = RankingEvaluator(k, metrics)
    ev.update(_block_y(block, output), s, block.group_ptr, qid=block.qid, group_size=block.group_size,
              group_offset=block.group_offset)
    return ev


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


# ----------------------------------------------------------------- public
def statistics(estimator, source, client=None, *, max_rows=DEFAULT_BLOCK_ROWS, split_every=DEFAULT_SPLIT_EVERY,
               folds=None, blocks_per_task=DEFAULT_BLOCKS_PER_TASK):
    """Summed per-block statistics of ``source`` computed on the workers.

    Returns the learner's mergeable statistics (``estimator._statistics_of_block``
    summed over the plan ``source.plan(max_rows, split_groups=True)``), or with
    ``folds=k`` the list of k per-fold statistics (folds by query id, as
    :func:`streamrank.rankrls.selection.accumulate_folds`).  Only the reduced
    statistics reach the client.  A task sums ``blocks_per_task`` consecutive
    planned blocks (fewer when the plan would otherwise give a worker fewer
    than ``TASKS_PER_WORKER`` tasks), reading the next block while it sums the current one (as
    the local prefetching pass does); a rerun after a worker loss redoes
    only those blocks.
    """
    source = _as_source(source)
    if source.n_rows == 0:
        raise ValueError("empty input: the source has no rows")
    proto = _params_only(estimator)
    with get_client(client) as c:
        ref = _ship_source(c, source)
        plan = source.plan(max_rows, split_groups=True)
        tasks = _chunks(plan, blocks_per_task, len(c.scheduler_info()["workers"]))
        if folds is None:
            parts = c.map(_stats_task, tasks, ref=ref, est=proto, pure=False)
        else:
            parts = c.map(_fold_stats_task, tasks, ref=ref, est=proto, n_folds=int(folds), pure=False)
        total = tree_reduce(c, parts, split_every=split_every).result()
    if folds is None:
        total.check_complete()
    else:
        for st in total:
            st.check_complete()
    return total


def _is_statistics_learner(estimator, source):
    if not (hasattr(estimator, "_statistics_of_block") and hasattr(estimator, "_fit_statistics")):
        return False
    resolve = getattr(estimator, "_resolve_solver", None)
    return resolve is None or resolve(source) == "primal"


def fit(estimator, source, client=None, *, max_rows=DEFAULT_BLOCK_ROWS, split_every=DEFAULT_SPLIT_EVERY,
        **kwargs):
    """Fit ``estimator`` on ``source`` with a dask cluster; same result as ``estimator.fit(source)``.

    Parameters
    ----------
    estimator : a streamrank learner (fitted in place and returned)
    source : GroupStore, any BlockSource, a store path, or an (X, y, qid) tuple
    client : distributed.Client, scheduler address, or None (a LocalCluster for the call)
    max_rows : block budget (the same default as the local learners)
    split_every : fan-in of the tree reduction

    Primal RankRLS: the statistics are accumulated on the workers and
    reduced there; the client only solves (O(n³)).  CG RankRLS: every
    product is a distributed pass.  Sparse KernelRankRLS: distributed basis
    reservoir, then statistics.  SGD rankers on a tuple source: data-parallel
    rounds (``rounds=``, ``steps_per_round=``, ``n_shards=`` keywords; with the
    bilinear learner's ``refit`` flag, refit rounds follow: ``refit_rounds=``,
    ``refit_steps_per_round=``; see :func:`fit_sgd_rounds`) — close to, not
    equal to, the single-machine run (one shard: equal).
    """
    if (hasattr(source, "n_tuples") and hasattr(estimator, "partial_fit")) or hasattr(estimator, "partial_fit_pairs"):
        from ._distributed_sgd import fit_sgd_rounds

        if hasattr(estimator, "partial_fit_pairs"):
            kwargs["max_rows"] = max_rows
        return fit_sgd_rounds(estimator, source, client, **kwargs)
    source = _as_source(source)
    if source.n_rows == 0:
        raise ValueError("empty input: the source has no rows")
    if hasattr(estimator, "_check_params"):
        estimator._check_params()
    if _is_statistics_learner(estimator, source):
        stats = statistics(estimator, source, client, max_rows=max_rows, split_every=split_every,
                           **{k: kwargs[k] for k in ("blocks_per_task",) if k in kwargs})
        for attr in ("coef_", "stats_", "fold_stats_", "n_iter_", "_eigen"):
            estimator.__dict__.pop(attr, None)
        y_1d = source.n_outputs == 1 and getattr(source, "y_ndim", 1) == 1
        estimator._fit_statistics(stats, y_1d=y_1d)
        estimator._train_source = source
        return estimator
    if getattr(estimator, "n_basis", None) is not None and hasattr(estimator, "_spec"):
        return _fit_kernel_sparse(estimator, source, client, max_rows=max_rows, split_every=split_every)
    if hasattr(estimator, "_resolve_solver") and estimator._resolve_solver(source) == "cg":
        from ._distributed_cg import fit_cg

        return fit_cg(estimator, source, client, max_rows=max_rows, split_every=split_every, **kwargs)
    raise NotImplementedError(
        f"sr.distributed.fit does not know how to distribute {type(estimator).__name__}: it needs "
        "_statistics_of_block/_fit_statistics (statistics learners) or the RankRLS cg solver; "
        "SGD rankers: use streamrank.distributed.fit_sgd_rounds"
    )


def fit_sgd_rounds(estimator, tuple_source, client=None, **kwargs):
    """Data-parallel SGD rounds with sparse-aware model averaging (see :mod:`streamrank._distributed_sgd`)."""
    from ._distributed_sgd import fit_sgd_rounds as _rounds

    return _rounds(estimator, tuple_source, client, **kwargs)


# ------------------------------------------------- sparse kernel RankRLS
class _Reservoir:
    """Mergeable Algorithm-R reservoir: slot -> (row index t, row); the largest t wins a slot."""

    def __init__(self, slots):
        self.slots = slots

    def merge(self, other):
        for k, (t, row) in other.slots.items():
            cur = self.slots.get(k)
            if cur is None or t > cur[0]:
                self.slots[k] = (t, row)
        return self


def _reservoir_task(plan, ref, r, state):
    """Slots won by this block's rows: the draw of global row t is the t-th uniform of the stream."""
    import scipy.sparse as sp

    block = ref.open().read_block(*plan)
    n = block.n_rows
    t = block.start + np.arange(n)
    bg = getattr(np.random, state["bit_generator"])()
    bg.state = state
    bg.advance(block.start)          # one 64-bit draw per uniform: jump to this block's first row
    u = np.random.Generator(bg).random(n)
    j = np.where(t < r, t, np.floor(u * (t + 1)).astype(np.int64))
    slots = {}
    for row in np.flatnonzero(j < r):   # later rows overwrite earlier ones, as in the local pass
        x = block.X[row] if sp.issparse(block.X) else np.array(block.X[row], dtype=np.float64)
        slots[int(j[row])] = (int(t[row]), x)
    return _Reservoir(slots)


def _kernel_stats_task(plan, ref, est, basis, n_outputs):
    from .rankrls._statistics import block_statistics

    block = ref.open().read_block(*plan)
    spec = est._spec()
    return _compact(block_statistics(block, group_weight=est.group_weight, ties=est.ties,
                                     transform=lambda X: spec(X, basis), n_outputs=n_outputs,
                                     per_output=True))


def _fit_kernel_sparse(est, source, client, *, max_rows, split_every):
    """Sparse (basis) KernelRankRLS: distributed reservoir of the basis rows, then distributed statistics.

    The reservoir reproduces the local one exactly (Algorithm R with the
    t-th uniform of ``default_rng(random_state)`` for row t; each worker
    jumps its generator to its block's first row with ``advance``), so the
    basis, and hence the model, equal ``est.fit(source)``'s.
    """
    import scipy.sparse as sp

    from ._validation import check_X

    est._check_params()
    m = source.n_rows
    proto = _params_only(est)
    with get_client(client) as c:
        ref = _ship_source(c, source)
        if isinstance(est.basis, str):
            r = int(est.n_basis)
            if r > m:
                raise ValueError(f"n_basis={r} exceeds the number of training rows ({m})")
            rng = np.random.default_rng(est.random_state)
            state = rng.bit_generator.state
            if not hasattr(rng.bit_generator, "advance"):
                raise NotImplementedError(f"random_state's bit generator {state['bit_generator']} cannot jump "
                                          "ahead; pass an int seed")
            parts = c.map(_reservoir_task, source.plan(max_rows, split_groups=True), ref=ref, r=r, state=state,
                          pure=False)
            res = tree_reduce(c, parts, split_every=split_every).result()
            rows = [res.slots[k][1] for k in range(r)]
            Xb = (sp.vstack(rows, format="csr").astype(np.float64) if sp.issparse(rows[0])
                  else np.vstack(rows).astype(np.float64))
        else:
            Xb = check_X(est.basis, "basis", n_features=source.n_features, min_rows=1)
            r = Xb.shape[0]
        refs = [ref]

        def kernel_stats():
            basis = c.scatter(Xb, hash=False)       # not broadcast (streamrank._dask_retry)
            parts = c.map(_kernel_stats_task, source.plan(max_rows, split_groups=True), ref=refs[0], est=proto,
                          basis=basis, n_outputs=source.n_outputs, pure=False)
            return tree_reduce(c, parts, split_every=split_every).result()

        stats, _ = with_retries(c, kernel_stats, on_loss=lambda: refs.__setitem__(0, _ship_source(c, source)))
    return est._fit_statistics(stats, Xb, source, max_rows)


def _predict_rows_task(rows, ref, est, out):
    """Score rows r0:r1 (a whole number of chunks of ``out``) and write them there, or return them."""
    r0, r1 = rows
    X, _ = ref.open()._read_rows(r0, r1)
    s = np.asarray(est.predict(X), dtype=np.float64)
    if out is None:
        return s
    import zarr

    zarr.open_array(out, mode="r+")[r0:r1] = s
    return r1 - r0


def predict(estimator, source, client=None, *, max_rows=DEFAULT_BLOCK_ROWS, out=None):
    """Scores of every row of ``source`` in row order, computed on the workers.

    The fitted model is scattered once; each task reads its rows and scores
    them.  A run that loses a worker is done again (:mod:`streamrank._dask_retry`).  Equals ``np.concatenate([estimator.predict(b.X)
    for b in source.blocks()])``.

    ``out``: a path; the scores are written there by the workers as a zarr
    array (rows,) or (rows, outputs) float64, chunked by ``max_rows`` rows —
    each task writes whole chunks, so no two tasks touch the same chunk —
    nothing travels back to the client, and the path is returned.  The array
    is written beside ``out`` and renamed into place when complete (e.g.
    ``out=store.path + "/scores"`` keeps it inside the store directory).
    """
    import os as _os
    import shutil
    import uuid

    source = _as_source(source)
    est = _without_source(estimator)
    n = source.n_rows
    step = int(max_rows)
    ranges = [(a, min(a + step, n)) for a in range(0, n, step)]
    with get_client(client) as c:
        # the source (if in memory) and the model, scattered once (not broadcast: streamrank._dask_retry)
        # and again after a lost worker
        refs = {}

        def ship():
            refs["source"] = _ship_source(c, source)
            refs["model"] = c.scatter(est, hash=False)

        ship()
        if out is None:
            if not ranges:
                return np.zeros(0)

            def scores():
                parts = c.map(_predict_rows_task, ranges, ref=refs["source"], est=refs["model"], out=None,
                              pure=False)
                return np.concatenate(c.gather(parts), axis=0)

            return with_retries(c, scores, on_loss=ship)[0]
        import zarr

        def first_row():
            return c.submit(_predict_rows_task, (0, min(1, n)), ref=refs["source"], est=refs["model"],
                            out=None, pure=False).result()

        first = with_retries(c, first_row, on_loss=ship)[0]
        shape = (n,) + tuple(np.shape(first)[1:])
        out = str(out)
        tmp = f"{out}.{uuid.uuid4().hex}.partial"
        zarr.create_array(store=tmp, shape=shape, chunks=(max(1, step),) + shape[1:], dtype="float64",
                          fill_value=np.nan)
        try:
            def write_all():                        # a redone run rewrites the same chunks with the same values
                parts = c.map(_predict_rows_task, ranges, ref=refs["source"], est=refs["model"], out=tmp,
                              pure=False)
                return sum(c.gather(parts))

            written = with_retries(c, write_all, on_loss=ship)[0]
            if written != n:  # pragma: no cover - defensive
                raise RuntimeError(f"wrote {written} of {n} scores")
            if _os.path.exists(out):
                shutil.rmtree(out)
            _os.replace(tmp, out)
        finally:
            if _os.path.exists(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def evaluate(estimator, source, client=None, *, k=10, metrics=None, max_rows=DEFAULT_BLOCK_ROWS,
             split_every=DEFAULT_SPLIT_EVERY, output=None) -> dict:
    """Ranking metrics of ``estimator`` on ``source``; blocks are scored and evaluated on the workers.

    Same result as :func:`streamrank.metrics.evaluate` (``{name: MetricResult}``):
    per-block :class:`~streamrank.metrics.RankingEvaluator` objects are merged
    in a tree; pieces of split groups are joined by the merge.
    """
    from .metrics import METRICS

    source = _as_source(source)
    metrics = tuple(METRICS if metrics is None else metrics)
    est = _without_source(estimator)
    with get_client(client) as c:
        refs = [_ship_source(c, source)]
        plan = source.plan(max_rows, split_groups=True)

        def merged():
            model = c.scatter(est, hash=False)      # not broadcast (streamrank._dask_retry)
            parts = c.map(_evaluate_task, plan, ref=refs[0], est=model, k=k, metrics=metrics, output=output,
                          pure=False)
            return tree_reduce(c, parts, split_every=split_every).result()

        ev, _ = with_retries(c, merged, on_loss=lambda: refs.__setitem__(0, _ship_source(c, source)))
    return ev.result()
