"""Statistics learners on a cluster: per-block statistics summed on the workers, solved on the client.

The client plans the blocks (``source.plan(max_rows, split_groups=True)``,
the same plan a local ``fit`` streams), each worker reads *its own* blocks
from the store, adds them into one statistics object (as the local ``fit``)
and returns it without its scratch workspace (O(n²) bytes, whatever the rows
or the block size), a tree reduction sums them on the workers, and the
client solves.  The sums are the local fit's sums in another order, so the
model equals ``estimator.fit(source)`` to floating-point reduction order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._defaults import DEFAULT_BLOCK_ROWS
from .._phases import phase
from ._cluster import (DEFAULT_BLOCKS_PER_TASK, DEFAULT_SPLIT_EVERY, _as_source, _blocks_of_task, _chunks, _compact,
                       _params_only, _ship_source, get_client, reset_fitted, tree_reduce)

if TYPE_CHECKING:
    from dask.distributed import Client

    from .._typing import PathLike
    from ..base import StatisticsLearner
    from ..io.blocks import BlockSource

__all__ = ["statistics", "fit_from_statistics", "reduce_counted"]


def reduce_counted(client, parts, name: str, *, split_every: int):
    """``tree_reduce(parts).result()``, reporting the phase ``name`` as its tasks finish (one count a
    task: a shard's blocks), then the reduction; waits in Python between tasks, so Ctrl-C is seen at once."""
    from distributed import as_completed

    parts = list(parts)
    total = tree_reduce(client, parts, split_every=split_every)
    with phase(name, total=len(parts), unit="tasks") as progress:
        for _ in as_completed(parts):
            progress.update(1)
    with phase(f"tree reduction of {len(parts)} parts (fan-in {split_every})"):
        return total.result()


def _stats_task(plans, ref, est):
    """The summed statistics of one task's blocks (:class:`~streamrank.base.StatisticsLearner`).

    Every block is added into one statistics object, as the local ``fit``
    does (one workspace reused, no per-block merge).
    """
    out = None
    for block in _blocks_of_task(plans, ref):
        if out is None:
            out = est.new_statistics(block.X.shape[1], 1 if np.ndim(block.y) == 1 else block.y.shape[1])
        est.accumulate(out, block)
    return _compact(out)


def _fold_stats_task(plans, ref, est, n_folds):
    from ..rankrls.selection import _split_by_fold, fold_of, rows_weight

    folds = None
    for block in _blocks_of_task(plans, ref):
        if folds is None:
            folds = [est.new_statistics(block.X.shape[1], 1 if np.ndim(block.y) == 1 else block.y.shape[1])
                     for _ in range(n_folds)]
        fog = fold_of(block.qid, n_folds)
        for f, X, Y, gp, size, off, gid, rows in _split_by_fold(block, fog):
            folds[f].add_block(X, Y, gp, group_size=size, group_offset=off, group_id=gid,
                               weight=rows_weight(block, rows))
    return [_compact(st) for st in folds]

def statistics(estimator: StatisticsLearner, source: BlockSource | PathLike, client: Client | str | None = None, *,
               max_rows: int = DEFAULT_BLOCK_ROWS, split_every: int = DEFAULT_SPLIT_EVERY, folds: int | None = None,
               blocks_per_task: int = DEFAULT_BLOCKS_PER_TASK) -> Any:
    """Summed per-block statistics of ``source`` computed on the workers.

    Returns the learner's mergeable statistics (``estimator.statistics_of_block``
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
        n_workers = len(c.scheduler_info()["workers"])
        if folds is None:
            parts = c.map(_stats_task, tasks, ref=ref, est=proto, pure=False)
            what = "statistics"
        else:
            parts = c.map(_fold_stats_task, tasks, ref=ref, est=proto, n_folds=int(folds), pure=False)
            what = f"fold statistics ({int(folds)} folds)"
        total = reduce_counted(c, parts, f"{what} of {len(plan):,} blocks on {n_workers} worker(s)",
                               split_every=split_every)
    if folds is None:
        total.check_complete()
    else:
        for st in total:
            st.check_complete()
    return total


def fit_from_statistics(estimator, source, client=None, *, max_rows=DEFAULT_BLOCK_ROWS, split_every=DEFAULT_SPLIT_EVERY,
                   blocks_per_task=DEFAULT_BLOCKS_PER_TASK):
    """Fit a statistics learner from the statistics summed on the workers (see module doc)."""
    stats = statistics(estimator, source, client, max_rows=max_rows, split_every=split_every,
                       blocks_per_task=blocks_per_task)
    y_1d = reset_fitted(estimator, source)
    with phase(f"solve ({stats.n_features:,} features)" if hasattr(stats, "n_features") else "solve"):
        return estimator.fit_statistics(stats, y_1d=y_1d, source=source)
