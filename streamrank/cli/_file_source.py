"""``predict`` / ``evaluate`` straight from a LETOR/svmlight text or a Parquet file: streamed, never ingested.

:class:`FileSource` reads the file once per ``blocks()`` call, a chunk of
whole queries at a time (:func:`streamrank.io.svmlight.iter_svmlight`,
:func:`streamrank.io.parquet.iter_parquet`), and yields
:class:`~streamrank.io.blocks.Block` objects, so the metrics and the run
writer take it as they take a store.  Memory is one chunk plus the largest
query; nothing is written beside the file.

The file must match the model: text with a larger feature index than the
model's feature count is an error naming its 1-based line; text whose
largest index (in its first chunk) is below the model's count is an error
unless ``--n-features`` pads it on purpose.  Parquet features are matched
by name when the model knows its feature names (``feature_names_in_``).

Documents are named (``predict --run``) by the doc ids of the file when it
has them: a LETOR line's ``#docid = ID`` comment (MQ2008, OHSUMED), a
Parquet ``--docid-column``; a row without one is ``row<N>`` (N: its row in
the file, from 0).  A Parquet file without a label column is read for
``predict`` (the labels are NaN); ``evaluate`` needs ``--label``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["FileSource", "open_data"]


class FileSource:
    """A text or Parquet file as a block source for one model (see the module doc)."""

    def __init__(self, path, member, fmt, *, n_features, args, feature_names=None, need_labels=True):
        self.path, self.member, self.fmt = str(path), member, fmt
        self.need_labels = bool(need_labels)
        self.name = f"{path}:{member}" if member else str(path)
        self.n_features = int(n_features)
        self.args = args
        self.feature_names = feature_names
        self.n_rows = None          # known after a pass
        self.n_groups = None
        self.progress = None        # a Progress updated with the rows of every block

    def __repr__(self):
        return f"FileSource({self.name!r}, {self.fmt})"

    # ---------------------------------------------------------------- text
    def _text_chunks(self):
        from ..io.svmlight import iter_svmlight, open_text_bytes
        from ._ingest import _check_feature_count

        tf = None
        if self.member is not None:
            import tarfile

            tf = tarfile.open(self.path, "r:*")
            try:
                f = tf.extractfile(tf.getmember(self.member))
            except KeyError:
                tf.close()
                raise FileNotFoundError(f"{self.path} has no member {self.member!r}") from None
            close = True
        else:
            if self.path.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")):
                raise ValueError(f"{self.path} is a tar archive: name the member as {self.path}:PATH/IN/ARCHIVE.txt")
            f, _, close = open_text_bytes(self.path)
        padded = getattr(self.args, "n_features", None) is not None
        ids = self._docid_reader() if self.with_docids else None
        try:
            chunks = iter_svmlight(f, n_features=self.n_features, dense=True, name=self.name,
                                   chunk_bytes=int(getattr(self.args, "chunk_mb", 8.0) * 2**20),
                                   null_value=getattr(self.args, "null_value", None))
            for i, chunk in enumerate(chunks):
                if chunk.qid is None:
                    raise ValueError(f"{self.name}: LETOR lines must carry qid: (got a line without it)")
                if i == 0 and not padded:
                    _check_feature_count(chunk, self.n_features, self.name, "the model")
                yield chunk.X, chunk.y, chunk.qid, (None if ids is None else _text_docids(ids, chunk, self.name))
        finally:
            if close:
                f.close()
            if tf is not None:
                tf.close()
            if ids is not None:
                ids.close()

    def _docid_reader(self):
        """``(line, qid, docid or None)`` of each data line, read by a second reader of the same text."""
        from ..io.docids import iter_letor_docids, open_text_source

        with open_text_source(self.path, self.member) as fh:
            yield from iter_letor_docids(fh)

    # ------------------------------------------------------------- parquet
    def _parquet_chunks(self, max_rows):
        from ..io.parquet import iter_parquet, parquet_files

        a = self.args
        if self.need_labels and not a.label:
            raise ValueError(f"{self.path} is Parquet: evaluating needs the labels; name the label and query id "
                             "columns with --label COL --qid COL")
        if not a.qid:
            raise ValueError(f"{self.path} is Parquet: name the query id column with --qid COL")
        docid = getattr(a, "docid_column", None) if self.with_docids else None
        features = a.features if isinstance(getattr(a, "features", None), list) else None
        if features is None and not getattr(a, "features_from_prefix", None) and self.feature_names is not None:
            features = list(self.feature_names)          # matched by name, in the model's order
        for chunk in iter_parquet(parquet_files(self.path), label=a.label or None, qid=a.qid, features=features,
                                  feature_prefix=getattr(a, "features_from_prefix", None), chunk_rows=max_rows,
                                  docid=docid):
            if chunk.X.shape[1] != self.n_features:
                raise ValueError(f"{self.path}: {chunk.X.shape[1]} feature columns, but the model takes "
                                 f"{self.n_features}; name them with --features a,b,c or --features-from-prefix P")
            yield chunk.X, chunk.y, chunk.qid, None if docid is None else [str(d) for d in chunk.docid]

    # --------------------------------------------------------------- blocks
    #: read the documents' ids beside the rows (``predict --run`` sets it; a second reader of a text)
    with_docids = False

    def blocks(self, max_rows=65_536, **_):
        for block, _names in self.blocks_with_docids(max_rows):
            yield block

    def blocks_with_docids(self, max_rows=65_536):
        """``(Block, names)``: ``names`` the documents of the block's rows, their id or ``row<N>``."""
        from ..io.blocks import Block

        chunks = self._text_chunks() if self.fmt == "letor" else self._parquet_chunks(max(int(max_rows), 1))
        row = group = 0
        for X, y, q, ids in chunks:
            n = len(y)
            if n == 0:
                continue
            starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
            ptr = np.r_[starts, n].astype(np.int64)
            names = [f"row{row + r}" if ids is None or ids[r] is None else ids[r] for r in range(n)]
            yield Block(X=X, y=np.asarray(y, dtype=np.float64), group_ptr=ptr, qid=q[starts], start=row,
                        group_start=group), names
            row += n
            group += len(starts)
            if self.progress is not None:
                self.progress.update(n)
        self.n_rows, self.n_groups = row, group


