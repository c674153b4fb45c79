"""On-disk layout of streamrank's zarr stores — described in one place.

Both stores are zarr v3 groups, in a local directory or at a URL of object
storage (``s3://…``: an Icechunk repository, one commit per append,
:mod:`streamrank.io._icechunk_repo`).  Functions here that read or write
store files take the store's *location*: a local path (str) or a
:class:`~streamrank.io._remote.Remote`.  Their arrays may be *longer*
than what is committed (a torn append); readers use only the committed counts
kept in the group attributes, never the array shapes.

Scored-group store (``format = "streamrank.group_store"``)
-----------------------------------------------------------
| array | shape / dtype | meaning |
|---|---|---|
| ``X`` | (m, n) float32 | dense features, row-chunked |
| ``X/indptr`` | (m + 1,) int64 | CSR row offsets (global nonzero index) |
| ``X/indices`` | (nnz,) int32 | CSR column of each nonzero |
| ``X/data`` | (nnz,) float32 | CSR value of each nonzero |
| ``y`` | (m,) or (m, v) f8 | scores (v = ``n_outputs`` > 1) |
| ``group_ptr`` | (q + 1,) int64 | rows of group g: ``group_ptr[g]:group_ptr[g+1]`` |
| ``qid`` | (q,) int64 | original query id of each group |
| ``docid/offsets`` | (m + 1,) int64 | optional (``docids=True``): byte range of row r's document id |
| ``docid/bytes`` | (total,) uint8 | optional: the ids, UTF-8 (:mod:`streamrank.io.docids`) |

(``X`` is an array for dense stores and a sub-group holding the CSR triple
for sparse stores.)

Tuple store (``format = "streamrank.tuple_store"``)
----------------------------------------------------
``Q/indptr, Q/indices, Q/data`` (query vectors, CSR), ``D/...`` (item
vectors, CSR), ``tuples`` (l, 3) int64 = (query row, preferred item row,
other item row) and ``magnitude`` (l,) float64 (1.0 when not given).

Attributes (both)
-----------------
``format``, ``format_version``, the static description (``n_features``,
``n_outputs``, ``sparse``, ``feature_names`` / ``n_query_features``,
``n_item_features``) and the **commit record** ``committed`` (counts of rows,
groups, nonzeros … that readers may use) together with ``log``: one entry per
committed batch ``{"batch_id", "rows": [r0, r1], "groups": [g0, g1],
"nnz": [z0, z1], "time", "checksum"}`` (tuple stores use their own count
names).  The commit record is written *last*, in one atomic write of the
group's ``zarr.json`` (zarr's LocalStore writes every key to a temporary file
and renames it), which is what makes an append atomic.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ._remote import Remote

__all__ = [
    "StoreFormatError", "GROUP_FORMAT", "TUPLE_FORMAT", "FORMAT_VERSION", "SUPPORTED_VERSIONS", "GROUP_ARRAYS_DENSE",
    "GROUP_ARRAYS_SPARSE", "TUPLE_ARRAYS", "rows_per_chunk", "compressors", "BatchHasher", "CheckedArray",
    "EVERY_CHUNK", "CHUNK_CRCS", "full_chunk_crcs", "check_chunk_crcs", "every_chunk", "check_array_layout",
    "open_array", "check_format", "check_log", "check_chunk_dirs", "check_store_path", "remove_partial_files",
    "cut_torn_tail", "hash_csr_rows", "append_csr",
]

GROUP_FORMAT = "streamrank.group_store"
TUPLE_FORMAT = "streamrank.tuple_store"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)

#: array path -> (dtype, ndim) of a scored-group store (``y`` may be 1-D or 2-D)
GROUP_ARRAYS_DENSE = {"X": ("float32", 2), "y": ("float64", None), "group_ptr": ("int64", 1),
                      "qid": ("int64", 1)}
GROUP_ARRAYS_SPARSE = {"X/indptr": ("int64", 1), "X/indices": ("int32", 1), "X/data": ("float32", 1),
                       "y": ("float64", None), "group_ptr": ("int64", 1), "qid": ("int64", 1)}
TUPLE_ARRAYS = {"Q/indptr": ("int64", 1), "Q/indices": ("int32", 1), "Q/data": ("float32", 1),
                "D/indptr": ("int64", 1), "D/indices": ("int32", 1), "D/data": ("float32", 1),
                "tuples": ("int64", 2), "magnitude": ("float64", 1)}

#: target size of one uncompressed chunk (bytes).  4 MiB measured well on local
#: disk: large enough that per-chunk overhead is small, small enough that a
#: block budget of 100k rows spans several chunks read concurrently.
CHUNK_BYTES = 4 << 20


class StoreFormatError(ValueError):
    """A store on disk is not what streamrank expects.

    Raised for an unknown format name or version, a missing array, attributes
    that cannot be parsed, or arrays shorter than the committed counts.  The
    message names the file or array concerned.
    """


def rows_per_chunk(row_bytes: int, target: int = CHUNK_BYTES) -> int:
    """Rows per chunk so that one chunk holds about ``target`` bytes (≥ 1024 rows)."""
    return int(max(1024, target // max(1, int(row_bytes))))


def compressors(itemsize: int):
    """Blosc lz4 with byte shuffle, then a CRC-32C of every compressed chunk.

    Measured on this machine (benchmarks/stream_throughput.py ``--codecs``):
    lz4 + shuffle reads about twice as fast as zstd at similar ratios on
    float32 features, so it is the default of every array.  The checksum
    (zarr's ``crc32c`` codec, 4 bytes a chunk) makes a damaged chunk file an
    error when it is read instead of garbage rows; :class:`CheckedArray`
    names the file.
    """
    from zarr.codecs import BloscCodec, BloscShuffle, Crc32cCodec

    return (BloscCodec(typesize=int(itemsize), cname="lz4", clevel=5, shuffle=BloscShuffle.shuffle),
            Crc32cCodec())


#: group attribute of stores that write every chunk (zeros too): a missing chunk file is damage
EVERY_CHUNK = "every_chunk_written"


@contextlib.contextmanager
def every_chunk():
    """Open arrays inside this so that their writes store every chunk, also one of zeros (see EVERY_CHUNK)."""
    import zarr

    with zarr.config.set({"array.write_empty_chunks": True}):
        yield


#: group attribute: per row-chunked array, the CRC-32C trailer of each *full* chunk, recorded at commit
CHUNK_CRCS = "chunk_crc32c"


def full_chunk_crcs(path, arrays: dict, lengths: dict, previous: dict) -> dict:
    """The commit record's ``chunk_crc32c``: ``previous`` extended by the chunks the new lengths fill.

    A full chunk is never rewritten by a later append (appends write past the
    committed length, and only the last, partly filled chunk holds both), so
    its CRC-32C trailer — 4 bytes read from the end of its file — binds it to
    its place: a chunk swapped with another, copied from another store or
    replaced reads with another trailer.  -1: the file does not exist (a
    chunk of zeros in a store of the previous version).
    """
    out = {}
    for name, length in lengths.items():
        arr = arrays[name]
        n_full = int(length) // int(arr.chunks[0])
        have = list(previous.get(name, []))[:n_full]
        tail = ("0",) * (arr.ndim - 1)
        for c in range(len(have), n_full):
            try:
                if isinstance(path, Remote):         # one ranged request for the 4 bytes
                    have.append(int.from_bytes(path.read_tail("/".join((name, "c", str(c)) + tail), 4), "little"))
                    continue
                with open(os.path.join(path, name, "c", str(c), *tail), "rb") as f:
                    f.seek(-4, os.SEEK_END)
                    have.append(int.from_bytes(f.read(4), "little"))
            except FileNotFoundError:
                have.append(-1)
        out[name] = have
    return out


def check_chunk_crcs(path, attrs: dict) -> dict:
    """The ``chunk_crc32c`` attribute, checked to be ``{array: [int, ...]}`` (empty if absent)."""
    crcs = attrs.get(CHUNK_CRCS) or {}
    if not isinstance(crcs, dict) or not all(
            isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
            for v in crcs.values()):
        raise StoreFormatError(f"{_meta_name(path, 'zarr.json')}: corrupt metadata: {CHUNK_CRCS} is not "
                               "{array: [crc, ...]}")
    return crcs


def check_array_layout(path, name: str, dtype: str) -> None:
    """Refuse array metadata edited so that zarr would read the same chunk bytes differently.

    streamrank writes every array as zarr v3, a regular chunk grid, chunk
    keys ``c/<i>/<j>`` ("/" separator), codecs ``bytes`` (little endian) →
    ``blosc`` → ``crc32c``, fill value 0 and no storage transformer.  An
    ``endian`` flipped to "big", another key separator, other codecs or
    another data type leave every CRC valid but turn the bytes into other
    numbers (or into missing chunks): such a store is a
    :class:`StoreFormatError` naming the metadata file and the field.
    """
    meta = _meta_name(path, f"{name}/zarr.json")
    try:
        doc = json.loads(read_meta(path, f"{name}/zarr.json"))
    except FileNotFoundError:
        return                                  # a missing array is reported by the caller
    except (OSError, ValueError) as exc:
        raise StoreFormatError(f"{meta}: corrupt array metadata ({exc})") from exc

    def refuse(field, got, want):
        raise StoreFormatError(f"{meta}: {field} is {got!r}, but streamrank writes {want!r}; metadata edited "
                               "to read the chunks' bytes differently is refused")

    if not isinstance(doc, dict):
        refuse("the document", type(doc).__name__, "an object")
    if doc.get("zarr_format") != 3:
        refuse("zarr_format", doc.get("zarr_format"), 3)
    if doc.get("data_type") != dtype:
        raise StoreFormatError(f"{meta}: array {name!r} has dtype {doc.get('data_type')!r}, expected {dtype!r}; "
                               "metadata edited to read the chunks' bytes differently is refused")
    if doc.get("storage_transformers"):
        refuse("storage_transformers", doc.get("storage_transformers"), [])
    if doc.get("fill_value") != 0 or isinstance(doc.get("fill_value"), bool):
        refuse("fill_value", doc.get("fill_value"), 0)
    grid = doc.get("chunk_grid") or {}
    if not isinstance(grid, dict) or grid.get("name") != "regular":
        refuse("chunk_grid", grid, "regular")
    chunks = (grid.get("configuration") or {}).get("chunk_shape") if isinstance(grid.get("configuration"), dict) \
        else None
    if not isinstance(chunks, list) or not chunks or not all(
            isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in chunks):
        refuse("chunk_grid's chunk_shape", chunks, "positive integers")
    keys = doc.get("chunk_key_encoding") or {}
    sep = (keys.get("configuration") or {}).get("separator", "/") if isinstance(keys, dict) else None
    if not isinstance(keys, dict) or keys.get("name") != "default" or sep != "/":
        refuse("chunk_key_encoding", keys, {"name": "default", "configuration": {"separator": "/"}})
    codecs = doc.get("codecs")
    names = [c.get("name") if isinstance(c, dict) else c for c in codecs] if isinstance(codecs, list) else codecs
    if names not in (["bytes", "blosc", "crc32c"], ["bytes", "blosc"]):     # (no crc32c: the first stores)
        refuse("codecs", names, ["bytes", "blosc", "crc32c"])
    endian = (codecs[0].get("configuration") or {}).get("endian", "little")
    if endian != "little":
        refuse("the bytes codec's endian", endian, "little")


class CheckedArray:
    """A zarr array whose reads name the damaged chunk file instead of failing anonymously.

    ``a[i:j]`` that fails (checksum mismatch, undecodable or truncated chunk,
    unreadable file) raises :class:`StoreFormatError` with the store, the
    array, the entries and the chunk file(s) concerned.  Everything else
    (shape, resize, writes) is the wrapped array's.
    """

    def __init__(self, arr, path, name, strict: bool = False):
        self._arr, self._path, self._name, self._strict = arr, str(path), name, strict

    def __getattr__(self, attr):
        if attr in ("_arr", "_path", "_name", "_strict"):  # not set yet (copy / unpickle): no recursion
            raise AttributeError(attr)
        return getattr(self._arr, attr)

    def _check_chunks_exist(self, key) -> None:
        """In a store that writes every chunk, the chunk files a read covers must all exist (zarr would fill)."""
        first = key[0] if isinstance(key, tuple) else key
        if not self._strict or not isinstance(first, slice) or "://" in self._path:
            return                  # (a store at a URL: its zarr store refuses missing chunks, _writer)
        a, b, _ = first.indices(self._arr.shape[0])
        if b <= a:
            return
        c = self._arr.chunks[0]
        tail = ("0",) * (self._arr.ndim - 1)
        for k in range(a // c, (b - 1) // c + 1):
            f = os.path.join(self._path, self._name, "c", str(k), *tail)
            if not os.path.exists(f):
                raise StoreFormatError(f"{f}: chunk {k} of array {self._name!r} is missing (deleted after it was "
                                       "written: this store writes every chunk)")

    def __setitem__(self, key, value):
        try:  # a write into a partly filled chunk reads it first
            self._arr[key] = value
        except (MemoryError, KeyboardInterrupt, OSError):
            raise
        except Exception as exc:
            raise StoreFormatError(self._damage(key, exc)) from exc

    def __getitem__(self, key):
        self._check_chunks_exist(key)
        try:
            return self._arr[key]
        except (MemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise StoreFormatError(self._damage(key, exc)) from exc

    def read_into(self, a: int, b: int, out):
        """``out[...] = a[a:b]`` decoded by zarr straight into the numpy array ``out`` (no temporary)."""
        self._check_chunks_exist(slice(int(a), int(b)))
        try:
            from zarr.core.buffer import default_buffer_prototype

            nd = default_buffer_prototype().nd_buffer.from_numpy_array(out)
            self._arr.get_basic_selection(slice(int(a), int(b)), out=nd)
        except (MemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise StoreFormatError(self._damage(slice(int(a), int(b)), exc)) from exc

    def _damage(self, key, exc) -> str:
        first = key[0] if isinstance(key, tuple) else key
        where = ""
        if isinstance(first, slice):
            a, b, _ = first.indices(self._arr.shape[0])
            c = self._arr.chunks[0]
            k0, k1 = a // c, max(a, b - 1) // c
            tail = "/0" * (self._arr.ndim - 1)
            files = [os.path.join(self._path, self._name, "c", str(k)) + tail for k in range(k0, min(k1, k0 + 2) + 1)]
            where = f" entries {a}:{b}, chunk file {' or '.join(files)}{' ...' if k1 > k0 + 2 else ''}"
        return (f"{self._path}: array {self._name!r}{where} is damaged and cannot be read "
                f"({type(exc).__name__}: {exc})")


def open_array(root, path, name):
    """``root[name]`` of a store: KeyError if absent; damaged metadata raises StoreFormatError naming it."""
    try:
        return root[name]
    except KeyError:
        raise
    except Exception as exc:
        meta = os.path.join(str(path), name, "zarr.json")
        raise StoreFormatError(f"{meta}: corrupt array metadata ({type(exc).__name__}: {exc})") from exc


def check_format(path, attrs: dict, expected: str) -> dict:
    """Validate the format name and version of a store's attributes.

    Returns the attributes; raises :class:`StoreFormatError` naming the
    metadata file when they are missing, of another format or of an
    unsupported version.
    """
    meta = _meta_name(path, "zarr.json")
    fmt = attrs.get("format")
    if fmt is None:
        raise StoreFormatError(f"{meta}: no 'format' attribute; not a streamrank store "
                               f"(expected format {expected!r})")
    if fmt != expected:
        raise StoreFormatError(f"{meta}: format is {fmt!r}, expected {expected!r}")
    ver = attrs.get("format_version")
    if ver not in SUPPORTED_VERSIONS:
        raise StoreFormatError(
            f"{meta}: format_version {ver!r} is not supported by this streamrank "
            f"(supported: {list(SUPPORTED_VERSIONS)}); upgrade streamrank or rewrite the store"
        )
    committed = attrs.get("committed")
    if not isinstance(committed, dict) or not isinstance(attrs.get("log"), list):
        raise StoreFormatError(f"{meta}: corrupt metadata: 'committed' or 'log' attribute missing "
                               "or of the wrong type")
    for k, v in committed.items():
        if not isinstance(v, int) or v < 0:
            raise StoreFormatError(f"{meta}: corrupt metadata: committed[{k!r}] = {v!r} "
                                   "is not a count")
    return attrs


def check_store_path(path) -> None:
    """A store path that cannot be a directory (a symbolic link loop, a path through a file) is a clear error."""
    import errno

    if isinstance(path, Remote):
        return
    try:
        os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreFormatError(f"{path}: is a symbolic link loop (too many levels of symbolic links); "
                                   "not a store") from None
        if exc.errno == errno.ENOTDIR:
            raise StoreFormatError(f"{path}: a component of the path is a file, not a directory") from None
        raise


def read_attrs(path) -> dict:
    """The group attributes, read straight from ``zarr.json`` (clear errors)."""
    return attrs_of(path, read_meta_doc(path))


def read_meta_doc(path) -> bytes:
    """The bytes of a store's group ``zarr.json`` (FileNotFoundError: no store there)."""
    check_store_path(path)
    meta = _meta_name(path, "zarr.json")
    try:
        return read_meta(path, "zarr.json")
    except FileNotFoundError:
        there = path.any_object() if isinstance(path, Remote) else Path(path).exists()
        if not there:
            raise FileNotFoundError(f"no store at {_meta_name(path, '')}") from None
        raise StoreFormatError(f"{meta} is missing; {_meta_name(path, '')} is not a zarr v3 store") from None
    except OSError as exc:
        raise StoreFormatError(f"{meta}: corrupt metadata ({exc})") from exc


def attrs_of(path, raw: bytes) -> dict:
    """The group attributes in the bytes of a store's ``zarr.json``, checked."""
    meta = _meta_name(path, "zarr.json")
    try:
        doc = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise StoreFormatError(f"{meta}: corrupt metadata ({exc})") from exc
    if not isinstance(doc, dict):
        raise StoreFormatError(f"{meta}: corrupt metadata (not a JSON object)")
    if doc.get("zarr_format") != 3:
        raise StoreFormatError(f"{meta}: zarr_format is {doc.get('zarr_format')!r}; streamrank stores are "
                               "zarr format 3")
    if doc.get("node_type") != "group":
        raise StoreFormatError(f"{meta}: expected a zarr group, found node_type "
                               f"{doc.get('node_type')!r}")
    attrs = doc.get("attributes") or {}
    if not isinstance(attrs, dict):
        raise StoreFormatError(f"{meta}: corrupt metadata ('attributes' is not an object)")
    return dict(attrs)


def check_log(path, log: list, keys: tuple) -> list:
    """Every entry of an append log is an object whose ``keys`` are ``[start, stop]`` count pairs.

    Returns ``log``; raises :class:`StoreFormatError` naming the metadata
    file and the entry otherwise (a hand-edited or damaged log).
    """
    meta = _meta_name(path, "zarr.json")
    for i, e in enumerate(log):
        if not isinstance(e, dict):
            raise StoreFormatError(f"{meta}: corrupt metadata: append log entry {i} is not an object")
        for k in keys:
            v = e.get(k)
            if (not isinstance(v, list) or len(v) != 2 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                  for x in v) or not 0 <= v[0] <= v[1]):
                raise StoreFormatError(f"{meta}: corrupt metadata: append log entry {i} "
                                       f"(batch {e.get('batch_id')!r}) has {k}={v!r}; expected [start, stop] "
                                       "counts with 0 <= start <= stop")
        if not isinstance(e.get("checksum"), str):
            raise StoreFormatError(f"{meta}: corrupt metadata: append log entry {i} "
                                   f"(batch {e.get('batch_id')!r}) has no checksum")
    return log


