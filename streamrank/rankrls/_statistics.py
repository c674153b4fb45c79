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
would need one G per output (each output has its own tie classes): not
supported, a :class:`NotImplementedError` says so.

A group cut across blocks (``Block.group_size``/``group_offset``, only with
``split_groups=True``, e.g. one global group of millions of rows) adds its
diagonal part piece by piece and keeps its running sums (O(n) per open group;
plus, for ``ties="exclude"``, O(n²) per distinct target value of the open
group) until its last row has been seen.  Pieces may arrive in any order and
in different :class:`RankStatistics` objects: :meth:`RankStatistics.merge`
joins open groups, which makes the statistics a commutative monoid — what a
dask tree reduction needs.

:class:`EigenPath` turns (G, B) into every λ at O(n²) per λ after one
eigendecomposition (DESIGN §3.2, §3.2 of the 2009 paper).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _laplacian_kernels as _k
from ..laplacian import check_group_weight, check_ties, group_weights, tie_classes

__all__ = ["RankStatistics", "block_statistics", "EigenPath"]


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

    Attributes
    ----------
    G : (n, n) float64          B : (n, v) float64 (always 2-D)
    yLy : (v,) float64          n_rows, n_groups, n_pairs : int
        ``n_pairs`` counts the pairs in the cost (untied pairs with
        ``ties="exclude"``), ``n_groups`` complete groups.
    """

    def __init__(self, n_features, n_outputs=1, *, group_weight="pair", ties="include"):
        self.n_features = int(n_features)
        self.n_outputs = int(n_outputs)
        if self.n_features < 0 or self.n_outputs < 1:
            raise ValueError(f"need n_features >= 0 and n_outputs >= 1, got {n_features}, {n_outputs}")
        self.group_weight = check_group_weight(group_weight)
        self.ties = check_ties(ties)
        if self.ties == "exclude" and self.n_outputs > 1:
            raise NotImplementedError(
                f"ties='exclude' with {self.n_outputs} outputs: every output has its own tie classes and "
                "so its own G; use solver='cg' (which handles it), fit one model per output column, or use "
                "ties='include'"
            )
        n, v = self.n_features, self.n_outputs
        self._G = np.zeros((n, n))
        self._B = np.zeros((n, v))
        self._yLy = np.zeros(v)
        self.n_rows = 0
        self.n_groups = 0
        self.n_pairs = 0
        # open (split) groups: gid -> [rows_seen, n_g, S (n,), Sy (v,)]
        self._open = {}
        # their tie classes: gid -> {y value: [count, S_c (n,), M_c (n, n)]}
        self._open_cls = {}

    # ------------------------------------------------------------ properties
    @property
    def G(self) -> np.ndarray:
        return self._G

    @property
    def B(self) -> np.ndarray:
        return self._B

    @property
    def yLy(self) -> np.ndarray:
        return self._yLy

    @property
    def is_complete(self) -> bool:
        """True when no group is waiting for more of its pieces."""
        return not self._open

    def check_complete(self):
        if self._open:
            gid, st = next(iter(self._open.items()))
            raise ValueError(
                f"{len(self._open)} group(s) are incomplete (e.g. group {gid}: {st[0]} of {st[1]} rows seen); "
                "every piece of a split group must be added before solving"
            )

    def copy(self) -> "RankStatistics":
        out = RankStatistics(self.n_features, self.n_outputs, group_weight=self.group_weight, ties=self.ties)
        out.merge(self)
        return out

    # ---------------------------------------------------------------- adding
    def add_block(self, Phi, Y, group_ptr, *, group_size=None, group_offset=None, group_id=None):
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
        row_group = np.repeat(np.arange(n_groups), local)
        d = (s * size)[row_group]                       # row weight s_g n_g
        if not sparse and rows:
            if self.ties == "include":
                self._add_dense_include(Phi, Y, gp, s, d, whole)
            else:
                self._add_dense_exclude(Phi, Y, gp, s, d, size, whole)
            if not whole.all():
                S = _k.group_sums(Phi, gp)
                Sy = _k.group_sums(Y, gp)
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

    def _add_dense_include(self, Phi, Y, gp, s, d, whole):
        """Fast path (dense, ties included): one GEMM of A = [√d Φ, √d Y] gives G, B, yLy.

        The row weight d_i = s_g n_g is constant inside a group, so the group
        sums T_g of A are √d_g [S_g, S_y,g] and the low-rank part
        s_g [S_g; S_y,g][S_g; S_y,g]ᵀ = T_g T_gᵀ / n_g.
        """
        n, v = self.n_features, self.n_outputs
        rows = Phi.shape[0]
        A = np.empty((rows, n + v))
        c = d[0]
        if np.all(d == c):
            A[:, :n] = Phi
            A[:, n:] = Y
            AtA = A.T @ A
            AtA *= c
            T = _k.group_sums(A, gp)
            T *= np.sqrt(c)
        else:
            sd = np.sqrt(d)[:, None]
            np.multiply(Phi, sd, out=A[:, :n])
            np.multiply(Y, sd, out=A[:, n:])
            AtA = A.T @ A
            T = _k.group_sums(A, gp)
        local = np.diff(gp)
        wl = np.zeros(local.shape[0])
        ok = whole & (local > 0) & (s > 0)
        wl[ok] = 1.0 / local[ok]
        Tw = T * np.sqrt(wl)[:, None]
        AtA -= Tw.T @ Tw
        self._G += AtA[:n, :n]
        self._B += AtA[:n, n:]
        self._yLy += np.diag(AtA[n:, n:])
        self.n_rows += rows
        self.n_groups += int(whole.sum())
        sizes = local[whole]
        self.n_pairs += int(_pair_count(sizes).sum())

    def _add_dense_exclude(self, Phi, Y, gp, s, d, size, whole):
        """Fast path (dense, ties excluded): one GEMM of A = [√dG Φ, (d/√dG) Y] gives G's and B's
        diagonal parts (dG_i = s_g (n_g - n_c(i)) for G, d_i = s_g n_g for B).

        dG_i = 0 with d_i > 0 only in an all-tied group, which contributes
        nothing at all (its rows and low-rank B part are dropped).
        """
        n, v = self.n_features, self.n_outputs
        rows = Phi.shape[0]
        cid, cgroup, csize = tie_classes(Y[:, 0], gp)
        in_whole = whole[cgroup]
        keep = in_whole & (csize > 1)                    # tied classes of whole groups
        tied = keep[cid]
        dG = d - np.where(tied, s[cgroup][cid] * csize[cid], 0.0)
        sq = np.sqrt(np.maximum(dG, 0.0))
        scaleY = np.zeros(rows)
        np.divide(d, sq, out=scaleY, where=sq > 0)
        A = np.empty((rows, n + v))
        np.multiply(Phi, sq[:, None], out=A[:, :n])
        np.multiply(Y, scaleY[:, None], out=A[:, n:])
        AtA = A.T @ A
        self._G += AtA[:n, :n]
        self._B += AtA[:n, n:]
        self._yLy += (d[:, None] * Y * Y).sum(axis=0)
        S = _k.group_sums(Phi, gp)
        Sy = _k.group_sums(Y, gp)
        all_tied = np.zeros(len(s), dtype=bool)
        all_tied[cgroup[keep & (csize == size[cgroup])]] = True   # groups whose rows all have dG = 0
        w = np.where(whole, s, 0.0)
        wB = np.where(all_tied, 0.0, w)
        self._G -= _weighted_gram(S, w)
        self._B -= _weighted_xty(S, wB, Sy)
        self._yLy -= (w[:, None] * Sy * Sy).sum(axis=0)
        if keep.any():
            kept = np.flatnonzero(keep)
            relabel = np.full(len(cgroup), -1, dtype=np.int64)
            relabel[kept] = np.arange(kept.size)
            r = np.flatnonzero(tied)
            Sc = _k.id_sums(Phi[r], relabel[cid[r]], kept.size)
            self._G += _weighted_gram(Sc, s[cgroup[kept]])
            self.n_pairs -= int(_pair_count(csize[kept]).sum())
        self.n_rows += rows
        self.n_groups += int(whole.sum())
        self.n_pairs += int(_pair_count(size[whole]).sum())

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
        mine = (self.n_features, self.n_outputs, self.group_weight, self.ties)
        theirs = (other.n_features, other.n_outputs, other.group_weight, other.ties)
        if mine != theirs:
            raise ValueError(
                f"cannot merge statistics with (n_features, n_outputs, group_weight, ties) = {theirs} "
                f"into {mine}"
            )

    def merge(self, other: "RankStatistics") -> "RankStatistics":
        """Add ``other`` into ``self`` (sums; open groups are joined) and return ``self``."""
        self._check_compatible(other)
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
        quad = np.einsum("...iv,ij,...jv->...v", W, self._G, W)
        lin = np.einsum("...iv,iv->...v", W, self._B)
        return quad - 2.0 * lin + self._yLy

    # ----------------------------------------------------------- persistence
    def to_arrays(self, prefix: str = "") -> dict:
        """Arrays for :mod:`streamrank.persistence` (complete statistics only)."""
        self.check_complete()
        return {
            f"{prefix}G": self._G,
            f"{prefix}B": self._B,
            f"{prefix}yLy": self._yLy,
            f"{prefix}counts": np.array([self.n_rows, self.n_groups, self.n_pairs], dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict, *, group_weight: str, ties: str, prefix: str = "") -> "RankStatistics":
        G = np.asarray(arrays[f"{prefix}G"], dtype=np.float64)
        B = np.asarray(arrays[f"{prefix}B"], dtype=np.float64)
        out = cls(G.shape[0], B.shape[1], group_weight=group_weight, ties=ties)
        out._G[...] = G
        out._B[...] = B
        out._yLy[...] = np.asarray(arrays[f"{prefix}yLy"], dtype=np.float64)
        out.n_rows, out.n_groups, out.n_pairs = (int(c) for c in np.asarray(arrays[f"{prefix}counts"]))
        return out

    def __repr__(self):
        return (f"RankStatistics(n_features={self.n_features}, n_outputs={self.n_outputs}, "
                f"n_rows={self.n_rows}, n_groups={self.n_groups}, n_pairs={self.n_pairs}, "
                f"open_groups={len(self._open)})")


# ------------------------------------------------------------------ helpers
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


def _id_sums(Phi, ids, n_ids):
    if sp.issparse(Phi):
        return (_indicator(ids, n_ids) @ Phi).tocsr()
    return _k.id_sums(Phi, ids, n_ids)


def _dense_row(S, g):
    if sp.issparse(S):
        return np.asarray(S[g].toarray(), dtype=np.float64).ravel()
    return np.array(S[g], dtype=np.float64)


def block_statistics(block, *, group_weight="pair", ties="include", transform=None,
                     n_outputs=None) -> RankStatistics:
    """One block's partial :class:`RankStatistics` (what a dask worker returns).

    ``transform`` maps ``block.X`` to Φ (e.g. kernel columns); default Φ = X.
    Group identities are global (``block.group_start + g``), so pieces of a
    split group from different blocks join on merge.
    """
    Phi = block.X if transform is None else transform(block.X)
    Y = np.asarray(block.y, dtype=np.float64)
    v = (1 if Y.ndim == 1 else Y.shape[1]) if n_outputs is None else n_outputs
    st = RankStatistics(Phi.shape[1], v, group_weight=group_weight, ties=ties)
    gid = block.group_start + np.arange(block.n_groups, dtype=np.int64)
    st.add_block(Phi, Y, block.group_ptr, group_size=block.group_size, group_offset=block.group_offset,
                 group_id=gid)
    return st


class EigenPath:
    """Every λ of ``w(λ) = (G + λ I)⁻¹ B`` from one eigendecomposition ``G = V Λ Vᵀ``.

    DESIGN §3.2: ``w(λ) = V (Λ + λ)⁻¹ Vᵀ B`` costs O(n² v) per λ after the
    O(n³) eigendecomposition.  Negative round-off eigenvalues of the PSD G are
    clipped to 0.
    """

    def __init__(self, G, B):
        G = np.asarray(G, dtype=np.float64)
        B = np.asarray(B, dtype=np.float64)
        self.one_d = B.ndim == 1
        B2 = B[:, None] if self.one_d else B
        if G.ndim != 2 or G.shape[0] != G.shape[1] or B2.shape[0] != G.shape[0]:
            raise ValueError(f"G must be (n, n) and B (n,) or (n, v); got {G.shape} and {B.shape}")
        lam, V = np.linalg.eigh((G + G.T) / 2.0)
        self.eigenvalues = np.maximum(lam, 0.0)
        self.V = V
        self.VtB = V.T @ B2

    def _check(self, alpha):
        alpha = float(alpha)
        if not np.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
        return alpha

    def coef(self, alpha) -> np.ndarray:
        """w(λ): (n,) for 1-D B, else (n, v)."""
        alpha = self._check(alpha)
        W = self.V @ (self.VtB / (self.eigenvalues + alpha)[:, None])
        return W[:, 0] if self.one_d else W

    def coefs(self, alphas) -> np.ndarray:
        """Stack of w(λ) for every λ: (a, n) or (a, n, v)."""
        return np.stack([self.coef(a) for a in np.atleast_1d(alphas)]) if len(np.atleast_1d(alphas)) else \
            np.zeros((0,) + self.VtB.shape[:1] + (() if self.one_d else self.VtB.shape[1:]))

    def apply_inverse(self, alpha, R) -> np.ndarray:
        """(G + λI)⁻¹ R for R (n,) or (n, k)."""
        alpha = self._check(alpha)
        R = np.asarray(R, dtype=np.float64)
        Rv = self.V.T @ R
        Rv = Rv / ((self.eigenvalues + alpha)[:, None] if R.ndim == 2 else (self.eigenvalues + alpha))
        return self.V @ Rv

    def inverse(self, alpha) -> np.ndarray:
        """(G + λI)⁻¹ as a dense (n, n) array."""
        alpha = self._check(alpha)
        return (self.V / (self.eigenvalues + alpha)) @ self.V.T
