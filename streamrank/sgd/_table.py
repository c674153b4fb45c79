"""Python owner of the row-pool W and its shrinkage state (see ``_sparse_w_kernels``).

:class:`SparseW` holds the arrays the kernels work on: ``meta`` (one
``(start, length, capacity, stamp)`` record per row of W) and the pool
``pc`` (int32 columns) / ``pv`` (float64 values).  It makes room in the pool
when the kernel asks for it, repacks the pool so that its size stays
proportional to the entries stored (memory ∝ nnz(W) plus 32 bytes a row),
and turns the rows into a CSR matrix.  All the state that must survive
``partial_fit`` calls and save/load lives here: the rows, the step counter
``t``, the sweep counter ``K``, the running threshold sums ``S[0..K]`` and the
eta accumulated since the last sweep.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._memory import physical_memory
from .._state_checks import state_array, state_int
from . import _sparse_w_kernels as K_
from ._base import kernel_csr

__all__ = ["SparseW", "MemoryLimitError", "POOL_ENTRY_BYTES"]

POOL_ENTRY_BYTES = 12  # an int32 column and a float64 value per pool entry


class MemoryLimitError(MemoryError):
    """W would outgrow its memory bound (``SparseSGDRanker(max_memory_bytes=...)``)."""

MIN_POOL = 64
POOL_GROWTH = 2  # after a repack the pool holds this many times what the rows take (amortised O(1))
S_REBASE = 1 << 19  # flush and restart the sweep counter after this many sweeps (bounded S)
MAX_COLS = np.iinfo(np.int32).max  # columns are stored as int32
#: bytes per row of W that :meth:`SparseW.from_state` allocates (meta, stamps, bounds, indptr, counts)
ROW_TABLE_BYTES = 8 * 8


class SparseW:
    """W of shape ``(n_rows, n_cols)`` as rows in one pool, plus the cumulative-L1 state."""

    def __init__(self, n_rows: int, n_cols: int, capacity: int = MIN_POOL):
        self.n_rows = int(n_rows)
        self.n_cols = int(n_cols)
        if self.n_cols > MAX_COLS:
            raise ValueError(
                f"W has {self.n_cols} item features; at most 2**31 - 1 are supported "
                "(hash the features into fewer dimensions)")
        self.meta = np.zeros((self.n_rows, 4), dtype=np.int64)
        P = max(MIN_POOL, int(capacity))
        self.pc = np.zeros(P, dtype=np.int32)
        self.pv = np.zeros(P, dtype=np.float64)
        self.S = np.zeros(64, dtype=np.float64)
        self.istate = np.zeros(K_.N_ISTATE, dtype=np.int64)
        self.fstate = np.zeros(1, dtype=np.float64)
        self.free = K_.empty_free_lists()  # released segments by size class (kernels' _alloc)
        self.max_bytes = None  # bound on nbytes a repack may grow the pool to (None: none)

    # ---------------------------------------------------------------- sizes
    @property
    def capacity(self) -> int:
        """Entries the pool can hold."""
        return int(self.pc.shape[0])

    @property
    def count(self) -> int:
        """Entries stored (nonzero, or zero only once the pending shrinkage is applied)."""
        return int(self.istate[K_.I_COUNT])

    @property
    def nbytes(self) -> int:
        return int(self.pc.nbytes + self.pv.nbytes + self.meta.nbytes + 8 * (int(self.istate[K_.I_K]) + 1))

    def workspace(self):
        """(dense, slot, mask): fresh all-zero buffers for ``sgd_steps`` to scatter delta into.

        ``dense`` and ``slot`` hold a value and a position per column, ``mask``
        a bit per column.  New ones per call, never cached on the model
        (``score`` allocates its own ``dense`` the same way, so it may run in
        several threads on one model).
        """
        return (np.zeros(self.n_cols, dtype=np.float64), np.zeros(self.n_cols, dtype=np.int64),
                np.zeros(self.n_cols // 64 + 1, dtype=np.uint64))

    # --------------------------------------------------------- pool upkeep
    def _repack(self, size: int, tight: bool) -> None:
        try:
            pc = np.empty(size, dtype=np.int32)  # never read beyond what is written
            pv = np.empty(size, dtype=np.float64)
        except MemoryError:
            raise MemoryLimitError(
                f"W's pool of {size} entries ({size * POOL_ENTRY_BYTES / 2**20:.0f} MiB) could not be "
                f"allocated at step {int(self.istate[K_.I_T])} ({self.count} entries stored); set "
                "max_memory_bytes below the memory available, or raise l1 for a sparser W") from None
        self.istate[K_.I_USED] = K_.repack(self.meta, self.pc, self.pv, pc, pv, tight)
        self.istate[K_.I_GARBAGE] = 0
        self.free = K_.empty_free_lists()
        self.pc, self.pv = pc, pv

    def repack(self, extra: int = 0) -> None:
        """Copy the rows into a fresh pool, each row in a power-of-two segment.

        The new pool holds ``POOL_GROWTH`` times what the rows take (and at
        least ``extra`` more, and never less than now): the segments abandoned
        by growing rows fill it before the next repack, so a repack is O(1)
        amortised per entry.  ``fit_capacity`` gives memory back.
        """
        packed = int(K_.packed_size(self.meta, False))
        size = max(MIN_POOL, POOL_GROWTH * packed, packed + int(extra), self.capacity)
        if self.max_bytes is not None and size > self.capacity:
            # grow less than POOL_GROWTH if that stays within the bound; refuse what cannot
            fixed = self.nbytes - self.capacity * POOL_ENTRY_BYTES
            room = max(0, (int(self.max_bytes) - fixed) // POOL_ENTRY_BYTES)
            if packed + int(extra) > room:
                raise MemoryLimitError(
                    f"W would need {(fixed + (packed + int(extra)) * POOL_ENTRY_BYTES) / 2**20:.1f} MiB "
                    f"({self.count} entries stored at step {int(self.istate[K_.I_T])}), more than "
                    f"max_memory_bytes={int(self.max_bytes)}; raise l1 (a sparser W) or max_memory_bytes. "
                    "The model holds the steps before this one")
            size = max(self.capacity, min(size, room))
        self._repack(size, False)

    def shrink(self) -> None:
        """Repack into a pool of ``POOL_GROWTH`` times what the rows take (gives memory back)."""
        packed = int(K_.packed_size(self.meta, False))
        self._repack(max(MIN_POOL, POOL_GROWTH * packed), False)

    def make_room(self, extra: int | None = None) -> None:
        """Room at the end of the pool for ``extra`` more entries (repacking, and growing if need be).

        ``None``: what the kernel asked for when it returned early (``I_NEED``).
        """
        if extra is None:
            extra = int(self.istate[K_.I_NEED])
        if int(self.istate[K_.I_USED]) + extra > self.capacity:
            self.repack(extra)

    def fit_capacity(self, tight: bool = False) -> None:
        """Repack when the pool has become mostly empty or wasted (memory ∝ nnz).

        ``tight``: repack into a pool of exactly the stored entries.
        """
        if tight:
            self._repack(max(MIN_POOL, int(K_.packed_size(self.meta, True))), True)
        elif self.capacity > 2 * POOL_GROWTH * max(int(K_.packed_size(self.meta, False)), MIN_POOL):
            self.shrink()  # more than twice what a repack allots

    def reserve_sweeps(self, n_steps: int, T: int) -> None:
        """Room in ``S`` for the sweeps of ``n_steps`` more steps."""
        k = int(self.istate[K_.I_K])
        need = k + n_steps // T + 2
        if need > self.S.shape[0]:
            S = np.zeros(max(need, 2 * self.S.shape[0]), dtype=np.float64)
            S[: k + 1] = self.S[: k + 1]
            self.S = S

    # ------------------------------------------------------------- shrinkage
    def flush(self) -> None:
        """Apply every pending shrinkage and remove the zeros (exactly equivalent)."""
        k = int(self.istate[K_.I_K])
        removed = K_.flush_rows(self.meta, self.pc, self.pv, self.S, k)
        self.istate[K_.I_COUNT] -= removed
        self.istate[K_.I_FLUSHED] = self.istate[K_.I_COUNT]

    def rebase(self) -> None:
        """Flush and restart the sweep counter at 0 (bounded ``S``)."""
        self.flush()
        self.meta[:, K_.M_STAMP] = 0
        self.istate[K_.I_K] = 0
        self.S = np.zeros(max(64, self.S.shape[0]), dtype=np.float64)

    def maybe_rebase(self) -> None:
        if int(self.istate[K_.I_K]) >= S_REBASE:
            self.rebase()

    # ------------------------------------------------------------ conversion
    def _rebuild(self, W: sp.csr_matrix, stamps: np.ndarray) -> None:
        """Replace every row by the rows of the CSR ``W`` (no explicit zeros), stamps per row."""
        P = max(MIN_POOL, int(K_.capacity_total(np.diff(W.indptr))))
        self.pc = np.zeros(P, dtype=np.int32)
        self.pv = np.zeros(P, dtype=np.float64)
        self.istate[K_.I_USED] = K_.set_rows(self.meta, self.pc, self.pv, W.indptr.astype(np.int64),
                                             W.indices.astype(np.int32), W.data.astype(np.float64),
                                             np.asarray(stamps, dtype=np.int64))
        self.istate[K_.I_GARBAGE] = 0
        self.free = K_.empty_free_lists()
        self.istate[K_.I_COUNT] = W.indptr[-1]
        self.istate[K_.I_FLUSHED] = W.indptr[-1]

    def set_entries(self, rows, cols, values) -> None:
        """``W[rows[n], cols[n]] = values[n]`` (zeros skipped); every entry is brought up to date."""
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        keep = values != 0
        new = sp.csr_matrix((values[keep], (rows[keep], cols[keep])), shape=(self.n_rows, self.n_cols))
        new.sum_duplicates()
        if self.count:
            cur = self.to_csr().tocoo()
            taken = new.tocoo()
            mask = ~np.isin(cur.row * self.n_cols + cur.col, taken.row * self.n_cols + taken.col)
            new = sp.csr_matrix(
                (np.concatenate([cur.data[mask], taken.data]),
                 (np.concatenate([cur.row[mask], taken.row]), np.concatenate([cur.col[mask], taken.col]))),
                shape=(self.n_rows, self.n_cols))
        new.eliminate_zeros()
        new.sort_indices()
        self._rebuild(new, np.full(self.n_rows, int(self.istate[K_.I_K]), dtype=np.int64))

    def to_csr(self) -> sp.csr_matrix:
        k = int(self.istate[K_.I_K])
        r, c, v = K_.rows_to_coo(self.meta, self.pc, self.pv, self.S, k)
        W = sp.csr_matrix((v, (r, c)), shape=(self.n_rows, self.n_cols))
        W.sort_indices()
        return W

    def nnz(self) -> int:
        return int(K_.rows_to_coo(self.meta, self.pc, self.pv, self.S, int(self.istate[K_.I_K]))[2].shape[0])

    def score(self, Q, D) -> np.ndarray:
        out = np.zeros(Q.shape[0], dtype=np.float64)
        dense = np.zeros(self.n_cols, dtype=np.float64)
        K_.score_rows(self.meta, self.pc, self.pv, self.S, int(self.istate[K_.I_K]),
                      *kernel_csr(Q), *kernel_csr(D), dense, out)
        return out

    # ----------------------------------------------------------- persistence
    def state(self, prefix: str):
        """(attrs, arrays) for persistence: the stored entries as (keys, vals, stamps), row-major.

        ``keys = i * n_cols + j``; ``stamps`` is the sweep index of the pending
        shrinkage (that of the entry's row).
        """
        indptr, indices, vals = K_.stored_csr(self.meta, self.pc, self.pv)
        n = np.diff(indptr)
        rows = np.repeat(np.arange(self.n_rows, dtype=np.int64), n)
        k = int(self.istate[K_.I_K])
        arrays = {
            f"{prefix}keys": rows * self.n_cols + indices,
            f"{prefix}vals": vals,
            f"{prefix}stamps": np.repeat(self.meta[:, K_.M_STAMP], n).astype(np.int32),
            f"{prefix}S": self.S[: k + 1].copy(),
            f"{prefix}istate": self.istate.copy(),
            f"{prefix}fstate": self.fstate.copy(),
        }
        attrs = {"n_rows": self.n_rows, "n_cols": self.n_cols}
        return attrs, arrays

    @classmethod
    def from_state(cls, attrs, arrays, prefix: str) -> "SparseW":
        """Inverse of :meth:`state`.

        Entries of one row written with different stamps (by the hash-table W
        of earlier streamrank versions, which stamped every entry) are brought
        up to date, which is exactly equivalent.
        """
        # every value is checked before a kernel indexes with it (a saved model is untrusted)
        n_rows, n_cols = state_int(attrs, "n_rows", lo=1), state_int(attrs, "n_cols", lo=1)
        istate = state_array(arrays, f"{prefix}istate", (None,), kind="i", lo=0)
        if not 3 <= istate.shape[0] <= K_.N_ISTATE:
            raise ValueError(f"array {prefix}istate has {istate.shape[0]} entries, expected 3 to {K_.N_ISTATE}")
        S = state_array(arrays, f"{prefix}S", (None,))
        k = int(istate[K_.I_K])
        if S.shape[0] < k + 1:      # the kernels read S[0..K]
            raise ValueError(f"array {prefix}S has {S.shape[0]} entries but the sweep counter "
                             f"{prefix}istate[I_K] is {k} (expected at least K + 1)")
        keys = state_array(arrays, f"{prefix}keys", (None,), kind="i", lo=0, hi=n_rows * n_cols - 1)
        if keys.size and np.unique(keys).size != keys.size:
            raise ValueError(f"array {prefix}keys holds the same entry of W twice")
        vals = state_array(arrays, f"{prefix}vals", keys.shape)
        stamps = state_array(arrays, f"{prefix}stamps", keys.shape, kind="i", lo=0, hi=k)
        fstate = state_array(arrays, f"{prefix}fstate", (1,))
        need, have = n_rows * ROW_TABLE_BYTES, physical_memory()
        if need > have:     # a few-KB model declaring 2**31 rows: a clear error, not a MemoryError or the OOM killer
            raise ValueError(f"attribute n_rows={n_rows} asks for {need:,} bytes of row tables (W's per-row state), "
                             f"more than this machine's {have:,} bytes of memory")
        W = cls(n_rows, n_cols)
        n_old = min(istate.shape[0], K_.I_USED)  # the pool counters are rebuilt below
        W.istate[:n_old] = istate[:n_old]
        W.fstate = fstate.copy()
        W.S = np.zeros(max(64, 2 * S.shape[0]), dtype=np.float64)
        W.S[: S.shape[0]] = S
        k = int(W.istate[K_.I_K])
        rows = keys // W.n_cols
        cols = keys % W.n_cols
        row_stamp = np.full(W.n_rows, k, dtype=np.int64)
        if keys.shape[0]:
            lo = np.full(W.n_rows, np.iinfo(np.int64).max)
            hi = np.full(W.n_rows, -1)
            np.minimum.at(lo, rows, stamps)
            np.maximum.at(hi, rows, stamps)
            mixed = (hi >= 0) & (lo != hi)
            if mixed.any():  # bring those rows up to date: soft(v, S[K] - S[stamp])
                sel = mixed[rows]
                sh = W.S[k] - W.S[stamps[sel]]
                v = vals[sel]
                vals = vals.copy()
                vals[sel] = np.sign(v) * np.maximum(np.abs(v) - sh, 0.0)
            has = hi >= 0
            row_stamp[has] = np.where(mixed[has], k, hi[has])
        # rows in the stored order of their entries (the margin sums in that order)
        order = np.argsort(rows, kind="stable")
        indptr = np.zeros(W.n_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=W.n_rows), out=indptr[1:])
        M = sp.csr_matrix((vals[order], cols[order], indptr), shape=(W.n_rows, W.n_cols))
        W._rebuild(M, row_stamp)
        return W
