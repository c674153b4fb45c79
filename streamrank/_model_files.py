"""Saved models on local disk read and written without zarr or numcodecs, byte for byte as zarr writes them.

Why (issue 22): ``sr.save`` / ``sr.load`` wrote and read a model through zarr
(a zarr v3 group, arrays compressed by zstd then a CRC-32C), and importing
zarr and numcodecs for a model's few chunks was 0.29-0.33 CPU-s of a warm
``streamrank fit`` or ``evaluate`` -- a third of each.  A model has one
layout, the one :func:`streamrank.persistence.write_group` gives it, and for
that layout this module does what zarr 3 does:

* ``zarr.json`` documents: ``json.dumps(doc, indent=2, allow_nan=True)`` of
  the keys zarr writes, in its order (root and CSR groups; arrays with codecs
  ``bytes`` (little endian) -> ``zstd`` (level 0, no checksum) -> ``crc32c``,
  fill value 0, chunk keys ``c/i/j...`` (``c`` for a 0-d array));
* chunks: a dense array is one chunk (each side at least 1), a CSR part is cut
  into chunks of at most ``persistence.CSR_CHUNK`` entries, the last one
  padded with zeros; every chunk is written, zeros too (``load`` bounds an
  array's declared size by its chunk files); zstd through numcodecs' own
  library (:mod:`streamrank.io._zstd_lib`), then the CRC-32C, little endian;
* the root attributes with the record of every chunk written (its CRC-32C
  trailer), as ``persistence.write_group`` reads it back from zarr's store
  (:mod:`streamrank._model_record`).

:func:`write_model` is used only when every array is a numeric numpy array in
little-endian order or a scipy sparse matrix; :func:`open_model` answers only
for a directory whose every document is exactly of that layout (any other
key, codec, grid, dtype or name, a document that is missing or does not
parse: None).  Otherwise zarr does the work as before, so a crafted or damaged
model meets the same checks and the same messages as before; a model whose
layout is this one is checked here as zarr checks it: the CRC-32C of every
chunk (zarr's message), zstd's declared size against the chunk's before
anything is allocated, and, for a model carrying the record, the chunk's
trailer against it (a missing chunk is then an error; without the record it
reads as zeros, as in zarr: models saved before every chunk was written).
``tests/core/test_model_files.py`` saves every learner both ways and compares
every file.
"""
from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np

from ._model_record import check_chunk, record_entry, with_record

__all__ = ["open_model", "write_model", "writable", "ModelGroup", "ModelArray"]

JSON_INDENT = 2                     # zarr's default ``json_indent``
_DTYPES = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                     "float16", "float32", "float64"))
_ARRAY_KEYS = ["shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs", "attributes",
               "zarr_format", "node_type", "storage_transformers"]
_KEY_ENCODING = {"name": "default", "configuration": {"separator": "/"}}
_CSR_PARTS = ("indptr", "indices", "data")


class _NotLocal(ValueError):
    """A document this module does not read: zarr reads the model instead."""


def _dumps(doc) -> bytes:
    return json.dumps(doc, indent=JSON_INDENT, allow_nan=True).encode()


def _group_doc(attrs: dict) -> dict:
    return {"attributes": attrs, "zarr_format": 3, "node_type": "group"}


def _bytes_codec(dt: np.dtype) -> dict:
    return {"name": "bytes", "configuration": {"endian": "little"}} if dt.itemsize > 1 else {"name": "bytes"}


def _fill(dt: np.dtype):
    return False if dt.kind == "b" else 0.0 if dt.kind == "f" else 0


def _array_doc(shape, chunks, dt: np.dtype) -> dict:
    return {"shape": [int(s) for s in shape], "data_type": dt.name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [int(c) for c in chunks]}},
            "chunk_key_encoding": dict(_KEY_ENCODING, configuration=dict(_KEY_ENCODING["configuration"])),
            "fill_value": _fill(dt), "codecs": [_bytes_codec(dt), {"name": "zstd", "configuration":
                                                                    {"level": 0, "checksum": False}},
                                                {"name": "crc32c"}],
            "attributes": {}, "zarr_format": 3, "node_type": "array", "storage_transformers": []}


