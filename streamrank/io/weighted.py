"""Row weights (``sample_weight``) attached to any block source: :func:`with_weights`.

A :class:`WeightedSource` yields the blocks of its inner source with
``Block.weight`` set to the slice of an in-memory (rows,) float64 array of
weights (validated once: finite, >= 0, one per row).  Statistics learners
pass ``block.weight`` into :meth:`RankStatistics.add_block`, where row i
and row j of a group form a pair of weight w_i w_j (see
:mod:`streamrank.laplacian`).  Planning, order and prefetch are the inner
source's; in a cluster the wrapper travels as one object (weights included).
"""
from __future__ import annotations

import dataclasses

import numpy as np


from ..laplacian import check_weight
from .blocks import BlockSource

__all__ = ["WeightedSource", "with_weights"]


class WeightedSource(BlockSource):
    """The blocks of ``source`` with per-row weights ``weight`` (rows,) attached as ``Block.weight``."""

    def __init__(self, source: BlockSource, weight, name: str = "sample_weight"):
        self.inner = source
        self.weight = check_weight(weight, source.n_rows, name)
        if source.n_rows and not np.any(self.weight > 0):
            raise ValueError(f"{name} is zero on every row: no pair carries any weight")
        self.weight.setflags(write=False)
        self.n_rows, self.n_groups = source.n_rows, source.n_groups
        self.n_features, self.n_outputs = source.n_features, source.n_outputs
        self.sparse = source.sparse
        for attr in ("y_ndim", "global_group", "feature_names"):
            if hasattr(source, attr):
                setattr(self, attr, getattr(source, attr))

    def _group_ptr(self):
        return self.inner.group_ptr

    def _group_qid(self, g0, g1):
        return self.inner._group_qid(g0, g1)

    def _read_rows(self, r0, r1):
        return self.inner._read_rows(r0, r1)

    def _read_y(self, r0, r1):
        return self.inner.read_y(r0, r1)

    def _nnz_at(self, rows):
        return self.inner._nnz_at(rows)

    def _read_weight(self, r0, r1):
        return self.weight[r0:r1]

    def plan(self, *args, **kwargs):
        return self.inner.plan(*args, **kwargs)

    def read_block(self, row0, row1, g0, g1):
        b = self.inner.read_block(row0, row1, g0, g1)
        return dataclasses.replace(b, weight=self.weight[row0:row1])

    def blocks(self, *args, **kwargs):
        """The inner source's blocks (its own reader and prefetch) with their row weights."""
        for b in self.inner.blocks(*args, **kwargs):
            yield dataclasses.replace(b, weight=self.weight[b.start:b.stop])

    def __repr__(self):
        return f"WeightedSource({self.inner!r})"


def with_weights(source: BlockSource, weight, name: str = "sample_weight") -> BlockSource:
    """``source`` itself when ``weight`` is None, else a :class:`WeightedSource`."""
    if weight is None:
        return source
    if isinstance(source, WeightedSource):
        raise ValueError(f"{name}: the source already carries row weights")
    return WeightedSource(source, weight, name)
