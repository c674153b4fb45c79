"""Per-row click-log columns of a GroupStore: ``weight``, ``click``, ``position`` and ``ranker`` (all optional).

A store created with ``GroupStore.create(..., row_columns=("click", "position"))``
(any subset of :data:`ROW_COLUMNS`) keeps, beside ``X`` and ``y``, one value
per row in each named array, chunked along rows like ``y``:

| array | shape / dtype | holds |
|---|---|---|
| ``weight`` | (m,) float64 | a row weight w_i >= 0 (``sample_weight``; pair weight w_i w_j) |
| ``click`` | (m,) uint8 | 1 = the row was clicked, 0 = shown and not clicked |
| ``position`` | (m,) int32 | the 1-based rank the logging ranker showed the row at |
| ``ranker`` | (m,) int32 | the id (>= 0) of the logging ranker that produced the impression |

``ranker`` is what intervention harvesting reads
(:func:`streamrank.position_bias.harvest_propensity`).

Every append then takes them (``append(..., weight=, click=, position=, ranker=)``:
all the store's columns, no other), validated with the batch before a byte
is written (:func:`check_row_columns`: finite ``weight >= 0``, ``click`` in
{0, 1}, integer ``position >= 1``; an error names the array and the row).
They are sized by the committed rows (no count of their own in the commit
record), hashed into the batch checksum (components ``col.weight``,
``col.click``, ``col.position``; ``verify()`` re-reads them), bound to their
place by the commit record's chunk CRCs like ``y``
(:mod:`streamrank.io._chunk_binding`) and cut back by the torn-tail repair.
Data read back is untrusted: every decoded chunk is range-checked
(:func:`column_check`) before a learner sees it.

Reading: ``store.read_column(name, r0, r1)``; as training input,
``with_weights(store, "weight")`` (row weights read with each block) and
``ips_weighted(store, propensity)`` (targets = clicks, IPS row weights from
click + position: :mod:`streamrank.io.weighted`, :mod:`streamrank.clicks`).
"""
from __future__ import annotations

import numpy as np

from .schema import StoreFormatError

__all__ = ["ROW_COLUMNS", "check_column_names", "check_same_columns", "create_row_columns", "check_row_columns",
           "hash_row_columns", "append_row_columns", "column_check", "RowColumnReads"]

#: name -> stored dtype, in the one order columns are listed, hashed and written
ROW_COLUMNS = {"weight": "float64", "click": "uint8", "position": "int32", "ranker": "int32"}
_POSITION_MAX = int(np.iinfo(np.int32).max)


def check_column_names(names, where: str = "row_columns") -> tuple:
    """The columns named (a subset of :data:`ROW_COLUMNS`), in :data:`ROW_COLUMNS` order; errors name the bad one."""
    if names is None:
        return ()
    if isinstance(names, str):
        names = (names,)
    names = [str(n) for n in names]
    for n in names:
        if n not in ROW_COLUMNS:
            raise ValueError(f"{where}: unknown row column {n!r}; a store keeps any of {list(ROW_COLUMNS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: a row column is named twice in {names}")
    return tuple(n for n in ROW_COLUMNS if n in names)


def create_row_columns(root, names, chunk_rows: int, compressors) -> None:
    """The empty arrays of the columns ``names`` of a new store (chunked like ``y``)."""
    for n in names:
        dtype = np.dtype(ROW_COLUMNS[n])
        root.create_array(n, shape=(0,), chunks=(int(chunk_rows),), dtype=ROW_COLUMNS[n],
                          compressors=compressors(dtype.itemsize), fill_value=0)


def _check_one(name: str, v, n_rows: int, what: str) -> np.ndarray:
    a = np.asarray(v)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.shape != (n_rows,):
        raise ValueError(f"{what} has shape {a.shape}; expected one value per row, ({n_rows},)")
    if a.dtype.kind == "b":
        a = a.astype(np.int64)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{what} has dtype {a.dtype}; expected numbers")
    if name == "weight":
        a = a.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(a) | (a < 0))
        if bad.size:
            raise ValueError(f"{what}[{int(bad[0])}] = {a[bad[0]].item()!r}: weights must be finite and >= 0")
        return a
    if a.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(a) | (a != np.round(a)))
        if bad.size:
            raise ValueError(f"{what}[{int(bad[0])}] = {a[bad[0]].item()!r}: expected an integer")
    if name == "click":
        bad = np.flatnonzero((a != 0) & (a != 1))
        if bad.size:
            raise ValueError(f"{what}[{int(bad[0])}] = {a[bad[0]].item()!r}: clicks are 0 or 1")
        return a.astype(np.uint8)
    if name == "ranker":
        bad = np.flatnonzero((a < 0) | (a > _POSITION_MAX))
        if bad.size:
            raise ValueError(f"{what}[{int(bad[0])}] = {a[bad[0]].item()!r}: ranker ids are integers "
                             f"0..{_POSITION_MAX}")
        return a.astype(np.int32)
    bad = np.flatnonzero((a < 1) | (a > _POSITION_MAX))
    if bad.size:
        raise ValueError(f"{what}[{int(bad[0])}] = {a[bad[0]].item()!r}: positions are 1-based ranks "
                         f"(1..{_POSITION_MAX})")
    return a.astype(np.int32)


