"""Opening the stores and models named on the command line; sizes and JSON for reports."""
from __future__ import annotations

import math
from pathlib import Path


def _resolve_pointer(path) -> Path:
    """A nightly ``DIR/current`` pointer file -> the version directory it names."""
    p = Path(path)
    if p.is_file() and p.name == "current":
        target = p.read_text().strip()
        if target:
            return p.parent / target
    return p


#: ``--storage-options`` of the command being run: the filesystem options of a store or model given as a URL
STORAGE_OPTIONS = None


def _is_url(path) -> bool:
    from ..io._remote import is_url

    return is_url(path)


def url_options(store):
    """``--storage-options`` for a store or model at a URL (None for a local one)."""
    return STORAGE_OPTIONS if _is_url(store) else None


def _kind_of(path) -> str:
    """'group', 'tuple', 'model' or raise (FileNotFoundError / StoreFormatError)."""
    from ..io.schema import GROUP_FORMAT, TUPLE_FORMAT, StoreFormatError, read_attrs

    if _is_url(path):                        # a store on object storage (s3://…)
        from ..io._icechunk_repo import open_location

        attrs = read_attrs(open_location(str(path), STORAGE_OPTIONS))
        fmt = attrs.get("format")
        if fmt in (GROUP_FORMAT, TUPLE_FORMAT):
            return "group" if fmt == GROUP_FORMAT else "tuple"
        raise StoreFormatError(f"{path} is a zarr group but not a streamrank store")
    p = _resolve_pointer(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist")
    if p.is_file():
        raise StoreFormatError(f"{p} is a file, not a streamrank store or model (a zarr directory)")
    attrs = read_attrs(p)
    if attrs.get("streamrank") == "model":
        return "model"
    fmt = attrs.get("format")
    if fmt == GROUP_FORMAT:
        return "group"
    if fmt == TUPLE_FORMAT:
        return "tuple"
    raise StoreFormatError(f"{p} is a zarr group but neither a streamrank store nor a model")


def _open_store(path, *, want=None):
    """Open a GroupStore or TupleStore read-only; ``want`` = 'group' | 'tuple' checks the kind."""
    from ..io.group_store import GroupStore
    from ..io.schema import StoreFormatError

    kind = _kind_of(path)
    if kind == "model":
        raise StoreFormatError(f"{path} is a saved model, not a store; pass it as --model")
    if want is not None and kind != want:
        if want == "tuple":
            raise StoreFormatError(f"{path} is a scored-group store; this learner needs a tuple store of "
                                   "(query, preferred item, other item) tuples (ingest one with --format zarr)")
        raise StoreFormatError(f"{path} is a tuple store; this command needs a scored-group store "
                               "(ingest LETOR text, .npz or a GroupStore)")
    opts = STORAGE_OPTIONS if _is_url(path) else None
    if kind == "group":
        return GroupStore.open(path, storage_options=opts)
    from ..io.tuple_store import TupleStore      # only for a tuple store: 5-10 ms of a group command (issue 22)

    return TupleStore.open(path, storage_options=opts)


def _load_model(path, storage_options=None):
    from .. import persistence
    from ..io._remote import is_url

    if is_url(path):   # a model published on object storage (sr.save(model, url)): --storage-options, else env
        opts = STORAGE_OPTIONS if storage_options is None else storage_options
        return persistence.load(str(path), storage_options=opts)
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no model at {p}")
    if p.is_dir() and (p / "zarr.json").exists():
        from ..io.schema import read_attrs

        attrs = read_attrs(p)
        if attrs.get("streamrank") != "model" and attrs.get("format"):
            raise persistence.ModelFormatError(f"{p} is a streamrank store, not a model; pass it as --store")
    return persistence.load(p)


def _model_meta(path) -> dict:
    """The attributes of a saved model's zarr group (no model built)."""
    from ..io.schema import read_attrs

    return read_attrs(_resolve_pointer(path))


def _dir_size(path) -> int:
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n} B"  # pragma: no cover


def _jsonable(obj):
    from ..persistence import _jsonable as js

    obj = js(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    return obj
