"""Groups cut across blocks, for the streaming passes of CG RankRLS (and their cluster version).

A group cut across blocks (``split_groups=True``; one global group of many
rows) is handled exactly: its pieces add ``s_g n_g X_pᵀ u_p`` at once and
keep ``S_g = Σ_p X_pᵀ 1`` and ``t_g = Σ_p 1ᵀ u_p`` (O(n) per open group)
until the last piece subtracts ``s_g S_g t_gᵀ``.

``ties="exclude"`` on a split group (e.g. ``qid=None``, one global group over
many blocks) is exact too.  With the tie classes c of the group (rows of
equal target), ``n_c(i)`` the size of row i's class and
``T_c = 1_cᵀ u``,

    (L u)_i = s_g [ (n_g − n_c(i)) u_i − 1ᵀu + T_{c(i)} ]      (classes with n_c > 1;
                                                            for n_c = 1 the two terms cancel)

The class sizes of the split groups are known before the first product from
a :class:`TieTable` (built once per operator: one pass over the split groups'
pieces).  During a pass each piece adds its row-local part
``s_g (n_g − n_c(i)) X_pᵀ u_p`` and its class sums ``T_c`` (O(classes)
numbers); when the group's last piece is seen the low-rank part
``s_g Σ_c S_c T_c`` (``S_c = X_gᵀ 1_c``) is added — from the cached class
feature sums S_c when (tied classes × n) fits :data:`TIE_CACHE_ENTRIES`
(one pass per product, the usual case: graded or binary targets), else by a
second sweep over the split groups' pieces, ``Z += X_pᵀ (s_g T_{c(i)})_i``
(two passes over those rows per product, memory O(n + classes)).

Row weights (pair weight w_i w_j; :mod:`streamrank.laplacian`) on a split
group, ties="include": ``L_g = s_g (W_g diag(w) − w wᵀ)`` with
``W_g = Σ_{i in g} w_i`` — cost (21) of Pahikkala et al. (2009, "Learning
to rank with pairwise regularized least-squares") with the edge weights of
(20)/(22) replaced by w_i w_j.  The open sums become ``S_g = Σ_p X_pᵀ w_p``
and ``t_g = Σ_p w_pᵀ u_p``; the row-local part ``s_g W_g w_i u_i`` needs the
whole group's weight W_g (:func:`~streamrank.rankrls._group_weights.weight_totals`: read in pieces).

Row weights with ``ties="exclude"``: the pairs inside a tie class c (rows of
equal target) get weight 0.  The tied pairs of c alone form the weighted
Laplacian of the class, ``s_g (W_c diag(w_c) − w_c w_cᵀ)`` (``w_c``: w on
the rows of c, zero elsewhere; ``W_c = Σ_{i in c} w_i``), so the Laplacian of
the weighted pairs *between different levels* is (Σ over the classes of g)

    L_g = s_g [ W_g diag(w) − w wᵀ − Σ_c (W_c diag(w_c) − w_c w_cᵀ) ]
        = s_g [ diag((W_g − W_{c(i)}) w_i) − w wᵀ + Σ_c w_c w_cᵀ ],

    (L u)_i = s_g [ (W_g − W_{c(i)}) w_i u_i − w_i t_g + w_i T_{c(i)} ],
              t_g = Σ_j w_j u_j,  T_c = Σ_{j in c} w_j u_j,

still diagonal plus low rank (one rank-one term per group and per class):
it is cost (21) with the edge weight w_i w_j [y_i ≠ y_j] — the preference
graph of (20)/(22) that keeps only the pairs of different levels, each
weighted w_i w_j.  A one-row class cancels (−W_c w_i u_i + w_i T_c =
−w_i² u_i + w_i² u_i = 0), so, as unweighted, only classes of two or more
rows are kept; a group with one class (all tied) gives L_g = 0.  w ≡ 1 gives
W_c = n_c and the unweighted formula above.  On a piece: the row-local part
``s_g (W_g − W_{c(i)}) w_i u_i`` (W_c from the :class:`TieTable`, which
records the classes' weight sums when the source is weighted), the open sums
``S_g``, ``t_g`` and the class sums ``T_c`` (of w∘u); the group's last piece
adds ``− s_g S_g t_gᵀ + s_g Σ_c S_c T_c`` with the weighted class feature sums
``S_c = X_gᵀ w_c`` (cached in the table, or the second sweep
``Z += X_pᵀ (s_g w_i T_{c(i)})_i``).  The Jacobi diagonal is
``Σ_i s_g (W_g − W_{c(i)}) w_i x_i² − s_g S_g² + s_g Σ_c S_c²`` and the
held-out loss ``rᵀL_g r = s_g [Σ_i (W_g − W_{c(i)}) w_i r_i² − (Σ_i w_i r_i)²
+ Σ_c (Σ_{i in c} w_i r_i)²]``.  Cost: that of the unweighted exclude pass.

:func:`_block_apply` is the per-block product ``(L U)_B`` with the pieces of
split groups kept open in an :class:`_Open` until their last piece; it runs
the same in the local pass (:mod:`streamrank.rankrls.cg`) and on the workers
(:mod:`streamrank.distributed._cg`).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..laplacian import apply_laplacian, group_weights
from ._gram import _id_sums

__all__ = ["TieCounts", "TieTable", "TIE_CACHE_ENTRIES", "finish_classes", "deferred_piece"]

#: floats of cached class feature sums S_c of split groups (ties="exclude"): 8M = 64 MiB
TIE_CACHE_ENTRIES = 1 << 23


def _block_Y(block, n_outputs):
    return np.asarray(block.y, dtype=np.float64).reshape(block.n_rows, n_outputs)


def _col_sum(X):
    if sp.issparse(X):
        return np.asarray(X.sum(axis=0), dtype=np.float64).ravel()
    return np.asarray(X, dtype=np.float64).sum(axis=0)


def _xtu(X, U):
    return np.asarray(X.T @ U, dtype=np.float64)


def _class_sums(X, ids, n_ids, w=None):
    """(n_ids, n) dense float64 feature sums of the rows of each id (weighted sums Σ w_i x_i with ``w``)."""
    if n_ids == 0:
        return np.zeros((0, X.shape[1]))
    if w is not None:
        w = np.asarray(w, dtype=np.float64)
        X = sp.diags(w) @ sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64) * w[:, None]
    if sp.issparse(X):    # rows sorted by id, then one column bincount per id: O(nnz + n_ids n)
        X = X.tocsr()
        order = np.argsort(ids, kind="stable")
        Xs = X[order]
        bounds = np.searchsorted(ids[order], np.arange(n_ids + 1))
        ptr = Xs.indptr[bounds]
        out = np.zeros((n_ids, X.shape[1]))
        for c in range(n_ids):
            a, b = ptr[c], ptr[c + 1]
            if b > a:
                out[c] = np.bincount(Xs.indices[a:b], weights=Xs.data[a:b], minlength=X.shape[1])
        return out
    S = _id_sums(X if sp.issparse(X) else np.asarray(X, dtype=np.float64), ids, n_ids)
    return np.asarray(S.toarray() if sp.issparse(S) else S, dtype=np.float64)


def _col_outputs(k, v):
    """Output whose tie classes column j of a (rows, k) product uses."""
    if v == 1:
        return np.zeros(k, dtype=np.int64)
    if k == v:
        return np.arange(v)
    raise NotImplementedError("ties='exclude' with several outputs: one Laplacian per output; "
                              "apply it to one column per output")


def _is_piece(block):
    """True for a block that is one piece of one split group (``plan`` never mixes pieces and groups)."""
    return block.n_groups == 1 and (block.group_offset[0] != 0 or block.group_size[0] != block.n_rows)


def _max_group_rows(source):
    gp = getattr(source, "group_ptr", None)
    if gp is None:          # a one-block view of whole groups (streamrank.distributed._cg)
        return 0
    return int(np.diff(gp).max()) if len(gp) > 1 else 0


class TieCounts:
    """Mergeable first-pass part of a :class:`TieTable`: the tie classes of the pieces seen so far.

    ``groups[gid][o] = [vals, cnt, S, wsum]``: sorted distinct targets of
    output o among the rows added, their counts, their (len(vals), n) float64
    feature sums — kept while all of them (every group and output) fit
    ``cache_entries`` numbers, else None everywhere (``cache`` False) — and,
    for row-weighted pieces, the classes' weight sums W_c (``wsum``; the
    feature sums are then weighted, ``Σ_c w_i x_i``; None unweighted).
    Cached iff (distinct values × n) <= ``cache_entries``, whatever the order
    the pieces are added and merged in (a union never shrinks).
    """

    def __init__(self, n_features, n_outputs, cache_entries):
        self.n_features = n_features
        self.n_outputs = n_outputs
        self.cache_entries = int(cache_entries)
        self.cache = self.cache_entries > 0
        self.groups = {}
        self.weighted = None          # unknown until a piece is added

    def _entries(self, groups):
        return sum(len(t[0]) for ent in groups.values() for t in ent) * self.n_features

    def _check_weighted(self, weighted):
        if self.weighted is not None and weighted is not None and self.weighted != weighted:
            raise ValueError("the pieces of split groups mix row-weighted and unweighted blocks")
        if weighted is not None:
            self.weighted = weighted

    def add_piece(self, block):
        """Add one piece of a split group (its X, y and, on a weighted source, its row weights)."""
        n, v = self.n_features, self.n_outputs
        Y = _block_Y(block, v)
        w = getattr(block, "weight", None)
        w = None if w is None else np.asarray(w, dtype=np.float64)
        part = TieCounts(n, v, self.cache_entries)
        part.weighted = w is not None
        ent = [np.unique(Y[:, o], return_inverse=True, return_counts=True) for o in range(v)]
        part.cache = self.cache and sum(len(vp) for vp, _, _ in ent) * n <= self.cache_entries
        part.groups[int(block.group_start)] = [
            [vp, cp.astype(np.int64), _class_sums(block.X, inv.ravel(), len(vp), w) if part.cache else None,
             None if w is None else np.bincount(inv.ravel(), weights=w, minlength=len(vp))]
            for vp, inv, cp in ent]
        return self.merge(part)

    def merge(self, other):
        """Add ``other``'s pieces (``other`` is not modified)."""
        n = self.n_features
        self._check_weighted(other.weighted)
        merged = {}
        for gid, ent in other.groups.items():
            mine = self.groups.get(gid)
            if mine is None:
                merged[gid] = [[vals, cnt, S, None, None, wsum] for vals, cnt, S, wsum in ent]
                continue
            out = []
            for (vals, cnt, S, ws), (vp, cp, Sp, wp) in zip(mine, ent):
                allv = np.union1d(vals, vp)
                io, ip = np.searchsorted(allv, vals), np.searchsorted(allv, vp)
                c2 = np.zeros(len(allv), np.int64)
                c2[io] += cnt
                c2[ip] += cp
                w2 = None
                if ws is not None:
                    w2 = np.zeros(len(allv))
                    w2[io] += ws
                    w2[ip] += wp
                out.append([allv, c2, (S, Sp), io, ip, w2])
            merged[gid] = out
        total = dict(self.groups)
        total.update(merged)
        cache = self.cache and other.cache and self._entries(total) <= self.cache_entries
        if not cache:
            for ent in self.groups.values():
                for t in ent:
                    t[2] = None
        for gid, ent in merged.items():
            out = []
            for allv, c2, S, io, ip, w2 in ent:
                S2 = None
                if cache and io is None:
                    S2 = None if S is None else np.array(S)
                elif cache:
                    S2 = np.zeros((len(allv), n))
                    S2[io] += S[0]
                    S2[ip] += S[1]
                fresh = io is None       # arrays of ``other``: copied, ``other`` stays unchanged
                out.append([allv.copy() if fresh else allv, c2.copy() if fresh else c2, S2,
                            None if w2 is None else (w2.copy() if fresh else w2)])
            self.groups[gid] = out
        self.cache = cache
        return self


