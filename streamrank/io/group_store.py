"""Scored-group store: an appendable zarr v3 group of query groups.

Layout: see :mod:`streamrank.io.schema`.  A :class:`GroupStore` is a
:class:`~streamrank.io.blocks.BlockSource`, so ``store.blocks(...)`` has the
same contract as every other source (group-aligned blocks, shuffled order,
prefetch).

Atomic, idempotent append
-------------------------
``append`` (1) validates the whole batch before writing anything, (2) cuts a
torn tail left by a killed writer back to the committed length (arrays longer
than the committed counts, stray ``*.partial`` files), (3) grows the arrays
and writes the new rows *beyond* the committed length, and (4) writes the
commit record — committed counts plus a log entry with the batch's checksum —
**last**, in one atomic rename of the group's ``zarr.json``.  Readers use only
the committed counts, so a crash at any point leaves the store readable at its
previous state.  Rewriting the last, partly filled chunk is safe too: zarr's
LocalStore writes each chunk to a temporary file and renames it, and the new
chunk holds the committed rows unchanged.  A ``batch_id`` already in the log
is skipped (``append`` returns False and logs a message on the ``streamrank``
logger).  One writer at a time is enforced with an advisory ``flock`` on
``<store>/.streamrank.lock`` (released by the OS if the writer dies).
"""
from __future__ import annotations

import datetime as _dt
import logging
import os

import numpy as np
import scipy.sparse as sp

from .._qid import qid_keys
from .._validation import check_qid, check_X, check_y, group_ptr_from_qid
from ._qid_text import QidText, create_qid_text, encode_qids
from .groups import (
    GROUP_IDENTITIES,
    batch_of,
    check_group_identity,
    qid_kind_of,
    scan_for_keys,
    scope_ranges,
)
from ._chunk_binding import (
    TAIL_CRCS,
    bound_array,
    bound_decoder,
    check_tail_crcs,
    commit_bindings,
    reads_unbound,
)
from ._read_checks import BadEntry, check_offsets, entries_check, finite_rows_check, with_row
from ._row_chunks import RowChunkReader
from ._writer import LOCK_NAME, creating_store, location, new_store_id, writer_lock, writing, zarr_store  # noqa: F401
from .blocks import BlockSource
from .docids import DOCID_ARRAYS, append_docids, check_docids, create_docid_arrays, hash_docids, read_docids
from .schema import (
    FORMAT_VERSION,
    GROUP_ARRAYS_DENSE,
    GROUP_ARRAYS_SPARSE,
    GROUP_FORMAT,
    BatchHasher,
    CHUNK_CRCS,
    EVERY_CHUNK,
    CheckedArray,
    StoreFormatError,
    append_csr,
    check_array_layout,
    check_chunk_crcs,
    check_chunk_dirs,
    check_format,
    check_log,
    cut_torn_tail,
    every_chunk,
    compressors,
    open_array,
    read_attrs,
    rows_per_chunk,
    write_attrs,
)

__all__ = ["GroupStore"]

logger = logging.getLogger("streamrank")

