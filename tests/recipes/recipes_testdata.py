"""Helpers of the recipe tests (a uniquely named module: ``from conftest import`` is order-dependent)."""
from __future__ import annotations

import pytest

from streamrank.datasets._paths import data_dir

DATA = data_dir()


def need(path):
    p = DATA / path
    if not p.exists():
        pytest.skip(f"{p} is not available")
    return p
