"""The group Laplacian of least-squares ranking (Pahikkala et al. 2009, eqs. (21), (24), (25)).

For a query group ``g`` with ``n_g`` rows the magnitude-preserving cost (21)
over all within-group pairs is

    c_g(f) = Σ_{i<j in g} ((y_i - y_j) - (f_i - f_j))² = (y_g - f_g)ᵀ L_g (y_g - f_g),
    L_g = s_g (n_g I - 1 1ᵀ)                                         (eq. 25: D - P Pᵀ)

with a per-group weight ``s_g`` (:func:`group_weights`):

* ``"pair"``  s_g = 1 (every pair counts once; the papers' default);
* ``"query"`` s_g = 1 / (n_g (n_g - 1) / 2), 0 when n_g < 2 (every query weighs the same);
* ``"size"``  s_g = 1 / n_g (RLScore's QueryRankRLS: L_g = I - 1 1ᵀ / n_g).

``ties="exclude"`` drops the pairs with equal targets.  Tie classes c (rows
of a group with equal y) are complete subgraphs, so

    L_g = s_g (diag(n_g - n_c(i)) - 1 1ᵀ + Σ_c 1_c 1_cᵀ)

— still diagonal plus low rank.  Applying it costs O(rows) once the tie
classes are known; finding them sorts y inside each group (numpy lexsort,
O(rows log rows) with a small constant).  The ``"query"`` weight always
counts all n_g (n_g - 1)/2 pairs of the group, tied or not.

**Row weights** (``weight=``, ``sample_weight`` of the learners): row i
carries w_i >= 0 and the pair (i, j) the weight w_i w_j.  Then

    Σ_{i<j in g} w_i w_j (e_i - e_j)(e_i - e_j)ᵀ = (Σ_g w) diag(w) - w wᵀ,
    L_g = s_g ((Σ_g w) diag(w) - w wᵀ)

(the sum over ordered pairs i ≠ j is twice this; we keep the unordered
convention of cost (21), so w ≡ 1 gives back ``s_g (n_g I - 1 1ᵀ)``
exactly).  Still diagonal plus rank one: ``L_g u = s_g (W_g w∘u - w (wᵀu))``
in O(n_g), W_g = Σ_g w.  Excluding ties subtracts the same form per tie
class c (W_c = Σ_c w):

    L_g = s_g (diag(w_i (W_g - W_c(i))) - w wᵀ + Σ_c w_c w_cᵀ).

A per-group weight is the special case w_i = √a_g on the rows of group g
(pair weight a_g).  ``s_g`` of ``"query"``/``"size"`` still counts rows (n_g),
not weights.

Block-level helpers here are what every RankRLS learner (primal, cg, kernel,
sparse) shares; numba loops are in :mod:`streamrank._laplacian_kernels`.
"""
from __future__ import annotations

import numpy as np

from . import _laplacian_kernels as _k

__all__ = [
    "GROUP_WEIGHTS",
    "TIES",
    "group_weights",
    "tie_classes",
    "apply_laplacian",
    "laplacian_dense",
    "check_group_weight",
    "check_ties",
    "check_weight",
]

GROUP_WEIGHTS = ("pair", "query", "size")
TIES = ("include", "exclude")


def check_group_weight(group_weight) -> str:
    if group_weight not in GROUP_WEIGHTS:
        raise ValueError(f"group_weight must be one of {GROUP_WEIGHTS}, got {group_weight!r}")
    return group_weight


def check_ties(ties) -> str:
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    return ties


def check_weight(weight, rows: int, name: str = "sample_weight") -> np.ndarray:
    """Row weights as float64 (rows,): finite and >= 0, else a ValueError naming the first bad row."""
    w = np.asarray(weight)
    if w.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric (one weight per row); got dtype {w.dtype}")
    w = np.ascontiguousarray(w, dtype=np.float64).reshape(-1) if w.ndim <= 1 else w
    if w.ndim != 1 or w.shape[0] != rows:
        raise ValueError(f"{name} must have one weight per row, shape ({rows},); got shape {np.shape(weight)}")
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}] = {float(w[bad[0]])}: weights must be finite and >= 0")
    return w


