"""zarr v3 groups and arrays of streamrank's one layout, on local disk, read and written without importing zarr.

Why (issue 22): importing zarr costs 0.25-0.45 CPU-s (its registry scans
entry points, its dataclasses, asyncio, fsspec, donfig ...), and each zarr
call on a local store is a round trip through zarr's event-loop thread (38 of
them, ~0.13 s of lock waits, in ``streamrank ingest`` of a 6 MB file).  A
warm ingest of MQ2008 Fold1 spent about a third of its time there.  Every
array streamrank writes has one layout (:func:`streamrank.io.schema.check_array_layout`
refuses any other): a regular grid along rows (every column in one chunk),
chunk keys ``c/<i>[/0]``, codecs ``bytes`` (little endian) -> ``blosc`` ->
``crc32c``, fill value 0, no storage transformer.  For that layout this
module does what zarr does, byte for byte:

* metadata documents: ``json.dumps(doc, indent=2, allow_nan=True)`` of the
  same keys in the same order as zarr 3 writes them (``zarr.json`` of groups
  and arrays);
* a chunk: its full ``chunk_shape`` in C order, little endian; a write of
  part of a chunk keeps the rest of what its file held (else the fill
  value), and one that covers a chunk up to the array's end fills what lies
  past the end with the fill value (zarr's "complete chunk");
  blosc-compressed with the array's ``typesize / cname / clevel / shuffle /
  blocksize`` without blosc's threads, as numcodecs does once zarr has turned
  them off (``numcodecs.blosc.use_threads = False``; the threaded compressor
  writes other bytes) -- by numcodecs' own c-blosc, called without importing
  numcodecs (:mod:`streamrank.io._blosc_lib`) -- then its CRC-32C appended,
  little endian;
* every file written to a temporary ``<name>.<hex>.partial`` beside it and
  renamed over it (zarr's ``LocalStore``);
* ``resize`` rewrites the array's ``zarr.json`` and, when shrinking, deletes
  the chunk files past the new shape (zarr's ``delete_outside_chunks``);
* a write of a chunk holding only the fill value is skipped (and its file
  deleted) unless the array was opened inside
  :func:`streamrank.io.schema.every_chunk` (zarr's ``write_empty_chunks``,
  fixed when the array is opened).

Reads decode whole chunks with :class:`~streamrank.io._chunk_files.ChunkFileDecoder`
(the CRC-32C checked; a missing chunk reads as the fill value, as in zarr).
``tests/io/test_local_zarr.py`` writes the same stores through zarr and
through this module and compares every file byte for byte (time stamps and
store ids aside).  Stores of another layout (the first stores, without the
``crc32c`` codec), stores at URLs and tuple stores keep zarr
(:func:`local_root` answers None).
"""
from __future__ import annotations

import contextvars
import json
import os
from pathlib import Path

import numpy as np

__all__ = ["LocalArray", "LocalGroup", "local_root", "write_empty_chunks", "blosc_codec", "crc32c_codec"]

#: zarr's default ``json_indent`` (``zarr.config``), the indentation of every ``zarr.json`` it writes
JSON_INDENT = 2
_GROUP_DOC = {"attributes": {}, "zarr_format": 3, "node_type": "group"}
_DTYPES = ("float32", "float64", "int32", "int64", "uint8")
_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}

#: whether arrays opened now write chunks that hold only the fill value (schema.every_chunk sets it)
_WRITE_EMPTY = contextvars.ContextVar("streamrank_write_empty_chunks", default=False)


def write_empty_chunks(on: bool = True):
    """Set (returns the token to reset) whether arrays opened from now on write every chunk (see module doc)."""
    return _WRITE_EMPTY.set(bool(on))


def blosc_codec(itemsize: int) -> dict:
    """The ``blosc`` codec of every streamrank array, as zarr writes it in ``zarr.json`` (lz4, level 5, shuffle)."""
    return {"name": "blosc", "configuration": {"typesize": int(itemsize), "cname": "lz4", "clevel": 5,
                                               "shuffle": "shuffle", "blocksize": 0}}


