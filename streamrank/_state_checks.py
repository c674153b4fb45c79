"""Checks of a loaded model's state, before any kernel touches it (DESIGN §6: a model file is untrusted).

Every learner's ``_set_state`` takes its attributes and arrays through these
functions, which declare what the class expects — the integer range of an
attribute, the shape, kind and finiteness of an array, the consistency
between arrays (``coef_`` against ``n_features_in_``, integer state against
table sizes) — and raise ``ValueError`` naming the attribute or array
otherwise.  :func:`streamrank.load` turns that into a
:class:`~streamrank.persistence.ModelFormatError` naming the model directory.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


__all__ = ["state_int", "state_array", "state_matrix", "MAX_DIM"]

#: the largest feature / row count a saved model may declare (int32 column indices, as the stores)
MAX_DIM = int(np.iinfo(np.int32).max)


def state_int(attrs: dict, key: str, *, lo: int = 0, hi: int = MAX_DIM, default=None) -> int:
    """``attrs[key]`` as an int in ``[lo, hi]`` (``default`` when absent and not None)."""
    if key not in attrs and default is not None:
        return default
    v = attrs.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= int(v) <= hi:
        raise ValueError(f"attribute {key}={v!r} is not an integer in [{lo}, {hi}]")
    return int(v)


def _shape_ok(shape, want) -> bool:
    return len(shape) == len(want) and all(w is None or s == w for s, w in zip(shape, want))


def state_array(arrays: dict, name: str, shape: tuple, *, kind: str = "f", finite: bool = True,
                lo=None, hi=None) -> np.ndarray:
    """``arrays[name]`` as a dense array of ``shape`` (``None``: any length), checked.

    ``kind``: "f" (float64 result; integers accepted) or "i" (int64 result;
    integer dtypes only).  ``finite``: no NaN / ±inf.  ``lo`` / ``hi``: every
    value in ``[lo, hi]`` (integer state indexing a table).
    """
    if name not in arrays:
        raise ValueError(f"array {name!r} is missing")
    a = arrays[name]
    if sp.issparse(a):
        raise ValueError(f"array {name!r} is sparse, expected a dense array")
    a = np.asarray(a)
    if a.dtype.kind not in ("iu" if kind == "i" else "biuf"):
        raise ValueError(f"array {name!r} has dtype {a.dtype}, expected {'integers' if kind == 'i' else 'numbers'}")
    if not _shape_ok(a.shape, shape):
        want = "(" + ", ".join("any" if w is None else str(w) for w in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"array {name!r} has shape {a.shape}, expected {want}")
    a = np.ascontiguousarray(a, dtype=np.int64 if kind == "i" else np.float64)
    if finite and kind == "f" and a.size and not np.isfinite(a).all():
        raise ValueError(f"array {name!r} holds NaN or infinity at position "
                         f"{np.unravel_index(int(np.flatnonzero(~np.isfinite(a.ravel()))[0]), a.shape)}")
    if a.size and lo is not None and a.min() < lo:
        raise ValueError(f"array {name!r} holds {a.min()!r}, below its smallest valid value {lo}")
    if a.size and hi is not None and a.max() > hi:
        raise ValueError(f"array {name!r} holds {a.max()!r}, above its largest valid value {hi}")
    return a


def state_matrix(arrays: dict, name: str, shape: tuple):
    """``arrays[name]``: a dense float array or a CSR matrix of ``shape``, finite, CSR structure checked."""
    a = arrays.get(name)
    if a is None:
        raise ValueError(f"array {name!r} is missing")
    if not sp.issparse(a):
        return state_array(arrays, name, shape)
    if not _shape_ok(a.shape, shape):
        raise ValueError(f"array {name!r} has shape {a.shape}, expected {shape}")
    a = sp.csr_matrix(a)
    try:
        a.check_format(full_check=True)       # indptr monotone, indices within the columns
    except ValueError as exc:
        raise ValueError(f"sparse array {name!r} is malformed: {exc}") from None
    if a.data.size and not np.isfinite(a.data).all():
        raise ValueError(f"sparse array {name!r} holds NaN or infinity")
    return a
