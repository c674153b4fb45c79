"""Mergeable sufficient statistics of least-squares ranking (DESIGN §3.2, §3.5).

For features Φ (rows × n; X itself for linear RankRLS, kernel columns
k(X, X_R) for sparse RankRLS) and targets Y (rows × v), every RankRLS solver
needs only

    G = Φᵀ L Φ  (n × n),   B = Φᵀ L Y  (n × v),   yLy = diag(Yᵀ L Y)  (v,)

with L the block-diagonal group Laplacian of :mod:`streamrank.laplacian`
(cost (21) of Pahikkala et al. 2009 in its matrix form (24)).  All three are
sums over groups, so one pass over group-aligned blocks accumulates them
exactly; per block (include ties, group weight s_g, row weight d_i = s_g n_g)

    G += Φᵀ diag(d) Φ - Sᵀ diag(s) S,     S = per-group feature sums
    B += Φᵀ (d ∘ Y)   - Sᵀ (s ∘ S_y),     S_y = per-group target sums

in float64, whatever the dtype of Φ.  With ``ties="exclude"`` the tie class c
of row i changes the row weight of G to s_g (n_g - n_c(i)) and adds
``Σ_c s_g S_c S_cᵀ``; B and yLy do not change (a tied pair has y_i - y_j = 0,
so it contributes nothing to them).  Several outputs with ``ties="exclude"``
need one G per output (each output has its own tie classes): with
``per_output=True`` G is a stack (v, n, n) accumulated output by output
(one SYRK per output and block); otherwise a :class:`NotImplementedError`
says so.

Dense blocks take one BLAS SYRK per block: a fused numba pass
(:mod:`._statistics_kernels`) writes ``A = [√d Φ̃ | √d Ỹ]`` (float64; rows
centred per group, since L_g = s_g n_g (I - 11ᵀ/n_g) is a scaled centring
projector) into a reused workspace, and BLAS SYRK adds AᵀA — G, B and yLy at
once, half the flops of a GEMM — into one (n + v)² accumulator, split into G,
B and yLy when they are read (ties="exclude": rows uncentred with their own
weights, plus a small SYRK of the group sums).  A caller computing Φ itself
(kernel columns) can write it straight into the workspace
(:meth:`RankStatistics.workspace`).

A group cut across blocks (``Block.group_size``/``group_offset``, only with
``split_groups=True``, e.g. one global group of millions of rows) adds its
diagonal part piece by piece and keeps its running sums (O(n) per open group;
plus, for ``ties="exclude"``, O(n²) per distinct target value of the open
group) until its last row has been seen.  Pieces may arrive in any order and
in different :class:`RankStatistics` objects: :meth:`RankStatistics.merge`
joins open groups, which makes the statistics a commutative monoid — what a
dask tree reduction needs.

Row weights (``add_block(weight=)``, the learners' ``sample_weight``; pair
weight w_i w_j): L_g = s_g ((Σw) diag(w) - w wᵀ) is still diagonal plus rank
one, so whole groups cost what they cost unweighted (:meth:`RankStatistics._add_weighted`);
a weighted piece of a split group keeps O((n + v)²) per open group until its
last piece (the diagonal part needs the whole group's weight sum).

:class:`EigenPath` turns (G, B) into every λ at O(n²) per λ after one
eigendecomposition (DESIGN §3.2, §3.2 of the 2009 paper).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _laplacian_kernels as _k
from . import _statistics_kernels as _sk
from ..laplacian import check_group_weight, check_ties, group_weights, tie_classes
from ._accumulate_threads import fill_pieces, group_chunks
from ._eigenpath import EigenPath  # noqa: F401  (re-exported: callers import it from here)

__all__ = ["RankStatistics", "block_statistics", "EigenPath"]


#: bytes of one chunk of the scaled block A in the dense SYRK path (fits the L3 cache)
_CHUNK_BYTES = 4 << 20


def _pair_count(n):
    n = np.asarray(n, dtype=np.int64)
    return n * (n - 1) // 2


class RankStatistics:
    """float64 accumulator of G = ΦᵀLΦ, B = ΦᵀLY, yLy = diag(YᵀLY) and counts.

    Parameters
    ----------
    n_features : int
        Columns of Φ.
    n_outputs : int
        Columns of Y.
    group_weight : {"pair", "query", "size"}
    ties : {"include", "exclude"}
    per_output : bool
        Allow ``ties="exclude"`` with several outputs: output k then has its
        own Laplacian L_k (its own tie classes), so its own G_k = ΦᵀL_kΦ, and
        ``G`` is a stack (v, n, n).  B and yLy need no change (L_k y_k = L y_k:
        a tied pair adds y_i - y_j = 0).  Off (default), that combination
        raises :class:`NotImplementedError`, for callers that expect one
        (n, n) G.  Without ties="exclude" or with one output it changes nothing.

    Attributes
    ----------
    G : (n, n) float64, or (v, n, n) with per-output Grams (:attr:`per_output`)
    B : (n, v) float64 (always 2-D)
    yLy : (v,) float64          n_rows, n_groups, n_pairs : int
        ``n_pairs`` counts the pairs in the cost (untied pairs with
        ``ties="exclude"``; summed over the outputs with per-output Grams,
        see :attr:`pairs_per_output`), ``n_groups`` complete groups.
    """

    def __init__(self, n_features, n_outputs=1, *, group_weight="pair", ties="include", per_output=False,
                 moments=False):
        self.n_features = int(n_features)
        # column moments of Φ (normalize=; streamrank.normalize), gathered by add_block, merged by merge
        self.moments = None
        if moments:
            from ..normalize import FeatureMoments

            self.moments = FeatureMoments(self.n_features)
        self.n_outputs = int(n_outputs)
        if self.n_features < 0 or self.n_outputs < 1:
            raise ValueError(f"need n_features >= 0 and n_outputs >= 1, got {n_features}, {n_outputs}")
        self.group_weight = check_group_weight(group_weight)
        self.ties = check_ties(ties)
        self._parts = None
        if self.ties == "exclude" and self.n_outputs > 1:
            if not per_output:
                raise NotImplementedError(
                    f"ties='exclude' with {self.n_outputs} outputs: every output has its own tie classes and "
                    "so its own G; this caller needs one shared G (RankRLS, both its solvers, and "
                    "KernelRankRLS, dual and sparse, handle it), so fit one model per output column or use "
                    "ties='include'"
                )
            # one single-output accumulator per output (each with its own tie classes)
            self._parts = [RankStatistics(n_features, 1, group_weight=group_weight, ties=ties)
                           for _ in range(self.n_outputs)]
        n, v = self.n_features, self.n_outputs
        self._G = np.zeros((n, n))
        self._B = np.zeros((n, v))
        self._yLy = np.zeros(v)
        self.n_rows = 0
        self.n_groups = 0
        self.n_pairs = 0
        # pending [G B; Bᵀ ·] of the dense SYRK path, added into G, B, yLy on read
        self._acc = None
        self._acc_helper = None   # the helper thread's SYRK accumulator (see _accumulate_threads.fill_pieces)
        self._work = None
        # open (split) groups: gid -> [rows_seen, n_g, S (n,), Sy (v,)]
        self._open = {}
        # their tie classes: gid -> {y value: [count, S_c (n,), M_c (n, n)]}
        self._open_cls = {}
        # open groups with row weights: gid -> [rows_seen, n_g, W, M, T, {y: [count, W_c, S_c, M_c]}]
        self._open_w = {}

    # ------------------------------------------------------------ properties
    @property
    def per_output(self) -> bool:
        """True when every output has its own G (ties="exclude" with several outputs)."""
        return self._parts is not None

    @property
    def G(self) -> np.ndarray:
        if self._parts is not None:
            return np.stack([p.G for p in self._parts])
        self._flush()
        return self._G

    def gram(self, k: int) -> np.ndarray:
        """G of output k (the shared G unless :attr:`per_output`)."""
        return self._parts[k].G if self._parts is not None else self.G

    @property
    def B(self) -> np.ndarray:
        if self._parts is not None:
            return np.hstack([p.B for p in self._parts])
        self._flush()
        return self._B

    @property
    def yLy(self) -> np.ndarray:
        if self._parts is not None:
            return np.concatenate([p.yLy for p in self._parts])
        self._flush()
        return self._yLy

    @property
    def pairs_per_output(self) -> np.ndarray:
        """(v,) pairs in the cost of each output."""
        if self._parts is not None:
            return np.array([p.n_pairs for p in self._parts], dtype=np.int64)
        return np.full(self.n_outputs, self.n_pairs, dtype=np.int64)

    def _sync_counts(self):
        p0 = self._parts[0]
        self.n_rows, self.n_groups = p0.n_rows, p0.n_groups
        self.n_pairs = int(sum(p.n_pairs for p in self._parts))

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

    def _release_workspace(self):
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

    @property
    def is_complete(self) -> bool:
        """True when no group is waiting for more of its pieces."""
        if self._parts is not None:
            return self._parts[0].is_complete
        return not self._open and not getattr(self, "_open_w", None)

    def check_complete(self):
        if self._parts is not None:
            return self._parts[0].check_complete()
        opened = {**self._open, **getattr(self, "_open_w", {})}
        if opened:
            gid, st = next(iter(opened.items()))
            raise ValueError(
                f"{len(opened)} group(s) are incomplete (e.g. group {gid}: {st[0]} of {st[1]} rows seen); "
                "every piece of a split group must be added before solving"
            )

    def copy(self) -> "RankStatistics":
        out = RankStatistics(self.n_features, self.n_outputs, group_weight=self.group_weight, ties=self.ties,
                             per_output=self.per_output, moments=self.moments is not None)
        out.merge(self)
        return out

    # ---------------------------------------------------------------- adding
    def add_block(self, Phi, Y, group_ptr, *, group_size=None, group_offset=None, group_id=None, fill=None,
                  weight=None):
        """Add the statistics of one block of whole groups (or pieces of split groups).

        Parameters
        ----------
        Phi : (rows, n) dense array or CSR matrix
        Y : (rows,) or (rows, v)
        group_ptr : (groups + 1,) local offsets
        group_size, group_offset : (groups,) full group sizes and the offset
            of each piece inside its group (see :class:`~streamrank.io.blocks.Block`);
            default: whole groups.
        group_id : (groups,) int, global identity of each group; needed when
            some group is a piece (to join it with its other pieces).
        fill : callable ``fill(a, b, out)``, optional
            With ``Phi = workspace(rows, order="C")[:, :n]`` (whole groups
            only): Φ is not written yet; ``fill`` writes rows ``[a, b)`` of it
            into ``out`` (a row-major view of ``Phi[a:b]``) when the
            accumulation reaches them, a few hundred kilobytes at a time
            (group-aligned), so each piece is centred and scaled while it is
            still in cache — e.g. kernel columns k(X[a:b], X_R).
        weight : (rows,) float, optional
            Row weights w_i >= 0; the pair (i, j) counts w_i w_j (see
            :meth:`_add_weighted`).  None: every row weighs 1 (the unweighted
            fast path, unchanged).
        """
        gp = np.ascontiguousarray(group_ptr, dtype=np.int64)
        rows = int(gp[-1])
        sparse = sp.issparse(Phi)
        if sparse:
            Phi = sp.csr_matrix(Phi)
        else:
            Phi = np.asarray(Phi)
            if Phi.ndim != 2:
                raise ValueError(f"Phi must be 2-D (rows, features), got shape {Phi.shape}")
        if Phi.shape != (rows, self.n_features):
            raise ValueError(
                f"Phi has shape {Phi.shape}; expected ({rows}, {self.n_features}) "
                "(group_ptr[-1] rows, the statistics' n_features)"
            )
        Y = np.asarray(Y, dtype=np.float64).reshape(rows, -1) if rows else np.zeros((0, self.n_outputs))
        if Y.shape[1] != self.n_outputs:
            raise ValueError(f"Y has {Y.shape[1]} output column(s); the statistics have {self.n_outputs}")
        if self.moments is not None:
            if fill is not None or self._is_workspace(Phi):
                raise ValueError("moments need Φ before it is centred: not with the workspace or fill=")
            self.moments.update(Phi)
        if weight is not None:
            from ..laplacian import check_weight

            weight = check_weight(weight, rows, "weight")
            if fill is not None or self._is_workspace(Phi):
                raise ValueError("weight= takes Φ itself, not the workspace or fill=")
        if self._parts is not None:   # one pass per output over the same block (own scaling, own ties)
            w = None
            for k, part in enumerate(self._parts):
                if w is not None and part._work is None:
                    part._work = w         # share one workspace (parts run one after the other)
                part.add_block(Phi, Y[:, k], gp, group_size=group_size, group_offset=group_offset,
                               group_id=group_id, weight=weight)
                w = part._work
            self._sync_counts()
            return self
        local = np.diff(gp)
        n_groups = local.shape[0]
        size = local if group_size is None else np.asarray(group_size, dtype=np.int64)
        offset = np.zeros(n_groups, dtype=np.int64) if group_offset is None else np.asarray(group_offset, np.int64)
        if size.shape != (n_groups,) or offset.shape != (n_groups,):
            raise ValueError("group_size and group_offset need one entry per group of group_ptr")
        if np.any(offset + local > size):
            raise ValueError("a piece runs past the end of its group (group_offset + rows > group_size)")
        whole = (offset == 0) & (size == local)
        s = group_weights(size, self.group_weight)
        if weight is not None:
            if not sparse and Phi.dtype != np.float64:
                Phi = Phi.astype(np.float64)
            if whole.all():
                self._add_weighted(Phi, Y, gp, weight, s, size)
                return self
            if group_id is None:
                raise ValueError("group_id is needed to join the pieces of a split group")
            gid = np.asarray(group_id, dtype=np.int64)
            for g in range(n_groups):
                a, b = int(gp[g]), int(gp[g + 1])
                sub = np.array([0, b - a], dtype=np.int64)
                if whole[g]:
                    self._add_weighted(Phi[a:b], Y[a:b], sub, weight[a:b], s[g:g + 1], size[g:g + 1])
                else:
                    self._add_weighted_piece(int(gid[g]), Phi[a:b], Y[a:b], weight[a:b], int(size[g]))
            return self
        row_group = np.repeat(np.arange(n_groups), local)
        d = (s * size)[row_group]                       # row weight s_g n_g
        if fill is not None and (sparse or not self._is_workspace(Phi) or Phi.strides[1] != 8):
            raise ValueError("fill= needs Phi = workspace(rows, order='C')[:, :n_features]")
        if not sparse and rows:
            in_place = self._is_workspace(Phi)
            if in_place and not whole.all():   # the fill overwrites Φ; pieces need Φ itself afterwards
                raise ValueError("a block built in the workspace must hold whole groups only")
            w = self._work
            if w is not None:   # any other view of the reused buffer would be overwritten while read
                if not in_place and np.may_share_memory(Phi, w):
                    Phi = np.array(Phi)
                if np.may_share_memory(Y, w):
                    Y = np.array(Y)
            if not in_place and Phi.dtype not in (np.float32, np.float64):
                Phi = Phi.astype(np.float64)
            S, Sy = self._add_dense(Phi, Y, gp, s, d, size, whole, in_place, fill)
            if not whole.all():
                self._add_pieces(Phi, Y, gp, S, Sy, size, whole, group_id)
            return self
        if not sparse and Phi.dtype != np.float64:
            Phi = Phi.astype(np.float64)

        # ---- tie classes of whole groups (exclude): row weight of G loses s_g n_c(i)
        dG = d
        cls = None
        if self.ties == "exclude" and rows:
            cid, cgroup, csize = tie_classes(Y[:, 0], gp)
            in_whole = whole[cgroup]
            tied = (in_whole & (csize > 1))[cid]   # one-row classes change nothing
            dG = d - np.where(tied, s[cgroup][cid] * csize[cid], 0.0)
            cls = (cid, cgroup, csize, in_whole)

        # ---- diagonal parts
        self._G += _weighted_gram(Phi, dG)
        self._B += _weighted_xty(Phi, d, Y)
        self._yLy += (d[:, None] * Y * Y).sum(axis=0)

        # ---- low-rank parts of whole groups
        S = _group_sums(Phi, gp)                         # (groups, n) dense, or CSR
        Sy = _k.group_sums(Y, gp)                        # (groups, v)
        w = np.where(whole, s, 0.0)
        self._G -= _weighted_gram(S, w)
        self._B -= _weighted_xty(S, w, Sy)
        self._yLy -= (w[:, None] * Sy * Sy).sum(axis=0)
        self.n_rows += rows
        self.n_groups += int(whole.sum())
        self.n_pairs += int(_pair_count(size[whole]).sum())
        if cls is not None:
            cid, cgroup, csize, in_whole = cls
            keep = in_whole & (csize > 1)
            if keep.any():
                Sc = _id_sums(Phi, cid, len(cgroup))
                wc = np.where(keep, s[cgroup], 0.0)
                self._G += _weighted_gram(Sc, wc)
                self.n_pairs -= int(_pair_count(csize[keep]).sum())

        # ---- pieces of split groups
        self._add_pieces(Phi, Y, gp, S, Sy, size, whole, group_id)
        return self

    def _add_weighted(self, Phi, Y, gp, w, s, size):
        """Add whole groups with row weights w (pair weight w_i w_j), exactly, O(rows (n + v)²).

        With W_g = Σ_{i in g} w_i the weighted group Laplacian is (see
        :mod:`streamrank.laplacian`; cost (21), matrix form (24)–(25) of
        Pahikkala et al. 2009 with the edge weights of (20)/(22) replaced by
        w_i w_j)

            L_g = s_g ((W_g) diag(w) - w wᵀ)               diagonal plus rank one,

        so, with d_i = s_g W_g w_i and the weighted sums S_g = Σ w_i φ_i,
        S_y = Σ w_i y_i (one pass over the rows)

            G += Φᵀ diag(d) Φ - s_g S_g S_gᵀ,  B += Φᵀ (d ∘ Y) - s_g S_g S_yᵀ,
            yLy += Σ d_i y_i² - s_g S_y².

        Equivalently L_g = s_g W_g (diag(w) - w wᵀ / W_g) is a weighted
        centring: ``Φ_gᵀ L_g Φ_g = Σ_i d_i (φ_i - m_g)(φ_i - m_g)ᵀ`` with the
        weighted mean m_g = S_g / W_g — the dense ties="include" path uses
        this form (rows centred by m_g, scaled by √d_i, one SYRK: no
        cancellation between a diagonal and a low-rank part).  w ≡ 1 gives
        W_g = n_g and the unweighted statistics (to rounding).

        ties="exclude" removes the tied pairs of every tie class c
        (W_c = Σ_c w_i, S_c = Σ_c w_i φ_i): the diagonal becomes
        d^G_i = s_g w_i (W_g - W_c(i)) and G gains + s_g S_c S_cᵀ; B and yLy do
        not change (a tied pair has y_i - y_j = 0).  A group with one class
        (all tied) contributes nothing.  A group whose weights sum to 0
        contributes nothing.  ``n_pairs`` still counts row pairs, unweighted.
        Cost: O(rows (n + v)) for the sums and the scaled copy plus the
        O(rows n²) Gram products — the cost of the unweighted pass.
        """
        n, v = self.n_features, self.n_outputs
        rows = int(gp[-1])
        n_groups = gp.shape[0] - 1
        sparse = sp.issparse(Phi)
        gid = np.repeat(np.arange(n_groups), np.diff(gp))
        Wg = np.bincount(gid, weights=w, minlength=n_groups)
        d = (s * Wg)[gid] * w
        if rows:
            if self.ties == "include" and not sparse:
                # weighted centring, one SYRK of [√d (Φ - m_g) | √d (Y - m_y,g)]
                Z = np.empty((rows, n + v))
                Z[:, :n] = Phi
                Z[:, n:] = Y
                T = _k.id_sums(Z * w[:, None], gid, n_groups)
                inv = np.zeros(n_groups)
                np.divide(1.0, Wg, out=inv, where=Wg > 0)
                Z -= (T * inv[:, None])[gid]
                Z *= np.sqrt(d)[:, None]
                _syrk(1.0, Z, self._accumulator())
            else:
                dG = d
                kept = None
                if self.ties == "exclude":
                    cid, cgroup, csize = tie_classes(Y[:, 0], gp)
                    # one-row classes: their -s w_i² φφᵀ (diagonal) and +s w_i² φφᵀ (class term) cancel
                    Wc = np.where(csize > 1, np.bincount(cid, weights=w, minlength=len(cgroup)), 0.0)
                    dead = np.zeros(n_groups, dtype=bool)    # one class = all tied
                    dead[cgroup[csize == size[cgroup]]] = True
                    kept = np.flatnonzero((csize > 1) & ~dead[cgroup])
                    d = np.where(dead[gid], 0.0, d)
                    dG = np.where(dead[gid], 0.0, np.maximum(s[gid] * w * (Wg[gid] - Wc[cid]), 0.0))
                sg = np.where(Wg > 0, s, 0.0)
                if self.ties == "exclude":
                    sg = np.where(dead, 0.0, sg)
                S = _weighted_sums(Phi, gid, n_groups, w)
                Sy = _k.id_sums(Y * w[:, None], gid, n_groups)
                self._G += _weighted_gram(Phi, dG) - _weighted_gram(S, sg)
                self._B += _weighted_xty(Phi, d, Y) - _weighted_xty(S, sg, Sy)
                self._yLy += (d[:, None] * Y * Y).sum(axis=0) - (sg[:, None] * Sy * Sy).sum(axis=0)
                if kept is not None and kept.size:
                    relabel = np.full(len(cgroup), -1, dtype=np.int64)
                    relabel[kept] = np.arange(kept.size)
                    r = np.flatnonzero(relabel[cid] >= 0)
                    Sc = _weighted_sums(Phi[r], relabel[cid[r]], kept.size, w[r])
                    self._G += _weighted_gram(Sc, s[cgroup[kept]])
        self.n_rows += rows
        self.n_groups += n_groups
        self.n_pairs += int(_pair_count(size).sum())
        if self.ties == "exclude" and rows:
            self.n_pairs -= int(_pair_count(csize).sum())

    def _add_weighted_piece(self, gid, Phi, Y, w, size):
        """A piece of a split group with row weights: keep its moments until the group is complete.

        The diagonal part s_g W_g Σ w_i z_iᵀ z_i (z = [φ, y]) needs the whole
        group's weight sum W_g, so the piece adds M = Σ w_i z_i z_iᵀ ((n + v)²)
        and T = Σ w_i z_i to the open group (O((n + v)²) memory per open
        group; plus, with ties="exclude", W_c, S_c and M_c = Σ_c w_i φ_i φ_iᵀ per
        distinct target value), and :meth:`_close_weighted` adds
        s_g (W_g M - T Tᵀ) (minus s_g (W_c M_c - S_c S_cᵀ) per tie class).
        """
        P = Phi.toarray() if sp.issparse(Phi) else np.asarray(Phi, dtype=np.float64)
        Z = np.hstack([P, Y])
        st = self._open_w.setdefault(gid, [0, size, 0.0, 0.0, 0.0, {}])
        if st[1] != size:
            raise ValueError(f"group {gid} was announced with {st[1]} rows and now with {size}")
        st[0] += Z.shape[0]
        if st[0] > size:
            raise ValueError(f"group {gid} received {st[0]} rows but has only {size}: a piece was added twice")
        st[2] = st[2] + float(w.sum())
        st[3] = st[3] + (Z * w[:, None]).T @ Z
        st[4] = st[4] + w @ Z
        if self.ties == "exclude":
            for val in np.unique(Y[:, 0]):
                r = Y[:, 0] == val
                c = st[5].setdefault(float(val), [0, 0.0, 0.0, 0.0])
                c[0] += int(r.sum())
                c[1] += float(w[r].sum())
                c[2] = c[2] + w[r] @ P[r]
                c[3] = c[3] + (P[r] * w[r][:, None]).T @ P[r]
        self._close_weighted(gid)

    def _close_weighted(self, gid):
        rows, size, W, M, T, classes = self._open_w[gid]
        if rows < size:
            return
        del self._open_w[gid]
        n = self.n_features
        s = float(group_weights(np.array([size]), self.group_weight)[0])
        if self.ties == "exclude" and len(classes) == 1:     # all tied: no pair
            s = 0.0
        C = s * (W * M - np.outer(T, T))
        for cnt, Wc, Sc, Mc in classes.values():
            if cnt > 1:
                C[:n, :n] -= s * (Wc * Mc - np.outer(Sc, Sc))
                self.n_pairs -= int(_pair_count(cnt))
        self._G += C[:n, :n]
        self._B += C[:n, n:]
        self._yLy += np.diag(C[n:, n:])
        self.n_rows += rows
        self.n_groups += 1
        self.n_pairs += int(_pair_count(size))

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
            _sk.fill_scaled(Phi, Y, sx, sy, gp, center, A, T)
            _syrk(1.0, A, acc)
            return
        for g0, g1 in group_chunks(gp, target):       # a large group is one chunk
            a, b = int(gp[g0]), int(gp[g1])
            A = self._buffer(b - a, "C")
            _sk.fill_scaled(Phi[a:b], Y[a:b], sx[a:b], sy[a:b], gp[g0:g1 + 1] - a, center[g0:g1], A, T[g0:g1])
            _syrk(1.0, A, acc)

    def _add_pieces(self, Phi, Y, gp, S, Sy, size, whole, group_id):
        if not whole.all():
            if group_id is None:
                raise ValueError("group_id is needed to join the pieces of a split group")
            gid = np.asarray(group_id, dtype=np.int64)
            for g in np.flatnonzero(~whole):
                a, b = gp[g], gp[g + 1]
                Sg = _dense_row(S, g)
                self._add_open(int(gid[g]), int(b - a), int(size[g]), Sg, Sy[g].copy(), None)
                if self.ties == "exclude" and b > a:
                    piece = Phi[a:b] if sp.issparse(Phi) else np.asarray(Phi[a:b], dtype=np.float64)
                    yv = Y[a:b, 0]
                    classes = {}
                    for val in np.unique(yv):
                        r = yv == val
                        P = piece[r]
                        Sc = np.asarray(P.sum(axis=0)).ravel()
                        Mc = _weighted_gram(P, np.ones(int(r.sum())))
                        classes[float(val)] = [int(r.sum()), Sc, Mc]
                    self._merge_classes(int(gid[g]), classes)
                self._maybe_close(int(gid[g]))

    def _add_open(self, gid, rows, size, Sg, Sy, _):
        st = self._open.get(gid)
        if st is None:
            self._open[gid] = [rows, size, Sg, Sy]
        else:
            if st[1] != size:
                raise ValueError(f"group {gid} was announced with {st[1]} rows and now with {size}")
            st[0] += rows
            st[2] = st[2] + Sg
            st[3] = st[3] + Sy
            if st[0] > size:
                raise ValueError(f"group {gid} received {st[0]} rows but has only {size}: a piece was added twice")

    def _merge_classes(self, gid, classes):
        cur = self._open_cls.setdefault(gid, {})
        for val, (cnt, Sc, Mc) in classes.items():
            c = cur.get(val)
            if c is None:
                cur[val] = [cnt, Sc, Mc]
            else:
                c[0] += cnt
                c[1] = c[1] + Sc
                c[2] = c[2] + Mc

    def _maybe_close(self, gid):
        rows, size, Sg, Sy = self._open[gid]
        if rows < size:
            return
        del self._open[gid]
        s = float(group_weights(np.array([size]), self.group_weight)[0])
        self._G -= s * np.outer(Sg, Sg)
        self._B -= s * np.outer(Sg, Sy)
        self._yLy -= s * Sy * Sy
        self.n_groups += 1
        self.n_pairs += int(_pair_count(size))
        for cnt, Sc, Mc in self._open_cls.pop(gid, {}).values():
            if cnt > 1:
                self._G -= s * (cnt * Mc - np.outer(Sc, Sc))
                self.n_pairs -= int(_pair_count(cnt))

    # --------------------------------------------------------------- merging
    def _check_compatible(self, other):
        if not isinstance(other, RankStatistics):
            raise TypeError(f"can only merge RankStatistics, got {type(other).__name__}")
        mine = (self.n_features, self.n_outputs, self.group_weight, self.ties, self.per_output)
        theirs = (other.n_features, other.n_outputs, other.group_weight, other.ties, other.per_output)
        other._flush()
        if mine != theirs:
            raise ValueError(
                f"cannot merge statistics with (n_features, n_outputs, group_weight, ties, per_output) = {theirs} "
                f"into {mine}"
            )

    def merge(self, other: "RankStatistics") -> "RankStatistics":
        """Add ``other`` into ``self`` (sums; open groups are joined) and return ``self``."""
        self._check_compatible(other)
        if (self.moments is None) != (other.moments is None):
            raise ValueError("cannot merge statistics gathered with and without feature moments "
                             "(normalize= changed between fits? refit from scratch)")
        if self.moments is not None:
            self.moments.merge(other.moments)
        if self._parts is not None:
            for mine, theirs in zip(self._parts, other._parts):
                mine.merge(theirs)
            self._sync_counts()
            return self
        self._G += other._G
        self._B += other._B
        self._yLy += other._yLy
        self.n_rows += other.n_rows
        self.n_groups += other.n_groups
        self.n_pairs += other.n_pairs
        for gid, (rows, size, Sg, Sy) in other._open.items():
            self._add_open(gid, rows, size, Sg.copy(), Sy.copy(), None)
            if gid in other._open_cls:
                self._merge_classes(gid, {k: [c, S.copy(), M.copy()] for k, (c, S, M) in other._open_cls[gid].items()})
            self._maybe_close(gid)
        for gid, (rows, size, W, M, T, classes) in getattr(other, "_open_w", {}).items():
            st = self._open_w.setdefault(gid, [0, size, 0.0, 0.0, 0.0, {}])
            if st[1] != size:
                raise ValueError(f"group {gid} was announced with {st[1]} rows and now with {size}")
            st[0] += rows
            if st[0] > size:
                raise ValueError(f"group {gid} received {st[0]} rows but has only {size}: a piece was added twice")
            st[2], st[3], st[4] = st[2] + W, st[3] + M, st[4] + T
            for val, (cnt, Wc, Sc, Mc) in classes.items():
                c = st[5].setdefault(val, [0, 0.0, 0.0, 0.0])
                c[0], c[1], c[2], c[3] = c[0] + cnt, c[1] + Wc, c[2] + Sc, c[3] + Mc
            self._close_weighted(gid)
        return self

    def __iadd__(self, other):
        return self.merge(other)

    def __add__(self, other):
        return self.copy().merge(other)

    # ------------------------------------------------------------------ loss
    def loss(self, W) -> np.ndarray:
        """Least-squares ranking loss (y - Φw)ᵀ L (y - Φw) = wᵀGw - 2wᵀb + yᵀLy per output.

        ``W`` is (n,), (n, v) or a stack (a, n, v); returns (v,) or (a, v).
        """
        W = np.asarray(W, dtype=np.float64)
        if W.ndim == 1:
            W = W[:, None]
        if self._parts is not None:
            quad = np.einsum("...iv,vij,...jv->...v", W, self.G, W)
        else:
            quad = np.einsum("...iv,ij,...jv->...v", W, self.G, W)
        lin = np.einsum("...iv,iv->...v", W, self.B)
        return quad - 2.0 * lin + self.yLy

    # ----------------------------------------------------------- persistence
    def to_arrays(self, prefix: str = "") -> dict:
        """Arrays for :mod:`streamrank.persistence` (complete statistics only)."""
        self.check_complete()
        out = {
            f"{prefix}G": self.G,
            f"{prefix}B": self.B,
            f"{prefix}yLy": self.yLy,
            f"{prefix}counts": np.array([self.n_rows, self.n_groups, self.n_pairs], dtype=np.int64),
        }
        if self._parts is not None:
            out[f"{prefix}pairs"] = self.pairs_per_output
        if self.moments is not None:
            out.update(self.moments.to_arrays(f"{prefix}moments_"))
        return out

    def scaled(self, d) -> "RankStatistics":
        """The statistics of Φ diag(d): G' = D G D, B' = D B (yLy and counts unchanged).

        A congruence: it is what one pass over the scaled features would have
        accumulated (any shift of the features is removed by the per-group
        centring), so :mod:`streamrank.normalize` costs no extra pass.
        Complete statistics only; the result carries no moments.
        """
        self.check_complete()
        d = np.asarray(d, dtype=np.float64)
        if d.shape != (self.n_features,):
            raise ValueError(f"d has shape {d.shape}; expected ({self.n_features},)")
        arrays = self.to_arrays()
        G = arrays["G"]
        arrays["G"] = G * d[:, None] * d[None, :] if G.ndim == 2 else G * d[None, :, None] * d[None, None, :]
        arrays["B"] = arrays["B"] * d[:, None]
        out = RankStatistics.from_arrays(arrays, group_weight=self.group_weight, ties=self.ties)
        out.moments = None
        return out

    @classmethod
    def from_arrays(cls, arrays: dict, *, group_weight: str, ties: str, prefix: str = "") -> "RankStatistics":
        G = np.asarray(arrays[f"{prefix}G"], dtype=np.float64)
        B = np.asarray(arrays[f"{prefix}B"], dtype=np.float64)
        if G.ndim == 3:                     # per-output Grams
            yLy = np.asarray(arrays[f"{prefix}yLy"], dtype=np.float64)
            n_rows, n_groups, _ = (int(c) for c in np.asarray(arrays[f"{prefix}counts"]))
            pairs = np.asarray(arrays[f"{prefix}pairs"], dtype=np.int64)
            out = cls(G.shape[-1], B.shape[1], group_weight=group_weight, ties=ties, per_output=True)
            for k, part in enumerate(out._parts):
                part._G[...] = G[k]
                part._B[...] = B[:, k:k + 1]
                part._yLy[...] = yLy[k:k + 1]
                part.n_rows, part.n_groups, part.n_pairs = n_rows, n_groups, int(pairs[k])
            out._sync_counts()
            return _with_moments(out, arrays, prefix)
        out = cls(G.shape[0], B.shape[1], group_weight=group_weight, ties=ties)
        out._G[...] = G
        out._B[...] = B
        out._yLy[...] = np.asarray(arrays[f"{prefix}yLy"], dtype=np.float64)
        out.n_rows, out.n_groups, out.n_pairs = (int(c) for c in np.asarray(arrays[f"{prefix}counts"]))
        return _with_moments(out, arrays, prefix)

    def __repr__(self):
        open_ = self._parts[0]._open if self._parts is not None else self._open
        return (f"RankStatistics(n_features={self.n_features}, n_outputs={self.n_outputs}, "
                f"n_rows={self.n_rows}, n_groups={self.n_groups}, n_pairs={self.n_pairs}, "
                f"open_groups={len(open_)}{', per_output=True' if self._parts is not None else ''})")


# ------------------------------------------------------------------ helpers
def _with_moments(stats, arrays, prefix):
    if f"{prefix}moments_mean" in arrays:
        from ..normalize import FeatureMoments

        stats.moments = FeatureMoments.from_arrays(arrays, f"{prefix}moments_")
        if stats.moments.n_features != stats.n_features:
            raise ValueError(f"{prefix}moments have {stats.moments.n_features} features; G has {stats.n_features}")
    return stats


def _syrk(alpha, A, acc):
    """acc += alpha AᵀA for a float64 A (rows, k), C- or Fortran-contiguous.

    numpy runs ``A.T @ A`` of one buffer as BLAS SYRK (half the flops of a
    GEMM) and releases the GIL meanwhile, so the prefetching reader thread
    (zarr decoding, which needs the GIL between its steps) keeps going;
    scipy's f2py ``dsyrk`` holds the GIL for the whole call, which serialised
    reading and accumulation (measured).  The O(k²) symmetric copy numpy
    makes is small next to the O(rows k²) product.
    """
    if A.shape[0] == 0:
        return
    AtA = A.T @ A
    if alpha != 1.0:
        AtA *= alpha
    acc += AtA


def _weighted_gram(A, d):
    """Aᵀ diag(d) A as a dense float64 (n, n) array; d >= 0."""
    if sp.issparse(A):
        return np.asarray((A.T @ A.multiply(d[:, None]).tocsr()).toarray(), dtype=np.float64)
    if A.shape[0] == 0:
        return np.zeros((A.shape[1], A.shape[1]))
    c = d[0]
    if np.all(d == c):
        return c * (A.T @ A)
    Z = A * np.sqrt(d)[:, None]
    return Z.T @ Z


def _weighted_xty(A, d, Y):
    """Aᵀ (d ∘ Y) as dense (n, v)."""
    DY = d[:, None] * Y
    if sp.issparse(A):
        return np.asarray(A.T @ DY, dtype=np.float64)
    return A.T @ DY


def _indicator(labels, n_labels):
    rows = labels.shape[0]
    return sp.csr_matrix((np.ones(rows), (labels, np.arange(rows))), shape=(n_labels, rows))


def _group_sums(Phi, gp):
    if sp.issparse(Phi):
        labels = np.repeat(np.arange(len(gp) - 1), np.diff(gp))
        return (_indicator(labels, len(gp) - 1) @ Phi).tocsr()
    return _k.group_sums(Phi, gp)


def _weighted_sums(Phi, ids, n_ids, w):
    """Σ_{i: ids_i = c} w_i Φ_i for every label c: (n_ids, n), dense float64 or CSR."""
    if sp.issparse(Phi):
        rows = Phi.shape[0]
        M = sp.csr_matrix((w, (ids, np.arange(rows))), shape=(n_ids, rows))
        return (M @ Phi).tocsr()
    return _k.id_sums(np.asarray(Phi, dtype=np.float64) * w[:, None], ids, n_ids)


def _id_sums(Phi, ids, n_ids):
    if sp.issparse(Phi):
        return (_indicator(ids, n_ids) @ Phi).tocsr()
    return _k.id_sums(Phi, ids, n_ids)


def _dense_row(S, g):
    if sp.issparse(S):
        return np.asarray(S[g].toarray(), dtype=np.float64).ravel()
    return np.array(S[g], dtype=np.float64)


def block_statistics(block, *, group_weight="pair", ties="include", transform=None,
                     n_outputs=None, per_output=False, moments=False) -> RankStatistics:
    """One block's partial :class:`RankStatistics` (what a dask worker returns).

    ``transform`` maps ``block.X`` to Φ (e.g. kernel columns); default Φ = X.
    Group identities are global (``block.group_start + g``), so pieces of a
    split group from different blocks join on merge.
    """
    Phi = block.X if transform is None else transform(block.X)
    weight = getattr(block, "weight", None)
    Y = np.asarray(block.y, dtype=np.float64)
    v = (1 if Y.ndim == 1 else Y.shape[1]) if n_outputs is None else n_outputs
    st = RankStatistics(Phi.shape[1], v, group_weight=group_weight, ties=ties, per_output=per_output,
                        moments=moments)
    gid = block.group_start + np.arange(block.n_groups, dtype=np.int64)
    st.add_block(Phi, Y, block.group_ptr, group_size=block.group_size, group_offset=block.group_offset,
                 group_id=gid, weight=weight)
    return st