class TieTable:
    """Tie classes of the groups cut across blocks (``ties="exclude"``, split groups).

    ``groups[gid][o] = (vals, cnt, tied, S, wsum)`` for output o: the sorted
    distinct targets of the group, their counts, the index of each value among
    the tied classes (count > 1; −1 otherwise), ``S`` the (tied classes, n)
    class feature sums ``1_cᵀ X`` — or None when they do not fit
    ``cache_entries`` (a pass then needs a second sweep over the pieces) — and
    ``wsum`` the classes' weight sums W_c of a row-weighted source (``weighted``;
    S is then ``w_cᵀ X``), None otherwise.
    Built by :meth:`build` in one pass over the split groups' pieces (two when
    the sums are only cacheable once the untied values are dropped).
    """

    def __init__(self, n_features, n_outputs, max_rows):
        self.n_features = n_features
        self.n_outputs = n_outputs
        self.max_rows = max_rows
        self.groups = {}
        self.cached = True
        self.n_passes = 0
        self.needs_tied_sums = False
        self.weighted = False

    @classmethod
    def for_source(cls, source, max_rows, cache_entries=None):
        """The table of ``source`` cut at ``max_rows``, or None when no group is split."""
        if _max_group_rows(source) <= max_rows:
            return None
        return cls.build(source, max_rows, cache_entries)

    @classmethod
    def build(cls, source, max_rows, cache_entries=None):
        n, v = source.n_features, source.n_outputs
        cache_entries = TIE_CACHE_ENTRIES if cache_entries is None else int(cache_entries)
        counts = TieCounts(n, v, cache_entries)
        for block in source.blocks(max_rows=max_rows, split_groups=True):
            if _is_piece(block):
                counts.add_piece(block)
        tab = cls.from_counts(counts, max_rows)
        if tab.needs_tied_sums:       # second pass: sums of tied classes only
            for block in source.blocks(max_rows=max_rows, split_groups=True):
                if _is_piece(block) and int(block.group_start) in tab.groups:
                    tab.add_tied_sums(int(block.group_start), tab.tied_sums_of_piece(block))
            tab.needs_tied_sums = False
        return tab

    @classmethod
    def from_counts(cls, counts, max_rows):
        """The table of the summed :class:`TieCounts` of every piece (the first pass).

        When the sums of all distinct values did not fit but those of the tied
        classes do, ``needs_tied_sums`` is True and ``S`` are zeros: add
        :meth:`tied_sums_of_piece` of every piece (a second pass) with
        :meth:`add_tied_sums`, then clear the flag.
        """
        n, v = counts.n_features, counts.n_outputs
        tab = cls(n, v, max_rows)
        tab.n_passes = 1
        tab.weighted = bool(counts.weighted)
        n_tied = 0
        for gid, ent in counts.groups.items():
            out = []
            for vals, cnt, S, wsum in ent:
                keep = cnt > 1
                tied = np.full(len(vals), -1, dtype=np.int64)
                tied[keep] = np.arange(int(keep.sum()))
                n_tied += int(keep.sum())
                out.append([vals, cnt, tied, None if S is None else np.ascontiguousarray(S[keep]), wsum])
            tab.groups[gid] = out
        tab.cached = counts.cache
        if n_tied == 0:
            for ent in tab.groups.values():
                for t in ent:
                    t[3] = np.zeros((0, n))
            tab.cached = True
        elif not counts.cache and n_tied * n <= counts.cache_entries:
            for ent in tab.groups.values():
                for t in ent:
                    t[3] = np.zeros((int((t[2] >= 0).sum()), n))
            tab.n_passes = 2
            tab.needs_tied_sums = True
            tab.cached = True
        return tab

    def tied_sums_of_piece(self, block):
        """Per output: the piece's part (tied classes, n) of the class sums S_c, or None (no tied row)."""
        Y = _block_Y(block, self.n_outputs)
        w = self._piece_weight(block)
        out = []
        for o, (vals, _cnt, tied, _S, _W) in enumerate(self.groups[int(block.group_start)]):
            c = tied[np.searchsorted(vals, Y[:, o])]
            r = np.flatnonzero(c >= 0)
            out.append(_class_sums(block.X[r], c[r], self.n_tied(int(block.group_start), o),
                                   None if w is None else w[r]) if r.size else None)
        return out

    def _piece_weight(self, block):
        """The piece's row weights (None unweighted); a piece that disagrees with the table is an error."""
        w = getattr(block, "weight", None)
        if (w is not None) != self.weighted:
            raise ValueError("a split group's piece is " + ("row-weighted" if w is not None else "unweighted")
                             + " but its tie table was built from " + ("weighted" if self.weighted else
                                                                       "unweighted") + " pieces")
        return None if w is None else np.asarray(w, dtype=np.float64)

    def add_tied_sums(self, gid, parts):
        for t, P in zip(self.groups[gid], parts):
            if P is not None:
                t[3] += P

    def without_sums(self):
        """A copy without the class feature sums (what :meth:`rows` needs: O(distinct targets), not O(n))."""
        tab = TieTable(self.n_features, self.n_outputs, self.max_rows)
        tab.cached, tab.n_passes, tab.weighted = self.cached, self.n_passes, self.weighted
        tab.groups = {gid: [[vals, cnt, tied, None, wsum] for vals, cnt, tied, _, wsum in ent]
                      for gid, ent in self.groups.items()}
        return tab

    def rows(self, block, Y, o):
        """(class index among the group's tied classes or −1, n_c or 0) of every row of a piece.

        Weighted table: the class weight sum W_c (float) instead of n_c (module doc).
        """
        vals, cnt, tied, _, wsum = self.groups[int(block.group_start)][o]
        pos = np.searchsorted(vals, Y[:, o])
        if np.any(pos >= len(vals)) or np.any(vals[np.minimum(pos, len(vals) - 1)] != Y[:, o]):
            raise ValueError("a split group's targets changed between passes (tie table out of date)")
        c = tied[pos]
        return c, np.where(c >= 0, (cnt if wsum is None else wsum)[pos], 0)

    def n_tied(self, gid, o):
        return int((self.groups[gid][o][2] >= 0).sum())

    def class_term(self, gid, s, T, outs):
        """``s Σ_c S_c T_c`` (n, k) for the class sums T (list over columns) of a completed group."""
        Z = np.zeros((self.n_features, len(T)))
        for j, o in enumerate(outs):
            S = self.groups[gid][o][3]
            if S.shape[0]:
                Z[:, j] = s * (S.T @ T[j])
        return Z

    def diagonal_term(self, group_weight, o=0):
        """``Σ_g s_g Σ_c S_c²`` over the tied classes of output o (zero when the sums are not cached)."""
        d = np.zeros(self.n_features)
        for ent in self.groups.values():
            vals, cnt, tied, S, _ = ent[o]
            if S is not None and S.shape[0]:
                size = int(cnt.sum())
                s = float(group_weights(np.array([size]), group_weight)[0])
                d += s * (S * S).sum(axis=0)
        return d


