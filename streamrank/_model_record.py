"""What ``sr.save`` wrote, for ``sr.load`` to check: how each array's bytes are read, and which chunk files hold them.

Why (issue 16, "trust nothing read from disk"): every chunk file of a saved
model ends in a CRC-32C of its bytes, but that only proves the file is intact,
not that it is the file saved at that place, nor that its bytes are read as
they were written.  Two kinds of damage loaded silently before this module:

* **A document edited to read the same bytes differently.**  ``"endian":
  "big"`` in an array's ``bytes`` codec, another data type of the same item
  size, an extra codec (a ``transpose``, a filter), another chunk-key
  separator (every chunk then reads as missing, i.e. zeros): every CRC stays
  valid.  Every streamrank version wrote one interpretation only -- zarr v3,
  a regular grid, keys ``c/i/j`` ("/" separator), fill value 0, no storage
  transformer, codecs ``bytes`` (little endian) -> ``zstd`` -> ``crc32c``
  (models saved before the CRC-32C: ``bytes`` -> ``zstd``, zarr's default).
  :func:`check_layout` refuses anything else before zarr decodes a chunk,
  for a local model and a model at a URL alike.
* **A chunk file deleted, swapped with another's or copied from another
  model.**  zarr reads a missing chunk as its fill value, and models saved
  before ``sr.save`` wrote every chunk lack their all-zero chunks, so a missing
  file cannot be an error for every model.  So ``sr.save`` now records, in the
  root attribute :data:`SAVED_ARRAYS`, for every array (``name`` or
  ``name/indptr``...) its data type, shape, chunk shape and the CRC-32C
  trailer of every chunk file it wrote (the last 4 bytes of the file, little
  endian; ``{}`` for an array of no chunk)::

      "saved_arrays": {"coef_": {"data_type": "float64", "shape": [3], "chunk_shape": [3],
                                 "chunk_crc32c": {"c/0": 2882400001}}, ...}

  On loading a model that carries it: the arrays listed must be the arrays
  recorded (:func:`check_listed`, :func:`check_parts`), each array's document must declare the
  recorded data type, shape and chunk shape (:func:`check_array`), and each
  chunk file must exist and end in the recorded trailer
  (:func:`check_chunk`), checked after the chunk's own checks (CRC-32C,
  declared size, decoding) and before its values are used.  The trailer is
  the one the reader already holds for the chunk's own CRC check: no file is
  read twice.  A 32-bit checksum detects damage and mix-ups, not a forger (who
  can rewrite the record as well).

Models without the attribute (saved before it existed) load as before.  Older
streamrank versions ignore the unknown attribute, so the model format version
is unchanged.  Errors are plain ``ValueError``\\ s with the message;
``persistence.read_group`` makes them a ``ModelFormatError`` naming the model
and the array.
"""
from __future__ import annotations

import itertools
import math
import re

__all__ = ["SAVED_ARRAYS", "chunk_keys", "record_entry", "with_record", "parse", "by_array", "check_listed",
           "check_parts", "check_array", "check_chunk", "check_layout", "CODECS"]

#: the root attribute holding the record
SAVED_ARRAYS = "saved_arrays"
#: the codec names of every model array streamrank ever wrote (the first models had no ``crc32c``)
CODECS = (["bytes", "zstd", "crc32c"], ["bytes", "zstd"])
_ENTRY_KEYS = ["data_type", "shape", "chunk_shape", "chunk_crc32c"]
_KEY = re.compile(r"^c(/[0-9]+)*$")
_EDITED = "a document edited to read the chunks' bytes differently is refused"