_F32_MAX = float(np.finfo(np.float32).max)
#: decode X and y chunks straight from their files (streamrank.io._chunk_files); False: zarr reads them
_DECODE_CHUNK_FILES = True
_GROUP_CHUNK = 1 << 14      # group_ptr / qid entries per chunk (128 KiB; rewritten by every append)
_NNZ_CHUNK = 1 << 20        # CSR indices / data entries per chunk (4 MiB)
_INDPTR_CHUNK = 1 << 19     # CSR indptr entries per chunk (4 MiB)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _as_float32(X, name: str = "X"):
    """Cast features to the stored float32, refusing values float32 cannot hold."""
    if sp.issparse(X):
        data = X.data
    else:
        data = X
    if data.dtype != np.float32:
        if data.dtype.kind == "f" and data.size:
            big = np.abs(data) > _F32_MAX
            if big.any():
                k = int(np.flatnonzero(big.ravel())[0])
                row = (int(np.searchsorted(X.indptr, k, side="right") - 1) if sp.issparse(X)
                       else k // max(1, X.shape[1]))
                raise ValueError(f"{name} row {row} holds {data.ravel()[k]!r}, outside the "
                                 "float32 range the store keeps features in")
        if sp.issparse(X):
            X = sp.csr_matrix((data.astype(np.float32), X.indices, X.indptr), shape=X.shape)
        else:
            X = np.ascontiguousarray(X, dtype=np.float32)
    return X


class GroupStore(BlockSource):
    """An appendable zarr store of query groups that streams group-aligned blocks.

    Create with :meth:`create`, open with :meth:`open`; never instantiate
    directly.

    Examples
    --------
    >>> import numpy as np, streamrank as sr, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "train.zarr")
    >>> store = sr.GroupStore.create(path, n_features=3)
    >>> store.append(np.ones((4, 3)), [2, 1, 0, 1], [7, 7, 9, 9], batch_id="day-1")
    True
    >>> store.append(np.ones((4, 3)), [2, 1, 0, 1], [7, 7, 9, 9], batch_id="day-1")
    False
    >>> store.n_rows, store.n_groups, [b.n_rows for b in store.blocks(max_rows=2)]
    (4, 2, [2, 2])
    """

    # ------------------------------------------------------------ creation
    def __init__(self, path, mode: str = "r", *, _token=None, storage_options=None):
        if _token is not _PRIVATE:
            raise TypeError("use GroupStore.create(path, ...) or GroupStore.open(path)")
        if mode not in ("r", "a"):
            raise ValueError(f"mode must be 'r' (read) or 'a' (append), got {mode!r}")
        self.path, self._loc = location(path, storage_options)
        self.storage_options = dict(storage_options) if storage_options else None
        self.mode = mode
        self._load()

    @classmethod
    def create(cls, path, n_features: int, *, sparse: bool = False, n_outputs: int = 1,
               overwrite: bool = False, feature_names=None, chunk_rows: int | None = None,
               docids: bool = False, group_identity: str = "batch", storage_options: dict | None = None):
        """Create an empty store and return it opened for appending.

        Parameters
        ----------
        path : str or Path
            Directory of the new zarr store, or its URL on object storage
            (``s3://bucket/prefix/train.zarr``; see ``storage_options``).
        n_features : int
            Number of feature columns.
        sparse : bool
            Store ``X`` as CSR (``X/indptr``, ``X/indices``, ``X/data``).
        n_outputs : int
            Number of score columns of ``y`` (1: ``y`` is 1-D).
        overwrite : bool
            Replace an existing store at ``path`` (only a zarr store or an
            empty directory is ever deleted).
        feature_names : sequence of str, optional
        chunk_rows : int, optional
            Rows per chunk of ``X`` and ``y`` (default: about 4 MiB of dense ``X``).
        docids : bool
            Keep one document id (a string) per row: every append then takes
            ``docid=`` (:mod:`streamrank.io.docids`; run files name documents by them).
        group_identity : {"batch", "global"}
            What a group is (see :mod:`streamrank.io.groups`): ``"batch"``
            (default) — a group is (batch, qid), the same query id in a later
            batch is a new group; ``"global"`` — a query id may appear in one
            batch only (a repeat is an error).
        storage_options : dict, optional
            For a store at a URL: options of its fsspec filesystem (s3fs:
            ``endpoint_url``, ``key``, ``secret``, ``anon``, ``client_kwargs``
            …); without them the client's environment variables apply
            (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
            ``AWS_ENDPOINT_URL`` …).  Appends there keep their guarantees
            through conditional writes: :mod:`streamrank.io._remote_commit`.

        Re-creating holds the store's writer lock: while another process
        appends, it fails with ``RuntimeError`` (lock held), and an appender
        that opened the old store refuses to append to the new one.
        """
        n_features = _positive_int(n_features, "n_features")
        if sparse:
            _check_csr_width(n_features, "n_features")
        n_outputs = _positive_int(n_outputs, "n_outputs")
        check_group_identity(group_identity)
        if feature_names is not None:
            feature_names = [str(f) for f in feature_names]
            if len(feature_names) != n_features:
                raise ValueError(f"feature_names has {len(feature_names)} names; "
                                 f"n_features is {n_features}")
        _name, p = location(path, storage_options)
        rpc = int(chunk_rows) if chunk_rows else rows_per_chunk(4 * (n_features if not sparse else 16))
        with creating_store(p, overwrite), every_chunk():
            cls._create_arrays(p, n_features, sparse, n_outputs, feature_names, rpc, docids, group_identity)
        return cls(path, "a", _token=_PRIVATE, storage_options=storage_options)

    @staticmethod
    def _create_arrays(p, n_features, sparse, n_outputs, feature_names, rpc, docids, group_identity="batch"):
        import zarr

        root = zarr.open_group(store=zarr_store(p), mode="a")
        if sparse:
            xg = root.create_group("X")
            ip = xg.create_array("indptr", shape=(1,), chunks=(_INDPTR_CHUNK,), dtype="int64",
                                 compressors=compressors(8), fill_value=0)
            ip[:] = np.zeros(1, dtype=np.int64)
            xg.create_array("indices", shape=(0,), chunks=(_NNZ_CHUNK,), dtype="int32",
                            compressors=compressors(4), fill_value=0)
            xg.create_array("data", shape=(0,), chunks=(_NNZ_CHUNK,), dtype="float32",
                            compressors=compressors(4), fill_value=0)
        else:
            root.create_array("X", shape=(0, n_features), chunks=(rpc, n_features), dtype="float32",
                              compressors=compressors(4), fill_value=0)
        yshape, ychunks = ((0,), (rpc,)) if n_outputs == 1 else ((0, n_outputs), (rpc, n_outputs))
        root.create_array("y", shape=yshape, chunks=ychunks, dtype="float64",
                          compressors=compressors(8), fill_value=0)
        gp = root.create_array("group_ptr", shape=(1,), chunks=(_GROUP_CHUNK,), dtype="int64",
                               compressors=compressors(8), fill_value=0)
        gp[:] = np.zeros(1, dtype=np.int64)
        root.create_array("qid", shape=(0,), chunks=(_GROUP_CHUNK,), dtype="int64",
                          compressors=compressors(8), fill_value=0)
        if docids:
            create_docid_arrays(root, compressors)
        create_qid_text(root)
        attrs = {
            "format": GROUP_FORMAT,
            "format_version": FORMAT_VERSION,
            "n_features": n_features,
            "n_outputs": n_outputs,
            "sparse": bool(sparse),
            "feature_names": feature_names,
            "group_identity": group_identity,
            "qid_kind": None,
            "created": _now(),
            "store_id": new_store_id(),
            EVERY_CHUNK: True,
            "committed": {"rows": 0, "groups": 0, "nnz": 0},
            "log": [],
        }
        if docids:
            attrs["docids"] = True
            attrs["committed"]["docid_bytes"] = 0
        write_attrs(p, attrs)  # last: a store without it is not a store

    @classmethod
    def open(cls, path, mode: str = "r", *, storage_options: dict | None = None):
        """Open an existing store: ``mode="r"`` (read only) or ``"a"`` (append).

        ``path``: a directory or a URL (``s3://…``) with its ``storage_options``
        (see :meth:`create`).
        """
        return cls(path, mode, _token=_PRIVATE, storage_options=storage_options)

    # -------------------------------------------------------------- loading
    def _load(self):
        import zarr

        attrs = check_format(self.path, read_attrs(self._loc), GROUP_FORMAT)
        check_log(self.path, attrs["log"], ("rows", "groups", "nnz"))
        self._attrs = attrs
        try:
            self.n_features = _positive_int(attrs["n_features"], "n_features")
            self.n_outputs = _positive_int(attrs["n_outputs"], "n_outputs")
            self.sparse = bool(attrs["sparse"])
            c = attrs["committed"]
            self._rows, self._groups, self._nnz = int(c["rows"]), int(c["groups"]), int(c["nnz"])
            self.has_docids = attrs.get("docids", False) is True
            self._docid_bytes = int(c["docid_bytes"]) if self.has_docids else 0
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreFormatError(f"{self.path}/zarr.json: corrupt metadata "
                                   f"(attribute {exc} missing or invalid)") from exc
        names = attrs.get("feature_names")
        if names is not None and (not isinstance(names, list) or len(names) != self.n_features
                                  or not all(isinstance(f, str) for f in names)):
            got = f"{len(names)} entries" if isinstance(names, list) else type(names).__name__
            raise StoreFormatError(f"{self.path}/zarr.json: corrupt metadata: feature_names holds "
                                   f"{got}, expected {self.n_features} names (n_features)")
        if not hasattr(self, "_store_id"):      # the identity of the store this object opened
            self._store_id = (attrs.get("store_id"), attrs.get("created"))
        store = self._zstore = zarr_store(self._loc, read_only=(self.mode == "r"))
        self._root = zarr.open_group(store=store, mode="r" if self.mode == "r" else "r+")
        spec = GROUP_ARRAYS_SPARSE if self.sparse else GROUP_ARRAYS_DENSE
        if self.has_docids:
            spec = {**spec, **DOCID_ARRAYS}
        if self.mode == "a":
            check_chunk_dirs(self._loc, spec)
        self._strict = bool(attrs.get(EVERY_CHUNK))    # a missing chunk file is damage, not zeros
        self._chunk_crcs = check_chunk_crcs(self.path, attrs)
        self._tail_crcs = check_tail_crcs(self.path, attrs)     # every chunk bound to its place: _chunk_binding
        self._arrays = {}
        for name, (dtype, _ndim) in spec.items():
            check_array_layout(self._loc, name, dtype)
            try:
                with every_chunk():
                    arr = open_array(self._root, self.path, name)
            except KeyError:
                raise StoreFormatError(f"{self.path}: array {name!r} is missing "
                                       f"({os.path.join(self.path, name, 'zarr.json')} not found)") from None
            if not isinstance(arr, zarr.Array):
                raise StoreFormatError(f"{self.path}: {name!r} is a group, expected an array")
            if str(arr.dtype) != dtype:
                raise StoreFormatError(f"{self.path}: array {name!r} has dtype {arr.dtype}, "
                                       f"expected {dtype}")
            self._arrays[name] = self._bound(arr, name)
        need = self._needed_lengths(self._rows, self._groups, self._nnz)
        for name, length in need.items():
            have = self._arrays[name].shape[0]
            if have < length:
                raise StoreFormatError(
                    f"{self.path}: array {name!r} has {have} entries but {length} are committed; "
                    "the store is corrupt (rows were deleted outside streamrank)")
        y = self._arrays["y"]
        if (y.ndim == 1) != (self.n_outputs == 1) or (y.ndim == 2 and y.shape[1] != self.n_outputs):
            raise StoreFormatError(f"{self.path}: array 'y' has shape {y.shape}, inconsistent "
                                   f"with n_outputs={self.n_outputs}")
        if not self.sparse and self._arrays["X"].shape[1] != self.n_features:
            raise StoreFormatError(f"{self.path}: array 'X' has {self._arrays['X'].shape[1]} "
                                   f"columns but n_features is {self.n_features}")
        self._X = self._arrays.get("X")
        self._y = y
        self._make_row_readers()
        if self.sparse:
            self._indptr = self._arrays["X/indptr"]
            self._indices = self._arrays["X/indices"]
            self._data = self._arrays["X/data"]
        self._gp_all = np.asarray(self._arrays["group_ptr"][: self._groups + 1], dtype=np.int64)
        # qid: 8 bytes a group (40 MB for 5M groups).  A reader loads it only when asked for
        # all of it (``qid``, ``verify``); blocks read their groups' ids from the store.
        # ``group_ptr`` (8 bytes a group) stays in memory: the block plan needs it.
        self._qid_cache = None
        self._load_qid_kind(attrs)
        self._group_ptr_cache = None
        if self._gp_all[0] != 0 or self._gp_all[-1] != self._rows:
            raise StoreFormatError(f"{self.path}: array 'group_ptr' runs from {int(self._gp_all[0])} to "
                                   f"{int(self._gp_all[-1])} but {self._rows} rows are committed "
                                   f"(expected 0 to {self._rows}); the store is corrupt")
        check_offsets(self._gp_all, 0, self._rows, store=self.path, array="group_ptr", first=0)
        if self.sparse:
            ends = np.asarray(self._arrays["X/indptr"].get_coordinate_selection([0, self._rows]), dtype=np.int64)
            if ends[0] != 0 or ends[1] != self._nnz:
                raise StoreFormatError(f"{self.path}: array 'X/indptr' runs from {int(ends[0])} to {int(ends[1])} "
                                       f"but {self._nnz} nonzeros are committed (expected 0 to {self._nnz}); "
                                       "the store is corrupt")

    def _reopen_arrays(self):
        """Re-read the arrays' metadata (shapes) from disk."""
        with every_chunk():
            self._arrays = {name: self._bound(self._root[name], name) for name in self._arrays}
        self._X = self._arrays.get("X")
        self._y = self._arrays["y"]
        self._make_row_readers()
        if self.sparse:
            self._indptr = self._arrays["X/indptr"]
            self._indices = self._arrays["X/indices"]
            self._data = self._arrays["X/data"]

    def _bound(self, arr, name):
        """``arr`` read with its chunks' bindings checked (slices; :mod:`streamrank.io._chunk_binding`)."""
        if not _DECODE_CHUNK_FILES:
            return CheckedArray(arr, self.path, name, self._strict)
        return bound_array(arr, self._loc, name, self._strict, self._chunk_crcs, self._tail_crcs, self.path)

    def _make_row_readers(self):
        """Whole-chunk readers of the row-chunked arrays: a sequential pass decodes every chunk once
        whatever the block cutting (:mod:`streamrank.io._row_chunks`)."""
        def reader(name, check=None):
            decoder = (bound_decoder(self._loc, name, self._strict, self._chunk_crcs, self._tail_crcs)
                       if _DECODE_CHUNK_FILES else None)      # every chunk bound to its place (local or remote)
            return RowChunkReader(self._arrays[name], decoder=decoder, check=check)

        # every decoded chunk is checked while in the CPU cache (streamrank.io._read_checks)
        self._X_rows = None if self.sparse else reader("X", finite_rows_check(self.path, "X"))
        self._y_rows = reader("y", finite_rows_check(self.path, "y"))
        if self.sparse:
            self._csr_rows = (reader("X/indptr"),
                              reader("X/indices", entries_check(self.path, "X/indices", self.n_features)),
                              reader("X/data", entries_check(self.path, "X/data")))

    def _rebind(self):
        """After a commit: the readers check the new commit's bindings (the old ones stay true, but weaker)."""
        readers = [self._X_rows, self._y_rows, *(getattr(self, "_csr_rows", None) or ())]
        decoders = [getattr(a, "_decoder", None) for a in self._arrays.values()]
        decoders += [r._decoder for r in readers if r is not None]
        for d in decoders:
            if d is not None:
                t = self._tail_crcs.get(d.name)
                d.expected, d.tail = self._chunk_crcs.get(d.name), (tuple(t) if t is not None else None)

    def _needed_lengths(self, rows, groups, nnz):
        need = {"y": rows, "group_ptr": groups + 1, "qid": groups}
        if self.sparse:
            need.update({"X/indptr": rows + 1, "X/indices": nnz, "X/data": nnz})
        else:
            need["X"] = rows
        if self.has_docids:   # called with the committed counts: the committed id bytes
            need.update({"docid/offsets": rows + 1, "docid/bytes": self._docid_bytes})
        return need

    def refresh(self):
        """Re-read the commit record (see rows appended by another process)."""
        self._load()
        return self

    def _pin(self, rows: int, groups: int, nnz: int):
        """Restrict this reader to an earlier commit (rows appended later stay invisible)."""
        if rows > self._rows or groups > self._groups or nnz > self._nnz:
            raise StoreFormatError(f"{self.path}: has fewer committed rows ({self._rows}) than the "
                                   f"snapshot being restored ({rows}); the store was rewritten")
        self._rows, self._groups, self._nnz = rows, groups, nnz
        self._gp_all = self._gp_all[: groups + 1]
        if self._qid_cache is not None:
            self._qid_all = self._qid_all[:groups]
        self._group_ptr_cache = None
        return self

    def __reduce__(self):
        # shipped to dask workers as (path or URL and its options, committed counts), never as data:
        # the worker reopens the store read-only at the same commit
        return (_reopen, (self.path, self._rows, self._groups, self._nnz, self.storage_options))

    # ----------------------------------------------------------- properties
    @property
    def n_rows(self) -> int:
        return self._rows

    @property
    def n_groups(self) -> int:
        return self._groups

    @property
    def nnz(self) -> int:
        """Committed nonzeros of a CSR store (0 for dense stores)."""
        return self._nnz

    @property
    def format_version(self) -> int:
        return int(self._attrs["format_version"])

    @property
    def feature_names(self):
        return self._attrs.get("feature_names")

    @property
    def batches(self) -> list[dict]:
        """The append log: one dict per committed batch (a copy)."""
        return [dict(e) for e in self._attrs["log"]]

    @property
    def log(self) -> list[dict]:
        """The append log (same as :attr:`batches`)."""
        return self.batches

    @property
    def qid(self) -> np.ndarray:
        """Query id of every committed group (groups,), as appended: int64, or str (an object array).

        Read only.  With ``group_identity="batch"`` an id may recur (one group
        per batch it appears in); :meth:`group_batches` says which batch each group is from.
        """
        if self._qid_kind == "str":
            v = self._qid_text.read(0, self._groups, self._groups)
        else:
            v = self._qid_all.view()
        v.flags.writeable = False
        return v

    @property
    def group_identity(self) -> str:
        """``"batch"``: a group is (batch, qid); ``"global"``: a qid is one group in the whole store."""
        return self._group_identity

    @property
    def qid_kind(self) -> str | None:
        """``"int"`` or ``"str"`` once the first group is appended; None for an empty new store."""
        return self._qid_kind

    def group_batches(self) -> np.ndarray:
        """The batch (:func:`streamrank.io.groups.batch_of`) of every committed group (groups,) object."""
        out = np.empty(self._groups, dtype=object)
        for e in self._attrs["log"]:
            g0, g1 = e["groups"]
            out[g0:g1] = batch_of(e.get("batch_id"), e)
        return out

    global_group = False

    def __len__(self):
        return self._rows

    def __repr__(self):
        kind = "csr" if self.sparse else "dense"
        return (f"GroupStore({self.path!r}, {kind}, n_rows={self._rows}, n_groups={self._groups}, "
                f"n_features={self.n_features}, n_outputs={self.n_outputs}, "
                f"batches={len(self._attrs['log'])}, mode={self.mode!r})")

    # ------------------------------------------------------- BlockSource hooks
    def _group_ptr(self):
        return self._gp_all

    @property
    def _qid_all(self) -> np.ndarray:
        """Query ids of all committed groups, loaded on first use (see :meth:`_load`)."""
        if self._qid_cache is None:
            self._qid_cache = np.asarray(self._arrays["qid"][: self._groups], dtype=np.int64)
        return self._qid_cache

    @_qid_all.setter
    def _qid_all(self, value):
        self._qid_cache = value

    def _group_qid(self, g0, g1):
        if self._qid_kind == "str":
            return self._qid_text.read(g0, g1, self._groups)
        if self._qid_cache is not None:
            return self._qid_cache[g0:g1].copy()
        g1 = min(max(int(g1), int(g0)), self._groups)
        return np.asarray(self._arrays["qid"][int(g0):g1], dtype=np.int64).copy()

    def _nnz_at(self, rows):
        if not self.sparse:
            return None
        rows = np.asarray(rows, dtype=np.int64)
        return np.asarray(self._indptr.get_coordinate_selection(rows), dtype=np.int64)

    def _read_y(self, r0, r1):
        return self._y_rows.read(r0, r1, self._rows)

    def _read_rows(self, r0, r1):
        """Rows r0:r1, checked (O(rows)) before any learner sees them: see :mod:`._read_checks`."""
        if self.sparse:
            ip_rows, ind_rows, dat_rows = self._csr_rows
            ip = ip_rows.read(r0, r1 + 1, self._rows + 1)
            check_offsets(ip, 0, self._nnz, store=self.path, array="X/indptr", first=r0)
            z0, z1 = int(ip[0]), int(ip[-1])
            if z1 > z0:
                try:
                    indices = ind_rows.read(z0, z1, self._nnz)
                    data = dat_rows.read(z0, z1, self._nnz)
                except BadEntry as exc:
                    raise with_row(exc, ip, r0) from None
            else:
                indices = np.zeros(0, dtype=np.int32)
                data = np.zeros(0, dtype=np.float32)
            ip = ip - z0
            if z1 - z0 < np.iinfo(np.int32).max:
                ip = ip.astype(np.int32)
            else:
                indices = indices.astype(np.int64)
            X = sp.csr_matrix((data, indices, ip), shape=(r1 - r0, self.n_features), copy=False)
        else:
            X = self._X_rows.read(r0, r1, self._rows)
        return X, self._read_y(r0, r1)

    # ----------------------------------------------------------------- append
    def append(self, X, y, qid, *, batch_id=None, docid=None) -> bool:
        """Append whole query groups; atomic and idempotent.

        Parameters
        ----------
        X : ndarray (rows, n_features), scipy.sparse matrix, or a pandas DataFrame / pyarrow Table
            Features (bool, integer or float); stored as float32.  A table's
            feature columns are matched to the store's ``feature_names`` by name;
            ``y`` and ``qid`` may then be column names (``append(table, y="label",
            qid="qid")``).  Values
            outside the float32 range, NaN and ±inf are refused, as are
            strings, objects and complex numbers.
        y : array-like (rows,) or (rows, n_outputs)
            Scores, stored as float64.
        qid : array-like (rows,) of integer or string ids (one kind per store)
            The rows of one query must be contiguous.  With
            ``group_identity="batch"`` an id may recur in a later batch (a new
            group); within a batch (``batch_id`` up to ``#``) or, with
            ``"global"``, within the store, a repeat is an error — checked by
            streaming the committed keys, see :mod:`streamrank.io.groups`.
        batch_id : str, optional
            Identifier of the batch.  If the log already holds it, nothing is
            written and False is returned.
        docid : sequence of str, optional
            One document id per row; required by (and only by) a store
            created with ``docids=True``.

        Returns
        -------
        bool
            True if the batch was committed, False if ``batch_id`` was already there.
        """
        if self.mode != "a":
            raise PermissionError(f"{self.path} is open read-only; use GroupStore.open(path, mode='a')")
        if batch_id is not None:
            batch_id = str(batch_id)
        X, y, qid = self._from_table(X, y, qid)
        with writer_lock(self._loc):
            now = read_attrs(self._loc)
            if now.get("committed") != self._attrs.get("committed"):
                self._load()  # another process committed since we opened
                check_same_store(self)
            else:
                if "writer_epoch" in now:     # a fence (io/_remote_commit) since we opened: keep its count
                    self._attrs = {**self._attrs, "writer_epoch": now["writer_epoch"]}
                self._reopen_arrays()  # a killed writer may have grown them since
            if batch_id is not None and any(e.get("batch_id") == batch_id for e in self._attrs["log"]):
                logger.info("GroupStore %s: batch %r is already committed; skipped", self.path, batch_id)
                return False
            self._batch_id_pending = batch_id
            X, y, gp, gq = self._validate(X, y, qid)
            ids = self._validate_docids(docid, X.shape[0])
            with writing(self._zstore):
                self.repair()
                self._write(X, y, gp, gq, batch_id, ids)
        return True

    def _from_table(self, X, y, qid):
        """A DataFrame / Arrow table: ``y``/``qid`` may name its columns; features matched by name."""
        from .._tables import is_table, reorder_by_name, split_table

        if not is_table(X):
            return X, y, qid
        if qid is None:
            raise TypeError("GroupStore.append(table, y=..., qid=...) needs qid: the name of the query id "
                            "column (or an array)")
        Xa, y, qid, names = split_table(X, y, qid)
        want = self.feature_names
        if want is not None and names is not None and list(names) != list(want):
            Xa = reorder_by_name(Xa, names, want, "the table's feature columns do not match the store's feature "
                                 "names", extra_label="not in the store", shown=5)
        if self.sparse:
            Xa = sp.csr_matrix(Xa)
        return Xa, y, qid

    def _validate(self, X, y, qid):
        """Everything is checked before a byte is written."""
        if qid is None:
            raise TypeError("GroupStore.append needs qid (one integer id per row); for one "
                            "global group pass an array of one constant id")
        if sp.issparse(X) != self.sparse:
            want = "a scipy.sparse matrix" if self.sparse else "a dense array"
            raise TypeError(f"X must be {want}: the store at {self.path} was created with "
                            f"sparse={self.sparse}")
        X = check_X(X, "X", n_features=self.n_features, dtype=(np.float32, np.float64))
        X = _as_float32(X, "X")
        n = X.shape[0]
        y = check_y(y, n, "y")
        if y.ndim == 2 and y.shape[1] == 1 and self.n_outputs == 1:
            y = y[:, 0]
        got = 1 if y.ndim == 1 else y.shape[1]
        if got != self.n_outputs or (self.n_outputs > 1 and y.ndim != 2):
            raise ValueError(f"y has {got} output column(s) (shape {y.shape}); the store holds "
                             f"{self.n_outputs}")
        q = check_qid(qid, n, "qid")
        gp, gq = group_ptr_from_qid(q, "qid")
        kind = qid_kind_of(gq, self._qid_kind, self.path)
        self._check_new_groups(gq, gp, kind, self._batch_id_pending)
        if self.sparse:
            if X.nnz and (X.indices.min() < 0 or X.indices.max() >= self.n_features):
                raise ValueError(f"X has column indices outside [0, {self.n_features})")
        return X, y, gp, gq

    def _validate_docids(self, docid, n_rows):
        if not self.has_docids:
            if docid is not None:
                raise ValueError(f"docid given, but the store at {self.path} keeps no document ids "
                                 "(create it with docids=True)")
            return None
        if docid is None:
            raise ValueError(f"the store at {self.path} keeps one document id per row: pass docid=")
        return check_docids(docid, n_rows)

    def docids(self, r0: int = 0, r1: int | None = None) -> list:
        """Document ids of committed rows r0:r1 (a store created with ``docids=True``)."""
        if not self.has_docids:
            raise ValueError(f"the store at {self.path} keeps no document ids")
        r1 = self._rows if r1 is None else int(r1)
        if not 0 <= int(r0) <= r1 <= self._rows:
            raise IndexError(f"rows {r0}:{r1} outside the store's {self._rows} committed rows")
        return read_docids(self._arrays, int(r0), r1, self._docid_bytes, self.path)

    # ------------------------------------------- query ids and group identity
    _batch_id_pending = None

    def _load_qid_kind(self, attrs):
        """Group identity and qid kind from the attributes (stores before issue 18: global, int)."""
        self._group_identity = attrs.get("group_identity", "global")
        if self._group_identity not in GROUP_IDENTITIES:
            raise StoreFormatError(f"{self.path}: group_identity {self._group_identity!r} is not one of "
                                   f"{GROUP_IDENTITIES}")
        kind = attrs.get("qid_kind", "int" if "qid_kind" not in attrs else None)
        if kind not in ("int", "str", None):
            raise StoreFormatError(f"{self.path}: qid_kind {kind!r} is not 'int' or 'str'")
        if kind is None and self._groups:
            raise StoreFormatError(f"{self.path}: {self._groups} groups committed but no qid_kind recorded")
        self._qid_kind = kind
        self._qid_text = QidText(self._root, self.path) if kind == "str" or (
            kind is None and "qid_kind" in attrs) else None

    def _check_new_groups(self, gq, gp, kind, batch_id):
        """Refuse a query id that is already a group of the same batch (or of the store, if global).

        Streams the committed keys of the groups in scope in pieces of
        :data:`streamrank.io.groups.SCAN_PIECE` (8 MiB), so memory is bounded
        by the piece plus the new block; a key match is confirmed on the
        original id (string keys may collide).  See :mod:`streamrank.io.groups`
        for the cost.
        """
        if not len(gq):
            return
        ranges = scope_ranges(self._attrs["log"], batch_id, self._group_identity)
        keys = qid_keys(gq)
        order = np.argsort(keys, kind="stable")
        skeys = keys[order]
        for g_store, js in scan_for_keys(self._arrays["qid"], ranges, skeys):
            stored = self._group_qid(g_store, g_store + 1)[0]
            for g_new in sorted(int(i) for i in order[js]):
                if kind == "int" or gq[g_new] == stored:
                    from .._qid import qid_repr

                    scope = ("the store" if self._group_identity == "global"
                             else f"batch {batch_of(batch_id)!r}")
                    raise ValueError(
                        f"qid {qid_repr(gq[g_new])} (batch row {int(gp[g_new])}) is already in {scope} as "
                        f"group {g_store}; a query's rows must be contiguous within a batch"
                        + ("" if self._group_identity == "batch" else
                           " (this store has group_identity='global'; a store created with "
                           "group_identity='batch' takes a recurring query as a new group of each batch)"))

    def repair(self) -> int:
        """Cut a torn tail back to the committed counts; return the number of fixes.

        Called by every append.  Removes temporary ``*.partial`` files of a
        killed writer and shrinks arrays that are longer than committed.
        """
        if self.mode != "a":
            raise PermissionError(f"{self.path} is open read-only")
        fixes = cut_torn_tail(self._loc, self._arrays, self._needed_lengths(self._rows, self._groups, self._nnz))
        if fixes:
            logger.warning("GroupStore %s: repaired a torn append (%d fix(es)); the store is at "
                           "its last commit (%d rows)", self.path, fixes, self._rows)
        return fixes

    def _write(self, X, y, gp, gq, batch_id, ids=None):
        m0, q0, z0 = self._rows, self._groups, self._nnz
        k, g = X.shape[0], len(gq)
        m1, q1 = m0 + k, q0 + g
        h = BatchHasher()
        a = self._arrays
        if self.sparse:
            _, z1 = append_csr(a, "X", X, m0, z0, h)
        else:
            z1 = z0
            h.update("X", X)
            if k:
                a["X"].resize((m1, self.n_features))
                a["X"][m0:m1] = X
        h.update("y", y)
        sizes = np.diff(gp).astype(np.int64)
        h.update("group_size", sizes)
        kind = qid_kind_of(gq, self._qid_kind, self.path)
        keys = qid_keys(gq)
        h.update("qid", keys)
        if kind == "str":
            lengths, text = encode_qids(gq)
            h.update("qid_text.len", lengths)
            h.update("qid_text.utf8", text)
        if k:
            a["y"].resize((m1,) + tuple(y.shape[1:]))
            a["y"][m0:m1] = y
        if g:
            a["group_ptr"].resize((q1 + 1,))
            a["group_ptr"][q0 + 1 : q1 + 1] = m0 + gp[1:]
            a["qid"].resize((q1,))
            a["qid"][q0:q1] = keys
            if kind == "str":
                self._qid_text.write(q0, lengths, text)
        attrs = dict(self._attrs)
        if g:
            attrs["qid_kind"] = kind
        attrs["committed"] = {"rows": m1, "groups": q1, "nnz": z1}
        entry = {"batch_id": batch_id, "rows": [m0, m1], "groups": [q0, q1], "nnz": [z0, z1]}
        if self.has_docids:
            b0 = self._docid_bytes
            b1 = append_docids(a, *ids, m0, b0, h)
            attrs["committed"]["docid_bytes"] = b1
            entry["docid_bytes"] = [b0, b1]
        attrs["log"] = list(attrs["log"]) + [{**entry, "time": _now(), "checksum": h.hexdigest()}]
        lengths = self._needed_lengths(m1, q1, z1)
        if self.has_docids:
            lengths["docid/bytes"] = int(attrs["committed"]["docid_bytes"])
        attrs.update(commit_bindings(self._loc, a, lengths, attrs))    # every chunk bound to its place
        write_attrs(self._loc, attrs)  # the commit point
        self._chunk_crcs, self._tail_crcs = attrs[CHUNK_CRCS], attrs[TAIL_CRCS]
        self._rebind()
        self._attrs = attrs
        self._rows, self._groups, self._nnz = m1, q1, z1
        if self.has_docids:
            self._docid_bytes = int(attrs["committed"]["docid_bytes"])
        self._gp_all = np.concatenate((self._gp_all, m0 + gp[1:]))
        if self._qid_cache is not None:
            self._qid_all = np.concatenate((self._qid_all, keys))
        self._load_qid_kind(attrs)
        self._group_ptr_cache = None
        logger.debug("GroupStore %s: committed batch %r (%d rows, %d groups)", self.path, batch_id, k, g)

    # ------------------------------------------------------------------ verify
    @reads_unbound      # per-batch checksums name the batch; chunk bindings would name a chunk
    def verify(self, *, piece_rows: int = 262_144, batch_ids=None) -> int:
        """Re-read every committed batch and compare it with its logged checksum.

        Also checks the structural invariants (log ranges contiguous and equal
        to the committed counts, ``group_ptr`` increasing, CSR ``indptr``
        consistent).  Returns the number of batches verified; raises
        :class:`StoreFormatError` naming the first batch that does not match.
        ``batch_ids``: re-read only the batches with these ids (e.g. the ones
        just appended); the structural checks still cover the whole store.
        """
        log = self._attrs["log"]
        r = g = z = 0
        for e in log:
            if e["rows"][0] != r or e["groups"][0] != g or e["nnz"][0] != z:
                raise StoreFormatError(f"{self.path}: append log is not contiguous at batch "
                                       f"{e.get('batch_id')!r}")
            r, g, z = e["rows"][1], e["groups"][1], e["nnz"][1]
        if (r, g, z) != (self._rows, self._groups, self._nnz):
            raise StoreFormatError(f"{self.path}: append log ends at rows={r}, groups={g}, nnz={z} "
                                   f"but the commit record says {self._rows}, {self._groups}, {self._nnz}")
        if np.any(np.diff(self._gp_all) < 0) or self._gp_all[0] != 0:
            raise StoreFormatError(f"{self.path}: array 'group_ptr' is not non-decreasing from 0")
        if batch_ids is not None:
            batch_ids = set(batch_ids)
            log = [e for e in log if e.get("batch_id") in batch_ids]
        for e in log:
            (r0, r1), (g0, g1) = e["rows"], e["groups"]
            try:      # a chunk that cannot be read (missing, swapped, damaged) fails its batch too
                h = BatchHasher()
                for a in range(r0, r1, piece_rows):
                    b = min(a + piece_rows, r1)
                    if self.sparse:
                        ip = np.asarray(self._indptr[a : b + 1], dtype=np.int64)
                        h.update("X.indices", self._indices[int(ip[0]) : int(ip[-1])])
                        h.update("X.data", self._data[int(ip[0]) : int(ip[-1])])
                        h.update("X.row_nnz", np.diff(ip))
                    else:
                        h.update("X", self._X[a:b])
                    h.update("y", self._y[a:b])
                if self.sparse and r1 == r0:
                    h.update("X.indices", np.zeros(0, np.int32))
                    h.update("X.data", np.zeros(0, np.float32))
                    h.update("X.row_nnz", np.zeros(0, np.int64))
                elif not self.sparse and r1 == r0:
                    h.update("X", np.zeros((0, self.n_features), np.float32))
                if r1 == r0:
                    h.update("y", np.zeros(0))
                h.update("group_size", np.diff(self._gp_all[g0 : g1 + 1]))
                h.update("qid", self._qid_all[g0:g1])
                if self.has_docids:
                    ids = self.docids(r0, r1)
                    hash_docids(h, *check_docids(ids, r1 - r0))
                if self._qid_kind == "str":
                    lengths, text = self._qid_text.raw(g0, g1)
                    h.update("qid_text.len", lengths)
                    h.update("qid_text.utf8", text)
                    labels = self._qid_text.read(g0, g1, self._groups)
                    if not np.array_equal(qid_keys(labels), self._qid_all[g0:g1]):
                        raise StoreFormatError(f"{self.path}: string query ids of batch {e.get('batch_id')!r} do "
                                               "not match their keys in 'qid'; the store is corrupt")
                if self.sparse and r1 > r0 and int(self._indptr[r0]) != e["nnz"][0]:
                    raise StoreFormatError(f"{self.path}: 'X/indptr' disagrees with the log at batch "
                                           f"{e.get('batch_id')!r}")
            except StoreFormatError as exc:
                raise StoreFormatError(
                    f"{self.path}: batch {e.get('batch_id')!r} (rows {r0}:{r1}) does not match its checksum: "
                    f"it cannot be read ({exc})") from exc
            if h.hexdigest() != e["checksum"]:
                raise StoreFormatError(
                    f"{self.path}: batch {e.get('batch_id')!r} (rows {r0}:{r1}) does not match its "
                    "checksum; committed data was modified or lost")
        return len(log)


_PRIVATE = object()


def _reopen(path, rows, groups, nnz, storage_options=None):
    return GroupStore.open(path, storage_options=storage_options)._pin(rows, groups, nnz)


def _positive_int(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def _check_csr_width(n, name):
    """CSR column indices are stored as int32: a wider matrix would wrap around silently."""
    if n > np.iinfo(np.int32).max:
        raise ValueError(f"{name}={n} exceeds the int32 column indices of the store's CSR layout "
                         f"(at most {np.iinfo(np.int32).max}); hash the features into fewer columns")
    return n


def check_same_store(store) -> None:
    """An appender re-reading the commit record refuses a store that was re-created since it opened it."""
    now = (store._attrs.get("store_id"), store._attrs.get("created"))
    if now != store._store_id:
        raise StoreFormatError(f"{store.path} was re-created (create(..., overwrite=True)) by another process "
                               "since this object opened it; nothing was appended. Open it again to append "
                               "to the new store")
