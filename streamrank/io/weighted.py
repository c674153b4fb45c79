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
from .blocks import BlockSource, WrappedSource

__all__ = ["WeightedSource", "with_weights"]


class WeightedSource(WrappedSource):
    """The blocks of ``source`` with per-row weights ``weight`` (rows,) attached as ``Block.weight``."""

    def __init__(self, source: BlockSource, weight, name: str = "sample_weight"):
        super().__init__(source)
        self.weight = check_weight(weight, source.n_rows, name)
        if source.n_rows and not np.any(self.weight > 0):
            raise ValueError(f"{name} is zero on every row: no pair carries any weight")
        self.weight.setflags(write=False)

    def _read_weight(self, r0, r1):
        return self.weight[r0:r1]

    def _map_block(self, b):
        return dataclasses.replace(b, weight=self.weight[b.start:b.stop])

    def __repr__(self):
        return f"WeightedSource({self.inner!r})"


def with_weights(source: BlockSource, weight, name: str = "sample_weight") -> BlockSource:
    """``source`` itself when ``weight`` is None, else a :class:`WeightedSource`."""
    if weight is None:
        return source
    if isinstance(source, WeightedSource):
        raise ValueError(f"{name}: the source already carries row weights")
    return WeightedSource(source, weight, name)
