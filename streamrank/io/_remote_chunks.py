"""Chunks of a store at a URL decoded by the same code as local chunk files, several requests in flight.

:class:`RemoteChunkDecoder` is :class:`~streamrank.io._chunk_files.ChunkFileDecoder`
(the same CRC-32C check, the same binding of full chunks to the CRCs of the
commit record, the same blosc decode straight into the caller's buffer, the
same errors naming the chunk) whose bytes come from object storage.
:meth:`RemoteChunkDecoder.prefetch` — called by
:class:`~streamrank.io._row_chunks.RowChunkReader` with every chunk a block
needs — requests them concurrently, ``requests_in_flight`` at a time
(default :data:`REQUESTS_IN_FLIGHT`), so streaming from object storage is
bound by bandwidth rather than by one request's latency; with the block
prefetch of :meth:`~streamrank.io.blocks.BlockSource.blocks` the next
block's requests are in flight while a learner works on this one.
"""
from __future__ import annotations

import json
import sys
import threading

from ._chunk_files import ChunkFileDecoder
from ._remote import Remote

__all__ = ["RemoteChunkDecoder", "REQUESTS_IN_FLIGHT"]

#: chunk requests kept in flight by one reader (each chunk is ~4 MiB uncompressed)
REQUESTS_IN_FLIGHT = 8


class RemoteChunkDecoder(ChunkFileDecoder):
    """``decode(c, out)`` for chunk ``c`` of array ``name`` of the store at ``remote``."""

    requests_in_flight = REQUESTS_IN_FLIGHT

    @classmethod
    def for_remote(cls, remote: Remote, name: str) -> "RemoteChunkDecoder | None":
        if sys.byteorder != "little":   # pragma: no cover
            return None
        try:
            meta = json.loads(remote.read(f"{name}/zarr.json"))
            dec = cls._from_metadata(meta, ".", name)   # (no directory: the bytes come from _read_bytes)
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None
        if dec is not None:
            dec._remote = remote
            dec._fetched = {}
            dec._lock = threading.Lock()
        return dec

    def chunk_file(self, c: int) -> str:
        return self._remote.display("/".join((self.name, "c", str(int(c))) + self._suffix))

    def _key(self, c: int) -> str:
        return "/".join((self.name, "c", str(int(c))) + self._suffix)

    def prefetch(self, chunks) -> None:
        """Fetch these chunks' bytes, ``requests_in_flight`` concurrent requests at a time (kept until decoded)."""
        chunks = [int(c) for c in chunks]
        with self._lock:
            chunks = [c for c in chunks if c not in self._fetched]
        step = max(1, int(self.requests_in_flight))
        for i in range(0, len(chunks), step):
            part = chunks[i : i + step]
            got = self._remote.read_many([self._key(c) for c in part])
            with self._lock:
                for c, data in zip(part, got):
                    self._fetched[c] = data

    def _read_bytes(self, c: int) -> bytes:
        with self._lock:
            data = self._fetched.pop(int(c), False)
        if data is False:
            data = self._remote.read_many([self._key(c)])[0]
        if data is None:
            raise FileNotFoundError(self.chunk_file(c))
        return data
