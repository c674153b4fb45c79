"""Nightly pipeline: views of the store that leave out excluded days and the gate's held-out queries.

Two things keep data out of training without touching the store (it is
append-only, its batches stay as ingested):

* **excluded days** (:mod:`streamrank.pipelines._nightly_exclusions`): group
  (tuple) spans of the store's batch log that a rejected night brought, or
  that were rejected by hand;
* **the gate's held-out queries** of the SGD learners
  (:mod:`streamrank.pipelines._nightly_gate`): every query whose id hashes
  below ``fraction`` (:func:`held_out`) is never trained on, so both the
  candidate and the current model can be judged on them.

:class:`GroupSelection` is a :class:`~streamrank.io.blocks.BlockSource` over
any sorted subset of a source's groups (numbered from 0 in its order): its
blocks are planned and read like any source's, so every learner, metric and
progress display takes it unchanged.  A block's rows are read in one call
over their covering span when that span is at most twice the rows needed
(the held-out queries are ~10 % of a span), else run by run (an excluded day
between two kept ones is never read).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamrank.io.blocks import BlockSource, WrappedSource

__all__ = ["GroupSelection", "held_out", "spans_minus", "group_view", "counted", "HASH_BUCKETS"]

HASH_BUCKETS = 1 << 20


def held_out(qid, fraction: float) -> np.ndarray:
    """Whether each query id is held out of SGD training for the gate: ``splitmix64(key) mod 2²⁰ < fraction·2²⁰``.

    Stable across runs and nights (the hash of :func:`streamrank.rankrls.selection.fold_of`), so a query
    held out on its first night stays held out; ``fraction=0`` holds out nothing.
    """
    from streamrank.rankrls.selection import fold_of

    qid = np.asarray(qid)
    if fraction <= 0 or qid.size == 0:
        return np.zeros(qid.shape[0], dtype=bool)
    return fold_of(qid, HASH_BUCKETS) < int(round(float(fraction) * HASH_BUCKETS))


def spans_minus(lo: int, hi: int, excluded) -> list[tuple[int, int]]:
    """``[lo, hi)`` without the ``excluded`` spans ``[(a, b), ...]``: the kept runs, in order."""
    out, a = [], int(lo)
    for e0, e1 in sorted((int(x), int(y)) for x, y in excluded):
        if e1 <= a or e0 >= hi:
            continue
        if e0 > a:
            out.append((a, min(e0, hi)))
        a = max(a, e1)
        if a >= hi:
            break
    if a < hi:
        out.append((a, int(hi)))
    return [(x, y) for x, y in out if y > x]


def group_view(store, lo, hi, excluded=(), *, fraction=0.0, held=False):
    """Groups ``lo:hi`` of ``store`` without the excluded spans, and (``fraction > 0``) only the queries
    kept for training (``held=False``) or only those held out for the gate (``held=True``).

    Without exclusions in range and without held-out queries it is ``store.groups(lo, hi)`` itself.
    """
    runs = spans_minus(lo, hi, excluded)
    if fraction <= 0 and (runs == [(int(lo), int(hi))] or hi <= lo):
        return store.groups(int(lo), int(hi))
    groups = (np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in runs]) if runs
              else np.zeros(0, dtype=np.int64))
    if fraction > 0 and groups.size:
        qid = store.qid if hasattr(store, "qid") else store._group_qid(0, store.n_groups)   # a weighted view too
        mask = held_out(np.asarray(qid)[groups], fraction)
        groups = groups[mask if held else ~mask]
    return GroupSelection(store, groups)


class GroupSelection(BlockSource):
    """The groups ``groups`` (sorted, unique indices) of ``source`` as a source of their own."""

    def __init__(self, source: BlockSource, groups):
        g = np.asarray(groups, dtype=np.int64).reshape(-1)
        if g.size and (g[0] < 0 or g[-1] >= source.n_groups or np.any(np.diff(g) <= 0)):
            raise ValueError(f"a group selection must be sorted unique indices in 0:{source.n_groups}")
        self.base, self.selected = source, g
        ptr = np.asarray(source.group_ptr, dtype=np.int64)
        sizes = ptr[g + 1] - ptr[g]
        self._gp = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        self._gstart = ptr[g]                       # global first row of every selected group
        self.n_rows, self.n_groups = int(self._gp[-1]), int(g.size)
        self.n_features, self.n_outputs, self.sparse = source.n_features, source.n_outputs, source.sparse
        for attr in ("y_ndim", "feature_names"):
            if hasattr(source, attr):
                setattr(self, attr, getattr(source, attr))
        self._qid = None

    def _group_ptr(self):
        return self._gp

    def _group_qid(self, a, b):
        if self._qid is None:
            self._qid = np.asarray(self.base._group_qid(0, self.base.n_groups))
        return self._qid[self.selected[a:b]]

    def _pieces(self, r0, r1):
        """Global row pieces ``[(a, b), ...]`` of local rows r0:r1 (adjacent groups merged)."""
        g0 = int(np.searchsorted(self._gp, r0, side="right")) - 1
        g1 = int(np.searchsorted(self._gp, r1, side="left"))
        out = []
        for g in range(g0, g1):
            a = self._gstart[g] + max(r0, self._gp[g]) - self._gp[g]
            b = self._gstart[g] + min(r1, self._gp[g + 1]) - self._gp[g]
            if b <= a:
                continue
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], int(b))
            else:
                out.append((int(a), int(b)))
        return out

    def _gather(self, read, r0, r1, stack):
        pieces = self._pieces(r0, r1) or [(0, 0)]
        if len(pieces) == 1:
            return list(_as_tuple(read(*pieces[0])))
        s, e = pieces[0][0], pieces[-1][1]
        if e - s <= 2 * (r1 - r0):            # one read of the covering span, then the rows needed
            idx = np.concatenate([np.arange(a - s, b - s) for a, b in pieces])
            return [None if part is None else part[idx] for part in _as_tuple(read(s, e))]
        parts = [_as_tuple(read(a, b)) for a, b in pieces]
        return [None if col[0] is None else stack(col) for col in zip(*parts)]

    def _read_rows(self, r0, r1):
        X, y = self._gather(self.base._read_rows, r0, r1, _stack)
        return X, y

    def _read_y(self, r0, r1):
        return self._gather(self.base.read_y, r0, r1, _stack)[0]

    def _read_weight(self, r0, r1):
        return self._gather(self.base._read_weight, r0, r1, _stack)[0]


def _as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def _stack(parts):
    if sp.issparse(parts[0]):
        return sp.vstack(parts, format="csr")
    return np.concatenate(parts, axis=0)


class _Counted(WrappedSource):
    def __init__(self, inner, handle):
        super().__init__(inner)
        self.handle = handle
        self.groups = inner.groups

    def _map_block(self, block):
        self.handle.update(block.n_rows)
        return block


def counted(source, handle):
    """``source`` whose every block read adds its rows to the phase ``handle`` (:mod:`streamrank._phases`)."""
    return _Counted(source, handle)
