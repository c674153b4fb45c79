"""Block sources over in-memory and dask arrays: :func:`as_source`.

``sr.as_source(X, y, qid)`` wraps numpy arrays, scipy.sparse matrices or dask
arrays so that they keep exactly the same ``.blocks()`` contract as a zarr
:class:`~streamrank.GroupStore`.  ``qid=None`` means one global group (object
ranking).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from .._validation import (
    check_finite,
    check_qid,
    check_X,
    check_y,
    group_ptr_from_qid,
    is_dask,
)
from .blocks import BlockSource

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from .._typing import ArrayLike, MatrixLike


__all__ = ["ArraySource", "DaskSource", "as_source"]


class ArraySource(BlockSource):
    """Blocks over in-memory ``X`` (ndarray or CSR), ``y`` and ``qid``.

    ``feature_names`` is None, or the column names of the table it was made from.

    The arrays are validated once (finite, matching lengths, contiguous
    groups); blocks are views (dense) or row slices (CSR), never copies of the
    whole input.
    """

    def __init__(self, X: MatrixLike, y: ArrayLike, qid: ArrayLike | None = None) -> None:
        X = check_X(X, "X")
        n = X.shape[0]
        y = check_y(y, n, "y")
        q = check_qid(qid, n, "qid")
        self._X = X
        self._y = y
        self._gp, self._gq = group_ptr_from_qid(q, "qid")
        self.n_rows = n
        self.n_groups = len(self._gq)
        self.n_features = X.shape[1]
        self.n_outputs = 1 if y.ndim == 1 else y.shape[1]
        self.sparse = sp.issparse(X)
        self.global_group = qid is None
        self.feature_names = None

    def _group_ptr(self):
        return self._gp

    def _group_qid(self, g0, g1):
        return self._gq[g0:g1].copy()

    def _nnz_at(self, rows):
        return self._X.indptr[rows].astype(np.int64) if self.sparse else None

    def _read_rows(self, r0, r1):
        return self._X[r0:r1], self._y[r0:r1]

    def __repr__(self):
        kind = "csr" if self.sparse else "dense"
        return (f"ArraySource({kind}, n_rows={self.n_rows}, n_groups={self.n_groups}, "
                f"n_features={self.n_features}, n_outputs={self.n_outputs})")


class DaskSource(BlockSource):
    """Blocks over dask arrays; each block is computed on demand.

    ``qid`` is read once, chunk by chunk, to find group boundaries (so the
    dask chunking may split groups freely: blocks are cut at group
    boundaries, not at dask chunk boundaries).  Values are checked for NaN/inf
    as each block is computed, naming the global row.
    """

    def __init__(self, X: Any, y: Any, qid: Any = None) -> None:
        import dask.array as da

        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (rows, features), got shape {X.shape}")
        n = X.shape[0]
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError("X has unknown chunk sizes; call X.compute_chunk_sizes() first")
        y = y if is_dask(y) else da.from_array(np.asarray(y))
        if y.shape[0] != n:
            raise ValueError(f"y has {y.shape[0]} rows but X has {n}; lengths must match")
        if X.dtype.kind not in "fiu" or y.dtype.kind not in "fiu":
            raise TypeError(f"X and y must be numeric; got {X.dtype} and {y.dtype}")
        self._X, self._y = X, y
        if qid is None:
            gp, gq = np.asarray([0, n], dtype=np.int64), np.zeros(1, dtype=np.int64)
            if n == 0:
                gp, gq = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
        else:
            q = qid if is_dask(qid) else da.from_array(np.asarray(qid))
            if q.shape[0] != n:
                raise ValueError(f"qid has {q.shape[0]} rows but X has {n}; lengths must match")
            q = check_qid(q.compute(), n, "qid")  # O(rows) int64 ids, read once
            gp, gq = group_ptr_from_qid(q, "qid")
        self._gp, self._gq = gp, gq
        self.n_rows = n
        self.n_groups = len(gq)
        self.n_features = X.shape[1]
        self.n_outputs = 1 if y.ndim == 1 else y.shape[1]
        self.sparse = False
        self.global_group = qid is None

    def _group_ptr(self):
        return self._gp

    def _group_qid(self, g0, g1):
        return self._gq[g0:g1].copy()

    def _read_rows(self, r0, r1):
        import dask

        X, y = dask.compute(self._X[r0:r1], self._y[r0:r1], scheduler="threads")
        if sp.issparse(X):
            X = X.tocsr()
        else:
            X = np.ascontiguousarray(X)
            if X.dtype.kind != "f":
                X = X.astype(np.float64)
        y = np.ascontiguousarray(y, dtype=np.float64)
        check_finite(X, "X", row_offset=r0)
        check_finite(y, "y", row_offset=r0)
        return X, y

    def _read_y(self, r0, r1):
        y = np.ascontiguousarray(self._y[r0:r1].compute(scheduler="threads"), dtype=np.float64)
        check_finite(y, "y", row_offset=r0)
        return y


def table_source(X: Any, y: ArrayLike | str, qid: ArrayLike | str | None = None, *,
                 feature_order: Sequence[str] | None = None) -> ArraySource:
    """An :class:`ArraySource` over a pandas DataFrame / pyarrow Table, with its column names.

    ``y`` and ``qid`` are column names of ``X`` or arrays (:func:`streamrank._tables.split_table`).
    ``feature_order``: the names a fitted model expects; the columns are
    reordered to them (a missing or extra column is an error).
    """
    from .._tables import reorder_by_name, split_table

    Xa, y, qid, names = split_table(X, y, qid)
    if feature_order is not None and names is not None and list(names) != list(feature_order):
        want = [str(f) for f in feature_order]
        Xa = reorder_by_name(Xa, names, want, "X's columns do not match the features the model was fitted with")
        names = want
    src = ArraySource(Xa, y, qid)
    src.feature_names = names
    return src


def as_source(X: MatrixLike | BlockSource | Any, y: ArrayLike | str | None = None,
              qid: ArrayLike | str | None = None) -> BlockSource:
    """Wrap arrays as a block source with the same contract as a GroupStore.

    Parameters
    ----------
    X : ndarray, scipy.sparse matrix, dask array, pandas DataFrame, pyarrow Table,
        or an existing BlockSource.  A table's column names become the source's
        ``feature_names`` (and so the fitted model's ``feature_names_in_``).
    y
        array-like (rows,) or (rows, outputs), or the name of a column of a table ``X``
    qid : array-like (rows,) of query ids (integers, strings or other hashables), the name
        of a column of a table ``X``, or None for one global group

    Examples
    --------
    >>> import numpy as np, streamrank as sr
    >>> src = sr.as_source(np.ones((5, 2)), np.arange(5.0), [1, 1, 2, 2, 2])
    >>> [(b.start, b.n_groups) for b in src.blocks(max_rows=3)]
    [(0, 1), (2, 1)]
    """
    if isinstance(X, BlockSource):
        if y is not None or qid is not None:
            raise TypeError("as_source(source) takes no y or qid")
        return X
    from .._tables import is_table

    if is_table(X):
        return table_source(X, y, qid)
    if y is None:
        raise TypeError("as_source(X, y, qid) needs y (one score per row)")
    if is_dask(X) or is_dask(y) or is_dask(qid):
        import dask.array as da

        X = X if is_dask(X) else da.from_array(X)
        return DaskSource(X, y, qid)
    return ArraySource(X, y, qid)
