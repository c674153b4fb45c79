"""Row fingerprints: a 64-bit hash of each row's content, the same for a dense and a CSR row.

``row_fingerprints(X, y=None)`` returns ``(h, zeros)``: ``h[i]`` hashes row i's nonzero
``(column, float32 value)`` entries (and its label, when ``y`` is given), and ``zeros[j]`` counts the
zeros of column j — one pass over the block (:mod:`streamrank.io._fingerprint_kernels`).  Values are
taken as float32, as a store keeps them, so a day file's rows and the same rows read back from a store
have the same fingerprints; a negative zero is a zero.  Entry ``(j, x)`` contributes
``f((bits(x) ^ salt_j))``, ``f(z) = m ^ (m >> 32)`` with ``m = z · 0x9E3779B97F4A7C15``, summed over the
row (order-free) and finished with splitmix64's mixer (:func:`mix64`) together with the label's bits.
Not cryptographic: it finds repeated rows and groups (the nightly data checks' ``duplicates``), not an
adversary's collisions.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["row_fingerprints", "mix64"]

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_LABEL_SALT = np.uint64(0x9E3779B97F4A7C15)


def mix64(z):
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = np.asarray(z, dtype=np.uint64)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def column_salts(n):
    """The fixed per-column uint64 salts of the fingerprints (the same in every process)."""
    rng = np.random.default_rng(0x5EED)
    return rng.integers(0, np.iinfo(np.int64).max, size=max(int(n), 1), dtype=np.int64).astype(np.uint64)[:n]


def row_fingerprints(X, y=None):
    """``(h, zeros)`` of a dense (rows, n) array or a CSR matrix; see the module doc."""
    from ._fingerprint_kernels import csr_fingerprints, dense_fingerprints

    n = X.shape[1]
    h = np.zeros(X.shape[0], dtype=np.uint64)
    zeros = np.zeros(n, dtype=np.int64)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        data = np.ascontiguousarray(X.data, dtype=np.float32)
        csr_fingerprints(np.asarray(X.indptr, np.int64), np.asarray(X.indices, np.int64), data,
                         data.view(np.uint32), column_salts(n), zeros, h)
    else:
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        if X32.ndim != 2:
            raise ValueError(f"X must be 2-d (rows, features), got shape {X32.shape}")
        dense_fingerprints(X32, X32.view(np.uint32), column_salts(n), zeros, h)
    with np.errstate(over="ignore"):
        if y is not None:
            yb = np.ascontiguousarray(np.asarray(y, dtype=np.float64) + 0.0).reshape(len(h), -1)
            if yb.shape[0] != len(h):
                raise ValueError(f"y has {yb.shape[0]} rows, X {len(h)}")
            h = mix64(h ^ mix64(yb.view(np.uint64).sum(axis=1, dtype=np.uint64) ^ _LABEL_SALT))
        else:
            h = mix64(h)
    return h, zeros
