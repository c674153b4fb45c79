"""Document ids: read from LETOR ``#docid = ...`` comments, kept (optionally) in a GroupStore.

A store created with ``GroupStore.create(..., docids=True)`` holds one UTF-8
id per row in two appendable arrays (a CSR of bytes)::

    docid/offsets   (m + 1,) int64   bytes of row r: offsets[r]:offsets[r+1] (global byte index)
    docid/bytes     (total,) uint8   the ids, UTF-8, concatenated

appended with every batch (``append(..., docid=[...])``), counted in the
commit record (``committed["docid_bytes"]``), checksummed with the batch
(components ``docid.bytes`` and ``docid.len``) and cut back by the torn-tail
repair like every other array.  Ids are what run files (``streamrank predict
--run``) name documents by.

:func:`iter_letor_docids` streams ``(line, qid, docid)`` for the data lines of a
LETOR/svmlight text, the lines :func:`streamrank.io.svmlight.iter_svmlight`
turns into rows (comment-only and blank lines are skipped), in file order.
"""
from __future__ import annotations

import contextlib
import re
import tarfile
from typing import Iterator

import numpy as np

__all__ = ["DOCID_ARRAYS", "MAX_DOCID_BYTES", "create_docid_arrays", "check_docids", "append_docids",
           "hash_docids", "read_docids", "open_text_source", "iter_letor_docids", "take_docids"]

DOCID_ARRAYS = {"docid/offsets": ("int64", 1), "docid/bytes": ("uint8", 1)}
#: longest id accepted (bytes of UTF-8); a URL fits, a document does not
MAX_DOCID_BYTES = 4096
_CHUNK = 1 << 20
_DOCID = re.compile(rb"\bdocid\s*=\s*(\S+)")
_QID = re.compile(rb"(?:^|\s)qid:(\S+)")


def create_docid_arrays(root, compressors) -> None:
    """The two empty arrays of a new store with doc ids (``compressors(itemsize)`` as the store's)."""
    off = root.create_array("docid/offsets", shape=(1,), chunks=(_CHUNK,), dtype="int64",
                            compressors=compressors(8), fill_value=0)
    off[:] = np.zeros(1, dtype=np.int64)
    root.create_array("docid/bytes", shape=(0,), chunks=(4 * _CHUNK,), dtype="uint8",
                      compressors=compressors(1), fill_value=0)


def check_docids(docid, n_rows: int, name: str = "docid"):
    """``(lengths (n,) int64, bytes (total,) uint8)`` of ``n_rows`` ids, or a ValueError naming the row."""
    if isinstance(docid, (str, bytes)) or not hasattr(docid, "__len__"):
        raise TypeError(f"{name} must be a sequence of {n_rows} strings, got {type(docid).__name__}")
    if len(docid) != n_rows:
        raise ValueError(f"{name} has {len(docid)} ids; X has {n_rows} rows")
    enc = []
    for r, d in enumerate(docid):
        if not isinstance(d, (str, np.str_)):
            raise TypeError(f"{name}[{r}] is {type(d).__name__}; expected str")
        b = str(d).encode("utf-8")
        if not b or len(b) > MAX_DOCID_BYTES or any(c in b for c in b" \t\r\n"):
            raise ValueError(f"{name}[{r}] = {str(d)[:40]!r}: an id is 1..{MAX_DOCID_BYTES} bytes without "
                             "whitespace (run files separate fields by spaces)")
        enc.append(b)
    lengths = np.fromiter((len(b) for b in enc), dtype=np.int64, count=len(enc))
    data = np.frombuffer(b"".join(enc), dtype=np.uint8)
    return lengths, data


def hash_docids(hasher, lengths, data) -> None:
    hasher.update("docid.len", np.ascontiguousarray(lengths, dtype=np.int64))
    hasher.update("docid.bytes", np.ascontiguousarray(data, dtype=np.uint8))


