"""``streamrank predict --run OUT``: a TREC run file of a model's scores on a store.

One line per row, queries in store order, rows of a query by decreasing score::

    qid Q0 docid rank score tag

``docid`` is the row's document id when the store keeps them (``ingest
--docids``: LETOR's ``#docid = ...`` comments), else ``row<N>`` with N the
store row; ``rank`` counts from 1 (ties in store row order; trec_eval itself
re-sorts by score and breaks ties by doc id); ``score`` is the float64 score
written with 17 significant digits.  The file is written to a temporary
sibling and renamed, so a reader never sees half a run.

``predict --qrels OUT`` writes the store's labels beside it as TREC judgments
(``qid 0 docid rel``), the rows named as in the run, so ``evaluate --run
--qrels`` (or trec_eval) can score the run.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from .._tempfiles import temp_sibling

_TAG = re.compile(r"^\S+$")


def check_tag(tag: str) -> str:
    if not _TAG.match(tag or ""):
        raise ValueError(f"--run-tag must be one word without spaces, got {tag!r}")
    return tag


def _run_qid(q) -> str:
    """A query id as the run's first field: integers in decimal, string ids (Parquet) as they are."""
    if isinstance(q, (int, np.integer)):
        return str(int(q))
    q = str(q)
    if not q or any(c.isspace() for c in q):
        raise ValueError(f"query id {q!r} cannot be a run file's first field (empty or has whitespace)")
    return q


def run_block_lines(block, s, names, tag: str, output: int = 0) -> str:
    """The run lines of one block of whole queries with scores ``s`` (``names``: doc ids, None: ``row<N>``)."""
    if s.ndim == 2:
        s = s[:, output]
    if names is None:
        names = [f"row{block.start + r}" for r in range(block.n_rows)]
    gp = block.group_ptr
    lines = []
    for g in range(block.n_groups):
        a, b = int(gp[g]), int(gp[g + 1])
        order = a + np.lexsort((np.arange(b - a), -s[a:b]))
        q = _run_qid(block.qid[g])
        lines.extend(f"{q} Q0 {names[r]} {k} {s[r]:.17g} {tag}\n" for k, r in enumerate(order, start=1))
    return "".join(lines)


def run_lines(model, store, *, max_rows: int, tag: str, output: int = 0):
    """Yield the run's lines (str, newline-terminated), block by block of whole queries."""
    ids = store.has_docids if hasattr(store, "has_docids") else False
    for block in store.blocks(max_rows=max_rows):
        s = np.asarray(model.predict(block.X), dtype=np.float64)
        names = store.docids(block.start, block.stop) if ids else None
        yield run_block_lines(block, s, names, tag, output)


def _write_lines(path, chunks, progress=None) -> int:
    """Write the text ``chunks`` to ``path`` atomically (a temporary sibling renamed over it); returns the number of
    lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_sibling(path)
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            for text in chunks:
                fh.write(text)
                k = text.count("\n")
                n += k
                if progress is not None:
                    progress.update(k)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return n


def write_run(path, model, store, *, max_rows: int, tag: str, output: int = 0, progress=None) -> int:
    """Write the run file atomically; returns the number of lines."""
    return _write_lines(path, run_lines(model, store, max_rows=max_rows, tag=check_tag(tag), output=output),
                        progress)


def _relevance(v) -> str:
    v = float(v)
    return str(int(v)) if v.is_integer() else f"{v:.17g}"


def qrels_lines(store, *, max_rows: int, output: int = 0):
    """Yield the TREC judgments of a store's rows (``qid 0 docid rel``), named as :func:`run_lines` names them."""
    ids = store.has_docids if hasattr(store, "has_docids") else False
    for block in store.blocks(max_rows=max_rows):
        y = np.asarray(block.y)
        if y.ndim == 2:
            y = y[:, output]
        names = store.docids(block.start, block.stop) if ids else [f"row{block.start + r}"
                                                                    for r in range(block.n_rows)]
        gp = block.group_ptr
        lines = []
        for g in range(block.n_groups):
            q = _run_qid(block.qid[g])
            lines.extend(f"{q} 0 {names[r]} {_relevance(y[r])}\n" for r in range(int(gp[g]), int(gp[g + 1])))
        yield "".join(lines)


def write_qrels(path, store, *, max_rows: int, output: int = 0) -> int:
    """Write the store's labels as TREC judgments (``qid 0 docid rel``) atomically; returns the number of lines."""
    return _write_lines(path, qrels_lines(store, max_rows=max_rows, output=output))
