"""Shared fixtures of the RankRLS tests; makes ``tests/reference`` importable."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

_REF = pathlib.Path(__file__).resolve().parents[1] / "reference"
if str(_REF) not in sys.path:
    sys.path.insert(0, str(_REF))


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


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
