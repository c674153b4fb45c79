"""Machinery shared by the SGD rankers: parameter checks, tuple batches, streams.

* :func:`check_tuples` validates a row-aligned tuple batch ``(Q, D_pos, D_neg)``;
* :func:`iter_tuple_steps` streams exactly ``n_steps`` tuples from anything
  with ``.batches(batch_size=, shuffle_buffer=, random_state=)``, making
  further passes (pass p uses seed ``random_state + p``) when the source holds
  fewer tuples, so that the same call replays the same tuple order.

The paper's test error lives in :func:`streamrank.metrics.tuple_error`.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from .._validation import check_X

__all__ = [
    "check_eta0",
    "check_nonneg",
    "check_int",
    "check_choice",
    "check_tuples",
    "iter_tuple_steps",
    "kernel_csr",
    "kernel_dense_pair",
]


def check_eta0(eta0, name: str = "eta0") -> float:
    if isinstance(eta0, bool) or not isinstance(eta0, numbers.Real):
        raise TypeError(f"{name} must be a number > 0, got {eta0!r}")
    eta0 = float(eta0)
    if not np.isfinite(eta0) or eta0 <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {eta0!r}")
    return eta0


def check_nonneg(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number >= 0, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def check_int(value, name: str, minimum: int = 1, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_choice(value, name: str, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def _as_csr(X, name: str, n_features: int | None):
    return _canonical_csr(check_X(X, name, n_features=n_features))


def _canonical_csr(X):
    """CSR with sorted, summed indices of an array already through ``check_X``."""
    if not sp.issparse(X):
        X = sp.csr_matrix(X)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X


def kernel_csr(X):
    """``(indptr, indices, data)`` of a checked CSR as the kernels take them: int64, int64, float64.

    Every array C-contiguous and writeable (a copy only when the dtype or a
    read-only flag asks for one: O(nnz) per batch).  numba compiles one
    machine-code variant per combination of dtypes and read-only flags of its
    nine CSR arguments (Q, D+, D-), and each variant of ``sgd_steps`` took
    20-146 s to compile under load; with this one variant serves float32,
    float64, integer and read-only input alike.  Exact: the SGD kernels read
    every value through ``np.float64(x)`` and every index as an integer, so the
    float64 / int64 copies give the same steps bit for bit.
    """
    return (np.require(X.indptr, np.int64, ["C", "W"]), np.require(X.indices, np.int64, ["C", "W"]),
            np.require(X.data, np.float64, ["C", "W"]))


def kernel_dense_pair(Xp, Xn):
    """Dense row-aligned (Xp, Xn) of ``check_X`` as the dense kernels take them: one float dtype, writeable.

    float32 pairs stay float32 (no doubled copy of a store's block), a mixed
    pair becomes float64, read-only arrays a writeable copy: two compiled
    variants instead of one per dtype/read-only combination.  Exact: the
    kernels read ``float64(x)``.
    """
    dtype = Xp.dtype if Xp.dtype == Xn.dtype else np.float64
    return np.require(Xp, dtype, ["C", "W"]), np.require(Xn, dtype, ["C", "W"])


def check_tuples(Q, D_pos, D_neg, n_query_features=None, n_item_features=None):
    """Validate a tuple batch: three CSR (or dense) matrices with the same rows.

    Raises ``ValueError`` naming the argument when the row counts differ, the
    batch is empty, a value is NaN/inf (with the row), or the feature counts
    differ from ``n_query_features`` / ``n_item_features`` (when given).
    """
    if Q is None or D_pos is None or D_neg is None:
        raise TypeError("Q, D_pos and D_neg are all required (row-aligned tuples)")
    Q = _as_csr(Q, "Q", n_query_features)
    D_pos = _as_csr(D_pos, "D_pos", n_item_features)
    D_neg = _as_csr(D_neg, "D_neg", n_item_features if n_item_features is not None else D_pos.shape[1])
    n = Q.shape[0]
    for name, M in (("D_pos", D_pos), ("D_neg", D_neg)):
        if M.shape[0] != n:
            raise ValueError(
                f"{name} has {M.shape[0]} rows but Q has {n}; tuples are row-aligned "
                "(row r of Q, D_pos and D_neg form tuple r)")
    if n == 0:
        raise ValueError("empty batch: Q, D_pos and D_neg have 0 rows; at least one tuple is needed")
    return Q, D_pos, D_neg


def iter_tuple_steps(source, n_steps: int, *, batch_size: int, shuffle_buffer: int, random_state):
    """Yield ``(Q, D_pos, D_neg)`` batches holding exactly ``n_steps`` tuples in total."""
    if not hasattr(source, "batches"):
        raise TypeError(
            f"tuple_source must have a .batches() method (a TupleStore or an in-memory tuple "
            f"source); got {type(source).__name__}")
    seed0 = 0 if random_state is None else int(random_state)
    done = 0
    p = 0
    while done < n_steps:
        got = 0
        for batch in source.batches(batch_size=batch_size, shuffle_buffer=shuffle_buffer,
                                    random_state=seed0 + p):
            Q, Dp, Dn = batch.Q, batch.D_pos, batch.D_neg
            n = Q.shape[0]
            if n == 0:
                continue
            take = min(n, n_steps - done)
            if take < n:
                Q, Dp, Dn = Q[:take], Dp[:take], Dn[:take]
            got += take
            done += take
            yield Q, Dp, Dn
            if done >= n_steps:
                return
        if got == 0:
            raise ValueError("tuple_source yielded no tuples; nothing to learn from")
        p += 1