def crc32c_codec() -> dict:
    """The ``crc32c`` codec, as zarr writes it."""
    return {"name": "crc32c"}


def _dumps(doc) -> bytes:
    return json.dumps(doc, allow_nan=True, indent=JSON_INDENT).encode()


def _write_file(path: Path, data) -> None:
    """``path`` written whole: a temporary ``<path>.<hex>.partial`` renamed over it (zarr's LocalStore)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.urandom(16).hex()}.partial")
    try:
        with open(tmp, "xb") as f:       # exclusive: a random new name, never an existing file or a link
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read_doc(path: Path):
    """The parsed ``zarr.json`` at ``path`` (FileNotFoundError if absent)."""
    return json.loads(path.read_bytes())


class _NotLocal(ValueError):
    """An array whose layout this module does not write (zarr keeps it)."""


def _layout(doc, name: str) -> dict:
    """The parts of an array document this module needs; _NotLocal if it is not streamrank's layout."""
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or doc.get("node_type") != "array":
        raise _NotLocal(f"{name}: not a zarr v3 array")
    if doc.get("storage_transformers"):
        raise _NotLocal(f"{name}: storage transformers")
    shape, dtype = doc.get("shape"), doc.get("data_type")
    grid, keys, codecs = doc.get("chunk_grid"), doc.get("chunk_key_encoding"), doc.get("codecs")
    try:
        chunks = grid["configuration"]["chunk_shape"]
        ok = (grid.get("name") == "regular" and keys.get("name") == "default"
              and (keys.get("configuration") or {}).get("separator", "/") == "/")
        names = [c.get("name") for c in codecs]
    except (TypeError, KeyError, AttributeError):
        raise _NotLocal(f"{name}: unreadable layout") from None
    if not ok or names != ["bytes", "blosc", "crc32c"] or dtype not in _DTYPES:
        raise _NotLocal(f"{name}: another layout")
    ints = (isinstance(shape, list) and isinstance(chunks, list) and len(shape) == len(chunks) in (1, 2)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in shape + chunks)
            and all(v >= 0 for v in shape) and all(v > 0 for v in chunks))
    if not ints or (len(shape) == 2 and chunks[1] != shape[1]):
        raise _NotLocal(f"{name}: shape {shape} / chunks {chunks} not row-chunked")
    if (codecs[0].get("configuration") or {}).get("endian", "little") != "little":
        raise _NotLocal(f"{name}: big endian")
    cfg = codecs[1].get("configuration") or {}
    fill = doc.get("fill_value")
    if isinstance(fill, bool) or not isinstance(fill, (int, float)) or fill != 0:
        raise _NotLocal(f"{name}: fill value {fill!r}")
    try:
        blosc = (str(cfg["cname"]).encode(), int(cfg["clevel"]), _SHUFFLES[cfg["shuffle"]], int(cfg["blocksize"]),
                 int(cfg["typesize"]))
    except (KeyError, TypeError, ValueError):
        raise _NotLocal(f"{name}: blosc configuration {cfg!r}") from None
    return {"shape": tuple(shape), "chunks": tuple(chunks), "dtype": np.dtype(dtype), "fill": fill, "blosc": blosc}


