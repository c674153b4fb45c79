"""What a file on the command line holds, told by its content (magic bytes), not by its name.

``streamrank ingest``, ``predict`` and ``evaluate`` read a source's first
bytes before choosing a reader (:func:`detect_format`):

==============================  ===========================================
content                         format
==============================  ===========================================
``PAR1``                        ``parquet``
``PK\\x03\\x04`` (a zip)          ``npz`` (arrays X, y, qid)
a directory with ``zarr.json``  ``zarr`` (a GroupStore or TupleStore)
a directory of ``*.parquet``    ``parquet``
gzip / bzip2 / xz / tar         ``letor`` (compressed text, or a tar archive:
                                name the member as ``ARCHIVE:MEMBER``)
text (UTF-8, no NUL bytes)      ``letor`` (LETOR / svmlight lines)
==============================  ===========================================

Text whose first line is comma- or tab-separated values without a single ``index:value`` pair (CSV, TSV) is
refused as an unsupported format (exit 6), not parsed as LETOR lines with a bad label.

Anything else (a ``.npy`` array, HDF5, an image, any binary file) is a
``ValueError`` that names what the file looks like and lists the supported
formats — the file's bytes are never printed.  An explicit ``--format`` that
contradicts the content is refused the same way.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SUPPORTED", "detect_format", "sniff"]

SUPPORTED = ("supported: LETOR/svmlight text (plain, .gz, or ARCHIVE.tar.gz:MEMBER), .npz with arrays X, y, qid, "
             "Parquet (a file, directory or glob), or a zarr store")

_NAMES = {"letor": "LETOR/svmlight text", "npz": "a .npz archive", "parquet": "a Parquet file",
          "zarr": "a zarr store (a directory)"}

_MAGIC = (
    (b"PAR1", "parquet"),
    (b"PK\x03\x04", "npz"), (b"PK\x05\x06", "npz"),
    (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
    (b"\x93NUMPY", "a .npy array (ingest takes an .npz of X, y, qid)"),
    (b"\x89HDF", "an HDF5 file"),
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"%PDF", "a PDF document"),
    (b"\x7fELF", "an executable"), (b"SQLite format 3", "an SQLite database"),
)


def _binary(head: bytes) -> bool:
    """Text has no NUL byte and few control characters; a UTF-8 error in the middle of a
    multi-byte character at the end of ``head`` does not count."""
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:
            return True
    ctrl = sum(1 for b in head if b < 9 or 13 < b < 32)
    return ctrl > max(1, len(head) // 100)


def sniff(path) -> str:
    """``parquet``, ``npz``, ``gzip``, ``bzip2``, ``xz``, ``tar``, ``text`` or a description of another binary."""
    with open(path, "rb") as fh:
        head = fh.read(8192)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if len(head) > 262 and head[257:262] == b"ustar":
        return "tar"
    return "binary data" if _binary(head) else "text"


def _decompressed_head(path, kind) -> bytes:
    import bz2
    import gzip
    import lzma

    opener = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}[kind]
    try:
        with opener(path, "rb") as fh:
            return fh.read(8192)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise ValueError(f"{path}: corrupt or truncated {kind} data ({exc}); {SUPPORTED}") from None


def _delimited(head: bytes) -> str | None:
    """"CSV" or "TSV" when the first data line of a text has comma- or tab-separated fields and no svmlight
    ``index:value`` pair, else None."""
    import re

    for line in head.decode("utf-8", "replace").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if re.search(r"(^|\s)\S+:\S+", line):
            return None
        return "CSV" if "," in line else "TSV" if "\t" in line else None
    return None


def detect_format(path, member=None, given=None) -> str:
    """The reader for ``path``: 'letor', 'npz', 'parquet' or 'zarr' (see the module doc).

    ``given``: the user's ``--format``; checked against the content (a
    Parquet file read as text would print binary garbage).  A path that does
    not exist and is not a glob raises ``FileNotFoundError``.
    """
    s = os.fspath(path)
    p = Path(s)
    if not p.exists():
        if any(c in s for c in "*?["):
            return given or "parquet"        # a glob of Parquet part files
        raise FileNotFoundError(f"source {s} does not exist")
    if p.is_dir():
        if (p / "zarr.json").exists():
            found = "zarr"
        elif any(p.rglob("*.parquet")):
            found = "parquet"
        else:
            found = "zarr"                  # the zarr reader names what is missing
        if given is not None and given != found and given != "zarr":
            raise ValueError(f"{s} is a directory, not {_NAMES[given]}; {SUPPORTED}")
        return given or found
    kind = sniff(p)
    if kind in ("gzip", "bzip2", "xz"):
        if member is not None:
            found = "letor"                  # a member of a compressed tar: text, checked when read
        else:
            inner = _decompressed_head(p, kind)
            if len(inner) > 262 and inner[257:262] == b"ustar":
                found = "letor"              # a tar archive: the text reader asks for the member
            elif _binary(inner):
                raise ValueError(f"{s}: {kind}-compressed binary data, not LETOR/svmlight text; {SUPPORTED}")
            else:
                found = "letor"
    elif kind in ("tar", "text"):
        found = "letor"
        if kind == "text":
            with open(p, "rb") as fh:
                table = _delimited(fh.read(8192))
            if table is not None:
                from ._common import Unsupported

                raise Unsupported(f"{s} looks like {table} (delimited columns, no index:value pairs), not a format "
                                  f"streamrank reads; write it as Parquet (pandas: df.to_parquet) and ingest that "
                                  f"with --label and --qid; {SUPPORTED}")
    elif kind in ("parquet", "npz"):
        found = kind
    else:
        raise ValueError(f"{s} is {'binary data' if kind == 'binary data' else kind}, not a format streamrank "
                         f"reads; {SUPPORTED}")
    if given is not None and given != found:
        raise ValueError(f"{s} is not {_NAMES[given]} (by its content it is {_NAMES[found]}); {SUPPORTED}")
    return found
