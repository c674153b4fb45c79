"""TREC files: run files and qrels, and the metrics of a run against its judgments.

Run format (one retrieved document a line): ``qid Q0 docid rank score tag``
-- trec_eval ignores the rank column and orders by score, ties by docid
descending.  Qrels format: ``qid iteration docid relevance``.  Files are
untrusted input: a malformed line is an error naming the file and line.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import math

import numpy as np

from ._evaluator import RankingEvaluator

if TYPE_CHECKING:
    from .._typing import PathLike


def _lines(path):
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            line = raw.decode("utf-8", errors="strict").strip()
            if line and not line.startswith("#"):
                yield no, line.split()


def read_qrels(path: PathLike) -> dict:
    """``{qid: {docid: relevance}}`` from a qrels file (``qid iter docid rel``)."""
    out: dict = {}
    for no, parts in _lines(path):
        if len(parts) != 4:
            raise ValueError(f"{path}:{no}: a qrels line has 4 fields (qid iter docid rel); got {len(parts)}")
        try:
            rel = int(parts[3])
        except ValueError:
            raise ValueError(f"{path}:{no}: relevance must be an integer; got {parts[3]!r}") from None
        out.setdefault(parts[0], {})[parts[2]] = rel
    return out


def read_run(path: PathLike) -> dict:
    """``{qid: (doc_ids, scores)}`` from a run file (``qid Q0 docid rank score tag``), in file order."""
    docs: dict = {}
    scores: dict = {}
    for no, parts in _lines(path):
        if len(parts) != 6:
            raise ValueError(f"{path}:{no}: a run line has 6 fields (qid Q0 docid rank score tag); "
                             f"got {len(parts)}")
        try:
            score = float(parts[4])
        except ValueError:
            raise ValueError(f"{path}:{no}: the score must be a number; got {parts[4]!r}") from None
        if not math.isfinite(score):
            raise ValueError(f"{path}:{no}: the score is {parts[4]}; expected a finite number")
        docs.setdefault(parts[0], []).append(parts[2])
        scores.setdefault(parts[0], []).append(score)
    return {q: (np.asarray(docs[q]), np.asarray(scores[q], dtype=np.float64)) for q in docs}


def evaluate_run(run: dict, qrels: dict, metrics: str = "ndcg@10, map", *, k: int | None = 10, gain: str = "exp2",
                 empty: str = "skip", ties: str = "trec", max_grade: float = 4, keep_per_query: bool = False) -> dict:
    """Metrics of a TREC run against qrels.

    ``run``: a path or ``{qid: (doc_ids, scores)}``; ``qrels``: a path or
    ``{qid: {docid: rel}}``.  The options default as on every metric, except
    ``ties="trec"`` (a run has document ids); ``gain="linear",
    empty="zero"`` gives trec_eval's numbers.  The judgments give the ideal
    DCG and the relevant counts.  A document the qrels do not judge is not relevant; a query of the run
    with no judgments is skipped, and a judged query missing from the run is
    not counted (trec_eval without ``-c``).  Returns ``{name: MetricResult}``
    with per-query values keyed by the run's query ids.
    """
    if not isinstance(run, dict):
        run = read_run(run)
    if not isinstance(qrels, dict):
        qrels = read_qrels(qrels)
    judged = {str(q): v for q, v in qrels.items()}
    ev = RankingEvaluator(k, metrics, keep_per_query=keep_per_query, gain=gain, empty=empty, ties=ties,
                          max_grade=max_grade, qrels=judged)
    names = list(run)
    ys, ss, ids, sizes = [], [], [], []
    for q in names:
        d, s = run[q]
        lab = judged.get(str(q), {})
        ys.append(np.asarray([lab.get(x, 0) for x in d.tolist()], dtype=np.float64))
        ss.append(np.asarray(s, dtype=np.float64))
        ids.append(np.asarray(d))
        sizes.append(len(d))
    if names:
        gp = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        ev.update(np.concatenate(ys), np.concatenate(ss), gp, qid=np.asarray(names, dtype=object),
                  doc_ids=np.concatenate(ids))
    return ev.result()
