"""Parquet in bounded memory: row groups -> chunks of whole queries -> GroupStore appends.

The files a search team keeps (Spark, BigQuery exports, pandas) hold one row
per (query, item) with a label column, a query-id column (often a string) and
named feature columns.  :func:`iter_parquet` reads them with pyarrow's own
Parquet reader (``pyarrow.parquet.ParquetFile.iter_batches``: one row group's
column chunks at a time), in file-name order, and yields chunks of about
``chunk_rows`` rows that hold **whole queries**: the rows of the last query of
a chunk are carried into the next, so a query split across row groups or
files is joined — when it is contiguous.  A query whose rows come back after
other queries is an error (within one batch, see :mod:`streamrank.io.groups`).

:func:`ingest_parquet` appends those chunks to a store (creating it with the
feature names on first use), one atomic append per chunk, with ids
``<batch>#<i>``; the batch id is a digest of the files' size and Parquet
footer (schema, row groups, column-chunk statistics and offsets) and the
reading options, so re-ingesting the same content adds nothing and a killed
ingest resumes where it stopped (like the text and .npz ingests).

Memory: one row group of the selected columns (pyarrow) plus one chunk
(``chunk_rows`` × features × 4 bytes, float32) plus the largest query.

pyarrow is an optional dependency (``pip install 'streamrank[parquet]'``).
"""
from __future__ import annotations

import glob
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import scipy.sparse as sp

from .._tables import QID_COLUMN_NAMES, require_pyarrow

__all__ = ["parquet_files", "ParquetChunk", "iter_parquet", "ingest_parquet", "parquet_batch_id",
           "select_features"]

DEFAULT_CHUNK_ROWS = 65_536


def parquet_files(source) -> list[str]:
    """The Parquet files of ``source``: a file, a directory (its ``*.parquet``, recursively) or a glob; name order."""
    s = os.fspath(source)
    p = Path(s)
    if p.is_dir():
        files = sorted(str(f) for f in p.rglob("*.parquet") if f.is_file())
        if not files:
            raise FileNotFoundError(f"{s} holds no *.parquet files")
        return files
    if p.is_file():
        return [s]
    files = sorted(f for f in glob.glob(s) if os.path.isfile(f))
    if not files:
        raise FileNotFoundError(f"no Parquet file matches {s}")
    return files


def _columns_hint(missing, cols, shown=50) -> str:
    """The file's columns for an error about ``missing`` ones: the closest names first (a typo is found even in a
    wide table), then the columns (all of them up to ``shown``)."""
    import difflib

    close = list(dict.fromkeys(c for m in missing for c in difflib.get_close_matches(str(m), cols, n=3, cutoff=0.6)))
    listed = cols if len(cols) <= shown else cols[:shown]
    more = f" ... ({len(cols)} columns)" if len(cols) > shown else ""
    return (f"did you mean {close}? " if close else "") + f"columns: {listed}{more}"


def select_features(columns, label: str | None, qid: str, *, features=None, prefix=None, docid=None,
                    row_columns=None) -> list[str]:
    """The feature columns: ``features`` as given, or every column starting with ``prefix``,
    or every column but the label, the qid, the doc id column and the ``row_columns`` (store column ->
    file column: weight, click, position), and never a column named like a query id.
    ``label=None``: the file has no label column (data to score only)."""
    cols = list(columns)
    named = ([("--label", label)] if label is not None else []) + [("--qid", qid)]
    named += [("--docid-column", docid)] if docid is not None else []
    named += [(f"--{k}-column", v) for k, v in (row_columns or {}).items()]
    special = {label, qid, docid, *(row_columns or {}).values()} - {None}
    for what, name in named:
        if name not in cols:
            raise KeyError(f"{what} column {name!r} is not in the file; {_columns_hint([name], cols)}")
    if features is not None:
        feats = list(features)
        missing = [f for f in feats if f not in cols]
        if missing:
            raise KeyError(f"feature column(s) {missing[:5]} are not in the file; {_columns_hint(missing, cols)}")
        for f in feats:
            if f in special:
                raise ValueError(f"column {f!r} is the label, the query id, the doc id or a weight/click/position "
                                 "column; it cannot be a feature")
    elif prefix is not None:
        feats = [c for c in cols if c.startswith(prefix) and c not in special]
        if not feats:
            raise ValueError(f"no column starts with {prefix!r}; columns: {cols[:10]}")
    else:
        feats = [c for c in cols if c not in special]
        idlike = [c for c in feats if c.lower() in QID_COLUMN_NAMES]
        if idlike:
            raise ValueError(f"column {idlike[0]!r} looks like a query id and is not --qid {qid!r}; name the "
                             "features with --features or --features-from-prefix")
    if len(set(feats)) != len(feats):
        raise ValueError("feature columns must be unique")
    if not feats:
        raise ValueError("no feature columns")
    return feats


