"""``sr.save`` / ``sr.load`` at URLs of object storage: one Icechunk commit per save; the previous layout read.

**Save.** A model saved at ``U`` (``s3://bucket/models/ranker``; also
``gs://``, ``az://``, ``memory://``) is the zarr group ``model`` of an
Icechunk repository at ``U`` (:func:`streamrank._repo_models.save_to_repository`),
written in a writable session and made visible by one commit: a reader reads
the whole old model or the whole new one.  A writer that dies before the
commit leaves nothing visible.  Of two saves racing, the second commit is
redone on top of the first: the last save wins, as with two local saves.
Every save stays in the repository's history: ``sr.load(U + "@" + ID)``
reads the model as of a snapshot id (``sr.save`` returns it) or a tag.
Saving is refused (``NotImplementedError``) on other filesystems (ftp,
sftp, …); see :data:`ATOMIC_PUT`.

**Load.** A repository at ``U`` (or a nightly models directory that is one,
``U = DIR/current`` or ``DIR/<version>``): the model is read from one
read-only session and validated exactly as a local model
(:func:`streamrank.persistence.read_group`: the chunk record, the declared
sizes).

**The previous layout** (read only): ``U/model.json``, a pointer naming an
immutable version ``U/versions/V/`` published by one PUT.  The pointer is
read (bounded, validated), ``U/versions/V/`` listed once and every object
fetched, all requests in flight together, then validated as a local model
(every chunk must be there; they are compared with the model's record).  An
object listed but gone when fetched while the pointer names another version
means a save replaced the model meanwhile: the load starts over (at most
:data:`LOAD_ATTEMPTS` times).  A nightly models directory of that layout
keeps ``DIR/current`` as one object naming a version beside it;
``sr.load(DIR + "/current")`` follows it.
"""
from __future__ import annotations

import itertools
import json
import os
import re

from .io._remote import filesystem as _filesystem
from .io._remote import is_url
from ._model_zarr import ModelFormatError, open_objects

__all__ = ["is_url", "save_url", "load_url", "POINTER", "VERSIONS", "LOAD_ATTEMPTS"]

POINTER = "model.json"
VERSIONS = "versions"
NIGHTLY_POINTER = "current"
LOAD_ATTEMPTS = 5
POINTER_FORMAT_VERSION = 1
_MAX_POINTER_BYTES = 64 << 10
#: filesystems whose object write is atomic (a reader gets the whole old object or the whole new one)
ATOMIC_PUT = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory")
_VERSION_RE = re.compile(r"^[0-9]{8}T[0-9]{12}Z-[0-9a-f]{16}$")


def filesystem(url, storage_options=None):
    """``(fsspec filesystem, path inside it)`` of ``url`` (a missing client is a one-line error naming the extra)."""
    fs = _filesystem(url, storage_options)
    return fs, fs._strip_protocol(url).rstrip("/")


def _join(url: str, *parts: str) -> str:
    return "/".join([url.rstrip("/"), *parts])


# ------------------------------------------------------------------ save
def save_url(model, url, storage_options=None, root_attrs=None, *, write) -> str:
    """Save ``model`` at ``url``: one commit of its repository (:func:`._repo_models.save_to_repository`).

    Returns the commit's snapshot id.
    """
    protocol = url.split("://", 1)[0].lower()
    if protocol not in ATOMIC_PUT:
        raise NotImplementedError(
            f"sr.save to {protocol}:// is refused: its writes are not atomic objects, so a reader could see a "
            "half-written model; save to a local path or to object storage "
            f"({', '.join(p + '://' for p in ATOMIC_PUT if p != 'memory')})")
    from ._repo_models import save_to_repository

    return save_to_repository(model, url, storage_options, root_attrs, write=write)


# ------------------------------------------------------------------ load
def _read_small(fs, path, what, limit=_MAX_POINTER_BYTES) -> bytes:
    data = fs.cat_file(path, start=0, end=limit + 1)
    if len(data) > limit:
        raise ModelFormatError(f"{what} is larger than {limit} bytes: not a {os.path.basename(path)} "
                               "written by streamrank")
    return data


def _read_pointer(fs, root, url) -> dict:
    """The validated pointer object ``root/model.json`` (``url`` names it in errors)."""
    where = _join(url, POINTER)
    data = _read_small(fs, _join(root, POINTER), where)
    try:
        ptr = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelFormatError(f"{where} is not valid JSON (damaged?): {exc}") from None
    if not isinstance(ptr, dict) or ptr.get("streamrank") != "model-pointer":
        raise ModelFormatError(f"{where} is not a streamrank model pointer")
    fv = ptr.get("format_version")
    if isinstance(fv, bool) or not isinstance(fv, int) or fv > POINTER_FORMAT_VERSION:
        raise ModelFormatError(f"{where} has pointer format version {fv!r}; this streamrank reads versions "
                               f"<= {POINTER_FORMAT_VERSION}: upgrade streamrank")
    v = ptr.get("version")
    if not isinstance(v, str) or not _VERSION_RE.match(v):
        raise ModelFormatError(f"{where} names version {str(v)[:80]!r}, which is not a version name "
                               "written by sr.save")
    return ptr


