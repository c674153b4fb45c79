"""The same learners on a dask.distributed cluster.

Distribution is a different way to *reduce the same per-block results*, never
a second implementation of the math:

* **statistics learners** (:class:`streamrank.base.StatisticsLearner`:
  primal :class:`~streamrank.RankRLS`, and any learner offering
  ``new_statistics``, ``accumulate``, ``fit_statistics``):
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
  :mod:`streamrank.distributed._cg`);
* **SGD rankers**: data-parallel rounds (see :func:`fit_sgd_rounds`);
* **prediction / evaluation**: blocks are scored on the workers; predictions
  come back in row order, metrics as one merged
  :class:`~streamrank.metrics.RankingEvaluator`.

The data never travels through the client: a :class:`~streamrank.GroupStore`
is sent to workers as its path or URL and storage options
(:class:`SourceRef`) and opened there — any path the workers can reach
(local disk in tests, shared storage), or a URL of object storage
(``s3://…``) that each worker reads from the bucket itself (clusters without
a shared filesystem).  In-memory sources (numpy, scipy.sparse) are scattered once.
A worker that dies mid-run loses only its tasks; the scheduler recomputes
them from the same plan, so the result does not change (tasks never modify
their inputs).

``client=None`` starts a :class:`distributed.LocalCluster` (one process per
core, one thread each) for the call; ``client`` may also be a scheduler
address ``"tcp://host:port"``.

Layout: this module is the public face; one private module per strategy
(``_statistics``, ``_cg``, ``_kernel``, ``_sgd``, ``_predict``) sits on the
cluster plumbing (``_cluster``, ``_retry``), which imports none of them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._defaults import DEFAULT_BLOCK_ROWS
from ..base import SGDLearner, StatisticsLearner
from ._cg import fit_cg
from ._cluster import DEFAULT_SPLIT_EVERY, SourceRef, _as_source, get_client, local_cluster, tree_reduce
from ._kernel import fit_kernel_sparse
from ._predict import evaluate, predict
from ._sgd import fit_sgd_rounds as _fit_sgd_rounds
from ._sgd import refit_round_task, round_task  # noqa: F401  (package-public: one shard's round, run locally
#                                                   by `streamrank distributed --compare-single`)
from ._statistics import fit_from_statistics, statistics

if TYPE_CHECKING:
    from dask.distributed import Client

    from .._typing import PathLike
    from ..base import BaseRanker
    from ..io.blocks import BlockSource
    from ..io.tuples import TupleSource

__all__ = ["fit", "predict", "evaluate", "statistics", "fit_sgd_rounds", "SourceRef", "get_client", "local_cluster",
           "tree_reduce", "DEFAULT_BLOCK_ROWS", "DEFAULT_SPLIT_EVERY"]


def _check_options(estimator, strategy, kwargs, allowed):
    """Unknown keyword arguments raise (a misspelt option must not be silently ignored)."""
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"sr.distributed.fit got unexpected keyword argument(s) {unknown} for "
                        f"{type(estimator).__name__} ({strategy}); it accepts max_rows, split_every"
                        + "".join(f", {a}" for a in sorted(allowed)))


def _is_statistics_learner(estimator, source):
    if not isinstance(estimator, StatisticsLearner):
        return False
    solver_for = getattr(estimator, "solver_for", None)
    return solver_for is None or solver_for(source) == "primal"


def fit(estimator: BaseRanker, source: BlockSource | TupleSource | PathLike, client: Client | str | None = None, *,
        max_rows: int = DEFAULT_BLOCK_ROWS, split_every: int = DEFAULT_SPLIT_EVERY,
        storage_options: dict | None = None, **kwargs: Any) -> BaseRanker:
    """Fit ``estimator`` on ``source`` with a dask cluster; same result as ``estimator.fit(source)``.

    Parameters
    ----------
    estimator
        a streamrank learner (fitted in place and returned)
    source
        GroupStore, any BlockSource, a store path or URL (``s3://…``), or an (X, y, qid) tuple
    client
        distributed.Client, scheduler address, or None (a LocalCluster for the call)
    storage_options : for a store URL: its filesystem's options (credentials, endpoint); the
        workers open the URL with them and read their blocks from the bucket themselves
    max_rows
        block budget (the same default as the local learners)
    split_every
        fan-in of the tree reduction
    **kwargs
        Options of the strategy (``blocks_per_task`` for statistics
        learners; ``callback``, ``validation``, ``patience``, ``x0`` for CG;
        the round options of :func:`fit_sgd_rounds` for SGD rankers); an
        unknown one raises ``TypeError``

    Notes
    -----
    Primal RankRLS: the statistics are accumulated on the workers and
    reduced there; the client only solves (O(n³)).  CG RankRLS: every
    product is a distributed pass.  Sparse KernelRankRLS: distributed basis
    reservoir, then statistics.  SGD rankers on a tuple source: data-parallel
    rounds (``rounds=``, ``steps_per_round=``, ``n_shards=`` keywords; with the
    bilinear learner's ``refit`` flag, refit rounds follow: ``refit_rounds=``,
    ``refit_steps_per_round=``; see :func:`fit_sgd_rounds`) — close to, not
    equal to, the single-machine run (one shard: equal).
    """
    if isinstance(estimator, SGDLearner):
        if hasattr(estimator, "partial_fit_pairs"):
            kwargs["max_rows"] = max_rows
        return _fit_sgd_rounds(estimator, source, client, **kwargs)
    source = _as_source(source, storage_options)
    if source.n_rows == 0:
        raise ValueError("empty input: the source has no rows")
    estimator.check_params()
    if _is_statistics_learner(estimator, source):
        _check_options(estimator, "statistics", kwargs, ("blocks_per_task",))
        return fit_from_statistics(estimator, source, client, max_rows=max_rows, split_every=split_every, **kwargs)
    if getattr(estimator, "n_basis", None) is not None and hasattr(estimator, "kernel_function"):
        _check_options(estimator, "sparse kernel", kwargs, ())
        return fit_kernel_sparse(estimator, source, client, max_rows=max_rows, split_every=split_every)
    if hasattr(estimator, "solver_for") and estimator.solver_for(source) == "cg":   # RankRLS(solver="cg")
        _check_options(estimator, "conjugate gradient", kwargs, ("callback", "validation", "patience", "x0"))
        return fit_cg(estimator, source, client, max_rows=max_rows, split_every=split_every, **kwargs)
    raise NotImplementedError(
        f"sr.distributed.fit does not know how to distribute {type(estimator).__name__}: it needs "
        "the StatisticsLearner or SGDLearner protocol (streamrank.base), the RankRLS cg solver, or a sparse "
        "KernelRankRLS (n_basis=r)"
    )


def fit_sgd_rounds(estimator: BaseRanker, tuple_source: TupleSource | BlockSource, client: Client | str | None = None,
                   **kwargs: Any) -> BaseRanker:
    """Data-parallel SGD rounds with sparse-aware model averaging (see :mod:`streamrank.distributed._sgd`)."""
    return _fit_sgd_rounds(estimator, tuple_source, client, **kwargs)
