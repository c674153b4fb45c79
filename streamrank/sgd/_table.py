"""Python owner of the hash-table W and its shrinkage state (see ``_sparse_w_kernels``).

:class:`SparseW` holds the arrays the kernels work on, grows and shrinks the
table so that its load stays between ``MIN_LOAD`` and ``MAX_LOAD`` (memory
proportional to nnz(W)), and turns the table into a CSR matrix.  All the
state that must survive ``partial_fit`` calls and save/load lives here:
the table, the step counter ``t``, the sweep counter ``K``, the running
threshold sums ``S[0..K]`` and the eta accumulated since the last sweep.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from . import _sparse_w_kernels as K_

__all__ = ["SparseW"]

MAX_LOAD = 0.7
MIN_LOAD = 0.25
MIN_CAP = 16
S_REBASE = 1 << 19  # rebase the running sums after this many sweeps (bounded memory, < 2**20 stamps)


def _cap_for(n: int) -> int:
    cap = MIN_CAP
    while cap * MAX_LOAD <= n + 1:
        cap *= 2
    return cap


class SparseW:
    """Hash-table W of shape ``(n_rows, n_cols)`` plus the cumulative-L1 state.

    ``tab`` (float64, 2 x capacity) holds the slots (see ``_sparse_w_kernels``).
    """

    def __init__(self, n_rows: int, n_cols: int, capacity: int = MIN_CAP):
        self.n_rows = int(n_rows)
        self.n_cols = int(n_cols)
        if self.n_rows * self.n_cols > K_.MAX_KEY:
            raise ValueError(
                f"W of shape ({self.n_rows}, {self.n_cols}) has more than 2**43 entries; "
                "hash the features into fewer dimensions")
        cap = max(MIN_CAP, 1 << int(np.ceil(np.log2(max(capacity, 1)))))
        self.tab = self._empty(cap)
        self.S = np.zeros(64, dtype=np.float64)
        self.istate = np.zeros(K_.N_ISTATE, dtype=np.int64)
        self.fstate = np.zeros(1, dtype=np.float64)

    @staticmethod
    def _empty(cap: int) -> np.ndarray:
        tab = np.zeros(2 * cap, dtype=np.float64)
        tab.view(np.int64)[0::2] = K_.EMPTY
        return tab

    # ---------------------------------------------------------------- sizes
    @property
    def capacity(self) -> int:
        return int(self.tab.shape[0] // 2)

    @property
    def count(self) -> int:
        return int(self.istate[K_.I_COUNT])

    @property
    def nbytes(self) -> int:
        return int(self.tab.nbytes + 8 * (int(self.istate[K_.I_K]) + 1))

    # ------------------------------------------------------------- resizing
    def resize(self, cap: int) -> None:
        if cap & (cap - 1) or cap * MAX_LOAD <= self.count:
            raise ValueError(f"capacity {cap} is not a power of two above {self.count} / {MAX_LOAD}")
        new = self._empty(cap)
        n = K_.rehash(self.tab, new)
        assert n == self.count, (n, self.count)
        self.tab = new

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more entries without exceeding ``MAX_LOAD``."""
        need = _cap_for(self.count + extra)
        if need > self.capacity:
            self.resize(need)

    def fit_capacity(self, tight: bool = False) -> None:
        """Shrink the table when it has become mostly empty (memory ∝ nnz).

        ``tight``: resize to the smallest power of two under ``MAX_LOAD``.
        """
        if self.capacity > MIN_CAP and (tight or self.count < MIN_LOAD * self.capacity):
            cap = _cap_for(self.count)
            if cap != self.capacity:
                self.resize(cap)

    def reserve_sweeps(self, n_steps: int, T: int) -> None:
        """Room in ``S`` (and in the stamp bits) for the sweeps of ``n_steps`` more steps."""
        if int(self.istate[K_.I_K]) + n_steps // T + 2 > K_.MAX_STAMP:
            self.rebase()
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
        removed = K_.threshold_all(self.tab, self.S, k, 0.0, 0)
        self.istate[K_.I_COUNT] -= removed
        self.istate[K_.I_FLUSHED] = self.istate[K_.I_COUNT]

    def rebase(self) -> None:
        """Flush and restart the sweep counter at 0 (bounded ``S`` and stamps)."""
        self.flush()
        ik = self.tab.view(np.int64)
        occ = ik[0::2] != K_.EMPTY
        keys = ik[0::2][occ] >> K_.STAMP_BITS
        ik[0::2][occ] = keys << K_.STAMP_BITS
        self.istate[K_.I_K] = 0
        self.S = np.zeros(max(64, self.S.shape[0]), dtype=np.float64)

    def maybe_rebase(self) -> None:
        if int(self.istate[K_.I_K]) >= S_REBASE:
            self.rebase()

    # ------------------------------------------------------------ conversion
    def set_entries(self, rows, cols, values) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        keep = values != 0
        keys = rows[keep] * self.n_cols + cols[keep]
        self.reserve(keys.shape[0])
        stamps = np.full(keys.shape[0], int(self.istate[K_.I_K]), dtype=np.int64)
        added = K_.insert_keys(self.tab, keys, values[keep], stamps)
        self.istate[K_.I_COUNT] += added

    def to_csr(self) -> sp.csr_matrix:
        k = int(self.istate[K_.I_K])
        r, c, v = K_.table_to_coo(self.tab, self.S, k, self.n_cols)
        W = sp.csr_matrix((v, (r, c)), shape=(self.n_rows, self.n_cols))
        W.sort_indices()
        return W

    def nnz(self) -> int:
        cur = K_.table_values(self.tab, self.S, int(self.istate[K_.I_K]))
        return int(np.count_nonzero(cur))

    def score(self, Q, D) -> np.ndarray:
        out = np.zeros(Q.shape[0], dtype=np.float64)
        K_.score_rows(self.tab, self.S, int(self.istate[K_.I_K]),
                      Q.indptr, Q.indices, Q.data, D.indptr, D.indices, D.data,
                      self.n_cols, out)
        return out

    # ----------------------------------------------------------- persistence
    def state(self, prefix: str):
        """(attrs, arrays) for persistence; the table is stored compacted (keys, vals, stamps)."""
        keys, vals, stamps = K_.table_entries(self.tab)
        k = int(self.istate[K_.I_K])
        arrays = {
            f"{prefix}keys": keys,
            f"{prefix}vals": vals,
            f"{prefix}stamps": stamps.astype(np.int32),
            f"{prefix}S": self.S[: k + 1].copy(),
            f"{prefix}istate": self.istate.copy(),
            f"{prefix}fstate": self.fstate.copy(),
        }
        attrs = {"n_rows": self.n_rows, "n_cols": self.n_cols}
        return attrs, arrays

    @classmethod
    def from_state(cls, attrs, arrays, prefix: str) -> "SparseW":
        W = cls(attrs["n_rows"], attrs["n_cols"])
        keys = np.asarray(arrays[f"{prefix}keys"], dtype=np.int64)
        vals = np.asarray(arrays[f"{prefix}vals"], dtype=np.float64)
        stamps = np.asarray(arrays[f"{prefix}stamps"], dtype=np.int64)
        istate = np.asarray(arrays[f"{prefix}istate"], dtype=np.int64)
        W.istate[: istate.shape[0]] = istate
        W.fstate = np.asarray(arrays[f"{prefix}fstate"], dtype=np.float64).copy()
        S = np.asarray(arrays[f"{prefix}S"], dtype=np.float64)
        W.S = np.zeros(max(64, 2 * S.shape[0]), dtype=np.float64)
        W.S[: S.shape[0]] = S
        W.tab = cls._empty(_cap_for(keys.shape[0]))
        W.istate[K_.I_COUNT] = K_.insert_keys(W.tab, keys, vals, stamps)
        return W