@dataclass
class ParquetChunk:
    """Whole queries: ``X`` (rows, features) float32 (CSR when sparse), ``y`` float64, ``qid``, the
    feature names, when a doc id column was named, ``docid`` (rows,) of str, and the named row
    columns ``columns`` (store column -> (rows,) values; :mod:`streamrank.io.row_columns`)."""
    X: object
    y: np.ndarray
    qid: np.ndarray
    feature_names: list
    docid: object = None
    columns: dict = None


def _refuse_nulls(col, what, name, row0, file, why=""):
    """A null anywhere in ``col`` is an error naming its (file) row."""
    import pyarrow.compute as pc

    if col.null_count:
        row = int(pc.index(pc.is_null(col), True).as_py())
        raise ValueError(f"{file}: {what} {name!r} is null at row {row0 + row}{why}")


def _decoded(col):
    """A dictionary-encoded column as its plain values (other columns as they are)."""
    import pyarrow as pa

    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col, col.type


def _column_numpy(col, name, row0, file):
    import pyarrow as pa

    _refuse_nulls(col, "column", name, row0, file, "; expected a value in every row")
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        raise TypeError(f"{file}: column {name!r} has type {t}; expected numbers")
    return col.to_numpy(zero_copy_only=False)


def _qid_numpy(col, name, row0, file):
    import pyarrow as pa

    _refuse_nulls(col, "query id column", name, row0, file)
    col, t = _decoded(col)
    if pa.types.is_integer(t):
        return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=object)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return np.asarray([b.decode("utf-8", "surrogateescape") for b in col.to_pylist()], dtype=object)
    raise TypeError(f"{file}: query id column {name!r} has type {t}; expected integers or strings")


def _docid_numpy(col, name, row0, file):
    """Doc ids of a string (or integer) column as an object array of str; nulls refused."""
    import pyarrow as pa

    _refuse_nulls(col, "doc id column", name, row0, file, "; every row needs an id")
    col, t = _decoded(col)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=object)
    if pa.types.is_integer(t):
        return np.asarray([str(v) for v in col.to_numpy(zero_copy_only=False)], dtype=object)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        try:
            return np.asarray([b.decode("utf-8") for b in col.to_pylist()], dtype=object)
        except UnicodeDecodeError as exc:
            raise ValueError(f"{file}: doc id column {name!r} holds bytes that are not UTF-8 ({exc})") from None
    raise TypeError(f"{file}: doc id column {name!r} has type {t}; expected strings or integers")


