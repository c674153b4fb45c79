"""Random ranking data for the RankRLS tests (importable as ``rankrls_testdata``)."""
from __future__ import annotations

import numpy as np


def make_groups(rng, n_groups=6, n_features=4, max_size=7, n_outputs=None, levels=None, min_size=1):
    """Random ranking data: sizes in [min_size, max_size], optional integer levels (ties)."""
    sizes = rng.integers(min_size, max_size + 1, size=n_groups)
    m = int(sizes.sum())
    X = rng.normal(size=(m, n_features))
    shape = (m,) if n_outputs is None else (m, n_outputs)
    y = rng.integers(0, levels, size=shape).astype(float) if levels else rng.normal(size=shape)
    qid = np.repeat(np.arange(n_groups) * 3 + 1, sizes)
    gp = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return X, y, qid, gp