class _Open:
    """Running sums of groups cut across blocks (and their class sums T_c, ties="exclude").

    ``known``: optional dict gid -> S_g = X_gᵀ1 of split groups from an
    earlier pass (S_g does not depend on the vector); a piece of a known group
    skips its column sum, and groups completed here are recorded while the
    dict holds fewer than ``known_budget`` numbers.
    """

    def __init__(self, group_weight, known=None, known_budget=0):
        self.group_weight = group_weight
        self.groups = {}
        self.class_sums = {}
        self.tie_done = []
        self.known = known
        self.known_budget = known_budget

    def needs_S(self, gid):
        return self.known is None or gid not in self.known

    def add_classes(self, gid, c, U, table, outs):
        """Accumulate T_c = Σ_{i in c} U_ij per column j (c: tied class index per row, −1 untied)."""
        Ts = self.class_sums.get(gid)
        if Ts is None:
            Ts = self.class_sums[gid] = [np.zeros(table.n_tied(gid, o)) for o in outs]
        for j, o in enumerate(outs):
            r = c[o] >= 0
            if r.any():
                Ts[j] += np.bincount(c[o][r], weights=U[r, j], minlength=len(Ts[j]))

    def add(self, gid, rows, size, S, t):
        st = self.groups.get(gid)
        if st is None:
            self.groups[gid] = st = [0, size, 0.0, 0.0]
        st[0] += rows
        st[2] = st[2] + S
        st[3] = st[3] + t
        if st[0] == size:
            del self.groups[gid]
            s = float(group_weights(np.array([size]), self.group_weight)[0])
            Ts = self.class_sums.pop(gid, None)
            if Ts is not None:
                self.tie_done.append((gid, s, Ts))
            S_g = st[2]
            if self.known is not None:
                if gid in self.known:
                    S_g = self.known[gid]
                elif np.ndim(S_g) and sum(a.size for a in self.known.values()) + S_g.size <= self.known_budget:
                    self.known[gid] = S_g
            return s, S_g, st[3]
        return None

    def check(self):
        if self.groups:
            raise ValueError(f"{len(self.groups)} split group(s) were not seen completely in a pass")


