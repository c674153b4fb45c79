"""Tuple sources: (query, preferred item, other item) triples for the SGD rankers, and in-memory ones.

:class:`TupleSource` is what the bilinear ranker reads:
:meth:`TupleSource.batches` yields :class:`TupleBatch` objects whose ``Q``,
``D_pos``, ``D_neg`` are row-aligned CSR matrices.  Shuffling goes through a
bounded buffer: tuples are read chunk by chunk (chunks in a random order), a
buffer of ``shuffle_buffer`` tuples is kept, and each emitted batch takes
``batch_size`` uniformly chosen buffer slots which are refilled from the
stream.  Memory is O(shuffle_buffer + chunk) tuples whatever the number of
tuples.  Every tuple is emitted exactly once per pass; the same
``random_state`` gives the same batches.

:class:`ArrayTupleSource` (:func:`as_tuple_source`) holds ``Q``, ``D`` and
``tuples`` in memory; the on-disk :class:`~streamrank.TupleStore`
(:mod:`streamrank.io.tuple_store`) is the other implementation.

Examples
--------
>>> import numpy as np
>>> src = as_tuple_source(np.eye(2), np.eye(3), [[0, 1, 2], [1, 0, 2]])
>>> src
ArrayTupleSource(n_tuples=2, n_query_features=2, n_item_features=3)
>>> [b.tuples.tolist() for b in src.batches(batch_size=1, shuffle_buffer=0)]
[[[0, 1, 2]], [[1, 0, 2]]]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import numpy as np
import scipy.sparse as sp

from .._validation import check_finite
from ._row_cache import _check_cache_bytes
from .group_store import _positive_int

if TYPE_CHECKING:
    from .._typing import ArrayLike, MatrixLike, Seed


__all__ = ["TupleBatch", "TupleSource", "ArrayTupleSource", "as_tuple_source"]

_TUPLE_CHUNK = 1 << 17   # tuples per chunk: 131072 x 3 x 8 B = 3 MiB
_CACHE_BYTES = 64 << 20  # default byte budget of the row cache of TupleStore.batches / take


@dataclass(frozen=True, eq=False)
class TupleBatch:
    """A batch of (query, preferred item, other item) tuples, row-aligned.

    Attributes
    ----------
    Q : csr_matrix (k, n_query_features)
        Query vector of each tuple.
    D_pos, D_neg : csr_matrix (k, n_item_features)
        Preferred and less preferred item of each tuple.
    magnitude
        float64 ndarray (k,)
    tuples : int64 ndarray (k, 3)
        The (query row, preferred row, other row) indices.
    index : int64 ndarray (k,)
        Global position of each tuple in its source.
    """

    Q: sp.csr_matrix
    D_pos: sp.csr_matrix
    D_neg: sp.csr_matrix
    magnitude: np.ndarray
    tuples: np.ndarray
    index: np.ndarray

    def __len__(self):
        return len(self.index)


def _check_csr(M, name, n_features):
    if M is None:
        return sp.csr_matrix((0, n_features), dtype=np.float32)
    if not sp.issparse(M):
        M = np.asarray(M)
        if M.dtype.kind not in "biuf":
            raise TypeError(f"{name} has dtype {M.dtype}; expected numbers")
        if M.ndim != 2:
            raise ValueError(f"{name} must be 2-D (rows, features), got shape {M.shape}")
    M = sp.csr_matrix(M)
    if M.dtype.kind not in "biuf":
        raise TypeError(f"{name} has dtype {M.dtype}; expected numbers")
    if M.shape[1] != n_features:
        raise ValueError(f"{name} has {M.shape[1]} features, but {n_features} were expected "
                         "(the number the store was created with)")
    if not M.has_canonical_format:  # never modify the caller's matrix in place
        M = M.copy()
        M.sum_duplicates()
    check_finite(M, name)
    data = M.data
    if data.dtype != np.float32:
        if data.dtype.kind == "f" and data.size and np.abs(data).max() > np.finfo(np.float32).max:
            k = int(np.flatnonzero(np.abs(data) > np.finfo(np.float32).max)[0])
            row = int(np.searchsorted(M.indptr, k, side="right") - 1)
            raise ValueError(f"{name} row {row} holds a value outside the float32 range")
        M = sp.csr_matrix((data.astype(np.float32), M.indices, M.indptr), shape=M.shape)
    return M


def _check_tuples(tuples, name="tuples"):
    t = np.asarray(tuples)
    if t.dtype.kind not in "iu" and not (t.dtype.kind == "f" and t.size == 0):
        if t.dtype.kind == "f" and np.all(t == np.round(t)) and np.isfinite(t).all():
            pass
        else:
            raise TypeError(f"{name} has dtype {t.dtype}; expected integer row indices")
    if t.ndim != 2 or t.shape[1] != 3:
        raise ValueError(f"{name} must have shape (l, 3) = (query row, preferred item row, "
                         f"other item row); got shape {t.shape}")
    return np.ascontiguousarray(t, dtype=np.int64)


def _check_ranges(t, n_q, n_d, name="tuples"):
    for col, n, what in ((0, n_q, "query row (Q)"), (1, n_d, "preferred item row (D)"),
                         (2, n_d, "other item row (D)")):
        c = t[:, col]
        bad = (c < 0) | (c >= n)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name} row {r} column {col} = {int(c[r])} is not a valid {what} "
                             f"index; expected 0 <= index < {n}")


def _check_magnitudes(m, l_, name="magnitudes"):
    if m is None:
        return np.ones(l_, dtype=np.float64)
    m = np.asarray(m)
    if m.dtype.kind not in "biuf":
        raise TypeError(f"{name} has dtype {m.dtype}; expected numbers")
    m = np.ascontiguousarray(m, dtype=np.float64)
    if m.shape != (l_,):
        raise ValueError(f"{name} must have shape ({l_},) (one per tuple); got {m.shape}")
    check_finite(m, name)
    return m


class TupleSource:
    """Base class of tuple sources: :meth:`batches` over ``_read_tuples``.

    Subclasses set ``n_tuples``, ``n_query_features``, ``n_item_features``
    and implement :meth:`_read_tuples`, :meth:`_matrices` and
    :meth:`_chunk_size`.
    """

    n_tuples: int
    n_query_features: int
    n_item_features: int

    def _read_tuples(self, t0: int, t1: int):
        """``(tuples (k, 3) int64, magnitude (k,) float64)`` of tuples t0:t1."""
        raise NotImplementedError

    def _matrices(self):
        """``(Q, D)`` as CSR matrices."""
        raise NotImplementedError

    def _chunk_size(self) -> int:
        return _TUPLE_CHUNK

    @classmethod
    def from_arrays(cls, Q: MatrixLike | None, D: MatrixLike | None, tuples: ArrayLike,
                    magnitudes: ArrayLike | None = None) -> "ArrayTupleSource":
        """An in-memory tuple source with the same :meth:`batches` contract."""
        return ArrayTupleSource(Q, D, tuples, magnitudes)

    def __len__(self):
        return self.n_tuples

    # ---------------------------------------------------------- public reads
    def read_tuples(self, t0: int = 0, t1: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(tuples (k, 3) int64, magnitude (k,) float64)`` of tuples t0:t1 in file order."""
        t0, t1 = self._range(t0, t1)
        return self._read_tuples(t0, t1)

    def matrices(self) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        """``(Q, D)``: all query and item vectors as CSR (a store reads them once and caches them)."""
        return self._matrices()

    def take(self, t0: int = 0, t1: int | None = None, *, cache_bytes: int = _CACHE_BYTES,
             ) -> "TupleBatch":
        """Tuples t0:t1 in file order as one :class:`TupleBatch` (e.g. a validation slice).

        ``cache_bytes`` bounds the row cache as in :meth:`batches`.
        """
        t0, t1 = self._range(t0, t1)
        Q, D = self._row_readers(_check_cache_bytes(cache_bytes))
        tup, mag = self._read_tuples(t0, t1)
        return _make_batch(Q, D, tup, mag, np.arange(t0, t1, dtype=np.int64))

    def _row_readers(self, cache_bytes: int):
        """``(Q, D)``: objects indexed by an int row array giving CSR rows (``M[rows]``).

        In-memory sources return their matrices; a store may return readers
        that fetch only the requested rows (:class:`RowCache`).
        """
        return self._matrices()

    def _range(self, t0, t1):
        n = self.n_tuples
        t1 = n if t1 is None else int(t1)
        t0 = int(t0)
        if not 0 <= t0 <= t1 <= n:
            raise IndexError(f"tuple range {t0}:{t1} is outside 0:{n}")
        return t0, t1

    def batches(self, batch_size: int = 1024, shuffle_buffer: int = 100_000, random_state: Seed = 0,
                *, cache_bytes: int = _CACHE_BYTES) -> Iterator[TupleBatch]:
        """Yield :class:`TupleBatch` objects covering every tuple exactly once.

        Parameters
        ----------
        batch_size : int
            Tuples per batch (the last one may be smaller).
        shuffle_buffer : int
            Size of the shuffle buffer; 0 keeps file order.  With a buffer the
            read chunks are visited in a random order as well.
        random_state : None, int or numpy Generator
            Seed: the same seed gives the same batches.
        cache_bytes : int, default 64 MiB
            Byte budget of the cache of decoded ``Q`` / ``D`` rows of a
            :class:`TupleStore`: the bytes it holds never exceed it, whatever
            the number of stored vectors.  ``Q`` and ``D`` smaller than the
            budget together are read whole once (fast path).  The batches do
            not depend on it.  In-memory sources ignore it.
        """
        batch_size = _positive_int(batch_size, "batch_size")
        cache_bytes = _check_cache_bytes(cache_bytes)
        if isinstance(shuffle_buffer, bool) or int(shuffle_buffer) < 0:
            raise ValueError(f"shuffle_buffer must be an integer >= 0, got {shuffle_buffer!r}")
        shuffle_buffer = int(shuffle_buffer)
        Q, D = self._row_readers(cache_bytes)
        n = self.n_tuples
        chunk = max(self._chunk_size(), batch_size)
        starts = np.arange(0, n, chunk, dtype=np.int64)
        if shuffle_buffer == 0:
            # file order; batches are full-size except the last (a read chunk's
            # remainder is carried over into the next chunk)
            carry_t = np.zeros((0, 3), dtype=np.int64)
            carry_m = np.zeros(0, dtype=np.float64)
            for t0 in starts:
                t1 = min(int(t0) + chunk, n)
                tup, mag = self._read_tuples(int(t0), t1)
                tup, mag = np.concatenate((carry_t, tup)), np.concatenate((carry_m, mag))
                first = int(t0) - len(carry_t)
                full = (len(tup) // batch_size) * batch_size
                for a in range(0, full, batch_size):
                    b = a + batch_size
                    yield _make_batch(Q, D, tup[a:b], mag[a:b], np.arange(first + a, first + b))
                carry_t, carry_m = tup[full:], mag[full:]
            if len(carry_t):
                yield _make_batch(Q, D, carry_t, carry_m, np.arange(n - len(carry_t), n))
            return
        rng = np.random.default_rng(random_state)
        starts = starts[rng.permutation(len(starts))]
        cap = max(shuffle_buffer, batch_size)
        buf_t = np.empty((cap, 3), dtype=np.int64)
        buf_m = np.empty(cap, dtype=np.float64)
        buf_i = np.empty(cap, dtype=np.int64)
        fill = 0
        for t0 in starts:
            t1 = min(int(t0) + chunk, n)
            tup, mag = self._read_tuples(int(t0), t1)
            idx = np.arange(t0, t1, dtype=np.int64)
            pos = 0
            while pos < len(idx):
                take = min(cap - fill, len(idx) - pos)
                buf_t[fill : fill + take] = tup[pos : pos + take]
                buf_m[fill : fill + take] = mag[pos : pos + take]
                buf_i[fill : fill + take] = idx[pos : pos + take]
                fill += take
                pos += take
                if fill == cap:
                    # emit batch_size uniformly chosen slots; the survivors close ranks
                    sel = np.sort(rng.choice(fill, size=batch_size, replace=False))
                    yield _make_batch(Q, D, buf_t[sel], buf_m[sel], buf_i[sel])
                    keep = np.ones(fill, dtype=bool)
                    keep[sel] = False
                    rest = np.flatnonzero(keep)
                    buf_t[: len(rest)] = buf_t[rest]
                    buf_m[: len(rest)] = buf_m[rest]
                    buf_i[: len(rest)] = buf_i[rest]
                    fill = len(rest)
        order = rng.permutation(fill)
        for a in range(0, fill, batch_size):
            sel = order[a : a + batch_size]
            yield _make_batch(Q, D, buf_t[sel], buf_m[sel], buf_i[sel])

    def __iter__(self):
        return self.batches()


def _make_batch(Q, D, tup, mag, idx) -> TupleBatch:
    tup = np.ascontiguousarray(tup)
    return TupleBatch(Q=Q[tup[:, 0]], D_pos=D[tup[:, 1]], D_neg=D[tup[:, 2]],
                      magnitude=np.ascontiguousarray(mag, dtype=np.float64), tuples=tup,
                      index=np.ascontiguousarray(idx))


class ArrayTupleSource(TupleSource):
    """Tuples over in-memory ``Q``, ``D`` (CSR or dense) and ``tuples`` arrays."""

    def __init__(self, Q: MatrixLike | None, D: MatrixLike | None, tuples: ArrayLike,
                 magnitudes: ArrayLike | None = None) -> None:
        Q = _check_csr(Q, "Q", Q.shape[1])
        D = _check_csr(D, "D", D.shape[1])
        t = _check_tuples(tuples)
        _check_ranges(t, Q.shape[0], D.shape[0])
        self._Q, self._D, self._t = Q, D, t
        self._m = _check_magnitudes(magnitudes, len(t))
        self.n_tuples = len(t)
        self.n_query_features = Q.shape[1]
        self.n_item_features = D.shape[1]

    def _read_tuples(self, t0, t1):
        return self._t[t0:t1], self._m[t0:t1]

    def _matrices(self):
        return self._Q, self._D

    def __repr__(self):
        return (f"ArrayTupleSource(n_tuples={self.n_tuples}, n_query_features={self.n_query_features}, "
                f"n_item_features={self.n_item_features})")


def as_tuple_source(Q: TupleSource | MatrixLike | None, D: MatrixLike | None = None, tuples: ArrayLike | None = None,
                    magnitudes: ArrayLike | None = None) -> TupleSource:
    """A :class:`TupleSource` from arrays — or the source itself when given one."""
    if isinstance(Q, TupleSource):
        if D is not None or tuples is not None:
            raise TypeError("as_tuple_source(source) takes no D or tuples")
        return Q
    if D is None or tuples is None:
        raise TypeError("as_tuple_source(Q, D, tuples) needs Q, D and tuples")
    return ArrayTupleSource(Q, D, tuples, magnitudes)