def _follow_nightly_pointer(fs, root, url):
    """``DIR/current`` (an object naming a version beside it) -> (root, url) of that version."""
    name = _read_small(fs, root, url, 4096)
    try:
        name = name.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ModelFormatError(f"{url} cannot be read as the name of a version") from None
    if name in ("", ".", "..") or name.startswith(".") or "/" in name or "\\" in name or "\0" in name:
        raise ModelFormatError(f"{url} names {name[:80]!r}, not a version beside it")
    return root.rsplit("/", 1)[0] + "/" + name, url.rstrip("/").rsplit("/", 1)[0] + "/" + name


def _listing(fs, prefix) -> dict:
    """``{key relative to prefix: size}`` of every object under ``prefix`` now (one paginated LIST)."""
    fs.invalidate_cache(prefix)                   # s3fs caches listings; a reader must see the storage as it is
    try:
        found = fs.find(prefix, detail=True)
    except FileNotFoundError:
        return {}
    base = prefix.rstrip("/") + "/"
    return {k[len(base):]: int(info.get("size") or 0) for k, info in found.items() if k.startswith(base)}


def _fetch(fs, prefix, keys):
    """``{key: bytes}`` of the objects ``keys`` under ``prefix``, all requests in flight together;
    None when one of them is gone."""
    paths = [f"{prefix}/{k}" for k in keys]
    if not paths:
        return {}
    got = fs.cat(paths, on_error="return")
    out = {}
    for k, path in zip(keys, paths):
        v = got.get(path)
        if v is None or isinstance(v, FileNotFoundError):
            return None
        if isinstance(v, BaseException):
            raise v
        out[k] = v
    return out


def _expected_chunks(group):
    """``(array path, chunk key)`` of every chunk of every array of ``group`` (all are written by save)."""
    for path, arr in _all_arrays(group):
        grid = getattr(arr, "cdata_shape", None) or ()
        for coords in itertools.product(*(range(n) for n in grid)):
            yield path, arr.metadata.encode_chunk_key(coords)


def _all_arrays(group, prefix=""):
    import zarr

    for name, node in group.members():
        path = f"{prefix}{name}"
        if isinstance(node, zarr.Group):
            yield from _all_arrays(node, path + "/")
        else:
            yield path, node


def _check_layouts(group, where) -> None:
    """Every array's document must read its bytes as sr.save wrote them (:func:`_model_record.check_layout`)."""
    from ._model_record import check_layout

    for path, arr in _all_arrays(group):
        try:
            check_layout(path, arr.metadata.to_dict())
        except ValueError as exc:
            raise ModelFormatError(f"{where}: array {path.split('/')[0]!r} is missing or damaged: {exc}") from None


def _missing_chunk(group, objects):
    for path, key in _expected_chunks(group):
        if f"{path}/{key}" not in objects:
            return f"{path}/{key}"
    return None


def published(url, storage_options=None) -> bool:
    """Whether a model is saved at ``url`` (in a repository, or published by a pointer of the previous layout)."""
    from ._repo_models import published_in_repository

    if published_in_repository(url, storage_options):
        return True
    fs, root = filesystem(url, storage_options)
    return fs.exists(_join(root, POINTER))


def load_url(url, storage_options, read):
    """Load the model published at ``url`` (or a nightly ``DIR/current`` pointer): see the module doc."""
    from ._repo_models import load_from_repository

    model = load_from_repository(url, storage_options, read=read)     # a version of a models directory in a repository
    if model is not None:
        return model
    fs, root = filesystem(url, storage_options)
    fs.invalidate_cache(root)
    if root.rstrip("/").rsplit("/", 1)[-1] == NIGHTLY_POINTER and fs.isfile(root):
        root, url = _follow_nightly_pointer(fs, root, url)
    for _attempt in range(LOAD_ATTEMPTS):
        try:
            version = _read_pointer(fs, root, url)["version"]
        except FileNotFoundError:
            if fs.exists(_join(root, "zarr.json")):
                raise ModelFormatError(
                    f"{url} holds a zarr group but no {POINTER}: it was not published by sr.save(model, url), "
                    "so it cannot be read with the guarantee of seeing one complete model; load a local copy "
                    "with sr.load(path) and save it with sr.save(model, url)") from None
            raise FileNotFoundError(f"no model at {url} (no {_join(url, POINTER)})") from None
        prefix = _join(root, VERSIONS, version)
        where = f"{url} (version {version})"
        listing = _listing(fs, prefix)
        objects = _fetch(fs, prefix, sorted(listing)) if "zarr.json" in listing else None
        group = missing = None
        if objects is not None:
            group = _open(objects, where)
            _check_layouts(group, where)            # (an edited key separator would read as missing chunks)
            missing = _missing_chunk(group, objects)
        if objects is None or missing is not None:
            if _read_pointer(fs, root, url)["version"] != version:
                continue                            # replaced and swept meanwhile: read the new one
            if objects is None:
                raise ModelFormatError(f"{_join(url, POINTER)} names version {version}, but "
                                       f"{_join(url, VERSIONS, version)} holds no complete model")
            raise ModelFormatError(f"{where}: chunk {missing} is missing (a damaged model)")

        def stored_bytes(name, listing=listing):
            head = f"{name}/c"
            return sum(s for k, s in listing.items() if k == head or k.startswith(head + "/"))

        # every object of one immutable version, fetched whole: the model is that version, nothing else
        return read(group, where, stored_bytes, objects.get)
    raise ModelFormatError(f"{url}: the model was replaced {LOAD_ATTEMPTS} times while it was being read; "
                           "try again")


def _open(objects, where):
    """The zarr group held by the fetched ``objects`` (in memory)."""
    return open_objects(objects, where)
