"""A saved model's zarr group held in memory, and the error a damaged or unknown model raises.

Below both :mod:`streamrank.persistence` (which re-exports both names) and
:mod:`streamrank._remote_models`, so that neither imports the other back.
"""
from __future__ import annotations

__all__ = ["ModelFormatError", "open_objects"]


class ModelFormatError(ValueError):
    """A saved model is corrupt, incomplete or of an unknown format version."""


ModelFormatError.__module__ = "streamrank.persistence"     # where users import it from (and how it prints)


def open_objects(objects: dict, where):
    """The zarr group held by ``objects`` (``{key: bytes}`` of a model's files, in memory), read-only."""
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    proto = default_buffer_prototype()
    try:
        store = MemoryStore({k: proto.buffer.from_bytes(v) for k, v in objects.items()}, read_only=True)
        return zarr.open_group(store=store, mode="r")
    except Exception as exc:
        raise ModelFormatError(f"{where} is not a readable streamrank model: {exc}") from exc