def chunk_keys(shape, chunks):
    """The chunk keys of a regular grid, in C order: ``c`` for a 0-d array, else ``c/i/j...``."""
    grid = [-(-int(s) // int(c)) for s, c in zip(shape, chunks)]
    for coords in itertools.product(*(range(n) for n in grid)):
        yield "/".join(["c", *map(str, coords)])


def record_entry(dtype_name: str, shape, chunks, crcs: dict) -> dict:
    """The record of one array: ``crcs`` maps each chunk key to the CRC-32C trailer of its file (an int)."""
    return {"data_type": dtype_name, "shape": [int(s) for s in shape], "chunk_shape": [int(c) for c in chunks],
            "chunk_crc32c": dict(crcs)}


def with_record(doc: dict, record: dict, extra=None) -> dict:
    """The root attributes: ``doc``, the record, then ``extra`` (the command line's record comes last)."""
    return {**doc, SAVED_ARRAYS: record, **dict(extra or {})}


def _counts(v) -> bool:
    return isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v)


def _entry_ok(e) -> bool:
    if not isinstance(e, dict) or sorted(e) != sorted(_ENTRY_KEYS) or not isinstance(e["data_type"], str):
        return False
    shape, chunks, crcs = e["shape"], e["chunk_shape"], e["chunk_crc32c"]
    if not (_counts(shape) and _counts(chunks) and len(shape) == len(chunks) and all(c > 0 for c in chunks)
            and isinstance(crcs, dict)):
        return False
    grid = [-(-s // c) for s, c in zip(shape, chunks)]
    if math.prod(grid) != len(crcs):
        return False
    for key, crc in crcs.items():            # every key a place of the grid (with the count: the whole grid)
        coords = key.split("/")[1:] if _KEY.match(key) else None
        if coords is None or len(coords) != len(grid) or not all(int(i) < n for i, n in zip(coords, grid)) \
                or not isinstance(crc, int) or isinstance(crc, bool) or not 0 <= crc < 1 << 32:
            return False
    return True


def _name_ok(name) -> bool:
    parts = name.split("/") if isinstance(name, str) else []
    return 1 <= len(parts) <= 2 and all(p not in ("", ".", "..") and not p.startswith(".") and "\\" not in p
                                        and "\0" not in p for p in parts)


def parse(attrs: dict):
    """The record of the root attributes ``attrs``, checked (None: a model saved before it existed).

    ``{array: {"data_type", "shape", "chunk_shape", "chunk_crc32c"}}``, each
    ``chunk_crc32c`` naming every chunk of the grid once; anything else is a
    damaged record (``ValueError``).
    """
    record = attrs.get(SAVED_ARRAYS)
    if record is None and SAVED_ARRAYS not in attrs:
        return None
    if not isinstance(record, dict) or not all(_name_ok(k) and _entry_ok(v) for k, v in record.items()):
        raise ValueError(f"the {SAVED_ARRAYS!r} attribute is damaged: not {{array: {{data_type, shape, "
                         "chunk_shape, chunk_crc32c of every chunk of its grid}}}}")
    return record


def by_array(record: dict) -> dict:
    """``{listed name: [its recorded labels]}``: ``coef_`` -> ``["coef_"]``, ``W`` -> ``["W/data", ...]``."""
    out: dict = {}
    for label in record:
        out.setdefault(label.split("/")[0], []).append(label)
    return {k: sorted(v) for k, v in out.items()}


def check_listed(recorded: dict, names) -> None:
    """Every recorded array (``recorded``: :func:`by_array`) must be listed in the model's ``arrays`` attribute
    (``names``): one dropped from the listing (a normalizer, say) would otherwise load as a model without it."""
    dropped = sorted(set(recorded) - set(names))
    if dropped:
        raise ValueError(f"the {SAVED_ARRAYS!r} record names {dropped}, which the 'arrays' attribute does not list "
                         "(the model was saved with them)")


def check_parts(want: list, labels) -> None:
    """The arrays found for one listed name (``labels``: ``name``, or ``name/indptr``... of a CSR group) must be
    the ones recorded for it (``want``, sorted)."""
    if sorted(labels) != want:
        raise ValueError(f"it holds the arrays {sorted(labels)}, but sr.save wrote {want}")


def check_array(name: str, dtype_name: str, shape, chunks, entry: dict) -> None:
    """The array ``name``'s document must declare the recorded data type, shape and chunk shape."""
    for what, got, want in (("data type", dtype_name, entry["data_type"]), ("shape", list(shape), entry["shape"]),
                            ("chunk shape", list(chunks), entry["chunk_shape"])):
        if got != want:
            raise ValueError(f"{name}/zarr.json declares {what} {got!r}, but sr.save wrote {want!r}; {_EDITED}")


def check_chunk(name: str, key: str, tail, want: int) -> None:
    """The chunk file ``name/key`` must exist (``tail`` not None) and end in the recorded trailer ``want``.

    ``tail``: the file's last 4 bytes (or the whole file).
    """
    if tail is None:
        raise ValueError(f"chunk file {name}/{key} is missing: sr.save wrote it (deleted after the save?)")
    got = int.from_bytes(bytes(tail[-4:]), "little")
    if len(tail) < 4 or got != want:
        raise ValueError(f"chunk file {name}/{key} is not the one sr.save wrote there (its CRC-32C trailer is "
                         f"{got:#010x}, the model records {want:#010x}): swapped with another chunk, or copied "
                         "from another array or model?")


def check_layout(name: str, meta: dict) -> None:
    """Refuse an array document (zarr's ``metadata.to_dict()``) that reads the bytes otherwise than sr.save wrote.

    The data type is checked against the record (:func:`check_array`) and for
    being numeric by the caller; everything else here: zarr v3, a regular
    grid, default chunk keys with the "/" separator, fill value +0, no storage
    transformer, codecs ``bytes`` (little endian) -> ``zstd`` [-> ``crc32c``].
    """
    where = f"{name}/.zarray" if meta.get("zarr_format") == 2 else f"{name}/zarr.json"

    def refuse(field, got, want):
        raise ValueError(f"{where}: {field} is {got!r}, but streamrank writes {want!r}; {_EDITED}")

    if meta.get("zarr_format") != 3:
        refuse("zarr_format", meta.get("zarr_format"), 3)
    if list(meta.get("storage_transformers") or []):
        refuse("storage_transformers", list(meta["storage_transformers"]), [])
    fill = meta.get("fill_value")
    if not isinstance(fill, (bool, int, float)) or fill != 0 or math.copysign(1.0, float(fill)) < 0:
        refuse("fill_value", fill, 0)
    grid = meta.get("chunk_grid")
    if not isinstance(grid, dict) or grid.get("name") != "regular":
        refuse("chunk_grid", grid, "regular")
    keys = meta.get("chunk_key_encoding")
    sep = (keys.get("configuration") or {}).get("separator", "/") if isinstance(keys, dict) else None
    if not isinstance(keys, dict) or keys.get("name") != "default" or sep != "/":
        refuse("chunk_key_encoding", keys, {"name": "default", "configuration": {"separator": "/"}})
    codecs = list(meta.get("codecs") or [])
    names = [c.get("name") if isinstance(c, dict) else c for c in codecs]
    if names not in CODECS:
        refuse("codecs", names, CODECS[0])
    endian = (codecs[0].get("configuration") or {}).get("endian", "little")
    if endian != "little":
        refuse("the bytes codec's endian", endian, "little")
