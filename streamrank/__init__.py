"""streamrank: learning to rank from data that does not fit in memory.

Chunked readers stream query groups and (query, d+, d-) tuples from zarr
stores (and numpy, scipy.sparse, dask arrays) into numba-jitted learners:
RankRLS (primal, conjugate gradient, kernel, sparse) and sparse SGD rankers.

Public names are imported lazily so that ``import streamrank`` stays cheap.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._learners import LEARNER_MODULES  # noqa: F401  (modules whose classes sr.load() registers before a lookup)
from ._learners import LEARNERS as _LEARNERS
from ._version import __version__  # noqa: F401

# public name -> module that defines it
_NAMES = {
    "Block": "streamrank.io.blocks",
    "BlockSource": "streamrank.io.blocks",
    "as_source": "streamrank.io.sources",
    "ArraySource": "streamrank.io.sources",
    "DaskSource": "streamrank.io.sources",
    "GroupStore": "streamrank.io.group_store",
    "StoreFormatError": "streamrank.io.schema",
    "TupleStore": "streamrank.io.tuple_store",
    "TupleBatch": "streamrank.io.tuples",
    "TupleSource": "streamrank.io.tuples",
    "as_tuple_source": "streamrank.io.tuples",
    "PairBatch": "streamrank.io.pairs",
    "read_svmlight": "streamrank.io.svmlight",
    "iter_svmlight": "streamrank.io.svmlight",
    "pairs_from_groups": "streamrank.io.pairs",
    **_LEARNERS,
    "save": "streamrank.persistence",
    "export": "streamrank.exporters",
    "load": "streamrank.persistence",
    "NotFittedError": "streamrank.base",
    "DEFAULT_ALPHAS": "streamrank._defaults",
    "DEFAULT_BLOCK_ROWS": "streamrank._defaults",
}
_SUBMODULES = {"metrics", "distributed", "plot", "datasets", "persistence", "io", "rankrls", "sgd",
               "exporters", "normalize"}

__all__ = sorted(set(_NAMES) | {"metrics", "distributed", "plot", "__version__"})


if TYPE_CHECKING:        # what type checkers see of the lazy names (nothing is imported at run time)
    from . import distributed, metrics, plot  # noqa: F401
    from ._defaults import DEFAULT_ALPHAS, DEFAULT_BLOCK_ROWS  # noqa: F401
    from .base import NotFittedError  # noqa: F401
    from .exporters import export  # noqa: F401
    from .io.blocks import Block, BlockSource  # noqa: F401
    from .io.group_store import GroupStore  # noqa: F401
    from .io.pairs import PairBatch, pairs_from_groups  # noqa: F401
    from .io.schema import StoreFormatError  # noqa: F401
    from .io.sources import ArraySource, DaskSource, as_source  # noqa: F401
    from .io.svmlight import iter_svmlight, read_svmlight  # noqa: F401
    from .io.tuple_store import TupleStore  # noqa: F401
    from .io.tuples import TupleBatch, TupleSource, as_tuple_source  # noqa: F401
    from .persistence import load, save  # noqa: F401
    from .rankrls.kernel import KernelRankRLS  # noqa: F401
    from .rankrls.linear import RankRLS  # noqa: F401
    from .rankrls.transductive import TransductiveRankRLS  # noqa: F401
    from .sgd.bilinear import SparseSGDRanker  # noqa: F401
    from .sgd.pairwise import PairwiseSGDRanker  # noqa: F401

def __getattr__(name):
    if name in _NAMES:
        mod = importlib.import_module(_NAMES[name])
        value = getattr(mod, name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        mod = importlib.import_module(f"streamrank.{name}")
        globals()[name] = mod
        return mod
    raise AttributeError(f"module 'streamrank' has no attribute {name!r}")


def __dir__():
    return __all__
