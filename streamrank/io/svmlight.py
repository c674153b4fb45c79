"""Streaming reader of svmlight / LETOR text files.

Format (one example per line; Joachims' SVMlight, used by LETOR)::

    <label> [qid:<int>] <index>:<value> <index>:<value> ... [# comment]

Empty lines, comment lines, CRLF line ends, bare-CR line ends (classic Mac:
the text read before the first ``\\n`` holds a ``\\r`` and no ``\\n``) and
gzip-compressed files (by magic bytes) are accepted; a stray ``\\r`` inside a
line of an LF/CRLF file is an error naming the line (it would otherwise hide
the rest of the line).  Feature indices are 1-based by default (LETOR,
SVMlight); ``zero_based=True`` for libsvm files written from 0.  Indices must
increase strictly within a line.  A malformed line raises ``ValueError``
naming ``file:line``.

When ``n_features`` is not given it is inferred from the largest index seen,
capped by ``max_features`` (default :data:`DEFAULT_MAX_FEATURES` = 2**24):
one line with index 2147483647 must not make a 2.1-billion-feature store.
The error names the 1-based line; pass ``n_features`` (or a larger
``max_features``, or None for no cap) when the file really is that wide.

:func:`iter_svmlight` reads ``chunk_bytes`` of text at a time and yields
:class:`SvmlightChunk` ``(X, y, qid)`` whose rows end on a query-group
boundary (the rows of the last query of a chunk are carried over to the
next), so each chunk can be appended to a :class:`~streamrank.GroupStore`
directly.  Memory is bounded by ``chunk_bytes`` plus the largest query.
Files without ``qid:`` yield ``qid=None`` (one global group, rows cut
anywhere).  The bytes are parsed by one numba kernel
(:mod:`streamrank.io._svmlight_kernels`): a file is read by one parser.

Examples
--------
>>> import io, streamrank.io.svmlight as svm
>>> text = b"2 qid:1 1:0.5 3:1 # doc a\\n0 qid:1 2:1\\n1 qid:7 1:2\\n"
>>> [c.X.shape for c in svm.iter_svmlight(io.BytesIO(text))]
[(3, 3)]
>>> X, y, qid = svm.read_svmlight(io.BytesIO(text), n_features=4, dense=True)
>>> X[0].tolist(), y.tolist(), qid.tolist()
([0.5, 0.0, 1.0, 0.0], [2.0, 0.0, 1.0], [1, 1, 7])
"""
from __future__ import annotations

import gzip
import os
import zlib
from typing import Iterator, NamedTuple

import numpy as np
import scipy.sparse as sp

from . import _svmlight_kernels as _k

__all__ = ["SvmlightChunk", "iter_svmlight", "read_svmlight", "open_text_bytes", "DEFAULT_MAX_FEATURES"]

#: cap on the number of features inferred from text (``max_features=``)
DEFAULT_MAX_FEATURES = 1 << 24


class _Chunk(NamedTuple):
    X: object
    y: np.ndarray
    qid: np.ndarray | None


class SvmlightChunk(_Chunk):
    """Rows of whole queries: ``X`` (float32 dense or CSR), ``y`` float64, ``qid`` int64 or None.

    ``lines`` (an attribute, not a tuple field: ``X, y, qid = chunk`` still
    unpacks): the 1-based line of the text each row comes from (int64), or
    None — for messages such as "re-run after fixing line L".  ``n_features_seen``: 1 + the largest
    feature index parsed up to this chunk (0-based columns; 0 before any), whatever ``n_features``
    pads to — how a caller tells a file with fewer features than its target.
    """

    lines = None
    n_features_seen = 0


def open_text_bytes(source):
    """``(binary file object, name, should_close)`` for a path, a gzip path or a file object."""
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        f = open(name, "rb")
        magic = f.read(2)
        f.seek(0)
        if magic == b"\x1f\x8b":
            return gzip.GzipFile(fileobj=f, mode="rb"), name, True
        return f, name, True
    if not hasattr(source, "read"):
        raise TypeError(f"expected a path or a binary file object, got {type(source).__name__}")
    name = getattr(source, "name", None) or "<stream>"
    seekable = getattr(source, "seekable", None)
    if seekable is not None and seekable():
        pos = source.tell()
        magic = _read(source, 2, name)  # the source may itself be a (damaged) gzip stream
        source.seek(pos)
        if magic == b"\x1f\x8b":
            return gzip.GzipFile(fileobj=source, mode="rb"), str(name), True
    return source, str(name), False