def _piece_classes(block, Y, table, outs):
    """Per output used: (class index or −1, n_c or 0) of the piece's rows."""
    return {int(o): table.rows(block, Y, int(o)) for o in np.unique(outs)}


def _weighted_piece(block, group_weight, ties, weight_total, what="row weights", ties_table=None):
    """``(s_g, W_g, w)`` of a piece of a split group with row weights; no totals (or no tie table) raise."""
    size = int(block.group_size[0])
    if weight_total is None:
        raise NotImplementedError(
            f"{what} with a group split across blocks (group of {size} rows, more than the block budget) need the "
            "whole group's weight: not available here (a cluster pass); raise max_rows above the largest group")
    if ties == "exclude" and ties_table is None:
        raise NotImplementedError("ties='exclude' on a group cut across blocks needs the tie classes of the "
                                  "whole group (cg.TieTable); build one with TieTable.for_source")
    s = float(group_weights(np.array([size]), group_weight)[0])
    return s, weight_total(int(block.group_start)), np.asarray(block.weight, dtype=np.float64)


def _block_apply(block, U, Y, group_weight, ties, opens, ties_table=None, weight_total=None):
    """(L U)_B for the block's rows, with the pieces of split groups handled by ``opens``.

    Returns (LU, closes) where closes is a list of (s, S_g, t_g) of groups
    completed by this block (their low-rank part is still to be subtracted).
    With ``ties="exclude"`` a piece also needs ``ties_table``; its class
    sums go to ``opens`` (``opens.tie_done`` lists completed groups).
    Row weights on a piece: ``(L U)_i = s_g (W_g w_i u_i − w_i t_g)``
    with ``t_g = Σ_{j in g} w_j u_j`` over all pieces, so the open sums are
    ``S_g = Σ_p X_pᵀ w_p`` and ``t_g`` (``weight_total``: :func:`~streamrank.rankrls._group_weights.weight_totals`);
    ties="exclude" subtracts ``s_g W_{c(i)} w_i u_i`` and keeps the class sums
    of ``w∘u`` (module doc).
    """
    gp = block.group_ptr
    local = np.diff(gp)
    whole = (block.group_offset == 0) & (block.group_size == local)
    closes = []
    if whole.all():
        yy = None
        if ties == "exclude":
            _col_outputs(U.shape[1], Y.shape[1])
            yy = Y[:, 0] if Y.shape[1] == 1 else Y
        LU = apply_laplacian(U, gp, y=yy, group_weight=group_weight, ties=ties, group_size=block.group_size,
                             weight=getattr(block, "weight", None))
        return LU, closes
    # one piece of one split group (BlockSource.plan never mixes pieces with other groups)
    if getattr(block, "weight", None) is not None:
        s, W_g, w = _weighted_piece(block, group_weight, ties, weight_total, ties_table=ties_table)
        gid = int(block.group_start)
        wU = w[:, None] * np.asarray(U, dtype=np.float64)
        LU = s * W_g * wU
        if ties == "exclude":           # − s_g W_c(i) w_i u_i here, + s_g S_c T_c when the group completes
            ties_table._piece_weight(block)
            outs = _col_outputs(U.shape[1], Y.shape[1])
            cls = _piece_classes(block, Y, ties_table, outs)
            for j, o in enumerate(outs):
                LU[:, j] -= s * cls[int(o)][1] * wU[:, j]
            opens.add_classes(gid, {o: cls[o][0] for o in cls}, wU, ties_table, [int(o) for o in outs])
        S_piece = _xtu(block.X, w[:, None])[:, 0] if opens.needs_S(gid) else 0.0
        done = opens.add(gid, block.n_rows, int(block.group_size[0]), S_piece, wU.sum(axis=0))
        return LU, ([done] if done is not None else [])
    size = int(block.group_size[0])
    gid = int(block.group_start)
    s = float(group_weights(np.array([size]), group_weight)[0])
    LU = s * size * np.asarray(U, dtype=np.float64)
    if ties == "exclude":
        if ties_table is None:
            raise NotImplementedError("ties='exclude' on a group cut across blocks needs the tie classes of the "
                                      "whole group (cg.TieTable); build one with TieTable.for_source")
        ties_table._piece_weight(block)
        outs = _col_outputs(U.shape[1], Y.shape[1])
        cls = _piece_classes(block, Y, ties_table, outs)
        for j, o in enumerate(outs):
            LU[:, j] -= s * cls[int(o)][1] * U[:, j]
        opens.add_classes(gid, {o: cls[o][0] for o in cls}, U, ties_table, [int(o) for o in outs])
    S_piece = _col_sum(block.X) if opens.needs_S(gid) else 0.0
    done = opens.add(gid, block.n_rows, size, S_piece, U.sum(axis=0))
    if done is not None:
        closes.append(done)
    return LU, closes