def check_chunk_dirs(path, names) -> None:
    """Each array's chunk directory ``<name>/c`` is a directory if present (else appends fail mid-way)."""
    if isinstance(path, Remote):
        return                      # object storage has no directories
    for name in names:
        c = Path(path) / name / "c"
        if os.path.lexists(c) and not c.is_dir():
            raise StoreFormatError(f"{c}: is a file, expected the chunk directory of array {name!r}; "
                                   "the store is corrupt")


def remove_partial_files(path) -> int:
    """Delete temporary ``*.partial`` files left by a killed writer; return how many."""
    n = 0
    if isinstance(path, Remote):
        return 0                    # objects are written whole: there are no temporary files
    for root, _dirs, files in os.walk(path):
        for f in files:
            if f.endswith(".partial"):
                try:
                    os.unlink(os.path.join(root, f))
                    n += 1
                except FileNotFoundError:
                    pass
    return n


def cut_torn_tail(path, arrays: dict, needed: dict) -> int:
    """First step of every append: bring a store back to its last commit.

    Removes a killed writer's ``*.partial`` files and shrinks every array in
    ``arrays`` that is longer than ``needed[name]`` (the committed length).
    Returns the number of fixes.
    """
    fixes = remove_partial_files(path)
    for name, length in needed.items():
        arr = arrays[name]
        if arr.shape[0] > length:
            arr.resize((length,) + tuple(arr.shape[1:]))
            fixes += 1
    return fixes


