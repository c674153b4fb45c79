"""The whole-group weight W_g = Σ_{i in g} w_i of the groups cut across blocks, read in pieces.

A piece of a split group needs its whole group's weight W_g for the row-local
part ``s_g W_g w_i u_i`` of the weighted Laplacian ``L_g = s_g (W_g diag(w) −
w wᵀ)`` (:mod:`streamrank.rankrls._split_groups`).  W_g is the difference of
the running sum of the weights in row order,

    W_g = c[ptr_{g+1}] − c[ptr_g],    c[0] = 0,  c[r + 1] = c[r] + w_r,

and the running sum is built piece by piece (``max_rows`` weights at a time,
carrying c across pieces).  Additions happen in the same order as ``np.cumsum``
of the whole column, so W_g is the same float64 number bit for bit — without
holding the column: memory is one piece, and only the boundaries of the groups
asked for (those larger than ``max_rows``: the only ones ever split) are kept.
A store's weight column (8 bytes a row) is therefore never read whole.
"""
from __future__ import annotations

import numpy as np

from .._defaults import DEFAULT_BLOCK_ROWS

__all__ = ["GroupWeightTotals", "weight_totals"]


def _weighted_base(source):
    """The row-weighted source under ``source``'s views (``.source``: cg CV folds; ``.inner``: wrappers),
    which keep its group numbering; None if there is none.  A proxy that forwards every attribute (a
    cluster worker's source) counts as the source it forwards to (``row_weighted``)."""
    base = source
    while not getattr(base, "row_weighted", False):
        nxt = getattr(base, "source", None)
        nxt = nxt if nxt is not None else getattr(base, "inner", None)
        if nxt is None:
            return None
        base = nxt
    return base


class GroupWeightTotals:
    """``total(g)`` = W_g of a row-weighted source, from one streamed pass over its weights (module doc).

    The first call reads the weights up to the end of the last group larger
    than ``max_rows`` (or of ``g``, if that is further), ``max_rows`` at a
    time, and keeps c at those groups' boundaries; a later call for a group
    not kept reads again (not done by the passes, which only ask for split
    groups).  ``max_rows=None`` (a cluster task, which sees one piece): keep
    only the groups asked for, reading :data:`DEFAULT_BLOCK_ROWS` at a time.
    """

    def __init__(self, source, max_rows: int | None = DEFAULT_BLOCK_ROWS):
        self.source = source
        self.max_rows = None if max_rows is None else max(1, int(max_rows))
        self._ptr = np.asarray(source.group_ptr, dtype=np.int64)
        self._at = {}                 # row index -> c[row]
        self.rows_read = 0            # weights read so far (tests: never the whole column at once)

    def __call__(self, gid: int) -> float:
        gid = int(gid)
        a, b = int(self._ptr[gid]), int(self._ptr[gid + 1])
        if a not in self._at or b not in self._at:
            self._scan(gid)
        return float(self._at[b] - self._at[a])

    def _scan(self, gid):
        ptr = self._ptr
        big = np.flatnonzero(np.diff(ptr) > self.max_rows) if self.max_rows else np.zeros(0, dtype=np.int64)
        step = self.max_rows or DEFAULT_BLOCK_ROWS
        want = np.unique(np.concatenate((ptr[big], ptr[big + 1], ptr[[gid, gid + 1]],
                                         np.array(list(self._at), dtype=np.int64))))
        carry = 0.0
        at = {0: carry} if want[0] == 0 else {}
        r, end = 0, int(want[-1])
        while r < end:
            r1 = min(r + step, end)
            w = np.asarray(self.source._read_weight(r, r1), dtype=np.float64)
            self.rows_read += r1 - r
            c = np.cumsum(np.concatenate(([carry], w)))      # c[k] = c[r + k]: the same additions, in order
            lo, hi = np.searchsorted(want, r + 1, side="left"), np.searchsorted(want, r1, side="right")
            for row in want[lo:hi]:                            # the boundaries in rows r+1 .. r1
                at[int(row)] = c[int(row) - r]
            carry = c[-1]
            r = r1
        self._at = at


def weight_totals(source, max_rows: int | None = DEFAULT_BLOCK_ROWS):
    """``total(g)`` = W_g of a row-weighted source (:class:`GroupWeightTotals`), or None without weights.

    Looks through views that keep the base source's group numbering.  Nothing
    is read until a piece of a split group asks for its total.
    """
    base = _weighted_base(source)
    return None if base is None else GroupWeightTotals(base, max_rows)
