"""The package's shared defaults and the check of a regularization grid (one home for all learners).

* :data:`DEFAULT_BLOCK_ROWS` -- the block budget (rows per block) of every
  streaming pass a learner, a selection routine, the CLI, the pipelines or
  :mod:`streamrank.distributed` makes when the caller gives none;
* :data:`DEFAULT_ALPHAS` -- the papers' regularization grid 2⁻¹⁵ … 2¹⁵;
* :func:`check_alphas` -- every ``alphas=`` argument goes through it.

>>> DEFAULT_ALPHAS[0], DEFAULT_ALPHAS[-1], DEFAULT_ALPHAS.size
(np.float64(3.0517578125e-05), np.float64(32768.0), 31)
>>> check_alphas([0.5, 2])
array([0.5, 2. ])
"""
from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_BLOCK_ROWS", "DEFAULT_ALPHAS", "check_alphas"]

DEFAULT_BLOCK_ROWS = 65_536
DEFAULT_ALPHAS = 2.0 ** np.arange(-15, 16)  # the papers' grid 2^-15 ... 2^15


def check_alphas(alphas=None, *, allow_empty: bool = False) -> np.ndarray:
    """A grid of regularization parameters as a 1-D float64 array (``None``: :data:`DEFAULT_ALPHAS`).

    Every value must be a finite number > 0.  An empty grid is an error
    unless ``allow_empty`` (a regularization *path* over no λ is empty).
    """
    from ._validation import check_alpha  # here, not at the top: the CLI's --help imports this module

    if alphas is None:
        return DEFAULT_ALPHAS
    arr = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    if arr.ndim != 1 or (arr.size == 0 and not allow_empty):
        raise ValueError(f"alphas must be a non-empty 1-D sequence of positive numbers, got {alphas!r}")
    for a in arr:
        check_alpha(float(a), "alphas")
    return arr