# ------------------------------------------------------------------ write
def _supported(arr) -> bool:
    dt = arr.dtype
    return dt.name in _DTYPES and (dt.byteorder in ("<", "|") or (dt.byteorder == "=" and np.little_endian))


def writable(arrays: dict, issparse) -> bool:
    """Whether :func:`write_model` writes these arrays (numeric, little endian, dense or CSR); else zarr does."""
    for name, a in arrays.items():
        if not _simple_name(name):               # a nested or hidden name: zarr's groups and checks
            return False
        if issparse(a):
            a = a.tocsr()
            parts = [np.asarray(getattr(a, p)) for p in _CSR_PARTS]
        else:
            parts = [np.asarray(a)]
        if not all(isinstance(p, np.ndarray) and _supported(p) for p in parts):
            return False
    return True


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _write_array(dir_: Path, arr: np.ndarray, chunks) -> dict:
    """``arr`` as a zarr v3 array at ``dir_``: its document, then every chunk of its grid (zeros too).

    Returns its entry of the record (:mod:`streamrank._model_record`): the CRC-32C trailer of every chunk.
    """
    import google_crc32c

    from .io._zstd_lib import compress

    dt = arr.dtype
    _write(dir_ / "zarr.json", _dumps(_array_doc(arr.shape, chunks, dt)))
    grid = [-(-s // c) for s, c in zip(arr.shape, chunks)]
    little = np.ascontiguousarray(arr, dtype=dt.newbyteorder("<") if dt.itemsize > 1 else dt)
    crcs = {}
    for coords in itertools.product(*(range(n) for n in grid)):
        sel = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coords, chunks, arr.shape))
        part = little[sel]
        if part.shape != tuple(chunks):                 # an edge chunk: the full chunk shape, zeros past the end
            full = np.zeros(chunks, dtype=little.dtype)
            full[tuple(slice(0, n) for n in part.shape)] = part
            part = full
        enc = compress(np.ascontiguousarray(part).tobytes(), 0, False)
        key = ["c", *map(str, coords)]
        crc = int(google_crc32c.value(enc))
        _write(dir_.joinpath(*key), enc + crc.to_bytes(4, "little"))
        crcs["/".join(key)] = crc
    return record_entry(dt.name, arr.shape, chunks, crcs)


def write_model(root: Path, arrays: dict, attrs: dict, issparse, csr_chunk: int, extra_attrs=None) -> None:
    """The model group at the new directory ``root``: its arrays (dense, or CSR groups), then the root document.

    The root attributes, written last (a group without them is not a model):
    ``attrs``, the record of every chunk written (``_model_record.SAVED_ARRAYS``),
    then ``extra_attrs`` (the command line's record).
    """
    root = Path(root)
    root.mkdir(parents=True)
    _write(root / "zarr.json", _dumps(_group_doc({})))
    record = {}
    for name, a in arrays.items():
        if issparse(a):
            a = a.tocsr()
            _write(root / name / "zarr.json", _dumps(_group_doc({"shape": list(a.shape), "format": "csr"})))
            for part in _CSR_PARTS:
                arr = np.ascontiguousarray(getattr(a, part))
                record[f"{name}/{part}"] = _write_array(root / name / part, arr, (max(1, min(arr.size, csr_chunk)),))
        else:
            arr = np.ascontiguousarray(np.asarray(a))
            record[name] = _write_array(root / name, arr, tuple(max(1, s) for s in arr.shape))
    _write(root / "zarr.json", _dumps(_group_doc(with_record(attrs, record, extra_attrs))))


