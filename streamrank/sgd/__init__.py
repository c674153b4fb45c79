"""Sparse SGD rankers (Chen, Bai, Qi, Lin & Carbonell, ICDM 2010).

* :class:`~streamrank.sgd.bilinear.SparseSGDRanker` -- ``q^T W d`` with a
  row-pool W, cumulative L1 shrinkage (Algorithm 1) and refit (eq. 8);
* :class:`~streamrank.sgd.pairwise.PairwiseSGDRanker` -- ``w . (x+ - x-)`` on
  pairs sampled within groups, the same shrinkage with a vector.

Kernels: ``_sparse_w_kernels`` (rows of W in a pool, SGD steps, lazy shrinkage) and
``_pairwise_kernels``; ``_table.SparseW`` owns the pool and its state.
"""
from __future__ import annotations

__all__ = ["SparseSGDRanker", "PairwiseSGDRanker", "MemoryLimitError"]


def __getattr__(name):
    if name == "SparseSGDRanker":
        from .bilinear import SparseSGDRanker

        return SparseSGDRanker
    if name == "PairwiseSGDRanker":
        from .pairwise import PairwiseSGDRanker

        return PairwiseSGDRanker
    if name == "MemoryLimitError":
        from ._table import MemoryLimitError

        return MemoryLimitError
    raise AttributeError(f"module 'streamrank.sgd' has no attribute {name!r}")
