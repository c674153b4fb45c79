"""Tuple stores: (query, preferred item, other item) triples for SGD rankers.

A :class:`TupleStore` holds sparse query vectors ``Q`` (CSR), sparse item
vectors ``D`` (CSR) and ``tuples`` (l, 3) int64 rows ``(query row, preferred
item row, other item row)`` with a ``magnitude`` (l,) (1.0 unless given) — the
input of the bilinear ranker (:class:`~streamrank.SparseSGDRanker`).  Layout and commit protocol as in
:mod:`streamrank.io.schema`: appends are atomic and idempotent exactly like
:class:`~streamrank.GroupStore` appends (data first beyond the committed
counts, the commit record last; a torn tail is cut back by the next append):
both run the one transaction of :mod:`streamrank.io._append_transaction`.

A store is a :class:`~streamrank.io.tuples.TupleSource`: its shuffled
:meth:`~streamrank.io.tuples.TupleSource.batches` read the rows of ``Q`` and
``D`` a batch needs through :class:`RowCache`: an LRU cache of decoded CSR row pieces (a run of
consecutive rows: its slice of ``indptr`` and the matching ``indices`` /
``data``) whose held bytes never exceed ``cache_bytes`` (default 64 MiB), so
memory is also independent of the number of stored vectors.  When ``Q`` and
``D`` together fit in ``cache_bytes`` (or were already read whole by
:meth:`TupleSource.matrices`) they are read whole once instead — the fast
path for small stores.  Both paths give bit-identical batches.  Every tuple
is emitted exactly once per pass; the same ``random_state`` gives the same
batches.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import logging

import numpy as np
import scipy.sparse as sp

from ._read_checks import check_csr_piece, check_offsets, check_tuple_rows
from ._row_cache import RowCache
from .tuples import (  # noqa: F401  (re-exported: streamrank.io.tuple_store keeps its names)
    _CACHE_BYTES,
    _TUPLE_CHUNK,
    ArrayTupleSource,
    TupleBatch,
    TupleSource,
    _check_csr,
    _check_magnitudes,
    _check_ranges,
    _check_tuples,
    _make_batch,
    as_tuple_source,
)
from ._append_transaction import AppendParts, NewCommit, append_transaction, commit_time, repair_torn_tail
from ._writer import creating_store, location, new_store_id, write_attrs, zarr_store
from ._chunk_binding import bound_array, check_tail_crcs, reads_unbound, rebind
from .group_store import (
    _PRIVATE,
    _check_csr_width,
    _positive_int,
)
from .schema import (
    FORMAT_VERSION,
    TUPLE_ARRAYS,
    TUPLE_FORMAT,
    BatchHasher,
    EVERY_CHUNK,
    StoreFormatError,
    append_csr,
    check_array_layout,
    check_chunk_crcs,
    check_chunk_dirs,
    check_format,
    check_log,
    every_chunk,
    hash_csr_rows,
    compressors,
    open_array,
    read_attrs,
)

if TYPE_CHECKING:
    from .._typing import PathLike

__all__ = ["RowCache", "TupleBatch", "TupleSource", "TupleStore", "as_tuple_source"]

logger = logging.getLogger("streamrank")

_NNZ_CHUNK = 1 << 20
_INDPTR_CHUNK = 1 << 19


_COUNTS = ("q_rows", "q_nnz", "d_rows", "d_nnz", "tuples")


class TupleStore(TupleSource):
    """Appendable zarr store of query vectors, item vectors and preference tuples.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, streamrank as sr, tempfile, os
    >>> ts = sr.TupleStore.create(os.path.join(tempfile.mkdtemp(), "t.zarr"), 3, 4)
    >>> Q, D = sp.eye(2, 3, format="csr"), sp.eye(3, 4, format="csr")
    >>> ts.append(Q, D, [[0, 1, 2], [1, 0, 2]], batch_id="a")
    True
    >>> [b.D_pos.shape for b in ts.batches(batch_size=1, shuffle_buffer=0)]
    [(1, 4), (1, 4)]
    """

    def __init__(self, path, mode="r", *, _token=None, storage_options=None, as_of=None):
        if _token is not _PRIVATE:
            raise TypeError("use TupleStore.create(path, ...) or TupleStore.open(path)")
        if mode not in ("r", "a"):
            raise ValueError(f"mode must be 'r' (read) or 'a' (append), got {mode!r}")
        self.path, self._loc = location(path, storage_options, as_of=as_of, mode=mode)
        self.storage_options = dict(storage_options) if storage_options else None
        self.mode = mode
        self._load()

    @classmethod
    def create(cls, path: PathLike, n_query_features: int, n_item_features: int, *, overwrite: bool = False,
               storage_options: dict | None = None) -> TupleStore:
        """Create an empty tuple store and return it opened for appending.

        ``overwrite=True`` replaces a store at ``path`` under its writer lock
        (see :meth:`GroupStore.create`).  ``path`` may be a URL (``s3://…``)
        with its ``storage_options``, as for :meth:`GroupStore.create`.
        """
        nq = _check_csr_width(_positive_int(n_query_features, "n_query_features"), "n_query_features")
        nd = _check_csr_width(_positive_int(n_item_features, "n_item_features"), "n_item_features")
        _name, p = location(path, storage_options)
        with creating_store(p, overwrite), every_chunk():
            cls._create_arrays(p, nq, nd)
        return cls(path, "a", _token=_PRIVATE, storage_options=storage_options)

    @staticmethod
    def _create_arrays(p, nq, nd):
        import zarr

        root = zarr.open_group(store=zarr_store(p), mode="a")
        for side in ("Q", "D"):
            g = root.create_group(side)
            ip = g.create_array("indptr", shape=(1,), chunks=(_INDPTR_CHUNK,), dtype="int64",
                                compressors=compressors(8), fill_value=0)
            ip[:] = np.zeros(1, dtype=np.int64)
            g.create_array("indices", shape=(0,), chunks=(_NNZ_CHUNK,), dtype="int32",
                           compressors=compressors(4), fill_value=0)
            g.create_array("data", shape=(0,), chunks=(_NNZ_CHUNK,), dtype="float32",
                           compressors=compressors(4), fill_value=0)
        root.create_array("tuples", shape=(0, 3), chunks=(_TUPLE_CHUNK, 3), dtype="int64",
                          compressors=compressors(8), fill_value=0)
        root.create_array("magnitude", shape=(0,), chunks=(_TUPLE_CHUNK,), dtype="float64",
                          compressors=compressors(8), fill_value=0)
        write_attrs(p, {
            "format": TUPLE_FORMAT, "format_version": FORMAT_VERSION,
            "n_query_features": nq, "n_item_features": nd, "created": commit_time(), "store_id": new_store_id(),
            EVERY_CHUNK: True,
            "committed": {k: 0 for k in _COUNTS}, "log": [],
        })

    @classmethod
    def open(cls, path: PathLike, mode: str = "r", *, storage_options: dict | None = None,
             as_of: str | None = None) -> TupleStore:
        """Open an existing tuple store: ``mode="r"`` or ``"a"`` (append); a directory or a URL
        (``as_of``: a tag or snapshot id of a store at a URL, read-only, see :meth:`GroupStore.open`)."""
        return cls(path, mode, _token=_PRIVATE, storage_options=storage_options, as_of=as_of)

    def _load(self):
        import zarr

        attrs = check_format(self.path, read_attrs(self._loc), TUPLE_FORMAT)
        check_log(self.path, attrs["log"], _COUNTS)
        if not hasattr(self, "_store_id"):      # the identity of the store this object opened
            self._store_id = (attrs.get("store_id"), attrs.get("created"))
        try:
            self.n_query_features = _positive_int(attrs["n_query_features"], "n_query_features")
            self.n_item_features = _positive_int(attrs["n_item_features"], "n_item_features")
            self._c = {k: int(attrs["committed"][k]) for k in _COUNTS}
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreFormatError(f"{self.path}/zarr.json: corrupt metadata "
                                   f"(attribute {exc} missing or invalid)") from exc
        self._attrs = attrs
        store = self._zstore = zarr_store(self._loc, read_only=(self.mode == "r"))
        root = self._root = zarr.open_group(store=store, mode="r" if self.mode == "r" else "r+")
        if self.mode == "a":
            check_chunk_dirs(self._loc, TUPLE_ARRAYS)
        self._a = {}
        self._strict = bool(attrs.get(EVERY_CHUNK))    # a missing chunk file is damage, not zeros
        self._chunk_crcs = check_chunk_crcs(self.path, attrs)     # every chunk bound to its place:
        self._tail_crcs = check_tail_crcs(self.path, attrs)       # see streamrank.io._chunk_binding
        for name, (dtype, _nd) in TUPLE_ARRAYS.items():
            check_array_layout(self._loc, name, dtype)
            try:
                with every_chunk():
                    arr = open_array(root, self.path, name)
            except KeyError:
                raise StoreFormatError(f"{self.path}: array {name!r} is missing") from None
            if not isinstance(arr, zarr.Array) or str(arr.dtype) != dtype:
                raise StoreFormatError(f"{self.path}: {name!r} is not a {dtype} array")
            self._a[name] = self._bound(arr, name)
        for name, length in self._needed().items():
            if self._a[name].shape[0] < length:
                raise StoreFormatError(f"{self.path}: array {name!r} has {self._a[name].shape[0]} "
                                       f"entries but {length} are committed; the store is corrupt")
        for side in ("Q", "D"):
            rows, nnz = self._c[f"{side.lower()}_rows"], self._c[f"{side.lower()}_nnz"]
            ends = np.asarray(self._a[f"{side}/indptr"].get_coordinate_selection([0, rows]), dtype=np.int64)
            if ends[0] != 0 or ends[1] != nnz:
                raise StoreFormatError(f"{self.path}: array '{side}/indptr' runs from {int(ends[0])} to "
                                       f"{int(ends[1])} but {nnz} nonzeros are committed (expected 0 to {nnz}); "
                                       "the store is corrupt")
        self._cache = None
        self._row_cache = None

    def _bound(self, arr, name):
        return bound_array(arr, self._loc, name, self._strict, self._chunk_crcs, self._tail_crcs, self.path)

    def _needed(self, c=None):
        c = c or self._c
        return {"Q/indptr": c["q_rows"] + 1, "Q/indices": c["q_nnz"], "Q/data": c["q_nnz"],
                "D/indptr": c["d_rows"] + 1, "D/indices": c["d_nnz"], "D/data": c["d_nnz"],
                "tuples": c["tuples"], "magnitude": c["tuples"]}

    # ------------------------------------------------------------ properties
    @property
    def n_tuples(self) -> int:
        return self._c["tuples"]

    @property
    def n_queries(self) -> int:
        return self._c["q_rows"]

    @property
    def n_items(self) -> int:
        return self._c["d_rows"]

    @property
    def format_version(self) -> int:
        return int(self._attrs["format_version"])

    @property
    def log(self) -> list[dict]:
        """The append log (a copy); :meth:`batches` is the tuple stream."""
        return [dict(e) for e in self._attrs["log"]]

    batches_log = log

    def __repr__(self):
        return (f"TupleStore({self.path!r}, n_tuples={self.n_tuples}, n_queries={self.n_queries}, "
                f"n_items={self.n_items}, n_query_features={self.n_query_features}, "
                f"n_item_features={self.n_item_features})")

    def refresh(self):
        """Re-read the commit record (see tuples appended by another process)."""
        self._load()
        return self

    def __reduce__(self):
        # shipped (e.g. to dask workers) as path + committed counts, never as data
        return (_reopen_tuples, (self.path, dict(self._c), self.storage_options,
                                 getattr(self._loc, "snapshot_id", None)))   # a repository: the same snapshot

    # ------------------------------------------------------------ read hooks
    def _n_cols(self, side):
        return (self.n_query_features, "n_query_features") if side == "Q" else (self.n_item_features,
                                                                                "n_item_features")

    def _read_csr(self, side):
        rows, nnz = self._c[f"{side.lower()}_rows"], self._c[f"{side.lower()}_nnz"]
        nf, what = self._n_cols(side)
        ip = np.asarray(self._a[f"{side}/indptr"][: rows + 1], dtype=np.int64)
        check_offsets(ip, 0, nnz, store=self.path, array=f"{side}/indptr", first=0)
        if ip[0] != 0 or ip[-1] != nnz:
            raise StoreFormatError(f"{self.path}: array '{side}/indptr' runs from {int(ip[0])} to {int(ip[-1])}, "
                                   f"expected 0 to {nnz}; the store is corrupt")
        ind = self._a[f"{side}/indices"][:nnz] if nnz else np.zeros(0, np.int32)
        dat = self._a[f"{side}/data"][:nnz] if nnz else np.zeros(0, np.float32)
        check_csr_piece(ip, ind, dat, nf, store=self.path, side=side, r0=0, z0=0, what=what)
        return sp.csr_matrix((dat, ind, ip), shape=(rows, nf))

    def _matrices(self):
        if self._cache is None:
            self._cache = (self._read_csr("Q"), self._read_csr("D"))
        return self._cache

    def _csr_nbytes(self):
        c = self._c
        return 8 * (c["q_rows"] + 1 + c["d_rows"] + 1) + 8 * (c["q_nnz"] + c["d_nnz"])

    def _read_piece(self, side, r0, r1):
        ip = np.asarray(self._a[f"{side}/indptr"][r0 : r1 + 1], dtype=np.int64)
        check_offsets(ip, 0, self._c[f"{side.lower()}_nnz"], store=self.path, array=f"{side}/indptr", first=r0)
        z0, z1 = int(ip[0]), int(ip[-1])
        ind = np.asarray(self._a[f"{side}/indices"][z0:z1]) if z1 > z0 else np.zeros(0, np.int32)
        dat = np.asarray(self._a[f"{side}/data"][z0:z1]) if z1 > z0 else np.zeros(0, np.float32)
        nf, what = self._n_cols(side)
        check_csr_piece(ip, ind, dat, nf, store=self.path, side=side, r0=r0, z0=z0, what=what)
        return ip - z0, ind, dat

    def _row_readers(self, cache_bytes):
        if self._cache is not None or self._csr_nbytes() <= cache_bytes:
            return self._matrices()  # fast path: small (or already read whole)
        rc = self._row_cache
        if rc is None or rc.budget != cache_bytes:
            c = self._c
            rc = self._row_cache = RowCache(
                cache_bytes, self._read_piece, {"Q": c["q_rows"], "D": c["d_rows"]},
                {"Q": c["q_nnz"], "D": c["d_nnz"]},
                {"Q": self.n_query_features, "D": self.n_item_features})
        return rc["Q"], rc["D"]

    def cache_info(self) -> dict | None:
        """Counters of the row cache of the last :meth:`batches` / :meth:`take` that used it
        (``nbytes``, ``peak_nbytes`` <= ``budget``, hits, misses, evictions), or None."""
        return None if self._row_cache is None else self._row_cache.info()

    @property
    def Q(self) -> sp.csr_matrix:
        """All committed query vectors (read once, cached)."""
        return self._matrices()[0]

    @property
    def D(self) -> sp.csr_matrix:
        """All committed item vectors (read once, cached)."""
        return self._matrices()[1]

    def _read_tuples(self, t0, t1):
        t = np.asarray(self._a["tuples"][t0:t1], dtype=np.int64)
        m = np.asarray(self._a["magnitude"][t0:t1], dtype=np.float64)
        check_tuple_rows(t, m, self._c["q_rows"], self._c["d_rows"], store=self.path, t0=t0)
        return t, m

    # ----------------------------------------------------------------- append
    def append(self, Q, D, tuples, *, magnitudes=None, batch_id=None, rows: str = "local") -> bool:
        """Append query vectors, item vectors and tuples; atomic and idempotent.

        Parameters
        ----------
        Q
            CSR (or dense) (q, n_query_features), or None for no new queries
        D
            CSR (or dense) (d, n_item_features), or None for no new items
        tuples : int array (l, 3)
            ``(query row, preferred item row, other item row)``.  With
            ``rows="local"`` (default) the indices refer to the rows of the
            ``Q`` and ``D`` passed in this call; with ``rows="global"`` they
            refer to rows of the whole store after this call (so tuples may
            reference vectors committed earlier).
        magnitudes : float array (l,), optional
            Preference magnitude of each tuple (default 1).
        batch_id : str, optional
            A batch id already in the log makes the call a no-op returning False.
        """
        if self.mode != "a":
            raise PermissionError(f"{self.path} is open read-only; use TupleStore.open(path, mode='a')")
        if rows not in ("local", "global"):
            raise ValueError(f"rows must be 'local' or 'global', got {rows!r}")
        if batch_id is not None:
            batch_id = str(batch_id)

        def validate():
            Qv = _check_csr(Q, "Q", self.n_query_features)
            Dv = _check_csr(D, "D", self.n_item_features)
            t = _check_tuples(tuples)
            m = _check_magnitudes(magnitudes, len(t))
            c = self._c
            if rows == "local":
                _check_ranges(t, Qv.shape[0], Dv.shape[0])
                t = t + np.array([c["q_rows"], c["d_rows"], c["d_rows"]], dtype=np.int64)
            else:
                _check_ranges(t, c["q_rows"] + Qv.shape[0], c["d_rows"] + Dv.shape[0])
            return Qv, Dv, t, m, batch_id

        return append_transaction(self, "TupleStore", batch_id, AppendParts(
            reopen_arrays=self._reopen_arrays, validate=validate, repair=self._repair, write=self._write,
            commit_record=_commit_record, committed=self._committed))

    def _reopen_arrays(self):
        """Re-read the arrays' metadata (shapes) from disk."""
        with every_chunk():
            self._a = {name: self._bound(self._root[name], name) for name in self._a}

    def _repair(self):
        return repair_torn_tail(self, "TupleStore", self._a, self._needed())

    def _write_csr(self, side, M, h):
        lo = side.lower()
        return append_csr(self._a, side, M, self._c[f"{lo}_rows"], self._c[f"{lo}_nnz"], h)

    def _write(self, Q, D, t, m, batch_id):
        c0 = dict(self._c)
        h = BatchHasher()
        q_rows, q_nnz = self._write_csr("Q", Q, h)
        d_rows, d_nnz = self._write_csr("D", D, h)
        l0, l1 = c0["tuples"], c0["tuples"] + len(t)
        h.update("tuples", t)
        h.update("magnitude", m)
        if len(t):
            self._a["tuples"].resize((l1, 3))
            self._a["tuples"][l0:l1] = t
            self._a["magnitude"].resize((l1,))
            self._a["magnitude"][l0:l1] = m
        c1 = {"q_rows": q_rows, "q_nnz": q_nnz, "d_rows": d_rows, "d_nnz": d_nnz, "tuples": l1}
        attrs = dict(self._attrs)
        attrs["committed"] = c1
        attrs["log"] = list(attrs["log"]) + [{
            "batch_id": batch_id, "time": commit_time(), "checksum": h.hexdigest(),
            **{k: [c0[k], c1[k]] for k in _COUNTS},
        }]
        return NewCommit(attrs, self._a, self._needed(c1))

    def _committed(self, new):
        """The store object takes the commit just written (step 7 of :mod:`._append_transaction`)."""
        self._attrs, self._c, self._cache, self._row_cache = new.attrs, new.attrs["committed"], None, None
        rebind([getattr(a, "_decoder", None) for a in self._a.values()], self._chunk_crcs, self._tail_crcs)

    @reads_unbound      # per-batch checksums name the batch; chunk bindings would name a chunk
    def verify(self, *, batch_ids=None) -> int:
        """Recompute every batch's checksum from the stored arrays; see :meth:`GroupStore.verify`.

        ``batch_ids``: only the batches with these ids.
        """
        log = self._attrs["log"]
        if batch_ids is not None:
            batch_ids = set(batch_ids)
            log = [e for e in log if e.get("batch_id") in batch_ids]
        for e in log:  # batch by batch: memory follows the largest batch, not the store
            h = BatchHasher()
            for side in ("Q", "D"):
                r0, r1 = e[f"{side.lower()}_rows"]
                hash_csr_rows(h, side, *self._read_piece(side, r0, r1))
            l0, l1 = e["tuples"]
            for a in range(l0, max(l1, l0 + 1), _TUPLE_CHUNK):
                tup, mag = self._read_tuples(a, min(a + _TUPLE_CHUNK, l1))
                h.update("tuples", tup)
                h.update("magnitude", mag)
            if h.hexdigest() != e["checksum"]:
                raise StoreFormatError(f"{self.path}: batch {e.get('batch_id')!r} (tuples {l0}:{l1}) "
                                       "does not match its checksum")
        return len(log)


def _commit_record(loc, attrs):
    """The commit point: this module's ``write_attrs`` (a name tests may replace to kill a writer there)."""
    write_attrs(loc, attrs)


def _reopen_tuples(path, counts, storage_options=None, as_of=None):
    ts = TupleStore.open(path, storage_options=storage_options, as_of=as_of)
    if any(counts[k] > ts._c[k] for k in _COUNTS):
        raise StoreFormatError(f"{path}: holds less than the snapshot being restored; the store was rewritten")
    ts._c = dict(counts)
    ts._row_cache = None
    return ts