def finish_classes(Z, table, tie_done, k, v, deferred):
    """Class term of completed split groups: ``Z += s_g Σ_c S_c T_cᵀ`` from the cached sums, or else
    record ``(s_g, T, outputs)`` in ``deferred`` for a second sweep (:func:`deferred_piece`).

    ``tie_done``: (gid, s_g, [T per column]) of the groups whose last piece was seen.
    """
    outs = [int(o) for o in _col_outputs(k, v)]
    for gid, s, Ts in tie_done:
        if table.cached:
            Z += table.class_term(gid, s, Ts, outs)
        else:
            deferred[gid] = (s, Ts, outs)
    return Z


def deferred_piece(block, table, deferred, k, v):
    """``X_pᵀ (s_g T_{c(i)})_i`` (n, k) of one piece of a split group of ``deferred`` (uncached class sums);
    ``X_pᵀ (s_g w_i T_{c(i)})_i`` with row weights."""
    s, Ts, outs = deferred[int(block.group_start)]
    Y = _block_Y(block, v)
    w = table._piece_weight(block)
    cls = _piece_classes(block, Y, table, np.asarray(outs))
    R = np.zeros((block.n_rows, k))
    for j, o in enumerate(outs):
        c = cls[o][0]
        r = c >= 0
        R[r, j] = s * Ts[j][c[r]] * (1.0 if w is None else w[r])
    return _xtu(block.X, R)


def _ties_table(source, ties, max_rows, ties_table):
    if ties != "exclude" or ties_table is not None:
        return ties_table
    return TieTable.for_source(source, max_rows)
