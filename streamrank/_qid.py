"""Query ids: integers, strings or other hashable values, and their stable 64-bit keys.

A query id is whatever the user's logs call a query: an integer (LETOR's
``qid:``), a string (``"q-2024-11-03-8812"`` from Spark or BigQuery), or any
other hashable value held in memory.  streamrank keeps the **original id**
wherever it is shown back (``GroupStore.qid``, ``Block.qid``, per-query
metrics), and uses a **key** — a stable signed 64-bit integer — wherever an
integer is needed (fold assignment, the store's duplicate checks):

* integer ids are their own key (so stores and folds of integer ids are
  unchanged);
* a string's key is the first 8 bytes of BLAKE2b(utf-8 bytes), read as a
  little-endian int64 — stable across processes and machines (unlike Python's
  ``hash``, which is salted per process);
* other hashables (tuples, bytes, ...) are keyed by BLAKE2b of their ``repr``;
  they are accepted in memory but not by a store (which holds int64 or str).

Two different strings share a key with probability about ``n² / 2⁶⁵`` (n
distinct ids: 3·10⁻⁴ at 10⁸); every check that could be fooled by a shared
key (contiguity, "already in the store") confirms a key match on the original
ids, so a collision costs a re-read, never a wrong answer.
"""
from __future__ import annotations

import hashlib
import numbers

import numpy as np

__all__ = ["as_qid_array", "qid_keys", "is_integer_qid", "qid_repr"]


def is_integer_qid(q: np.ndarray) -> bool:
    """True for an int64 id array (as opposed to an object array of strings/hashables)."""
    return q.dtype.kind in "iu"


def _string_key(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little", signed=True)


def qid_keys(q) -> np.ndarray:
    """Stable int64 key of every id (integers: themselves; strings: BLAKE2b; see module doc)."""
    q = np.asarray(q)
    if q.dtype.kind in "iu":
        return q.astype(np.int64, copy=False)
    if q.dtype.kind == "b":
        raise TypeError("query ids are boolean; expected integer or string ids")
    if q.dtype.kind == "f":
        return q.astype(np.int64)
    out = np.empty(q.shape[0], dtype=np.int64)
    for i, v in enumerate(q.tolist()):
        if isinstance(v, str):
            out[i] = _string_key(v)
        elif isinstance(v, numbers.Integral) and not isinstance(v, bool):
            out[i] = int(v)
        else:
            out[i] = _string_key(repr(v))
    return out


def qid_repr(v) -> str:
    """An id as shown in messages: integers plainly, strings quoted."""
    if isinstance(v, (np.integer, int)) and not isinstance(v, bool):
        return str(int(v))
    return repr(v.item() if isinstance(v, np.generic) else v)


def as_qid_array(qid, n_rows: int, name: str = "qid") -> np.ndarray:
    """Validate query ids and return them as int64 (integers) or an object array (anything else).

    Accepts lists, numpy arrays (integer, integral float, unicode, bytes,
    object), pandas Series/Categoricals and pyarrow arrays.  Missing ids
    (None, NaN, pandas NA, nulls) are refused naming the row; so are floats
    with a fraction and booleans.
    """
    q = _to_numpy(qid, name)
    if q.ndim != 1:
        raise ValueError(f"{name} must be 1-D with one id per row; got shape {q.shape}")
    if q.shape[0] != n_rows:
        raise ValueError(f"{name} has {q.shape[0]} rows but X has {n_rows}; lengths must match")
    kind = q.dtype.kind
    if kind == "b":
        raise TypeError(f"{name} is boolean; expected integer or string ids")
    if kind in "c":
        raise TypeError(f"{name} is complex ({q.dtype}); expected integer or string ids")
    if kind in "mM":
        raise TypeError(f"{name} has dtype {q.dtype}; expected integer or string ids "
                        "(convert dates to strings or integers first)")
    if kind == "f":
        bad = ~np.isfinite(q)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name} contains NaN or infinity at row {row}; expected integer ids")
        frac = q != np.round(q)
        if frac.any():
            row = int(np.flatnonzero(frac)[0])
            raise ValueError(f"{name} must hold integer ids; row {row} is {float(q[row])!r}")
        if q.size and np.abs(q).max() >= 2.0 ** 63:
            raise ValueError(f"{name} holds ids larger than int64 can represent")
        return np.ascontiguousarray(q, dtype=np.int64)
    if kind == "u":
        if q.size and q.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{name} holds ids larger than int64 can represent")
        return np.ascontiguousarray(q, dtype=np.int64)
    if kind == "i":
        return np.ascontiguousarray(q, dtype=np.int64)
    if kind == "U":
        return q.astype(object)
    if kind == "S":
        return np.asarray([b.decode("utf-8", "surrogateescape") for b in q.tolist()], dtype=object)
    # object: strings, python ints, other hashables
    out = np.empty(q.shape[0], dtype=object)
    all_int = True
    for i, v in enumerate(q.tolist()):
        if v is None or (isinstance(v, float) and v != v) or type(v).__name__ in ("NAType", "NaTType"):
            raise ValueError(f"{name} is missing at row {i} ({v!r}); every row needs a query id")
        if isinstance(v, bool):
            raise TypeError(f"{name} holds a boolean at row {i}; expected integer or string ids")
        if isinstance(v, float):
            if v != int(v):
                raise ValueError(f"{name} must hold integer ids; row {i} is {v!r}")
            v = int(v)
        try:
            hash(v)
        except TypeError:
            raise TypeError(f"{name} holds an unhashable {type(v).__name__} at row {i}; "
                            "query ids must be integers, strings or other hashable values") from None
        if isinstance(v, bytes):
            v = v.decode("utf-8", "surrogateescape")
        all_int &= isinstance(v, numbers.Integral)
        out[i] = v
    if all_int and out.size:
        try:
            return np.asarray(out.tolist(), dtype=np.int64)
        except OverflowError:
            raise ValueError(f"{name} holds ids larger than int64 can represent") from None
    if not out.size:
        return np.zeros(0, dtype=np.int64)
    return out


def _to_numpy(qid, name):
    mod = type(qid).__module__
    if mod.startswith("pyarrow"):
        if qid.null_count:
            import pyarrow.compute as pc

            row = int(pc.index(pc.is_null(qid), True).as_py())
            raise ValueError(f"{name} is missing (null) at row {row}; every row needs a query id")
        return np.asarray(qid.to_numpy(zero_copy_only=False)) if hasattr(qid, "to_numpy") else np.asarray(qid)
    if mod.startswith("pandas"):
        if hasattr(qid, "isna"):
            na = np.asarray(qid.isna())
            if na.any():
                row = int(np.flatnonzero(na)[0])
                raise ValueError(f"{name} is missing (NA) at row {row}; every row needs a query id")
        arr = qid.to_numpy() if hasattr(qid, "to_numpy") else np.asarray(qid)
        return np.asarray(arr)
    if isinstance(qid, np.ndarray):
        return qid
    try:
        return np.asarray(qid)
    except ValueError:  # ragged tuples etc.
        out = np.empty(len(qid), dtype=object)
        out[:] = list(qid)
        return out
