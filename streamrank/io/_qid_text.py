"""String query ids in a GroupStore: ``qid_text/offsets`` + ``qid_text/utf8`` (a CSR of bytes).

A store of string ids keeps, per group ``g``:

* ``qid[g]`` (int64) — the id's stable key (:mod:`streamrank._qid`), so that
  everything that needs an integer (folds, duplicate checks) reads 8 bytes;
* ``qid_text/utf8[offsets[g]:offsets[g+1]]`` — the id itself, UTF-8.

Both are fixed-dtype zarr arrays, chunked and compressed like the rest of the
store, appended beyond the committed length and committed by the same
``zarr.json`` rename.  Read back, every piece is untrusted: offsets must run
from the committed start, non-decreasing, within the bytes; the bytes must
decode; and (in :meth:`GroupStore.verify`) each id must hash to its key.
"""
from __future__ import annotations

import numpy as np

from .schema import StoreFormatError, compressors, open_array

__all__ = ["create_qid_text", "QidText", "encode_qids"]

_OFFSETS = "qid_text/offsets"
_UTF8 = "qid_text/utf8"
_GROUP_CHUNK = 1 << 14
_BYTE_CHUNK = 1 << 20


def create_qid_text(root) -> None:
    """The two (empty) arrays of a new store."""
    g = root.create_group("qid_text")
    off = g.create_array("offsets", shape=(1,), chunks=(_GROUP_CHUNK,), dtype="int64",
                         compressors=compressors(8), fill_value=0)
    off[:] = np.zeros(1, dtype=np.int64)
    g.create_array("utf8", shape=(0,), chunks=(_BYTE_CHUNK,), dtype="uint8",
                   compressors=compressors(1), fill_value=0)


def encode_qids(labels) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths int64 (g,), bytes uint8)`` of string ids."""
    enc = [s.encode("utf-8", "surrogateescape") for s in labels]
    lengths = np.fromiter((len(b) for b in enc), dtype=np.int64, count=len(enc))
    data = np.frombuffer(b"".join(enc), dtype=np.uint8)
    return lengths, data


class QidText:
    """Reader/writer of the string ids of one store (opened lazily: old stores lack the arrays)."""

    def __init__(self, root, path, bind=None):
        self.path = str(path)
        try:
            self._off = open_array(root, path, _OFFSETS)
            self._utf8 = open_array(root, path, _UTF8)
        except KeyError:
            raise StoreFormatError(
                f"{path}: holds string query ids but has no 'qid_text' arrays; the store is corrupt") from None
        if str(self._off.dtype) != "int64" or str(self._utf8.dtype) != "uint8":
            raise StoreFormatError(f"{path}: 'qid_text' arrays have dtypes {self._off.dtype}/{self._utf8.dtype}, "
                                   "expected int64/uint8")
        if bind is not None:     # reads check the chunks' bindings (streamrank.io._chunk_binding)
            self._off, self._utf8 = bind(self._off, _OFFSETS), bind(self._utf8, _UTF8)

    def committed(self, n_groups: int) -> tuple[dict, dict]:
        """``(arrays, lengths)`` of the two arrays after a commit of ``n_groups`` (for the chunk bindings)."""
        return ({_OFFSETS: self._off, _UTF8: self._utf8},
                {_OFFSETS: int(n_groups) + 1, _UTF8: int(self._utf8.shape[0])})

    def read(self, g0: int, g1: int, n_groups: int) -> np.ndarray:
        """The ids of groups g0:g1 as an object array of str (checked before use)."""
        g0, g1 = int(g0), min(max(int(g1), int(g0)), int(n_groups))
        if g1 <= g0:
            return np.zeros(0, dtype=object)
        if self._off.shape[0] < g1 + 1:
            raise StoreFormatError(f"{self.path}: 'qid_text/offsets' has {self._off.shape[0]} entries; "
                                   f"{n_groups + 1} are committed")
        off = np.asarray(self._off[g0 : g1 + 1], dtype=np.int64)
        b0, b1 = int(off[0]), int(off[-1])
        if b0 < 0 or np.any(np.diff(off) < 0) or b1 > self._utf8.shape[0]:
            raise StoreFormatError(f"{self.path}: 'qid_text/offsets' of groups {g0}:{g1} run from {b0} to {b1} "
                                   f"(decreasing or beyond the {self._utf8.shape[0]} stored bytes); the store "
                                   "is corrupt")
        raw = bytes(np.asarray(self._utf8[b0:b1], dtype=np.uint8))
        rel = off - b0
        out = np.empty(g1 - g0, dtype=object)
        try:
            for i in range(g1 - g0):
                out[i] = raw[rel[i]:rel[i + 1]].decode("utf-8", "surrogateescape")
        except UnicodeDecodeError as exc:  # pragma: no cover - surrogateescape decodes any bytes
            raise StoreFormatError(f"{self.path}: query id of group {g0 + i} is not UTF-8 ({exc})") from None
        return out

    def raw(self, g0: int, g1: int):
        """``(lengths, bytes)`` of groups g0:g1 as stored (for checksums)."""
        off = np.asarray(self._off[g0 : g1 + 1], dtype=np.int64)
        return np.diff(off), np.asarray(self._utf8[int(off[0]) : int(off[-1])], dtype=np.uint8)

    def write(self, q0: int, lengths: np.ndarray, data: np.ndarray) -> None:
        """Write the ids of new groups q0.. beyond the committed length (committed by the caller)."""
        b0 = int(self._off[q0]) if q0 else 0
        q1 = q0 + len(lengths)
        b1 = b0 + int(data.size)
        self._utf8.resize((b1,))
        if data.size:
            self._utf8[b0:b1] = data
        self._off.resize((q1 + 1,))
        if len(lengths):
            self._off[q0 + 1 : q1 + 1] = b0 + np.cumsum(lengths)
