"""Row-chunked reading of ``.npz`` archives of ``(X, y, qid)`` (a day file of the nightly pipeline).

``np.load`` of an ``.npz`` member reads the array whole (a deflated member
has to be inflated whole; ``mmap_mode`` is ignored for archives).  Both
kinds of member are, however, a stream: a ``.npy`` header followed by the
C-order bytes.  :func:`iter_npz` opens the ``X``, ``y`` and ``qid`` members
side by side (``zipfile`` inflates a deflated member as it is read; a stored
one is a plain read) and yields whole query groups, ``chunk_rows`` rows at a
time: memory is one chunk plus the largest query, whatever the file size,
for compressed (``np.savez_compressed``) and uncompressed (``np.savez``)
archives alike.  A stored member could also be memory-mapped at its offset,
but that saves only one copy per chunk and does not help deflated members,
so one code path serves both.

Fortran-ordered arrays cannot be read by rows; they (and only they) are
loaded whole.  Object arrays are refused (no pickle).
"""
from __future__ import annotations

import zipfile
from typing import Iterator

import numpy as np
from numpy.lib import format as npf

__all__ = ["iter_npz", "npz_has_docids"]

NEEDED = ("X", "y", "qid")


class _RowStream:
    """Rows of one ``.npy`` member of an open zip archive, read in order."""

    def __init__(self, zf, name, path):
        self.name = name
        self._f = zf.open(name + ".npy")
        version = npf.read_magic(self._f)
        if version == (1, 0):
            shape, fortran, dtype = npf.read_array_header_1_0(self._f)
        elif version == (2, 0):
            shape, fortran, dtype = npf.read_array_header_2_0(self._f)
        else:  # (3, 0): utf-8 header, same layout
            shape, fortran, dtype = npf._read_array_header(self._f, version)
        if dtype.hasobject:
            raise ValueError(f"{path}: array {name!r} holds Python objects; only numeric arrays are read "
                             "(no pickle)")
        if len(shape) == 0:
            raise ValueError(f"{path}: array {name!r} is a scalar; expected one entry per row")
        self.shape, self.dtype = tuple(shape), dtype
        self._whole = None
        if fortran and len(shape) > 1:   # column-major: rows are not contiguous, read it whole
            self._whole = np.asarray(np.load(zf.open(name + ".npy"), allow_pickle=False))
        self._row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        self._pos = 0

    def read(self, k: int) -> np.ndarray:
        if self._whole is not None:
            out = self._whole[self._pos:self._pos + k]
            self._pos += k
            return out
        want = k * self._row_bytes
        parts, got = [], 0
        while got < want:
            b = self._f.read(want - got)
            if not b:
                raise ValueError(f"array {self.name!r} ends after {self._pos} + {got // max(self._row_bytes, 1)} "
                                 f"rows; its header promised {self.shape[0]}")
            parts.append(b)
            got += len(b)
        self._pos += k
        buf = parts[0] if len(parts) == 1 else b"".join(parts)
        return np.frombuffer(buf, dtype=self.dtype).reshape((k,) + self.shape[1:])

    def close(self):
        self._f.close()


def _open(path):
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ValueError(f"{path} is not a .npz archive of X, y, qid ({type(exc).__name__})") from None


def npz_has_docids(path) -> bool:
    """Whether the archive holds a ``docid`` array (document ids, one per row)."""
    with _open(path) as zf:
        return "docid.npy" in zf.namelist()


def _docid_strings(a, path):
    """Rows of a fixed-width ``docid`` array (numpy str ``<U`` or UTF-8 bytes ``S``) as a list of str."""
    if a.dtype.kind == "U":
        return [str(v) for v in a]
    if a.dtype.kind == "S":
        try:
            return [bytes(v).decode("utf-8") for v in a]
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: array 'docid' holds bytes that are not UTF-8 ({exc})") from None
    if a.dtype.kind in "iu":
        return [str(int(v)) for v in a]
    raise TypeError(f"{path}: array 'docid' has dtype {a.dtype}; expected strings (np.str_ / bytes) or integers")