def group_weights(group_size, group_weight: str = "pair") -> np.ndarray:
    """Per-group scale ``s_g`` of ``L_g = s_g (n_g I - 1 1ᵀ)`` as float64.

    ``"pair"``: 1; ``"query"``: 1 / (n_g (n_g - 1) / 2), 0 for n_g < 2;
    ``"size"``: 1 / n_g, 0 for n_g = 0.
    """
    check_group_weight(group_weight)
    n = np.asarray(group_size, dtype=np.float64)
    if group_weight == "pair":
        return np.ones_like(n)
    out = np.zeros_like(n)
    if group_weight == "query":
        pairs = n * (n - 1.0) / 2.0
        np.divide(1.0, pairs, out=out, where=pairs > 0)
    else:
        np.divide(1.0, n, out=out, where=n > 0)
    return out


def tie_classes(y, group_ptr):
    """Label every row with its tie class: rows of one group with equal ``y``.

    Parameters
    ----------
    y : (rows,) float array
        The targets of the rows.
    group_ptr : (groups + 1,) int64
        Local group offsets.

    Returns
    -------
    class_id : (rows,) int64 in [0, n_classes)
        The tie class of each row.
    class_group
        (n_classes,) int64, the group of each class
    class_size : (n_classes,) int64
        The number of rows in each class.
    """
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    group_ptr = np.asarray(group_ptr, dtype=np.int64)
    rows = y.shape[0]
    if rows == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy(), z.copy()
    gid = np.repeat(np.arange(len(group_ptr) - 1, dtype=np.int64), np.diff(group_ptr))
    order = np.lexsort((y, gid))
    ys, gs = y[order], gid[order]
    new = np.empty(rows, dtype=bool)
    new[0] = True
    new[1:] = (ys[1:] != ys[:-1]) | (gs[1:] != gs[:-1])
    cls_sorted = np.cumsum(new) - 1
    class_id = np.empty(rows, dtype=np.int64)
    class_id[order] = cls_sorted
    starts = np.flatnonzero(new)
    class_group = gs[starts].astype(np.int64)
    class_size = np.diff(np.append(starts, rows)).astype(np.int64)
    return class_id, class_group, class_size


def _as_2d(U):
    U = np.asarray(U)
    if U.ndim == 1:
        return U.reshape(-1, 1), True
    if U.ndim != 2:
        raise ValueError(f"U must be (rows,) or (rows, k); got shape {U.shape}")
    return U, False


def _check_ptr(group_ptr, rows):
    gp = np.ascontiguousarray(group_ptr, dtype=np.int64)
    if gp.ndim != 1 or gp.size < 1 or gp[0] != 0 or gp[-1] != rows or np.any(np.diff(gp) < 0):
        raise ValueError(
            f"group_ptr must be non-decreasing offsets from 0 to the number of rows ({rows}); "
            f"got {gp[:5]}... (length {gp.size})"
        )
    return gp


