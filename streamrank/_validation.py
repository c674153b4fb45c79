"""Input validation shared by every entry point.

Every check raises an error that names the argument, the row (where there is
one) and what was expected, so that a nightly job that receives bad data fails
with a message a person can act on instead of a crash inside numba or a model
full of NaN.
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.sparse as sp


__all__ = [
    "check_X",
    "check_y",
    "check_qid",
    "check_finite",
    "check_alpha",
    "check_n_features",
    "group_ptr_from_qid",
    "is_dask",
]


def is_dask(a) -> bool:
    """True for a dask array (without importing dask when it is not loaded)."""
    mod = type(a).__module__
    return mod.startswith("dask.") and hasattr(a, "chunks")


def _first_bad_row(a: np.ndarray) -> int | None:
    bad = ~np.isfinite(a)
    if a.ndim > 1:
        bad = bad.reshape(a.shape[0], -1).any(axis=1)
    idx = np.flatnonzero(bad)
    return int(idx[0]) if idx.size else None


def check_finite(a, name: str, *, row_offset: int = 0) -> None:
    """Raise ``ValueError`` naming the first row of ``a`` that holds NaN or ±inf.

    ``a`` is a dense array or a CSR matrix; ``row_offset`` is added to the row
    number in the message (for blocks of a larger stream).
    """
    if sp.issparse(a):
        data = a.data
        if data.size and not np.isfinite(data).all():
            k = int(np.flatnonzero(~np.isfinite(data))[0])
            row = int(np.searchsorted(a.indptr, k, side="right") - 1)
            raise ValueError(
                f"{name} contains NaN or infinity at row {row + row_offset} "
                f"(column {int(a.indices[k])}); expected finite values"
            )
        return
    if a.dtype.kind not in "fc":
        return
    if a.size and not np.isfinite(a).all():
        row = _first_bad_row(a)
        raise ValueError(
            f"{name} contains NaN or infinity at row {row + row_offset}; "
            "expected finite values"
        )


def _as_numeric(a, name: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind in "OUSV" or a.dtype.kind == "M" or a.dtype.kind == "m":
        raise TypeError(
            f"{name} has dtype {a.dtype}; expected a numeric (int, unsigned, float) array"
        )
    if a.dtype.kind == "c":
        raise TypeError(f"{name} is complex ({a.dtype}); expected real numbers")
    return a


def check_X(
    X,
    name: str = "X",
    *,
    allow_sparse: bool = True,
    dtype=(np.float64, np.float32),
    finite: bool = True,
    min_rows: int = 0,
    n_features: int | None = None,
):
    """Validate a feature matrix: 2-D, numeric, finite; CSR for sparse input.

    Dense float32/float64 input is kept as it is (no copy when it is already
    C-contiguous); integers are cast to float64.  Other scipy sparse formats
    are converted to CSR.  ``n_features`` checks the number of columns.
    """
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    if sp.issparse(X):
        if not allow_sparse:
            raise TypeError(f"{name} is a scipy.sparse matrix; this entry point needs a dense array")
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {X.shape}")
        if X.format != "csr":
            X = X.tocsr()
        if X.dtype.kind not in "fiub":
            raise TypeError(f"{name} has dtype {X.dtype}; expected numbers")
        if X.dtype not in dtypes:
            X = X.astype(dtypes[0])
        if not X.has_sorted_indices:
            X = X.copy()
            X.sort_indices()
        if X.nnz > np.iinfo(np.int64).max:
            raise ValueError(f"{name} has too many nonzeros")
        if X.indptr.dtype != np.int64 and X.nnz >= np.iinfo(np.int32).max:
            X.indptr = X.indptr.astype(np.int64)
    else:
        X = _as_numeric(X, name)
        if X.ndim == 1:
            raise ValueError(
                f"{name} must be 2-D (rows, features), got a 1-D array of length {X.shape[0]}; "
                "reshape with X.reshape(-1, 1) for one feature"
            )
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D (rows, features), got shape {X.shape}")
        if X.dtype not in dtypes:
            X = X.astype(dtypes[0])
        X = np.ascontiguousarray(X)
    if finite:
        check_finite(X, name)
    if X.shape[0] < min_rows:
        raise ValueError(f"{name} has {X.shape[0]} rows; at least {min_rows} needed")
    if X.shape[1] == 0:  # nothing to learn from (scikit-learn's wording)
        raise ValueError(f"{name} has 0 feature(s) (shape={X.shape}) while a minimum of 1 is required.")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features, but {n_features} were expected "
            "(the number the model or store was created with)"
        )
    return X


def check_y(y, n_rows: int, name: str = "y", *, n_outputs: int | None = None) -> np.ndarray:
    """Validate targets: float64, shape (rows,) or (rows, v), finite, matching rows."""
    y = _as_numeric(y, name)
    if y.ndim == 0 or y.ndim > 2:
        raise ValueError(f"{name} must have shape (rows,) or (rows, outputs); got shape {y.shape}")
    if y.shape[0] != n_rows:
        raise ValueError(f"{name} has {y.shape[0]} rows but X has {n_rows}; lengths must match")
    y = np.ascontiguousarray(y, dtype=np.float64)
    check_finite(y, name)
    if n_outputs is not None:
        got = 1 if y.ndim == 1 else y.shape[1]
        if got != n_outputs:
            raise ValueError(f"{name} has {got} output column(s); {n_outputs} expected")
    return y


def check_qid(qid, n_rows: int, name: str = "qid") -> np.ndarray:
    """Validate query ids: one per row, integers (int64 out) or strings/other hashables (object out).

    ``None`` means one global group (all zeros).  See :mod:`streamrank._qid`
    for what is accepted and how non-integer ids are keyed.
    """
    if qid is None:
        return np.zeros(n_rows, dtype=np.int64)
    from ._qid import as_qid_array

    return as_qid_array(qid, n_rows, name)


def group_ptr_from_qid(qid: np.ndarray, name: str = "qid", *, row_offset: int = 0):
    """Group boundaries of contiguous runs of equal ids.

    Returns ``(group_ptr, group_qid)`` with ``group_ptr`` int64 of length
    groups + 1 and ``group_qid`` the id of each group (int64, or the original
    objects for string ids).  Raises ``ValueError`` when an id appears in two
    separate runs (the rows of a query must be contiguous), naming the row
    where it reappears.
    """
    from ._qid import qid_repr

    qid = np.asarray(qid)
    n = qid.shape[0]
    if n == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    integer = qid.dtype.kind in "iuf"
    change = np.flatnonzero(np.asarray(qid[1:] != qid[:-1], dtype=bool)) + 1
    starts = np.concatenate(([0], change)).astype(np.int64)
    group_qid = qid[starts].astype(np.int64) if integer else qid[starts]
    if group_qid.size > 1:
        if integer:
            order = np.argsort(group_qid, kind="stable")
            sorted_ids = group_qid[order]
            dup = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
            second = int(order[dup + 1].min()) if dup.size else None
        else:  # exact on the original ids (no hashing): the first run whose id was seen before
            seen: set = set()
            second = None
            for g, v in enumerate(group_qid.tolist()):
                if v in seen:
                    second = g
                    break
                seen.add(v)
        if second is not None:
            g = second
            bad_id = group_qid[g]
            first = int(starts[next(i for i in range(g) if group_qid[i] == bad_id)])
            raise ValueError(
                f"{name} is not contiguous: id {qid_repr(bad_id)} appears at row {first + row_offset} and "
                f"again at row {int(starts[g]) + row_offset} after other ids; the rows of a query must be "
                "contiguous (sort by qid with a stable sort first)"
            )
    group_ptr = np.concatenate((starts, [n])).astype(np.int64)
    return group_ptr, group_qid


def check_alpha(alpha, name: str = "alpha") -> float:
    """Regularization parameter: a finite number > 0."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"{name} must be a positive number, got {alpha!r}")
    alpha = float(alpha)
    if not np.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {alpha!r}")
    return alpha


def check_n_features(estimator, n_features: int, *, reset: bool) -> None:
    """scikit-learn's convention: ``fit`` records ``n_features_in_``; later calls must match."""
    if reset:
        estimator.n_features_in_ = int(n_features)
        return
    expected = getattr(estimator, "n_features_in_", None)
    if expected is not None and expected != n_features:
        raise ValueError(
            f"X has {n_features} features, but {type(estimator).__name__} was fitted with "
            f"{expected} features"
        )


def warn_once(message: str, category=UserWarning, stacklevel: int = 3) -> None:
    warnings.warn(message, category, stacklevel=stacklevel)