def hash_csr_rows(hasher, name: str, indptr, indices, data) -> None:
    """Feed a run of CSR rows to ``hasher`` the way appends log it (indices, data, row nnz)."""
    hasher.update(f"{name}.indices", np.ascontiguousarray(indices, dtype=np.int32))
    hasher.update(f"{name}.data", np.ascontiguousarray(data, dtype=np.float32))
    hasher.update(f"{name}.row_nnz", np.diff(indptr).astype(np.int64))


def append_csr(arrays: dict, name: str, M, r0: int, z0: int, hasher) -> tuple[int, int]:
    """Write CSR rows ``M`` past the committed ``r0`` rows / ``z0`` nonzeros of ``name/*``.

    Hashes them first (see :func:`hash_csr_rows`); returns the new ``(rows, nnz)``.
    Nothing here commits: the caller writes the commit record last.
    """
    nnz = int(M.indptr[-1])
    indices = np.ascontiguousarray(M.indices[:nnz], dtype=np.int32)
    data = np.ascontiguousarray(M.data[:nnz], dtype=np.float32)
    hash_csr_rows(hasher, name, M.indptr, indices, data)
    if nnz:
        arrays[f"{name}/indices"].resize((z0 + nnz,))
        arrays[f"{name}/indices"][z0 : z0 + nnz] = indices
        arrays[f"{name}/data"].resize((z0 + nnz,))
        arrays[f"{name}/data"][z0 : z0 + nnz] = data
    r1 = r0 + M.shape[0]
    if M.shape[0]:
        arrays[f"{name}/indptr"].resize((r1 + 1,))
        arrays[f"{name}/indptr"][r0 + 1 : r1 + 1] = z0 + np.cumsum(np.diff(M.indptr).astype(np.int64))
    return r1, z0 + nnz


