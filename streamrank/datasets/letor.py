"""LETOR 3.0 / 4.0 text files (MQ2008, OHSUMED, or any svmlight file with qid) to a GroupStore.

Files are read straight from the distribution's ``.tar.gz`` (one member
streamed, nothing unpacked) or from any plain / gzip path, in chunks of whole
queries (:func:`streamrank.io.svmlight.iter_svmlight`), so memory is bounded
by the chunk size whatever the file size.
"""
from __future__ import annotations

import os
import tarfile
from contextlib import contextmanager
from typing import Iterator

import numpy as np

from ..io.svmlight import SvmlightChunk, iter_svmlight, open_text_bytes
from ._paths import data_path

__all__ = ["DATASETS", "CITATIONS", "DEFAULT_DIR", "letor_member", "open_letor", "iter_letor",
           "write_letor_store", "write_letor_parquet"]

DEFAULT_DIR = str(data_path("letor"))

DATASETS = {
    "MQ2008": dict(archive="MQ2008_QueryLevelNorm.tar.gz", member="MQ2008/Fold{fold}/{split}.txt",
                   n_features=46),
    "OHSUMED": dict(archive="OHSUMED_LETOR3.tar.gz", member="OHSUMED/QueryLevelNorm/Fold{fold}/{split}.txt",
                    n_features=45),
}

CITATIONS = {
    "MQ2008": "T. Qin and T.-Y. Liu. Introducing LETOR 4.0 Datasets. arXiv:1306.2597, 2013 (Microsoft LETOR 4.0).",
    "OHSUMED": ("T. Qin, T.-Y. Liu, J. Xu and H. Li. LETOR: A benchmark collection for research on learning "
                "to rank for information retrieval. Information Retrieval 13(4), 2010 (LETOR 3.0 OHSUMED)."),
}

SPLITS = ("train", "vali", "test")


