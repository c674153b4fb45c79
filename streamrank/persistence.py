"""``sr.save(model, path)`` / ``sr.load(path)``: a zarr group, no pickle.

Layout of a saved model (a zarr v3 group on local disk)::

    attrs: {"streamrank": "model", "format_version": 1,
            "class": "RankRLS", "params": {...}, "state": {...}, "arrays": [names],
            "saved_arrays": {array: {data_type, shape, chunk_shape, chunk_crc32c}},
            "cli": {...}}       (only from the command line)
    <name>                 dense learned arrays
    <name>/indptr|indices|data   CSR learned arrays (attrs: {"shape": [r, c]})

Every array is written as zarr v3, codecs ``bytes`` (little endian) ->
``zstd`` -> ``crc32c``, fill value 0, keys ``c/i/j``, every chunk written
(zeros too).

**What a load trusts: nothing read from disk**.  Before any
learner sees an array: its data type is numeric; its declared size is bounded
by its chunk files (:func:`_check_stored_size`); every chunk's CRC-32C and
zstd's declared size are checked before it is decoded; each learner's
``_set_state`` then checks shapes, ranges and consistency
(:mod:`streamrank._state_checks`).  Two kinds of damage leave all of that
valid, and are checked as :mod:`streamrank._model_record` describes:

* a document edited to read the same bytes otherwise (``"endian": "big"``,
  a codec added or changed, another key separator or fill value, zarr v2) is
  refused for every model, on every path: the document zarr parsed is
  checked against the layout above before any chunk is decoded;
* ``saved_arrays``, written by ``sr.save`` since it existed, records per array
  its data type, shape, chunk shape and the CRC-32C trailer of every chunk
  file: a chunk deleted, swapped with another or copied from another model,
  or a data type / shape edit, is a :class:`ModelFormatError` naming the
  array and the chunk.  Models saved before carry no record and load as
  before (a missing chunk reads as zeros: they may lack their all-zero
  chunks); readers before it ignore the attribute, so ``format_version``
  stays 1.

The record costs no second read: a local model carrying it is read into
memory once (:func:`_zarr_group`), its trailers compared there and zarr
reading from memory, as a model at a URL is.

Saving is atomic: the group is written to a sibling temporary directory and
renamed into place; an existing model at ``path`` is replaced only after the
new one is complete (moved aside to an ``.old`` sibling, the new one renamed
in: :func:`replace_dir`, ``os`` functions only), so a crash leaves the
previous model loadable, and :func:`load` of a path a save is replacing
returns the old or the new model, whole (it reads again when the model
changed under it).  Loading never executes code: the class is looked up by name in a registry of
streamrank learners, never imported from the file.

Every model, on local disk or at a URL (:mod:`streamrank._remote_models`),
is written and read by zarr.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import _learners, _model_record
from ._dir_swap import _replaced_copy, _sibling, replace_dir, writer_alive
from ._model_zarr import ModelFormatError, open_objects

if TYPE_CHECKING:
    from ._typing import PathLike
    from .base import BaseRanker

__all__ = ["save", "load", "save_url", "register_model", "MODEL_FORMAT_VERSION", "ModelFormatError", "write_group",
           "read_group", "replace_dir", "writer_alive"]

MODEL_FORMAT_VERSION = 1
#: a CSR part of a saved model is cut into chunks of at most this many entries
CSR_CHUNK = 1 << 22
_REGISTRY: dict[str, type] = {}


def register_model(cls):
    """Class decorator: make ``cls`` loadable by :func:`load` (found by its class name).

    The package's learners live in the modules of ``streamrank._learners.LEARNER_MODULES``,
    which :func:`load` imports (an import error there is raised, never
    skipped); ``tests/core/test_estimator_api.py`` checks that every learner
    of the package is registered and listed.  Two different classes of the
    same name cannot both be registered.
    """
    prev = _REGISTRY.get(cls.__name__)
    if prev is not None and (prev.__module__, prev.__qualname__) != (cls.__module__, cls.__qualname__):
        raise TypeError(f"two learners named {cls.__name__!r} ({prev.__module__} and {cls.__module__}): "
                        "sr.load finds a learner by its class name")
    _REGISTRY[cls.__name__] = cls
    return cls


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def _codecs():
    """zstd, then a CRC-32C of every chunk: a damaged model file fails to load instead of loading garbage."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return (ZstdCodec(), Crc32cCodec())