def _read(f, n, name):
    """``f.read(n)``; a truncated or corrupt gzip stream becomes a ValueError naming the file."""
    try:
        return f.read(n)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ValueError(f"{name}: corrupt or truncated gzip data ({exc})") from exc


def _error(code, name, line_no, buf, pos):
    # the text of the offending line, for the message
    a = int(np.asarray(buf[:pos])[::-1].tobytes().find(b"\n")) if pos > 0 else -1
    start = pos - a if a >= 0 else 0
    end = bytes(buf[start:start + 200]).find(b"\n")
    text = bytes(buf[start:start + (end if end >= 0 else 200)]).decode("utf-8", "replace").rstrip("\r")
    if len(text) > 80:
        text = text[:77] + "..."
    return ValueError(f"{name}:{line_no}: {_k.ERRORS.get(code, 'parse error')}: {text!r}")


def _parse(buf_bytes, name, first_line, zero_based, n_features, null_value, qid_mode=-1, inferred=False,
           max_features=None, rows_before=0, first_row_line=None):
    if n_features is not None:
        max_index = int(n_features) - 1
    else:
        max_index = -1 if max_features is None else int(max_features) - 1
    buf = np.frombuffer(buf_bytes, dtype=np.uint8)
    n_nl, n_colon = _k.count_lines_colons(buf)
    cap_rows = int(n_nl) + 1
    cap_nnz = int(n_colon)
    labels = np.empty(cap_rows, dtype=np.float64)
    row_lines = np.empty(cap_rows, dtype=np.int64)
    qids = np.zeros(cap_rows, dtype=np.int64)
    indptr = np.empty(cap_rows + 1, dtype=np.int64)
    indices = np.empty(cap_nnz, dtype=np.int32)
    values = np.empty(cap_nnz, dtype=np.float64)
    has_null = null_value is not None
    cap_slow = 64 + cap_rows // 4
    while True:
        slow = np.empty((cap_slow, 4), dtype=np.int64)
        status, rows, nnz, n_lines, err_line, err_pos, qid_mode, max_col, n_slow = _k.parse_svmlight(
            buf, bool(zero_based), max_index, float(np.finfo(np.float32).max),
            float(null_value) if has_null else 0.0, has_null, int(qid_mode),
            labels, qids, indptr, indices, values, slow, row_lines)
        if status or n_slow <= cap_slow:
            break
        cap_slow = int(n_slow)
    if status:
        line_no = first_line + int(err_line)
        if status == 7 and qid_mode == 0 and rows_before + int(rows) == 1:
            # Only the file's first data row lacked qid: that row, not this one, is the odd line out.
            odd = int(row_lines[0]) + first_line if rows else first_row_line
            raise ValueError(f"{name}:{odd}: qid missing on this line but present on line {line_no}; "
                             "a LETOR file needs qid: on every line (or on none)")
        if status == 6 and n_features is None and max_features is not None:
            err = _error(status, name, line_no, buf, int(err_pos))
            raise ValueError(f"{err}: more than max_features={max_features} features, the cap on a feature "
                             "count inferred from text; pass n_features (or a larger max_features) if the "
                             "file really is that wide")
        if status == 6 and n_features is not None:
            err = _error(status, name, line_no, buf, int(err_pos))
            if inferred:
                raise ValueError(f"{err}: it exceeds the {n_features} features inferred from the first "
                                 "chunk; pass n_features")
            raise ValueError(f"{err} (n_features is {n_features}; indices are "
                             f"{'0' if zero_based else '1'}-based)")
        raise _error(status, name, line_no, buf, int(err_pos))
    if n_slow:
        # exact re-parse of the numbers off the fast path (numpy's string -> float is exact)
        sl = slow[:n_slow]
        exact = np.array([buf_bytes[a:b] for a, b in zip(sl[:, 2].tolist(), sl[:, 3].tolist())],
                         dtype=bytes).astype(np.float64)
        lab_rows = sl[:, 0] == 0
        labels[sl[lab_rows, 1]] = exact[lab_rows]
        values[sl[~lab_rows, 1]] = exact[~lab_rows]
    return (labels[:rows], qids[:rows], indptr[:rows + 1], indices[:nnz], values[:nnz],
            int(n_lines), int(qid_mode), int(max_col), row_lines[:rows] + first_line)