def iter_npz(path, *, chunk_rows: int = 65_536, chunk_bytes: int | None = None,
             docids: bool = False, columns: dict | None = None) -> Iterator[tuple]:
    """Yield ``(X, y, qid)`` chunks of whole query groups from an ``.npz`` with arrays X, y, qid.

    ``docids=True``: the archive's ``docid`` array (1-D, one id per row:
    ``np.savez(..., docid=np.array(ids))`` stores a fixed-width str array, no
    pickle) is read alongside and every chunk is ``(X, y, qid, docid)`` with
    docid a list of str.  ``columns``: the store's row columns mapped to arrays
    of the archive, ``{"click": "click", "position": "position"}`` (1-D, one
    value per row, read in the same chunks): every chunk then ends with a dict
    store column -> values (:mod:`streamrank.io.row_columns`).

    Chunks hold about ``chunk_rows`` rows (with ``chunk_bytes``: as many rows
    as fit in that many bytes of X, y and qid, from the arrays' headers): the rows of the last query of a
    chunk are carried over to the next one (a query larger than a chunk grows
    that chunk).  ``qid`` must keep each query's rows contiguous (as a
    :class:`~streamrank.GroupStore` requires); the arrays are returned as
    stored (the store's ``append`` validates and casts them).
    """
    chunk_rows = int(chunk_rows)
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    if chunk_bytes is not None and int(chunk_bytes) < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    with _open(path) as zf:
        names = {n[:-4] for n in zf.namelist() if n.endswith(".npy")}
        missing = [k for k in NEEDED if k not in names]
        if docids and "docid" not in names:
            missing.append("docid")
        extra = list((columns or {}).items())
        missing += [a for _, a in extra if a not in names]
        if missing:
            raise ValueError(f"{path}: .npz needs arrays X, y, qid{', docid' if docids else ''}; missing {missing}")
        arrays = NEEDED + (("docid",) if docids else ()) + tuple(a for _, a in extra)
        streams = [_RowStream(zf, k, path) for k in arrays]
        try:
            X, y, q = streams[:3]
            n = X.shape[0]
            if len(X.shape) != 2:
                raise ValueError(f"{path}: X must be 2-D (rows, features), got shape {X.shape}")
            for s in streams[1:]:
                if s.shape[0] != n:
                    raise ValueError(f"{path}: {s.name} has {s.shape[0]} rows but X has {n}")
            if docids and len(streams[3].shape) != 1:
                raise ValueError(f"{path}: docid must be 1-D (one id per row), got shape {streams[3].shape}")
            for st in streams[3 + docids:]:
                if len(st.shape) != 1:
                    raise ValueError(f"{path}: {st.name} must be 1-D (one value per row), got shape {st.shape}")
            if chunk_bytes is not None:
                chunk_rows = max(1, int(chunk_bytes) // max(1, sum(s._row_bytes for s in streams)))
            carry = None
            for a in range(0, n, chunk_rows):
                k = min(chunk_rows, n - a)
                parts = tuple(st.read(k) for st in streams)
                if carry is not None:
                    parts = tuple(np.concatenate((c, p)) for c, p in zip(carry, parts))
                    carry = None
                if a + k < n:   # hold back the last query: it may go on in the next chunk
                    qc = parts[2]
                    qc1 = np.asarray(qc).reshape(len(qc), -1)[:, 0] if np.ndim(qc) > 1 else qc
                    other = np.flatnonzero(qc1 != qc1[-1])
                    cut = int(other[-1]) + 1 if other.size else 0
                    carry = tuple(p[cut:] for p in parts)
                    if cut == 0:
                        continue
                    parts = tuple(p[:cut] for p in parts)
                yield _chunk(parts, docids, extra, path)
            if carry is not None and len(carry[0]):  # pragma: no cover - the last chunk takes the carry
                yield _chunk(carry, docids, extra, path)
        finally:
            for s in streams:
                s.close()


def _chunk(parts, docids, extra, path):
    """``(X, y, qid[, docid][, {store column: values}])`` of a chunk's parts."""
    out = parts[:3] + ((_docid_strings(parts[3], path),) if docids else ())
    if extra:
        out += ({k: v for (k, _), v in zip(extra, parts[3 + docids:])},)
    return out
