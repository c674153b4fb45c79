"""Data-parallel SGD rounds for the SGD rankers on a dask cluster (issue 6).

:class:`~streamrank.SparseSGDRanker` (bilinear, a TupleStore) and
:class:`~streamrank.PairwiseSGDRanker` (linear, pairs sampled within the
groups of a GroupStore) share the scheme below.

Round r (of ``rounds``): the current model is scattered to the workers once;
shard k of ``n_shards`` (a contiguous share of the tuple ids, read by the
worker itself from the :class:`~streamrank.TupleStore`) runs
``steps_per_round`` steps of Algorithm 1 (``partial_fit``, with its own
learning-rate clock continuing from the round's start and its cumulative-L1
state) on its next tuples; the client averages the shards' models and starts
the next round from the average.

*Sparse-aware averaging*: the shards' up-to-date W (pending shrinkage
applied) are summed as CSR matrices and divided by the number of shards — the
support of the average is the union of the shards' supports, an entry that L1
zeroed on one shard counts as 0 there, and no dense D × D matrix is ever
formed.  The averaged model's clock is ``t₀ + steps_per_round`` (every shard
took that many steps from the same t₀, so their pending-shrinkage
accumulators agree); the shrinkage bookkeeping restarts from the flushed
average.  With one shard a round is exactly ``partial_fit`` on the same
tuples (tested).  This is parameter mixing (Zinkevich et al. 2010; McDonald et
al. 2010): quality is reported against the single-machine run on the same
number of tuples, not claimed equal.
"""
from __future__ import annotations

import copy

import numpy as np

__all__ = ["fit_sgd_rounds", "average_models"]


def _shard_tuples(source, shard, n_shards, round_, steps):
    """Tuple ids of shard ``shard`` for round ``round_`` (cycling through the shard's share)."""
    n = source.n_tuples
    a = shard * n // n_shards
    b = (shard + 1) * n // n_shards
    size = b - a
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    pos = (round_ * steps + np.arange(steps)) % size
    return a + pos


def _round_task(shard, ref, model, n_shards, round_, steps, step_batch):
    source = ref  # a TupleStore arrives as its path and reopens itself (TupleStore.__reduce__)
    ids = _shard_tuples(source, shard, n_shards, round_, steps)
    m = copy.deepcopy(model)
    if ids.size == 0:
        return m
    Q, D = source.matrices()
    lo, hi = int(ids.min()), int(ids.max()) + 1
    tup, _ = source.read_tuples(lo, hi)
    tup = tup[ids - lo]
    for a in range(0, len(tup), step_batch):
        t = tup[a:a + step_batch]
        m.partial_fit(Q[t[:, 0]], D[t[:, 1]], D[t[:, 2]])
    return m


def _pairwise_round_task(shard, ref, model, n_shards, round_, steps, plan):
    """Shard k owns planned blocks k, k + K, ...; round r samples ``steps`` pairs in its (r mod)-th block."""
    mine = plan[shard::n_shards]
    m = copy.deepcopy(model)
    if not mine:
        return m
    block = ref.open().read_block(*mine[round_ % len(mine)])
    m.partial_fit(block.X, block.y, block.row_qid(), n_pairs=steps)
    return m


def average_pairwise(models):
    """Average of linear models that took the same number of steps from the same state.

    ``w = mean_k w_k`` (a dense n-vector); the clock is the shards' common
    ``t``; the pending L1 window (the same on every shard: it depends on t
    only) is kept.
    """
    out = copy.deepcopy(models[0])
    out._v = np.mean([m.coef_ for m in models], axis=0)
    out._fstate = models[0]._fstate.copy()
    out._fstate[0] = 1.0                     # coef_ = fstate[0] * v: the scale is folded into v
    out._istate = models[0]._istate.copy()
    out._istate[0] = max(m.t_ for m in models)
    return out


def average_models(models):
    """Sparse-aware average of bilinear models that started the round from the same state."""
    from .sgd import _sparse_w_kernels as K_
    from .sgd._table import SparseW

    base = models[0]
    k = len(models)
    W = models[0].W_.astype(np.float64)
    for m in models[1:]:
        W = W + m.W_
    W = (W / k).tocoo()
    out = copy.deepcopy(base)
    old = base._fitted()
    new = SparseW(old.n_rows, old.n_cols, capacity=max(1, W.nnz))
    new.istate[:] = old.istate
    new.istate[K_.I_T] = max(int(m._fitted().istate[K_.I_T]) for m in models)
    new.istate[K_.I_UPDATES] = sum(int(m._fitted().istate[K_.I_UPDATES]) for m in models)
    new.istate[K_.I_K] = 0
    new.istate[K_.I_COUNT] = 0
    new.fstate[:] = old.fstate
    new.set_entries(W.row, W.col, W.data)
    out._W = new
    return out


def fit_sgd_rounds(estimator, source, client=None, *, rounds=10, steps_per_round=10_000, n_shards=None,
                   batch_size=1024, max_rows=65_536):
    """Data-parallel rounds of SGD (see module doc); fits ``estimator`` in place and returns it.

    ``source``: a TupleStore for :class:`~streamrank.SparseSGDRanker`, a
    GroupStore (any BlockSource) for :class:`~streamrank.PairwiseSGDRanker`.
    ``n_shards`` defaults to the number of workers.  The model continues
    from its current state when it is already fitted (nightly resume).
    """
    from .distributed import _as_source, _ship_source, get_client

    rounds = int(rounds)
    steps = int(steps_per_round)
    if rounds < 1 or steps < 1:
        raise ValueError(f"rounds and steps_per_round must be >= 1, got {rounds}, {steps}")
    pairwise = hasattr(estimator, "partial_fit_pairs")
    with get_client(client) as c:
        k = int(n_shards) if n_shards else max(1, len(c.scheduler_info()["workers"]))
        model = estimator
        if pairwise:
            source = _as_source(source)
            ref = _ship_source(c, source)
            plan = source.plan(max_rows)
            if getattr(model, "_v", None) is None:
                model._params()
                model._start(source.n_features)
        else:
            ref = source if hasattr(source, "path") else c.scatter(source, hash=False)
            if getattr(model, "_W", None) is None:  # start W₀ on the client (identity or zeros)
                model._params()
                model._start(int(source.n_query_features), int(source.n_item_features))
        history = []
        for r in range(rounds):
            mf = c.scatter(model, broadcast=True, hash=False)       # once per round
            if pairwise:
                parts = c.map(_pairwise_round_task, range(k), ref=ref, model=mf, n_shards=k, round_=r,
                              steps=steps, plan=plan, pure=False)
            else:
                parts = c.map(_round_task, range(k), ref=ref, model=mf, n_shards=k, round_=r, steps=steps,
                              step_batch=batch_size, pure=False)
            shards = c.gather(parts)
            if k == 1:
                model = shards[0]
            else:
                model = average_pairwise(shards) if pairwise else average_models(shards)
            history.append({"round": r, "t": model.t_,
                            "nnz": int(np.count_nonzero(model.coef_)) if pairwise else model.nnz_})
    estimator.__dict__.update(model.__dict__)
    estimator.rounds_history_ = history
    return estimator
