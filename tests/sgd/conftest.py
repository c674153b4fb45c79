"""Shared helpers of the SGD tests; makes ``tests/reference`` importable."""
from __future__ import annotations

import pathlib
import sys

import pytest

_REF = pathlib.Path(__file__).resolve().parents[1] / "reference"
if str(_REF) not in sys.path:
    sys.path.insert(0, str(_REF))


from sgd_testdata import ArrayTuples, random_tuples  # noqa: E402,F401


@pytest.fixture
def tuples_small():
    return random_tuples(300, 12, 12, density=0.3, seed=3)