def letor_member(dataset: str, fold: int = 1, split: str = "train") -> str:
    """Name of the member of the distribution archive holding ``fold`` / ``split``."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not 1 <= int(fold) <= 5:
        raise ValueError(f"fold must be 1..5, got {fold!r}")
    return DATASETS[dataset]["member"].format(fold=int(fold), split=split)


@contextmanager
def open_letor(source, member: str | None = None):
    """Yield ``(binary file object, name)`` for a tar(.gz) member or a plain/gzip file."""
    source = os.fspath(source)
    if member is not None or source.endswith((".tar.gz", ".tgz", ".tar")):
        if member is None:
            raise ValueError(f"{source} is a tar archive: pass member= (e.g. {letor_member('MQ2008')!r})")
        with tarfile.open(source, "r:*") as tf:
            try:
                f = tf.extractfile(member)
            except KeyError:
                names = [n for n in tf.getnames() if n.endswith(".txt")][:8]
                raise ValueError(f"{source} has no member {member!r}; e.g. {names}") from None
            if f is None:
                raise ValueError(f"{source}:{member} is not a regular file")
            with f:
                yield f, f"{source}:{member}"
        return
    f, name, close = open_text_bytes(source)
    try:
        yield f, name
    finally:
        if close:
            f.close()


def iter_letor(source, *, member: str | None = None, n_features: int | None = None,
               limit_rows: int | None = None, chunk_bytes: int = 8 << 20, null_value=None) -> Iterator[SvmlightChunk]:
    """Yield dense float32 ``(X, y, qid)`` chunks of whole queries.

    ``limit_rows`` stops after the chunk in which the running total reaches
    it, cutting that chunk at the first query boundary at or after the limit
    (whole queries only).
    """
    with open_letor(source, member) as (f, name):
        seen = 0
        for chunk in iter_svmlight(f, n_features=n_features, dense=True, chunk_bytes=chunk_bytes,
                                   null_value=null_value, name=name):
            if chunk.qid is None:
                raise ValueError(f"{name}: LETOR lines must carry qid:")
            if limit_rows is not None and seen + len(chunk.y) >= limit_rows:
                q = chunk.qid
                stop = max(limit_rows - seen, 1)
                # extend to the end of the query that holds row stop - 1
                ends = np.flatnonzero(q[stop:] != q[stop - 1])
                stop = stop + int(ends[0]) if ends.size else len(q)
                yield SvmlightChunk(chunk.X[:stop], chunk.y[:stop], q[:stop])
                return
            seen += len(chunk.y)
            yield chunk


def write_letor_store(path, source, *, member: str | None = None, n_features: int | None = None,
                      limit_rows: int | None = None, chunk_bytes: int = 8 << 20, overwrite: bool = False,
                      null_value=None):
    """Stream a LETOR file into a new dense :class:`~streamrank.GroupStore`; return it (read mode).

    ``n_features`` is required by the store; for the known datasets it is
    taken from :data:`DATASETS` by the caller.  Each chunk is one append
    (``batch_id="letor#<i>"``: the pieces of one batch).
    """
    from ..io.group_store import GroupStore

    store = None
    for i, (X, y, qid) in enumerate(iter_letor(source, member=member, n_features=n_features,
                                               limit_rows=limit_rows, chunk_bytes=chunk_bytes,
                                               null_value=null_value)):
        if store is None:
            store = GroupStore.create(path, X.shape[1], overwrite=overwrite)
        store.append(X, y, qid, batch_id=f"letor#{i}")  # one batch (io/groups.py), one commit per chunk
    if store is None:
        if n_features is None:
            raise ValueError(f"{source}: no data lines, and n_features is unknown")
        GroupStore.create(path, n_features, overwrite=overwrite)
    return GroupStore.open(path)


def write_letor_parquet(out, source, *, member: str | None = None, n_features: int | None = None,
                        qid_prefix: str = "q", rows_per_file: int | None = None, row_group_rows: int = 4096,
                        limit_rows: int | None = None, chunk_bytes: int = 8 << 20, null_value=None) -> list[str]:
    """Write a LETOR file as Parquet the way a logging pipeline would: string query ids, named columns.

    Columns: ``qid`` (string ``f"{qid_prefix}{id}"``), ``label`` (float64) and
    ``f_1`` ... ``f_n`` (float32, LETOR's 1-based feature numbers).  Rows keep
    the text's order; row groups hold ``row_group_rows`` rows, so queries
    straddle row groups.  ``rows_per_file``: split into ``part-00000.parquet``,
    ... in the directory ``out`` (queries straddle files too); None: one file
    ``out``.  Returns the files written.  Needs pyarrow (``streamrank[parquet]``).
    """
    from .._tables import require_pyarrow

    require_pyarrow("writing Parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = os.fspath(out)
    if rows_per_file is not None:
        os.makedirs(out, exist_ok=True)
    files: list[str] = []
    writer = None
    in_file = 0
    schema = None
    try:
        for X, y, qid in iter_letor(source, member=member, n_features=n_features, limit_rows=limit_rows,
                                    chunk_bytes=chunk_bytes, null_value=null_value):
            X = np.asarray(X, dtype=np.float32)
            if schema is None:
                fields = [pa.field("qid", pa.string()), pa.field("label", pa.float64())]
                fields += [pa.field(f"f_{j + 1}", pa.float32()) for j in range(X.shape[1])]
                schema = pa.schema(fields)
            r = 0
            while r < len(y):
                if writer is None:
                    path = out if rows_per_file is None else os.path.join(out, f"part-{len(files):05d}.parquet")
                    writer = pq.ParquetWriter(path, schema)
                    files.append(path)
                    in_file = 0
                take = len(y) - r if rows_per_file is None else min(len(y) - r, rows_per_file - in_file)
                sl = slice(r, r + take)
                cols = [pa.array([f"{qid_prefix}{int(q)}" for q in qid[sl]], pa.string()),
                        pa.array(np.asarray(y[sl], dtype=np.float64))]
                cols += [pa.array(X[sl, j]) for j in range(X.shape[1])]
                writer.write_table(pa.Table.from_arrays(cols, schema=schema), row_group_size=row_group_rows)
                r += take
                in_file += take
                if rows_per_file is not None and in_file >= rows_per_file:
                    writer.close()
                    writer = None
    finally:
        if writer is not None:
            writer.close()
    if not files:
        raise ValueError(f"{source}: no data lines; nothing written")
    return files