def save(model: BaseRanker, path: PathLike, storage_options: dict | None = None) -> None:
    """Write ``model`` to the zarr group at ``path`` (atomic replace).

    ``path`` may be a URL of object storage (``s3://bucket/models/m``, any
    fsspec URL) with ``storage_options`` for its filesystem: the model is then
    written under a fresh prefix and published by one object write, so a
    reader sees the old or the new model, never a mix
    (:mod:`streamrank._remote_models`).
    """
    from .io._remote import is_url, local_path

    if is_url(path):
        return save_url(model, path, storage_options)
    if storage_options:
        raise ValueError(f"storage_options are for a URL of object storage; {str(path)!r} is a local path")
    save_local(model, Path(local_path(path)))


def save_url(model, url, storage_options=None, root_attrs=None) -> str:
    """``sr.save`` of ``model`` at the URL ``url``: a fresh version published by one object write
    (:mod:`streamrank._remote_models`); returns the version."""
    from ._remote_models import save_url as _save_url

    return _save_url(model, url, storage_options, root_attrs, write=write_group)


def save_local(model, path: Path, root_attrs=None) -> None:
    """Write ``model`` to the local directory ``path`` (atomic replace); ``root_attrs`` as in :func:`write_group`."""
    import zarr

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "partial")
    try:
        write_group(zarr.open_group(store=zarr.storage.LocalStore(str(tmp)), mode="w"), model, root_attrs)
        replace_dir(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _model_state(model):
    """``(root attributes, {name: array})`` of ``model`` as saved: its state, feature names and normalizer.

    The writers add the record of the chunks they wrote, then the caller's ``root_attrs``
    (:func:`streamrank._model_record.with_record`).
    """
    attrs, arrays = model._get_state()
    extra_attrs, extra_arrays = model._extra_state()   # feature names, normalizer (streamrank.base)
    attrs, arrays = {**attrs, **extra_attrs}, {**arrays, **extra_arrays}
    return {
        "streamrank": "model",
        "format_version": MODEL_FORMAT_VERSION,
        "class": type(model).__name__,
        "params": _jsonable(model.get_params()),
        "state": _jsonable(attrs),
        "arrays": sorted(arrays),
    }, arrays


def write_group(root, model, root_attrs=None) -> None:
    """Write ``model``'s parameters and learned state into the empty, writable zarr group ``root``.

    The root attributes are written last: a group without them is not a model.
    They hold the record of every chunk written (read back from ``root``'s
    store: :mod:`streamrank._model_record`), then ``root_attrs``: more root
    attributes (the command line's record of the fit).
    """
    import zarr

    root_doc, arrays = _model_state(model)
    record = {}
    # every chunk is written, zeros too: load() bounds an array's declared size by its chunk files
    with zarr.config.set({"array.write_empty_chunks": True}):
        for name, a in arrays.items():
            if sp.issparse(a):
                a = a.tocsr()
                g = root.create_group(name)
                g.attrs["shape"] = list(a.shape)
                g.attrs["format"] = "csr"
                for part in ("indptr", "indices", "data"):
                    arr = np.ascontiguousarray(getattr(a, part))
                    z = g.create_array(part, shape=arr.shape, dtype=arr.dtype, compressors=_codecs(),
                                       chunks=(max(1, min(arr.size, CSR_CHUNK)),) if arr.ndim == 1 else arr.shape)
                    z[...] = arr
                    record[f"{name}/{part}"] = _written(z)
            else:
                arr = np.ascontiguousarray(np.asarray(a))
                chunks = tuple(max(1, s) for s in arr.shape) if arr.ndim else ()
                z = root.create_array(name, shape=arr.shape, dtype=arr.dtype, chunks=chunks or None,
                                      compressors=_codecs())
                z[...] = arr
                record[name] = _written(z)
        root.attrs.update(_model_record.with_record(root_doc, record, root_attrs))


def _written(z) -> dict:
    """The record of the zarr array ``z`` just written: the CRC-32C trailer of each chunk, read back from its store."""
    from zarr.abc.store import SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    store, proto, crcs = z.store_path.store, default_buffer_prototype(), {}
    for key in _model_record.chunk_keys(z.shape, z.chunks):
        tail = sync(store.get(f"{z.path}/{key}", prototype=proto, byte_range=SuffixByteRequest(4)))
        crcs[key] = int.from_bytes(tail.to_bytes(), "little")
    return _model_record.record_entry(np.dtype(z.dtype).name, z.shape, z.chunks, crcs)


#: how often :func:`load` reads again a model that saves keep replacing while it reads
_READ_ATTEMPTS = 100


def _identity(path: Path):
    """``(directory to read, identity)`` of the model that :func:`load` of the local ``path`` reads now.

    The directory is ``path``, the version a nightly ``current`` pointer names,
    or -- ``path`` absent while a save is between its two renames, or after
    one killed there -- the ``.old`` copy of the previous model.  The identity
    (the pointer's target, the directory's inode and change time, whether
    ``path`` was absent) changes whenever a save or a nightly run replaces
    what ``path`` leads to: equal identities before and after a read mean the
    read saw one model, whole.
    """
    for _ in range(3):          # path absent and no .old copy: a save may have just completed
        target, where = None, path
        if path.is_file() and path.name == "current":  # pointer file of the nightly pipeline
            target = path.read_text().strip()
            if target in ("", ".", "..") or "/" in target or "\\" in target:  # only a version beside the pointer
                raise ModelFormatError(f"{path} names {target[:80]!r}, not a version directory beside it")
            where = path.parent / target
        try:
            st = os.stat(where)
            return where, (target, str(where), st.st_dev, st.st_ino, st.st_ctime_ns)
        except FileNotFoundError:
            pass
        old = _replaced_copy(where) if where.parent.is_dir() else None
        if old is not None:
            try:
                st = os.stat(old)
                return old, (target, str(old), st.st_dev, st.st_ino, st.st_ctime_ns)
            except FileNotFoundError:
                continue
        if not os.path.lexists(where):
            break
    raise FileNotFoundError(f"no model at {where}")


def _current_identity(path: Path):
    try:
        return _identity(path)[1]
    except Exception:  # noqa: BLE001 - gone or damaged now: not the model that was read
        return None


def load(path: PathLike, storage_options: dict | None = None) -> BaseRanker:
    """Load a model written by :func:`save` (or a nightly ``current`` pointer).

    ``path`` may be a URL of object storage with ``storage_options`` (see
    :func:`save`); the model is validated exactly as a local one.
    """
    from ._remote_models import load_url
    from .io._remote import is_url, local_path

    if is_url(path):
        return load_url(path, storage_options, read_group)
    if storage_options:
        raise ValueError(f"storage_options are for a URL of object storage; {str(path)!r} is a local path")
    path = Path(local_path(path))
    # A save replacing the model while it is read (two renames: replace_dir) or a nightly run moving
    # ``current`` on can leave this read with files of two models or of none: it fails, or it sees the
    # identity change, and reads the model now there again -- the old or the new one, whole.
    for attempt in range(_READ_ATTEMPTS):
        where, seen = _identity(path)
        try:
            model = _load_dir(where)
        except Exception:
            if _current_identity(path) == seen:
                raise                       # the model did not change under the read: its own error
        else:
            if _current_identity(path) == seen:
                return model
        time.sleep(min(0.05, 0.001 * attempt))
    raise ModelFormatError(f"{path} was replaced {_READ_ATTEMPTS} times while it was being read; "
                           "load it again once the saves writing it have stopped")


def _load_dir(path: Path):
    """The model in the local directory ``path``, read and validated (:func:`load`)."""
    root, chunk_bytes = _zarr_group(path)
    return read_group(root, path, lambda name: _stored_bytes(path / name / "c"), chunk_bytes)


def _zarr_group(path: Path):
    """``(zarr group, chunk_bytes)`` of the local model ``path``.

    A model carrying the record of its chunks (:mod:`streamrank._model_record`)
    is read into memory first -- its documents and the recorded chunk files,
    each once -- and zarr reads it from there, so the chunks' trailers are
    compared with the record without reading a file twice; ``chunk_bytes`` is
    then ``{key: bytes}.get``.  Any other model is zarr's to open (None).
    """
    import zarr

    try:
        record = _model_record.parse(json.loads((path / "zarr.json").read_bytes())["attributes"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        record = None               # no record, or a damaged one: zarr's reading of it says so
    if record is None:
        try:
            return zarr.open_group(store=zarr.storage.LocalStore(str(path), read_only=True), mode="r"), None
        except Exception as exc:
            raise ModelFormatError(f"{path} is not a readable streamrank model: {exc}") from exc
    objects = {}
    for dirpath, _dirs, files in os.walk(path):
        if "zarr.json" in files:
            rel = Path(dirpath, "zarr.json").relative_to(path)
            objects["/".join(rel.parts)] = (path / rel).read_bytes()
    for label, entry in record.items():         # (names and keys checked by parse: nothing outside the model)
        for key in entry["chunk_crc32c"]:
            try:
                objects[f"{label}/{key}"] = path.joinpath(*label.split("/"), *key.split("/")).read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                pass                             # read_group names the missing chunk
    return open_objects(objects, path), objects.get


def read_group(root, path, stored_bytes, chunk_bytes=None):
    """The model held by the zarr group ``root`` (named ``path`` in errors), validated on the way.

    ``stored_bytes(name)``: the bytes of the chunk files of array ``name``
    (bounds its declared size before zarr allocates it).
    ``chunk_bytes(key)``: the bytes of the file ``key`` (``coef_/c/0``) as
    zarr read it, or None where it is missing; it checks the chunks against
    the model's record (:mod:`streamrank._model_record`).
    """
    import importlib

    try:
        meta = dict(root.attrs)
    except Exception as exc:
        raise ModelFormatError(f"{path} is not a readable streamrank model: {exc}") from exc
    if meta.get("streamrank") != "model":
        raise ModelFormatError(f"{path} is a zarr group but not a streamrank model")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > MODEL_FORMAT_VERSION:
        raise ModelFormatError(
            f"{path} has model format version {version!r}; this streamrank reads versions "
            f"<= {MODEL_FORMAT_VERSION}: upgrade streamrank"
        )
    name = meta.get("class")
    if isinstance(name, str) and name not in _REGISTRY:  # import this learner's module only (start-up cost)
        own = _learners.LEARNERS.get(name)
        for mod in [own] if own in _learners.LEARNER_MODULES else _learners.LEARNER_MODULES:
            importlib.import_module(mod)    # a learner module that does not import is an error, not skipped
    cls = _REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ModelFormatError(f"{path} holds unknown model class {meta.get('class')!r}")
    arrays = {}
    names = meta.get("arrays", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ModelFormatError(f"{path}: the 'arrays' attribute is not a list of names")
    try:
        record = _model_record.parse(meta)          # None: saved before sr.save recorded its chunks
        recorded = _model_record.by_array(record) if record is not None else None
        if record is not None:
            _model_record.check_listed(recorded, names)
    except ValueError as exc:
        raise ModelFormatError(f"{path}: {exc}") from exc

    def read(label, a):
        return _read_array(label, a, record, chunk_bytes)

    for name in names:
        try:
            node = root[name]
            parts = list(node.arrays()) if _is_group(node) else [("", node)]
            labels = [f"{name}/{part}" if part else name for part, _a in parts]
            if record is not None:
                _model_record.check_parts(recorded.get(name, []), labels)
            for label, (_part, a) in zip(labels, parts):
                kind = np.dtype(a.dtype).kind
                if kind not in "biuf":  # learned state is numbers; never decode objects
                    raise ModelFormatError(f"dtype {a.dtype} is not numeric")
                _model_record.check_layout(label, a.metadata.to_dict())
                _check_stored_size(label, a, stored_bytes)
                if record is not None:
                    _model_record.check_array(label, np.dtype(a.dtype).name, a.shape, a.chunks, record[label])

            if _is_group(node):
                shape = node.attrs["shape"]
                if (not isinstance(shape, list) or len(shape) != 2
                        or not all(isinstance(v, int) and 0 <= v <= np.iinfo(np.int32).max for v in shape)):
                    raise ModelFormatError(f"its 'shape' attribute {shape!r} is not two counts")
                M = sp.csr_matrix(tuple(read(f"{name}/{p}", node[p]) for p in ("data", "indices", "indptr")),
                                  shape=tuple(shape))
                M.check_format(full_check=True)   # indptr monotone, indices within the columns
                arrays[name] = M
            else:
                arrays[name] = read(name, node)
        except Exception as exc:
            raise ModelFormatError(f"{path}: array {name!r} is missing or damaged: {exc}") from exc
    try:
        renamed = getattr(cls, "_renamed_params", {})
        model = cls(**{renamed.get(k, k): v for k, v in meta.get("params", {}).items()})
        model._set_state(meta.get("state", {}), arrays)
        model._set_extra_state(meta.get("state", {}), arrays)
    except (TypeError, KeyError, ValueError, IndexError, AttributeError) as exc:   # "params": null, ...
        raise ModelFormatError(f"{path}: the saved state of {cls.__name__} cannot be restored "
                               f"({type(exc).__name__}: {exc})") from exc
    return model


def _read_array(label: str, a, record, chunk_bytes):
    """The values of array ``a`` (``label`` in the record), its chunks checked against the record if any."""
    crcs = None if record is None else record[label]["chunk_crc32c"]
    values = a[...]
    if crcs is not None and chunk_bytes is not None:     # after zarr's own checks of each chunk, as read() does
        for key, want in crcs.items():
            _model_record.check_chunk(label, key, chunk_bytes(f"{label}/{key}"), want)
    return values


def _is_group(node) -> bool:
    """Whether ``node`` is a zarr group (a CSR array's three parts)."""
    import zarr

    return isinstance(node, zarr.Group)


#: a saved array may declare at most this many decoded bytes per byte of chunk files, plus
#: ``_STORED_SLACK``: zstd's densest frames (RLE blocks of 128 KiB in 4 bytes) stay below 1 : 32768
_MAX_RATIO = 1 << 15
_STORED_SLACK = 16 << 20


def _check_stored_size(name: str, arr, stored_bytes) -> None:
    """Refuse an array whose declared size its stored chunks cannot hold (before zarr allocates it).

    A model directory of a few KB declaring 2**28 entries would otherwise make
    zarr allocate them (missing chunks read as the fill value).  The bound is
    what zstd could at most expand the stored chunk bytes to, plus 16 MiB
    (small arrays, and models saved before every chunk was written).
    """
    declared = int(np.prod(arr.shape, dtype=object)) * np.dtype(arr.dtype).itemsize
    if declared <= _STORED_SLACK:
        return
    stored = stored_bytes(name)
    if declared > _MAX_RATIO * stored + _STORED_SLACK:
        raise ModelFormatError(f"it declares shape {tuple(arr.shape)} ({declared:,} bytes) but its chunk files "
                               f"hold {stored:,} bytes, which cannot decode to that much")


def _stored_bytes(chunk_dir: Path) -> int:
    """Total size of the files under a local array's chunk directory ``c``."""
    stored = 0
    for root, _dirs, files in os.walk(chunk_dir):
        for f in files:
            try:
                stored += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return stored


def _dumps(obj) -> str:
    return json.dumps(_jsonable(obj))


def __getattr__(name):
    """``read_repo_model`` / ``write_repo_model``: a model as a group of an Icechunk repository (a nightly models
    directory at a URL), in :mod:`streamrank._repo_models`, imported on first use."""
    if name in ("read_repo_model", "write_repo_model"):
        import functools

        from . import _repo_models

        io = {"read": read_group} if name == "read_repo_model" else {"write": write_group}
        return functools.partial(getattr(_repo_models, name), **io)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