class LocalGroup:
    """A zarr v3 group of a local store (``root[name]``, ``create_group``, ``create_array``), zarr not imported."""

    def __init__(self, root, path: str = "", read_only: bool = False):
        self._root = Path(root)
        self._path = path.strip("/")
        self.read_only = read_only

    def _dir(self, name: str = "") -> Path:
        rel = "/".join(p for p in (self._path, name.strip("/")) if p)
        return self._root.joinpath(*rel.split("/")) if rel else self._root

    def _key(self, name: str) -> str:
        return "/".join(p for p in (self._path, name.strip("/")) if p)

    def __getitem__(self, name: str):
        """The array (:class:`LocalArray`) or group at ``name``; KeyError if there is none."""
        meta = self._dir(name) / "zarr.json"
        try:
            doc = _read_doc(meta)
        except (FileNotFoundError, NotADirectoryError):
            raise KeyError(name) from None
        if isinstance(doc, dict) and doc.get("node_type") == "group" and doc.get("zarr_format") == 3:
            return LocalGroup(self._root, self._key(name), self.read_only)
        return LocalArray(self._root, self._key(name), doc, read_only=self.read_only)

    def __contains__(self, name: str) -> bool:
        return (self._dir(name) / "zarr.json").exists()

    def _check_writable(self):
        if self.read_only:
            raise PermissionError(f"{self._root}: opened read-only")

    def _make_parents(self, name: str) -> None:
        """Parent groups of a nested name, written if absent (zarr's implicit groups)."""
        parts = name.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            meta = self._dir("/".join(parts[:i])) / "zarr.json"
            if not meta.exists():
                _write_file(meta, _dumps(_GROUP_DOC))

    def create_group(self, name: str) -> LocalGroup:
        """A new empty group ``name`` (FileExistsError if something is there)."""
        self._check_writable()
        meta = self._dir(name) / "zarr.json"
        if meta.exists():
            raise FileExistsError(f"{meta} exists")
        self._make_parents(name)
        _write_file(meta, _dumps(_GROUP_DOC))
        return LocalGroup(self._root, self._key(name), self.read_only)

    def create_array(self, name: str, *, shape, chunks, dtype, compressors, fill_value=0) -> LocalArray:
        """A new array of streamrank's layout; ``compressors``: ``(blosc_codec(n), crc32c_codec())``."""
        self._check_writable()
        meta = self._dir(name) / "zarr.json"
        if meta.exists():
            raise FileExistsError(f"{meta} exists")
        dt = np.dtype(dtype)
        fill = float(fill_value) if dt.kind == "f" else int(fill_value)
        codecs = [{"name": "bytes", "configuration": {"endian": "little"}} if dt.itemsize > 1 else {"name": "bytes"}]
        codecs += [json.loads(json.dumps(c)) for c in compressors]       # plain JSON (a copy)
        doc = {"shape": [int(s) for s in shape], "data_type": dt.name,
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [int(c) for c in chunks]}},
               "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
               "fill_value": fill, "codecs": codecs, "attributes": {}, "zarr_format": 3, "node_type": "array",
               "storage_transformers": []}
        arr = LocalArray(self._root, self._key(name), doc, read_only=self.read_only)
        self._make_parents(name)
        _write_file(meta, _dumps(doc))
        return arr


