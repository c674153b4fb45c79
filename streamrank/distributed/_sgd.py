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
tuples (tested).

*Refit* (eq. 8, when the bilinear learner's ``refit`` flag is set): further
rounds in the same way, each shard running the learner's ``refit`` (SGD
without L1 restricted to the support Ω of W, step size continuing at
``t + t_refit``) on its tuples; all shards start from the same flushed W, so
they share Ω and the average keeps it.  One shard and one refit round over
the tuples in store order is exactly ``model.refit(store, n_steps,
shuffle_buffer=0)`` (tested).

*Bounded reads*: a worker reads its tuples in pieces of one store chunk and
the ``Q`` / ``D`` rows they need through the store's byte-bounded row cache
(``cache_bytes``), never the whole matrices.

This is parameter mixing (Zinkevich et al. 2010; McDonald et al. 2010):
quality is reported against the single-machine run on the same number of
tuples, not claimed equal.
"""
from __future__ import annotations

import copy

import numpy as np

from .._defaults import DEFAULT_BLOCK_ROWS
from ..io.tuples import _CACHE_BYTES
from ._cluster import _as_source, _ship_source, get_client
from ._retry import with_retries

__all__ = ["fit_sgd_rounds", "average_models"]

_REFIT_PIECE = 16_384   # tuples per ``refit`` call of a refit round (each call flushes W once)


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


def _shard_segments(n, shard, n_shards, round_, steps):
    """The ids of :func:`_shard_tuples` as contiguous ranges ``[(t0, t1), ...]`` in step order.

    The shard's share ``a:b`` is visited cyclically from position
    ``round_ * steps mod (b - a)``; a range ends where the cycle wraps, so the
    list holds at most ``steps // (b - a) + 2`` ranges (no id array of the
    shard's size is ever formed).
    """
    a = shard * n // n_shards
    b = (shard + 1) * n // n_shards
    size = b - a
    if size == 0 or steps <= 0:
        return []
    out = []
    pos = (round_ * steps) % size
    left = int(steps)
    while left > 0:
        run = min(left, size - pos)
        out.append((a + pos, a + pos + run))
        left -= run
        pos = 0
    return out


def _shard_batches(source, segments, step_batch, cache_bytes):
    """``(Q, D_pos, D_neg)`` row-aligned CSR batches of the tuples in ``segments``, in order.

    Bounded reads: tuples come in pieces of at most one store chunk
    (``source._chunk_size()``), and the ``Q`` / ``D`` rows they need through
    the source's row readers (a :class:`~streamrank.io.tuple_store.RowCache`
    of at most ``cache_bytes`` for a store; the matrices themselves for an
    in-memory source) — peak memory does not grow with the number of tuples
    or stored vectors.
    """
    Q, D = source._row_readers(int(cache_bytes))
    piece = max(int(source._chunk_size()), int(step_batch))
    for t0, t1 in segments:
        for c0 in range(t0, t1, piece):
            tup, _ = source.read_tuples(c0, min(c0 + piece, t1))
            for a in range(0, len(tup), step_batch):
                t = tup[a:a + step_batch]
                yield Q[t[:, 0]], D[t[:, 1]], D[t[:, 2]]


def round_task(shard, ref, model, n_shards, round_, steps, step_batch, cache_bytes=_CACHE_BYTES):
    """Shard ``shard``'s ``steps`` steps of Algorithm 1 (``partial_fit``) from the round's model.

    Package-public (``streamrank.distributed.round_task``): ``streamrank distributed --compare-single``
    runs it locally, shard after shard, to replay the rounds on one machine.
    """
    source = ref  # a TupleStore arrives as its path and reopens itself (TupleStore.__reduce__)
    m = copy.deepcopy(model)
    for Q, Dp, Dn in _shard_batches(source, _shard_segments(source.n_tuples, shard, n_shards, round_, steps),
                                    step_batch, cache_bytes):
        m.partial_fit(Q, Dp, Dn)
    return m


def refit_round_task(shard, ref, model, n_shards, round_, steps, step_batch, cache_bytes=_CACHE_BYTES):
    """Shard ``shard``'s ``steps`` refit steps (eq. 8: no L1, support of W fixed) from the round's model.

    Runs the learner's own public ``refit`` on the shard's tuples in order
    (an in-memory tuple source per piece, ``shuffle_buffer=0``), so with one
    shard a refit round is exactly ``model.refit`` on the same tuples.
    """
    import scipy.sparse as sp

    from ..io.tuples import TupleSource

    source = ref
    m = copy.deepcopy(model)
    for Q, Dp, Dn in _shard_batches(source, _shard_segments(source.n_tuples, shard, n_shards, round_, steps),
                                    max(int(step_batch), _REFIT_PIECE), cache_bytes):
        k = Q.shape[0]
        local = np.stack([np.arange(k), np.arange(k), k + np.arange(k)], axis=1)
        piece = TupleSource.from_arrays(Q, sp.vstack([Dp, Dn], format="csr"), local)
        m.refit(piece, n_steps=k, batch_size=step_batch, shuffle_buffer=0)
    return m


def _pairwise_round_task(shard, ref, model, n_shards, round_, steps, plan):
    """Shard k owns planned blocks k, k + K, ...; round r samples ``steps`` pairs in its (r mod)-th block."""
    mine = plan[shard::n_shards]
    m = copy.deepcopy(model)
    if not mine:
        return m
    block = ref.open().read_block(*mine[round_ % len(mine)])
    if block.weight is None:
        m.partial_fit(block.X, block.y, block.row_qid(), n_pairs=steps)
    else:                                   # row weights (a WeightedSource): pairs weigh w_i w_j, as locally
        from ..io.sources import as_source
        from ..io.weighted import with_weights

        m.partial_fit(with_weights(as_source(block.X, block.y, block.row_qid()), block.weight), n_pairs=steps)
    return m


def _moments_task(plan, ref):
    """Column moments of one planned block (PairwiseSGDRanker normalize=: the scales of all rows)."""
    from ..distributed._kernel import _Reservoir
    from ..normalize import FeatureMoments

    block = ref.open().read_block(*plan)
    return _Reservoir({}, FeatureMoments(block.X.shape[1]).update(block.X))


def average_pairwise(models):
    """Average of pairwise models (:meth:`streamrank.PairwiseSGDRanker.average`)."""
    return type(models[0]).average(models)


def average_models(models):
    """Sparse-aware average of bilinear models (:meth:`streamrank.SparseSGDRanker.average`)."""
    return type(models[0]).average(models)


def fit_sgd_rounds(estimator, source, client=None, *, rounds=10, steps_per_round=10_000, n_shards=None,
                   batch_size=1024, max_rows=DEFAULT_BLOCK_ROWS, refit_rounds=None, refit_steps_per_round=None,
                   cache_bytes=_CACHE_BYTES):
    """Data-parallel rounds of SGD (see module doc); fits ``estimator`` in place and returns it.

    ``source``: a TupleStore for :class:`~streamrank.SparseSGDRanker`, a
    GroupStore (any BlockSource) for :class:`~streamrank.PairwiseSGDRanker`.
    ``n_shards`` defaults to the number of workers.  The model continues
    from its current state when it is already fitted (nightly resume).

    Bilinear refit (eq. 8): when the estimator's ``refit`` flag is true,
    ``refit_rounds`` (default ``rounds``) rounds of ``refit_steps_per_round``
    (default ``steps_per_round``; with the learner's ``refit_steps`` set,
    ``ceil(refit_steps / refit_rounds)``) refit steps per shard follow, in
    the same data-parallel way: the support Ω of W is fixed after the main
    phase's pending shrinkage (each shard flushes the same W), every shard runs
    the learner's ``refit`` (SGD without L1 on Ω) over the tuples of the
    main round of the same number, and the client averages (Ω is kept).
    ``rounds_history_`` records both phases.

    ``PairwiseSGDRanker(normalize=...)``: a fresh model first reduces the
    column moments of every row on the cluster (one pass, a tree sum of
    :class:`~streamrank.normalize.FeatureMoments`); every shard then scales its
    pairs by that one normalizer — as the local ``fit``'s scales of all rows.
    ``SparseSGDRanker(normalize=...)``: a fresh model takes its query and item
    scales from every stored vector of the source (one pass on the client through
    the store's bounded row cache, as the local ``fit``); every shard scales its
    tuples by them.  ``cache_bytes`` bounds each
    worker's cache of decoded Q/D rows (see ``TupleStore.batches``).
    """
    rounds = int(rounds)
    steps = int(steps_per_round)
    if rounds < 1 or steps < 1:
        raise ValueError(f"rounds and steps_per_round must be >= 1, got {rounds}, {steps}")
    pairwise = hasattr(estimator, "partial_fit_pairs")
    refit = (not pairwise) and bool(getattr(estimator, "auto_refit", False))
    estimator.check_params()
    if refit:
        refit_rounds = rounds if refit_rounds is None else int(refit_rounds)
        if refit_steps_per_round is None:
            rs = estimator.refit_steps
            refit_steps_per_round = steps if rs is None else -(-int(rs) // max(refit_rounds, 1))
        refit_steps_per_round = int(refit_steps_per_round)
        if refit_rounds < 0 or refit_steps_per_round < 0:
            raise ValueError(f"refit_rounds and refit_steps_per_round must be >= 0, got {refit_rounds}, "
                             f"{refit_steps_per_round}")
    with get_client(client) as c:
        k = int(n_shards) if n_shards else max(1, len(c.scheduler_info()["workers"]))
        model = estimator
        if pairwise:
            source = _as_source(source)
            ref = _ship_source(c, source)
            plan = source.plan(max_rows)
            fresh = not model.has_state()
            model.init_state(source.n_features)
            if fresh and getattr(model, "normalize", None) is not None:   # one normalizer for every shard
                from ._cluster import tree_reduce

                parts = c.map(_moments_task, plan, ref=ref, pure=False)
                model.normalizer_ = tree_reduce(c, parts).result().moments.normalizer(model.normalize)
        else:
            ref = source if hasattr(source, "path") else c.scatter(source, hash=False)
            if not model.has_state() and getattr(model, "normalize", None) is not None:
                model.fit_scales(source)     # one pair of scales for every shard: all stored Q / D rows
            model.init_state(source.n_query_features, source.n_item_features)   # W₀ on the client
        history = []
        phases = [("sgd", r, steps) for r in range(rounds)]
        if refit and refit_steps_per_round:
            phases += [("refit", r, refit_steps_per_round) for r in range(refit_rounds)]
        refs = [ref]

        def reship():                              # an in-memory source scattered once may have died too
            if pairwise:
                refs[0] = _ship_source(c, source)       # a path for a store, a scatter for arrays
            elif not hasattr(source, "path"):
                refs[0] = c.scatter(source, hash=False)

        n_retries = 0
        for phase, r, n_steps in phases:
            def one_round(model=model, phase=phase, r=r, n_steps=n_steps):
                mf = c.scatter(model, hash=False)       # once per round; not broadcast (_retry)
                if pairwise:
                    parts = c.map(_pairwise_round_task, range(k), ref=refs[0], model=mf, n_shards=k, round_=r,
                                  steps=n_steps, plan=plan, pure=False)
                else:
                    task = round_task if phase == "sgd" else refit_round_task
                    parts = c.map(task, range(k), ref=refs[0], model=mf, n_shards=k, round_=r, steps=n_steps,
                                  step_batch=batch_size, cache_bytes=cache_bytes, pure=False)
                return c.gather(parts)

            # a round is a pure function of the round's model: one that loses a worker is run again
            shards, retries = with_retries(c, one_round, on_loss=reship)
            n_retries += retries
            model = shards[0] if k == 1 else type(model).average(shards)
            rec = {"round": r, "t": model.t_,
                   "nnz": int(np.count_nonzero(model.coef_)) if pairwise else model.nnz_}
            if not pairwise:
                rec.update(phase=phase, refit_t=model.refit_t_)
            history.append(rec)
    if model is not estimator:
        estimator.adopt(model)
    estimator.rounds_history_ = history
    estimator.rounds_retries_ = n_retries
    return estimator
