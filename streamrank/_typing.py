"""Type aliases of the public API's hints (for type checkers and readers; nothing here runs).

Every module that uses them has ``from __future__ import annotations``, so
the hints stay strings at run time: importing streamrank imports neither
``numpy.typing`` nor scipy for them.

* :data:`ArrayLike` — anything ``numpy.asarray`` takes (targets, query ids, weights).
* :data:`MatrixLike` — a feature matrix: an array, a scipy.sparse matrix (CSR)
  or a table (pandas / Arrow, columns by name).
* :data:`PathLike` — a local path or a URL string (``s3://...``).
* :data:`Seed` — ``random_state``: None (fresh entropy), an int seed or a numpy Generator.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import scipy.sparse as sp

    ArrayLike = npt.ArrayLike
    MatrixLike = Union[npt.ArrayLike, sp.spmatrix, sp.sparray]
    PathLike = Union[str, os.PathLike[str]]
    Seed = Union[None, int, np.random.Generator]
else:                        # at run time the hints are strings (``from __future__ import annotations``)
    ArrayLike = MatrixLike = PathLike = Seed = Any

__all__ = ["ArrayLike", "MatrixLike", "PathLike", "Seed"]