def iter_parquet(source, *, label: str | None, qid: str, features=None, feature_prefix=None,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS, sparse: bool = False,
                 docid: str | None = None, columns: dict | None = None) -> Iterator[ParquetChunk]:
    """Stream ``source`` (file, directory, glob or list of files) as chunks of whole queries.

    ``columns``: the store's row columns mapped by name, ``{"weight": COL,
    "click": COL, "position": COL}`` (any of them), carried as
    ``ParquetChunk.columns`` (never features; nulls refused naming the row;
    the store's append checks the values).

    ``docid``: the name of a column of document ids (strings, or integers
    written in decimal) carried as ``ParquetChunk.docid`` (run files name
    documents by them, :mod:`streamrank.io.docids`); it is never a feature.

    Every file must have the same feature columns (matched by name, so their
    order may differ between files).  A query's rows must be contiguous in
    the concatenation of the files in name order: within a chunk this is
    checked by the store's append, across chunks by its same-batch check
    (:mod:`streamrank.io.groups`), so this reader keeps no per-query state.

    ``label=None`` reads a file without labels (rows to score): ``y`` is NaN.
    """
    require_pyarrow("Parquet input")
    import pyarrow.parquet as pq

    files = source if isinstance(source, (list, tuple)) else parquet_files(source)
    feats = None
    extra = list((columns or {}).items())       # (store column, file column)
    carry = None            # (X, y, q, d, *columns) of the last, maybe unfinished query
    buf: list = []
    buf_rows = 0

    def emit():
        nonlocal buf, buf_rows
        X, y, q, d, *cs = (np.concatenate([b[k] for b in buf]) if len(buf) > 1 else buf[0][k]
                           for k in range(4 + len(extra)))
        buf, buf_rows = [], 0
        return ParquetChunk(sp.csr_matrix(X) if sparse else X, y, q, feats, None if docid is None else d,
                            {k: c for (k, _), c in zip(extra, cs)} if columns else None)

    for file in files:
        pf = pq.ParquetFile(file)
        names = pf.schema_arrow.names
        if feats is None:
            feats = select_features(names, label, qid, features=features, prefix=feature_prefix, docid=docid,
                                    row_columns=columns)
        else:
            missing = [f for f in feats if f not in names]
            missing += [c for c in (label, qid) + ((docid,) if docid is not None else ())
                        if c is not None and c not in names]
            missing += [c for _, c in extra if c not in names]
            if missing:
                raise ValueError(f"{file}: lacks column(s) {missing[:5]} that the first file has; every file "
                                 "needs the same columns")
        cols = feats + [qid] + ([label] if label is not None else []) + ([docid] if docid is not None else [])
        cols += [c for c in dict.fromkeys(c for _, c in extra) if c not in cols]   # the label may be the clicks
        row0 = 0
        for rb in pf.iter_batches(batch_size=max(int(chunk_rows), 1), columns=cols, use_threads=True):
            n = rb.num_rows
            if n == 0:
                continue
            X = np.empty((n, len(feats)), dtype=np.float32)
            for j, f in enumerate(feats):
                X[:, j] = _column_numpy(rb.column(j), f, row0, file)
            if not np.isfinite(X).all():
                bad = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
                raise ValueError(f"{file}: row {row0 + bad} holds NaN, infinity or a value outside float32")
            q = _qid_numpy(rb.column(qid), qid, row0, file)
            y = (np.full(n, np.nan) if label is None else
                 np.asarray(_column_numpy(rb.column(label), label, row0, file), dtype=np.float64))
            d = (np.zeros(n, dtype=np.int8) if docid is None else
                 _docid_numpy(rb.column(docid), docid, row0, file))
            cs = [_column_numpy(rb.column(c), c, row0, file) for _, c in extra]
            row0 += n
            parts = (X, y, q, d, *cs)
            if carry is not None:
                parts = tuple(np.concatenate([c, a]) for c, a in zip(carry, parts))
                carry = None
            q = parts[2]
            # hold back the last query: it may continue in the next row group or file
            last = q[-1]
            k = len(q)
            while k > 0 and q[k - 1] == last:
                k -= 1
            if k == 0:
                carry = parts
                continue
            buf.append(tuple(a[:k] for a in parts))
            buf_rows += k
            carry = tuple(a[k:] for a in parts)
            if buf_rows >= chunk_rows:
                yield emit()
    if carry is not None:
        buf.append(carry)
    if buf:
        yield emit()


def parquet_batch_id(files, extra: str = "") -> str:
    """``<name>@<digest>``: a digest of each file's size and Parquet footer, plus the reading options."""
    require_pyarrow("Parquet input")
    import pyarrow.parquet as pq

    h = hashlib.sha256(extra.encode())
    for f in files:
        size = os.path.getsize(f)
        with open(f, "rb") as fh:   # footer: <metadata><4-byte length>PAR1
            fh.seek(max(size - 8, 0))
            tail = fh.read(8)
            if len(tail) < 8 or tail[4:] != b"PAR1":
                raise ValueError(f"{f} is not a Parquet file (no PAR1 footer)")
            mlen = int.from_bytes(tail[:4], "little")
            if mlen > size - 8:
                raise ValueError(f"{f}: corrupt Parquet footer (metadata of {mlen} bytes in a {size}-byte file)")
            fh.seek(size - 8 - mlen)
            h.update(str(size).encode())
            h.update(fh.read(mlen))
    del pq
    name = Path(files[0]).name if len(files) == 1 else f"{Path(files[0]).parent.name or '.'}/*{len(files)}"
    return f"{name}@{h.hexdigest()[:16]}"


