"""Makes ``tests/reference`` importable for the metrics tests; ``STREAMRANK_TEST_TWINS=1`` runs them on the twins.

A metrics call runs a kernel's plain-Python twin while the process has not
set numba up and the twins' budget lasts (issue 22).  ``tests/conftest.py``
makes every test run the kernels (one answer whatever ran before);
``test_twins.py`` compares the twins with them.  To run every metrics test
on the twins instead (the pytrec_eval parity tests included):
``STREAMRANK_TEST_TWINS=1 pytest tests/metrics``.
"""
from __future__ import annotations

import os
import pathlib
import sys

import pytest

from streamrank._numba import twins

_REF = pathlib.Path(__file__).resolve().parents[1] / "reference"
if str(_REF) not in sys.path:
    sys.path.insert(0, str(_REF))


@pytest.fixture(autouse=True)
def _twins_when_asked():
    with twins(os.environ.get("STREAMRANK_TEST_TWINS") == "1"):
        yield
