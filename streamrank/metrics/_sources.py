"""The entry that takes a source and a model: stream the blocks once, score them, evaluate."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._defaults import DEFAULT_BLOCK_ROWS

from ._evaluator import METRICS, RankingEvaluator
from ._pairs import auc

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from .._typing import MatrixLike
    from ..io.blocks import Block, BlockSource


def score_block(model: Any, X: MatrixLike) -> np.ndarray:
    """Scores of a block: ``model.predict(X)`` or ``model(X)``; a (rows, 1) result becomes 1-D."""
    if hasattr(model, "predict"):
        s = model.predict(X)
    elif callable(model):
        s = model(X)
    else:
        raise TypeError(f"model must have a predict method or be callable; got {type(model).__name__}")
    s = np.asarray(s)
    return s.reshape(-1) if (s.ndim == 2 and s.shape[1] == 1) else s


def block_labels(block, output=None):
    """The block's labels (column ``output`` of a multi-output source)."""
    y = np.asarray(block.y)
    if y.ndim == 2:
        if output is None and y.shape[1] != 1:
            raise ValueError(f"the source has {y.shape[1]} outputs; pass output=<column> to choose one")
        y = y[:, output or 0]
    return y


def _blocks_of(source, max_rows):
    from ..io.blocks import BlockSource

    if isinstance(source, BlockSource):
        return source.blocks(max_rows=max_rows)
    if hasattr(source, "blocks") and callable(source.blocks):
        return source.blocks(max_rows=max_rows)
    return iter(source)


def evaluate(source: BlockSource | Iterable[Block], model: Any, k: int | None = 10, *, metrics=METRICS,
             gain: str = "exp2", empty: str = "skip", ties: str = "expected", max_grade: float = 4, qrels=None,
             disagreement_ties: str = "half", max_rows: int = DEFAULT_BLOCK_ROWS, output: int | None = None,
             keep_per_query: bool = False, weighted: bool = False) -> dict:
    """Stream ``source`` once through ``model`` and return every metric asked for.

    Parameters
    ----------
    source : BlockSource or iterable of Block
        A GroupStore, ``sr.as_source(X, y, qid)``, or blocks; groups cut
        across blocks are joined before they are evaluated.
    model : fitted model or callable
        A fitted model (``predict(X)``) or a callable ``model(X)``.
    k : int or None
        Cut-off of a bare ``ndcg``/``err``/``p``/``recall``.
    metrics : str or list of str
        ``"ndcg@1,3,5,10,map,mrr,p@10,err@10"``, a list of such names, and
        ``"auc"`` (one global group; keeps 16 bytes a row).
    gain, empty, max_grade, qrels :
        As for the array metrics (:mod:`streamrank.metrics`).  Blocks carry
        no document ids, so ``ties`` is ``"expected"``.
    max_rows, output, keep_per_query :
        Block budget, score column of a multi-output model, keep per-query values.
    weighted : bool
        Score ``ndcg`` and ``disagreement`` with the source's row weights
        (``block.weight``: :func:`~streamrank.io.weighted.with_weights`,
        :func:`~streamrank.io.weighted.ips_weighted` -- whose labels are the
        clicks), as the array metrics with ``sample_weight``; the result
        does not depend on how the source cuts its blocks.

    Notes
    -----
    Returns ``{name: MetricResult}`` (names ``"ndcg@10"``, ``"map"``,
    ``"mrr"``, ``"p@10"``, ``"err@10"``, ``"disagreement"``, ``"auc"``).
    """
    if ties != "expected":
        raise ValueError(f"evaluate(source, model) supports ties='expected' only: blocks carry no document ids "
                         f"(got ties={ties!r}); for trec_eval's order call the array metrics with doc_ids")
    names = [m.strip() for m in (metrics.split(",") if isinstance(metrics, str) else metrics)]
    want_auc = any(m.lower() == "auc" for m in names)
    ranking = [m for m in names if m and m.lower() != "auc"]
    ev = None
    if ranking:
        ev = RankingEvaluator(k, ranking, keep_per_query=keep_per_query, gain=gain, empty=empty,
                              max_grade=max_grade, qrels=qrels, disagreement_ties=disagreement_ties,
                              weighted=weighted)
    if weighted and want_auc:
        raise ValueError("auc has no weighted form; weighted metrics: ndcg, disagreement")
    ys, ss = [], []
    for block in _blocks_of(source, max_rows):
        s = score_block(model, block.X)
        if s.ndim == 2 and output is not None:
            s = s[:, output]
        y = block_labels(block, output)
        if ev is not None:
            ev.update_block(block, s, y)
        if want_auc:
            ys.append(np.asarray(y, dtype=np.float64))
            ss.append(np.asarray(s, dtype=np.float64))
    out = ev.result() if ev is not None else {}
    if want_auc:
        if not ys:
            raise ValueError("auc: the source yielded no rows")
        from ._checks import MetricResult

        out["auc"] = MetricResult("auc", float(auc(np.concatenate(ys), np.concatenate(ss))), 1, 0)
    return out