def _bare_cr_line_ends(head, eof):
    """True if the text's line ends are lone ``\\r`` (None: undecided, no line end seen yet).

    Decided on the text read before the first ``\\n``: CR without any LF
    means CR line ends, read as if they were ``\\n``.  In any other file a
    lone CR is left to the parser, which refuses it inside a line.
    """
    if b"\n" in head:
        return False
    if b"\r" in head[:-1] or (eof and head.endswith(b"\r")):
        return True
    return False if eof else None   # a CR as the last byte read may be the first half of a CRLF


def _to_X(indptr, indices, values, n_features, dense):
    rows = len(indptr) - 1
    if dense:
        X = np.zeros((rows, n_features), dtype=np.float32)
        _k.csr_to_dense(indptr, indices, values.astype(np.float32), X)
        return X
    return sp.csr_matrix((values.astype(np.float32), indices, indptr), shape=(rows, n_features))


def _join(parts):
    """Concatenate parsed parts (labels, qids, indptr, indices, values, lines)."""
    if len(parts) == 1:
        return parts[0]
    lab = np.concatenate([p[0] for p in parts])
    q = np.concatenate([p[1] for p in parts])
    ind = np.concatenate([p[3] for p in parts])
    val = np.concatenate([p[4] for p in parts])
    lines = np.concatenate([p[5] for p in parts])
    ips = [parts[0][2]]
    off = parts[0][2][-1]
    for p in parts[1:]:
        ips.append(p[2][1:] + off)
        off += p[2][-1]
    return lab, q, np.concatenate(ips), ind, val, lines


def iter_svmlight(source, *, n_features: int | None = None, dense: bool = True,
                  zero_based: bool = False, chunk_bytes: int = 8 << 20,
                  null_value: float | None = None, name: str | None = None,
                  max_features: int | None = DEFAULT_MAX_FEATURES) -> Iterator[SvmlightChunk]:
    """Yield :class:`SvmlightChunk` of whole queries from an svmlight/LETOR file.

    Parameters
    ----------
    source
        path (plain or gzip) or binary file object (e.g. a tar member)
    n_features : int, optional
        Number of columns.  If None it is inferred from the first chunk (the
        largest index seen there); a later line with a larger index then
        raises, asking for ``n_features``.
    dense : bool
        ``X`` as a dense float32 array (LETOR: every feature present) or a
        float32 CSR matrix.
    zero_based : bool
        Feature indices start at 0 (default: 1, as in LETOR/SVMlight).
    chunk_bytes : int or None
        Text read per step; memory is bounded by this plus the largest query
        (None: the whole file at once).
    null_value : float, optional
        Substitute for ``NULL`` values (LETOR 3.0 ``Feature-null``); by
        default they are an error.
    name : str, optional
        Name of the source in error messages.
    max_features : int or None
        Cap on an inferred ``n_features`` (default 2**24): a larger index
        raises ``ValueError`` naming ``file:line``.  None: no cap.  Ignored
        when ``n_features`` is given.
    """
    chunk_bytes = -1 if chunk_bytes is None else int(chunk_bytes)
    if chunk_bytes == 0 or chunk_bytes < -1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    if n_features is not None and int(n_features) < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features}")
    if max_features is not None and int(max_features) < 1:
        raise ValueError(f"max_features must be >= 1 or None, got {max_features}")
    f, fname, close = open_text_bytes(source)
    fname = name or fname
    nf = None if n_features is None else int(n_features)
    qid_mode = -1
    line0 = 1
    carry = b""
    rows_seen = 0  # data rows parsed so far, and the line of the first: a qid mismatch names the odd line
    first_row_line = None
    pending = []  # parts (labels, qids, indptr, indices, values, lines) of the last, maybe unfinished, query
    cr_mode = None  # True: the file's line ends are bare CR (decided at its first line end)
    seen_cols = 0   # 1 + the largest feature index parsed so far (chunk.n_features_seen)
    try:
        eof = False
        nxt = _read(f, chunk_bytes, fname)
        while not eof:
            data = nxt
            if data:
                nxt = _read(f, chunk_bytes, fname)
            eof = not nxt
            if cr_mode is None and data:
                cr_mode = _bare_cr_line_ends(carry + data, eof)
                if cr_mode:
                    carry = carry.replace(b"\r", b"\n")
            if cr_mode:
                data = data.replace(b"\r", b"\n")
            if eof:
                # the last piece of text (may lack a final newline)
                text = carry + data
                carry = b""
            else:
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry += data
                    continue
                text = carry + data[:cut + 1]
                carry = data[cut + 1:]
            if line0 == 1 and text.startswith(b"\xef\xbb\xbf"):
                text = text[3:]  # UTF-8 byte order mark
            if not text and not pending:
                continue
            if text:
                lab, q, ip, ind, val, n_lines, mode, max_col, lines = _parse(
                    text, fname, line0, zero_based, nf, null_value, qid_mode, inferred=n_features is None,
                    max_features=None if max_features is None else int(max_features),
                    rows_before=rows_seen, first_row_line=first_row_line)
                qid_mode = mode
                if first_row_line is None and len(lines):
                    first_row_line = int(lines[0])
                rows_seen += len(lab)
                seen_cols = max(seen_cols, max_col + 1)
                if nf is None and max_col >= 0:
                    nf = max_col + 1
                line0 += n_lines
            else:
                lab = np.zeros(0)
                q = np.zeros(0, np.int64)
                ip = np.zeros(1, np.int64)
                ind = np.zeros(0, np.int32)
                val = np.zeros(0)
                lines = np.zeros(0, np.int64)
            if pending:
                # the rows of the held-back query (in parts: a huge query is joined once, not
                # re-copied at every chunk)
                if not eof and len(q) and q[-1] == pending[0][1][0] and np.all(q == q[-1]):
                    pending.append((lab, q, ip, ind, val, lines))  # the query goes on
                    continue
                pending.append((lab, q, ip, ind, val, lines))
                lab, q, ip, ind, val, lines = _join(pending)
                pending = []
            rows = len(lab)
            if rows == 0:
                continue
            if qid_mode == 1 and not eof:
                # hold back the last query: it may continue in the next chunk
                other = np.flatnonzero(q != q[-1])
                r = int(other[-1]) + 1 if other.size else 0
                p0 = ip[r]
                pending = [(lab[r:], q[r:], ip[r:] - p0, ind[p0:], val[p0:], lines[r:])]
                lab, q, ip, ind, val, lines = lab[:r], q[:r], ip[:r + 1], ind[:p0], val[:p0], lines[:r]
                if r == 0:
                    continue
            if nf is None:
                raise ValueError(f"{fname}: no feature before line {line0}, so the number of features "
                                 "cannot be inferred; pass n_features")
            X = _to_X(ip, ind, val, nf, dense)
            chunk = SvmlightChunk(X, lab, q.copy() if qid_mode == 1 else None)
            chunk.lines = lines
            chunk.n_features_seen = seen_cols
            yield chunk
    finally:
        if close:
            f.close()


