"""``sr.save`` / ``sr.load`` at URLs of object storage: immutable versions published by one object write.

Object storage has no rename and no directory: a model cannot be written
beside the old one and swapped in, and a reader listing ``U/`` while a writer
overwrites it in place would read the new root attributes with old chunks.
So a model at ``U`` (``s3://bucket/models/ranker``, any fsspec URL) is laid
out as::

    U/model.json           the pointer: {"streamrank": "model-pointer", "format_version": 1,
                           "version": V, "class": "RankRLS", "saved": "<UTC time>"}
    U/versions/V/          the model as a zarr group, exactly the layout of a local model
                           (streamrank.persistence), never changed after it is published

**Save.** ``V`` is fresh (UTC time + 64 random bits): the zarr group is
written under ``U/versions/V/`` (arrays first, root attributes last), then
published by *one* PUT of ``U/model.json``.  An object PUT is atomic on S3
(and GCS, Azure, the fsspec memory filesystem): a reader gets the whole old
pointer or the whole new one.  A writer that dies before the PUT leaves an
unpublished version that nobody reads; after the PUT the model is complete.
Two concurrent saves both write their own version; the last PUT wins, as with
two local saves.  Saving is refused (``NotImplementedError``) on filesystems
whose writes are not atomic objects (ftp, sftp, …: a reader could see a
half-written pointer); see :data:`ATOMIC_PUT`.

**Load.** Read the pointer (bounded, validated), list ``U/versions/V/`` once
and fetch every object listed, all requests in flight together; then open
the group from those bytes in memory and validate it exactly as a local
model (the listed sizes bound every array's declared size; every document
must read its bytes as sr.save wrote them, and every chunk of every array
must be there, since zarr would read a missing chunk as zeros; the chunks are
compared with the model's record of them, :mod:`streamrank._model_record`).
The bytes are all of one immutable version, so the model is that version,
whole.  An object listed but gone when fetched, or a chunk missing, while
the pointer now names another version means a save replaced the model and
swept ``V`` meanwhile: the load starts over from the new pointer (at most
:data:`LOAD_ATTEMPTS` times).  With the pointer unchanged it is a damaged
model (:class:`~streamrank.persistence.ModelFormatError`).  Either way the
caller gets the old or the new model, never a mix.

**Sweep.** After publishing, a save removes versions that are not current
and were started more than :data:`SWEEP_GRACE_S` seconds ago (their name
starts with the writer's UTC start time): leftovers of dead writers and
replaced models.  The grace keeps the version of a concurrent save that is
still being written (the one thing the sweep must not delete); this assumes
writers' clocks agree within the grace and no save takes longer than it.
A reader still reading a removed version starts over, as above.

A nightly models directory on object storage keeps its ``current`` pointer
as one object naming a version (a model URL) beside it; ``sr.load(DIR +
"/current")`` follows it (``pipelines`` write it).
"""
from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import re

from .io._remote import filesystem as _filesystem
from .io._remote import is_url
from ._model_zarr import ModelFormatError, open_objects

__all__ = ["is_url", "publish", "load_url", "POINTER", "VERSIONS", "SWEEP_GRACE_S", "LOAD_ATTEMPTS"]

POINTER = "model.json"
VERSIONS = "versions"
NIGHTLY_POINTER = "current"
SWEEP_GRACE_S = 600.0
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


def _new_version() -> str:
    now = _dt.datetime.now(_dt.timezone.utc)
    return f"{now:%Y%m%dT%H%M%S%f}Z-{os.urandom(8).hex()}"


def _version_time(version: str) -> float:
    return _dt.datetime.strptime(version[:21], "%Y%m%dT%H%M%S%f").replace(tzinfo=_dt.timezone.utc).timestamp()


# ------------------------------------------------------------------ save
def publish(url, storage_options, class_name: str, write) -> str:
    """Write a model under a fresh version of ``url``, publish it (one PUT), sweep; returns the version.

    ``write(group)`` writes the model (of class ``class_name``) into the
    empty zarr group it is given (``persistence.write_group``): the group is
    built in memory and its objects are uploaded together (all requests in
    flight at once), then the pointer is written.
    """
    import zarr
    from zarr.storage import MemoryStore

    protocol = url.split("://", 1)[0].lower()
    if protocol not in ATOMIC_PUT:
        raise NotImplementedError(
            f"sr.save to {protocol}:// is refused: its writes are not atomic objects, so a reader could see a "
            "half-written pointer; save to a local path or to object storage "
            f"({', '.join(p + '://' for p in ATOMIC_PUT if p != 'memory')})")
    fs, root = filesystem(url, storage_options)
    version = _new_version()
    objects: dict = {}
    write(zarr.open_group(store=MemoryStore(objects), mode="w"))
    prefix = _join(root, VERSIONS, version)
    fs.pipe({f"{prefix}/{k}": v.to_bytes() for k, v in objects.items()})
    pointer = {"streamrank": "model-pointer", "format_version": POINTER_FORMAT_VERSION, "version": version,
               "class": class_name, "saved": _dt.datetime.now(_dt.timezone.utc).isoformat()}
    fs.pipe_file(_join(root, POINTER), json.dumps(pointer).encode())   # the publication: one object write
    sweep(fs, root)
    return version


def sweep(fs, root, grace=None) -> list:
    """Remove versions of the model at ``root`` that are not current and older than the grace; their names."""
    grace = SWEEP_GRACE_S if grace is None else float(grace)
    try:
        current = _read_pointer(fs, root, root)["version"]
    except (FileNotFoundError, ModelFormatError):
        return []                                 # nothing certain is current: remove nothing
    now = _dt.datetime.now(_dt.timezone.utc).timestamp()
    removed = []
    try:
        fs.invalidate_cache(_join(root, VERSIONS))
        entries = fs.ls(_join(root, VERSIONS), detail=False)
    except FileNotFoundError:
        return []
    for entry in entries:
        v = entry.rstrip("/").rsplit("/", 1)[-1]
        if v == current or not _VERSION_RE.match(v) or now - _version_time(v) <= grace:
            continue
        try:
            fs.rm(_join(root, VERSIONS, v), recursive=True)
            removed.append(v)
        except FileNotFoundError:                 # a concurrent sweep was first
            pass
    return removed


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
    """Whether a model is published at ``url`` (its pointer object exists)."""
    fs, root = filesystem(url, storage_options)
    return fs.exists(_join(root, POINTER))


def load_url(url, storage_options, read):
    """Load the model published at ``url`` (or a nightly ``DIR/current`` pointer): see the module doc.

    ``read(group, where, stored_bytes, chunk_bytes)`` validates and returns the model held by the fetched
    zarr group (``persistence.read_group``).
    """
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
