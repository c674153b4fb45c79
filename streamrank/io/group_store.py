"""Scored-group store: an appendable zarr v3 group of query groups.

Layout: see :mod:`streamrank.io.schema`.  A :class:`GroupStore` is a
:class:`~streamrank.io.blocks.BlockSource`, so ``store.blocks(...)`` has the
same contract as every other source (group-aligned blocks, shuffled order,
prefetch).

Atomic, idempotent append
-------------------------
``append`` validates the whole batch before writing anything, cuts a torn
tail left by a killed writer back to the committed length, writes the new
rows *beyond* the committed length, and writes the commit record — committed
counts plus a log entry with the batch's checksum — **last**, in one atomic
write (the transaction both stores share, :mod:`streamrank.io._append_transaction`;
the group store's parts in :mod:`streamrank.io._group_append`).  Readers use only the committed
counts, so a crash at any point leaves the store readable at its previous
state.  A ``batch_id`` already in the log is skipped (``append`` returns
False).  One writer at a time: an advisory ``flock`` on
``<store>/.streamrank.lock`` for a local directory (released by the OS if the
writer dies); at a URL none: overlapping commits are refused (see below).

Stores at URLs
--------------
``GroupStore.create("s3://bucket/prefix/train.zarr", n, storage_options=...)``
and ``GroupStore.open(url, storage_options=...)`` keep a store on object
storage in an Icechunk repository (:mod:`streamrank.io._icechunk_repo`):
a reader reads one commit whole (``open(url, as_of=TAG)`` an older one).  Row
chunks are decoded by the same code as local chunk files (CRC-32C, bindings,
read checks), several requests in flight (:mod:`streamrank.io._remote_chunks`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import logging
import os

import numpy as np
import scipy.sparse as sp

from ._qid_text import QidText, create_qid_text
from .groups import (
    GROUP_IDENTITIES,
    batch_of,
    check_group_identity,
)
from ._chunk_binding import bound_array, bound_decoder, check_tail_crcs, rebind
from ._read_checks import BadEntry, check_offsets, entries_check, finite_rows_check, with_row
from ._row_chunks import RowChunkReader
from ._append_transaction import commit_time
from ._group_append import GroupAppend, _check_csr_width, _positive_int
from ._group_verify import GroupVerify
from ._writer import (  # noqa: F401  (re-exported: tuple_store and tests import them from here)
    LOCK_NAME,
    check_same_store,
    creating_store,
    location,
    new_store_id,
    writer_lock,
    write_attrs,
    writing,
    zarr_store,
)
from .blocks import BlockSource
from .docids import DOCID_ARRAYS, create_docid_arrays, read_docids
from .row_columns import RowColumnReads, check_column_names, create_row_columns
from .schema import (
    FORMAT_VERSION,
    GROUP_ARRAYS_DENSE,
    GROUP_ARRAYS_SPARSE,
    GROUP_FORMAT,
    EVERY_CHUNK,
    CheckedArray,
    StoreFormatError,
    check_array_layout,
    check_chunk_crcs,
    check_chunk_dirs,
    check_format,
    check_log,
    every_chunk,
    compressors,
    open_array,
    read_attrs,
    rows_per_chunk,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._typing import PathLike

__all__ = ["GroupStore"]

logger = logging.getLogger("streamrank")

#: decode X and y chunks straight from their files (streamrank.io._chunk_files); False: zarr reads them
_DECODE_CHUNK_FILES = True
_GROUP_CHUNK = 1 << 14      # group_ptr / qid entries per chunk (128 KiB; rewritten by every append)
_NNZ_CHUNK = 1 << 20        # CSR indices / data entries per chunk (4 MiB)
_INDPTR_CHUNK = 1 << 19     # CSR indptr entries per chunk (4 MiB)


class GroupStore(GroupAppend, GroupVerify, RowColumnReads, BlockSource):
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
    def __init__(self, path, mode: str = "r", *, _token=None, storage_options=None, as_of=None):
        if _token is not _PRIVATE:
            raise TypeError("use GroupStore.create(path, ...) or GroupStore.open(path)")
        if mode not in ("r", "a"):
            raise ValueError(f"mode must be 'r' (read) or 'a' (append), got {mode!r}")
        self.path, self._loc = location(path, storage_options, as_of=as_of, mode=mode)
        self.storage_options = dict(storage_options) if storage_options else None
        self.mode = mode
        self._load()

    @classmethod
    def create(cls, path: PathLike, n_features: int, *, sparse: bool = False, n_outputs: int = 1,
               overwrite: bool = False, feature_names: Sequence[str] | None = None, chunk_rows: int | None = None,
               docids: bool = False, group_identity: str = "batch", row_columns: Sequence[str] = (),
               storage_options: dict | None = None) -> GroupStore:
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
            Replace an existing store at ``path`` (only a zarr store or an empty directory is ever deleted).
        feature_names : sequence of str, optional
            Names of the feature columns, kept with the store (exports name the features by them).
        chunk_rows : int, optional
            Rows per chunk of ``X`` and ``y`` (default: about 4 MiB of dense ``X``).
        docids : bool
            Keep one document id (a string) per row: every append then takes
            ``docid=`` (:mod:`streamrank.io.docids`; run files name documents by them).
        row_columns : subset of ("weight", "click", "position", "ranker")
            Per-row click-log columns kept beside ``y``; every append then takes
            them (``weight=``, ``click=``, ``position=``, ``ranker=``): :mod:`streamrank.io.row_columns`.
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
            as Icechunk transactions: :mod:`streamrank.io._icechunk_repo`.

        Notes
        -----
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
        cols = check_column_names(row_columns)
        with creating_store(p, overwrite), every_chunk():
            cls._create_arrays(p, n_features, sparse, n_outputs, feature_names, rpc, docids, group_identity, cols)
        return cls(path, "a", _token=_PRIVATE, storage_options=storage_options)

    @staticmethod
    def _create_arrays(p, n_features, sparse, n_outputs, feature_names, rpc, docids, group_identity="batch",
                       cols=()):
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
        create_row_columns(root, cols, rpc, compressors)
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
            "created": commit_time(),
            "store_id": new_store_id(),
            EVERY_CHUNK: True,
            "committed": {"rows": 0, "groups": 0, "nnz": 0},
            "log": [],
        }
        if docids:
            attrs["docids"] = True
            attrs["committed"]["docid_bytes"] = 0
        if cols:
            attrs["row_columns"] = list(cols)
        write_attrs(p, attrs)  # last: a store without it is not a store

    @classmethod
    def open(cls, path: PathLike, mode: str = "r", *, storage_options: dict | None = None,
             as_of: str | None = None) -> GroupStore:
        """Open an existing store: ``mode="r"`` (read only) or ``"a"`` (append).

        ``path``: a directory or a URL (``s3://…``) with its ``storage_options``
        (see :meth:`create`); ``as_of``: a tag or snapshot id of a store at a URL (read-only).
        """
        return cls(path, mode, _token=_PRIVATE, storage_options=storage_options, as_of=as_of)

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
        spec = GROUP_ARRAYS_SPARSE if self.sparse else GROUP_ARRAYS_DENSE
        if self.has_docids:
            spec = {**spec, **DOCID_ARRAYS}
        spec = {**spec, **self._load_row_columns(attrs)}
        store = self._zstore = zarr_store(self._loc, read_only=(self.mode == "r"))
        self._root = zarr.open_group(store=store, mode="r" if self.mode == "r" else "r+")
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
        self._make_column_readers(reader)
        if self.sparse:
            self._csr_rows = (reader("X/indptr"),
                              reader("X/indices", entries_check(self.path, "X/indices", self.n_features)),
                              reader("X/data", entries_check(self.path, "X/data")))

    def _rebind(self):
        """After a commit: the readers check the new commit's bindings (:func:`._chunk_binding.rebind`)."""
        readers = [r for r in (self._X_rows, self._y_rows, *(getattr(self, "_csr_rows", None) or ()),
                               *self._column_rows.values()) if r]
        rebind([getattr(a, "_decoder", None) for a in self._arrays.values()] + [r._decoder for r in readers],
               self._chunk_crcs, self._tail_crcs)

    def _needed_lengths(self, rows, groups, nnz):
        need = {"y": rows, "group_ptr": groups + 1, "qid": groups, **{n: rows for n in self.row_columns}}
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
        # the worker reopens the store read-only at the same commit (a repository's: the same snapshot)
        return (_reopen, (self.path, self._rows, self._groups, self._nnz, self.storage_options,
                          getattr(self._loc, "snapshot_id", None)))

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
        """Group identity and qid kind from the attributes (older stores: global, int)."""
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
        self._qid_text = QidText(self._root, self.path, bind=self._bound) if kind == "str" or (
            kind is None and "qid_kind" in attrs) else None

_PRIVATE = object()


def _reopen(path, rows, groups, nnz, storage_options=None, as_of=None):
    return GroupStore.open(path, storage_options=storage_options, as_of=as_of)._pin(rows, groups, nnz)
