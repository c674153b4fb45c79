"""Whole chunks of a streamrank zarr array decoded straight from their files into the caller's buffer.

zarr's read path costs about 3 ms of Python and event-loop work per 4 MiB
chunk on top of the decoding itself (measured: 48 chunks of a 1M x 50
float32 array, zarr 0.14–0.19 CPU s; file reads 0.018 s, CRC-32C 0.019 s,
blosc 0.024 s).  For the one chunk layout streamrank writes (a regular grid
along rows, every column in one chunk, codecs ``bytes`` little-endian →
``blosc`` → ``crc32c``, chunk keys ``c/<i>/0``), :class:`ChunkFileDecoder`
does exactly what zarr does — read the file, check the CRC-32C, blosc-decode
— straight into the destination array, with no intermediate copy.  Any
other layout (or codec configuration, storage transformer, chunk key
encoding, byte order) gets ``None`` from :meth:`ChunkFileDecoder.for_array`
and stays on zarr's own path.

A chunk file that does not exist is read as the array's fill value, as zarr
does (zarr skips writing chunks that hold only the fill value).  A damaged
file raises :class:`~streamrank.io.schema.StoreFormatError` naming it.

Everything read from a chunk is checked in the same call, right after the
chunk is decoded (DESIGN §6): the file's CRC-32C; that the chunk is the one
committed at its place (``expected``: the CRC-32C trailer of each full chunk;
``tail``: a CRC-32C of the committed entries of the last, partly filled chunk
— see :mod:`streamrank.io.schema`); and the caller's value check (``check``:
finite values, CSR column indices in range — the kernels of
:mod:`streamrank.io._read_checks`) on the chunk's committed entries.  The
chunk is decoded whole by numcodecs' public ``Blosc`` codec (what zarr's
``blosc`` codec calls), after its blosc header was checked against the
file's length and the array's chunk size (a crafted header must not make
c-blosc read or write past a buffer).  Chunk bytes come from the local file
here and from object storage in :mod:`streamrank.io._remote_chunks` (the
same decode and checks).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from .schema import StoreFormatError

__all__ = ["ChunkFileDecoder"]

_DTYPES = {"float32", "float64", "int32", "int64", "uint8"}


class ChunkFileDecoder:
    """``decode(c, out)``: chunk ``c`` of a row-chunked zarr v3 array on local disk into ``out``."""

    #: a chunk file that does not exist is an error (stores that write every chunk), not the fill value
    strict = False
    #: CRC-32C trailer each full chunk had when it was committed (schema.CHUNK_CRCS; -1: no file); None: unknown
    expected = None
    #: ``(chunk, entries, crc)``: CRC-32C of the decoded first ``entries`` rows of the last, partly filled
    #: chunk at the commit (schema.TAIL_CRCS); None: unknown (a store of the previous version)
    tail = None
    #: ``check(first_row, rows)`` run on the committed rows of every decoded chunk (raises if they are bad)
    check = None

    def __init__(self, array_dir: Path, chunk_shape: tuple, dtype: np.dtype, fill_value, name: str):
        self._dir = Path(array_dir)
        self.chunk_shape = tuple(int(s) for s in chunk_shape)
        self.dtype = np.dtype(dtype)
        self.fill_value = fill_value
        self.name = name
        self._suffix = ("0",) * (len(self.chunk_shape) - 1)
        self.nbytes = int(np.prod(self.chunk_shape)) * self.dtype.itemsize

    @classmethod
    def for_array(cls, store_path, name: str) -> "ChunkFileDecoder | None":
        """A decoder for array ``name`` of the store at ``store_path``, or None if its layout is another."""
        if sys.byteorder != "little":   # pragma: no cover - the machines we know are little-endian
            return None
        array_dir = Path(store_path) / name
        try:
            meta = json.loads((array_dir / "zarr.json").read_text())
            return cls._from_metadata(meta, array_dir, name)
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None

    @classmethod
    def _from_metadata(cls, meta: dict, array_dir: Path, name: str) -> "ChunkFileDecoder | None":
        if meta.get("zarr_format") != 3 or meta.get("node_type") != "array" or meta.get("storage_transformers"):
            return None
        shape = meta["shape"]
        grid = meta["chunk_grid"]
        keys = meta["chunk_key_encoding"]
        if grid.get("name") != "regular" or keys.get("name") != "default":
            return None
        if keys.get("configuration", {}).get("separator", "/") != "/":
            return None
        chunks = grid["configuration"]["chunk_shape"]
        if len(shape) not in (1, 2) or len(chunks) != len(shape) or (len(shape) == 2 and chunks[1] != shape[1]):
            return None
        dtype = meta["data_type"]
        if dtype not in _DTYPES:
            return None
        codecs = meta["codecs"]
        if [c.get("name") for c in codecs] != ["bytes", "blosc", "crc32c"]:
            return None
        if codecs[0].get("configuration", {}).get("endian", "little") != "little":
            return None
        fill = meta.get("fill_value", 0)
        if not isinstance(fill, (int, float)) or isinstance(fill, bool):
            return None
        return cls(array_dir, chunks, dtype, fill, name)

    def _expected(self, c: int):
        """The committed CRC-32C trailer of chunk ``c`` (None: not recorded, or no file was written)."""
        e = self.expected
        if e is None or c >= len(e) or e[c] < 0:
            return None
        return e[c]

    def chunk_file(self, c: int) -> Path:
        return self._dir.joinpath("c", str(int(c)), *self._suffix)

    def _read_bytes(self, c: int):
        """The stored bytes of chunk ``c`` (FileNotFoundError if absent); remote stores: _remote_chunks."""
        return self.chunk_file(c).read_bytes()

    def decode(self, c: int, out: np.ndarray, valid: int | None = None) -> None:
        """Decode chunk ``c`` (all of its ``chunk_shape`` rows) into ``out``: C-contiguous, that shape and dtype.

        ``valid``: how many leading rows of the chunk are committed (default:
        all); those are passed to :attr:`check` right after decoding.
        """
        if out.shape != self.chunk_shape or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous {self.dtype} array of shape {self.chunk_shape}")
        c = int(c)
        n = self.chunk_shape[0] if valid is None else min(int(valid), self.chunk_shape[0])
        self._decode(c, out)
        self._check_tail(c, out)           # the tail chunk: its binding is checked before its values
        if self.check is not None and n > 0:
            self.check(c * self.chunk_shape[0], out[:n])

    def _check_tail(self, c: int, out: np.ndarray) -> None:
        """The last chunk of the commit, whose file a later append rewrites: its committed rows are bound."""
        t = self.tail
        if t is None or t[0] != c:
            return
        import google_crc32c

        n = int(t[1])
        if n > self.chunk_shape[0] or google_crc32c.value(out[:n].reshape(-1).view(np.uint8)) != int(t[2]):
            raise StoreFormatError(f"{self.chunk_file(c)}: chunk {c} of array {self.name!r} does not hold the "
                                   f"{n} entries committed there (swapped with another chunk, copied from another "
                                   "store, or replaced); the store is corrupt")

    def _decode(self, c: int, out: np.ndarray) -> None:
        """Chunk ``c`` into ``out`` (the fill value if its file does not exist and may be absent)."""
        path = self.chunk_file(c)
        try:
            data = self._read_bytes(c)
        except FileNotFoundError:
            if self.strict or self._expected(c) is not None or (self.tail is not None and self.tail[0] == c):
                raise StoreFormatError(f"{path}: chunk {int(c)} of array {self.name!r} is missing (deleted after "
                                       "it was written: this store writes every chunk)") from None
            out[...] = self.fill_value       # zarr writes no chunk that holds only the fill value
            return
        except OSError as exc:
            raise StoreFormatError(f"{path}: chunk of array {self.name!r} cannot be read ({exc})") from exc
        import google_crc32c

        data = np.frombuffer(data, dtype=np.uint8)
        view = data[:-4]                                      # no copy (what zarr's crc32c codec checks too)
        if len(data) < 4 or google_crc32c.value(view) != int.from_bytes(data[-4:].tobytes(), "little"):
            raise StoreFormatError(f"{path}: chunk of array {self.name!r} is damaged (CRC-32C mismatch: "
                                   "the file changed after it was written)")
        want = self._expected(c)
        if want is not None and want != int.from_bytes(data[-4:].tobytes(), "little"):
            raise StoreFormatError(f"{path}: chunk {int(c)} of array {self.name!r} is not the chunk committed there "
                                   "(swapped with another chunk, copied from another store, or replaced); "
                                   "the store is corrupt")
        try:
            _check_blosc_header(view, self.nbytes)
            _blosc().decode(view, out=out)
        except (MemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise StoreFormatError(f"{path}: chunk of array {self.name!r} cannot be decoded "
                                   f"({type(exc).__name__}: {exc})") from exc


#: a blosc 1.x frame's header: version, versionlz, flags, typesize, then nbytes, blocksize, cbytes (uint32 LE)
_BLOSC_HEADER = 16
_codec: list = []


def _blosc():
    """numcodecs' ``Blosc`` codec (decoding takes its settings from the frame)."""
    if not _codec:
        from numcodecs import Blosc

        _codec.append(Blosc())
    return _codec[0]


def _check_blosc_header(frame: np.ndarray, nbytes: int) -> None:
    """ValueError unless ``frame`` is a blosc frame of exactly its length decoding to ``nbytes`` bytes.

    c-blosc decodes without being told the frame's length: it trusts the
    header's ``cbytes``.  A header that claims more than the file holds
    would make it read past the buffer, one that claims another size
    write past ``out`` -- so both are compared with what is really there.
    """
    if frame.shape[0] < _BLOSC_HEADER:
        raise ValueError(f"not a blosc frame ({frame.shape[0]} bytes, shorter than its header)")
    head = frame[:_BLOSC_HEADER].tobytes()
    got, cbytes = int.from_bytes(head[4:8], "little"), int.from_bytes(head[12:16], "little")
    if got != nbytes:
        raise ValueError(f"it holds {got} bytes, expected {nbytes}")
    if cbytes != frame.shape[0]:
        raise ValueError(f"not a blosc frame (its header says {cbytes} bytes, the file holds {frame.shape[0]})")