# ------------------------------------------------------------------ read
def _doc(path: Path):
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        raise _NotLocal(str(path)) from None


def _counts(v) -> bool:
    return isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v)


def _check_array_doc(doc, where) -> None:
    """_NotLocal unless ``doc`` is an array document of the layout :func:`write_model` writes."""
    try:
        _check_array_keys(doc, where)
    except (TypeError, AttributeError, KeyError, ValueError, OverflowError) as exc:
        raise _NotLocal(f"{where}: {exc}") from None


def _check_array_keys(doc, where) -> None:
    if not isinstance(doc, dict) or list(doc) != _ARRAY_KEYS:
        raise _NotLocal(where)
    shape, grid, dt = doc["shape"], doc["chunk_grid"], doc["data_type"]
    if doc["zarr_format"] != 3 or doc["node_type"] != "array" or doc["storage_transformers"] != [] \
            or not isinstance(doc["attributes"], dict) or dt not in _DTYPES or not _counts(shape):
        raise _NotLocal(where)
    dt = np.dtype(dt)
    chunks = grid.get("configuration", {}).get("chunk_shape") if isinstance(grid, dict) else None
    if grid != {"name": "regular", "configuration": {"chunk_shape": chunks}} or not _counts(chunks) \
            or len(chunks) != len(shape) or not all(0 < c <= max(1, s) for c, s in zip(chunks, shape)):
        raise _NotLocal(where)
    codecs = doc["codecs"]
    if doc["chunk_key_encoding"] != _KEY_ENCODING or doc["fill_value"] != _fill(dt) \
            or type(doc["fill_value"]) is not type(_fill(dt)) or not isinstance(codecs, list) or len(codecs) != 3 \
            or codecs[0] != _bytes_codec(dt) or codecs[2] != {"name": "crc32c"} or not isinstance(codecs[1], dict) \
            or codecs[1].get("name") != "zstd" or set(codecs[1]) != {"name", "configuration"}:
        raise _NotLocal(where)
    cfg = codecs[1]["configuration"]
    if not isinstance(cfg, dict) or set(cfg) != {"level", "checksum"} or not isinstance(cfg["checksum"], bool) \
            or not isinstance(cfg["level"], int) or isinstance(cfg["level"], bool):
        raise _NotLocal(where)


def _simple_name(name) -> bool:
    return (isinstance(name, str) and name not in ("", ".", "..") and not name.startswith(".")
            and not any(c in name for c in "/\\\0"))