class LocalArray:
    """A row-chunked zarr v3 array of streamrank's layout on local disk: the part of ``zarr.Array`` stores use.

    ``shape``, ``chunks``, ``ndim``, ``dtype``, ``fill_value``; ``a[i:j]`` (and
    ``a[i:j, ...]``, ``a[i]``), ``a[i:j] = v``, ``resize(shape)`` and
    ``get_coordinate_selection(rows)``.  Raises ValueError (from the
    constructor) for another layout.
    """

    def __init__(self, root, key: str, doc, read_only: bool = False):
        lay = _layout(doc, key)
        self._root = Path(root)
        self._key = key
        self._dir = self._root.joinpath(*key.split("/"))
        self._doc = doc
        self.shape = lay["shape"]
        self.chunks = lay["chunks"]
        self.dtype = lay["dtype"]
        self.fill_value = lay["fill"]
        self._blosc = lay["blosc"]
        self.read_only = read_only
        self.write_empty_chunks = _WRITE_EMPTY.get()
        self._decoder = None

    # ----------------------------------------------------------- description
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def path(self) -> str:
        return self._key

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<LocalArray {self._dir} shape={self.shape} dtype={self.dtype}>"

    def _chunk_file(self, c: int) -> Path:
        return self._dir.joinpath("c", str(int(c)), *("0",) * (self.ndim - 1))

    def _n_chunks(self, rows: int) -> int:
        return -(-int(rows) // self.chunks[0])

    # ----------------------------------------------------------------- reads
    def _decode(self, c: int, out: np.ndarray) -> None:
        """Chunk ``c`` (its full chunk shape) into ``out``: the fill value if its file does not exist."""
        if self._decoder is None:
            from ._chunk_files import ChunkFileDecoder

            self._decoder = ChunkFileDecoder(self._dir, self.chunks, self.dtype, self.fill_value, self._key)
        self._decoder.decode(c, out)

    def _rows(self, a: int, b: int) -> np.ndarray:
        out = np.empty((max(b - a, 0),) + tuple(self.shape[1:]), dtype=self.dtype)
        if b <= a:
            return out
        C = self.chunks[0]
        whole = None
        for c in range(a // C, (b - 1) // C + 1):
            s, e = max(a, c * C), min(b, c * C + C)
            if s == c * C and e == c * C + C:
                self._decode(c, out[s - a:e - a])
                continue
            if whole is None:
                whole = np.empty(self.chunks, dtype=self.dtype)
            self._decode(c, whole)
            out[s - a:e - a] = whole[s - c * C:e - c * C]
        return out

    def _row_range(self, key):
        """``(a, b, scalar, rest)`` of a key selecting rows ``a:b`` (``scalar``: one row index), then ``rest``."""
        first, rest = (key[0], tuple(key[1:])) if isinstance(key, tuple) else (key, ())
        if first is Ellipsis:
            first = slice(None)
        n = self.shape[0]
        if isinstance(first, (int, np.integer)) and not isinstance(first, bool):
            i = int(first) + (n if int(first) < 0 else 0)
            if not 0 <= i < n:
                raise IndexError(f"index {int(first)} is out of bounds for axis 0 with size {n}")
            return i, i + 1, True, rest
        if isinstance(first, slice) and first.step in (None, 1):
            a, b, _ = first.indices(n)
            return a, max(a, b), False, rest
        raise TypeError(f"{self._key}: unsupported selection {key!r} (row slices and indices only)")

    def __getitem__(self, key):
        a, b, scalar, rest = self._row_range(key)
        out = self._rows(a, b)
        if scalar:
            out = out[0]
        if rest:
            out = out[(Ellipsis,) + rest] if scalar else out[(slice(None),) + rest]
        return out[()] if isinstance(out, np.ndarray) and out.ndim == 0 else out

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def get_coordinate_selection(self, rows):
        """Entries at the indices ``rows`` of a 1-D array (CSR ``indptr``; IndexError past the shape)."""
        if self.ndim != 1:
            raise IndexError(f"{self._key}: coordinate selection of a {self.ndim}-D array needs one array per axis")
        idx = np.asarray(rows, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.shape[0]):
            raise IndexError(f"{self._key}: index out of bounds for shape {self.shape}")
        out = np.empty((idx.size,) + tuple(self.shape[1:]), dtype=self.dtype)
        C = self.chunks[0]
        whole = np.empty(self.chunks, dtype=self.dtype) if idx.size else None
        for c in np.unique(idx // C):
            self._decode(int(c), whole)
            sel = (idx // C) == c
            out[sel] = whole[idx[sel] - int(c) * C]
        return out.reshape(np.shape(rows) + tuple(self.shape[1:]))

    # ---------------------------------------------------------------- writes
    def _check_writable(self):
        if self.read_only:
            raise PermissionError(f"{self._root}: opened read-only; array {self._key!r} cannot be written")

    def _write_meta(self) -> None:
        doc = dict(self._doc)
        doc["shape"] = [int(s) for s in self.shape]
        _write_file(self._dir / "zarr.json", _dumps(doc))
        self._doc = doc

    def resize(self, new_shape) -> None:
        """New shape (only the rows may change); shrinking deletes the chunk files past it (as zarr does)."""
        self._check_writable()
        new = tuple(int(s) for s in (new_shape if isinstance(new_shape, (tuple, list)) else (new_shape,)))
        if len(new) != self.ndim or any(s < 0 for s in new) or new[1:] != self.shape[1:]:
            raise ValueError(f"{self._key}: cannot resize {self.shape} to {new}")
        if new[0] < self.shape[0]:
            for c in range(self._n_chunks(new[0]), self._n_chunks(self.shape[0])):
                self._chunk_file(c).unlink(missing_ok=True)
        self.shape = new
        self._write_meta()

    def __setitem__(self, key, value) -> None:
        self._check_writable()
        a, b, scalar, rest = self._row_range(key)
        if rest and not all(isinstance(k, slice) and k == slice(None) for k in rest):
            raise TypeError(f"{self._key}: unsupported selection {key!r} (whole rows only)")
        if b <= a:
            return
        v = np.asarray(value, dtype=self.dtype)
        v = np.broadcast_to(v if not scalar else v[np.newaxis] if v.ndim == self.ndim - 1 else v,
                            (b - a,) + tuple(self.shape[1:]))
        C = self.chunks[0]
        for c in range(a // C, (b - 1) // C + 1):
            s, e = max(a, c * C), min(b, c * C + C)
            if s == c * C and e == c * C + C:
                chunk = np.ascontiguousarray(v[s - a:e - a])
            elif s == c * C and e >= min(self.shape[0], c * C + C):
                chunk = np.full(self.chunks, self.fill_value, dtype=self.dtype)   # zarr: a "complete" edge chunk,
                chunk[:e - s] = v[s - a:e - a]                                     # not read; past the shape: fill
            else:                                # a part: the rest of the chunk is what its file holds
                chunk = np.empty(self.chunks, dtype=self.dtype)
                self._decode(c, chunk)
                chunk[s - c * C:e - c * C] = v[s - a:e - a]
            self._write_chunk(c, chunk)

    def _write_chunk(self, c: int, chunk: np.ndarray) -> None:
        path = self._chunk_file(c)
        if not self.write_empty_chunks and not np.any(chunk != self.fill_value):
            path.unlink(missing_ok=True)         # zarr stores no chunk that holds only the fill value
            return
        import google_crc32c

        from ._blosc_lib import compress

        raw = np.ascontiguousarray(chunk, dtype=self.dtype.newbyteorder("<")).reshape(-1).view(np.uint8)
        enc = compress(raw, *self._blosc)        # zarr's bytes: blosc without its threads (see module doc)
        _write_file(path, enc + int(google_crc32c.value(enc)).to_bytes(4, "little"))


def local_root(loc, names, optional=(), read_only: bool = False, create: bool = False):
    """A :class:`LocalGroup` of the local store at ``loc`` whose arrays ``names`` all have streamrank's layout.

    None for a store at a URL (``loc`` not a path) or with an array of another
    layout, a missing or unreadable array document (zarr opens those and
    reports what is wrong, as before); the arrays ``optional`` are checked
    only if they exist.  ``create``: the root group document of a new store is
    written (its directory is empty).
    """
    if not isinstance(loc, (str, os.PathLike)) or "://" in str(loc):
        return None
    root = LocalGroup(loc, read_only=read_only)
    if create:
        _write_file(Path(loc) / "zarr.json", _dumps(_GROUP_DOC))
        return root
    for name in (*names, *optional):
        meta = Path(loc).joinpath(*name.split("/"), "zarr.json")
        if name in optional and name not in names and not meta.exists():
            continue
        try:
            _layout(_read_doc(meta), name)
        except (OSError, ValueError):
            return None
    return root