class BatchHasher:
    """Checksum of a batch's bytes, computed in pieces.

    Each named component (e.g. ``"X"``, ``"y"``, ``"qid"``) has its own
    BLAKE2b stream, so a batch may be fed row range by row range (the
    concatenation of the pieces of one component hashes the same as the
    whole); :meth:`hexdigest` combines the components in name order.
    Arrays are hashed in their stored dtype, C order, little endian.
    """

    def __init__(self):
        self._h: dict[str, "hashlib._Hash"] = {}

    def update(self, name: str, a) -> None:
        a = np.ascontiguousarray(a)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        h = self._h.get(name)
        if h is None:
            h = self._h[name] = hashlib.blake2b(digest_size=16)
        h.update(a.reshape(-1).view(np.uint8).data if a.size else b"")

    def hexdigest(self) -> str:
        top = hashlib.blake2b(digest_size=16)
        for name in sorted(self._h):
            top.update(name.encode())
            top.update(self._h[name].digest())
        return "blake2b:" + top.hexdigest()


def _meta_name(path, rel: str) -> str:
    """A store file's name for messages: ``<dir>/<rel>`` or ``<url>/<rel>``."""
    if isinstance(path, Remote):
        return path.display(rel)
    if "://" in str(path):
        return f"{str(path).rstrip('/')}/{rel}" if rel else str(path)
    return str(Path(path) / rel) if rel else str(path)


def read_meta(path, rel: str) -> bytes:
    """The bytes of a store file (``zarr.json`` documents): FileNotFoundError if absent."""
    if isinstance(path, Remote):
        return path.read(rel)
    return (Path(path) / rel).read_bytes()
