"""Edits an attacker makes to a store on disk, for the crafted-store tests.

:func:`poke` writes values through zarr (every chunk CRC-32C stays valid)
and then rewrites the commit record's chunk bindings to match
(:mod:`streamrank.io._chunk_binding`) — what someone who edits the group's
``zarr.json`` as well does.  The value checks on read are then the last line
of defence, which is what these tests exercise; the bindings themselves are
tested in ``test_chunk_binding.py`` (there the record is left alone).
"""
from __future__ import annotations

import json
import os

import numpy as np
import zarr


def rebind(path) -> None:
    """Recompute ``chunk_crc32c`` / ``tail_crc32c`` of the group at ``path`` from the chunks on disk."""
    import google_crc32c

    meta = os.path.join(str(path), "zarr.json")
    with open(meta) as f:
        doc = json.load(f)
    attrs = doc["attributes"]
    crcs, tails = attrs.get("chunk_crc32c") or {}, attrs.get("tail_crc32c") or {}
    for name in set(crcs) | set(tails):
        a = zarr.open_array(store=zarr.storage.LocalStore(str(path)), path=name, mode="r")
        tail = ("0",) * (a.ndim - 1)
        for c in range(len(crcs.get(name, []))):
            f = os.path.join(str(path), name, "c", str(c), *tail)
            if os.path.exists(f):
                with open(f, "rb") as fh:
                    crcs[name][c] = int.from_bytes(fh.read()[-4:], "little")
        if name in tails:
            c, n, _ = tails[name]
            C = a.chunks[0]
            rows = np.ascontiguousarray(a[c * C : c * C + n])
            tails[name][2] = int(google_crc32c.value(rows.reshape(-1).view(np.uint8)))
    with open(meta, "w") as f:
        json.dump(doc, f)


def poke(path, array, index, value) -> None:
    """``array[index] = value`` through zarr (valid CRC-32C), with the commit record's bindings updated."""
    a = zarr.open_array(store=zarr.storage.LocalStore(str(path)), path=array, mode="r+")
    a[index] = value
    rebind(path)
