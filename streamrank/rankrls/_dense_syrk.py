"""The dense SYRK path of :class:`~streamrank.rankrls._statistics.RankStatistics` (its module docstring).

A reused float64 workspace A = [sx ∘ Φ | sy ∘ Y] (rows centred per whole
group for ties="include") and one BLAS SYRK per block into a pending
(n + v)² accumulator, split into G, B and yLy when they are read.
"""
from __future__ import annotations

import numpy as np

from .. import _laplacian_kernels as _k
from . import _statistics_kernels as _sk
from ..laplacian import tie_classes
from ._accumulate_threads import fill_pieces, group_chunks
from ._gram import _pair_count, _syrk, _weighted_gram

__all__ = ["DenseSyrk"]

#: bytes of one chunk of the scaled block A in the dense SYRK path (fits the L3 cache)
_CHUNK_BYTES = 4 << 20


class DenseSyrk:
    """Workspace, pending accumulator and the dense SYRK accumulation (a part of RankStatistics)."""

    # ------------------------------------------------------------ workspace
    def workspace(self, rows: int, order: str = "F") -> np.ndarray:
        """The reused float64 buffer A (rows, n + v) of the dense SYRK path, Fortran-ordered (or "C").

        A caller that computes Φ itself (e.g. kernel columns k(X_B, X_R)) may
        write Φ into ``A[:, :n]`` — a Fortran-contiguous (rows, n) array,
        i.e. ``A[:, :n].T`` is C-contiguous — and pass that view as ``Phi`` to
        :meth:`add_block`: it is then centred and scaled in place, never
        copied.  The block must hold whole groups.  The buffer is freed when
        G, B or yLy is read.  ``order="C"``: row-major, for Φ computed piece by
        piece through ``add_block(..., fill=...)``.
        """
        if self._parts is not None:
            raise NotImplementedError("workspace(): per-output statistics scale Φ once per output; pass Φ itself")
        if order not in ("F", "C"):
            raise ValueError(f"order must be 'F' or 'C', got {order!r}")
        return self._buffer(rows, order)

    def _buffer(self, rows: int, order: str) -> np.ndarray:
        """A contiguous (rows, n + v) float64 view ("C" or "F") of one reused flat buffer."""
        rows = int(rows)
        k = self.n_features + self.n_outputs
        w = self._work
        if w is None or w.size < max(rows, 1) * k:
            w = np.empty(max(rows, 1) * k)
            self._work = w
        return w[: rows * k].reshape((rows, k), order=order)

    def _is_workspace(self, Phi) -> bool:
        w = self._work
        if w is None or not isinstance(Phi, np.ndarray) or Phi.dtype != np.float64 or Phi.shape[0] == 0:
            return False
        k = self.n_features + self.n_outputs
        return (Phi.__array_interface__["data"][0] == w.__array_interface__["data"][0]
                and Phi.strides in ((8, 8 * Phi.shape[0]), (8 * k, 8)) and Phi.shape[1] == self.n_features
                and Phi.shape[0] * (self.n_features + self.n_outputs) <= w.size)

    def release_workspace(self):
        """Drop the scratch workspace (a block-sized float64 buffer; the next block allocates it again).

        Package-public: :mod:`streamrank.distributed` calls it before a
        worker's statistics leave the worker, so a task's result is O(n²)
        bytes whatever the block size.
        """
        self._work = None

    def __getstate__(self):
        """Pickled (dask task results, deepcopy) without the scratch workspace: O(n²) bytes, never O(block)."""
        state = self.__dict__.copy()
        state["_work"] = None
        return state

    def _accumulator(self) -> np.ndarray:
        if self._acc is None:
            k = self.n_features + self.n_outputs
            self._acc = np.zeros((k, k), order="F")
        return self._acc

    def _flush(self):
        """Add the pending SYRK accumulators into G, B, yLy; free the workspace."""
        self._work = None
        acc, helper = self._acc, getattr(self, "_acc_helper", None)   # (objects pickled before it existed)
        self._acc_helper = None
        if helper is not None:
            acc = helper if acc is None else acc + helper
        if acc is None:
            return
        self._acc = None
        n = self.n_features
        self._G += acc[:n, :n]
        self._B += acc[:n, n:]
        self._yLy += np.diag(acc[n:, n:])

    def _add_dense(self, Phi, Y, gp, s, d, size, whole, in_place, fill=None):
        """Dense fast path: one SYRK of A = [sx ∘ Φ | sy ∘ Y] (float64) per block.

        ties="include": sx = sy = √d (d_i = s_g n_g) on rows centred per whole
        group (L_g = s_g n_g C_g with the centring projector C_g, see
        :mod:`._statistics_kernels`), so AᵀA is the whole contribution of those
        groups to G, B and yLy at once; pieces of split groups enter uncentred
        (their low-rank part waits for the last piece).  ties="exclude": sx = √dG with
        dG_i = s_g (n_g - n_c(i)) and sy = d / √dG, so the Φ-Φ and Φ-Y blocks
        are G's and B's diagonal parts; the Y-Y block is corrected to d Y²
        here.  An all-tied group (dG = 0 on every row) contributes nothing at
        all and is skipped.  The per-group sums T = [S, S_y] (one pass with
        the scaling, :mod:`._statistics_kernels`) give the low-rank part
        -Σ_g s_g T_g T_gᵀ (ties="exclude") as a second, small SYRK.  Both update
        one (n + v)² accumulator, split into G, B, yLy when they are read.  A is the reused workspace
        (see :meth:`workspace`);
        ``in_place``: Φ is already in its first n columns.  Otherwise the
        block goes through A in group-aligned chunks of about
        ``_CHUNK_BYTES`` (fill, then SYRK while the chunk is still in cache:
        ~15 % less CPU than one pass over a block-sized A, and a small A).
        """
        n, v = self.n_features, self.n_outputs
        rows = Phi.shape[0]
        n_groups = gp.shape[0] - 1
        T = np.empty((n_groups, n + v))
        corr = None
        dead = None
        acc = self._accumulator()
        if self.ties == "include":
            center = whole                                   # whole groups: centred, no low-rank part
            sq = np.sqrt(d)
            self._scale_and_syrk(Phi, Y, sq, sq, gp, center, T, acc, in_place, fill)
        else:
            center = np.zeros(n_groups, dtype=bool)
            cid, cgroup, csize = tie_classes(Y[:, 0], gp)
            in_whole = whole[cgroup]
            keep = in_whole & (csize > 1)                    # tied classes of whole groups
            dead_g = np.zeros(n_groups, dtype=bool)          # all-tied whole groups
            dead_g[cgroup[keep & (csize == size[cgroup])]] = True
            tied = keep[cid]
            dG = d - np.where(tied, s[cgroup][cid] * csize[cid], 0.0)
            sx = np.sqrt(np.maximum(dG, 0.0))
            sy = np.zeros(rows)
            np.divide(d, sx, out=sy, where=sx > 0)
            dead = dead_g[np.repeat(np.arange(n_groups), np.diff(gp))]
            # the SYRK's Y-Y block is Σ sy² Y²; the cost wants Σ d Y² (live rows only)
            corr = ((np.where(dead, 0.0, d) - sy * sy)[:, None] * Y * Y).sum(axis=0)
            self._scale_and_syrk(Phi, Y, sx, sy, gp, center, T, acc, in_place, fill)
        w = np.where(whole & ~center, s, 0.0)
        if dead is not None:
            w[dead_g] = 0.0
        if np.any(w > 0):
            Tw = T * np.sqrt(w)[:, None]
            _syrk(-1.0, Tw, acc)
        if corr is not None:
            self._yLy += corr
            if keep.any():                                   # + Σ_c s_g S_c S_cᵀ over tied classes
                kk = keep & ~dead_g[cgroup]
                if kk.any():
                    kept = np.flatnonzero(kk)
                    relabel = np.full(len(cgroup), -1, dtype=np.int64)
                    relabel[kept] = np.arange(kept.size)
                    r = np.flatnonzero(kk[cid])
                    # unscaled Φ of the tied rows (in place, Φ now holds sx ∘ Φ with sx > 0 on live rows)
                    P = Phi[r] / sx[r][:, None] if in_place else Phi[r]
                    Sc = _k.id_sums(P, relabel[cid[r]], kept.size)
                    self._G += _weighted_gram(Sc, s[cgroup[kept]])
                self.n_pairs -= int(_pair_count(csize[keep]).sum())
        self.n_rows += rows
        self.n_groups += int(whole.sum())
        self.n_pairs += int(_pair_count(size[whole]).sum())
        return T[:, :n], T[:, n:]

    def _scale_and_syrk(self, Phi, Y, sx, sy, gp, center, T, acc, in_place, fill=None):
        """Scaled (and centred) rows into the SYRK accumulator: in the workspace where Φ already is (or is
        computed by ``fill`` chunk by chunk), else chunked."""
        Y = _kernel_array(Y)
        if in_place:
            n = self.n_features
            if Phi.strides[0] == 8 and Phi.shape[0] > 1:
                A = self._buffer(Phi.shape[0], "F")
                _sk.scale_in_place_f(A, n, Y, sx, sy, gp, center, T)
            else:
                A = self._buffer(Phi.shape[0], "C")
                if fill is None:
                    _sk.fill_scaled(A[:, :n], Y, sx, sy, gp, center, A, T)      # in place
                else:
                    fill_pieces(self, A, fill, Y, sx, sy, gp, center, T, acc)
                    return
            _syrk(1.0, A, acc)
        else:
            self._fill_and_syrk(Phi, Y, sx, sy, gp, center, T, acc)

    def _fill_and_syrk(self, Phi, Y, sx, sy, gp, center, T, acc):
        """acc += AᵀA for A = [sx ∘ Φ | sy ∘ Y], built chunk by chunk (group-aligned) in the workspace."""
        rows = Phi.shape[0]
        target = max(1, _CHUNK_BYTES // (8 * (self.n_features + self.n_outputs)))
        if rows <= 2 * target:
            A = self._buffer(rows, "C")
            _sk.fill_scaled(_kernel_array(Phi), Y, sx, sy, gp, center, A, T)
            _syrk(1.0, A, acc)
            return
        for g0, g1 in group_chunks(gp, target):       # a large group is one chunk
            a, b = int(gp[g0]), int(gp[g1])
            A = self._buffer(b - a, "C")
            _sk.fill_scaled(_kernel_array(Phi[a:b]), Y[a:b], sx[a:b], sy[a:b], gp[g0:g1 + 1] - a, center[g0:g1],
                            A, T[g0:g1])
            _syrk(1.0, A, acc)


def _kernel_array(a):
    """``a`` C-contiguous and writeable for the scaling kernels: a copy only of a read-only or strided block.

    numba compiles one variant of a kernel per layout and read-only flag of
    each argument; a user's read-only (memory-mapped) or Fortran-ordered Φ
    or y would each compile ``fill_scaled`` again.  The kernels only read
    these arrays, entry by entry, so the copy gives the same numbers.
    """
    return np.require(a, None, ["C", "W"])
