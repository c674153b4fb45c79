"""zarr's view of a store in an Icechunk repository: every call goes to the location's *current* session.

A :class:`~streamrank.io._icechunk_repo.RepoLocation` changes session with
every transaction (each append's writable session, then the read-only
session at its commit); arrays opened once on a :class:`SessionStore` keep
working across them.  While a transaction writes, the store keeps the last
bytes of each chunk written (their CRC-32C trailers), so binding the new full
chunks to the commit record sends no request to read them back.
"""
from __future__ import annotations

from zarr.storage import WrapperStore

__all__ = ["SessionStore"]

#: last bytes kept of each chunk a transaction writes (its CRC-32C trailer is the last 4)
TAIL_KEPT = 8


class SessionStore(WrapperStore):
    """The zarr store of ``loc``'s current session (``read_only``: what this view allows)."""

    def __init__(self, loc, read_only: bool = False):
        self._loc, self._ro = loc, bool(read_only)

    @property
    def _store(self):
        return self._loc.session.store

    @_store.setter
    def _store(self, value):    # pragma: no cover - WrapperStore never sets it after __init__
        pass

    def _with_store(self, store):
        return type(self)(self._loc, self._ro)

    def with_read_only(self, read_only: bool = False):
        return type(self)(self._loc, read_only)

    @property
    def read_only(self) -> bool:
        return self._ro

    async def set(self, key, value):
        await self._store.set(key, value)
        if self._loc._writable and "/c/" in f"/{key}":      # the CRC-32C trailer commit_bindings reads back
            self._loc._tails[key] = value.to_bytes()[-TAIL_KEPT:]

    def _check_writable(self) -> None:
        if self._ro:
            raise ValueError(f"{self._loc.url} is open read-only")

    @property
    def _is_open(self) -> bool:
        return True

    @_is_open.setter
    def _is_open(self, value) -> None:
        pass

    async def _open(self) -> None:
        return None

    async def _ensure_open(self) -> None:
        return None

    def __eq__(self, other):
        return type(self) is type(other) and self._loc is other._loc

    def __hash__(self):
        return id(self._loc)

    def __repr__(self):
        return f"SessionStore({self._loc.url!r})"

    __str__ = __repr__