def check_row_columns(store_columns, given: dict, n_rows: int, path) -> dict:
    """``{name: stored-dtype array (n_rows,)}`` for the store's columns, from ``given`` (name -> values or None).

    Every column the store keeps must be given and none other (errors say
    which and how the store was created).
    """
    out = {}
    for name, v in given.items():
        if v is not None and name not in store_columns:
            raise ValueError(f"{name}= given, but the store at {path} keeps no {name!r} column (create it with "
                             f"row_columns=(..., {name!r}); it keeps {list(store_columns) or 'none'})")
    for name in store_columns:
        v = given.get(name)
        if v is None:
            raise ValueError(f"the store at {path} keeps a {name!r} column (one value per row): pass {name}= "
                             f"(ingest: --{name}-column COL)")
        out[name] = _check_one(name, v, n_rows, name)
    return out


def hash_row_columns(hasher, cols: dict) -> None:
    """Feed the columns to a batch checksum (every column, empty ones too, in stored dtype)."""
    for name in ROW_COLUMNS:
        if name in cols:
            hasher.update(f"col.{name}", np.ascontiguousarray(cols[name], dtype=ROW_COLUMNS[name]))


def append_row_columns(arrays: dict, cols: dict, r0: int, hasher) -> None:
    """Write the columns past the committed ``r0`` rows (hashed first; nothing here commits)."""
    hash_row_columns(hasher, cols)
    for name, a in cols.items():
        if a.shape[0]:
            arrays[name].resize((r0 + a.shape[0],))
            arrays[name][r0:r0 + a.shape[0]] = a


def column_check(store, name: str):
    """``check(first_row, rows)`` of a decoded chunk of column ``name`` (a RowChunkReader's check).

    What ``append`` lets in, and nothing else: a store edited outside streamrank
    raises :class:`~streamrank.io.schema.StoreFormatError` naming the row.
    """
    def check(first_row, a):
        from ._read_checks import CHECK_READS

        if not CHECK_READS or a.shape[0] == 0:
            return
        if name == "weight":
            bad = ~np.isfinite(a) | (a < 0)
            want = "finite weights >= 0"
        elif name == "click":
            bad = a > 1
            want = "clicks 0 or 1"
        elif name == "ranker":
            bad = a < 0
            want = "ranker ids >= 0"
        else:
            bad = a < 1
            want = "positions >= 1"
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise StoreFormatError(f"{store}: array {name!r} row {first_row + i} holds {a[i].item()!r}, but the store "
                                   f"keeps {want}; the store is corrupt (damaged, or written or edited outside "
                                   "streamrank) and is not read further")
    return check


class RowColumnReads:
    """Mixin of :class:`~streamrank.GroupStore`: the columns it keeps (:attr:`row_columns`) and :meth:`read_column`."""

    row_columns: tuple = ()

    def _load_row_columns(self, attrs) -> dict:
        """The columns recorded in the attributes (checked) and their array spec ``{name: (dtype, 1)}``."""
        cols = attrs.get("row_columns", [])
        try:
            if not isinstance(cols, list):
                raise ValueError(f"row_columns is {type(cols).__name__}, expected a list")
            names = check_column_names(cols)
            if list(names) != cols:
                raise ValueError(f"row_columns {cols} is not in the order {list(ROW_COLUMNS)}")
        except (ValueError, TypeError) as exc:
            raise StoreFormatError(f"{self.path}/zarr.json: corrupt metadata ({exc})") from None
        self.row_columns = names
        return {n: (ROW_COLUMNS[n], 1) for n in names}

    def _make_column_readers(self, reader) -> None:
        self._column_rows = {n: reader(n, column_check(self.path, n)) for n in self.row_columns}

    def read_column(self, name: str, r0: int = 0, r1: int | None = None) -> np.ndarray:
        """Values of the row column ``name`` (``"weight"``, ``"click"``, ``"position"``) for committed rows r0:r1.

        In the stored dtype (float64, uint8, int32), checked as read (:func:`column_check`).
        """
        if name not in self.row_columns:
            raise ValueError(f"the store at {self.path} keeps no {name!r} column "
                             f"(it keeps {list(self.row_columns) or 'none'})")
        r1 = self._rows if r1 is None else int(r1)
        if not 0 <= int(r0) <= r1 <= self._rows:
            raise IndexError(f"rows {r0}:{r1} outside the store's {self._rows} committed rows")
        return np.array(self._column_rows[name].read(int(r0), r1, self._rows))


def check_same_columns(store, named, where) -> None:
    """An ingest into an existing store names exactly its row columns (``--<col>-column``), no other."""
    named = check_column_names(tuple(named or ()), "columns")
    if named != store.row_columns:
        missing = [c for c in store.row_columns if c not in named]
        if missing:
            raise ValueError(f"the store {where} keeps a {missing[0]!r} column: name it (--{missing[0]}-column COL)")
        extra = [c for c in named if c not in store.row_columns][0]
        raise ValueError(f"the store {where} keeps no {extra!r} column; ingest into a new store to keep it")