def apply_laplacian(U, group_ptr, *, y=None, group_weight: str = "pair", ties: str = "include",
                    group_size=None, weight=None) -> np.ndarray:
    """``L @ U`` for the block Laplacian, in O(rows · k).

    Parameters
    ----------
    U : (rows,) or (rows, k) array
        The vectors the Laplacian is applied to.
    group_ptr
        (groups + 1,) local group offsets
    y : (rows,) or (rows, k) array, optional
        The targets; needed for ``ties="exclude"`` (tie
        classes).  With k > 1 columns of y, column j of U uses the tie classes
        of y[:, j].
    group_weight, ties
        See the module docstring.
    group_size : optional full group sizes for the weights (defaults to
        ``diff(group_ptr)``); only the weight uses it — applying L to a piece
        of a split group is not the piece of ``L U`` (use
        :class:`~streamrank.rankrls._statistics.RankStatistics` for that).

    Returns
    -------
    ndarray
        ``L U``: float64, the shape of U.
    """
    check_group_weight(group_weight)
    check_ties(ties)
    U2, was_1d = _as_2d(U)
    gp = _check_ptr(group_ptr, U2.shape[0])
    if U2.dtype not in (np.float32, np.float64):
        U2 = U2.astype(np.float64)
    # C-contiguous and writeable: numba compiles a kernel once per layout and read-only flag, and the
    # kernels read U entry by entry (a copy of a read-only or strided U gives the same numbers)
    U2 = np.require(U2, None, ["C", "W"])
    sizes = np.diff(gp) if group_size is None else np.asarray(group_size, dtype=np.int64)
    scale = group_weights(sizes, group_weight)
    if weight is not None:
        return _apply_weighted(U2, gp, y, scale, check_weight(weight, U2.shape[0], "weight"), ties, was_1d)
    out = _k.laplacian_groups(U2, gp, scale)
    if ties == "exclude":
        if y is None:
            raise ValueError('ties="exclude" needs y (the targets define the tie classes)')
        Y2, _ = _as_2d(y)
        if Y2.shape[0] != U2.shape[0]:
            raise ValueError(f"y has {Y2.shape[0]} rows but U has {U2.shape[0]}")
        if Y2.shape[1] == 1:
            cid, cgroup, _ = tie_classes(Y2[:, 0], gp)
            _k.laplacian_classes(U2, cid, len(cgroup), scale[cgroup], out)
        elif Y2.shape[1] == U2.shape[1]:
            for j in range(U2.shape[1]):
                cid, cgroup, _ = tie_classes(Y2[:, j], gp)
                col = np.ascontiguousarray(out[:, j : j + 1])
                _k.laplacian_classes(np.ascontiguousarray(U2[:, j : j + 1]), cid, len(cgroup),
                                     scale[cgroup], col)
                out[:, j] = col[:, 0]
        else:
            raise ValueError(
                f"y has {Y2.shape[1]} columns and U {U2.shape[1]}; with ties='exclude' y must have "
                "one column or one per column of U"
            )
    return out[:, 0] if was_1d else out


def _apply_weighted(U2, gp, y, scale, w, ties, was_1d):
    """``L U`` with row weights: s_g (W_g w∘U - w Σ_g w∘U) (minus the same per tie class), O(rows · k)."""
    rows, k = U2.shape
    gid = np.repeat(np.arange(len(gp) - 1), np.diff(gp))
    U2 = np.asarray(U2, dtype=np.float64)
    wU = w[:, None] * U2

    def part(labels, n_labels, sign, out, col=slice(None)):
        Wl = np.bincount(labels, weights=w, minlength=n_labels)
        Sl = _k.id_sums(np.ascontiguousarray(wU[:, col]), labels, n_labels)
        sc = scale[gid][:, None]
        out[:, col] += sign * sc * (Wl[labels][:, None] * wU[:, col] - w[:, None] * Sl[labels])

    out = np.zeros((rows, k))
    part(gid, len(gp) - 1, 1.0, out)
    if ties == "exclude":
        if y is None:
            raise ValueError('ties="exclude" needs y (the targets define the tie classes)')
        Y2, _ = _as_2d(y)
        if Y2.shape[0] != rows:
            raise ValueError(f"y has {Y2.shape[0]} rows but U has {rows}")
        if Y2.shape[1] not in (1, k):
            raise ValueError(f"y has {Y2.shape[1]} columns and U {k}; with ties='exclude' y must have "
                             "one column or one per column of U")
        cols = [slice(None)] if Y2.shape[1] == 1 else [slice(j, j + 1) for j in range(k)]
        for j, col in enumerate(cols):
            cid, cgroup, _ = tie_classes(Y2[:, j], gp)
            part(cid, len(cgroup), -1.0, out, col)
    return out[:, 0] if was_1d else out


def laplacian_dense(group_ptr, *, y=None, group_weight: str = "pair", ties: str = "include",
                    weight=None) -> np.ndarray:
    """The (m, m) float64 Laplacian of all groups (small m: dual solvers, tests)."""
    gp = np.asarray(group_ptr, dtype=np.int64)
    m = int(gp[-1])
    if ties == "exclude" and y is not None and np.ndim(y) == 2 and np.shape(y)[1] != 1:
        raise NotImplementedError(
            "laplacian_dense with ties='exclude' needs one output (each output has its own tie classes)"
        )
    yy = None if y is None else np.asarray(y, dtype=np.float64).reshape(m, -1)[:, 0]
    return apply_laplacian(np.eye(m), gp, y=yy, group_weight=group_weight, ties=ties, weight=weight)