def _text_docids(stream, chunk, name: str) -> list:
    """The doc ids (None where a line has no ``#docid =`` comment) of a parsed chunk's rows.

    The id reader must agree with the parser on every row's line and qid,
    so an id can never name another row."""
    out = []
    lines = chunk.lines
    for r in range(len(chunk.y)):
        item = next(stream, None)
        if item is None:
            raise ValueError(f"{name}: the doc-id reader found fewer data lines than the parser")
        line_no, q, d = item
        if q is None or q.strip() != str(int(chunk.qid[r])) or (lines is not None and int(lines[r]) != line_no):
            raise ValueError(f"{name}:{line_no}: the doc-id reader and the parser disagree (qid {q!r} vs "
                             f"{int(chunk.qid[r])}{'' if lines is None else f', line {int(lines[r])}'})")
        out.append(d)
    return out


def open_data(path, args, model, *, need_labels=True):
    """``--store``/``--data`` of predict and evaluate: ``(kind, source)`` with kind 'group', 'tuple' or 'file'.

    A zarr directory is opened as a store; a file is detected by its content
    (:mod:`streamrank.cli._formats`) and read as a :class:`FileSource`.
    """
    from ._formats import detect_format
    from ._ingest import _split_member
    from ._stores import _is_url, _kind_of, _open_store, _resolve_pointer

    if _is_url(path):                        # a store on object storage
        return _kind_of(path), _open_store(path)
    p = _resolve_pointer(path)
    if p.is_dir() and (p / "zarr.json").exists():
        return _kind_of(p), _open_store(p)
    path_, member = _split_member(str(path))
    fmt = detect_format(path_, member)
    if fmt == "zarr":
        return _kind_of(path_), _open_store(path_)      # names what the directory lacks
    if fmt == "npz":
        raise ValueError(f"{path_} is an .npz archive; predict and evaluate read a store, LETOR/svmlight text "
                         "or Parquet (ingest the .npz into a store first)")
    if type(model).__name__ == "SparseSGDRanker":
        raise ValueError("an sgd-bilinear model scores (query, item) tuples: pass a tuple store as --store")
    nf = getattr(model, "n_features_in_", None)
    if nf is None:
        raise ValueError(f"{type(model).__name__} does not score rows of features; give it a store it takes")
    nf_given = getattr(args, "n_features", None)
    if nf_given is not None and int(nf_given) != int(nf):
        raise ValueError(f"--n-features {nf_given}, but the model was trained on {nf} features")
    names = getattr(model, "feature_names_in_", None)
    return "file", FileSource(path_, member, fmt, n_features=nf, args=args, need_labels=need_labels,
                              feature_names=None if names is None else [str(n) for n in names])


def describe(source) -> str:
    return source.name if isinstance(source, FileSource) else str(Path(getattr(source, "path", source)))
