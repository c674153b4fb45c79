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
from ..laplacian import check_group_weight, check_ties, group_weights, tie_classes
from ._dense_syrk import DenseSyrk
from ._eigenpath import EigenPath  # noqa: F401  (re-exported: callers import it from here)
from ._gram import _group_sums, _id_sums, _pair_count, _weighted_gram, _weighted_xty
from ._open_groups import OpenGroups
from ._weighted_statistics import WeightedRows

__all__ = ["RankStatistics", "block_statistics", "EigenPath"]


class RankStatistics(DenseSyrk, WeightedRows, OpenGroups):
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