def read_svmlight(source, *, n_features: int | None = None, dense: bool = False, zero_based: bool = False,
                  null_value: float | None = None, name: str | None = None,
                  max_features: int | None = DEFAULT_MAX_FEATURES):
    """Read a whole svmlight/LETOR file: ``(X, y, qid)`` (``qid`` None without ``qid:``).

    Unlike :func:`iter_svmlight`, ``n_features=None`` is inferred from the
    whole file.  For files larger than memory use :func:`iter_svmlight`.

    ``dense=True`` never builds a CSR matrix (the dense rows are scattered
    straight into ``X``: less memory).  Its ``X`` is the one this function returned when it
    went through CSR's ``toarray()``, bit for bit: ``toarray`` added each
    stored value to a zero, so a value that rounds to float32 ``-0.0`` (say
    ``-1e-50``; an exact zero is not stored) became ``+0.0``, and ``+ 0.0``
    on the scattered array does the same (and leaves every other float32,
    NaN and infinities included, as it is).
    """
    parts = list(iter_svmlight(source, n_features=n_features, dense=dense, zero_based=zero_based,
                               null_value=null_value, name=name, chunk_bytes=None, max_features=max_features))
    if not parts:
        nf = n_features or 0
        X = np.zeros((0, nf), np.float32) if dense else sp.csr_matrix((0, nf), dtype=np.float32)
        return X, np.zeros(0), None
    if dense:
        X = np.concatenate([p.X for p in parts]) if len(parts) > 1 else parts[0].X
        X += np.float32(0.0)        # -0.0 -> +0.0, as toarray() gave (0 + v); nothing else changes
    else:
        X = sp.vstack([p.X for p in parts], format="csr") if len(parts) > 1 else parts[0].X
    y = np.concatenate([p.y for p in parts])
    qid = None if parts[0].qid is None else np.concatenate([p.qid for p in parts])
    return X, y, qid