def append_docids(arrays: dict, lengths, data, r0: int, b0: int, hasher) -> int:
    """Write ids past the committed ``r0`` rows / ``b0`` bytes; returns the new byte count (no commit)."""
    hash_docids(hasher, lengths, data)
    k, b1 = len(lengths), b0 + int(data.size)
    if data.size:
        arrays["docid/bytes"].resize((b1,))
        arrays["docid/bytes"][b0:b1] = data
    if k:
        arrays["docid/offsets"].resize((r0 + k + 1,))
        arrays["docid/offsets"][r0 + 1:r0 + k + 1] = b0 + np.cumsum(lengths)
    return b1


def read_docids(arrays: dict, r0: int, r1: int, total_bytes: int, path="store") -> list:
    """The ids of rows r0:r1 (checked: offsets increasing within the committed bytes, valid UTF-8)."""
    off = np.asarray(arrays["docid/offsets"][r0:r1 + 1], dtype=np.int64)
    if off.size != r1 - r0 + 1 or np.any(np.diff(off) < 1) or off[0] < 0 or off[-1] > total_bytes:
        from .schema import StoreFormatError

        raise StoreFormatError(f"{path}: array 'docid/offsets' is inconsistent for rows {r0}:{r1}")
    raw = np.asarray(arrays["docid/bytes"][int(off[0]):int(off[-1])], dtype=np.uint8).tobytes()
    rel = off - off[0]
    try:
        return [raw[rel[i]:rel[i + 1]].decode("utf-8") for i in range(r1 - r0)]
    except UnicodeDecodeError as exc:
        from .schema import StoreFormatError

        raise StoreFormatError(f"{path}: a doc id of rows {r0}:{r1} is not UTF-8 ({exc})") from None


@contextlib.contextmanager
def open_text_source(src, member: str | None = None):
    """A binary file object of a plain/gzip text or of the ``member`` of a tar archive."""
    if member is not None:
        with tarfile.open(src, "r:*") as tf:
            try:
                f = tf.extractfile(member)
            except KeyError:
                raise FileNotFoundError(f"{src} has no member {member!r}") from None
            if f is None:
                raise ValueError(f"{src}:{member} is not a regular file")
            with f:
                yield f
        return
    from .svmlight import open_text_bytes

    f, _name, close = open_text_bytes(src)
    try:
        yield f
    finally:
        if close:
            f.close()


def iter_letor_docids(f) -> Iterator[tuple]:
    """``(line number, qid token or None, docid or None)`` of every data line of a LETOR/svmlight text.

    ``f`` is a binary file object (:func:`open_text_source`).  ``docid`` is the
    token after ``docid =`` in the line's ``#`` comment (LETOR 4.0:
    ``... #docid = GX000-00-0000000 inc = 1 prob = 0.0246``).
    """
    line_no = 0
    for raw in f:
        if line_no == 0 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        text = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")   # CRLF, and bare-CR files
        lines = text.split(b"\n")
        for line in (lines[:-1] if text.endswith(b"\n") else lines):
            line_no += 1
            body, _, comment = line.partition(b"#")
            if not body.strip():
                continue
            q = _QID.search(body)
            d = _DOCID.search(comment)
            yield (line_no, q.group(1).decode("ascii", "replace") if q else None,
                   d.group(1).decode("utf-8", "replace") if d else None)


def take_docids(stream, qid, name: str, lines=None) -> list:
    """The next ``len(qid)`` ids of ``stream`` (:func:`iter_letor_docids`), checked against the rows.

    Each id's line must carry the row's qid and, when the parser reports its
    rows' line numbers (``lines``), be that very line.
    """
    out = []
    for r in range(len(qid)):
        item = next(stream, None)
        if item is None:
            raise ValueError(f"{name}: fewer data lines with doc ids than rows parsed")
        line_no, q, d = item
        if (q is None or q.strip() != str(int(qid[r]))) or (lines is not None and int(lines[r]) != line_no):
            raise ValueError(f"{name}:{line_no}: the doc-id reader and the parser disagree (qid {q!r} vs "
                             f"{int(qid[r])}{'' if lines is None else f', line {int(lines[r])}'})")
        if d is None:
            raise ValueError(f"{name}:{line_no}: no '#docid = ...' comment on this line (ingest without --docids "
                             "to store no document ids)")
        out.append(d)
    return out
