"""Prediction and evaluation on a cluster: blocks scored (and evaluated) on the workers."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._defaults import DEFAULT_BLOCK_ROWS
from ._cluster import DEFAULT_SPLIT_EVERY, _as_source, _ship_source, for_workers, get_client, tree_reduce
from ._retry import with_retries

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dask.distributed import Client

    from .._typing import PathLike
    from ..base import BaseRanker
    from ..io.blocks import BlockSource

__all__ = ["predict", "evaluate"]


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


def predict(estimator: BaseRanker, source: BlockSource | PathLike, client: Client | str | None = None, *,
            max_rows: int = DEFAULT_BLOCK_ROWS, out: PathLike | None = None) -> np.ndarray | PathLike:
    """Scores of every row of ``source`` in row order, computed on the workers.

    The fitted model is scattered once; each task reads its rows and scores
    them.  A run that loses a worker is done again
    (:mod:`streamrank.distributed._retry`).  Equals
    ``np.concatenate([estimator.predict(b.X) for b in source.blocks()])``.

    ``out``: a path; the scores are written there by the workers as a zarr
    array (rows,) or (rows, outputs) float64, chunked by ``max_rows`` rows —
    each task writes whole chunks, so no two tasks touch the same chunk —
    nothing travels back to the client, and the path is returned.  The array
    is written beside ``out`` and renamed into place when complete (e.g.
    ``out=store.path + "/scores"`` keeps it inside the store directory).  A
    URL of object storage as ``out`` is refused (``NotImplementedError``): the
    complete array could not be published atomically there.
    """
    import os as _os
    import shutil
    import uuid

    from ..io._remote import is_url

    if out is not None and is_url(out):
        raise NotImplementedError(
            f"out={str(out)!r}: writing scores to object storage is not implemented (the array is published by a "
            "rename, which object storage does not have); write them to a path the workers share, or take them "
            "back with out=None")
    source = _as_source(source)
    est = for_workers(estimator)
    n = source.n_rows
    step = int(max_rows)
    ranges = [(a, min(a + step, n)) for a in range(0, n, step)]
    with get_client(client) as c:
        # the source (if in memory) and the model, scattered once (not broadcast: streamrank.distributed._retry)
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


def _evaluate_task(plan, ref, est, k, metrics, output, options):
    from ..metrics import RankingEvaluator, block_labels, score_block

    block = ref.open().read_block(*plan)
    s = score_block(est, block.X)
    if s.ndim == 2 and output is not None:
        s = s[:, output]
    ev = RankingEvaluator(k, metrics, **options)
    ev.update(block_labels(block, output), s, block.group_ptr, qid=block.qid, group_size=block.group_size,
              group_offset=block.group_offset)
    return ev


def evaluate(estimator: BaseRanker, source: BlockSource | PathLike, client: Client | str | None = None, *, k: int = 10,
             metrics: Sequence[str] | str | None = None, gain: str = "exp2", empty: str = "skip", max_grade: int = 4,
             qrels: Any = None, disagreement_ties: str = "half", max_rows: int = DEFAULT_BLOCK_ROWS,
             split_every: int = DEFAULT_SPLIT_EVERY, output: int | None = None) -> dict:
    """Ranking metrics of ``estimator`` on ``source``; blocks are scored and evaluated on the workers.

    Same result and options as :func:`streamrank.metrics.evaluate` (``{name:
    MetricResult}``; ``metrics="ndcg@1,3,10,map,mrr,p@10,err@10"``, ``gain``,
    ``empty``, ``max_grade``, ``qrels``): per-block
    :class:`~streamrank.metrics.RankingEvaluator` objects are merged in a
    tree; pieces of split groups are joined by the merge.
    """
    from ..metrics import METRICS, RankingEvaluator

    options = dict(gain=gain, empty=empty, max_grade=max_grade, qrels=qrels, disagreement_ties=disagreement_ties)
    metrics = METRICS if metrics is None else (metrics if isinstance(metrics, str) else tuple(metrics))
    RankingEvaluator(k, metrics, **options)           # bad names and options fail here, not on a worker
    source = _as_source(source)
    est = for_workers(estimator)
    with get_client(client) as c:
        refs = [_ship_source(c, source)]
        plan = source.plan(max_rows, split_groups=True)

        def merged():
            model = c.scatter(est, hash=False)      # not broadcast (streamrank.distributed._retry)
            parts = c.map(_evaluate_task, plan, ref=refs[0], est=model, k=k, metrics=metrics, output=output,
                          options=options, pure=False)
            return tree_reduce(c, parts, split_every=split_every).result()

        ev, _ = with_retries(c, merged, on_loss=lambda: refs.__setitem__(0, _ship_source(c, source)))
    return ev.result()
