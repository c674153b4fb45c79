"""Shared fixtures of the RankRLS tests; makes ``tests/reference`` importable."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

_HERE = pathlib.Path(__file__).resolve().parent
for _p in (_HERE, _HERE.parent / "reference"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

# Test modules import helpers with ``from rankrls_testdata import make_groups``:
# ``from conftest import ...`` resolves to whichever conftest.py pytest imported
# first when the whole suite runs, so it breaks outside this folder.
from rankrls_testdata import make_groups  # noqa: E402,F401  (kept for old imports)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