class ModelArray:
    """A model array on disk: ``shape``, ``dtype``, ``chunks``; ``a[...]`` reads it whole (checked)."""

    def __init__(self, dir_: Path, name: str, doc: dict):
        self._dir, self.name = dir_, name
        self.shape = tuple(doc["shape"])
        self.dtype = np.dtype(doc["data_type"])
        self.chunks = tuple(doc["chunk_grid"]["configuration"]["chunk_shape"])

    def __getitem__(self, key):
        if key is not Ellipsis:
            raise TypeError(f"{self.name}: a model array is read whole (a[...])")
        return self.read()

    def read(self, crcs: dict | None = None) -> np.ndarray:
        """The whole array: every chunk decoded and checked (a missing chunk reads as zeros, as in zarr).

        ``crcs``: the model's record of this array's chunks (``{key: CRC-32C trailer}``, from
        :mod:`streamrank._model_record`), or None for a model saved without it.  With it, a missing chunk
        or one whose trailer is not the recorded one is an error, checked after the chunk's own checks
        (as on zarr's path) with the trailer already read for the chunk's CRC-32C.
        """
        import google_crc32c

        from .io import _zstd_lib

        little = self.dtype.newbyteorder("<") if self.dtype.itemsize > 1 else self.dtype
        out = np.zeros(self.shape, dtype=little)
        chunks = self.chunks
        need = int(np.prod(chunks, dtype=np.int64)) * self.dtype.itemsize
        grid = [-(-s // c) for s, c in zip(self.shape, chunks)]
        for coords in itertools.product(*(range(n) for n in grid)):
            key = "/".join(["c", *map(str, coords)])
            path = self._dir.joinpath(*key.split("/"))
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                if crcs is not None:
                    check_chunk(self.name, key, None, crcs[key])
                continue                                      # zarr: a missing chunk holds the fill value
            body, stored = data[:-4], data[-4:]
            computed = int(google_crc32c.value(body)).to_bytes(4, "little")
            if computed != stored:
                raise ValueError(f"Stored and computed checksum do not match. Stored: {stored!r}. "
                                 f"Computed: {computed!r}.")
            declared = _zstd_lib.content_size(body)           # before anything is allocated for it
            if declared not in (need, _zstd_lib.UNKNOWN):
                raise ValueError(f"chunk {'/'.join(map(str, coords)) or 'c'} declares {declared} bytes once "
                                 f"decoded, but a chunk of shape {chunks} of {self.dtype} holds {need}")
            sel = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coords, chunks, self.shape))
            whole = all(sl.stop - sl.start == c for sl, c in zip(sel, chunks))
            dest = out if whole and out.shape == chunks else np.empty(chunks, dtype=little)
            _zstd_lib.decompress_into(body, dest)
            if dest is not out:
                out[sel] = dest[tuple(slice(0, sl.stop - sl.start) for sl in sel)]
            if crcs is not None:
                check_chunk(self.name, key, stored, crcs[key])
        return out.astype(self.dtype, copy=False)


class ModelGroup:
    """A model's root group or a CSR group on disk: ``attrs``, ``g[name]``, ``arrays()``."""

    def __init__(self, dir_: Path, attrs: dict, members: dict):
        self._dir, self.attrs, self._members = dir_, attrs, members

    def __getitem__(self, name):
        return self._members[name]

    def arrays(self):
        """``(name, ModelArray)`` of a CSR group's parts, by name."""
        return sorted((k, v) for k, v in self._members.items() if isinstance(v, ModelArray))


def _node(dir_: Path, name: str):
    doc = _doc(dir_ / "zarr.json")
    if isinstance(doc, dict) and doc.get("node_type") == "group":
        attrs = doc.get("attributes")
        if list(doc) != ["attributes", "zarr_format", "node_type"] or doc["zarr_format"] != 3 \
                or not isinstance(attrs, dict) or list(attrs) != ["shape", "format"] or attrs["format"] != "csr" \
                or sorted(os.listdir(dir_)) != sorted((*_CSR_PARTS, "zarr.json")):
            raise _NotLocal(str(dir_))
        parts = {}
        for part in _CSR_PARTS:
            sub = _doc(dir_ / part / "zarr.json")
            _check_array_doc(sub, str(dir_ / part))
            parts[part] = ModelArray(dir_ / part, f"{name}/{part}", sub)
        return ModelGroup(dir_, attrs, parts)
    _check_array_doc(doc, str(dir_))
    return ModelArray(dir_, name, doc)


def open_model(path) -> ModelGroup | None:
    """The model group at the local directory ``path`` if every document is of :func:`write_model`'s layout, else
    None (zarr opens it: a crafted, damaged or foreign model meets zarr's checks and messages, as before)."""
    root = Path(path)
    try:
        doc = _doc(root / "zarr.json")
        if not isinstance(doc, dict) or list(doc) != ["attributes", "zarr_format", "node_type"] \
                or doc["zarr_format"] != 3 or doc["node_type"] != "group" or not isinstance(doc["attributes"], dict):
            return None
        attrs = doc["attributes"]
        names = attrs.get("arrays", [])
        members = {}
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            for name in names:
                if not _simple_name(name):
                    return None
                members[name] = _node(root / name, name)
    except (_NotLocal, OSError):
        return None
    return ModelGroup(root, attrs, members)
