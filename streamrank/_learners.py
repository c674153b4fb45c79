"""Which module defines each learner of the package: what ``sr.load`` imports to find a saved model's class.

A module that imports nothing, so that :mod:`streamrank.persistence` finds a
learner's module without importing :mod:`streamrank` (whose lazy names lead
back to persistence) and ``streamrank/__init__`` lists the same names.
"""
from __future__ import annotations

__all__ = ["LEARNERS", "LEARNER_MODULES"]

#: learner class name -> the module that defines it and registers it (``persistence.register_model``)
LEARNERS = {
    "RankRLS": "streamrank.rankrls.linear",
    "KernelRankRLS": "streamrank.rankrls.kernel",
    "TransductiveRankRLS": "streamrank.rankrls.transductive",
    "SparseSGDRanker": "streamrank.sgd.bilinear",
    "PairwiseSGDRanker": "streamrank.sgd.pairwise",
}

#: the modules whose classes must be registered before ``sr.load`` looks one up
LEARNER_MODULES = tuple(dict.fromkeys(LEARNERS.values()))