def ingest_parquet(store_path, source, *, label: str, qid: str, features=None, feature_prefix=None,
                   sparse: bool = False, chunk_rows: int = DEFAULT_CHUNK_ROWS, batch_id: str | None = None,
                   group_identity: str = "batch", progress=None, docid: str | None = None,
                   storage_options: dict | None = None, columns: dict | None = None) -> dict:
    """Append ``source`` (one batch: a file, a directory or glob of part files) to a GroupStore.

    Creates the store (with the feature names) when it does not exist; an
    existing store must hold the same feature names (columns are matched by
    name) or none.  ``docid``: a column of document ids; a new store then
    keeps them (``GroupStore.create(docids=True)``), and a store that keeps
    them needs the column on every ingest.  ``columns``: the store's row columns by
    name (``{"click": "clicked", "position": "rank"}``, see :func:`iter_parquet`);
    a new store keeps exactly these, an existing one needs exactly its own.  Returns counts ``{"rows",
    "skipped_rows", "batches", "skipped", "batch_id"}``.  ``store_path`` may
    be a URL (``s3://…``) with its ``storage_options``.
    """
    from ._remote import is_url
    from .group_store import GroupStore
    from .row_columns import check_same_columns

    files = source if isinstance(source, (list, tuple)) else parquet_files(source)
    base = batch_id or parquet_batch_id(files, f"{label}|{qid}|{features}|{feature_prefix}|{sparse}|{chunk_rows}"
                                        + ("" if docid is None else f"|docid={docid}")
                                        + ("" if not columns else f"|columns={sorted(columns.items())}"))
    counts = {"rows": 0, "skipped_rows": 0, "batches": 0, "skipped": 0, "batch_id": base}
    url = is_url(store_path)
    p = store_path if url else Path(store_path)
    if url:                                   # a store on object storage: append to it, or create it below
        try:
            store = GroupStore.open(p, mode="a", storage_options=storage_options)
        except FileNotFoundError:
            store = None
    else:
        store = GroupStore.open(p, mode="a") if (p / "zarr.json").exists() else None
    if store is not None and store.has_docids != (docid is not None):
        raise ValueError(f"the store {p} keeps document ids: name their column (--docid-column COL)"
                         if store.has_docids else
                         f"the store {p} was created without document ids; ingest into a new store to keep "
                         f"the column {docid!r}")
    if store is not None:
        check_same_columns(store, columns, p)
    for i, chunk in enumerate(iter_parquet(files, label=label, qid=qid, features=features,
                                           feature_prefix=feature_prefix, chunk_rows=chunk_rows,
                                           sparse=sparse if store is None else store.sparse, docid=docid,
                                           columns=columns)):
        if store is None:
            if not url and p.exists() and (p.is_file() or any(p.iterdir())):
                raise FileExistsError(f"{p} exists and is not a streamrank store; choose another --store")
            store = GroupStore.create(p, len(chunk.feature_names), sparse=sparse, feature_names=chunk.feature_names,
                                      overwrite=not url and p.exists(), group_identity=group_identity,
                                      docids=docid is not None, storage_options=storage_options,
                                      row_columns=tuple(columns or ()))
        X = _to_store_order(chunk, store)
        done = store.append(X, chunk.y, chunk.qid, batch_id=f"{base}#{i}",
                            docid=None if docid is None else list(chunk.docid), **(chunk.columns or {}))
        n = len(chunk.y)
        counts["rows" if done else "skipped_rows"] += n
        counts["batches" if done else "skipped"] += 1
        if progress is not None:
            progress(n)
    return counts


def _to_store_order(chunk, store):
    """The chunk's columns in the store's feature order (by name)."""
    names = store.feature_names
    if names is None:
        if len(chunk.feature_names) != store.n_features:
            raise ValueError(f"the files have {len(chunk.feature_names)} features but the store holds "
                             f"{store.n_features}")
        return chunk.X
    if list(names) == list(chunk.feature_names):
        return chunk.X
    pos = {c: j for j, c in enumerate(chunk.feature_names)}
    missing = [f for f in names if f not in pos]
    extra = [c for c in chunk.feature_names if c not in set(names)]
    if missing or extra:
        raise ValueError(f"the files' feature columns do not match the store's: missing {missing[:5]}, "
                         f"not in the store {extra[:5]}")
    idx = [pos[f] for f in names]
    return chunk.X[:, idx] if sp.issparse(chunk.X) else np.ascontiguousarray(chunk.X[:, idx])
